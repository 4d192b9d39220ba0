"""Selecting and summarising predicted measurement rows: rows of a framework, and the error
figures (MAPE, median, worst, bias) of ``fsdpsim validate`` overall and per group."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def by_framework(frame: pd.DataFrame, framework: str | None) -> pd.DataFrame:
    """Rows whose ``framework`` contains ``framework`` (case-insensitive); all rows for None.
    A file without a framework column counts as PyTorch FSDP (fsdpsim's own schema)."""
    if not framework:
        return frame
    names = frame["framework"] if "framework" in frame.columns else pd.Series(
        "PyTorch FSDP", index=frame.index)
    return frame[names.fillna("").astype(str).str.lower().str.contains(framework.lower(),
                                                                       regex=False)]


def summarise_groups(result: pd.DataFrame, column: str = "framework") -> dict[str, dict]:
    """:func:`summarise` per value of ``column`` (e.g. per framework)."""
    if column not in result.columns:
        return {}
    return {str(name): summarise(group) for name, group in result.groupby(column, sort=True)}


#: Groupings of the ``validate`` summary: name -> (columns whose values name a group, whether
#: only ``core`` rows count when the file marks a subset as core).
GROUPINGS = {"framework": (("framework",), False), "subset": (("subset",), False),
             "source": (("source_key",), False), "gpu": (("gpu",), False),
             "generation": (("generation", "precision_format"), True)}


def summarise_by(result: pd.DataFrame, by: str) -> dict[str, dict]:
    """:func:`summarise` per group of :data:`GROUPINGS` (e.g. ``generation``: GPU generation ×
    number format, over the ``core`` rows, MoE rows apart from dense ones); {} when the rows carry
    no such columns. A missing ``precision_format`` (fsdpsim's own schema, vTrain) is the compute
    precision."""
    columns, core_only = GROUPINGS[by]
    frame = result
    if core_only and "subset" in frame.columns and (frame["subset"] == "core").any():
        frame = frame[frame["subset"] == "core"]
    parts = []
    for column in columns:
        if column == "precision_format" and column not in frame.columns:
            column = "precision"
        if column not in frame.columns:
            return {}
        parts.append(frame[column].fillna("").astype(str))
    if frame.empty:
        return {}
    label = parts[0].str.cat(parts[1:], sep=" ") if len(parts) > 1 else parts[0]
    if by == "generation" and "moe" in frame.columns:  # dense and MoE rows apart
        label = label + np.where(frame["moe"].astype(bool), " MoE", "")
    return {name: summarise(group) for name, group in frame.groupby(label, sort=True)}


def summarise(result: pd.DataFrame) -> dict[str, float]:
    """MAPE, median and worst absolute error (fractions), and the row count; where the rows
    carry their 90 % ranges (``validate``, :mod:`fsdpsim.measured.ranges`), the coverage
    figures of :func:`coverage_summary` too (``coverage``, ``median_width``,
    ``coverage_out_of_sample`` and its ``rows_out_of_sample``)."""
    err = result["error"].abs()
    out = {"rows": int(len(result)), "mape": float(err.mean()),
           "median_ape": float(err.median()), "worst_ape": float(err.max()),
           "bias": float(result["error"].mean())}
    if "inside" in result.columns:
        cov = coverage_summary(result)
        out.update(coverage=cov["all"]["coverage"], median_width=cov["all"]["median_width"],
                   coverage_out_of_sample=cov["out_of_sample"]["coverage"],
                   rows_out_of_sample=cov["out_of_sample"]["rows"])
    return out


def coverage(frame: pd.DataFrame) -> dict[str, float]:
    """Share of rows whose measured value lies in the 90 % range, and the median relative width
    (high - low) / predicted; NaN for no rows."""
    if frame.empty or "inside" not in frame.columns:
        return {"coverage": float("nan"), "median_width": float("nan")}
    width = ((frame["predicted_high"] - frame["predicted_low"])
             / frame["predicted_tokens_per_s_per_gpu"]).astype(float)
    return {"coverage": float(frame["inside"].astype(bool).mean()),
            "median_width": float(width.median())}


def coverage_summary(frame: pd.DataFrame) -> dict[str, Any]:
    """:func:`coverage` over all rows, the out-of-sample rows and the in-sample ones, with
    their counts."""
    out: dict[str, Any] = {}
    parts = {"all": frame}
    if "in_sample" in frame.columns:
        parts["out_of_sample"] = frame[~frame["in_sample"].astype(bool)]
        parts["in_sample"] = frame[frame["in_sample"].astype(bool)]
    for name, part in parts.items():
        out[name] = {"rows": int(len(part)), **coverage(part)}
    return out


#: Rows a fit leaves out: subsets their file marks as doubtful or not pre-training, and the
#: block-scaled number formats, validated out of sample
#: (fsdpsim.measured.published.plan.UNFIT_FORMATS).
UNFIT_SUBSETS = ("doubtful", "finetune", "unusable")


def fit_rows(frame):
    """The rows a calibration may fit: no doubtful, fine-tuning or unusable subset, no
    block-scaled number format (MXFP8, NVFP4) and no mixture-of-experts model: a GPU's factors
    come from dense runs, and the MoE rows (whose model adds routing, dispatch and recipe
    settings) test them out of sample. Validation still reports all of them."""
    from fsdpsim.measured.published.plan import UNFIT_FORMATS

    import pandas as pd

    subset = frame["subset"] if "subset" in frame.columns else pd.Series("", index=frame.index)
    keep = ~subset.astype(str).isin(UNFIT_SUBSETS)
    if "precision_format" in frame.columns:
        keep &= ~frame["precision_format"].astype(str).isin(tuple(UNFIT_FORMATS))
    if "skip" in frame.columns:
        usable = keep & (frame["skip"] == "")
        moe = pd.Series(False, index=frame.index)
        if usable.any():  # (assigning an empty list to no rows fails in pandas)
            moe[usable] = _is_moe(frame[usable])
        keep &= ~moe
    return frame[keep]


def _is_moe(frame):
    """Whether each row's model (:func:`fsdpsim.measured.rows.spec_for_row`) is a mixture of
    experts, the model built once per group of equal model cells
    (:data:`fsdpsim.measured.rows.SPEC_COLUMNS`, :func:`fsdpsim.measured.grid.group_ids`)."""
    from fsdpsim.measured import grid
    from fsdpsim.measured.rows import SPEC_COLUMNS, spec_for_row

    group = grid.group_ids(frame, [c for c in SPEC_COLUMNS if c in frame.columns])
    first = grid.first_positions(group)
    row_at = grid.rows_of(frame.iloc[first])  # each group's first row, in group order
    moe = [spec_for_row(row_at(g)).is_moe for g in range(first.size)]
    return [moe[g] for g in group.tolist()]
