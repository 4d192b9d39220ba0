"""Achievable fractions per GPU x precision x kernel stack, with their ceilings and provenance.

An accelerator's ``[accelerator.efficiency]`` table holds one set of fractions. Where they are
split (catalog shape, validated by :mod:`fsdpsim.hardware.catalog_schema`)::

    [accelerator.efficiency]           # the fallback for every precision and stack
    matmul_fraction = 0.8533
    stack = "te"                       # optional: what the fractions above were fitted on
    precision = "fp8"
    ...
    [accelerator.efficiency.bf16]      # 16-bit GEMMs (bf16, fp16): the physical ceiling
    matmul_ceiling = 0.803             # best-shape GEMM / dense peak (MAMF)
    ceiling_source = "..."
    [accelerator.efficiency.bf16.pytorch]  # one kernel stack's fractions for 16-bit training
    matmul_fraction = 0.70
    source = "..."

Precision classes (:data:`PRECISION_CLASSES`): ``bf16`` (16-bit GEMMs) and ``fp8`` (8/6/4-bit
GEMMs: FP8 per-tensor or blockwise, MXFP8, NVFP4). A low-precision class's fractions apply to
the GEMMs of that recipe as a whole (the linear layers in the format and the BF16 ones it keeps,
the LM head: the rows that fit them run both).

Kernel stacks (:data:`KERNEL_STACKS`) belong to the framework profile
(:attr:`fsdpsim.plan.frameworks.Framework.kernel_stack`): ``te`` (Megatron-Core / NeMo: Transformer
Engine GEMMs and cuDNN fused attention), ``pytorch`` (PyTorch eager or torch.compile:
torchtitan, FSDP users, nanotron, InternEvo; cuBLAS / hipBLASLt via ``torch.matmul``,
FlashAttention-2 through SDPA or flash-attn), ``deepspeed`` (DeepSpeed's engine on PyTorch
GEMMs), ``megatron-lm`` (Megatron-LM before Transformer Engine: apex fused kernels, cuBLAS).
On AMD parts the same names mean the ROCm builds of those stacks.

Resolution of (stack S, class C) (:func:`resolve`): the ``[efficiency.C.S]`` table if there is
one; else the nearest stack with a ``C`` table (:data:`NEAREST_STACKS`), *transferred*; else
the fallback table, transferred where it declares another (stack, precision) it was fitted on.
A fallback that declares nothing keeps today's meaning (no note, no wider range). A stack table
that carries another GPU's fit (``scaled_from``: a literature value, that GPU's fitted share of
its MAMF ceiling times this GPU's ceiling) is transferred too. A transferred triple is named in
``predict``'s notes and widens the prediction interval (:data:`TRANSFER_UNCERTAINTY`, or
:data:`SCALED_UNCERTAINTY` for another GPU's fit).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from fsdpsim.hardware.catalog_schema import KERNEL_STACKS, UNCALIBRATED_INTERVAL
from fsdpsim.hardware.spec import FitSpan
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.memo import by_identity

#: Precision class -> the training precisions whose GEMMs it covers.
PRECISION_CLASSES: dict[str, tuple[str, ...]] = {
    "bf16": ("bf16", "fp16"),
    "fp8": ("fp8", "fp8-block", "mxfp8", "nvfp4", "fp4"),
}
#: Where a stack's fractions come from when a GPU has none for it, nearest first: DeepSpeed and
#: Megatron-LM run the same cuBLAS GEMMs that PyTorch calls; Transformer Engine's GEMMs are
#: cuBLASLt too, but its attention is cuDNN's fused kernel (closest to Megatron-LM's stack).
NEAREST_STACKS: dict[str, tuple[str, ...]] = {
    "pytorch": ("deepspeed", "megatron-lm", "te"),
    "deepspeed": ("pytorch", "megatron-lm", "te"),
    "megatron-lm": ("pytorch", "deepspeed", "te"),
    "te": ("megatron-lm", "pytorch", "deepspeed"),
}
#: Keys a stack table may set (each replaces the fallback table's).
STACK_KEYS = ("matmul_fraction", "attention_fraction", "fused_attention_fraction",
              "throughput_ratio_p05", "throughput_ratio_p95", "scaled_from")
FRACTION_KEYS = STACK_KEYS[:3]
#: Relative spread added to both ends of the 90 % range of a triple transferred from another
#: stack of the same GPU: the gap between the two fitted stacks of one GPU here, H100's PyTorch
#: BF16 GEMMs at 0.823 of their MAMF ceiling (0.6609 / 0.803, nanotron rows) against Transformer
#: Engine FP8 at 0.940 of its (0.6667 / 0.709): 1 - 0.823 / 0.940 = 0.125 (docs/accuracy.md,
#: "Efficiency per GPU x precision x kernel stack").
TRANSFER_UNCERTAINTY = 0.125
#: The same for a table carrying another GPU's fit (``scaled_from``): what the GPU's best GEMM
#: alone moves with its software stack, MI300X's MAMF ~450 TFLOP/s under ROCm 6.1's default
#: kernels against 668.4 under ROCm 6.3 with TunableOp (hardware.md §6.1): 1 - 450 / 668.4 =
#: 0.33. A GPU without runs of its own may reach either.
SCALED_UNCERTAINTY = 0.33


def precision_class(precision: str) -> str | None:
    """The class (``bf16`` or ``fp8``) of a training precision; None for fp32/tf32."""
    for name, members in PRECISION_CLASSES.items():
        if precision in members:
            return name
    return None


@dataclass(frozen=True)
class Resolved:
    """The fractions one (GPU, precision, stack) runs at, and where they come from."""

    gpu: str
    stack: str
    precision_class: str | None
    values: Mapping[str, float]
    """``matmul_fraction``, ``attention_fraction``, ``fused_attention_fraction`` (the engine
    uses the fused one under Megatron's recipe; outside the ``te`` stack it is the
    FlashAttention-2 fraction: DeepSpeed, InternEvo and Megatron-LM before Transformer Engine
    run flash-attn or their own kernels, not cuDNN's fused attention)."""
    source: str
    from_triple: tuple[str, str] | None = None
    """(stack, class) the values were transferred from; None = the triple's own."""
    interval: tuple[float, float] | None = None
    """5-95 % measured/predicted of the table used; None = the fallback table's."""
    calibrated: bool = True
    """False where the table used states no cross-validated range (literature values)."""
    table: str | None = None
    """The stack table used (``[efficiency.<class>.<table>]``); None = the fallback table."""
    ceiling: float | None = None
    """Best-shape GEMM / dense peak for this class (MAMF), when the catalog gives one."""
    ceiling_source: str = ""
    scaled_from: str | None = None
    """The GPU whose fit the table's fractions carry (a literature table's ``scaled_from``)."""
    fit_span: FitSpan | None = None
    """The scale of the runs the table used was fitted on; None = not recorded."""

    @property
    def transferred(self) -> bool:
        return self.from_triple is not None or self.scaled_from is not None

    @property
    def uncertainty(self) -> float:
        """The relative widening of both ends of the range: 0 for a triple's own table."""
        if self.scaled_from is not None:
            return SCALED_UNCERTAINTY
        return TRANSFER_UNCERTAINTY if self.from_triple is not None else 0.0

    def notes(self) -> list[str]:
        """``predict``'s notes: the transfer, and a fraction above its measured ceiling."""
        out = []
        triple = f"({self.stack}, {self.precision_class or 'fallback'})"
        if self.from_triple is not None:
            out.append(f"{self.gpu}: no calibration for stack x precision {triple}; GEMM and "
                       f"attention fractions transferred from ({self.from_triple[0]}, "
                       f"{self.from_triple[1]}) (matmul_fraction "
                       f"{self.values['matmul_fraction']:.3g}); range widened by "
                       f"{100 * TRANSFER_UNCERTAINTY:.0f} %")
        elif self.scaled_from is not None:
            out.append(f"{self.gpu}: no calibration for stack x precision {triple} on this GPU; "
                       f"matmul_fraction {self.values['matmul_fraction']:.3g} carries "
                       f"{self.scaled_from}'s fit, scaled by the two GPUs' best-shape GEMM "
                       f"ceilings (a literature value); range widened by "
                       f"{100 * SCALED_UNCERTAINTY:.0f} %")
        if self.ceiling is not None and self.values["matmul_fraction"] > self.ceiling:
            out.append(f"{self.gpu}: matmul_fraction {self.values['matmul_fraction']:.3g} for "
                       f"{triple} is above the measured best-shape GEMM ceiling "
                       f"{self.ceiling:.3g} ({self.ceiling_source}): the fit absorbs other "
                       "terms of the model")
        return out


#: Catalog keys of a fitted table's span (:class:`fsdpsim.hardware.spec.FitSpan`), in field order.
FIT_SPAN_KEYS = ("fit_gpus_min", "fit_gpus_max", "fit_params_min", "fit_params_max")


def fit_span_of(table: Mapping[str, Any], where: str = "") -> FitSpan | None:
    """The :class:`fsdpsim.hardware.spec.FitSpan` an efficiency table records: all four
    :data:`FIT_SPAN_KEYS` or none (None); given in part, or a minimum above its maximum, one
    clear error naming ``where``."""
    given = [k for k in FIT_SPAN_KEYS if k in table]
    if not given:
        return None
    if len(given) < len(FIT_SPAN_KEYS):
        missing = ", ".join(k for k in FIT_SPAN_KEYS if k not in table)
        raise ConfigError(f"{where}: a fit's span needs all of {', '.join(FIT_SPAN_KEYS)}; "
                          f"missing {missing}")
    span = FitSpan(*(int(table[k]) for k in FIT_SPAN_KEYS))
    if span.gpus_min > span.gpus_max or span.params_min > span.params_max:
        raise ConfigError(f"{where}: fit_gpus_min/max {span.gpus_min}/{span.gpus_max}, "
                          f"fit_params_min/max {span.params_min}/{span.params_max}: a minimum "
                          "above its maximum")
    return span


def check_tables(e: Mapping[str, Any], where: str) -> None:
    """One clear line for a split efficiency table the schema alone cannot judge: a stack table
    without a source or without any fraction, a fallback ``stack``/``precision`` given alone,
    a fit's span given in part (:func:`fit_span_of`)."""
    fit_span_of(e, f"{where} [efficiency]")
    if ("stack" in e) != ("precision" in e):
        raise ConfigError(f"{where} [efficiency]: 'stack' and 'precision' (what its fractions "
                          "were fitted on) go together; give both or neither")
    for cls in PRECISION_CLASSES:
        for stack, table in (e.get(cls) or {}).items():
            if not isinstance(table, Mapping):
                continue
            at = f"{where} [efficiency.{cls}.{stack}]"
            if "source" not in table:
                raise ConfigError(f"{at}: missing required key 'source' (where its fractions "
                                  "come from: a fit's command, or the literature)")
            if not any(k in table for k in FRACTION_KEYS):
                raise ConfigError(f"{at}: sets no fraction; accepted: "
                                  f"{', '.join(FRACTION_KEYS)}")
            fit_span_of(table, at)


def tables_of(e: Mapping[str, Any]) -> Mapping[str, Any]:
    """The split part of a validated ``[efficiency]`` table, read-only (for
    :class:`fsdpsim.hardware.spec.Efficiency`)."""
    out = {}
    for cls in PRECISION_CLASSES:
        if cls in e:
            out[cls] = MappingProxyType({k: (MappingProxyType(dict(v)) if isinstance(v, Mapping)
                                             else v) for k, v in e[cls].items()})
    if "stack" in e:
        out["fitted_on"] = (e["stack"], e["precision"])
    return MappingProxyType(out)


def resolve(acc, precision: str, stack: str) -> Resolved:
    """The fractions of ``acc`` (an :class:`fsdpsim.hardware.spec.Accelerator`) for ``precision``
    under kernel stack ``stack`` (module docstring: resolution order); computed once per
    accelerator object, precision and stack (an Accelerator is frozen, a Resolved too)."""
    return by_identity(_RESOLVED, acc, (precision, stack),
                       lambda: _resolve(acc, precision, stack))


#: (accelerator, its fractions) by (id(accelerator), precision, stack) (:func:`by_identity`).
_RESOLVED: dict[tuple[int, str, str], tuple[Any, Resolved]] = {}


def _resolve(acc, precision: str, stack: str) -> Resolved:
    """:func:`resolve`, computed."""
    eff = acc.efficiency
    tables = eff.tables
    base = {"matmul_fraction": eff.matmul_fraction,
            "attention_fraction": eff.attention_fraction,
            "fused_attention_fraction": (eff.attention_fraction
                                         if eff.fused_attention_fraction is None
                                         else eff.fused_attention_fraction)}
    if stack != "te":  # cuDNN fused attention is Transformer Engine's; the others run FA2
        base["fused_attention_fraction"] = base["attention_fraction"]
    cls = precision_class(precision)
    table = tables.get(cls, {}) if cls else {}
    ceiling = table.get("matmul_ceiling")
    common = dict(gpu=acc.id, stack=stack, precision_class=cls, ceiling=ceiling,
                  ceiling_source=table.get("ceiling_source", ""))
    for candidate in (stack,) + NEAREST_STACKS.get(stack, ()):
        chosen = table.get(candidate)
        if isinstance(chosen, Mapping):
            values = {**base, **{k: chosen[k] for k in FRACTION_KEYS if k in chosen}}
            if stack != "te":
                values["fused_attention_fraction"] = values["attention_fraction"]
            own_range = "throughput_ratio_p05" in chosen and "throughput_ratio_p95" in chosen
            interval = ((chosen["throughput_ratio_p05"], chosen["throughput_ratio_p95"])
                        if own_range else UNCALIBRATED_INTERVAL)
            return Resolved(values=MappingProxyType(values), source=chosen["source"],
                            from_triple=None if candidate == stack else (candidate, cls),
                            interval=interval, calibrated=own_range, table=candidate,
                            scaled_from=chosen.get("scaled_from"),
                            fit_span=fit_span_of(chosen), **common)
    fitted_on = tables.get("fitted_on")
    own = fitted_on is None or (fitted_on[0] == stack and fitted_on[1] == cls)
    return Resolved(values=MappingProxyType(base), source=eff.source,
                    from_triple=None if own else tuple(fitted_on), calibrated=eff.calibrated,
                    fit_span=eff.fit_span, **common)
