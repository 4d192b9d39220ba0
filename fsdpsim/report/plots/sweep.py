"""Figures of sweep results (with :mod:`fsdpsim.report.plots.axes` and
:mod:`fsdpsim.report.plots.procurement`, whose figures it re-exports, the only modules that import
matplotlib).

Every function takes a pandas DataFrame of ``fsdpsim sweep`` rows — or a mapping of sweep
options (``{"gpu": "h100,b200", "num-gpus": "8..1024"}``; names as ``fsdpsim sweep``), in which
case it runs the sweep itself over the figure's defaults
(:data:`fsdpsim.report.plots.data.DEFAULT_OPTIONS`) — and returns a
:class:`matplotlib.figure.Figure` drawn on the Agg canvas (no display, no pyplot state; a notebook
shows it, :func:`save` writes it). The rows are selected and reshaped in
:mod:`fsdpsim.report.plots.data`; no number is computed here.

Figures
-------
* :func:`throughput_vs_model_size` — tokens/s per GPU or MFU against model size, a line per
  hardware option.
* :func:`memory_ceiling` — the largest model (or longest sequence) that fits against the GPU
  count, a line per GPU memory size.
* :func:`bandwidth_map` — MFU over inter-node bandwidth per GPU × tokens per GPU per
  micro-batch, with the hide-communication threshold of Wang et al. (arXiv 2504.03655) and
  real clusters; :func:`bandwidth_map_rows` builds its grid.
* :func:`procurement_pareto` — cost per million tokens against time to train, Pareto front
  highlighted.
* :func:`step_breakdown` — stacked parts of a step per configuration.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from fsdpsim.report.plots import axes as pa
from fsdpsim.report.plots import data
from fsdpsim.hardware.catalog import Catalog, load_catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.report.plots.axes import BAND_GID, LABEL_PT, TEXT_PT, Rows
from fsdpsim.report.plots.data import MAP_CLUSTERS, bandwidth_map_rows
from fsdpsim.report.plots.procurement import (FRONT_GID, OPTIONS_GID, procurement_pareto,
                                              step_breakdown)
from fsdpsim.util.output import cannot_write, check_output_path
from fsdpsim.util.units import GIB_BYTES

#: Suffixes :func:`save` writes.
SUFFIXES = (".png", ".svg", ".pdf")
METRICS = {"tokens_per_s_per_gpu": ("Throughput per GPU", "tokens/s", 1.0),
           "mfu": ("Model FLOPs utilisation", "%", 100.0)}
THRESHOLD_GID = "hide-comm-threshold"
SHARE_GID = "share-threshold"


# -- 1. throughput against model size ----------------------------------------------------------
def throughput_vs_model_size(rows: Rows, metric: str = "tokens_per_s_per_gpu",
                             by: str = "system", *, catalog: Catalog | None = None) -> Figure:
    """Throughput per GPU (``metric="tokens_per_s_per_gpu"``) or MFU (``"mfu"``) against model
    size [parameters, log], one line per value of ``by`` (default: each hardware option).

    Rows that do not fit or cannot run are left out (a line ends where the model stops
    fitting). Where other columns vary too (GPU counts, sequence lengths), each point is the
    best of them, and the subtitle says so.
    """
    if metric not in METRICS:
        raise ConfigError(f"metric {metric!r} is not accepted; accepted: {', '.join(METRICS)}")
    frame = data.rows_for("throughput", rows, catalog)
    name, unit, scale = METRICS[metric]
    labels = data.group_labels(frame, by)
    ok = data.feasible(frame) & frame[metric].notna()
    if not ok.any():
        raise ConfigError("no row of the throughput plot fits in memory: nothing to draw")
    use = data.with_columns(frame[ok], _label=labels[ok])
    best = data.best_per_group(use, ["_label", "n_params"], metric)
    fig = pa.figure()
    ax = fig.add_subplot()
    band = (f"interval.{metric}_low", f"interval.{metric}_high")
    banded = all(c in best for c in band)
    for i, label in enumerate(dict.fromkeys(use["_label"])):
        line = best[best["_label"] == label].sort_values("n_params")
        drawn = ax.plot(line["n_params"].astype(float), line[metric].astype(float) * scale,
                        marker=pa.MARKERS[i % len(pa.MARKERS)], label=label, linewidth=1.8,
                        markersize=5)
        if banded:  # the 90 % range: calibration residuals, network and framework uncertainty
            ax.fill_between(line["n_params"].astype(float),
                            line[band[0]].astype(float) * scale,
                            line[band[1]].astype(float) * scale,
                            color=drawn[0].get_color(), alpha=0.15, linewidth=0,
                            gid=BAND_GID)
    pa.log_axis(ax.xaxis, best["n_params"], pa.params)
    if metric == "mfu":
        ax.set_ylim(0, max(5.0, 1.1 * float(best[metric].max()) * scale))
    else:
        pa.log_axis(ax.yaxis, best[metric].astype(float))
    sub = pa.constants(frame, ("model", "plan.num_gpus", "training.seq_len", "training.precision",
                             "plan.sharding", "training.recompute"))
    varying = [c for c in ("plan.num_gpus", "training.seq_len", "training.precision")
               if c in frame and c != by and frame[c].map(data._text).nunique() > 1]
    if varying:
        sub = (sub + " · " if sub else "") + "best of " + ", ".join(
            c.split(".")[-1].replace("_", " ") for c in varying)
    if banded:
        sub = (sub + " · " if sub else "") + "shaded: 90 % range"
    pa.finish(ax, f"{name} against model size", "model size [parameters]",
            f"{'MFU' if metric == 'mfu' else 'throughput per GPU'} [{unit}]", sub)
    pa.legend(ax, title="hardware" if by == "system" else by.split(".")[-1].replace("_", " "),
            loc="best")
    return fig


# -- 2. memory ceilings ------------------------------------------------------------------------
def memory_ceiling(rows: Rows, kind: str = "model_size", *,
                   catalog: Catalog | None = None) -> Figure:
    """The largest model (``kind="model_size"``, from a model-size ladder sweep: the largest
    ``n_params`` that fits) or the longest sequence (``kind="seq_len"``:
    ``thresholds.max_seq_len``) against the GPU count, one line per GPU (memory size).

    For the true ceiling let the knobs free (``best``) or fix the lightest setting
    (``--micro-batch 1 --recompute full``): a row fits when its chosen setting fits. Hollow
    markers: the largest size of the sweep fits, so the ceiling is higher than shown.
    """
    kind = kind.replace("-", "_")
    if kind not in ("model_size", "seq_len"):
        raise ConfigError(f"memory ceiling kind {kind!r} is not accepted; accepted: "
                          "model_size, seq_len")
    if kind == "model_size":
        frame = data.rows_for("memory", rows, catalog)
        table, y, ylabel = data.model_size_ceiling(frame), "n_params", \
            "largest model that fits [parameters]"
        title, fmt = "Largest model that fits in GPU memory", pa.params
    else:
        frame = data.rows_for("memory-seq", rows, catalog)
        table, y, ylabel = data.seq_len_ceiling(frame), "max_seq_len", \
            "longest sequence that fits [tokens]"
        title, fmt = "Longest sequence that fits in GPU memory", pa.num
    if table.empty:
        raise ConfigError(f"no row of the memory plot fits ({kind}): nothing to draw")
    group = [c for c in table.columns if c not in ("plan.num_gpus", y, "capped",
                                                    "capacity_bytes")]
    fig = pa.figure()
    ax = fig.add_subplot()
    table = table.sort_values([*group, "plan.num_gpus"])
    keys = list(dict.fromkeys(map(tuple, table[group].astype(str).to_numpy())))
    table = table.assign(_key=list(map(tuple, table[group].astype(str).to_numpy())))
    order = sorted(keys, key=lambda k: float(table.loc[table["_key"] == k,
                                                       "capacity_bytes"].iloc[0]))
    drawn: list[tuple[Any, np.ndarray, np.ndarray, list[str], float]] = []
    for key in order:
        part = table[table["_key"] == key]
        cap = float(part["capacity_bytes"].iloc[0]) / GIB_BYTES
        label = " · ".join(data._fmt_value(c, v) for c, v in zip(group, part[group].iloc[0]))
        xs = part["plan.num_gpus"].astype(float).to_numpy()
        ys = part[y].astype(float).to_numpy()
        # GPUs of the same memory often have the same ceiling: one line names them all
        same = next((d for d in drawn if np.array_equal(d[1], xs)
                     and np.allclose(d[2], ys, rtol=1e-9, atol=0.0)), None)
        if same is not None:
            same[3].append(label)
            same[0].set_label(f"{', '.join(same[3])} ({same[4]:.0f} GiB)")
            continue
        # ... and where they differ a little, a dashed line over a solid one shows both
        twin = sum(abs(d[4] - cap) < 0.5 for d in drawn)
        i = len(drawn)
        line, = ax.plot(xs, ys, marker=pa.MARKERS[i % len(pa.MARKERS)],
                        label=f"{label} ({cap:.0f} GiB)", linewidth=1.8,
                        markersize=5 + 2 * twin,
                        linestyle=("-", "--", ":", "-.")[twin % 4],
                        markerfacecolor="none" if twin else None, zorder=2 + twin)
        drawn.append((line, xs, ys, [label], cap))
        capped = part[part["capped"].astype(bool)]
        if len(capped):
            ax.scatter(capped["plan.num_gpus"].astype(float), capped[y].astype(float), s=60,
                       facecolors="white", edgecolors=line.get_color(), zorder=3)
    pa.log_axis(ax.xaxis, table["plan.num_gpus"], pa.num, pa.powers_of_two(table["plan.num_gpus"]))
    pa.log_axis(ax.yaxis, table[y].astype(float), fmt)
    handles, _ = ax.get_legend_handles_labels()
    if kind == "model_size" and table["capped"].any():
        handles.append(Line2D([], [], marker="o", linestyle="", markerfacecolor="white",
                              markeredgecolor="black",
                              label="largest size swept fits (ceiling is higher)"))
    sub = pa.constants(frame, ("model", "training.seq_len", "training.precision",
                             "plan.sharding", "training.micro_batch", "training.recompute")
                     if kind == "model_size" else ("model", "training.precision",
                                                   "plan.sharding", "training.micro_batch",
                                                   "training.recompute"))
    if kind == "model_size":
        sub = (sub + " · " if sub else "") + f"{frame['n_params'].nunique()} model sizes swept"
    pa.finish(ax, title, "GPUs in the job [count]", ylabel, sub)
    pa.legend(ax, handles=handles, title="GPU (memory)", loc="best")
    return fig


# -- 3. bandwidth map --------------------------------------------------------------------------
def bandwidth_map(rows: Rows, *, tokens_per_gpu: float | None = None,
                  clusters: Sequence[str] = MAP_CLUSTERS,
                  catalog: Catalog | None = None) -> Figure:
    """MFU [%] over inter-node bandwidth per GPU (x, log) × tokens per GPU per micro-batch
    (y, log) for one model on one GPU type and count (rows of :func:`bandwidth_map_rows`).

    The dashed line is the hide-communication threshold (Wang et al. 2025, arXiv
    2504.03655; ``thresholds.min_inter_node_gbps_per_gpu``, solved on the engine by
    :mod:`fsdpsim.drivers.sensitivity`): to its right a micro-batch's collectives fit inside its
    compute, to its left communication is exposed. The dotted line is where throughput reaches 95 %
    of its value with infinite inter-node bandwidth
    (``thresholds.inter_node_gbps_per_gpu_at_share``): to its left the reported bottleneck is the
    inter-node network. Hatched: nothing fits in memory. Markers: real clusters at their inter-node
    Gb/s per GPU (catalog nodes or clusters ``clusters``; only their bandwidth, not their GPU),
    drawn at ``tokens_per_gpu`` (default: the tokens per GPU with the best MFU at the highest
    bandwidth).
    """
    frame = data.rows_for("bandwidth", rows, catalog)
    g = data.bandwidth_grid(frame)
    x, y = g["bandwidth_gbps"], g["tokens"]
    X, Y = np.meshgrid(x, y)
    fig = pa.figure(7.5, 5.6)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    mfu = np.ma.masked_invalid(100.0 * g["mfu"])
    if mfu.count() == 0:
        raise ConfigError("no point of the bandwidth map fits in memory: nothing to draw")
    top = 5.0 * math.ceil(float(mfu.max()) / 5.0 + 1e-9)
    filled = ax.contourf(X, Y, mfu, levels=np.arange(0.0, top + 5.0, 5.0), cmap="viridis")
    cbar = fig.colorbar(filled, ax=ax, pad=0.02)
    cbar.set_label("MFU [%]", fontsize=LABEL_PT)
    cbar.ax.tick_params(labelsize=TEXT_PT)
    handles = []
    no_fit = np.where(np.isnan(g["fits"]), np.nan, 1.0 - g["fits"])
    if np.nanmax(no_fit) > 0:
        ax.contourf(X, Y, no_fit, levels=[1e-3, 2.0], colors="none", hatches=["//"])
        ax.contour(X, Y, no_fit, levels=[1e-3], colors="0.3", linewidths=1.0)
        handles.append(Patch(facecolor="white", edgecolor="0.3", hatch="//",
                             label="does not fit in GPU memory"))
    ratio = g["log_ratio"]
    threshold = None
    u = g.get("uncertainty", 0.0)
    if 0 < u < 1 and np.nanmin(ratio) < -np.log10(1 - u) and np.nanmax(ratio) > -np.log10(1 + u):
        # Where the threshold lies if the network delivers (1 -/+ u) of its expected bandwidth.
        ax.contourf(X, Y, ratio, levels=[-np.log10(1 + u), -np.log10(1 - u)], colors="red",
                    alpha=0.18).set_gid(BAND_GID)
        handles.append(Patch(facecolor="red", alpha=0.18,
                             label=f"threshold if the network delivers ±{100 * u:.0f} %"))
    if np.nanmin(ratio) < 0 < np.nanmax(ratio):
        threshold = ax.contour(X, Y, ratio, levels=[0.0], colors="red", linewidths=2.2,
                               linestyles="--")
        threshold.set_gid(THRESHOLD_GID)
        handles.append(Line2D([], [], color="red", linestyle="--", linewidth=2.2,
                              label="hide-comm threshold (below/left: comm exposed)"))
    else:
        handles.append(Line2D([], [], color="red", linestyle="--", linewidth=2.2,
                              label="hide-comm threshold: outside this map"))
    share = g["log_ratio_share"]
    if np.isfinite(share).any() and np.nanmin(share) < 0 < np.nanmax(share):
        ax.contour(X, Y, share, levels=[0.0], colors="orange", linewidths=2.0,
                   linestyles=":").set_gid(SHARE_GID)
        handles.append(Line2D([], [], color="orange", linestyle=":", linewidth=2.0,
                              label="95 % throughput threshold (left: network-bound)"))
    if tokens_per_gpu is None:
        tokens_per_gpu = float(y[int(np.nanargmax(np.where(np.isnan(g["mfu"][:, -1]), -1.0,
                                                            g["mfu"][:, -1])))])
    points = data.cluster_bandwidths(catalog or load_catalog(), clusters) if clusters else []
    by_bw: dict[float, list[str]] = {}
    for ident, _gpu, gbps in points:
        if x.min() / 1.001 <= gbps <= x.max() * 1.001:
            by_bw.setdefault(round(gbps, 3), []).append(ident)
    for i, (gbps, ids) in enumerate(sorted(by_bw.items())):
        ax.plot([gbps], [tokens_per_gpu], linestyle="", marker=pa.MARKERS[i % len(pa.MARKERS)],
                markersize=10, markerfacecolor="white", markeredgecolor="black",
                markeredgewidth=1.5, zorder=5, label=f"{gbps:g} Gb/s: {', '.join(ids)}")
    handles += ax.get_legend_handles_labels()[0]
    pa.log_axis(ax.xaxis, x, pa.num, [v for v in (12.5, 25, 50, 100, 200, 400, 800, 1600, 3200)
                                  if x.min() / 1.001 <= v <= x.max() * 1.001] or None)
    pa.log_axis(ax.yaxis, y, pa.num, pa.powers_of_two(y, 9))
    ax.set_xlim(x.min(), x.max())
    ax.set_ylim(y.min(), y.max())
    first = frame.iloc[0]
    pa.finish(ax, f"MFU of {first['model']} on {int(first['plan.num_gpus']):,} × {first['gpu']}",
            "inter-node bandwidth per GPU [Gb/s, one direction]",
            "tokens per GPU per micro-batch [tokens]",
            pa.constants(frame, ("training.seq_len", "plan.sharding", "training.precision"))
            + f" · clusters (by bandwidth only) at {tokens_per_gpu:,.0f} tokens/GPU")
    ax.grid(False)
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=TEXT_PT,
               framealpha=0.9)
    return fig


# -- saving ------------------------------------------------------------------------------------
def check_path(path: str | Path) -> Path:
    """``path`` if :func:`save` can write it (a known suffix, an existing folder)."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigError(f"cannot save a figure to {str(path)!r}: unknown suffix "
                          f"{path.suffix or '(none)'!r}; accepted: {', '.join(SUFFIXES)}")
    check_output_path(path)
    return path


def save(fig: Figure, path: str | Path, *, dpi: int = 120) -> Path:
    """Write ``fig`` as PNG, SVG or PDF (by the suffix of ``path``); returns the path."""
    path = check_path(path)
    fmt = path.suffix.lower().lstrip(".")
    try:
        fig.savefig(path, format=fmt, dpi=dpi, metadata={"Software": "fsdpsim"}
                    if fmt == "png" else None)
    except OSError as exc:
        raise cannot_write(path, exc) from None
    return path


__all__ = ["BAND_GID", "FRONT_GID", "OPTIONS_GID", "throughput_vs_model_size", "memory_ceiling",
           "bandwidth_map", "bandwidth_map_rows", "procurement_pareto", "step_breakdown", "save",
           "SUFFIXES"]
