"""Procurement figures of sweep rows: the cost/time Pareto front and the step breakdown
(re-exported by :mod:`fsdpsim.report.plots.sweep`, whose module docstring describes the figures)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.figure import Figure

from fsdpsim.report.plots import axes as pa
from fsdpsim.report.plots import data
from fsdpsim.hardware.catalog import Catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.report.plots.axes import LABEL_PT, TEXT_PT, Rows
from fsdpsim.util.units import MS_S

OPTIONS_GID, FRONT_GID = "options", "pareto-front"
#: gids of the Pareto figure's point labels and of its total-cost axis (tests find them).
FRONT_LABEL_GID, OFF_FRONT_LABEL_GID = "front-label", "off-front-label"
TOTAL_AXIS_GID = "total-cost-axis"
_PART_COLOURS = ("#1f77b4", "#6baed6", "#9ecae1", "#ff7f0e", "#c7c7c7", "#d62728", "#2ca02c",
                 "#9467bd")


# -- 4. procurement Pareto front ---------------------------------------------------------------
def procurement_pareto(rows: Rows, *, tokens: float | None = None,
                       catalog: Catalog | None = None) -> Figure:
    """Cost [USD per million tokens] against time to train the token budget [days] for every
    option that can run and has a price; the Pareto front (no other option of the same model
    is both faster and cheaper: one front per model, its points labelled with the model where
    the rows hold several) highlighted and labelled with its total cost, the other options
    labelled in grey; the right axis reads the total cost of the budget (failure-free: USD per
    million tokens × budget / 10^6). The budget is the sweep's ``--tokens`` (or ``tokens``)."""
    frame = data.rows_for("pareto", rows, catalog)
    days = data.train_time_s(frame, tokens).astype(float) / 86_400.0
    cost = frame["cost_usd_per_million_tokens"].astype(float)
    ok = data.feasible(frame) & np.isfinite(days) & np.isfinite(cost)
    if not ok.any():
        raise ConfigError("no row of the pareto plot can run and has a price: give prices "
                          "(--price GPU=USD/h) and check that the configurations fit")
    use = data.with_columns(frame[ok], _days=days[ok], _cost=cost[ok],
                                _group=data.group_labels(frame[ok], "system"))
    models = use["model"].map(str) if "model" in use.columns else pd.Series("", use.index)
    front = np.zeros(len(use), dtype=bool)
    for model in dict.fromkeys(models):  # one front per model: its options compete
        mine = (models == model).to_numpy()
        front[mine] = data.pareto_front(use["_days"][mine], use["_cost"][mine])
    fig = pa.figure(7.5, 5.0)
    ax = fig.add_subplot()
    for i, group in enumerate(dict.fromkeys(use["_group"])):
        part = use[use["_group"] == group]
        ax.scatter(part["_days"], part["_cost"], s=28, marker=pa.MARKERS[i % len(pa.MARKERS)],
                   label=group, alpha=0.85, gid=OPTIONS_GID, zorder=2)
    best = use[front].sort_values("_days")
    for model in dict.fromkeys(models[front]):
        line = best[models[front].loc[best.index] == model]
        ax.plot(line["_days"], line["_cost"], color="black", linewidth=1.2, zorder=3)
    per_model = " per model" if models.nunique() > 1 else ""
    ax.scatter(best["_days"], best["_cost"], s=110, facecolors="none", edgecolors="black",
               linewidths=1.6, zorder=4, gid=FRONT_GID,
               label=f"Pareto front{per_model} ({len(best)}: none faster and cheaper)")
    budget = tokens if tokens is not None else float(frame["train_tokens"].dropna().iloc[0])
    per_cost = budget / 1e6  # total cost [USD] per USD per million tokens
    # Every point labelled: the front in black with its total cost, the others in grey
    # (labels that would overlap an earlier one are hidden, the front's first).
    labels = pd.Series(data.config_labels(use, ("model", "cluster", "gpu", "network",
                                                "inter_node_gbps_per_gpu", "plan.num_gpus",
                                                "training.seq_len"),
                                          keep=("plan.num_gpus",)), index=use.index)
    texts = [ax.annotate(f"{labels[i]} · {usd(c * per_cost)}", (px, py), xytext=(7, 5),
                         textcoords="offset points", fontsize=TEXT_PT, zorder=5,
                         gid=FRONT_LABEL_GID)
             for i, px, py, c in zip(best.index, best["_days"], best["_cost"], best["_cost"])]
    rest = use[~front]
    texts += [ax.annotate(labels[i], (px, py), xytext=(6, -11), textcoords="offset points",
                          fontsize=TEXT_PT, color="0.4", zorder=5, gid=OFF_FRONT_LABEL_GID)
              for i, px, py in zip(rest.index, rest["_days"], rest["_cost"])]
    for axis, values in ((ax.xaxis, use["_days"]), (ax.yaxis, use["_cost"])):
        if values.max() / values.min() > 8:
            pa.log_axis(axis, values)
    ax.margins(0.06, 0.12)  # room for a label beside the outermost points
    ax.autoscale_view()
    to_axes = ax.transData + ax.transAxes.inverted()
    for t in texts:  # labels of points on the right half extend to the left
        if to_axes.transform(t.xy)[0] > 0.55:
            t.set_horizontalalignment("right")
            t.set_position((-7, t.get_position()[1]))
    total = ax.secondary_yaxis("right", functions=(lambda c: c * per_cost,
                                                   lambda t: t / per_cost))
    total.set_gid(TOTAL_AXIS_GID)
    total.set_ylabel(f"total cost of {pa.params(budget)} tokens [USD, no failures]",
                     fontsize=LABEL_PT)
    if ax.get_yscale() == "log":  # round totals in view, not only the decades
        low, high = (v * per_cost for v in ax.get_ylim())
        total.yaxis.set_major_locator(ticker.FixedLocator(pa.log_ticks(low, high)))
    total.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: usd(v)))
    total.yaxis.set_minor_formatter(ticker.NullFormatter())
    total.tick_params(which="both", labelsize=TEXT_PT)
    left_out = int((~ok).sum())
    sub = pa.constants(frame, ("model", "training.seq_len", "training.precision"))
    if left_out:
        sub += f" · {left_out} rows without a run or a price left out"
    pa.finish(ax, f"Procurement: cost against time to train {pa.params(budget)} tokens",
            f"time to train {pa.params(budget)} tokens [days]", "cost [USD per million tokens]",
            sub)
    # below the axes, so it covers no point or label
    fig.legend(loc="outside lower center", ncols=3, fontsize=TEXT_PT, framealpha=0.9)
    pa.hide_overlaps(fig, texts, ax, over_markers=len(best))  # the front's labels first
    return fig


def usd(v: float) -> str:
    """12 → "$12", 12,300 → "$12.3k", 1.57e6 → "$1.57M", 2.2e9 → "$2.2B"."""
    for suffix, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"${v / scale:.3g}{suffix}"
    return f"${v:.3g}"


# -- 5. step breakdown -------------------------------------------------------------------------
#: What the breakdown's bars are per: GPU time per token (the default: rows with other
#: micro-batches, batches or GPU counts compare like for like), or the whole step.
PER = ("token", "step")


def step_breakdown(rows: Rows, *, normalize: bool = False, per: str = "token",
                   max_bars: int = 40, catalog: Catalog | None = None) -> Figure:
    """Stacked horizontal bars, one per configuration: the parts of a step
    (:data:`fsdpsim.report.plots.data.STEP_PARTS`: GEMM, attention, memory-bound, recompute, exposed
    communication, optimizer, pipeline bubble) as GPU time per token (``per="token"``, the
    default: each part × GPUs / tokens per step, so steps of different micro-batches, batches
    or GPU counts compare like for like; the bars sum to 1 / tokens per second per GPU), as
    time per step (``per="step"``), or as shares of the step (``normalize``), with the bar's
    total (the step time when normalised) and MFU at its end and the share of each wide
    enough part inside it."""
    if per not in PER:
        raise ConfigError(f"breakdown per {per!r} is not accepted; accepted: {', '.join(PER)}")
    frame = data.rows_for("breakdown", rows, catalog)
    frame = frame[frame["step_time_s"].notna()]
    if frame.empty:
        raise ConfigError("no row of the breakdown plot has a prediction: nothing to draw")
    if len(frame) > max_bars:
        raise ConfigError(f"the breakdown plot draws at most {max_bars} configurations, the "
                          f"rows have {len(frame)}: filter them first")
    parts = data.step_components(frame)
    step = frame["step_time_s"].astype(float).to_numpy()
    total = parts.sum(axis=1).to_numpy()
    step_unit, step_scale = ("ms", 1.0 / MS_S) if step.max() < 2.0 else ("s", 1.0)
    if per == "token":  # GPU-seconds per token of one second of the step
        per_second = 1.0 / (frame["tokens_per_s_per_gpu"].astype(float).to_numpy() * step)
        token_s = np.maximum(step, total) * per_second
        unit, t_scale = ("µs", 1e6) if token_s.max() < 1e-3 else ("ms", 1e3)
        scale = 100.0 / total if normalize else t_scale * per_second
    else:
        unit, t_scale = step_unit, step_scale
        scale = 100.0 / total if normalize else np.full(len(frame), t_scale)
    labels = data.config_labels(frame)
    if "fits" in frame:
        labels = [t + ("" if f else " (does not fit)") for t, f in
                  zip(labels, frame["fits"].astype(bool))]
    fig = pa.figure(8.5, 2.4 + 0.5 * len(frame))
    ax = fig.add_subplot()
    pos = np.arange(len(frame))
    end = float(np.max(np.maximum(step, total) * scale))
    ax.set_xlim(0, (1.45 if normalize else 1.35 if per == "step" else 1.4) * end)
    left = np.zeros(len(frame))
    for name, colour in zip(data.STEP_PARTS, _PART_COLOURS):
        values = parts[name].to_numpy()
        if name == "other compute" and not (values > 1e-3 * total).any():
            continue
        label = name + (" (no pipeline parallelism: 0)" if name == "pipeline bubble"
                        and not values.any() else "")
        bars = ax.barh(pos, values * scale, left=left * scale, color=colour, label=label,
                       height=0.7, edgecolor="white", linewidth=0.5)
        wide = values * scale >= 0.07 * ax.get_xlim()[1]  # room for "12%" at 9 pt
        ax.bar_label(bars, labels=[f"{v / t:.0%}" if w else "" for v, t, w in
                                   zip(values, total, wide)],
                     label_type="center", fontsize=TEXT_PT,
                     color="white" if colour in ("#1f77b4", "#d62728", "#9467bd") else "black")
        left = left + values
    mfu = frame["mfu"].astype(float).to_numpy() if "mfu" in frame else np.full(len(frame), np.nan)
    for p, t, m in zip(pos, step, mfu):
        text = f" {t * step_scale:,.4g} {step_unit}"
        if per == "token" and not normalize:
            text = f" {max(t, left[p]) * scale[p]:,.4g} {unit}"
        text += f" · MFU {100 * m:.1f} %" if np.isfinite(m) else ""
        ax.text(max(t, left[p]) * scale[p], p, text, va="center", fontsize=TEXT_PT)
    ax.set_yticks(pos, labels)
    if normalize:
        ax.set_xticks(np.arange(0, 101, 20))
    ax.invert_yaxis()
    pa.finish(ax, "Where the time of a training step goes",
            "share of the step time [%]" if normalize else
            f"time per step [{unit}]" if per == "step" else
            f"GPU time per token [{unit}] (each part × GPUs / tokens per step)",
            "configuration (sweep row)",
            pa.constants(frame, ("model", "gpu", "plan.num_gpus", "training.seq_len")))
    ax.grid(True, axis="x", alpha=0.3)
    ax.grid(False, axis="y")
    fig.legend(loc="outside lower center", ncols=4, fontsize=TEXT_PT, framealpha=0.9)
    return fig
