"""The one builder of :func:`fsdpsim.engine.evaluate`'s inputs: a
:class:`~fsdpsim.model.spec.ModelSpec`, a resolved :class:`~fsdpsim.hardware.spec.System`, a
:class:`~fsdpsim.plan.parallel.ParallelPlan` and a :class:`~fsdpsim.plan.parallel.TrainingConfig`
into the flat numeric bundle of :mod:`fsdpsim.engine.inputs` (``predict``, ``sweep`` and the
measurement readers all call these; ``fsdpsim.drivers.predict`` re-exports them). The
framework profile's part is :mod:`fsdpsim.engine.build_framework`'s, the layered models' part
:mod:`fsdpsim.engine.build_moe`'s; the peaks a precision runs at are
:mod:`fsdpsim.engine.peaks`'s rules."""

from __future__ import annotations

import functools
import math
from numbers import Number
from typing import Any

import numpy as np

from fsdpsim import engine

from fsdpsim.hardware import efficiency

from fsdpsim.model import layers as model_layers
from fsdpsim.costs.comm import STRATEGY_CODES, padded_numel
from fsdpsim.costs.vocab import padded_vocab
from fsdpsim.engine.build_framework import framework_inputs
from fsdpsim.engine.inputs import EngineInputs
from fsdpsim.engine.peaks import (attention_peak_ratio, bf16_linear_share, gemm_peak_flops_per_s,
                                  mfu_peak_flops_per_s)
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.memo import by_identity
from fsdpsim.hardware.spec import System
from fsdpsim.model.spec import ModelSpec
from fsdpsim.model.checks import check_engine_supported
from fsdpsim.plan.parallel import CUDA_GRAPHS, LOW_PRECISION, ParallelPlan, TrainingConfig
from fsdpsim.util.units import DTYPE_BYTES


def _split_root(shapes):
    """The root's parameters by pipeline stage: (first stage: token and position embeddings;
    last stage: final norm and LM head)."""
    embed = [(n, sh) for n, sh in shapes if n.startswith(("tok_emb", "pos_emb"))]
    head = [(n, sh) for n, sh in shapes if not n.startswith(("tok_emb", "pos_emb"))]
    return embed, head


def model_inputs(spec: ModelSpec, shard_size, per_parameter: bool = True,
                 tp: int = 1) -> dict[str, Any]:
    """Numeric model inputs of :func:`engine.evaluate` (:func:`_model_inputs`); computed once per
    model, shard size and TP degree when the shard size is one number (each caller gets a
    copy)."""
    if isinstance(shard_size, Number):
        return dict(_cached_model_inputs(spec, shard_size, type(shard_size), per_parameter, tp))
    return _model_inputs(spec, shard_size, per_parameter, tp)


@functools.lru_cache(maxsize=256)
def _cached_model_inputs(spec, shard_size, _type, per_parameter, tp):
    """:func:`_model_inputs` of one shard size, remembered (``_type`` keeps 64 and 64.0
    apart)."""
    return _model_inputs(spec, shard_size, per_parameter, tp)


def _model_inputs(spec: ModelSpec, shard_size, per_parameter: bool = True,
                  tp: int = 1) -> dict[str, Any]:
    """Numeric model inputs of :func:`engine.evaluate`; padding is vectorised over shard_size.

    With ``tp > 1`` the parameter counts are one tensor-parallel rank's
    (:func:`fsdpsim.costs.tensor_parallel.tp_local_shapes`), which FSDP then shards on dim 0
    (2D FSDP + TP, torchtitan). ``embed_*`` / ``head_*`` are the root's first- and last-stage
    parts for pipelining; a tied embedding is held by both end stages (Megatron keeps a copy on
    the last stage and all-reduces their gradients). Models with layers the engine does not
    model yet (:attr:`ModelSpec.engine_unsupported`) are refused with a ConfigError."""
    check_engine_supported(spec)
    from fsdpsim.engine import build_moe as moe_inputs

    layered = moe_inputs.needs_layers(spec)
    if layered:  # a dense-kind block; MoE, MLA and MTP parts come from moe_inputs
        shapes = {"block": moe_inputs.dense_kind_shapes(spec),
                  "root": model_layers.root_parameter_shapes(spec)}
    else:
        shapes = spec.unit_parameter_shapes()
    block, root = shapes["block"], shapes["root"]
    vocab = padded_vocab(spec.vocab_size, tp)  # Megatron's, 128·tp with tp > 1
    if tp > 1:
        from fsdpsim.costs.tensor_parallel import tp_local_shapes

        root = [(n, (vocab,) + tuple(sh[1:]) if n.startswith(("tok_emb", "lm_head"))
                 and sh and sh[0] == spec.vocab_size else sh) for n, sh in root]
        block, root = tp_local_shapes(block, tp), tp_local_shapes(root, tp)
    embed, head = _split_root(root)
    if spec.tied_embeddings:
        head = head + [(n, sh) for n, sh in embed if n.startswith("tok_emb")]
    block_padded = padded_numel(block, shard_size, per_parameter)
    root_padded = padded_numel(root, shard_size, per_parameter)

    def numel(shapes_):
        return float(sum(math.prod(sh) for _, sh in shapes_))

    out = {
        "n_layers": spec.n_layers, "d_model": spec.d_model, "n_heads": spec.n_heads,
        "q_dim": spec.q_dim, "kv_dim": spec.kv_dim,
        # One expert's width (uniform top-k MoE); layered models: the dense MLP's
        "ffn_size": spec.expert_size if spec.is_moe and not layered else spec.ffn_size,
        "swiglu": spec.ffn_kind == "swiglu", "rotary": spec.position == "rotary",
        "linear_bias": spec.mlp_bias or spec.qkv_bias or spec.attn_out_bias,
        "rmsnorm": spec.norm == "rmsnorm",
        "vocab_size": vocab, "n_params": spec.n_params,
        "matmul_params": spec.matmul_params,
        "active_experts": spec.experts_per_token if spec.is_moe and not layered else 1,
        "block_numel": numel(shapes["block"]),
        "block_numel_padded": block_padded, "root_numel_padded": root_padded,
        "n_params_padded": spec.n_layers * block_padded + root_padded,
        "block_numel_rank": numel(block),
        "embed_numel_rank": numel(embed), "head_numel_rank": numel(head),
        "embed_numel_padded": padded_numel(embed, shard_size, per_parameter),
        "head_numel_padded": padded_numel(head, shard_size, per_parameter),
    }
    out["n_params_rank"] = (spec.n_params if tp == 1 else
                            spec.n_layers * out["block_numel_rank"] + numel(root))
    out.update({k: moe_inputs.DEFAULTS[k] for k in moe_inputs.MODEL_KEYS})
    if layered:
        out.update(moe_inputs.layered_model_inputs(spec, shard_size, per_parameter, tp,
                                                   numel(root), root_padded))
    return out


def system_inputs(system: System, precision: str,
                  bf16_share: float | None = None) -> dict[str, Any]:
    """Numeric hardware inputs of :func:`engine.evaluate` for one compute precision (and the
    share of linear layers a low-precision recipe keeps in BF16, :func:`bf16_linear_share`;
    None: the format's default); computed once per system object, precision and share (a
    System is frozen; each caller gets a copy)."""
    return dict(by_identity(_SYSTEM_INPUTS, system, (precision, bf16_share),
                            lambda: _system_inputs(system, precision, bf16_share)))


#: (system, its inputs) by (id(system), precision, BF16 share) (:func:`by_identity`).
_SYSTEM_INPUTS: dict[tuple[int, str, float | None], tuple[System, dict[str, Any]]] = {}


def _system_inputs(system: System, precision: str,
                   bf16_share: float | None = None) -> dict[str, Any]:
    """:func:`system_inputs`, computed."""
    acc = system.accelerator
    eff = acc.efficiency
    link = system.link
    return {
        "peak_flops_per_s": gemm_peak_flops_per_s(acc, precision, bf16_share),
        "mfu_peak_flops_per_s": mfu_peak_flops_per_s(acc, precision),
        "compute_clock_ratio": system.compute_clock_ratio,
        "attention_peak_ratio": attention_peak_ratio(acc, precision, bf16_share=bf16_share),
        "fp8_attention_peak_ratio": attention_peak_ratio(acc, precision, fp8=True,
                                                         bf16_share=bf16_share),
        # the LM head's GEMMs stay in the 16-bit type unless fp8_lm_head (layers.root_times)
        "lm_head_peak_ratio": attention_peak_ratio(acc, precision, bf16_share=bf16_share),
        # the default profile's kernel stack (fsdp2: pytorch); framework_inputs replaces them
        **efficiency.resolve(acc, precision, "pytorch").values,
        "matmul_half_flops": eff.matmul_half_flops, "matmul_half_k": eff.matmul_half_k,
        "attention_half_kv": eff.attention_half_kv,
        "hbm_bytes_per_s": acc.hbm_bandwidth_bytes_per_s, "hbm_fraction": eff.hbm_fraction,
        "link_bytes_per_s": link.bandwidth_bytes_per_s, "link_fraction": eff.link_fraction,
        "ep_link_fraction": (eff.link_fraction if eff.ep_link_fraction is None
                             else eff.ep_link_fraction),
        "link_latency_s": link.latency_s,
        "nic_share_bytes_per_s": system.inter_node_bandwidth_bytes_per_s_per_gpu,
        "nic_fraction": system.inter_node_fraction, "nic_latency_s": system.inter_node_latency_s,
        **fabric_inputs(system),
        **busbw_inputs(system),
        "link_nvlink": float(link.topology != "pcie"),
        # a switchless mesh (DGX-1 hybrid cube-mesh, MI300X's Infinity Fabric): a subgroup uses
        # only the links among its members (engine.collectives.bus_bandwidth)
        "link_mesh": float(link.topology == "mesh"),
        "link_per_peer_bytes_per_s": (link.per_peer_bandwidth_bytes_per_s
                                      or link.bandwidth_bytes_per_s),
        "kernel_overhead_s": eff.kernel_overhead_s,
        "comm_compute_slowdown": eff.comm_compute_slowdown,
        "memory_bytes": acc.memory_bytes, "runtime_reserved_bytes": acc.runtime_reserved_bytes,
        "allocator_fraction": acc.allocator_fraction,
    }


def busbw_inputs(system: System) -> dict[str, float]:
    """Measured bus bandwidths pinned for this system (``--busbw-*-gbs``,
    :data:`fsdpsim.hardware.system.BUSBW_COLUMNS`) as engine inputs [B/s], NaN where not pinned
    (the only inputs of :func:`config_inputs` the pinned bus bandwidths enter):
    all-reduce inside a node and across nodes, and all-gather/reduce-scatter across nodes. The
    engine prices all-gathers and reduce-scatters with one set of candidates; where both are
    pinned it takes their harmonic mean (an all-gather and a reduce-scatter of the same bytes
    take as long together as two at that bandwidth; nccl-tests' busbw, ``doc/PERFORMANCE.md``)."""
    m = system.measured_busbw
    nan = float("nan")
    ring = [m[c] for c in ("busbw_allgather_inter_gbs", "busbw_reducescatter_inter_gbs")
            if c in m]
    return {"busbw_ar_intra": m.get("busbw_allreduce_intra_gbs", nan),
            "busbw_ar_inter": m.get("busbw_allreduce_inter_gbs", nan),
            "busbw_ring_inter": len(ring) / sum(1.0 / v for v in ring) if ring else nan}


def fabric_inputs(system: System) -> dict[str, float]:
    """The scale-out fabric's loss of bus bandwidth with node count
    (:func:`fsdpsim.costs.nccl.fabric_factor`; catalog network keys ``scale_decay_*``) and the
    collective library constants of the default framework profile."""
    from fsdpsim.plan import frameworks
    from fsdpsim.costs import nccl

    x: dict[str, float] = {}
    lib = system.collectives.get(frameworks.PROFILES["fsdp2"].collectives)
    if lib is not None:  # the default profile's release (framework_inputs may replace it)
        x.update(nccl.library_inputs(lib))
    from fsdpsim.hardware.system import FRAGMENTED_FACTOR, FRAGMENTED_UNCERTAINTY

    fragmented = system.placement == "fragmented"
    x.update({"oversubscription": system.oversubscription,
              "pod_gpus": float(system.pod_gpus or np.inf),
              "placement_factor": FRAGMENTED_FACTOR if fragmented else 1.0})
    net = system.network
    x["network_stated"] = 0.0 if net is None else 1.0  # read by the 90 % range only
    if net is not None:
        x.update({"nic_uncertainty": net.bandwidth_uncertainty
                  + (FRAGMENTED_UNCERTAINTY if fragmented else 0.0),
                  "nic_decay_per_doubling": net.scale_decay_per_doubling,
                  "nic_decay_from_nodes": net.scale_decay_from_nodes,
                  "nic_decay_floor": net.scale_decay_floor})
    return x


def plan_inputs(plan: ParallelPlan, n_layers: int | None = None) -> dict[str, Any]:
    """Numeric plan inputs of :func:`engine.evaluate`: strategy, degrees, schedule, and the
    size and members per scale-up domain of every group (:func:`fsdpsim.plan.layout.group_layout`).
    ``n_layers`` (needed with pp > 1) gives the layers of the first, middle and last stages.
    Computed once per plan and layer count (frozen: each caller gets a copy)."""
    return dict(_plan_inputs(plan, n_layers))


@functools.lru_cache(maxsize=1024)
def _plan_inputs(plan: ParallelPlan, n_layers: int | None) -> dict[str, Any]:
    """:func:`plan_inputs`, remembered."""
    from fsdpsim.plan.layout import group_layout
    from fsdpsim.plan.parallel import PP_SCHEDULES

    x = {
        "num_gpus": plan.num_gpus, "gpus_per_node": plan.gpus_per_node,
        "strategy": STRATEGY_CODES[plan.sharding], "reshard": float(plan.reshard_after_forward),
        "keep_gathered": float(plan.keep_gathered),
        "grad_sync_last": float(plan.grad_sync == "last"),
        "tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "vpp": plan.vpp, "dp": plan.dp,
        "pp_schedule": PP_SCHEDULES.index(plan.pp_schedule),  # costs.schedule.SCHEDULE_CODES
        "sequence_parallel": float(plan.sequence_parallel),
        "cp_all2all": float(plan.cp_kind == "all2all"), "tp_overlap": float(plan.tp_overlap),
    }
    x.update(group_layout(plan))
    from fsdpsim.engine.build_moe import plan_moe_inputs

    x.update({k: v for k, v in plan_moe_inputs(plan).items() if not k.endswith("_per_pod")})
    # The engine's FSDP shard group is dp_shard x cp (ZeRO stages and DDP: over the whole
    # dp x cp group); HSDP replicates it dp_replicate times.
    x["shard_size"] = plan.shard_group
    x["replicate_size"] = plan.dp_replicate
    if plan.sharding == "none":
        x["shard_per_node"] = 1
    if n_layers is not None:
        first, mid, last = plan.stage_layers(n_layers)
        x.update({"layers_first": first, "layers_mid": mid, "layers_last": last,
                  "mid_stage": plan.busiest_middle_rank(n_layers)})
    return x


def pod_inputs(plan: ParallelPlan, system: System) -> dict[str, Any]:
    """Members of each group inside one non-blocking pod of the system's cluster
    (:func:`fsdpsim.plan.layout.pod_layout`; the group's size without pods)."""
    return dict(_pod_inputs(plan, system.pod_gpus))


@functools.lru_cache(maxsize=1024)
def _pod_inputs(plan: ParallelPlan, pod_gpus) -> dict[str, Any]:
    """:func:`pod_inputs` for a pod size, remembered."""
    from fsdpsim.plan.layout import expert_layout, pod_layout

    experts = expert_layout(plan, pod_gpus=pod_gpus)
    return {**pod_layout(plan, pod_gpus),
            **{k: v for k, v in experts.items() if k.endswith("_per_pod")}}


def training_inputs(training: TrainingConfig) -> dict[str, Any]:
    """The engine inputs of ``training`` (a new dict; remembered per frozen configuration)."""
    try:
        return dict(_training_inputs(training))
    except TypeError:  # a field that cannot be hashed: built afresh
        return _training_inputs.__wrapped__(training)


@functools.lru_cache(maxsize=256)
def _training_inputs(training: TrainingConfig) -> dict[str, Any]:
    from fsdpsim.engine.build_moe import moe_training_inputs

    from fsdpsim.costs.compute import CAST_TRANSPOSE_BYTES, FP8_CAST_TRANSPOSE_BYTES
    from fsdpsim.plan.parallel import RECOMPUTE_MODULES

    low = training.precision in LOW_PRECISION
    compute_bytes = DTYPE_BYTES[training.precision]
    # Low-precision training keeps bf16 weights for the all-gather and 16-bit activations in
    # today's FSDP and Megatron recipes; only the GEMM operands are cast.
    gather_bytes = 2.0 if low else compute_bytes
    reduce = training.reduce_dtype or "fp32"
    return {
        "seq_len": training.seq_len, "compute_bytes": gather_bytes,
        "reduce_bytes": DTYPE_BYTES[reduce],
        "optimizer": engine.OPTIMIZER_CODES[training.optimizer],
        "flash": float(training.flash_attention),
        "fused_loss": float(training.fused_loss),
        "fp8_gemm": float(low),
        "fp8_attention": float(training.fp8_attention),
        "fp8_lm_head": float(training.fp8_lm_head),
        "cuda_graphs": float(CUDA_GRAPHS.index(training.cuda_graphs)),
        **{f"rc_{m}": float(m in training.recompute_modules) for m in RECOMPUTE_MODULES},
        "cast_scale": (CAST_TRANSPOSE_BYTES[training.precision] / FP8_CAST_TRANSPOSE_BYTES
                       if low else 1.0),
        "dropout": float(training.dropout),
        "recompute_layers": (-1.0 if training.recompute_layers is None
                             else float(training.recompute_layers)),
        **moe_training_inputs(training),
    }


def op_selective_refused(spec: ModelSpec) -> str | None:
    """Why recompute ``op-selective`` cannot be modelled for ``spec``, or None: its saved bytes
    and rerun matmuls are derived for a dense block of one full-attention kind whose linear
    layers all have biases or none has (:func:`fsdpsim.costs.activations.op_selective_split`);
    torchtitan's op list over MoE layers (grouped GEMMs, all-to-alls, the router's forced
    recompute), MLA, MTP modules, q/k norms, mixed attention kinds and blocks with biases on
    some projections only is not."""
    from fsdpsim.engine.build_moe import needs_layers

    if needs_layers(spec):
        why = "MoE, MLA, MTP, q/k-norm or windowed layers"
    elif len({spec.qkv_bias, spec.attn_out_bias, spec.mlp_bias}) > 1:
        why = "biases on some linear layers only"
    else:
        return None
    return (f"recompute op-selective is modelled for dense full-attention layers whose linear "
            f"layers all have biases or none has; {spec.name} has {why}; accepted: recompute "
            "none, selective or full for it")


def config_inputs(spec: ModelSpec, system: System, plan: ParallelPlan,
                  training: TrainingConfig) -> EngineInputs:
    """The engine inputs of one configuration, except micro-batch, recompute and grad-accum."""
    from fsdpsim.engine import build_moe as moe_inputs

    if training.recompute == "op-selective" and op_selective_refused(spec):
        raise ConfigError(op_selective_refused(spec))

    plan.check_model(n_layers=spec.n_layers, n_heads=spec.n_heads, n_kv_heads=spec.kv_heads,
                     seq_len=training.seq_len, n_experts=spec.n_experts,
                     expert_ffn_size=spec.expert_size if spec.is_moe else 0)
    from fsdpsim.plan.frameworks import profile

    flat = profile(plan.framework).flat_parameter  # FSDP1 pads each unit once
    x = {**model_inputs(spec, plan.shard_group, per_parameter=not flat, tp=plan.tp),
         **system_inputs(system, training.precision, bf16_linear_share(spec, training)),
         **plan_inputs(plan, spec.n_layers), **pod_inputs(plan, system),
         **training_inputs(training),
         **framework_inputs(spec, system, plan, training.precision)}
    x.update(moe_inputs.stage_inputs(spec, plan))
    return x


def framework_recomputes(framework: str) -> tuple[str, ...]:
    """The recompute modes an automatic ``recompute`` tries, in order, under ``framework``:
    the profile's own modes where it declares them (torchtitan's none, op-level selective and
    full: :attr:`fsdpsim.plan.frameworks.Framework.supports`), else
    :data:`fsdpsim.plan.training.AUTO_RECOMPUTES`. predict, sweep and search choose among the
    same modes."""
    from fsdpsim.plan.frameworks import profile
    from fsdpsim.plan.training import AUTO_RECOMPUTES

    modes = dict(profile(framework).supports).get("recompute")
    return AUTO_RECOMPUTES if modes is None else tuple(modes)


def auto_recomputes(framework: str, spec: ModelSpec) -> tuple[str, ...]:
    """:func:`framework_recomputes` for ``spec``: op-level selective only where
    :func:`op_selective_refused` allows it."""
    return tuple(m for m in framework_recomputes(framework)
                 if m != "op-selective" or op_selective_refused(spec) is None)
