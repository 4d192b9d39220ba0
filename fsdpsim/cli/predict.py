"""``fsdpsim predict``: parse, call, render (``validate``/``calibrate`` are in cli_validate.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from fsdpsim.plan.parallel import CUDA_GRAPHS, MOE_DISPATCHERS, PRECISIONS

from fsdpsim.report import render
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.cli.procurement import run_options
from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.parallel import (
    CP_KINDS,
    FRAMEWORKS,
    PP_SCHEDULES,
    RECOMPUTES,
    SHARDING_HELP,
    SHARDINGS,
    ParallelPlan,
    TrainingConfig,
)
from fsdpsim.util.numbers import (COUNT, GPUS, INTER_NODE_GBPS, MAX_COUNT,  # noqa: F401
                             POWER_CAP_W, VPP, Rule, count_rule, option_type, read_number)
from fsdpsim.util.output import echo
from fsdpsim.report.predict_table import predict_table
from fsdpsim.util.units import GIB_BYTES

def _auto_int(value: str | None, what: str) -> int | None:
    """A count option (fsdpsim.util.numbers: the one number reader), or None for ``auto``."""
    if value is None or str(value).strip().lower() == "auto":
        return None
    return read_number(value, what, replace(count_rule(what), also="auto"))


def model_at(name: str, seq_len: int | None):
    """The model ``name`` (preset, ladder id or config.json), its learned position table grown
    to ``seq_len`` when that is longer (every command reads ``--model`` this way)."""
    from fsdpsim.model.presets import get_model

    spec = get_model(name)
    if spec.position == "learned" and seq_len and seq_len > spec.max_seq_len:
        spec = spec.with_seq_len(seq_len)
    return spec


def global_batch_or_default(value: str | None, seq_len: int) -> int:
    """``--global-batch``, or about 4M tokens as a power of two sequences
    (:func:`fsdpsim.drivers.sweep.grid.default_global_batch`): the fixed batch of search and compare."""
    from fsdpsim.drivers.sweep.grid import default_global_batch

    given = _auto_int(value, "--global-batch") if value else None
    return given or default_global_batch(seq_len)


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
    seq_len = _auto_int(o["seq_len"], "--seq-len")
    spec = spec if spec is not None else model_at(o["model"], seq_len)
    if o.get("plan"):
        run = plan_option(o, system)
        plan = run.plan
        o = {**o, "micro_batch": str(run.micro_batch), "global_batch": str(run.global_batch),
             "recompute": run.recompute, "recompute_layers": run.recompute_layers}
    else:
        plan = build_plan(o, system)
    recompute = None if o["recompute"] == "auto" else o["recompute"]
    given_precision = o.get("precision")
    o = {**o, "precision": precision_for(given_precision, system)}
    training = TrainingConfig(seq_len=seq_len or 4096,
                              micro_batch=_auto_int(o["micro_batch"], "--micro-batch"),
                              global_batch=_auto_int(o["global_batch"], "--global-batch"),
                              recompute=recompute, precision=o["precision"],
                              reduce_dtype=o["reduce_dtype"], optimizer=o["optimizer"],
                              flash_attention=o["flash_attention"],
                              recompute_layers=o.get("recompute_layers"),
                              dropout=bool(o.get("dropout")),
                              moe_capacity_factor=o.get("moe_capacity_factor"),
                              moe_imbalance=o.get("moe_imbalance"),
                              **kernel_knobs(o))
    prediction = predict(spec, system, plan, training)
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


def framework_option(text: str = "Framework profile every plan runs on."):
    """``--framework NAME``: a profile of :mod:`fsdpsim.plan.frameworks` (or an alias); the
    names are listed in the help text, not in the option's column, so help stays within 100
    columns."""
    return click.option("--framework", type=click.Choice(FRAMEWORKS, case_sensitive=False),
                        metavar="NAME", default="fsdp2", show_default=True,
                        help=f"{text} Accepted: {', '.join(FRAMEWORKS)}.")


def ep_overlap_of(o: dict) -> bool:
    """``--ep-overlap``, or the ``--framework`` profile's default where it is not given."""
    from fsdpsim.plan.frameworks import knob_default

    given = o.get("ep_overlap")
    return bool(knob_default(o.get("framework") or "fsdp2", "ep_overlap")
                if given is None else given)


#: The options a ``--plan`` line states, with their defaults: giving one beside ``--plan`` is
#: an error (the plan would be said twice).
PLAN_OPTIONS = {"sharding": "full", "shard_group_size": None, "reshard_after_forward": True,
                "keep_params_gathered": False, "grad_sync": "every", "recompute": "auto",
                "recompute_layers": None, "zero": None, "dp_shard": None, "dp_replicate": None,
                "tp": 1, "sequence_parallel": None, "tp_overlap": False, "pp": 1, "vpp": 1,
                "pp_schedule": None, "pp_first_layers": None, "pp_last_layers": None, "cp": 1,
                "cp_kind": "ring", "mesh_order": None, "micro_batch": "auto", "ep": 1,
                "pp_layers": None, "etp": None, "ep_overlap": None}


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
    batch = _auto_int(o.get("global_batch"), "--global-batch")
    if batch is not None and batch != run.global_batch:
        raise ConfigError(f"--global-batch {batch} differs from the plan's {run.global_batch} "
                          f"sequences (mb {run.micro_batch} x accumulation {run.grad_accum} x "
                          f"dp {run.plan.dp}); accepted: {run.global_batch} or none")
    return run


def build_plan(o: dict, system) -> ParallelPlan:
    """The plan the options describe: ``--sharding`` (FSDP spelling) or ``--zero`` with
    ``--dp-shard/--dp-replicate`` (mesh spelling), plus the model-parallel degrees."""
    from fsdpsim.hardware.system import domain_gpus

    per_domain = domain_gpus(system, o["num_gpus"])
    hybrid = dict(tp=o.get("tp", 1), pp=o.get("pp", 1), cp=o.get("cp", 1), vpp=o.get("vpp", 1),
                  pp_schedule=o.get("pp_schedule"), sequence_parallel=o.get("sequence_parallel"),
                  cp_kind=o.get("cp_kind") or "ring", tp_overlap=bool(o.get("tp_overlap")),
                  pp_first_layers=o.get("pp_first_layers"),
                  pp_last_layers=o.get("pp_last_layers"),
                  pp_layers=o.get("pp_layers"),
                  framework=o.get("framework") or "fsdp2",
                  ep=o.get("ep", 1), etp=o.get("etp"), ep_overlap=bool(ep_overlap_of(o)),
                  reshard_after_forward=o["reshard_after_forward"],
                  keep_gathered=o["keep_params_gathered"], grad_sync=o["grad_sync"])
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


def busbw_options() -> list:
    """``--busbw-allreduce-intra-gbs`` ... (:data:`fsdpsim.hardware.system.BUSBW_COLUMNS`): measured
    bus bandwidths (nccl-tests busbw, GB/s) that replace the modelled ones; ``validate`` reads
    the same names as measurement columns."""
    from fsdpsim.hardware.system import BUSBW_COLUMNS, BUSBW_GBS, busbw_option

    words = {"busbw_allreduce_intra_gbs": "all-reduce inside one node",
             "busbw_allreduce_inter_gbs": "all-reduce over groups spanning nodes",
             "busbw_allgather_inter_gbs": "all-gather over groups spanning nodes",
             "busbw_reducescatter_inter_gbs": "reduce-scatter over groups spanning nodes"}
    return [click.option(busbw_option(c), c, type=option_type(BUSBW_GBS), default=None,
                         help=f"Measured bus bandwidth (nccl-tests busbw, GB/s) of "
                              f"{words[c]}; replaces the model's.") for c in BUSBW_COLUMNS]


def predict_options(f):
    opts = [
        click.option("--model", "model", default="llama3-8b", show_default=True,
                     help="Preset id or path to a Hugging Face config.json."),
        click.option("--gpu", default=None, help="Accelerator id or alias (e.g. h100)."),
        click.option("--cluster", default=None, help="Node or cluster id instead of --gpu."),
        click.option("--num-gpus", type=option_type(GPUS), default=8,
                     show_default=True),
        click.option("--gpus-per-node", type=option_type(GPUS), default=None,
                     help="Default: the node's, else 8."),
        click.option("--network", default=None, help="Network id (NIC type) between nodes."),
        click.option("--inter-node-gbps-per-gpu", type=option_type(INTER_NODE_GBPS),
                     default=None,
                     help="Override: inter-node Gb/s per GPU, one direction."),
        click.option("--power-cap-w", type=option_type(POWER_CAP_W), default=None,
                     help="Board power limit per GPU below TDP (nvidia-smi -pl); lowers the "
                          "compute clock (uncalibrated DVFS model)."),
        *busbw_options(),
        click.option("--placement", type=click.Choice(("packed", "fragmented")),
                     default="packed", show_default=True,
                     help="Where the job's nodes sit: packed (contiguous, rail-aligned: pods "
                          "of an oversubscribed cluster are crossed only by groups larger than "
                          "a pod) or fragmented (scattered: x0.7 inter-node bandwidth, wider "
                          "range)."),
        click.option("--seq-len", default="4096", show_default=True,
                     help="Tokens per sequence; k = 1,024 here (32k = 32,768)."),
        click.option("--micro-batch", default="auto", show_default=True),
        click.option("--global-batch", default=None, help="Sequences per step; default: one "
                     "micro-batch per GPU."),
        click.option("--plan", "plan", default=None, metavar="TEXT",
                     help="The whole plan in one line, as search and compare print it (e.g. "
                          "'fsdp8 × tp8(sp) · ckpt none · mb 1'); instead of the plan options."),
        click.option("--sharding", type=click.Choice(SHARDINGS), default="full",
                     show_default=True, help=SHARDING_HELP),
        click.option("--shard-group-size", type=option_type(GPUS), default=None,
                     help="HSDP shard group (default: one node); with --sharding optimizer "
                          "--framework internevo, its zero1 group (default: every "
                          "data-parallel rank)."),
        click.option("--reshard-after-forward/--no-reshard-after-forward", default=True,
                     show_default=True),
        click.option("--keep-params-gathered/--regather-params", default=False,
                     show_default=True,
                     help="With gradient accumulation: gather each unit once per step and keep "
                          "it (costs the full unsharded parameters in memory)."),
        click.option("--grad-sync", type=click.Choice(("every", "last")), default="every",
                     show_default=True,
                     help="Reduce-scatter gradients every micro-batch, or only the last "
                          "(FSDP1 no_sync / FSDP2 set_requires_gradient_sync(False))."),
        click.option("--recompute", type=click.Choice(("auto",) + RECOMPUTES), default="auto",
                     show_default=True,
                     help="selective: the attention core (Megatron); op-selective: torchtitan's "
                          "per-op policy (every second matmul, attention kept); auto tries none, "
                          "selective, full."),
        click.option("--recompute-layers", type=option_type(Rule(0, MAX_COUNT, whole=True)),
                     default=None,
                     help="Recompute only the first K layers of each pipeline stage "
                          "(Megatron --recompute-num-layers); default: all."),
        click.option("--zero", type=option_type(Rule(0, 3, whole=True)), default=None,
                     help="ZeRO stage of the data dimension (0 DDP, 1 optimizer, 2 +gradients, "
                          "3 +parameters = FSDP); the mesh spelling of --sharding."),
        click.option("--dp-shard", type=option_type(GPUS), default=None,
                     help="Data-parallel ranks the states are sharded over (with --zero)."),
        click.option("--dp-replicate", type=option_type(GPUS), default=None,
                     help="Replicas of each shard group (ZeRO-3: HSDP)."),
        click.option("--tp", type=option_type(GPUS), default=1, show_default=True,
                     help="Tensor-parallel degree (Megatron column/row split)."),
        click.option("--sequence-parallel/--no-sequence-parallel", default=None,
                     help="Split norm/dropout activations over TP (default: on when tp > 1)."),
        click.option("--tp-overlap/--no-tp-overlap", default=False, show_default=True,
                     help="Overlap TP collectives with GEMMs (async TP)."),
        click.option("--pp", type=option_type(GPUS), default=1, show_default=True,
                     help="Pipeline-parallel degree (stages)."),
        click.option("--vpp", type=option_type(VPP), default=1,
                     show_default=True,
                     help="Virtual stages (model chunks) per pipeline rank: interleaved 1F1B."),
        click.option("--pp-schedule", type=click.Choice(PP_SCHEDULES), default=None,
                     help="Pipeline schedule (default: interleaved when --vpp > 1, else 1f1b)."),
        click.option("--pp-first-layers", type=option_type(COUNT), default=None,
                     help="Layers on the first pipeline stage (uneven split)."),
        click.option("--pp-last-layers", type=option_type(COUNT), default=None,
                     help="Layers on the last pipeline stage (uneven split)."),
        click.option("--pp-layers", default=None, metavar="N,N,...",
                     help="Layers on each pipeline stage, first to last (e.g. 31,32,32,31); "
                          "default: the framework's split (even where the layers divide)."),
        click.option("--cp", type=option_type(GPUS), default=1, show_default=True,
                     help="Context-parallel degree (sequence split)."),
        click.option("--cp-kind", type=click.Choice(CP_KINDS), default="ring", show_default=True,
                     help="ring attention or all2all (Ulysses)."),
        framework_option("Framework profile: recipe, NCCL release, collective granularity, "
                         "overlap and kernel stack. fsdp2 (torch, torchtitan), fsdp1, "
                         "deepspeed-zero3, deepspeed-zero3-2021 (a gather per parameter, no "
                         "overlap), megatron (Megatron-Core), megatron-2021 (all-reduce after "
                         "backward), internevo, nanotron."),
        click.option("--mesh-order", default=None,
                     help="Mesh dimensions outermost first, comma-separated (default "
                          "pp,dp_replicate,dp_shard,cp,tp: TP innermost)."),
        click.option("--precision", type=click.Choice(PRECISIONS), default=None,
                     help="Number format of the compute (default: the GPU's 16-bit format, bf16, "
                          "or fp16 on a GPU without bf16 such as the V100)."),
        click.option("--reduce-dtype", type=click.Choice(("fp32", "bf16", "fp16")), default=None,
                     help="Gradient reduce dtype (default fp32)."),
        click.option("--optimizer", type=click.Choice(("adamw", "sgd")), default="adamw",
                     show_default=True),
        click.option("--flash-attention/--eager-attention", default=True, show_default=True),
        click.option("--dropout/--no-dropout", default=False, show_default=True,
                     help="Attention and residual dropout (Megatron GPT 0.1): its traffic "
                          "and masks."),
        click.option("--price", default=None,
                     help="Rent per GPU-hour in USD (e.g. 2.5 or $2.5/h); default: the "
                          "catalog's (the cloud node's or the GPU's)."),
        *moe_options(),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return run_options(f)


#: Capacity factors and imbalance the options accept.
MOE_FACTOR = Rule(0.01, 1000.0, also="none")
MOE_IMBALANCE = Rule(1.0, 1000.0)


def _factor_or_none():
    """``--moe-capacity-factor``: a number (:data:`MOE_FACTOR`) or ``none`` (dropless)."""
    inner = option_type(MOE_FACTOR)

    class _Factor(click.ParamType):
        name = "number|none"

        def convert(self, value, param, ctx):
            if isinstance(value, str) and value.strip().lower() == "none":
                return None
            return inner.convert(value, param, ctx)

    return _Factor()


def moe_options():
    """The mixture-of-experts options of ``predict`` (``sweep`` has their grid-wide forms)."""
    return [
        click.option("--ep", type=option_type(GPUS), default=1, show_default=True,
                     help="Expert-parallel degree: each MoE layer's routed experts divided over "
                          "ep ranks (folded over the data-parallel x CP ranks, Megatron-Core's "
                          "expert mesh)."),
        click.option("--etp", type=option_type(GPUS), default=None,
                     help="Expert tensor-parallel degree (default: --tp)."),
        click.option("--ep-overlap/--no-ep-overlap", default=None,
                     help="Hide the expert all-to-alls behind another micro-batch's compute "
                          "(DeepEP / DualPipe, Megatron's 1F1B all-to-all overlap); default: "
                          "the --framework's (off)."),
        click.option("--moe-capacity-factor", type=_factor_or_none(), default=None,
                     help="Token dropping: experts padded to this factor times their mean "
                          "load; none (default) = dropless."),
        click.option("--moe-imbalance", type=option_type(MOE_IMBALANCE), default=None,
                     help="Dropless: the busiest EP rank's routed tokens over the mean "
                          "(default: the balanced-routing floor 1 + sqrt(2 ln(ep) / rows))."),
        *kernel_options(),
    ]


def kernel_options():
    """How attention and the expert dispatch run: options of ``predict``, ``search`` and
    ``compare`` (TrainingConfig fields, read by :func:`kernel_knobs`)."""
    return [
        click.option("--moe-fp8-dispatch/--no-moe-fp8-dispatch", default=False,
                     show_default=True,
                     help="Send the dispatch all-to-alls in FP8 with 1x128 block scales "
                          "(DeepSeek-V3); combines stay 16-bit."),
        click.option("--moe-dispatcher", type=click.Choice(MOE_DISPATCHERS), default=None,
                     help="alltoall: every routed copy to its expert's rank; deepep: once "
                          "per destination node, then NVLink (DeepEP, HybridEP); default: "
                          "the --framework's (alltoall)."),
        click.option("--fp8-attention/--no-fp8-attention", default=None,
                     help="Attention in FP8 too (Transformer Engine fp8_dot_product_"
                          "attention); needs a low-precision --precision; default: off."),
        click.option("--recompute-modules", default=None, metavar="LIST",
                     help="Megatron's per-module recompute, comma-separated: mla_up_proj, "
                          "mlp (dense layers), moe_act; beside --recompute none|selective; "
                          "default: none."),
        click.option("--fp8-lm-head/--no-fp8-lm-head", default=None,
                     help="The LM head's GEMMs in the low-precision format too (Megatron-Core "
                          "fp8_output_proj); default: 16-bit, as Megatron and torchtitan run "
                          "it."),
        click.option("--cuda-graphs", type=click.Choice(CUDA_GRAPHS), default=None,
                     help="What the step replays from CUDA graphs: none (every op costs host "
                          "time), partial (each layer's own kernels; routed experts stay "
                          "eager), full (the whole iteration; no host time); default: the "
                          "--framework's (none)."),
        click.option("--fused-loss/--no-fused-loss", default=None,
                     help="Fused cross-entropy writing the gradient over the logits; default: "
                          "the --framework's (megatron: on, Megatron-Bridge "
                          "cross_entropy_loss_fusion; others off)."),
        click.option("--bf16-layers", type=option_type(Rule(0, 2**14, whole=True)),
                     default=None, metavar="N",
                     help="Transformer layers kept in BF16 under a low-precision --precision "
                          "(Megatron first_last_layers_bf16); default: --framework megatron "
                          "none, else the format's recipe, 15 % of the layers for nvfp4 "
                          "(arXiv 2509.25149), none for FP8."),
    ]


def kernel_knobs(o: dict) -> dict:
    """The TrainingConfig fields of :func:`kernel_options` from parsed options; a knob not
    given takes the ``--framework`` profile's default (:func:`fsdpsim.plan.frameworks.knob_default`),
    as ``validate`` does for an empty cell."""
    from fsdpsim.plan.frameworks import knob_default

    framework = o.get("framework") or "fsdp2"

    def given(knob: str):
        value = o.get(knob)
        return (knob_default(framework, knob, o.get("precision") or "bf16") if value is None
                else value)

    bf16 = given("bf16_layers")
    return {"moe_fp8_dispatch": bool(o.get("moe_fp8_dispatch")),
            "moe_dispatcher": given("moe_dispatcher"),
            "fp8_attention": bool(given("fp8_attention")),
            "fp8_lm_head": bool(given("fp8_lm_head")),
            "cuda_graphs": given("cuda_graphs"),
            "fused_loss": bool(given("fused_loss")),
            "bf16_layers": None if bf16 is None else int(bf16),
            "recompute_modules": given("recompute_modules") or ()}


def register(cli: click.Group) -> None:
    @cli.command("predict")
    @predict_options
    @render_option
    @click.pass_context
    def predict_cmd(ctx: click.Context, fmt: str, **options: Any) -> None:
        """Predict step time, throughput, MFU, memory and bottleneck of one setup, and what a
        training run on it costs (rent, energy, days; with failures and checkpoints)."""
        from fsdpsim.drivers import procurement

        if options["gpu"] is None and options["cluster"] is None:
            options["gpu"] = "h100"
        run = procurement.read_run_options(options)
        price = (None if options["price"] is None
                 else procurement.read_price(options["price"], "--price"))
        system = build_system(ctx, **options)
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
