"""The dense peaks a precision runs at [FLOP/s]: the linear layers' GEMMs (block-scaled and
FP4 formats, the layers a low-precision recipe keeps in BF16), attention's and the LM head's
peak relative to them, and the peak MFU and HFU are measured against. Read by
:func:`fsdpsim.engine.build.system_inputs`."""

from __future__ import annotations

from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import LOW_PRECISION, TrainingConfig
from fsdpsim.util.errors import ConfigError

#: The NVFP4 recipe keeps about 15 % of the linear layers (most of them at the end of the
#: network) in BF16 (NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv 2509.25149,
#: §4: "selective high-precision layers").
NVFP4_BF16_LINEAR_SHARE = 0.15


def _sixteen_bit_peak(acc) -> float | None:
    return acc.peak_flops_per_s.get("bf16") or acc.peak_flops_per_s.get("fp16")


def bf16_linear_share(spec: ModelSpec, training: TrainingConfig) -> float | None:
    """Share of the linear layers a low-precision recipe keeps in BF16: the training's
    ``bf16_layers`` of the model's layers (layers are alike); None where not given (the
    format's default, :func:`gemm_peak_flops_per_s`). More layers than the model has: one
    clear error."""
    if training.bf16_layers is None:
        return None
    if training.bf16_layers > spec.n_layers:
        raise ConfigError(f"bf16_layers {training.bf16_layers} exceeds the model's "
                          f"{spec.n_layers} layers; accepted: 0 to {spec.n_layers}")
    return training.bf16_layers / spec.n_layers


def gemm_peak_flops_per_s(acc, precision: str, bf16_share: float | None = None) -> float:
    """Dense peak of the linear layers' GEMMs in ``precision`` [FLOP/s]; a clear error where the
    part lacks the format. ``bf16_share``: the share of linear layers the recipe keeps in BF16
    (Megatron's ``first_last_layers_bf16``), blended as below; None: the format's default
    (:data:`NVFP4_BF16_LINEAR_SHARE` for NVFP4, none otherwise).

    * MXFP8 (1×32 E8M0 block scales) runs at the FP8 rate on parts with microscaling tensor
      cores (NVIDIA Blackwell: "MXFP8 ... at the same rate as FP8", Blackwell architecture
      technical brief; AMD CDNA 4): those with an FP4 peak in the catalog, unless the catalog
      gives an ``mxfp8`` peak of its own.
    * NVFP4 (NVIDIA Blackwell only) runs at the FP4 peak.
    * A low-precision format's share ``s`` of linear layers in BF16: the GEMM time of the
      blend, ``1 / ((1 − s)/P_format + s/P_bf16)``, as layers are alike.
    * FP8 with DeepSeek-V3's fine-grained block scaling (``fp8-block``) at the FP8 peak (the
      per-block FP32 promotion is not charged).
    * Otherwise the catalog's peak for ``precision``.
    """
    peak = _format_peak_flops_per_s(acc, precision)
    share = (NVFP4_BF16_LINEAR_SHARE if precision == "nvfp4" else 0.0) if bf16_share is None \
        else float(bf16_share)
    sixteen = _sixteen_bit_peak(acc)
    if share <= 0.0 or sixteen is None or precision not in LOW_PRECISION:
        return peak
    return 1.0 / ((1.0 - share) / peak + share / sixteen)


def _format_peak_flops_per_s(acc, precision: str) -> float:
    """:func:`gemm_peak_flops_per_s` before the BF16 layers' blend."""
    peaks = acc.peak_flops_per_s
    if precision == "fp8-block":
        return acc.peak_for("fp8")
    if precision == "mxfp8":
        if "mxfp8" in peaks:
            return peaks["mxfp8"]
        if "fp4" not in peaks or "fp8" not in peaks:
            raise ConfigError(f"precision 'mxfp8' needs microscaling tensor cores (Blackwell, "
                              f"CDNA 4); {acc.id} has: {', '.join(sorted(peaks))}")
        return peaks["fp8"]
    if precision == "nvfp4":
        fp4 = peaks.get("nvfp4") or peaks.get("fp4")
        sixteen = _sixteen_bit_peak(acc)
        if fp4 is None or sixteen is None or acc.vendor.lower() != "nvidia":
            raise ConfigError(f"precision 'nvfp4' needs NVIDIA Blackwell FP4 tensor cores; "
                              f"{acc.id} has: {', '.join(sorted(peaks))}")
        return fp4
    return acc.peak_for(precision)


def mfu_peak_flops_per_s(acc, precision: str) -> float:
    """The dense peak MFU and HFU are measured against [FLOP/s]: the precision's own peak, but
    for low-precision training (FP8, MXFP8, NVFP4) the 16-bit (BF16, else FP16) dense peak, as
    published MFU tables state it (e.g. NVIDIA's Megatron-Core and NeMo performance summaries);
    the format's own peak's utilisation is reported beside it (``mfu_native``)."""
    if precision in LOW_PRECISION:
        sixteen = _sixteen_bit_peak(acc)
        if sixteen:
            return float(sixteen)
    return acc.peak_for(precision)


def attention_peak_ratio(acc, precision: str, fp8: bool = False,
                          bf16_share: float | None = None) -> float:
    """Attention's peak relative to the GEMMs' [-]: low-precision training (Transformer
    Engine's ``fp8_autocast`` with a per-tensor, MXFP8 or NVFP4 recipe) runs the GEMMs of its
    linear layers in the format while attention stays in the 16-bit type (TE user guide, "Using
    FP8 with Transformer Engine"; arXiv 2509.25149 §4 for NVFP4); other precisions: 1. The
    LM head's GEMMs, outside the autocast in Megatron-Core and filtered out in torchtitan, run
    at the same 16-bit peak (``lm_head_peak_ratio``). With
    ``fp8`` (attention in FP8 too, ``fp8_dot_product_attention``) the 16-bit peak times the
    measured FP8 attention speed-up (:data:`fsdpsim.costs.compute.FP8_ATTENTION_SPEEDUP`), at
    most the FP8 peak."""
    from fsdpsim.costs.compute import FP8_ATTENTION_SPEEDUP

    if precision not in LOW_PRECISION:
        return 1.0
    sixteen = _sixteen_bit_peak(acc)
    if not sixteen:
        return 1.0
    if fp8:
        fp8_peak = acc.peak_flops_per_s.get("fp8", sixteen)
        return min(sixteen * FP8_ATTENTION_SPEEDUP, fp8_peak) / gemm_peak_flops_per_s(
            acc, precision, bf16_share)
    return sixteen / gemm_peak_flops_per_s(acc, precision, bf16_share)
