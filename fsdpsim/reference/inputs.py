"""The numbers the reference reads, in SI units: the catalog's rates and constants for one
configuration (:func:`rates`), the GEMM peak of a precision, and the parameter shapes of one
TP rank, FSDP padding and group placement on the scale-up domains."""

from __future__ import annotations

import math

from fsdpsim.reference.scope import LOW_PRECISION
from fsdpsim.util.errors import ConfigError

#: HBM bytes per element of a cast with its transposed copy: read 2 (bf16), write both
#: layouts with their scales (TE ``cast_transpose``; OCP MX v1.0; arXiv 2509.25149 §2;
#: DeepSeek-V3 arXiv 2412.19437 §3.3.1 for 1×128 / 128×128 FP32 scales).
CAST_BYTES = {"fp8": 4.0, "fp8-block": 2.0 + 2.0 * (1.0 + 4.0 / 128),
              "mxfp8": 2.0 + 2.0 * (1.0 + 1.0 / 32), "nvfp4": 2.0 + 2.0 * (0.5 + 1.0 / 16)}
#: FP8 attention over 16-bit on the same GPU: FlashAttention-3, 1.2 vs 0.74 PFLOP/s on H100
#: (Shah et al. 2024 §4.1).
FP8_ATTENTION_SPEEDUP = 1.2 / 0.74
#: NVFP4 keeps about 15 % of the linear layers in BF16 (arXiv 2509.25149 §4).
NVFP4_BF16_SHARE = 0.15


def members_per_domain(dims, domain_gpus):
    """Ranks of rank 0's group that sit in the first scale-up domain of ``domain_gpus``
    consecutive ranks; the group spans ``(degree, stride)`` dimensions of the row-major
    device mesh (fsdpsim.plan.layout)."""
    ranks = [0]
    for degree, stride in dims:
        ranks = [r + c * stride for r in ranks for c in range(degree)]
    return sum(r < domain_gpus for r in ranks)


def tp_local_shapes(shapes, tp, vocab_size, padded_vocab):
    """One TP rank's parameter shapes (Shoeybi et al. 2019 §3): column-parallel q, k, v,
    gate, up (weights and biases) split dim 0; row-parallel o and down weights split dim 1
    (their biases whole); the embedding and LM head split the padded vocabulary; norms and
    learned positions whole."""
    out = []
    for name, shape in shapes:
        if tp > 1 and name.startswith(("tok_emb", "lm_head")) and shape[0] == vocab_size:
            shape = (padded_vocab,) + tuple(shape[1:])
        leaf = name.split(".")[-2] if "." in name else name
        dim = (0 if leaf in ("q", "k", "v", "gate", "up", "tok_emb", "lm_head") else
               1 if leaf in ("o", "down") and name.endswith("weight") else None)
        if tp > 1 and dim is not None:
            if shape[dim] % tp:
                raise ConfigError(f"{name} {shape}: dim {dim} ({shape[dim]}) % tp({tp}) != 0; "
                                  "accepted: tp dividing it")
            shape = shape[:dim] + (shape[dim] // tp,) + shape[dim + 1:]
        out.append((name, shape))
    return out


def padded_numel(shapes, shard, flat=False):
    """Elements of one FSDP unit sharded ``shard`` ways: FSDP2 pads every parameter's dim 0
    to a multiple of the shard count (torch ``_fsdp_param.py``); FSDP1 (``flat``) flattens
    the unit into one FlatParameter and pads it once (torch ``_flat_param.py``)."""
    if flat:
        return float(math.ceil(sum(math.prod(sh) for _, sh in shapes) / shard) * shard)
    return float(sum(math.ceil((sh[0] if sh else 1) / shard) * shard
                     * math.prod(sh[1:]) for _, sh in shapes))


def gemm_peak_flops_per_s(acc, precision, bf16_layers, n_layers):
    """Dense peak of the linear layers' GEMMs [FLOP/s]: the catalog's peak for the format
    (fp8-block at FP8's; MXFP8 at FP8's on parts with microscaling tensor cores, those with
    an FP4 peak; NVFP4 at FP4's on NVIDIA), blended with the 16-bit peak for the share s of
    linear layers kept in BF16 (``bf16_layers`` / L; NVFP4's default 15 %):
    ``1 / ((1 − s)/P_format + s/P_bf16)`` (GEMM time of alike layers)."""
    peaks = acc.peak_flops_per_s
    sixteen = peaks.get("bf16") or peaks.get("fp16")
    if bf16_layers is not None and bf16_layers > n_layers:
        raise ConfigError(f"bf16_layers {bf16_layers} exceeds the model's {n_layers} layers; "
                          f"accepted: 0 to {n_layers}")
    if precision == "fp8-block":
        peak = acc.peak_for("fp8")
    elif precision == "mxfp8" and "mxfp8" not in peaks:
        if "fp4" not in peaks or "fp8" not in peaks:
            raise ConfigError(f"precision 'mxfp8' needs microscaling tensor cores; {acc.id} has: "
                              f"{', '.join(sorted(peaks))}")
        peak = peaks["fp8"]
    elif precision == "nvfp4":
        peak = peaks.get("nvfp4") or peaks.get("fp4")
        if peak is None or sixteen is None or acc.vendor.lower() != "nvidia":
            raise ConfigError(f"precision 'nvfp4' needs NVIDIA Blackwell FP4 tensor cores; "
                              f"{acc.id} has: {', '.join(sorted(peaks))}")
    else:
        peak = acc.peak_for(precision)
    share = ((NVFP4_BF16_SHARE if precision == "nvfp4" else 0.0) if bf16_layers is None
             else bf16_layers / n_layers)
    if share <= 0.0 or sixteen is None or precision not in LOW_PRECISION:
        return peak
    return 1.0 / ((1.0 - share) / peak + share / sixteen)


def rates(model, system, plan, training):
    """The catalog's rates and constants this reference reads, in SI units."""
    from fsdpsim.hardware.system import FRAGMENTED_FACTOR
    from fsdpsim.plan.frameworks import PROFILES, canonical, profile

    from fsdpsim.hardware.efficiency import resolve

    acc, eff, link, net = system.accelerator, system.accelerator.efficiency, system.link, \
        system.network
    # The GEMM and attention fractions of this GPU x precision class x the profile's kernel
    # stack (the catalog's [efficiency.<class>.<stack>] table, else the nearest stack's, else
    # the fallback; outside Transformer Engine the fused-attention fraction is FlashAttention's).
    stack = profile(plan.framework).kernel_stack
    fractions = resolve(acc, training.precision, stack).values
    lib = system.collectives.get(profile(plan.framework).collectives)
    if lib is None:  # the built-in catalog's release of the default profile
        from fsdpsim.hardware.catalog import load_catalog
        lib = load_catalog(use_env=False).collectives(PROFILES["fsdp2"].collectives)
    precision, peaks = training.precision, acc.peak_flops_per_s
    sixteen = peaks.get("bf16") or peaks.get("fp16")
    low = precision in LOW_PRECISION and sixteen is not None
    gemm_peak = gemm_peak_flops_per_s(acc, precision, training.bf16_layers, model.n_layers)
    peak = gemm_peak * system.compute_clock_ratio   # a power cap lowers the clock
    # MFU against the 16-bit dense peak for low-precision training (as published tables
    # state it); attention and the LM head stay in 16 bits unless switched to FP8.
    fp8_attention = min(sixteen * FP8_ATTENTION_SPEEDUP, peaks.get("fp8", sixteen)) if low else 0
    return {
        "peak_nominal": sixteen if low else acc.peak_for(precision), "gemm_peak": gemm_peak,
        "peak": peak, "low": precision in LOW_PRECISION,
        "attention_ratio": ((fp8_attention if training.fp8_attention else sixteen) / gemm_peak
                            if low else 1.0),
        "lm_head_ratio": 1.0 if not low or training.fp8_lm_head else sixteen / gemm_peak,
        "cast_scale": CAST_BYTES.get(precision, 4.0) / CAST_BYTES["fp8"],
        "R": peak * fractions["matmul_fraction"],
        "matmul_fraction": fractions["matmul_fraction"],
        "half_flops": eff.matmul_half_flops, "half_k": eff.matmul_half_k,
        "attn_fraction": fractions["attention_fraction"], "attn_half_kv": eff.attention_half_kv,
        "fused_attn_fraction": fractions["fused_attention_fraction"],
        "fused_attention": stack == "te",
        "megatron": profile(plan.framework).recipe == "megatron",
        "param_gather_overlap": canonical(plan.framework) == "megatron",
        "W": acc.hbm_bandwidth_bytes_per_s * eff.hbm_fraction,
        "link": link.bandwidth_bytes_per_s * eff.link_fraction,
        "nic": system.inter_node_bandwidth_bytes_per_s_per_gpu * system.inter_node_fraction,
        "nvlink": link.topology != "pcie", "mesh": link.topology == "mesh",
        "link_latency_s": link.latency_s, "nic_latency_s": system.inter_node_latency_s,
        "link_raw": link.bandwidth_bytes_per_s, "gpus_per_node": plan.gpus_per_node,
        "per_peer_link": link.per_peer_bandwidth_bytes_per_s or link.bandwidth_bytes_per_s,
        "decay": net.scale_decay_per_doubling if net else 0.0,
        "decay_from": net.scale_decay_from_nodes if net else 4.0,
        "decay_floor": net.scale_decay_floor if net else 1.0,
        "placement_factor": FRAGMENTED_FACTOR if system.placement == "fragmented" else 1.0,
        "kernel_overhead_s": eff.kernel_overhead_s, "sigma": eff.comm_compute_slowdown,
        "nccl": lib, "memory_bytes": acc.memory_bytes,
        "busbw_pins": dict(system.measured_busbw),      # [B/s] by BUSBW_COLUMNS name
        # an fp32 gradient accumulation pass after each backward (nanotron), bytes/parameter
        "accum_pass_bytes": profile(plan.framework).grad_accum_pass_bytes,
        # DDP buckets of 16-bit gradients, one reduction call each; ZeRO-1's reduce-scatter
        # beside the backward or after it (nanotron)
        "bucket_bytes": profile(plan.framework).grad_bucket_bytes,
        "zero1_overlap": profile(plan.framework).zero1_reduce_overlap,
        "flat_parameter": profile(plan.framework).flat_parameter,   # FSDP1's padding
        "reserved_bytes": acc.runtime_reserved_bytes,
        "allocator_fraction": acc.allocator_fraction,
    }

