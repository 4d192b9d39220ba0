"""The engine's input bundle: every key :func:`fsdpsim.engine.evaluate` reads, typed.

One builder makes it, :func:`fsdpsim.engine.build.config_inputs` (from a ModelSpec, a System, a
ParallelPlan and a TrainingConfig; sweep and the measurement readers call its four parts),
plus the per-candidate knobs ``micro_batch``, ``recompute`` and ``grad_accum``. Every value is a
number or a numpy array; arrays broadcast, so one bundle holds one configuration or a million.
Units are in the names (SI: bytes, seconds, FLOP); categorical values are integer codes.
``tests/test_engine.py`` checks that the builder produces exactly these keys;
:func:`fsdpsim.engine.evaluate` refuses any other name (:func:`unknown_names_error`).

The same declarations are the fields the engine reads: :func:`fsdpsim.engine.prepare.prepare`
turns the mapping into a :class:`Prepared`, one read-only attribute per key declared here
(:data:`FIELDS`: :class:`EngineInputs` and :class:`DerivedInputs`), so a field is declared once,
with its unit, and a misspelt read or any write is an AttributeError naming it.
"""

from __future__ import annotations

import difflib
from typing import Collection, Iterable, Mapping, TypedDict, Union

import numpy as np

Number = Union[float, int, np.ndarray]
#: A value the engine computes: a numpy float (one configuration) or an array of rows.
Value = Union[np.float64, np.ndarray]


class ModelInputs(TypedDict):
    """:func:`fsdpsim.engine.build.model_inputs`: one tensor-parallel rank's share of the model."""

    n_layers: Number            # transformer layers [-]
    d_model: Number             # hidden width h [-]
    n_heads: Number             # query heads [-]
    q_dim: Number               # query width, heads x head size [-]
    kv_dim: Number              # key/value width [-]
    ffn_size: Number            # MLP width (one expert's for MoE) [-]
    swiglu: Number              # 0/1 gated MLP
    rotary: Number              # 0/1 rotary positions
    linear_bias: Number         # 0/1 biases on linear layers
    rmsnorm: Number             # 0/1 RMSNorm (else LayerNorm)
    vocab_size: Number          # vocabulary, padded_vocab's (128 x tp when tp > 1) [-]
    n_params: Number            # whole model [-]
    matmul_params: Number       # weights used in matmuls (PaLM N_mm) [-]
    active_experts: Number      # experts a token visits [-]
    block_numel: Number         # one block's parameters, whole [-]
    block_numel_padded: Number  # one block's TP-local parameters after FSDP padding [-]
    root_numel_padded: Number   # embedding, final norm, head: TP-local, padded [-]
    n_params_padded: Number     # L x block + root, padded [-]
    n_params_rank: Number       # parameters one TP rank holds, unpadded [-]
    block_numel_rank: Number    # one block on one TP rank, unpadded [-]
    embed_numel_rank: Number    # first pipeline stage's root part [-]
    head_numel_rank: Number     # last pipeline stage's root part (a tied embedding's copy) [-]
    embed_numel_padded: Number
    head_numel_padded: Number
    # layered models (fsdpsim.engine.build_moe: 0 / 1 for a uniform model)
    moe_layers: Number            # MoE layers [-]
    n_experts: Number             # routed experts per MoE layer [-]
    moe_top_k: Number             # experts a token is routed to [-]
    moe_router_groups: Number     # expert groups of group-limited routing (1: none) [-]
    moe_router_group_top_k: Number  # groups a token may route to [-]
    expert_ffn: Number            # one routed expert's width [-]
    shared_ffn: Number            # the shared expert's width (0: none) [-]
    expert_layer_numel: Number    # all routed experts of one MoE layer, whole [-]
    moe_block_numel: Number       # a MoE layer without its routed experts, whole [-]
    moe_block_numel_rank: Number  # ... on one TP rank [-]
    moe_block_numel_padded: Number  # ... after FSDP padding [-]
    moe_layer_matmul_params: Number   # weights a token multiplies in a MoE layer [-]
    dense_layer_matmul_params: Number  # ... in a dense layer [-]
    mla: Number                   # 0/1 multi-head latent attention
    mla_q_rank: Number            # query compression rank (0: full query projection) [-]
    mla_kv_rank: Number           # key/value latent width [-]
    mla_rope: Number              # decoupled rotary head width [-]
    mla_qk_head: Number           # query/key head width [-]
    mla_v_head: Number            # value head width [-]
    qk_norm: Number               # 0/1 per-head q/k RMSNorm
    mtp_layers: Number            # multi-token-prediction modules [-]
    mtp_moe: Number               # 0/1 their block is a MoE layer
    mtp_numel_rank: Number        # their dense parameters on one TP rank [-]
    mtp_numel_padded: Number
    root_numel_rank: Number       # embedding, final norm, head on one TP rank [-]
    sliding_layers: Number        # sliding-window layers [-]
    sliding_window: Number        # [tokens]
    chunked_layers: Number        # chunked-attention layers [-]
    chunk_size: Number            # [tokens]


class SystemInputs(TypedDict):
    """:func:`fsdpsim.engine.build.system_inputs`: catalog peaks and achievable fractions."""

    peak_flops_per_s: Number         # dense peak of the compute precision [FLOP/s]
    mfu_peak_flops_per_s: Number     # the peak MFU/HFU divide by (16-bit for FP8) [FLOP/s]
    compute_clock_ratio: Number      # power-capped clock / rated [-]
    attention_peak_ratio: Number     # attention's peak / the GEMMs' (FP8 training) [-]
    fp8_attention_peak_ratio: Number  # the same with attention in FP8 [-]
    lm_head_peak_ratio: Number       # the LM head's GEMM peak / the layers' (16-bit head) [-]
    matmul_fraction: Number
    matmul_half_flops: Number
    matmul_half_k: Number
    attention_half_kv: Number
    attention_fraction: Number       # PyTorch SDPA kernel
    fused_attention_fraction: Number  # Transformer Engine cuDNN kernel (Megatron recipe)
    hbm_bytes_per_s: Number
    hbm_fraction: Number
    link_bytes_per_s: Number         # scale-up link per GPU, one direction
    link_fraction: Number
    ep_link_fraction: Number         # flex (DeepEP/HybridEP) dispatch's share of the link
    link_latency_s: Number
    nic_share_bytes_per_s: Number    # scale-out line rate per GPU, one direction
    nic_fraction: Number
    nic_latency_s: Number
    kernel_overhead_s: Number        # host time per eager op
    comm_compute_slowdown: Number
    memory_bytes: Number
    runtime_reserved_bytes: Number
    allocator_fraction: Number
    busbw_ar_intra: Number           # measured all-reduce busbw inside a node [B/s]; NaN: model
    busbw_ar_inter: Number           # ... all-reduce across nodes [B/s]
    busbw_ring_inter: Number         # ... all-gather / reduce-scatter across nodes [B/s]
    link_nvlink: Number              # 0/1 NVLink hops (else PCIe) in NCCL's latency model
    link_mesh: Number                # 0/1 switchless mesh: subgroups use their own links
    link_per_peer_bytes_per_s: Number  # one peer link, one direction
    nic_uncertainty: Number          # relative uncertainty of the fabric's bandwidth [-]
    network_stated: Number           # 1: the network class was named (else the range widens)
    oversubscription: Number         # uplinks above the cluster's non-blocking pods [-]
    pod_gpus: Number                 # GPUs per non-blocking pod (inf: none)
    placement_factor: Number         # bus bandwidth kept by the job's placement [-]
    nic_decay_per_doubling: Number   # fabric: bus bandwidth lost per doubling of nodes [-]
    nic_decay_from_nodes: Number
    nic_decay_floor: Number


#: NCCL cost-model constants (fsdpsim.costs.nccl.library_inputs): per protocol (ll, ll128,
#: simple) the ring and tree base and per-hop latencies [s], then the bandwidth refinements.
NcclInputs = TypedDict("NcclInputs", {
    **{f"nccl_{p}_{k}_s": Number for p in ("ll", "ll128", "simple")
       for k in ("ring_base", "ring_nvlink_hop", "ring_pci_hop", "ring_net_hop", "tree_base",
                 "tree_nvlink_hop", "tree_pci_hop", "tree_net_hop")},
    "nccl_net_overhead_s": Number, "nccl_ll_hop_factor": Number, "nccl_ll_fraction": Number,
    "nccl_ll128_fraction": Number, "nccl_tree_fraction": Number,
    "nccl_ll_max_1_bytes_per_s": Number, "nccl_ll_max_2_bytes_per_s": Number,
    "nccl_ll_max_n_bytes_per_s": Number, "nccl_ll128_channel_bytes_per_s": Number,
    "nccl_tree_channel_bytes_per_s": Number, "nccl_pat": Number,
    "nccl_id": Number})  # which library (rows of one library share its constants)


class FrameworkInputs(NcclInputs):
    """:func:`fsdpsim.engine.build_framework.framework_inputs`: the framework profile
    (fsdpsim.plan.frameworks)."""

    megatron: Number               # 0/1 Megatron recipe
    framework_uncertainty: Number  # relative spread the profile leaves [-]
    param_gather_overlap: Number   # 0/1 ZeRO-1 parameter gather hidden by the next forward
    fused_attention: Number        # 0/1 Transformer Engine fused attention (default: megatron)
    grad_accum_pass_bytes: Number  # HBM bytes per parameter and micro-batch of an fp32 add pass
    dp_gather_overlap: Number      # 0/1 data-parallel gathers overlap compute
    dp_list_collectives: Number    # 0/1 one view and one copy per rank and call
    ddp_overlap: Number            # 0/1 DDP all-reduce overlaps backward
    zero1_reduce_overlap: Number   # 0/1 ZeRO-1 gradient reduce-scatter overlaps backward
    grad_bucket_bytes: Number      # DDP bucket of 16-bit gradients, one call each [B]
    param_broadcast: Number        # 0/1 ZeRO-1 parameters synced by one broadcast per owner
    grad_all_reduce: Number        # 0/1 ZeRO-1 gradients all-reduced in the compute dtype
    dp_block_calls: Number         # data-parallel collectives per block unit
    dp_root_calls: Number          # ... per root unit


class PlanInputs(TypedDict):
    """:func:`fsdpsim.engine.build.plan_inputs`: degrees, strategies and the layout on the tiers."""

    num_gpus: Number
    gpus_per_node: Number       # GPUs of the job per scale-up domain
    strategy: Number            # fsdpsim.costs.comm.STRATEGY_CODES
    reshard: Number
    keep_gathered: Number
    grad_sync_last: Number
    tp: Number
    pp: Number
    cp: Number
    vpp: Number
    dp: Number                  # data-parallel degree, excluding CP
    pp_schedule: Number         # fsdpsim.costs.schedule.SCHEDULE_CODES
    sequence_parallel: Number
    cp_all2all: Number
    tp_overlap: Number
    layers_first: Number        # layers on the first / a middle / the last pipeline stage
    layers_mid: Number
    layers_last: Number
    mid_stage: Number           # the busiest middle rank's index (its memory may bind)
    # size and members per scale-up domain of each group (fsdpsim.plan.layout.GROUPS)
    tp_size: Number
    tp_per_node: Number
    cp_size: Number
    cp_per_node: Number
    pp_size: Number
    pp_per_node: Number
    shard_size: Number          # FSDP shard group dp_shard x cp (1 for DDP)
    shard_per_node: Number
    replicate_size: Number
    replicate_per_node: Number
    dp_world_size: Number       # dp x cp
    dp_world_per_node: Number
    # members of each group in one non-blocking pod (fsdpsim.plan.layout.pod_layout)
    tp_per_pod: Number
    cp_per_pod: Number
    pp_per_pod: Number
    shard_per_pod: Number
    replicate_per_pod: Number
    dp_world_per_pod: Number
    # expert parallelism (fsdpsim.plan.layout.expert_layout: size, per domain, per pod of each
    # group)
    ep: Number
    etp: Number
    ep_overlap: Number          # 0/1 all-to-alls hidden behind another micro-batch
    ep_size: Number
    ep_per_node: Number
    ep_per_pod: Number
    etp_size: Number
    etp_per_node: Number
    etp_per_pod: Number
    edp_size: Number
    edp_per_node: Number
    edp_per_pod: Number
    eshard_size: Number
    eshard_per_node: Number
    eshard_per_pod: Number
    ereplicate_size: Number
    ereplicate_per_node: Number
    ereplicate_per_pod: Number


class TrainingInputs(TypedDict):
    """:func:`fsdpsim.engine.build.training_inputs`."""

    seq_len: Number
    compute_bytes: Number       # gathered parameters and activations, bytes per element
    reduce_bytes: Number        # gradient reduction dtype
    optimizer: Number           # 0 adamw, 1 sgd
    flash: Number
    fused_loss: Number
    fp8_gemm: Number            # the linear layers' GEMMs in FP8, MXFP8 or NVFP4 (casts)
    fp8_attention: Number       # 0/1 attention in FP8 (TE fp8_dot_product_attention)
    fp8_lm_head: Number         # 0/1 the LM head's GEMMs in the format (fp8_output_proj)
    cuda_graphs: Number         # 0 none, 1 partial (layers' own kernels), 2 full iteration
    rc_mla_up_proj: Number      # 0/1 Megatron recompute_modules: MLA up projections
    rc_mlp: Number              # 0/1 ... the dense layers' MLP
    rc_moe_act: Number          # 0/1 ... the routed experts' activation
    cast_scale: Number          # a cast's bytes per element over FP8's (block scales, FP4)
    dropout: Number
    recompute_layers: Number    # -1 = every layer
    moe_capacity_factor: Number  # 0 = dropless
    moe_imbalance: Number        # 0 = the balanced-routing floor
    moe_fp8_dispatch: Number     # 0/1
    moe_node_dedup: Number       # 0/1 dispatch once per destination node (DeepEP)


class EngineInputs(ModelInputs, SystemInputs, PlanInputs, TrainingInputs, FrameworkInputs,
                   total=False):
    """Everything :func:`fsdpsim.engine.evaluate` reads: the four parts plus the knobs
    (``micro_batch``, ``recompute``, ``grad_accum``) and optional switches
    (:data:`fsdpsim.engine.OPTIONAL_INPUTS`)."""

    micro_batch: Number
    recompute: Number           # 0 none, 1 selective, 2 full, 3 op-selective
    grad_accum: Number          # micro-batches per step
    ceilings: Number            # 0/1 solve the memory ceilings
    dp_comm_scale: Number       # data-parallel collective times x this (what-if twins)
    fused_glu: Number
    moe_layers_first: Number    # MoE layers on the first / a middle / the last stage
    moe_layers_mid: Number
    moe_layers_last: Number


class DerivedInputs(TypedDict):
    """What :func:`fsdpsim.engine.prepare.prepare` derives from the inputs (never given)."""

    tokens_per_rank: Number     # one rank's tokens of a micro-batch, b·s/cp [-]
    attn_pair_ratio: Number     # causal query-key pairs the layers' masks keep / full causal [-]


def declared_names() -> frozenset[str]:
    """Every key :class:`EngineInputs` declares (its four parts, the knobs and the optional
    switches)."""
    return frozenset(EngineInputs.__required_keys__ | EngineInputs.__optional_keys__)


def unknown_names_error(given: Iterable[str], known: Collection[str]) -> TypeError:
    """The error for inputs that are not engine inputs: each unknown name with the closest
    known ones (difflib), as Python names an unexpected keyword argument."""
    return TypeError(f"not an engine input: {_named(given, known)}; the inputs are the keys "
                     "of fsdpsim.engine.inputs.EngineInputs")


def _named(given: Iterable[str], known: Collection[str]) -> str:
    """Each name of ``given`` not in ``known``, with the closest known ones (difflib)."""
    named = []
    for name in sorted(set(given) - set(known)):
        close = difflib.get_close_matches(name, known, n=3)
        named.append(f"{name!r} (closest: {', '.join(map(repr, close))})" if close
                     else repr(name))
    return "; ".join(named)


#: Every field of :class:`Prepared`: the keys of :class:`EngineInputs` and of
#: :class:`DerivedInputs`, declared there once (a name, its unit, a comment).
FIELDS: tuple[str, ...] = tuple(sorted(declared_names()
                                       | frozenset(DerivedInputs.__annotations__)))
_FIELD_SET = frozenset(FIELDS)


class Prepared:
    """The engine inputs as the stages read them: one attribute per field of :data:`FIELDS`
    (``g.tp``), read-only once built (:meth:`of`). Reading a field that was never set, or a
    name that is not a field, is an AttributeError naming it; so is any assignment.

    The instance's ``__dict__`` is the mapping it was built from (checked against
    :data:`FIELDS` once): building one is a set comparison, not one statement per field, and
    reading an attribute is a dict lookup, as quick as a slot for the stages (no
    ``__getattr__``: it would keep the interpreter from specialising the reads). Built by
    :func:`fsdpsim.engine.prepare.prepare` (and, for tests of one function, :meth:`of` on the
    fields it reads)."""

    @classmethod
    def of(cls, values: Mapping[str, object]) -> "Prepared":
        """The fields ``values`` (declared names only: another is an AttributeError naming it
        and the closest fields) as a read-only :class:`Prepared`; ``values`` is copied."""
        if not _FIELD_SET.issuperset(values):
            raise AttributeError(f"not a field of the prepared inputs: "
                                 f"{_named(values, _FIELD_SET)} (fsdpsim.engine.inputs.FIELDS)")
        prepared = object.__new__(cls)
        object.__setattr__(prepared, "__dict__", dict(values))
        return prepared

    def replace(self, **changes: object) -> "Prepared":
        """A copy with ``changes`` (declared fields) in place of this one's values."""
        return Prepared.of({**self.__dict__, **changes})

    def values(self):
        """Every value set (for identity checks of the engine's outputs against its inputs)."""
        return self.__dict__.values()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"the prepared inputs are read-only: cannot set {name!r} "
                             "(Prepared.replace makes a changed copy)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"the prepared inputs are read-only: cannot delete {name!r}")


# a field named like a method would hide it (the instance dict is read before a class's
# functions), so none may be
assert not _FIELD_SET & set(vars(Prepared)), _FIELD_SET & set(vars(Prepared))
