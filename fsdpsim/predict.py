"""``predict``: one configuration in, one :class:`Prediction` out.

This module turns objects (a :class:`~fsdpsim.model.ModelSpec`, a resolved
:class:`~fsdpsim.hardware.System`, a :class:`~fsdpsim.parallel.ParallelPlan` and a
:class:`~fsdpsim.parallel.TrainingConfig`) into the flat numeric inputs of
:func:`fsdpsim.engine.evaluate`, resolves the ``auto`` knobs by evaluating every candidate in
one vectorised call, and wraps the chosen row into a frozen result with ``to_dict()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from fsdpsim import engine, sensitivity
from fsdpsim.engine.inputs import EngineInputs
from fsdpsim.catalog_schema import UNCALIBRATED_INTERVAL
from fsdpsim.costs.comm import STRATEGY_CODES, padded_numel
from fsdpsim.errors import ConfigError
from fsdpsim.hardware import System
from fsdpsim import model_layers
from fsdpsim.model import ModelSpec
from fsdpsim.model_checks import check_engine_supported
from fsdpsim.parallel import ParallelPlan, TrainingConfig
from fsdpsim.units import DTYPE_BYTES

#: Micro-batch sizes tried by ``auto`` when no global batch pins the per-GPU batch.
AUTO_MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MEMORY_KEYS = ("params_bytes", "grads_bytes", "optimizer_bytes", "unsharded_params_bytes",
               "unsharded_grads_bytes", "activations_bytes", "logits_bytes",
               "runtime_reserved_bytes", "fragmentation_bytes")
COMM_KEYS = ("all_gather_bytes", "reduce_scatter_bytes", "all_reduce_bytes", "all_gather_s",
             "reduce_scatter_s", "all_reduce_s")
MEMORY_PRESSURE_FRACTION = engine.MEMORY_PRESSURE_FRACTION
TIME_KEYS = ("compute_s", "gemm_s", "attention_s", "memory_bound_s", "recompute_s",
             "optimizer_s", "comm_s", "exposed_comm_s", "bubble_s", "step_lower_bound_s",
             "step_upper_bound_s", "moe_s")
#: Per-dimension communication of hybrid plans: bytes per GPU per step, seconds, and the
#: seconds not hidden behind compute (``comm.tp_bytes`` etc.; pipeline point-to-point
#: transfers are not overlapped).
MODEL_PARALLEL_COMM = {"tp": ("tp_bytes", "tp_s", "tp_exposed_s"),
                       "cp": ("cp_bytes", "cp_s", "cp_exposed_s"),
                       "pp": ("pp_bytes", "pp_s", "pp_s"),
                       "ep": ("ep_bytes", "ep_s", "ep_exposed_s")}


#: Megatron's default --make-vocab-size-divisible-by: the vocabulary is padded to a multiple of
#: this times the TP degree.
VOCAB_PAD = 128


def _split_root(shapes):
    """The root's parameters by pipeline stage: (first stage: token and position embeddings;
    last stage: final norm and LM head)."""
    embed = [(n, sh) for n, sh in shapes if n.startswith(("tok_emb", "pos_emb"))]
    head = [(n, sh) for n, sh in shapes if not n.startswith(("tok_emb", "pos_emb"))]
    return embed, head


def model_inputs(spec: ModelSpec, shard_size, per_parameter: bool = True,
                 tp: int = 1) -> dict[str, Any]:
    """Numeric model inputs of :func:`engine.evaluate`; padding is vectorised over shard_size.

    With ``tp > 1`` the parameter counts are one tensor-parallel rank's
    (:func:`fsdpsim.costs.tensor_parallel.tp_local_shapes`), which FSDP then shards on dim 0
    (2D FSDP + TP, torchtitan). ``embed_*`` / ``head_*`` are the root's first- and last-stage
    parts for pipelining; a tied embedding is held by both end stages (Megatron keeps a copy on
    the last stage and all-reduces their gradients). Models with layers the engine does not
    model yet (:attr:`ModelSpec.engine_unsupported`) are refused with a ConfigError."""
    check_engine_supported(spec)
    from fsdpsim import moe_inputs

    layered = moe_inputs.needs_layers(spec)
    if layered:  # a dense-kind block; MoE, MLA and MTP parts come from moe_inputs
        shapes = {"block": moe_inputs.dense_kind_shapes(spec),
                  "root": model_layers.root_parameter_shapes(spec)}
    else:
        shapes = spec.unit_parameter_shapes()
    block, root = shapes["block"], shapes["root"]
    vocab = spec.vocab_size
    if tp > 1:
        from fsdpsim.costs.tensor_parallel import tp_local_shapes

        # Megatron pads the vocabulary to a multiple of 128 x tp (--make-vocab-size-divisible-
        # by 128, megatron/training/tokenizer _vocab_size_with_padding) so it splits evenly.
        vocab = -(-spec.vocab_size // (VOCAB_PAD * tp)) * VOCAB_PAD * tp
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


def system_inputs(system: System, precision: str) -> dict[str, Any]:
    """Numeric hardware inputs of :func:`engine.evaluate` for one compute precision."""
    acc = system.accelerator
    eff = acc.efficiency
    link = system.link
    return {
        "peak_flops_per_s": acc.peak_for(precision),
        "compute_clock_ratio": system.compute_clock_ratio,
        "attention_peak_ratio": _attention_peak_ratio(acc, precision),
        "matmul_fraction": eff.matmul_fraction, "matmul_half_flops": eff.matmul_half_flops,
        "matmul_half_k": eff.matmul_half_k,
        "attention_half_kv": eff.attention_half_kv,
        "attention_fraction": eff.attention_fraction,
        "fused_attention_fraction": (eff.attention_fraction if eff.fused_attention_fraction
                                     is None else eff.fused_attention_fraction),
        "hbm_bytes_per_s": acc.hbm_bandwidth_bytes_per_s, "hbm_fraction": eff.hbm_fraction,
        "link_bytes_per_s": link.bandwidth_bytes_per_s, "link_fraction": eff.link_fraction,
        "link_latency_s": link.latency_s,
        "nic_share_bytes_per_s": system.inter_node_bandwidth_bytes_per_s_per_gpu,
        "nic_fraction": system.inter_node_fraction, "nic_latency_s": system.inter_node_latency_s,
        **fabric_inputs(system),
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


def fabric_inputs(system: System) -> dict[str, float]:
    """The scale-out fabric's loss of bus bandwidth with node count
    (:func:`fsdpsim.costs.nccl.fabric_factor`; catalog network keys ``scale_decay_*``) and the
    collective library constants of the default framework profile."""
    from fsdpsim import frameworks
    from fsdpsim.costs import nccl

    x: dict[str, float] = {}
    lib = system.collectives.get(frameworks.PROFILES["fsdp2"].collectives)
    if lib is not None:  # the default profile's release (framework_inputs may replace it)
        x.update(nccl.library_inputs(lib))
    from fsdpsim.system import FRAGMENTED_FACTOR, FRAGMENTED_UNCERTAINTY

    fragmented = system.placement == "fragmented"
    x.update({"oversubscription": system.oversubscription,
              "pod_gpus": float(system.pod_gpus or np.inf),
              "placement_factor": FRAGMENTED_FACTOR if fragmented else 1.0})
    net = system.network
    if net is not None:
        x.update({"nic_uncertainty": net.bandwidth_uncertainty
                  + (FRAGMENTED_UNCERTAINTY if fragmented else 0.0),
                  "nic_decay_per_doubling": net.scale_decay_per_doubling,
                  "nic_decay_from_nodes": net.scale_decay_from_nodes,
                  "nic_decay_floor": net.scale_decay_floor})
    return x


def framework_inputs(spec: ModelSpec, system: System, plan: ParallelPlan) -> dict[str, Any]:
    """Engine inputs of the plan's framework profile (:mod:`fsdpsim.frameworks`): its recipe,
    the collective library release its runs used (NCCL cost-model constants), the number of
    data-parallel collectives per unit (one, or one per gathered parameter), and whether those
    collectives overlap compute."""
    from fsdpsim import frameworks
    from fsdpsim.costs import nccl

    prof = frameworks.profile(plan.framework)
    x: dict[str, Any] = {}
    lib = system.collectives.get(prof.collectives)
    if lib is not None:
        x.update(nccl.library_inputs(lib))
    block_calls = root_calls = 1.0
    if prof.per_parameter:
        shapes = spec.unit_parameter_shapes()

        def gathered(unit):
            return max(1.0, float(sum(math.prod(sh) >= prof.persistence_numel
                                      for _, sh in shapes[unit])))
        block_calls, root_calls = gathered("block"), gathered("root")
    x.update({"megatron": float(prof.recipe == "megatron"),
              "framework_uncertainty": prof.uncertainty,
              "param_gather_overlap": float(prof.name == "megatron"),
              "dp_gather_overlap": float(prof.gather_overlap),
              "dp_list_collectives": float(prof.list_collectives),
              "ddp_overlap": float(prof.grad_reduce_overlap),
              "dp_block_calls": block_calls, "dp_root_calls": root_calls})
    return x


def _attention_peak_ratio(acc, precision: str) -> float:
    """Attention's peak relative to the GEMMs' [-]: FP8 training (Transformer Engine's
    ``fp8_autocast``) runs the GEMMs of its linear layers in FP8 while attention stays in the
    16-bit type (TE user guide, "Using FP8 with Transformer Engine"); other precisions: 1."""
    if precision != "fp8":
        return 1.0
    sixteen = acc.peak_flops_per_s.get("bf16") or acc.peak_flops_per_s.get("fp16")
    return sixteen / acc.peak_for("fp8") if sixteen else 1.0


def plan_inputs(plan: ParallelPlan, n_layers: int | None = None) -> dict[str, Any]:
    """Numeric plan inputs of :func:`engine.evaluate`: strategy, degrees, schedule, and the
    size and members per scale-up domain of every group (:func:`fsdpsim.layout.group_layout`).
    ``n_layers`` (needed with pp > 1) gives the layers of the first, middle and last stages."""
    from fsdpsim.layout import group_layout
    from fsdpsim.parallel import PP_SCHEDULES

    x = {
        "num_gpus": plan.num_gpus, "gpus_per_node": plan.gpus_per_node,
        "strategy": STRATEGY_CODES[plan.sharding], "reshard": float(plan.reshard_after_forward),
        "keep_gathered": float(plan.keep_gathered), "grad_sync_last": float(plan.grad_sync == "last"),
        "tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "vpp": plan.vpp, "dp": plan.dp,
        "pp_schedule": PP_SCHEDULES.index(plan.pp_schedule),  # costs.schedule.SCHEDULE_CODES
        "sequence_parallel": float(plan.sequence_parallel),
        "cp_all2all": float(plan.cp_kind == "all2all"), "tp_overlap": float(plan.tp_overlap),
    }
    x.update(group_layout(plan))
    from fsdpsim.moe_inputs import plan_moe_inputs

    x.update({k: v for k, v in plan_moe_inputs(plan).items() if not k.endswith("_per_pod")})
    # The engine's FSDP shard group is dp_shard x cp (ZeRO stages and DDP: over the whole
    # dp x cp group); HSDP replicates it dp_replicate times.
    x["shard_size"] = plan.shard_group
    x["replicate_size"] = plan.dp_replicate
    if plan.sharding == "none":
        x["shard_per_node"] = 1
    if n_layers is not None:
        first, mid, last = plan.stage_layers(n_layers)
        x.update({"layers_first": first, "layers_mid": mid, "layers_last": last})
    return x


def pod_inputs(plan: ParallelPlan, system: System) -> dict[str, Any]:
    """Members of each group inside one non-blocking pod of the system's cluster
    (:func:`fsdpsim.layout.pod_layout`; the group's size without pods)."""
    from fsdpsim.layout import expert_layout, pod_layout

    experts = expert_layout(plan, pod_gpus=system.pod_gpus)
    return {**pod_layout(plan, system.pod_gpus),
            **{k: v for k, v in experts.items() if k.endswith("_per_pod")}}


def training_inputs(training: TrainingConfig) -> dict[str, Any]:
    from fsdpsim.moe_inputs import moe_training_inputs

    compute_bytes = DTYPE_BYTES[training.precision]
    # fp8 training keeps bf16 master weights for the all-gather in today's FSDP recipes.
    gather_bytes = 2.0 if training.precision == "fp8" else compute_bytes
    reduce = training.reduce_dtype or "fp32"
    return {
        "seq_len": training.seq_len, "compute_bytes": gather_bytes,
        "reduce_bytes": DTYPE_BYTES[reduce],
        "optimizer": engine.OPTIMIZER_CODES[training.optimizer],
        "flash": float(training.flash_attention),
        "fused_loss": float(training.fused_loss),
        "fp8_gemm": float(training.precision == "fp8"),
        "dropout": float(training.dropout),
        "recompute_layers": (-1.0 if training.recompute_layers is None
                             else float(training.recompute_layers)),
        **moe_training_inputs(training),
    }


def config_inputs(spec: ModelSpec, system: System, plan: ParallelPlan,
                  training: TrainingConfig) -> EngineInputs:
    """The engine inputs of one configuration, except micro-batch, recompute and grad-accum."""
    from fsdpsim import moe_inputs

    plan.check_model(n_layers=spec.n_layers, n_heads=spec.n_heads, n_kv_heads=spec.kv_heads,
                     seq_len=training.seq_len, n_experts=spec.n_experts,
                     expert_ffn_size=spec.expert_size if spec.is_moe else 0)
    x = {**model_inputs(spec, plan.shard_group, tp=plan.tp),
         **system_inputs(system, training.precision),
         **plan_inputs(plan, spec.n_layers), **pod_inputs(plan, system),
         **training_inputs(training), **framework_inputs(spec, system, plan)}
    x.update(moe_inputs.stage_inputs(spec, plan))
    return x


@dataclass(frozen=True)
class Prediction:
    """The prediction for one configuration; ``to_dict()`` gives the JSON form."""

    values: Mapping[str, float]
    """Flat outputs of :func:`engine.evaluate` for the chosen row (SI units in names). Its
    ``bottleneck``, ``min_inter_node_bytes_per_s_per_gpu`` and ``critical_tokens_per_gpu`` are
    the engine's cheap heuristic and closed forms; the reported ones are in
    ``reported``."""
    inputs: Mapping[str, Any]
    model: str
    system: str
    plan: Mapping[str, Any]
    training: Mapping[str, Any]
    chosen: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    interval: Mapping[str, Any] = field(default_factory=dict)
    """90 % prediction interval of throughput and step time (see :func:`prediction_interval`)."""
    advice: tuple[Mapping[str, Any], ...] = ()
    """Faster settings of the same job at this scale (:func:`fsdpsim.advice.scale_advice`)."""
    reported: Mapping[str, float] | None = None
    """Bottleneck, thresholds and sensitivities from the engine's own response to each
    resource (:func:`fsdpsim.sensitivity.analyse`, keys :data:`fsdpsim.sensitivity.OUTPUTS`):
    what ``to_dict`` and the CLI report. Computed on first use (:meth:`analysis`) from
    ``analysis_inputs``: the searches cost several engine calls, which a caller that wants the
    step time alone (``predict`` in a loop, ``validate``'s knob choice) does not pay."""
    analysis_inputs: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    """The chosen configuration's engine inputs (for :meth:`analysis`)."""

    def analysis(self) -> Mapping[str, float]:
        """:attr:`reported`, computed now if it was not yet."""
        reported = object.__getattribute__(self, "reported")
        if reported is None:
            reported = MappingProxyType(_row(sensitivity.analyse(self.analysis_inputs), 0))
            object.__setattr__(self, "reported", reported)
        return reported

    def __getattr__(self, name: str) -> float:
        values = object.__getattribute__(self, "values")
        if name in sensitivity.OUTPUTS:  # the reported reading first
            return self.analysis()[name]
        if name in values:
            return values[name]
        raise AttributeError(name)

    @property
    def fits(self) -> bool:
        return bool(self.values["fits"])

    @property
    def bottleneck(self) -> str:
        return engine.BOTTLENECKS[int(self.analysis()["bottleneck"])]

    def to_dict(self) -> dict[str, Any]:
        v = self.values
        reported = sensitivity.report(self.analysis())
        return {
            "model": self.model,
            "system": self.system,
            "plan": dict(self.plan),
            "training": dict(self.training),
            "chosen": dict(self.chosen),
            "step_time_s": v["step_time_s"],
            "tokens_per_s": v["tokens_per_s"],
            "tokens_per_s_per_gpu": v["tokens_per_s_per_gpu"],
            "mfu": v["mfu"],
            "hfu": v["hfu"],
            "model_flops_per_step": v["model_flops_per_step"],
            "hardware_flops_per_step": v["hardware_flops_per_step"],
            "fits": self.fits,
            "bottleneck": self.bottleneck,
            "memory": {"peak_bytes": v["peak_bytes"], "capacity_bytes": v["capacity_bytes"],
                       **{k: v[k] for k in MEMORY_KEYS},
                       # per pipeline stage (both the one stage without pipelining)
                       "stages": {"first": v["peak_bytes_first_stage"],
                                  "last": v["peak_bytes_last_stage"]}},
            # moe_s: the MoE MLPs (router, experts, their kernels) and the exposed all-to-alls
            "time": {**{k: v[k] for k in TIME_KEYS},
                     "moe_share": v["moe_s"] / v["step_time_s"] if v["step_time_s"] else 0.0},
            "comm": {**{k: v[k] for k in COMM_KEYS}, "exposed_s": v["exposed_comm_s"],
                     **{f"{dim}_{name}": v[key] for dim, keys in MODEL_PARALLEL_COMM.items()
                        for name, key in zip(("bytes", "s", "exposed_s"), keys)}},
            "interval": dict(self.interval),
            "thresholds": {**reported["thresholds"],
                           "max_micro_batch": int(v["max_micro_batch"]),
                           "max_seq_len": int(v["max_seq_len"])},
            "sensitivity": reported["sensitivity"],
            "notes": list(self.notes),
            "advice": [dict(a) for a in self.advice],
        }


#: Above this share of capacity the measured runs fell furthest below their predictions: the
#: 27 MosaicML calibration rows above 85 % ran as slow as 0.75x the prediction (5th percentile
#: 0.845, against 0.902 for the rows below; README, Accuracy). The range widens to cover it.
NEAR_LIMIT_SHARE, NEAR_LIMIT_RATIO_LOW = 0.85, 0.75


def prediction_interval(values: Mapping[str, Any], system: System, *,
                        comm: tuple[Any, Any] = (1.0, 1.0),
                        uncertainty: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """5-95 % range of tokens/s and step time from the GPU type's calibration residuals,
    widened by what is uncertain about the plan's communication.

    ``fsdpsim calibrate`` stores the 5th and 95th percentiles of measured / predicted tokens/s
    from 5-fold cross-validation (out-of-sample) in the catalog; the range is the prediction
    scaled by them. GPU types without their own calibration (or power-capped) use a wider,
    documented default (``fsdpsim.catalog.UNCALIBRATED_INTERVAL``) and are marked
    ``calibrated: false``. Near the memory limit (``peak_bytes`` / ``capacity_bytes`` above
    :data:`NEAR_LIMIT_SHARE`, when given) the low end drops to :data:`NEAR_LIMIT_RATIO_LOW`.
    ``comm`` are the throughput ratios on a slower network and framework (:func:`slower_twin`,
    evaluated) and on a faster one (:func:`faster_ratio`), from the network class's and the
    framework profile's uncertainty, wider past the largest measured scale; the low end is
    multiplied by the first, the high end by the second.
    ``uncertainty`` = :func:`comm_uncertainty`'s pair, reported. Scalars or arrays (a sweep
    passes one system's rows at once).
    """
    eff = system.accelerator.efficiency
    lo, hi = eff.throughput_ratio_p05, eff.throughput_ratio_p95
    calibrated = eff.calibrated and system.power_cap_w is None
    if not calibrated:  # the power-cap model is uncalibrated: at least the uncalibrated range
        lo, hi = min(lo, UNCALIBRATED_INTERVAL[0]), max(hi, UNCALIBRATED_INTERVAL[1])
    near = False
    if "peak_bytes" in values and "capacity_bytes" in values:
        near = (np.asarray(values["peak_bytes"], dtype=float)
                > NEAR_LIMIT_SHARE * np.asarray(values["capacity_bytes"], dtype=float))
        lo = np.where(near, min(lo, NEAR_LIMIT_RATIO_LOW), lo)
        near = near.tolist() if np.ndim(near) == 0 else near
    slower, faster = (np.asarray(r, dtype=float) for r in comm)
    lo = lo * np.minimum(slower, 1.0)
    hi = hi * np.maximum(faster, 1.0)
    if np.ndim(lo) == 0:
        lo, hi = float(lo), float(hi)
    tps = values["tokens_per_s_per_gpu"]
    out = {"tokens_per_s_per_gpu_low": tps * lo, "tokens_per_s_per_gpu_high": tps * hi,
           "tokens_per_s_low": values["tokens_per_s"] * lo,
           "tokens_per_s_high": values["tokens_per_s"] * hi,
           "step_time_s_low": values["step_time_s"] / hi,
           "step_time_s_high": values["step_time_s"] / lo,
           "mfu_low": values["mfu"] * lo, "mfu_high": values["mfu"] * hi,
           "calibrated": calibrated, "near_memory_limit": near, "coverage": 0.9}
    if uncertainty is not None:
        u_fab, u_fw = uncertainty
        out["network_uncertainty"] = float(u_fab) if np.ndim(u_fab) == 0 else u_fab
        out["framework_uncertainty"] = float(u_fw) if np.ndim(u_fw) == 0 else u_fw
    return out


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order, in O(sqrt(n))."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def full_shard_peaks(spec: ModelSpec, system: System, plan: ParallelPlan,
                     training: TrainingConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Peak memory per GPU with full sharding, micro-batch 1 and full recompute on every world
    size a plan can have on this node shape: the divisors of ``gpus_per_node``, then whole
    nodes doubling up to :data:`fsdpsim.numbers.MAX_GPUS`, and the plan's own world.

    One vectorised memory evaluation (padding per world size). Returns (worlds, peak bytes,
    fits), worlds ascending. Memory per GPU does not fall for ever: FSDP2 pads every
    parameter's dim 0 to the shard count, so past a few thousand GPUs the padded gathers grow
    (llama3-8b on H100: 11.4 GiB at 8,192 GPUs, 977 GiB at 4,194,304).
    """
    from fsdpsim.numbers import MAX_GPUS

    per_node = plan.gpus_per_node
    nodes = per_node * 2 ** np.arange(0, int(np.log2(MAX_GPUS // per_node)) + 1)
    worlds = np.unique(np.concatenate([divisors(per_node), nodes, [plan.num_gpus]])).astype(float)
    x: dict[str, Any] = {}
    x.update(model_inputs(spec, worlds))
    x.update(system_inputs(system, training.precision))
    x.update({"num_gpus": worlds, "gpus_per_node": per_node,
              "strategy": STRATEGY_CODES["full"], "shard_size": worlds, "replicate_size": 1.0,
              "reshard": 1.0})
    x.update(training_inputs(training))
    x.update({"micro_batch": 1.0, "recompute": engine.RECOMPUTE_CODES["full"], "grad_accum": 1.0})
    out = engine.memory_breakdown(x, ceilings=False)
    peaks = np.broadcast_to(out["peak_bytes"], worlds.shape)
    return worlds, peaks, np.broadcast_to(out["fits"], worlds.shape)


def smallest_world_that_fits(spec: ModelSpec, system: System, plan: ParallelPlan,
                             training: TrainingConfig) -> int | None:
    """Fewest GPUs (of :func:`full_shard_peaks`'s worlds, smaller ones included) on which the
    model fits with full sharding, micro-batch 1 and full recompute; None if none does."""
    worlds, _, fits = full_shard_peaks(spec, system, plan, training)
    return int(worlds[np.argmax(fits)]) if fits.any() else None


def _what_would_fit(spec: ModelSpec, system: System, plan: ParallelPlan,
                    training: TrainingConfig) -> str:
    """The advice when not even micro-batch 1 fits with the plan as given."""
    worlds, peaks, fits = full_shard_peaks(spec, system, plan, training)
    recipe = "with full sharding, micro-batch 1 and full recompute"
    least = int(np.argmin(peaks))
    padding = (f"past {int(worlds[least]):,} GPUs memory per GPU grows again, as FSDP2 pads "
               "every parameter to the shard count")
    if not fits.any():
        return (f"{recipe} it does not fit on 1 to {int(worlds[-1]):,} GPUs either: the least "
                f"memory per GPU is {peaks[least] / 2**30:.1f} GiB, on {int(worlds[least]):,} "
                f"GPUs; {padding}")
    smallest, largest = int(worlds[np.argmax(fits)]), int(worlds[fits][-1])
    here = bool(fits[worlds == plan.num_gpus][0])
    if here:
        return f"{recipe} it fits on these {plan.num_gpus:,} GPUs (and on as few as {smallest:,})"
    if plan.num_gpus > largest:
        return f"{recipe} it fits on {smallest:,} to {largest:,} GPUs; {padding}"
    return f"{recipe} it fits on {smallest:,} GPUs"


def _row(out: Mapping[str, np.ndarray], i: int) -> dict[str, float]:
    row = {}
    for key, arr in out.items():
        a = np.asarray(arr)
        value = a.reshape(-1)[i] if a.size > 1 else a.reshape(-1)[0]
        row[key] = bool(value) if a.dtype == bool else float(value)
    return row


#: Nodes up to which a fabric's decay with scale is measured (NVIDIA/nccl#1229: 4-128 nodes);
#: beyond, the decay is extrapolated and the range widens by the catalog's decay per doubling.
MEASURED_NODES = 128.0


def comm_uncertainty(x: Mapping[str, Any]) -> tuple[Any, Any]:
    """Relative uncertainty of inter-node bandwidth and of data-parallel communication for the
    configurations ``x`` (engine inputs): ``(u_fabric, u_framework)`` [-].

    ``u_fabric`` is the network class's ``bandwidth_uncertainty`` (catalog: 0.10 for
    InfiniBand, whose large-message busbw is measured at 0.88-0.96 of line rate; 0.3 for
    Ethernet/cloud fabrics without a measurement at scale), plus the decay per doubling for
    every doubling of nodes past :data:`MEASURED_NODES`; 0 on one node. ``u_framework`` is the
    framework profile's (:mod:`fsdpsim.frameworks`)."""
    nodes = np.asarray(x["num_gpus"], dtype=float) / np.asarray(x["gpus_per_node"], dtype=float)
    beyond = np.log2(np.maximum(nodes / MEASURED_NODES, 1.0))
    u_fab = np.where(nodes > 1.0, np.asarray(x.get("nic_uncertainty", 0.1), dtype=float)
                     + np.asarray(x.get("nic_decay_per_doubling", 0.0), dtype=float) * beyond,
                     0.0)
    return np.minimum(u_fab, 0.9), np.asarray(x.get("framework_uncertainty", 0.0), dtype=float)


def slower_twin(x: Mapping[str, Any]) -> dict[str, Any]:
    """The configurations ``x`` again on a slower network and framework
    (:func:`comm_uncertainty`): inter-node bandwidth x (1 - u_fabric) and data-parallel
    collectives x 1 / (1 - u_framework). Its throughput relative to ``x``'s lowers the low end
    of the 90 % range (:func:`prediction_interval`) by what is uncertain for that plan; predict
    and sweep both evaluate it."""
    u_fab, u_fw = comm_uncertainty(x)
    return {**x, "nic_fraction": np.asarray(x["nic_fraction"], dtype=float) * (1.0 - u_fab),
            "dp_comm_scale": 1.0 / (1.0 - np.minimum(u_fw, 0.9))}


def faster_ratio(values: Mapping[str, Any], uncertainty: tuple[Any, Any]) -> Any:
    """Throughput ratio if communication were faster by the plan's uncertainty: the exposed
    communication shrinks by u / (1 + u) (u the larger of the network's and the framework's),
    ``step / (step - exposed · u / (1 + u))`` [-]. Exposed time is all a faster network can
    win back, so this is the most it can gain; it raises the high end of the range."""
    u = np.maximum(*(np.asarray(a, dtype=float) for a in uncertainty))
    step = np.asarray(values["step_time_s"], dtype=float)
    won = np.asarray(values["exposed_comm_s"], dtype=float) * u / (1.0 + u)
    return step / np.maximum(step - won, 1e-300)


def plan_summary(plan: ParallelPlan, grad_accum: int) -> dict[str, Any]:
    """The ``plan`` object of a report: every degree, the strategies and a one-line form."""
    line = plan.describe()
    if plan.pp > 1:
        line += f" ({plan.pp_schedule}" + (f", v={plan.vpp}" if plan.vpp > 1 else "") + \
            f", m={grad_accum})"
    return {"num_gpus": plan.num_gpus, "gpus_per_node": plan.gpus_per_node,
            "sharding": plan.sharding, "zero": {"none": 0, "optimizer": 1, "grad_op": 2,
                                                "full": 3, "hybrid": 3}[plan.sharding],
            "dp": plan.dp, "dp_shard": plan.dp_shard, "dp_replicate": plan.dp_replicate,
            "tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "vpp": plan.vpp,
            "pp_schedule": plan.pp_schedule, "sequence_parallel": plan.sequence_parallel,
            "cp_kind": plan.cp_kind, "tp_overlap": plan.tp_overlap,
            "ep": plan.ep, "etp": plan.etp, "expert_dp": plan.expert_dp,
            "ep_overlap": plan.ep_overlap,
            "mesh_order": ",".join(plan.mesh_order),
            "pp_first_layers": plan.pp_first_layers, "pp_last_layers": plan.pp_last_layers,
            "reshard_after_forward": plan.reshard_after_forward,
            "keep_gathered": plan.keep_gathered, "grad_sync": plan.grad_sync,
            "framework": plan.framework, "line": line}


def predict(spec: ModelSpec, system: System, plan: ParallelPlan,
            training: TrainingConfig) -> Prediction:
    """Predict one training step; ``auto`` knobs pick the fastest setting that fits."""
    from fsdpsim.system import domain_gpus

    if plan.gpus_per_node not in (system.gpus_per_node, domain_gpus(system, plan.num_gpus)):
        raise ConfigError(f"plan gpus_per_node({plan.gpus_per_node}) != system "
                          f"gpus_per_node({system.gpus_per_node})")
    dp = plan.dp
    if training.global_batch is not None and training.global_batch % dp:
        raise ConfigError(f"global_batch({training.global_batch}) is not divisible by the "
                          f"data-parallel degree ({dp}); use a multiple of {dp}")
    per_gpu = None if training.global_batch is None else training.global_batch // dp
    if training.micro_batch is not None:
        mbs = [training.micro_batch]
        training.grad_accum(dp, training.micro_batch)  # raises if it does not split
    elif per_gpu is not None:
        mbs = divisors(per_gpu)
    else:
        mbs = list(AUTO_MICRO_BATCHES)
    recomputes = [training.recompute] if training.recompute else ["none", "selective", "full"]
    mb_grid, rc_grid = np.meshgrid(np.array(mbs, dtype=float),
                                   np.array([engine.RECOMPUTE_CODES[r] for r in recomputes]),
                                   indexing="ij")
    mb_flat, rc_flat = mb_grid.ravel(), rc_grid.ravel()
    accum = (np.ones_like(mb_flat) if per_gpu is None else per_gpu / mb_flat)

    x = config_inputs(spec, system, plan, training)
    x.update({"micro_batch": mb_flat, "recompute": rc_flat, "grad_accum": accum})
    n = mb_flat.size
    i = 0
    if n > 1:  # rank every candidate without the ceiling solves
        ranked = engine.evaluate({**x, "ceilings": 0.0})
        fits = np.broadcast_to(ranked["fits"], mb_flat.shape)
        tier, key = (np.broadcast_to(a, mb_flat.shape) for a in engine.choice_rank(ranked))
        i = int(np.lexsort((np.arange(n), key, tier))[0])
    # The chosen one in full, and its twin on a slower network and framework (the plan's
    # communication uncertainty, slower_twin) as the second row of the same call. The
    # reported bottleneck and thresholds (fsdpsim.sensitivity) follow when asked for.
    chosen_x = {**x, "micro_batch": mb_flat[i], "recompute": rc_flat[i], "grad_accum": accum[i]}
    low = slower_twin(chosen_x)
    out = engine.evaluate({**chosen_x, **{k: np.array([chosen_x.get(k, 1.0), low[k]], dtype=float)
                                          for k in ("nic_fraction", "dp_comm_scale")}})
    row = _row(out, 0)
    per_gpu = np.asarray(out["tokens_per_s_per_gpu"], dtype=float).reshape(-1)
    uncertainty = comm_uncertainty(chosen_x)
    twin_ratios = (float(per_gpu[1] / per_gpu[0]) if per_gpu.size == 2 and per_gpu[0] > 0
                   else 1.0, float(faster_ratio(row, uncertainty)))
    if not row.get("pipeline_ok", True):  # raises, naming the schedule and the counts
        from fsdpsim.costs.schedule import check_schedule

        check_schedule(plan.pp_schedule, plan.pp, int(accum[i]), plan.vpp)
    rc_name = {v: k for k, v in engine.RECOMPUTE_CODES.items()}[int(rc_flat[i])]
    chosen: dict[str, str] = {"micro_batch": str(int(mb_flat[i])), "recompute": rc_name,
                              "grad_accum": str(int(accum[i]))}
    notes = [system.extra.get("notes", "")] if system.extra.get("notes") else []
    auto = [name for name, given in (("micro_batch", training.micro_batch),
                                     ("recompute", training.recompute)) if given is None]
    if auto and n > 1:
        n_fit = int(fits.sum())
        roomy = int((tier == 0).sum())
        why = (f"fastest of {roomy} candidates that fit below "
               f"{100 * MEMORY_PRESSURE_FRACTION:.0f} % of memory (of {n})" if roomy
               else f"fastest of {n_fit} candidates that fit, all above "
                    f"{100 * MEMORY_PRESSURE_FRACTION:.0f} % of memory (of {n})" if n_fit
               else f"none of {n} candidates fits; showing the smallest memory footprint")
        chosen["why"] = f"auto {', '.join(auto)}: {why}"
    if row["fits"] and row["peak_bytes"] > MEMORY_PRESSURE_FRACTION * row["capacity_bytes"]:
        notes.append(f"near the memory limit ({100 * row['peak_bytes'] / row['capacity_bytes']:.0f} % "
                     "of capacity): allocator retries can slow real runs beyond this prediction")
    if not row["fits"]:
        over = row["peak_bytes"] - row["capacity_bytes"]
        if row["max_micro_batch"] >= 1:
            what = (f"largest micro-batch that fits: {int(row['max_micro_batch'])}; longest "
                    f"sequence at this micro-batch: {int(row['max_seq_len'])}")
        else:
            what = ("not even micro-batch 1 fits with this plan; "
                    + _what_would_fit(spec, system, plan, training))
        notes.append(f"does not fit: needs {over / 2**30:.1f} GiB more than the "
                     f"{row['capacity_bytes'] / 2**30:.1f} GiB usable; {what}")
    return Prediction(
        values=MappingProxyType(row),
        inputs=MappingProxyType({k: v for k, v in x.items()
                                 if isinstance(v, (int, float)) or np.ndim(v) == 0}),
        model=spec.name, system=system.label,
        plan=plan_summary(plan, int(accum[i])),
        training={"seq_len": training.seq_len, "micro_batch": int(mb_flat[i]),
                  "grad_accum": int(accum[i]),
                  "global_batch": int(mb_flat[i] * accum[i] * dp),
                  "recompute": rc_name, "precision": training.precision,
                  "optimizer": training.optimizer,
                  "reduce_dtype": training.reduce_dtype or "fp32",
                  "flash_attention": training.flash_attention,
                  "fused_loss": training.fused_loss, "dropout": training.dropout,
                  "recompute_layers": training.recompute_layers,
                  "moe_capacity_factor": training.moe_capacity_factor,
                  "moe_imbalance": training.moe_imbalance,
                  "moe_fp8_dispatch": training.moe_fp8_dispatch},
        chosen=chosen, notes=tuple(notes),
        interval=prediction_interval(row, system, comm=twin_ratios, uncertainty=uncertainty),
        analysis_inputs=MappingProxyType(chosen_x),
    )
