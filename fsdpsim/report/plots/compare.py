"""Figures of a comparison (``fsdpsim compare`` / ``fsdpsim report``): one bar per row.

The companion of :mod:`fsdpsim.report.plots.sweep` (its figure and axis helpers, the same Agg
canvas, no pyplot state) for rows of :func:`fsdpsim.drivers.compare.sweep_frame`: sweep-style
columns, one row per hardware choice and GPU count. No number is computed here; each bar is a column
of the rows.

* :func:`throughput_bars` — tokens/s per GPU with the 90 % prediction range, MFU beside it.
* :func:`cost_bars` — cost and days to train the token budget (with failures), or cost and
  energy per million tokens without one.
* :func:`memory_bars` — peak memory per GPU against its capacity.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fsdpsim.util.errors import ConfigError
from fsdpsim.report.plots.axes import TEXT_PT
from fsdpsim.report.plots.axes import figure as _figure
from fsdpsim.report.plots.axes import finish as _finish
from fsdpsim.util.units import GIB_BYTES

#: The gid of the 90 % range whiskers (tests find them in the SVG).
RANGE_GID = "prediction-range"


def row_labels(frame: pd.DataFrame) -> list[str]:
    """``h100 × 64`` per row (with the model when the rows have several)."""
    many = frame["model"].nunique() > 1
    return [(f"{m} · " if many else "") + f"{h} × {int(n):,}"
            for m, h, n in zip(frame["model"], frame["hardware"], frame["plan.num_gpus"])]


def _bars(frame: pd.DataFrame, height_per_row: float = 0.45):
    if frame.empty:
        raise ConfigError("no row of the comparison has a prediction: nothing to draw")
    fig = _figure(8.0, 1.8 + height_per_row * len(frame))
    return fig, np.arange(len(frame)), row_labels(frame)


def _label_bars(ax, pos, values, texts) -> None:
    for p, v, t in zip(pos, values, texts):
        if np.isfinite(v):
            ax.text(v, p, f" {t}", va="center", fontsize=TEXT_PT)


def throughput_bars(frame: pd.DataFrame) -> "Figure":  # noqa: F821
    """Tokens/s per GPU of each row [tokens/s], whiskers at the 90 % prediction range
    (``interval.tokens_per_s_per_gpu_low/high``), the MFU written at the end of each bar."""
    fig, pos, labels = _bars(frame)
    ax = fig.add_subplot()
    tps = frame["tokens_per_s_per_gpu"].astype(float).to_numpy()
    lo = frame["interval.tokens_per_s_per_gpu_low"].astype(float).to_numpy()
    hi = frame["interval.tokens_per_s_per_gpu_high"].astype(float).to_numpy()
    fits = frame["fits"].astype(bool).to_numpy()
    ax.barh(pos, tps, color=np.where(fits, "#1f77b4", "#c7c7c7"), height=0.6)
    ax.errorbar(tps, pos, xerr=[tps - lo, hi - tps], fmt="none", ecolor="black", capsize=3,
                linewidth=1, gid=RANGE_GID)
    _label_bars(ax, pos, hi, [f"MFU {100 * m:.1f} %" + ("" if f else " (does not fit)")
                              for m, f in zip(frame["mfu"].astype(float), fits)])
    ax.set_xlim(0, 1.3 * float(np.nanmax(hi)))
    ax.set_yticks(pos, labels)
    ax.invert_yaxis()
    _finish(ax, "Throughput per GPU (whiskers: 90 % prediction range)",
            "tokens/s per GPU [tokens/s]", "hardware × GPUs")
    return fig


def cost_bars(frame: pd.DataFrame, tokens: float | None = None) -> "Figure":  # noqa: F821
    """With a token budget: the cost [USD] and wall time [days] to train it, failures
    included (``failures.train_cost_usd``, ``failures.train_time_s``); without: the cost [USD]
    and energy [kWh] per million tokens."""
    fig, pos, labels = _bars(frame)
    left, right = fig.subplots(1, 2, sharey=True)
    if tokens is not None:
        first = frame["failures.train_cost_usd"].astype(float).to_numpy() / 1e6
        second = frame["failures.train_time_s"].astype(float).to_numpy() / 86_400.0
        names = (("Cost to train{}, with failures", "cost [million USD]", "${:,.2f}M"),
                 ("Time to train{}, with failures", "wall time [days]", "{:,.1f} d"))
        title = f" {tokens / 1e12:g}T tokens"
    else:
        first = frame["cost_usd_per_million_tokens"].astype(float).to_numpy()
        second = frame["energy_kwh_per_million_tokens"].astype(float).to_numpy()
        names = (("Cost per million tokens{}", "cost [USD per million tokens]", "${:,.3f}"),
                 ("Energy per million tokens{}", "energy [kWh per million tokens]", "{:,.3f}"))
        title = ""
    for ax, values, (name, xlabel, fmt), colour in zip((left, right), (first, second), names,
                                                       ("#2ca02c", "#ff7f0e")):
        ax.barh(pos, np.nan_to_num(values), color=colour, height=0.6)
        _label_bars(ax, pos, values, [fmt.format(v) if np.isfinite(v) else "-" for v in values])
        top = np.nanmax(values) if np.isfinite(values).any() else 1.0
        ax.set_xlim(0, 1.4 * float(top))
        _finish(ax, name.format(title), xlabel, "")
    left.set_yticks(pos, labels)
    left.invert_yaxis()
    left.set_ylabel("hardware × GPUs")
    return fig


def memory_bars(frame: pd.DataFrame) -> "Figure":  # noqa: F821
    """Peak memory per GPU [GiB] of each row's plan, a black tick at the GPU's usable
    capacity (``memory.capacity_bytes``); red where it does not fit."""
    fig, pos, labels = _bars(frame)
    ax = fig.add_subplot()
    peak = frame["memory.peak_bytes"].astype(float).to_numpy() / GIB_BYTES
    cap = frame["memory.capacity_bytes"].astype(float).to_numpy() / GIB_BYTES
    ax.barh(pos, peak, color=np.where(peak <= cap, "#9467bd", "#d62728"), height=0.6,
            label="peak memory per GPU")
    ax.scatter(cap, pos, marker="|", s=400, color="black", zorder=3, label="capacity")
    _label_bars(ax, pos, np.maximum(peak, cap),
                [f"{p:,.0f} of {c:,.0f} GiB ({100 * p / c:.0f} %)" for p, c in zip(peak, cap)])
    ax.set_xlim(0, 1.45 * float(np.nanmax(np.maximum(peak, cap))))
    ax.set_yticks(pos, labels)
    ax.invert_yaxis()
    _finish(ax, "Memory per GPU: peak of the chosen plan against capacity",
            "memory per GPU [GiB]", "hardware × GPUs")
    # below the axes: inside, it covered the last bar's label
    fig.legend(loc="outside lower center", ncols=2, fontsize=TEXT_PT, framealpha=0.9)
    return fig


__all__ = ["throughput_bars", "cost_bars", "memory_bars", "row_labels", "RANGE_GID"]
