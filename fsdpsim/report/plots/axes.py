"""Shared drawing pieces of the figures (:mod:`fsdpsim.report.plots.sweep`,
:mod:`fsdpsim.report.plots.procurement`): the Agg figure, titles and labels, round ticks on log
axes, legends, label collisions.

Matplotlib is imported by these three modules only, never through pyplot.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fsdpsim.report.plots import data

Rows = pd.DataFrame | Mapping[str, Any]

TITLE_PT, LABEL_PT, TEXT_PT = 11, 10, 9
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
#: The gid of the uncertainty bands (tests find them in the SVG).
BAND_GID = "uncertainty-band"


def figure(width: float = 7.5, height: float = 4.8) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def finish(ax, title: str, xlabel: str, ylabel: str, subtitle: str = "") -> None:
    ax.set_title(title + (f"\n{subtitle}" if subtitle else ""), fontsize=TITLE_PT)
    ax.set_xlabel(xlabel, fontsize=LABEL_PT)
    ax.set_ylabel(ylabel, fontsize=LABEL_PT)
    ax.tick_params(which="both", labelsize=TEXT_PT)
    ax.grid(True, which="major", alpha=0.3)


def num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}"


def params(v: float) -> str:
    """1e9 → "1B", 7e10 → "70B", 1e12 → "1T"."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:g}"


def log_ticks(lo: float, hi: float, max_ticks: int = 8) -> list[float]:
    """Round values on a log axis from ``lo`` to ``hi``: decades when four or more fit (every
    other one when too many), else the coarsest of 1-2-5, 1-2-3-5, ... with three or more."""
    e0, e1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))

    def within(mantissas):
        return [m * 10.0**e for e in range(e0, e1 + 1) for m in mantissas
                if lo * (1 - 1e-9) <= m * 10.0**e <= hi * (1 + 1e-9)]

    decades = within((1,))
    if len(decades) >= 4:
        return decades[::math.ceil(len(decades) / max_ticks)]
    for mantissas in ((1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9)):
        values = within(mantissas)
        if 3 <= len(values) <= max_ticks:
            return values
    return decades if len(decades) >= 2 else [lo, hi]


def log_axis(axis, values, fmt=num, ticks: Sequence[float] | None = None,
              max_ticks: int | None = None) -> None:
    """Log scale on ``axis`` with labelled round ticks and no minor labels (at most 8 ticks
    across, 10 up)."""
    max_ticks = max_ticks or (8 if axis.axis_name == "x" else 10)
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    (axis.axes.set_xscale if axis.axis_name == "x" else axis.axes.set_yscale)("log")
    if ticks is None and values.size:
        lo, hi = float(values.min()), float(values.max())
        # Round values a little beyond the data: the axis margins show them.
        ticks = log_ticks(lo / 1.3, hi * 1.3, max_ticks)
        # The view: matplotlib's 5 % margins in log space (10 % around a single value).
        spread = hi / lo if hi > lo else 1.1 ** 20
        view = (lo * spread ** -0.05, hi * spread ** 0.05)
        if spread < 10 and sum(view[0] <= t <= view[1] for t in ticks) < 3:
            # Less than a decade and fewer than three round log ticks in view (one GPU's
            # sequence ceiling showed none): evenly spaced round values in the view, which
            # is fixed so that they are the ones shown.
            ticks = [t for t in ticker.MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10])
                     .tick_values(*view) if view[0] <= t <= view[1]]
            (axis.axes.set_xlim if axis.axis_name == "x" else axis.axes.set_ylim)(view)
    if ticks is not None:
        axis.set_major_locator(ticker.FixedLocator(list(ticks)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: fmt(v)))
    axis.set_minor_formatter(ticker.NullFormatter())


def powers_of_two(values, max_ticks: int = 11) -> list[float]:
    values = np.asarray(values, dtype=float)
    lo, hi = math.floor(math.log2(values.min())), math.ceil(math.log2(values.max()))
    step = max(1, math.ceil((hi - lo + 1) / max_ticks))
    return [2.0**k for k in range(lo, hi + 1, step)]


def constants(rows: pd.DataFrame, columns: Sequence[str]) -> str:
    """The given columns that have one value in ``rows``, as ``seq 4,096 · 512 GPUs``."""
    parts = []
    for c in columns:
        if c in rows and len(rows) and rows[c].map(data._text).nunique() == 1:
            text = data._fmt_value(c, rows[c].iloc[0])
            if text:
                parts.append(text)
    return " · ".join(parts)


#: Where :func:`hide_overlaps` tries a label, in order: offset from its point [points] and
#: horizontal alignment (above right, below right, above left, below left; then a line
#: further out each way).
LABEL_SPOTS = (((7, 5), "left"), ((7, -12), "left"), ((-7, 5), "right"), ((-7, -12), "right"),
               ((7, 16), "left"), ((-7, 16), "right"), ((7, -23), "left"), ((-7, -23), "right"),
               ((7, 27), "left"), ((-7, 27), "right"), ((7, -34), "left"), ((-7, -34), "right"))


def hide_overlaps(fig: Figure, texts, ax=None, over_markers: int = 0) -> None:
    """Place each annotation (in order) at the first of :data:`LABEL_SPOTS` around its point,
    starting from where it was put, that overlaps no earlier label and no legend of the figure
    and (given ``ax``) stays inside ``ax``'s plotting area and covers none of its scatter
    markers (the first ``over_markers`` labels may: the ones that must be shown); hide it where
    no spot does."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    kept = [lg.get_window_extent(renderer) for lg in fig.legends]
    kept += [a.get_legend().get_window_extent(renderer) for a in fig.axes if a.get_legend()]
    area = ax.get_window_extent(renderer) if ax is not None else None
    points = np.empty((0, 2))
    if ax is not None:  # the markers of the axes' scatter plots: a label should not cover one
        from matplotlib.collections import PathCollection

        points = np.concatenate([points] + [c.get_offset_transform().transform(c.get_offsets())
                                            for c in ax.collections
                                            if isinstance(c, PathCollection)])
    pad_px = 3.0 * fig.dpi / 72.0  # about a marker's radius

    def free(box, markers: bool) -> bool:
        inside = area is None or (area.x0 <= box.x0 and box.x1 <= area.x1
                                  and area.y0 <= box.y0 and box.y1 <= area.y1)
        covers = ((points[:, 0] > box.x0 - pad_px) & (points[:, 0] < box.x1 + pad_px)
                  & (points[:, 1] > box.y0 - pad_px) & (points[:, 1] < box.y1 + pad_px))
        return (inside and not (markers and covers.any())
                and not any(box.overlaps(k) for k in kept))

    for i, t in enumerate(texts):
        spots = [(t.get_position(), t.get_horizontalalignment())] + list(LABEL_SPOTS)
        for offset, align in spots:
            t.set_position(offset)
            t.set_horizontalalignment(align)
            box = t.get_window_extent(renderer)
            if free(box, markers=i >= over_markers):
                kept.append(box)
                break
        else:
            t.set_visible(False)


def legend(ax, **kw):
    return ax.legend(fontsize=TEXT_PT, title_fontsize=TEXT_PT, framealpha=0.9, **kw)
