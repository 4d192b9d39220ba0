"""What the engine's functions hand each other: one slotted class per kind of result, each
field declared once here with its unit (a field is read as an attribute, ``lt.block_fwd_s``;
a misspelt one is an AttributeError naming it). Values are numpy floats (one configuration)
or arrays of rows; ``[-]`` marks counts and ratios.

The inner results (a layer's widths and times, the root's times, each parallelism's
collectives, the FSDP flags and phases, MoE routing) are followed by the results of the stages
of :mod:`fsdpsim.engine.stages`, in their order.

Each class is a :class:`Result`: its annotations are its slots and the arguments that make
it (parents' fields first), read-only once made, as a ``dataclass(slots=True, frozen=True)``
would be, at a sixth of the import time (19 classes: 1 ms against 6 ms, 2026-12-03, Python
3.11), which every ``fsdpsim`` command pays, and without a frozen dataclass's
``object.__setattr__`` per field (:class:`_ResultType`). A changed copy is :func:`replace`.
"""

from __future__ import annotations

from fsdpsim.engine.inputs import Prepared, Value


class _ResultType(type):
    """Makes a :class:`Result` class: ``__slots__`` from the class's own annotations, the
    field names in ``_fields`` (inherited ones first) and an ``__init__`` taking them.

    Read-only without ``object.__setattr__`` per field (what a frozen dataclass pays: 3.6 %
    more instructions for predict): ``__init__`` makes the new instance one of a hidden
    subclass of the same slots that may be written (``_Open``), assigns each field, then makes
    it its own class again, whose ``__setattr__`` raises (two class assignments, ~0.1 µs)."""

    def __new__(mcls, name: str, bases: tuple, namespace: dict, writable: bool = False):
        if writable:  # the hidden subclass: the same slots, object's own setattr
            return super().__new__(mcls, name, bases, namespace)
        own = tuple(namespace.get("__annotations__", ()))
        names = tuple(f for base in bases for f in getattr(base, "_fields", ())) + own
        namespace["__slots__"] = own
        namespace["_fields"] = names
        namespace["__match_args__"] = names
        cls = super().__new__(mcls, name, bases, namespace)
        writable_cls = _ResultType(f"{name}._Open", (cls,), {
            "__slots__": (), "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__}, writable=True)
        source = (f"def __init__(self, {', '.join(names)}):\n"
                  "    set_class(self, '__class__', writable)\n"
                  + "".join(f"    self.{f} = {f}\n" for f in names)
                  + "    self.__class__ = cls\n")
        made: dict = {}
        exec(source, {"set_class": object.__setattr__, "writable": writable_cls, "cls": cls},
             made)  # noqa: S102 - the names are identifiers from annotations
        made["__init__"].__qualname__ = f"{name}.__init__"
        cls.__init__ = made["__init__"]
        return cls


class Result(metaclass=_ResultType):
    """A result of the engine's functions: slotted fields, set once when it is made; any
    assignment afterwards is an AttributeError naming the field (:func:`replace` makes a
    changed copy)."""

    def __repr__(self) -> str:
        values = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({values})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a result is read-only: cannot set {name!r} of "
                             f"{type(self).__name__} (fsdpsim.engine.results.replace makes a "
                             "changed copy)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a result is read-only: cannot delete {name!r} of "
                             f"{type(self).__name__}")


def fields(kind: type[Result]) -> tuple[str, ...]:
    """The field names of a kind of result, inherited ones first."""
    return kind._fields


def replace(result: Result, **changes: object) -> Result:
    """A copy of ``result`` with ``changes`` (its fields: another is a TypeError naming it)."""
    kind = type(result)
    return kind(**{**{f: getattr(result, f) for f in kind._fields}, **changes})


class Rates(Result):
    """Achievable rates of one GPU (:func:`fsdpsim.engine.layers.rates`)."""

    clocked_peak: Value  # dense peak at the sustained (power-capped) clock [FLOP/s]
    matmul: Value        # the GEMMs' achievable rate [FLOP/s]
    hbm: Value           # achievable HBM bandwidth [B/s]
    link: Value          # achievable scale-up link bandwidth, one direction [B/s]
    nic: Value           # achievable scale-out share per GPU, one direction [B/s]


class Widths(Result):
    """One rank's share of a layer (:func:`fsdpsim.engine.layers.widths`) [-]."""

    tokens: Value         # the rank's tokens of a micro-batch, b·s/cp
    q: Value              # query width / tp
    kv: Value             # key/value width / tp (at least one head)
    ffn: Value            # MLP width / tp
    heads: Value          # query heads / tp
    vocab: Value          # vocabulary / tp
    d_elementwise: Value  # h-sized element-wise width (h / tp with sequence parallelism)


class Switches(Result):
    """A layer's kernel choices (:func:`fsdpsim.engine.layers.switches`), booleans but
    ``eager``."""

    flash: Value    # FlashAttention
    swiglu: Value   # gated MLP
    rotary: Value   # rotary embeddings
    dropout: Value  # dropout on
    eager: Value    # 1 where the host launches every kernel, 0 under CUDA graphs [-]


class LayerKind(Result):
    """The inputs a kind of layer reads as its own in :func:`fsdpsim.engine.layers.layer_times`
    (the uniform layer: the model's; a MoE layer: its shared expert's MLP, its dense part,
    :func:`fsdpsim.engine.moe.layer_kinds`)."""

    active_experts: Value  # MLPs a token visits [-]
    block_numel: Value     # the layer's parameters, whole (FP8 casts of its GEMM operands) [-]
    rc_mlp: Value          # 0/1 Megatron's "mlp" module recompute applies


class LayerTimes(Result):
    """One layer, one micro-batch, one rank (:func:`fsdpsim.engine.layers.layer_times`)."""

    gemm_fwd_s: Value      # GEMMs, forward [s]
    gemm_bwd_s: Value      # GEMMs, backward [s]
    attn_fwd_s: Value      # attention core, forward [s]
    attn_bwd_s: Value      # attention core, backward [s]
    ew_fwd_s: Value        # element-wise kernels, forward [s]
    ew_bwd_s: Value        # element-wise kernels, backward [s]
    block_fwd_s: Value     # the layer's forward, launch bound included [s]
    block_bwd_s: Value     # the layer's backward [s]
    recompute_s: Value     # what backward reruns of the forward [s]
    attn_flops_fwd: Value  # attention core's forward FLOPs [FLOP]


#: The fields of :class:`LayerTimes` (what a stage averages over its kinds of layer).
LAYER_FIELDS = fields(LayerTimes)


class MoeLayerTimes(LayerTimes):
    """A MoE layer's times (:func:`fsdpsim.engine.moe.layer_kinds`) and its MoE MLP alone."""

    moe_mlp_fwd_s: Value  # router, shared and routed experts, their kernels, forward [s]
    moe_mlp_bwd_s: Value  # ... backward [s]


class RootTimes(Result):
    """The root's compute, one micro-batch, one rank (:func:`fsdpsim.engine.layers.root_times`)."""

    head_gemm_s: Value      # LM head GEMM, forward [s]
    head_gemm_bwd_s: Value  # LM head GEMMs, backward [s]
    loss_s: Value           # cross-entropy, both passes [s]
    embed_s: Value          # embedding lookup, forward [s]
    embed_fwd_s: Value      # first stage's forward [s]
    embed_bwd_s: Value      # first stage's backward [s]
    head_fwd_s: Value       # last stage's forward: head and loss [s]
    head_bwd_s: Value       # last stage's backward [s]
    root_fwd_s: Value       # both ends on one stage (pp = 1), forward [s]
    root_bwd_s: Value       # ... backward [s]


class TensorParallelComm(Result):
    """Tensor-parallel collectives (:func:`fsdpsim.engine.collectives.tensor_parallel`)."""

    tp_layer_fwd_s: Value          # one layer's forward collectives [s]
    tp_layer_bwd_s: Value          # ... backward [s]
    tp_layer_fwd_exposed_s: Value  # what of the forward's shows [s]
    tp_layer_bwd_exposed_s: Value  # ... of the backward's [s]
    tp_root_s: Value               # the root's, both passes [s]
    tp_layer_bytes: Value          # one layer's, both passes [B]
    tp_root_bytes: Value           # the root's [B]
    tp_layer_fwd_bytes: Value      # one layer's forward [B]


class ContextParallelComm(Result):
    """Context-parallel communication (:func:`fsdpsim.engine.collectives.context_parallel`)."""

    cp_layer_fwd_s: Value          # one layer's forward [s]
    cp_layer_bwd_s: Value          # ... backward [s]
    cp_layer_fwd_exposed_s: Value  # what of the forward's shows [s]
    cp_layer_bwd_exposed_s: Value  # ... of the backward's [s]
    cp_layer_bytes: Value          # one layer's, both passes [B]
    cp_layer_fwd_bytes: Value      # one layer's forward [B]


class DataParallelComm(Result):
    """Data-parallel collectives of a stage (:func:`fsdpsim.engine.collectives.data_parallel`)
    per block unit and for the root unit [s]; None: not asked for (``keys``), not costed."""

    ag_block_s: Value        # FSDP all-gather of a block unit
    ag_root_s: Value         # ... of the root unit
    rs_block_s: Value        # FSDP reduce-scatter of a block's gradients
    rs_root_s: Value         # ... of the root's
    hsdp_ar_block_s: Value   # HSDP all-reduce of a block's shard across replicas
    hsdp_ar_root_s: Value    # ... of the root's
    ddp_ar_block_s: Value    # DDP all-reduce of a block's gradients
    ddp_ar_root_s: Value     # ... of the root's
    zero1_rs_block_s: Value  # ZeRO-1 gradient reduce-scatter of a block
    zero1_rs_root_s: Value   # ... of the root
    zero1_ag_all_s: Value    # ZeRO-1 parameter gather of the stage after the step


#: The fields of :class:`DataParallelComm`.
DATA_PARALLEL_FIELDS = fields(DataParallelComm)


class ExpertComm(Result):
    """Expert-parallel communication of one MoE layer, one micro-batch
    (:func:`fsdpsim.engine.expert_comm.expert_parallel`)."""

    fwd_s: Value          # all-to-alls (and ETP gathers), forward [s]
    bwd_s: Value          # ... backward [s]
    fwd_exposed_s: Value  # what of the forward's shows [s]
    bwd_exposed_s: Value  # ... of the backward's [s]
    fwd_bytes: Value      # forward [B]
    bytes: Value          # both passes [B]


class FsdpFlags(Result):
    """Which collectives the data-parallel strategy issues (:func:`fsdpsim.engine.step.
    fsdp_flags`): booleans, call counts and micro-batch counts [-]."""

    keep: Value       # parameters kept gathered between micro-batches
    ag_calls: Value   # all-gathers per unit and micro-batch
    rs_calls: Value   # reduce-scatters per unit and micro-batch
    is_hybrid: Value  # HSDP
    is_ddp: Value     # DDP
    is_zero1: Value   # ZeRO-1
    fsdp_like: Value  # gathers parameters per unit
    sync_last: Value  # gradients reduced on the last micro-batch only
    ag_steps: Value   # micro-batches that all-gather
    rs_steps: Value   # micro-batches that reduce


class ForwardPhases(Result):
    """A stage's forward, one micro-batch, FSDP gathers overlapped
    (:func:`fsdpsim.engine.step.forward_phases`)."""

    fwd_s: Value       # gathering [s]
    fwd_kept_s: Value  # parameters kept gathered [s]


class StagePhases(ForwardPhases):
    """A stage's forward and backward, one micro-batch (:func:`fsdpsim.engine.step.
    stage_phases`)."""

    bwd_mb_s: Value    # a backward that is not the last [s]
    bwd_last_s: Value  # the last, with the once-per-step collectives [s]


class Routing(Result):
    """How a MoE layer's tokens are routed on one rank, per micro-batch
    (:func:`fsdpsim.engine.moe_parts.routing`) [-]."""

    tokens: Value           # tokens the rank routes, b·s/(cp·tp)
    rows: Value             # routed rows on the busiest rank
    rows_per_expert: Value  # ... per local expert
    local: Value            # local experts
    load_factor: Value      # λ, the busiest rank's load over the mean
    ffn_local: Value        # a local expert's width
    mean_rows: Value        # routed rows on a mean rank


# -- the stages (fsdpsim.engine.stages) -------------------------------------------------------
class LayerCosts(Result):
    """Stage 2 (:func:`fsdpsim.engine.stages.layer_costs`)."""

    piped: bool              # some row has pp > 1
    r: Rates                 # achievable rates
    w: Widths                # one rank's widths
    lt: LayerTimes           # a stage's mean layer
    rt: RootTimes            # the root
    layered: bool            # some row has layers of two kinds, MLA or MTP
    has_moe: bool            # some row has MoE layers
    ep: ExpertComm           # a MoE layer's all-to-alls (zeros without)
    phi: Value               # a middle stage's share of MoE layers [-]
    lt_d: LayerTimes | None  # the dense kind (layered models only)
    lt_m: LayerTimes | None  # the MoE kind (MoeLayerTimes with MoE layers)
    tpc: TensorParallelComm  # a layer's tensor-parallel collectives
    cpc: ContextParallelComm  # its context-parallel communication


class NcclGroups(Result):
    """NCCL's (algorithm, protocol) candidates of each group of the plan, one
    :class:`fsdpsim.engine.collectives.GroupCandidates` each (``co.shard.ring``,
    ``co.dp_world.ar``: :func:`fsdpsim.engine.collectives.group_coefficients`)."""

    shard: object      # the FSDP shard group
    replicate: object  # the HSDP replica group
    dp_world: object   # the whole data-parallel group


#: The data-parallel groups of :class:`NcclGroups` (an expert layer has its own).
DATA_PARALLEL_GROUPS = ("shard", "replicate", "dp_world")


class Communication(Result):
    """Stage 3 (:func:`fsdpsim.engine.stages.communication`)."""

    tpc: TensorParallelComm
    cpc: ContextParallelComm
    p2p_s: Value                   # one pipeline stage-boundary transfer [s]
    p2p_bytes: Value               # ... its bytes [B]
    L_stage: Value                 # layers of a middle stage (all without pipelining) [-]
    dpc: DataParallelComm          # the stage's mean unit
    dpc_e: DataParallelComm | None  # a MoE layer's experts (MoE rows only)
    g_e: Prepared | None           # the inputs with the expert groups (MoE rows only)
    f: FsdpFlags
    rc_share: Value                # share of a stage's layers that recompute [-]
    replay: Value                  # share that replays the forward (full recompute) [-]
    tp_replay: Value               # share of the TP collectives replayed [-]
    block_fwd_s: Value             # a layer's forward with its exposed TP/CP/EP traffic [s]
    block_bwd_s: Value             # ... backward, recompute included [s]
    root_tp_s: Value               # the root's TP collectives [s]


class StepTimes(Result):
    """Stage 4 (:func:`fsdpsim.engine.stages.step_times`)."""

    optimizer_s: Value   # the optimizer step [s]
    post_total_s: Value  # ZeRO-1's parameter gather after the step [s]
    step_s: Value        # the step [s]
    bubble_s: Value      # the pipeline bubble [s]
    pipeline_ok: Value   # the schedule runs the micro-batch count (booleans)
    extra_moe: tuple | None  # MoE layers of the (first, last) stage beyond a middle one's [-]
    unpaired_s: Value    # overlapped all-to-alls the warm-up and cool-down leave exposed [s]


class Totals(Result):
    """Times per GPU per step, the busiest stage (:func:`fsdpsim.engine.stages.totals`) [s]."""

    root_share: Value        # 1 where one stage holds the root, else 0 [-]
    compute_s: Value
    grads_ar: Value          # ZeRO-1 gradients all-reduced (booleans)
    all_gather_s: Value
    reduce_scatter_s: Value
    all_reduce_s: Value
    tp_s: Value
    tp_exposed_s: Value
    cp_s: Value
    cp_exposed_s: Value
    pp_s: Value
    comm_s: Value
    moe_layers_stage: Value  # MoE layers of a middle stage [-]
    ep_s: Value
    ep_exposed_s: Value
    ep_bytes: Value          # [B]
    moe_s: Value
    exposed_s: Value
    lower_s: Value           # every stream fully overlapped
    upper_s: Value           # nothing overlapped


class TensorBytes(Result):
    """Data-parallel tensor bytes per GPU per step (:func:`fsdpsim.engine.stages.
    tensor_bytes`) [B]."""

    all_gather_bytes: Value
    reduce_scatter_bytes: Value
    all_reduce_bytes: Value
