"""The parallel layout of a published run: degrees, schedule and the framework's defaults.

:func:`read_layout` turns the layout cells of a published row (``tp``, ``pp``, ``cp``, ``dp``,
``vpp``, ``sequence_parallel``) into the plan columns of fsdpsim's measurement schema. What the
row leaves unstated comes from the conventions of the framework it names
(:data:`fsdpsim.measured.published.conventions.FRAMEWORK_CONVENTIONS`), or stays ``auto`` (the
number of interleaved model chunks); the row's ``modelled_as`` notes say where it is modelled by
something close to, but not exactly, what ran. A layout that does not multiply to the GPU count is a
skip reason, never a guess.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from fsdpsim.measured.published.conventions import (FRAMEWORK_CONVENTIONS,  # noqa: F401
                                                    framework_conventions)
from fsdpsim.util.numbers import number_in_text

#: GPU generation (architecture) by catalog id family, for error summaries per generation.
GENERATIONS = {"v100": "Volta", "a100": "Ampere", "h100": "Hopper", "h200": "Hopper",
               "gh200": "Hopper", "b200": "Blackwell", "b300": "Blackwell",
               "gb200": "Blackwell", "gb300": "Blackwell", "mi250x": "CDNA2", "mi300x": "CDNA3",
               "mi325x": "CDNA3", "mi355x": "CDNA4", "l4": "Ada", "l40s": "Ada"}

#: Block-scaled formats, modelled as themselves (:func:`fsdpsim.engine.peaks.gemm_peak_flops_per_s`:
#: MXFP8 at the FP8 rate, NVFP4 at the FP4 rate with the recipe's BF16 layers) and validated,
#: but not fitted: a calibration's factors come from the FP8/BF16/FP16 rows, so these rows test
#: the formats' model out of sample.
UNFIT_FORMATS = {"mxfp8": "MXFP8", "nvfp4": "NVFP4"}


def gpu_generation(gpu: str) -> str:
    """"Hopper" for ``h100-sxm5-80gb`` (or an unmatched name such as "GB300"); "other" if
    unknown."""
    family = re.split(r"[^a-z0-9]", gpu.strip().lower())[0] if gpu else ""
    return GENERATIONS.get(family, "other")


def precision_format(text: str, compute: str) -> str:
    """The number format a precision text names: nvfp4, mxfp8 (MXFP8, NeMo's "FP8-MX", 32x32
    block scaling), or else the compute precision (fp8 covers per-tensor and blockwise
    scaling)."""
    low = text.lower()
    if "fp4" in low:
        return "nvfp4"
    if "mxfp8" in low or "fp8-mx" in low or "32x32" in low:
        return "mxfp8"
    return compute


def _number(value: Any) -> float:
    return number_in_text(value)  # ASCII digits only; NaN beyond float range


def _whole(value: float) -> bool:
    return bool(np.isfinite(value) and value >= 1 and value == int(value) and value < 2**31)


def _yes_no(text: str) -> bool | None:
    low = text.strip().lower()
    if re.match(r"(yes|true|on)\b", low):
        return True
    if re.match(r"(no|false|off)\b", low):
        return False
    return None


def read_layout(r, columns, n_gpus: int, n_layers: int | None,
                conventions: dict[str, Any]) -> tuple[dict[str, Any], list[str], str]:
    """(plan columns, ``modelled_as`` notes, skip reason) of one published row.

    A missing ``tp``/``pp``/``cp`` column means no such parallelism; an empty cell means "not
    stated". One unstated degree is derived from the stated ``dp`` (``n_gpus = dp·tp·pp·cp``);
    a stated ``dp`` that does not multiply with the others to the GPU count is a skip reason.
    ``vpp``: a number is the model chunks per pipeline rank; "interleaved" without a number (or a
    framework whose schedule is interleaved) is ``auto``; unstated is 1 (plain 1F1B).
    """
    notes: list[str] = []
    degrees = {k: (_number(r.get(k)) if k in columns else 1.0) for k in ("tp", "pp", "cp")}
    dp = _number(r.get("dp"))
    dp = dp if np.isfinite(dp) and dp > 0 else float("nan")
    unstated = [k for k, v in degrees.items() if v != v]
    if len(unstated) == 1 and dp == dp:
        name = unstated[0]
        known = dp * np.prod([v for k, v in degrees.items() if k != name])
        derived = n_gpus / known
        if _whole(derived):
            degrees[name] = derived
            notes.append(f"{name} {int(derived)} derived: n_gpus / (dp x the other degrees)")
            unstated = []
    if unstated:
        return {}, notes, "parallel layout (tp/pp/cp) not stated"
    bad = [f"{k} {v:g}" for k, v in degrees.items() if not _whole(v)]
    if bad:
        return {}, notes, f"parallel degree(s) {', '.join(bad)} not whole numbers >= 1"
    tp, pp, cp = (int(degrees[k]) for k in ("tp", "pp", "cp"))
    if n_gpus % (tp * pp * cp):
        return {}, notes, (f"tp({tp}) * pp({pp}) * cp({cp}) does not divide "
                           f"n_gpus({n_gpus})")
    if dp == dp and dp * tp * pp * cp != n_gpus:
        return {}, notes, (f"layout dp({dp:g}) * tp({tp}) * pp({pp}) * cp({cp}) = "
                           f"{dp * tp * pp * cp:g} != n_gpus({n_gpus})")
    vpp_text = "" if r.get("vpp") is None else str(r.get("vpp")).lower()
    vpp_cell = _number(r.get("vpp"))
    vpp: int | str = 1
    if pp > 1 and _whole(vpp_cell):
        vpp = int(vpp_cell)
    elif pp > 1 and ("interleav" in vpp_text or conventions.get("interleaved")):
        vpp = "auto"
        notes.append("interleaved schedule, model chunks not stated: auto")
    layout: dict[str, Any] = {
        "tp": tp, "pp": pp, "cp": cp, "vpp": vpp,
        "pp_schedule": "interleaved" if vpp == "auto" or vpp > 1 else "",
        "sequence_parallel": False, "pp_first_layers": float("nan"),
        "pp_last_layers": float("nan")}
    stated_sp = _yes_no("" if r.get("sequence_parallel") is None
                        else str(r.get("sequence_parallel")))
    layout["sequence_parallel"] = tp > 1 and (
        stated_sp if stated_sp is not None else bool(conventions.get("sequence_parallel")))
    return layout, notes, ""
