"""``fsdpsim predict``: parse, call, render (``validate``/``calibrate`` are in cli_validate.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from fsdpsim import render
from fsdpsim.catalog import load_catalog
from fsdpsim.cli_procurement import run_options, run_table
from fsdpsim.errors import ConfigError
from fsdpsim.parallel import (
    CP_KINDS,
    FRAMEWORKS,
    PP_SCHEDULES,
    RECOMPUTES,
    SHARDING_HELP,
    SHARDINGS,
    ParallelPlan,
    TrainingConfig,
)
from fsdpsim.numbers import (COUNT, GPUS, INTER_NODE_GBPS, MAX_COUNT,  # noqa: F401
                             MAX_GPUS, POWER_CAP_W, VPP, Rule, count_rule, option_type,
                             read_number)
from fsdpsim.output import echo
from fsdpsim.units import GBIT_PER_S_BYTES_PER_S, GIB_BYTES

BOTTLENECK_WORDS = {
    "compute": "compute: matmul and attention kernels set the pace",
    "hbm_bandwidth": "HBM bandwidth: memory-bound kernels (norms, activations, loss, optimizer) dominate",
    "intra_node_link": "intra-node link: exposed collectives limited by NVLink/PCIe bandwidth",
    "inter_node_link": "inter-node network: exposed collectives limited by the NICs' bandwidth",
    "memory_capacity": "memory capacity: the configuration does not fit in GPU memory",
    "pipeline_bubble": "pipeline bubble: stages idle in warm-up and cool-down (more micro-batches "
                       "or virtual stages would help)",
    "collective_latency": "collective latency: exposed collectives that more bandwidth would not "
                          "speed up (too many ranks per collective, small messages or no "
                          "overlap; HSDP or larger micro-batches help)",
}


def _auto_int(value: str | None, what: str) -> int | None:
    """A count option (fsdpsim.numbers: the one number reader), or None for ``auto``."""
    if value is None or str(value).strip().lower() == "auto":
        return None
    return read_number(value, what, replace(count_rule(what), also="auto"))


#: Faster settings shown (the best first).
ADVICE_SHOWN = 3


def build_system(ctx: click.Context, **o: Any):
    """The :class:`~fsdpsim.hardware.System` the options name (checked against the cluster's
    size)."""
    from fsdpsim.system import check_cluster_size, resolve_system

    cat = load_catalog(ctx.obj.get("catalog_dirs", ()))
    system = resolve_system(cat, gpu=o["gpu"], cluster=o["cluster"],
                            gpus_per_node=o["gpus_per_node"], network=o["network"],
                            inter_node_gbps_per_gpu=o["inter_node_gbps_per_gpu"],
                            power_cap_w=o["power_cap_w"],
                            placement=o.get("placement") or "packed")
    check_cluster_size(cat, o["cluster"], o["num_gpus"], system.gpus_per_node)
    return system


def build_prediction(ctx: click.Context, system=None, **o: Any):
    """Resolve options into objects and call :func:`fsdpsim.predict.predict` (on ``system``
    when given, else the one :func:`build_system` resolves)."""
    from fsdpsim.predict import predict
    from fsdpsim.presets import get_model

    if system is None:
        system = build_system(ctx, **o)
    seq_len = _auto_int(o["seq_len"], "--seq-len")
    spec = get_model(o["model"])
    if spec.position == "learned" and seq_len and seq_len > spec.max_seq_len:
        spec = spec.with_seq_len(seq_len)
    plan = build_plan(o, system)
    recompute = None if o["recompute"] == "auto" else o["recompute"]
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
                              moe_fp8_dispatch=bool(o.get("moe_fp8_dispatch")))
    prediction = predict(spec, system, plan, training)
    from fsdpsim.advice import scale_advice

    return replace(prediction, advice=tuple(scale_advice(spec, system, plan, training,
                                                         prediction)[:ADVICE_SHOWN]))


def build_plan(o: dict, system) -> ParallelPlan:
    """The plan the options describe: ``--sharding`` (FSDP spelling) or ``--zero`` with
    ``--dp-shard/--dp-replicate`` (mesh spelling), plus the model-parallel degrees."""
    from fsdpsim.system import domain_gpus

    per_domain = domain_gpus(system, o["num_gpus"])
    hybrid = dict(tp=o.get("tp", 1), pp=o.get("pp", 1), cp=o.get("cp", 1), vpp=o.get("vpp", 1),
                  pp_schedule=o.get("pp_schedule"), sequence_parallel=o.get("sequence_parallel"),
                  cp_kind=o.get("cp_kind") or "ring", tp_overlap=bool(o.get("tp_overlap")),
                  pp_first_layers=o.get("pp_first_layers"),
                  pp_last_layers=o.get("pp_last_layers"),
                  framework=o.get("framework") or "fsdp2",
                  ep=o.get("ep", 1), etp=o.get("etp"), ep_overlap=bool(o.get("ep_overlap")),
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
        click.option("--sharding", type=click.Choice(SHARDINGS), default="full",
                     show_default=True, help=SHARDING_HELP),
        click.option("--shard-group-size", type=option_type(GPUS), default=None,
                     help="HSDP shard group (default: one node)."),
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
                     show_default=True),
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
        click.option("--cp", type=option_type(GPUS), default=1, show_default=True,
                     help="Context-parallel degree (sequence split)."),
        click.option("--cp-kind", type=click.Choice(CP_KINDS), default="ring", show_default=True,
                     help="ring attention or all2all (Ulysses)."),
        click.option("--framework", type=click.Choice(FRAMEWORKS, case_sensitive=False),
                     default="fsdp2", show_default=True,
                     help="Framework profile: recipe, NCCL release, collective granularity and "
                          "overlap. fsdp2 (torch), fsdp1, deepspeed-zero3, deepspeed-zero3-2021 "
                          "(a gather per parameter, no overlap), megatron (Megatron-Core), "
                          "megatron-2021 (all-reduce after backward)."),
        click.option("--mesh-order", default=None,
                     help="Mesh dimensions outermost first, comma-separated (default "
                          "pp,dp_replicate,dp_shard,cp,tp: TP innermost)."),
        click.option("--precision", type=click.Choice(("bf16", "fp16", "fp8", "fp32")),
                     default="bf16", show_default=True),
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
        click.option("--ep-overlap/--no-ep-overlap", default=False, show_default=True,
                     help="Hide the expert all-to-alls behind another micro-batch's compute "
                          "(DeepEP / DualPipe, Megatron's 1F1B all-to-all overlap)."),
        click.option("--moe-capacity-factor", type=_factor_or_none(), default=None,
                     help="Token dropping: experts padded to this factor times their mean "
                          "load; none (default) = dropless."),
        click.option("--moe-imbalance", type=option_type(MOE_IMBALANCE), default=None,
                     help="Dropless: the busiest EP rank's routed tokens over the mean "
                          "(default: the balanced-routing floor 1 + sqrt(2 ln(ep) / rows))."),
        click.option("--moe-fp8-dispatch/--no-moe-fp8-dispatch", default=False,
                     show_default=True,
                     help="Send the dispatch all-to-alls in FP8 with 1x128 block scales "
                          "(DeepSeek-V3); combines stay 16-bit."),
    ]


def _comm_range_words(interval: dict) -> str:
    """What widened the range beyond the calibration: the network's and the framework's
    uncertainty (fsdpsim.predict.comm_uncertainty), when there is any."""
    parts = [f"{name} ±{100 * interval[key]:.0f} %" for name, key in
             (("network", "network_uncertainty"), ("framework", "framework_uncertainty"))
             if interval.get(key)]
    return ("; with " + ", ".join(parts)) if parts else ""


def _utilisation_rows(d: dict) -> list[tuple[str, str]]:
    """MFU / HFU and the peak they divide by; for FP8 the FP8 peak's MFU on a row beside."""
    u = d["utilisation"]
    rows = [("MFU / HFU", f"{_pct(d['mfu'])} / {_pct(d['hfu'])}  (of the "
                          f"{u['peak_precision'].upper()} dense peak, "
                          f"{u['peak_flops_per_s_per_gpu'] / 1e12:,.0f} TFLOP/s per GPU)")]
    if u["native_precision"] != u["peak_precision"]:
        native = u["native_precision"].upper()
        rows.append((f"MFU of {native} peak", f"{_pct(d['mfu_native'])}  "
                     f"({u['native_peak_flops_per_s_per_gpu'] / 1e12:,.0f} TFLOP/s per GPU)"))
    return rows


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _plan_text(pl: dict) -> str:
    """The plan in the report: the mesh in one line for hybrid plans (with what differs from
    the defaults), the data-parallel strategy in words otherwise."""
    extras = ((", parameters kept gathered for the step" if pl["keep_gathered"] else "")
              + (", gradient sync on the last micro-batch" if pl["grad_sync"] == "last"
                 else ""))
    framework = "" if pl["framework"] == "fsdp2" else f", {pl['framework']}"
    if pl["tp"] * pl["pp"] * pl["cp"] * pl.get("ep", 1) > 1:
        words = [pl["line"], f"ZeRO-{pl['zero']}" + (" (HSDP)" if pl["sharding"] == "hybrid"
                                                     else "")]
        if pl["tp"] > 1:
            words.append("sequence parallel" if pl["sequence_parallel"] else "no SP")
        if pl["tp_overlap"]:
            words.append("TP overlapped")
        if pl["cp"] > 1:
            words.append(f"CP {pl['cp_kind']}")
        if pl.get("ep", 1) > 1:
            words.append(f"expert-dp {pl['expert_dp']}, all-to-all "
                         + ("overlapped" if pl["ep_overlap"] else "exposed"))
        return ", ".join(words) + framework + extras
    return (f"sharding {pl['sharding']} (dp_shard {pl['dp_shard']} x dp_replicate "
            f"{pl['dp_replicate']}), reshard after forward: "
            f"{'yes' if pl['reshard_after_forward'] else 'no'}" + framework + extras)


def _moe_lines(d: dict) -> list[tuple[str, str]]:
    """The expert all-to-all (how much it costs and whether it hides) and the MoE layers'
    share of the step, for models with MoE layers."""
    t, c, pl = d["time"], d["comm"], d["plan"]
    if not t.get("moe_s"):
        return []
    lines = []
    if pl.get("ep", 1) > 1:
        hidden = c["ep_s"] - c["ep_exposed_s"]
        verdict = ("hidden behind compute" if c["ep_exposed_s"] <= 0.05 * c["ep_s"]
                   else f"{100 * hidden / c['ep_s']:.0f} % hidden" if hidden > 0
                   else "not hidden: --ep-overlap runs it beside another micro-batch")
        lines.append(("expert all-to-all", f"{render.gib(c['ep_bytes'])} in "
                      f"{render.seconds(c['ep_s'])}, exposed {render.seconds(c['ep_exposed_s'])} "
                      f"({100 * c['ep_exposed_s'] / d['step_time_s']:.1f} % of the step; "
                      f"{verdict})"))
    lines.append(("MoE layers", f"{render.seconds(t['moe_s'])} ({100 * t['moe_share']:.1f} % of "
                  "the step: router, experts, their kernels and exposed all-to-alls)"))
    return lines


def predict_table(p, report: dict | None = None, run=None) -> str:
    """The table report; with ``report`` (``to_dict`` plus
    :func:`fsdpsim.procurement.prediction_run`) and ``run``, also cost, energy and time to
    train."""
    d = p.to_dict()
    t, m, c, th = d["time"], d["memory"], d["comm"], d["thresholds"]
    tr, pl = d["training"], d["plan"]
    lines = [render.wrap(f"fsdpsim predict: {d['model']} on {pl['num_gpus']} GPUs — "
                         f"{d['system']}", hanging="  ")]
    lines.append(render.key_values([
        ("plan", _plan_text(pl)),
        ("training", f"seq {tr['seq_len']:,}, micro-batch {tr['micro_batch']} x {tr['grad_accum']} "
                     f"accumulation = {tr['global_batch']:,} sequences/step, recompute "
                     f"{tr['recompute']}, {tr['precision']}, {tr['optimizer']}, reduce "
                     f"{tr['reduce_dtype']}"),
    ]))
    if d["chosen"].get("why"):
        lines.append(render.wrap(f"({d['chosen']['why']})", "  ", "   "))
    lines.append("\nthroughput")
    lines.append(render.key_values([
        ("step time", f"{render.seconds(d['step_time_s'])}  (bounds: "
                      f"{render.seconds(t['step_lower_bound_s'])} perfect overlap .. "
                      f"{render.seconds(t['step_upper_bound_s'])} no overlap)"),
        ("tokens/s", f"{d['tokens_per_s']:,.0f}"),
        ("tokens/s per GPU", f"{d['tokens_per_s_per_gpu']:,.0f}  (90 % range "
                             f"{d['interval']['tokens_per_s_per_gpu_low']:,.0f} .. "
                             f"{d['interval']['tokens_per_s_per_gpu_high']:,.0f}; "
                             + ("calibrated GPU type" if d['interval']['calibrated'] else
                                "not calibrated: wider range")
                             + _comm_range_words(d['interval'])
                             + ("; near the memory limit: lower low end)"
                                if d['interval'].get('near_memory_limit') else ")")),
        *_utilisation_rows(d),
        ("bottleneck", BOTTLENECK_WORDS[d["bottleneck"]]),
    ]))
    cap, peak = m["capacity_bytes"], m["peak_bytes"]
    status = (f"fits, {render.gib(cap - peak)} free" if d["fits"]
              else f"DOES NOT FIT, {render.gib(peak - cap)} over")
    lines.append(f"\nmemory per GPU ({render.gib(cap)} usable; {status})")
    rows = [(k.removesuffix("_bytes").replace("_", " "), render.gib(m[k]))
            for k in ("params_bytes", "grads_bytes", "optimizer_bytes", "unsharded_params_bytes",
                      "unsharded_grads_bytes", "activations_bytes", "logits_bytes",
                      "runtime_reserved_bytes", "fragmentation_bytes")]
    rows.append(("peak", f"{render.gib(peak)}  ({100 * peak / cap:.0f} % of capacity)"))
    lines.append(render.key_values(rows))
    lines.append("\ntime per step")
    lines.append(render.key_values([
        ("compute", f"{render.seconds(t['compute_s'])}  (GEMM {render.seconds(t['gemm_s'])}, "
                    f"attention {render.seconds(t['attention_s'])}, memory-bound "
                    f"{render.seconds(t['memory_bound_s'])}, of which recompute "
                    f"{render.seconds(t['recompute_s'])}; optimizer "
                    f"{render.seconds(t['optimizer_s'])})"),
        ("all-gather", f"{render.gib(c['all_gather_bytes'])} in {render.seconds(c['all_gather_s'])}"),
        ("reduce-scatter", f"{render.gib(c['reduce_scatter_bytes'])} in "
                           f"{render.seconds(c['reduce_scatter_s'])}"),
        ("all-reduce", f"{render.gib(c['all_reduce_bytes'])} in {render.seconds(c['all_reduce_s'])}"),
        *[(label, f"{render.gib(c[f'{dim}_bytes'])} in {render.seconds(c[f'{dim}_s'])}, "
                  f"exposed {render.seconds(c[f'{dim}_exposed_s'])}")
          for dim, label in (("tp", "tensor parallel"), ("cp", "context parallel"),
                             ("pp", "pipeline p2p")) if pl[dim] > 1],
        *_moe_lines(d),
        *([("pipeline bubble", f"{render.seconds(t['bubble_s'])} "
                               f"({100 * t['bubble_s'] / d['step_time_s']:.1f} % of the step)")]
          if pl["pp"] > 1 else []),
        ("exposed comm", f"{render.seconds(c['exposed_s'])} "
                         f"({100 * c['exposed_s'] / d['step_time_s']:.1f} % of the step)"),
    ]))
    lines.extend(threshold_lines(d, p.inputs["nic_share_bytes_per_s"] / GBIT_PER_S_BYTES_PER_S))
    if d.get("advice"):
        lines.append("\nfaster at this scale")
        lines.extend(render.note_lines(f"{a['setting']}: {a['tokens_per_s_per_gpu']:,.0f} "
                                       f"tokens/s per GPU ({100 * a['gain']:+.0f} %)"
                                       for a in d["advice"]))
    if report is not None:
        from fsdpsim.procurement import RunAssumptions

        lines.append(run_table(report, run or RunAssumptions()))
    if d["notes"]:
        lines.append("\nnotes")
        lines.extend(render.note_lines(d["notes"]))
    return "\n".join(lines)


def threshold_lines(d: dict, have_gbps: float) -> list[str]:
    """The thresholds and sensitivities of a prediction (fsdpsim.sensitivity): the 95 % readings
    that the bottleneck follows, the seed paper's hide-communication readings, the memory
    ceilings, and each resource's gain when 5 % faster."""
    th, sens, tr, pl = d["thresholds"], d["sensitivity"], d["training"], d["plan"]
    have_tokens = tr["micro_batch"] * tr["seq_len"] // pl["cp"]
    # The seed study's reading weighs per-micro-batch FSDP collectives against compute; DDP and
    # ZeRO-1 reduce once per step, after the last backward.
    once_per_step = ("n/a: gradients are reduced once per step (DDP / ZeRO-1), not per "
                     "micro-batch" if pl["sharding"] in ("none", "optimizer") else "")

    def gbps(v, zero, null, gives=""):
        return (zero if v == 0 else null if v is None
                else f"{v:,.1f} Gb/s (have {have_gbps:,.0f} Gb/s{gives})")

    def tokens(v, null):
        return ("any, down to one token" if v == 0 else null if v is None
                else f"{v:,.0f} (have {have_tokens:,})")

    share = f"{100 * th['throughput_share']:.0f} %"
    lines = ["\n" + render.wrap(f"thresholds for {share} of the throughput with infinite inter-node "
                         "bandwidth (a plan that fits is network-bound exactly when these "
                         "exceed what it has)"),
             render.key_values([
                 ("inter-node bandwidth per GPU", gbps(
                     th["inter_node_gbps_per_gpu_at_share"],
                     "any: no inter-node traffic that matters",
                     "beyond 2^30 x the present bandwidth",
                     f", which gives {100 * sens['inter_node_throughput_share']:.1f} %")),
                 ("tokens per GPU per micro-batch", tokens(
                     th["critical_tokens_per_gpu_at_share"],
                     "none: larger micro-batches do not reach it"))]),
             "\n" + render.wrap("hide-communication thresholds (Wang et al. 2025: a micro-batch's "
                         "data-parallel collectives take no longer than its compute)"),
             render.key_values([
                 ("inter-node bandwidth per GPU to hide comm", once_per_step or gbps(
                     th["min_inter_node_gbps_per_gpu"], "no inter-node traffic that matters",
                     "cannot hide at any bandwidth")),
                 ("critical tokens per GPU per micro-batch", once_per_step or tokens(
                     th["critical_tokens_per_gpu"], "none: larger micro-batches do not hide it"))]),
             "\nmemory ceilings",
             render.key_values([
                 ("largest micro-batch that fits", f"{th['max_micro_batch']}"
                  if th["max_micro_batch"] else "none: even micro-batch 1 does not fit with "
                  "this plan"),
                 (f"longest sequence at micro-batch {tr['micro_batch']}",
                  f"{th['max_seq_len']:,}" if th["max_seq_len"]
                  else "none: not even 1 token fits with this plan")])]
    words = {"compute": "compute (peak FLOP/s)", "hbm_bandwidth": "HBM bandwidth",
             "intra_node_link": "intra-node link", "inter_node_link": "inter-node network"}
    cost = f"{100 - 100 * th['throughput_share']:.0f} %"
    lines.append("\n" + render.wrap(f"sensitivity (tokens/s gained with each resource "
                             f"{100 * (sens['speedup'] - 1):.0f} % faster; the bottleneck is "
                             f"the largest, the network only when it costs more than {cost})"))
    lines.append(render.key_values([(words[k], f"{100 * v:+.2f} %")
                                    for k, v in sens["throughput_gain"].items()]))
    return lines


def register(cli: click.Group) -> None:
    @cli.command("predict")
    @predict_options
    @render_option
    @click.pass_context
    def predict_cmd(ctx: click.Context, fmt: str, **options: Any) -> None:
        """Predict step time, throughput, MFU, memory and bottleneck of one setup, and what a
        training run on it costs (rent, energy, days; with failures and checkpoints)."""
        from fsdpsim import procurement

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
