"""Every knob a user states, declared once: its name, kind, default, units, accepted values,
help, the commands that take it (one value, or a list as ``sweep`` takes), its field in the
JSON/CSV report and its column in a measurement file.

This module is data only (no click): :mod:`fsdpsim.cli.knobs` turns a declaration into each
command's option, :func:`fsdpsim.measured.rows.row_options` reads a measurement row's cells
through :attr:`Knob.column`, and ``tests/test_knobs.py`` checks that every knob is an option of
the commands it names and that no command declares one by hand. Where a knob is not given, its
default is resolved where it always was (the ``--framework`` profile's for :data:`FRAMEWORK`
knobs: :func:`knob_default`; the grid's for ``sweep``).

Two families reach every place from their declaration alone (``tests/test_knobs.py`` declares
a fake one of each in a fresh interpreter): the kernel knobs (:data:`KERNEL_KNOBS`) and the plan
switches (:data:`PLAN_SWITCHES`: ParallelPlan fields of one mesh dimension, predict's and
sweep's options, predict's JSON and sweep's CSV, the plan line's words, a measurement column,
search's ``--fix`` and table). What a switch costs is the engine's; what a framework does with
it (checks, search values, configuration files) is :mod:`fsdpsim.plan.frameworks`' and the
search's.
"""

from __future__ import annotations

from typing import Any, Mapping

from fsdpsim.hardware.system import BUSBW_COLUMNS, BUSBW_GBS
from fsdpsim.plan.knob import (  # noqa: F401 (what a knob is, read from here too)
    COMMANDS, FIX, FRAMEWORK, GRID, KINDS, LIST, ONE, Knob)
from fsdpsim.plan import parallel
from fsdpsim.plan.frameworks import KNOB_DEFAULTS, canonical
from fsdpsim.plan.parallel import (CP_KINDS, FRAMEWORKS, PP_SCHEDULES, SHARDING_HELP,
                                   SHARDINGS)
from fsdpsim.plan.training import (CUDA_GRAPHS, LOW_PRECISION, MOE_DISPATCHERS, PRECISIONS,
                                   RECOMPUTES)
from fsdpsim.util.numbers import (COUNT, COUNT_TEXT, GPUS, INTER_NODE_GBPS, LAYERS, MAX_LAYERS,
                                  POWER_CAP_W, SEQ_LEN, VPP, Rule)

_LIST = "comma-separated, repeatable"
_PREDICT_ONLY = {"predict": ONE}
_RUN = {"predict": ONE, "search": ONE, "compare": ONE}
#: Settings of the searched plans (``search --fix KEY=VALUE`` holds one, :data:`FIX`): of
#: predict alone, with a list in sweep, with one value for sweep's whole grid.
_PREDICT_FIX = {"predict": ONE, "search": FIX}
_PLAN_LIST = {"predict": ONE, "sweep": LIST, "search": FIX}
_PLAN_GRID = {"predict": ONE, "sweep": GRID, "search": FIX}
#: Capacity factors and imbalance the options accept.
MOE_FACTOR = Rule(0.01, 1000.0, also="none")
MOE_IMBALANCE = Rule(1.0, 1000.0)


def _busbw(column: str, words: str) -> Knob:
    return Knob(column, "number", f"Measured bus bandwidth (nccl-tests busbw, GB/s) of {words}; "
                "replaces the model's.", _PREDICT_ONLY, rule=BUSBW_GBS, units="GB/s",
                column=column)


def _kernel(name: str, kind: str, help: str, grid_help: str = "", column: str | None = "",
            **kw) -> Knob:
    """A TrainingConfig knob of predict, search and compare (and sweep with ``grid_help``); its
    measurement column is its name unless ``column`` says otherwise (None: no column)."""
    commands = {**_RUN, **({"sweep": GRID} if grid_help else {})}
    return Knob(name, kind, help, commands, grid_help=grid_help, field=f"training.{name}",
                column=name if column == "" else column, **kw)


#: The mesh dimensions whose brackets in the plan line take a switch's words
#: (:mod:`fsdpsim.plan.spelling`: ``tp4(sp,overlap)``; the pipeline's hold its schedule).
SWITCH_DIMS = ("cp", "tp", "ep")


def _switch(name: str, kind: str, help: str, grid_help: str, dim: str,
            spelled: Mapping[Any, str], label: str, **kw) -> Knob:
    """A ParallelPlan switch of ``dim`` (:data:`PLAN_SWITCHES`), a flag or a choice: an option
    of predict and a grid-wide one of sweep, the field ``plan.NAME`` and the measurement column
    ``NAME``; ``label`` names it in a report's few words."""
    if kind not in ("flag", "choice") or dim not in SWITCH_DIMS:
        raise ValueError(f"plan switch {name}: kind {kind!r}, dim {dim!r}; accepted: a flag or "
                         f"a choice of {', '.join(SWITCH_DIMS)}")
    return Knob(name, kind, help, _PLAN_GRID, grid_help=grid_help,
                field=f"plan.{name}", column=name, dim=dim, spelled=spelled, label=label, **kw)


_HARDWARE = [
    Knob("gpus_per_node", "number", "Default: the node's, else 8.",
         {**_RUN, "sweep": LIST}, rule=GPUS, grid_help="Override GPUs per node.",
         field="plan.gpus_per_node", column="gpus_per_node"),
    Knob("network", "text", "Network id (NIC type) between nodes.", {**_RUN, "sweep": LIST},
         grid_help=f"Network ids between nodes ({_LIST}).", column="network"),
    Knob("inter_node_gbps_per_gpu", "number", "Override: inter-node Gb/s per GPU, one "
         "direction.", {**_RUN, "sweep": LIST}, rule=INTER_NODE_GBPS, units="Gb/s",
         grid_help="Inter-node Gb/s per GPU, one direction, e.g. 50,100,200,400.",
         column="inter_node_gbps_per_gpu"),
    Knob("power_cap_w", "number", "Board power limit per GPU below TDP (nvidia-smi -pl); lowers "
         "the compute clock (uncalibrated DVFS model).", {**_RUN, "sweep": LIST},
         rule=POWER_CAP_W, units="W",
         grid_help="Board power limits per GPU, e.g. 500,600,700 (uncalibrated DVFS model).",
         column="power_cap_w"),
    *(_busbw(c, w) for c, w in zip(BUSBW_COLUMNS, (
        "all-reduce inside one node", "all-reduce over groups spanning nodes",
        "all-gather over groups spanning nodes", "reduce-scatter over groups spanning nodes"))),
    Knob("placement", "choice", "Where the job's nodes sit: packed (contiguous, rail-aligned: "
         "pods of an oversubscribed cluster are crossed only by groups larger than a pod) or "
         "fragmented (scattered: x0.7 inter-node bandwidth, wider range).",
         {**_RUN, "sweep": LIST}, default="packed", choices=("packed", "fragmented"),
         grid_help="packed and/or fragmented (as predict; default packed)."),
]

_BATCH = [
    Knob("seq_len", "text", "Tokens per sequence; k = 1,024 here (32k = 32,768).",
         {**_RUN, "sweep": LIST}, default="4096", units="tokens", rule=SEQ_LEN,
         grid_help="Sequence lengths (ranges as --num-gpus); k = 1,024 here (8k = 8,192); "
                   "default 4096.", field="training.seq_len", column="seq_len"),
    Knob("micro_batch", "text", "", _PLAN_LIST, default="auto", rule=COUNT_TEXT,
         grid_help="Micro-batch sizes, or auto (free: fastest that fits); default auto.",
         field="training.micro_batch", column="micro_batch"),
    Knob("global_batch", "text", "Sequences per step; default: about 4M tokens, a power of two "
         "sequences (notes).",
         {**_RUN, "sweep": LIST}, units="sequences",
         help_for={"search": "Sequences per step (default: about 4M tokens, a power of two).",
                   "compare": "Sequences per step, the same for every row (default: about 4M "
                              "tokens, a power of two)."},
         grid_help="Sequences per step, or none (one micro-batch per GPU); default: about "
                   "4M tokens, every command's (notes).",
         field="training.global_batch"),
]

_DATA_PARALLEL = [
    Knob("sharding", "choice", SHARDING_HELP, _PLAN_LIST, default="full",
         choices=SHARDINGS, grid_help=f"Strategies or auto (free); default full. "
                                      f"{SHARDING_HELP}.", field="plan.sharding",
         column="sharding"),
    Knob("shard_group_size", "number", "HSDP shard group (default: one node); with --sharding "
         "optimizer --framework internevo, its zero1 group (default: every data-parallel rank).",
         {"predict": ONE, "sweep": GRID}, rule=GPUS,
         grid_help="GPUs per HSDP shard group, for --sharding hybrid (default: one scale-up "
                   "domain's worth), as predict's.", column="shard_group_size"),
    Knob("reshard_after_forward", "flag", "", _PREDICT_ONLY, default=True,
         field="plan.reshard_after_forward"),
    Knob("keep_params_gathered", "flag", "With gradient accumulation: gather each unit once "
         "per step and keep it (costs the full unsharded parameters in memory).",
         _PLAN_GRID, default=False, off="regather-params",
         grid_help="With accumulation, gather each unit once per step and keep it, for the "
                   "sharded-parameter strategies (default: re-gather).",
         field="plan.keep_gathered"),
    Knob("grad_sync", "choice", "Reduce-scatter gradients every micro-batch, or only the last "
         "(FSDP1 no_sync / FSDP2 set_requires_gradient_sync(False)).",
         _PLAN_LIST, default="every", choices=("every", "last"),
         grid_help="With accumulation, reduce gradients every micro-batch or only the last, "
                   "for the sharded strategies: every, last or both (every,last: rows for "
                   "each); default every.", field="plan.grad_sync"),
    Knob("recompute", "choice", "selective: the attention core (Megatron); op-selective: "
         "torchtitan's per-op policy (every second matmul, attention kept); auto tries none, "
         "selective, full.", _PLAN_LIST, default="auto",
         choices=("auto",) + RECOMPUTES,
         grid_help="none, selective, full, op-selective (torchtitan's per-op policy), or auto "
                   "(free: none, selective, full); default auto.",
         field="training.recompute", column="recompute"),
    Knob("recompute_layers", "number", "Recompute only the first K layers of each pipeline "
         "stage (Megatron --recompute-num-layers); default: all.",
         _PLAN_GRID, rule=Rule(0, MAX_LAYERS, whole=True),
         grid_help="Recompute only the first K layers of each stage.",
         field="training.recompute_layers", column="recompute_layers"),
    Knob("zero", "number", "ZeRO stage of the data dimension (0 DDP, 1 optimizer, 2 "
         "+gradients, 3 +parameters = FSDP); the mesh spelling of --sharding.",
         _PLAN_LIST, rule=Rule(0, 3, whole=True), field="plan.zero",
         grid_help="ZeRO stages (0-3), the mesh spelling of --sharding (0 none, 1 optimizer, "
                   "2 grad_op, 3 full); not beside --sharding."),
    Knob("dp_shard", "number", "Data-parallel ranks the states are sharded over (with --zero).",
         _PREDICT_FIX, rule=GPUS, field="plan.dp_shard"),
    Knob("dp_replicate", "number", "Replicas of each shard group (ZeRO-3: HSDP).",
         _PREDICT_FIX, rule=GPUS, field="plan.dp_replicate"),
]

_MODEL_PARALLEL = [
    Knob("tp", "number", "Tensor-parallel degree (Megatron column/row split).",
         _PLAN_LIST, default=1, rule=GPUS,
         grid_help=f"Tensor-parallel degrees ({_LIST}); crossed with --pp and --cp.",
         field="plan.tp", column="tp"),
    _switch("sequence_parallel", "flag", "Split norm/dropout activations over TP (default: on "
            "when tp > 1).", "Sequence parallelism with tp > 1 (default on).", "tp",
            {True: "sp"}, "sp"),
    _switch("tp_overlap", "flag", "Overlap TP collectives with GEMMs (async TP).",
            "Overlap TP collectives with GEMMs (tp > 1).", "tp", {True: "overlap"},
            "tp overlap", default=False),
    Knob("pp", "number", "Pipeline-parallel degree (stages).", _PLAN_LIST,
         default=1, rule=GPUS, grid_help=f"Pipeline-parallel degrees ({_LIST}).",
         field="plan.pp", column="pp"),
    Knob("vpp", "number", "Virtual stages (model chunks) per pipeline rank: interleaved 1F1B.",
         _PLAN_GRID, default=1, rule=VPP,
         grid_help="Virtual stages per pipeline rank (pp > 1).", field="plan.vpp", column="vpp"),
    Knob("pp_schedule", "choice", "Pipeline schedule (default: interleaved when --vpp > 1, "
         "else 1f1b).", _PLAN_GRID, choices=PP_SCHEDULES,
         grid_help="gpipe, 1f1b, interleaved or zb-h1 (pp > 1; default 1f1b, interleaved with "
                   "--vpp > 1).", field="plan.pp_schedule", column="pp_schedule"),
    Knob("pp_first_layers", "number", "Layers on the first pipeline stage (uneven split).",
         _PREDICT_FIX, rule=LAYERS, field="plan.pp_first_layers", column="pp_first_layers"),
    Knob("pp_last_layers", "number", "Layers on the last pipeline stage (uneven split).",
         _PREDICT_FIX, rule=LAYERS, field="plan.pp_last_layers", column="pp_last_layers"),
    Knob("pp_layers", "text", "Layers on each pipeline stage, first to last (e.g. "
         "31,32,32,31); default: the framework's split (even where the layers divide).",
         _PREDICT_ONLY, metavar="N,N,...", field="plan.pp_layers", column="pp_layers"),
    Knob("cp", "number", "Context-parallel degree (sequence split).",
         _PLAN_LIST, default=1, rule=GPUS,
         grid_help=f"Context-parallel degrees ({_LIST}).", field="plan.cp", column="cp"),
    _switch("cp_kind", "choice", "ring attention or all2all (Ulysses).",
            "ring (default) or all2all.", "cp", {"all2all": "a2a"}, "cp", default="ring",
            choices=CP_KINDS),
    Knob("framework", "choice", "Framework profile: recipe, NCCL release, collective "
         "granularity, overlap and kernel stack. fsdp2 (torch, torchtitan), fsdp1, "
         "deepspeed-zero3, deepspeed-zero3-2021 (a gather per parameter, no overlap), megatron "
         "(Megatron-Core), megatron-2021 (all-reduce after backward), internevo, nanotron. "
         f"Accepted: {', '.join(FRAMEWORKS)}.", {**_RUN, "sweep": GRID}, default="fsdp2",
         choices=FRAMEWORKS, grid_help="Framework profile of every point (as predict's; "
                                       "default fsdp2); the knobs not given take its defaults.",
         help_for={c: "Framework profile every plan runs on. Accepted: "
                      f"{', '.join(FRAMEWORKS)}." for c in ("search", "compare")},
         metavar="NAME", case_sensitive=False, field="plan.framework", column="recipe"),
    Knob("mesh_order", "text", "Mesh dimensions outermost first, comma-separated (default "
         "pp,dp_replicate,dp_shard,cp,tp: TP innermost).", _PREDICT_ONLY,
         field="plan.mesh_order"),
]

_TRAINING = [
    Knob("precision", "choice", "Number format of the compute (default: the GPU's 16-bit "
         "format, bf16, or fp16 on a GPU without bf16 such as the V100).",
         {**_RUN, "sweep": LIST}, choices=PRECISIONS,
         help_for={"compare": "Number format of the compute (default: each GPU's 16-bit "
                              "format, bf16, or fp16 on a GPU without bf16 such as the V100)."},
         grid_help="bf16, fp16, fp8, fp32; default: each GPU's 16-bit format (bf16, or fp16 "
                   "on a GPU without bf16 such as the V100).",
         field="training.precision", column="precision"),
    Knob("reduce_dtype", "choice", "Gradient reduce dtype (default fp32).", _PREDICT_ONLY,
         choices=("fp32", "bf16", "fp16"), field="training.reduce_dtype", column="reduce_dtype"),
    Knob("optimizer", "choice", "", {**_RUN, "sweep": GRID}, default="adamw",
         choices=("adamw", "sgd"), grid_help="adamw or sgd, for every point; default adamw.",
         field="training.optimizer"),
    Knob("flash_attention", "flag", "", _PREDICT_ONLY, default=True, off="eager-attention",
         field="training.flash_attention", column="flash_attention"),
    Knob("dropout", "flag", "Attention and residual dropout (Megatron GPT 0.1): its traffic and "
         "masks.", _PREDICT_ONLY, default=False, field="training.dropout", column="dropout"),
    Knob("price", "text", "Rent per GPU-hour in USD: a number for every GPU (2.5 or $2.5/h) "
         "or GPU=USD/h items (h100=2.5/h,b200=5); default: the catalog's (the cloud node's or "
         "the GPU's).", {**_RUN, "sweep": LIST}, units="USD per GPU-hour",
         grid_help="Rent per GPU-hour: a number for every GPU, or GPU=USD/h (e.g. h100=2.5/h); "
                   "default: catalog (the cloud node's or the GPU's).",
         field="price_usd_per_gpu_hour"),
]

_MOE = [
    Knob("ep", "number", "Expert-parallel degree: each MoE layer's routed experts divided over "
         "ep ranks (folded over the data-parallel x CP ranks, Megatron-Core's expert mesh).",
         _PLAN_GRID, default=1, rule=GPUS,
         grid_help="Expert-parallel degree of the MoE models (one value; dense models need 1).",
         field="plan.ep", column="ep"),
    Knob("etp", "number", "Expert tensor-parallel degree (default: --tp).",
         _PLAN_GRID, rule=GPUS,
         grid_help="Expert tensor-parallel degree (default tp).", field="plan.etp",
         column="etp"),
    _switch("ep_overlap", "flag", "Hide the expert all-to-alls behind another micro-batch's "
            "compute (DeepEP / DualPipe, Megatron's 1F1B all-to-all overlap); default: the "
            "--framework's (off).", "Hide the expert all-to-alls behind another micro-batch "
            "(ep > 1).", "ep", {True: "overlap"}, "ep overlap", default=FRAMEWORK),
    Knob("moe_capacity_factor", "number", "Token dropping: experts padded to this factor times "
         "their mean load; none (default) = dropless.", {"predict": ONE, "sweep": GRID},
         default=FRAMEWORK, rule=MOE_FACTOR,
         grid_help="Token dropping with this capacity factor; none = dropless.",
         field="training.moe_capacity_factor", column="moe_capacity_factor"),
    Knob("moe_imbalance", "number", "Dropless: the busiest EP rank's routed tokens over the "
         "mean (default: the balanced-routing floor 1 + sqrt(2 ln(ep) / rows)).",
         {"predict": ONE, "sweep": GRID}, rule=MOE_IMBALANCE,
         grid_help="Dropless busiest-rank load over the mean (default: the balanced-routing "
                   "floor).", field="training.moe_imbalance", column="moe_imbalance"),
]

_KERNEL = [
    _kernel("moe_fp8_dispatch", "flag", "Send the dispatch all-to-alls in FP8 with 1x128 block "
            "scales (DeepSeek-V3); combines stay 16-bit.",
            "Dispatch all-to-alls in FP8 with 1x128 scales.", default=False, column=None,
            words="dispatch in FP8"),
    _kernel("moe_dispatcher", "choice", "alltoall: every routed copy to its expert's rank; "
            "deepep: once per destination node, then NVLink (DeepEP, HybridEP); default: the "
            "--framework's (alltoall).", "alltoall (default) or deepep: once per destination "
            "node.", default=FRAMEWORK, choices=MOE_DISPATCHERS,
            words="expert dispatch once per destination node"),
    _kernel("fp8_attention", "flag", "Attention in FP8 too (Transformer Engine fp8_dot_product_"
            "attention); needs a low-precision --precision; default: off.",
            "Attention in FP8 for the low-precision --precision entries.", default=FRAMEWORK,
            words="attention in FP8"),
    _kernel("recompute_modules", "text", "Megatron's per-module recompute, comma-separated: "
            "mla_up_proj, mlp (dense layers), moe_act; beside --recompute none|selective; "
            "default: none.", "Megatron's per-module recompute for the whole grid: mla_up_proj, "
            "mlp, moe_act (comma-separated).", default=FRAMEWORK, metavar="LIST",
            words="recompute of {}"),
    _kernel("fp8_lm_head", "flag", "The LM head's GEMMs in the low-precision format too "
            "(Megatron-Core fp8_output_proj); default: 16-bit, as Megatron and torchtitan run "
            "it.", "The LM head in the format for the low-precision --precision entries "
            "(default: 16-bit).", default=FRAMEWORK,
            words="LM head in the low-precision format"),
    _kernel("cuda_graphs", "choice", "What the step replays from CUDA graphs: none (every op "
            "costs host time), partial (each layer's own kernels; routed experts stay eager), "
            "full (the whole iteration; no host time); default: the --framework's (none).",
            "none (default), partial (each layer's own kernels) or full (the whole iteration): "
            "what every point replays from CUDA graphs.", default=FRAMEWORK,
            choices=CUDA_GRAPHS, words="{} CUDA graphs"),
    _kernel("fused_loss", "flag", "Fused cross-entropy writing the gradient over the logits; "
            "default: the --framework's (megatron: on, Megatron-Bridge "
            "cross_entropy_loss_fusion; others off).", default=FRAMEWORK),
    _kernel("bf16_layers", "number", "Transformer layers kept in BF16 under a low-precision "
            "--precision (Megatron first_last_layers_bf16); default: --framework megatron none, "
            "else the format's recipe, 15 % of the layers for nvfp4 (arXiv 2509.25149), none "
            "for FP8.", default=FRAMEWORK, rule=Rule(0, MAX_LAYERS, whole=True),
            metavar="N"),
]

#: The kernel and recipe knobs: TrainingConfig fields of predict, search and compare, in
#: declaration order (``sweep`` takes those with a grid-wide form).
KERNEL_KNOBS = tuple(k.name for k in _KERNEL)

#: The kernel knobs ``sweep`` takes (one value for the whole grid).
SWEEP_KERNEL_KNOBS = tuple(k.name for k in _KERNEL if "sweep" in k.commands)

#: Every knob, by name.
KNOBS: dict[str, Knob] = {k.name: k for k in (*_HARDWARE, *_BATCH, *_DATA_PARALLEL,
                                              *_MODEL_PARALLEL, *_TRAINING, *_MOE, *_KERNEL)}

#: The ParallelPlan switches (each declared by ``_switch``), in declaration order (module
#: docstring: the places they reach).
PLAN_SWITCHES = tuple(k.name for k in (*_DATA_PARALLEL, *_MODEL_PARALLEL, *_MOE) if k.dim)


def knob_default(framework: str, knob: str, precision: str = "bf16") -> Any:
    """What ``framework`` does where ``knob`` (a knob whose default is :data:`FRAMEWORK`) is
    not given: the profile's own default (:data:`fsdpsim.plan.frameworks.KNOB_DEFAULTS`), else
    the knob's :attr:`~Knob.plain_value`; ``bf16_layers`` only under a low-precision
    ``precision`` (else None)."""
    if knob == "bf16_layers" and precision not in LOW_PRECISION:
        return None
    own = KNOB_DEFAULTS.get(canonical(framework), {})
    return own[knob] if knob in own else KNOBS[knob].plain_value


def option_default(name: str) -> Any:
    """The value a one-value option of knob ``name`` parses to when not given (None for a
    :data:`FRAMEWORK` default, resolved later as predict resolves it)."""
    default = KNOBS[name].default
    return None if default == FRAMEWORK else default


def kernel_default(name: str, framework: str | None, precision: str | None) -> Any:
    """What ``predict`` takes for kernel knob ``name`` (:data:`KERNEL_KNOBS`) when its option
    is not given, under ``--framework framework`` and ``--precision precision``: its declared
    default, the framework profile's where that is :data:`FRAMEWORK`
    (:func:`knob_default`), as a TrainingConfig value."""
    knob = KNOBS[name]
    default = (knob_default(framework or "fsdp2", name, precision or "bf16")
               if knob.default == FRAMEWORK else knob.default)
    return knob.value(default)


def kernel_fields(training: Any) -> dict[str, Any]:
    """The kernel knobs of a TrainingConfig as report fields (``training.NAME`` in predict's
    JSON, compare's query), in declaration order; a list as a JSON list."""
    fields = {name: getattr(training, name) for name in KERNEL_KNOBS}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}


def kernel_words(fields: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What a report says of the kernel knobs set in ``fields`` (:func:`kernel_fields`, or
    predict's JSON ``training``): for each with :attr:`Knob.words` whose value is not plain, in
    declaration order, its words and the option that sets it."""
    out = []
    for name in KERNEL_KNOBS:
        knob, value = KNOBS[name], fields[name]
        if not knob.words or knob.plain(value):
            continue
        shown = ", ".join(value) if isinstance(value, (list, tuple)) else value
        option = knob.option if knob.kind in ("flag", "text") else f"{knob.option} {value}"
        out.append((knob.words.format(shown), option))
    return out


def switch_value(name: str, given: Any, framework: str | None) -> Any:
    """The ParallelPlan value of plan switch ``name`` (:data:`PLAN_SWITCHES`) from its option
    value ``given``: as its kind reads it (:meth:`Knob.value`); not given (None), its declared
    default, the ``--framework`` profile's where that is :data:`FRAMEWORK`
    (:func:`knob_default`), or None where it declares none (the plan decides:
    ``sequence_parallel`` on when tp > 1)."""
    knob = KNOBS[name]
    if given is None:
        given = (knob_default(framework or "fsdp2", name) if knob.default == FRAMEWORK
                 else knob.default)
        if given is None:
            return None
    return knob.value(given)


def switch_fields(plan: Any) -> dict[str, Any]:
    """The switches of ``plan`` (a ParallelPlan, or predict's JSON ``plan``) as a report's
    fields (search's table, the sweep options of a plot), in declaration order: a flag as it
    is (None where a mapping lacks it), a choice None where its dimension's degree is 1 (it
    chooses nothing there: the CP kind without CP)."""
    get = plan.get if isinstance(plan, Mapping) else lambda name: getattr(plan, name)
    return {k.name: None if k.kind == "choice" and int(get(k.dim)) == 1 else get(k.name)
            for k in (KNOBS[name] for name in PLAN_SWITCHES)}


def sweep_switches() -> tuple[str, ...]:
    """The plan switches ``sweep`` takes, one value for the whole grid (:data:`PLAN_SWITCHES`
    whose declaration names ``sweep``)."""
    return tuple(k for k in PLAN_SWITCHES if "sweep" in KNOBS[k].commands)


def dim_switches(dim: str) -> tuple[Knob, ...]:
    """The plan switches of mesh dimension ``dim`` (:attr:`Knob.dim`), in declaration
    order."""
    return tuple(KNOBS[name] for name in PLAN_SWITCHES if KNOBS[name].dim == dim)


def of_command(command: str) -> tuple[Knob, ...]:
    """The knobs ``command`` has an option of (:meth:`Knob.is_option_of`)."""
    return tuple(k for k in KNOBS.values() if k.is_option_of(command))


#: Counts a command takes that are not knobs, with what they accept (every other count option
#: takes its knob's declared rule, :func:`count_rule`).
_COUNT_OPTIONS = {"num_gpus": GPUS}


def _option_name(option: str) -> str:
    """An option's name as a knob is named (``--recompute-layers``: ``recompute_layers``)."""
    return option.lstrip("-").replace("-", "_")


def option_knob(option: str) -> Knob | None:
    """The knob an option spells (``--recompute-layers``, ``recompute_layers``), or None."""
    return KNOBS.get(_option_name(option))


def count_rule(option: str) -> Rule:
    """What a count option accepts (``--tp``, ``tp``, ``--recompute-layers``): the declared
    rule of the knob it spells (a GPU count for the degrees, tokens with k = 1,024 for the
    sequence, 0 up for a layer count), a GPU count for ``--num-gpus``, else any count with
    decimal suffixes (1k = 1,000)."""
    name = _option_name(option)
    knob = KNOBS.get(name)
    if knob is not None and knob.rule is not None and knob.rule.whole:
        return knob.rule
    return _COUNT_OPTIONS.get(name, COUNT_TEXT)


def plan_field(knob: Knob) -> bool:
    """Whether ``knob`` is a field of :class:`~fsdpsim.plan.parallel.ParallelPlan` (its
    :attr:`Knob.key`), looked up on the class the module holds now."""
    return knob.key in parallel.ParallelPlan.__dataclass_fields__


def plan_knobs() -> tuple[Knob, ...]:
    """The knobs of a plan, in declaration order: the settings ``search --fix`` holds and the
    plan's fields a command states one by one (not the scale-up domain, which the hardware
    gives, nor the framework, which every plan of a search shares); what a ``--plan`` line
    states (:mod:`fsdpsim.plan.spelling`)."""
    return tuple(k for k in KNOBS.values() if k.commands.get("search") == FIX or (
        plan_field(k) and k.name not in ("gpus_per_node", "framework")))


def fixable() -> dict[str, Knob]:
    """The settings ``search --fix`` holds (:data:`FIX`), by :attr:`Knob.key`, in declaration
    order."""
    return {k.key: k for k in KNOBS.values() if k.commands.get("search") == FIX}


__all__ = ["Knob", "KNOBS", "KERNEL_KNOBS", "SWEEP_KERNEL_KNOBS", "PLAN_SWITCHES", "ONE",
           "LIST", "GRID", "FIX", "FRAMEWORK", "of_command", "fixable", "count_rule", "option_knob",
           "plan_field", "plan_knobs", "option_default", "kernel_default", "kernel_fields",
           "kernel_words", "knob_default", "switch_value", "switch_fields", "dim_switches"]
