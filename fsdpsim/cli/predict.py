"""``fsdpsim predict``: parse, call, render (``validate``/``calibrate`` are in cli_validate.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from fsdpsim.report import render
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.cli.knobs import knob_options
from fsdpsim.hardware.system import BUSBW_COLUMNS
from fsdpsim.plan.knobs import (KERNEL_KNOBS, KNOBS, kernel_default, of_command, option_default,
                                plan_field, plan_knobs, switch_value)
from fsdpsim.cli.procurement import run_options
from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.plan.training import check_recompute_layers_beside
from fsdpsim.util.numbers import GPUS, option_type
from fsdpsim.util.output import echo
from fsdpsim.report.predict_table import predict_table
from fsdpsim.util.units import GIB_BYTES
from fsdpsim.cli.defaults import (PLAN_OPTIONS, auto_int, default_batch,  # noqa: F401
                                  framework_plan_defaults,
                                  global_batch_or_default)

def model_at(name: str, seq_len: int | None):
    """The model ``name`` (preset, ladder id or config.json), its learned position table grown
    to ``seq_len`` when that is longer (every command reads ``--model`` this way)."""
    from fsdpsim.model.presets import get_model

    spec = get_model(name)
    if spec.position == "learned" and seq_len and seq_len > spec.max_seq_len:
        spec = spec.with_seq_len(seq_len)
    return spec


#: Faster settings shown (the best first).
ADVICE_SHOWN = 3


def build_system(ctx: click.Context, **o: Any):
    """The :class:`~fsdpsim.hardware.spec.System` the options name (checked against the cluster's
    size)."""
    from fsdpsim.hardware.system import BUSBW_COLUMNS, check_cluster_size, resolve_system

    cat = load_catalog(ctx.obj.get("catalog_dirs", ()))
    system = resolve_system(cat, gpu=o["gpu"], cluster=o["cluster"],
                            gpus_per_node=o["gpus_per_node"], network=o["network"],
                            inter_node_gbps_per_gpu=o["inter_node_gbps_per_gpu"],
                            power_cap_w=o["power_cap_w"],
                            placement=o.get("placement") or "packed",
                            busbw_gbs={c: o.get(c) for c in BUSBW_COLUMNS
                                       if o.get(c) is not None} or None)
    check_cluster_size(cat, o["cluster"], o["num_gpus"], system.gpus_per_node)
    return system


def build_prediction(ctx: click.Context, system=None, spec=None, advice: bool = True,
                     **o: Any):
    """Resolve options into objects and call :func:`fsdpsim.drivers.predict.predict` (on ``system``
    when given, else the one :func:`build_system` resolves; on ``spec`` when given, else the
    ``--model``); ``advice``: add the faster settings of the same job."""
    from fsdpsim.drivers.predict import predict

    if system is None:
        system = build_system(ctx, **o)
    seq_len = auto_int(o["seq_len"], "--seq-len")
    spec = spec if spec is not None else model_at(o["model"], seq_len)
    if o.get("plan") is not None:
        from fsdpsim.drivers.predict import check_recompute_layers

        run = plan_option(o, system)
        plan = run.plan
        check_recompute_layers(spec, plan, run.recompute_layers, run.recompute_of)
        o = {**o, "micro_batch": str(run.micro_batch), "global_batch": str(run.global_batch),
             "recompute": run.recompute, "recompute_layers": run.recompute_layers}
    else:
        plan = build_plan(o, system)
    recompute = None if o["recompute"] == "auto" else o["recompute"]
    check_recompute_layers_beside(o.get("recompute_layers"),
                                  None if recompute is None else (recompute,))
    given_precision = o.get("precision")
    o = {**o, "precision": precision_for(given_precision, system)}
    micro_batch = auto_int(o["micro_batch"], "--micro-batch")
    global_batch, batch_note = default_batch(o.get("global_batch"), seq_len or 4096,
                                             plan.dp * (micro_batch or 1))
    training = TrainingConfig(seq_len=seq_len or 4096,
                              micro_batch=micro_batch, global_batch=global_batch,
                              recompute=recompute, precision=o["precision"],
                              reduce_dtype=o["reduce_dtype"], optimizer=o["optimizer"],
                              flash_attention=o["flash_attention"],
                              recompute_layers=o.get("recompute_layers"),
                              dropout=bool(o.get("dropout")),
                              moe_capacity_factor=o.get("moe_capacity_factor"),
                              moe_imbalance=o.get("moe_imbalance"),
                              **kernel_knobs(o))
    prediction = predict(spec, system, plan, training)
    plan_note = None if o.get("plan") is not None else framework_plan_defaults(o)[1]
    layers_note = (f"--recompute-layers {training.recompute_layers}: the layers of each stage "
                   "that recompute in auto recompute's selective and full candidates; the "
                   "fastest, recompute none, recomputes none"
                   if recompute is None and training.recompute_layers is not None
                   and prediction.training["recompute"] == "none" else None)
    extra = tuple(n for n in (plan_note, batch_note, layers_note) if n)
    if extra:
        prediction = replace(prediction, notes=prediction.notes + extra)
    if given_precision is None and o["precision"] != "bf16":
        prediction = replace(prediction, notes=(
            f"precision not given: {o['precision']}, the default for "
            f"{system.accelerator.id} (it has no bf16)", *prediction.notes))
    if not advice:
        return prediction
    from fsdpsim.drivers.advice import scale_advice

    prediction = replace(prediction, advice=tuple(scale_advice(spec, system, plan, training,
                                                               prediction)[:ADVICE_SHOWN]))
    if not prediction.fits:
        prediction = replace(prediction, fit_advice=fit_advice(ctx, o, spec, system, plan,
                                                               training, prediction))
    return prediction


def fit_advice(ctx: click.Context, o: dict, spec, system, plan, training, prediction
               ) -> tuple[dict, ...]:
    """What the hybrid search finds for a plan that does not fit
    (:func:`fsdpsim.drivers.advice.hybrid_fit`, at the prediction's global batch), each with
    the predict command that reproduces it."""
    from fsdpsim.drivers.advice import hybrid_fit
    from fsdpsim.drivers.search.explain import plan_line
    from fsdpsim.report.command import predict_command

    out = []
    for n, choice, within in hybrid_fit(spec, system, plan, training,
                                        int(prediction.training["global_batch"])):
        line = plan_line(choice)
        out.append({"num_gpus": n, "plan": line, "within_default_budget": within,
                    "peak_bytes": choice.peak_bytes,
                    "tokens_per_s_per_gpu": choice.tokens_per_s / n,
                    "predict_command": predict_command(
                        {**o, "num_gpus": n, "seq_len": training.seq_len}, line,
                        ctx.obj.get("catalog_dirs", ()))})
    return tuple(out)


def precision_for(given: str | None, system) -> str:
    """``--precision``, or (not given) the GPU's own default: bf16, or fp16 on a GPU without
    bf16 such as the V100 (:attr:`fsdpsim.hardware.spec.Accelerator.default_precision`; sweep
    applies the same default per system)."""
    return given if given is not None else system.accelerator.default_precision


#: The options a ``--plan`` line states, with their defaults (:mod:`fsdpsim.plan.knobs`): giving
#: one beside ``--plan`` is an error (the plan would be said twice).
def plan_option(o: dict, system):
    """The :class:`~fsdpsim.plan.spelling.RunPlan` of ``--plan`` (the one spelling of
    :mod:`fsdpsim.plan.spelling`); a plan option given beside it, or a ``--global-batch`` other
    than the plan's, is a one-line error naming both."""
    from fsdpsim.hardware.system import domain_gpus
    from fsdpsim.plan.spelling import parse_plan

    given = [name for name, default in PLAN_OPTIONS.items()
             if name in o and o[name] != default]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ConfigError(f"--plan states the whole plan; {flags} given beside it is not "
                          "accepted: give the plan once, in --plan or in the separate options")
    run = parse_plan(o["plan"], num_gpus=o["num_gpus"],
                     gpus_per_node=domain_gpus(system, o["num_gpus"]),
                     framework=o.get("framework") or "fsdp2")
    batch = auto_int(o.get("global_batch"), "--global-batch")
    if batch is not None and batch != run.global_batch:
        raise ConfigError(f"--global-batch {batch} differs from the plan's {run.global_batch} "
                          f"sequences (mb {run.micro_batch} x accumulation {run.grad_accum} x "
                          f"dp {run.plan.dp}); accepted: {run.global_batch} or none")
    return run


#: Plan fields :func:`build_plan` reads in their own way: the data-parallel plan (``--sharding``
#: with its group, or ``--zero`` with its degrees) and the mesh order (a list).
_SPELT_BELOW = ("sharding", "shard_group_size", "mesh_order")
#: Plan options that only a pipeline (--pp > 1) reads, with the values that ask for none.
PIPELINE_ONLY = {"vpp": (1,), "pp_schedule": (None, "1f1b")}


def build_plan(o: dict, system) -> ParallelPlan:
    """The plan the options describe: ``--sharding`` (FSDP spelling) or ``--zero`` with
    ``--dp-shard/--dp-replicate`` (mesh spelling), plus the model-parallel degrees; what the
    options leave open, the ``--framework``'s default (:func:`framework_plan_defaults`)."""
    from fsdpsim.hardware.system import domain_gpus

    o, _ = framework_plan_defaults(o)
    stray = [f"--{name.replace('_', '-')} {o[name]}" for name, off in PIPELINE_ONLY.items()
             if o.get(name, off[0]) not in off]
    if stray and (o.get("pp") or 1) == 1:
        raise ConfigError(f"{' and '.join(stray)}: needs a pipeline, --pp > 1 (it is 1); "
                          "accepted: --pp 2 or more beside it")

    per_domain = domain_gpus(system, o["num_gpus"])
    framework = o.get("framework") or "fsdp2"
    # every plan field a knob states, by its key (the data-parallel spelling and the mesh
    # order below); a plan switch as switch_value reads it
    hybrid = {k.key: switch_value(k.name, o.get(k.name), framework) if k.dim else
              o.get(k.name, option_default(k.name)) for k in plan_knobs()
              if plan_field(k) and k.key not in _SPELT_BELOW}
    hybrid["framework"] = framework
    if o.get("mesh_order"):
        hybrid["mesh_order"] = tuple(x.strip() for x in o["mesh_order"].split(","))
    zero, shard, repl = o.get("zero"), o.get("dp_shard"), o.get("dp_replicate")
    if zero is not None or shard is not None or repl is not None:
        if o["sharding"] != "full" or o["shard_group_size"] is not None:
            raise ConfigError("give the data-parallel plan once: --sharding/--shard-group-size "
                              "or --zero/--dp-shard/--dp-replicate, not both")
        return ParallelPlan.from_degrees(num_gpus=o["num_gpus"], gpus_per_node=per_domain,
                                         zero=3 if zero is None else zero, dp_shard=shard,
                                         dp_replicate=repl, **hybrid)
    return ParallelPlan(num_gpus=o["num_gpus"], gpus_per_node=per_domain,
                        sharding=o["sharding"], shard_group_size=o["shard_group_size"],
                        **hybrid)


#: predict's knobs before ``--plan``: the hardware (with the measured bus bandwidths,
#: :data:`fsdpsim.hardware.system.BUSBW_COLUMNS`, that ``validate`` reads as measurement
#: columns too) and the batch; every other knob of predict follows it.
_FIRST = ("gpus_per_node", "network", "inter_node_gbps_per_gpu", "power_cap_w", *BUSBW_COLUMNS,
          "placement", "seq_len", "micro_batch", "global_batch")


def predict_options(f):
    k = lambda *names: knob_options("predict", *names)  # noqa: E731
    opts = [
        click.option("--model", "model", default="llama3-8b", show_default=True,
                     help="Preset id or path to a Hugging Face config.json."),
        click.option("--gpu", default=None, help="Accelerator id or alias (e.g. h100)."),
        click.option("--cluster", default=None, help="Node or cluster id instead of --gpu."),
        click.option("--num-gpus", type=option_type(GPUS), default=8,
                     show_default=True),
        *k(*_FIRST),
        click.option("--plan", "plan", default=None, metavar="TEXT",
                     help="The whole plan in one line, as search and compare print it (e.g. "
                          "'fsdp8 × tp8(sp) · ckpt none · mb 1'); instead of the plan options."),
        # every other knob of predict, in declaration order (plan, training, experts, kernels)
        *k(*(knob.name for knob in of_command("predict") if knob.name not in _FIRST)),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return run_options(f)


def kernel_options(command: str):
    """How attention and the expert dispatch run: options of ``predict``, ``search`` and
    ``compare`` (TrainingConfig fields, read by :func:`kernel_knobs`)."""
    return knob_options(command, *KERNEL_KNOBS)


def kernel_knobs(o: dict) -> dict:
    """The TrainingConfig fields of :func:`kernel_options` from parsed options; a knob not
    given takes what predict takes without it (:func:`fsdpsim.plan.knobs.kernel_default`: the
    ``--framework`` profile's default where it has one), as ``validate`` does for an empty
    cell."""
    framework, precision = o.get("framework"), o.get("precision")
    return {name: (kernel_default(name, framework, precision) if o.get(name) is None
                   else KNOBS[name].value(o[name])) for name in KERNEL_KNOBS}


def register(cli: click.Group) -> None:
    @cli.command("predict")
    @predict_options
    @render_option
    @click.pass_context
    def predict_cmd(ctx: click.Context, fmt: str, **options: Any) -> None:
        """Predict step time, throughput, MFU, memory and bottleneck of one setup, and what a
        training run on it costs (rent, energy, days; with failures and checkpoints)."""
        from fsdpsim.drivers import procurement
        from fsdpsim.drivers.sweep.values import one_price

        if options["gpu"] is None and options["cluster"] is None:
            options["gpu"] = "h100"
        run = procurement.read_run_options(options)
        system = build_system(ctx, **options)
        price = one_price(options["price"], load_catalog(ctx.obj.get("catalog_dirs", ())),
                          system.accelerator.id)
        p = build_prediction(ctx, system=system, **options)
        report = {**p.to_dict(), **procurement.prediction_run(p, system, run, price)}
        if fmt == "json":
            echo(render.to_json(report))
        elif fmt == "csv":
            echo(render.csv_text([report]), nl=False)
        else:
            echo(predict_table(p, report, run))


def render_option(f):
    return click.option("--format", "fmt", type=click.Choice(render.FORMATS), default="table",
                        show_default=True, help="Output format.")(f)


__all__ = ["register", "build_system", "build_prediction", "predict_table", "GIB_BYTES"]
