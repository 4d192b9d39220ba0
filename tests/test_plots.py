"""Figures (``fsdpsim.report.plots.sweep``), their data (``fsdpsim.report.plots.data``) and ``fsdpsim plot``.

Every figure is checked from the Figure object: a title, axis labels with a unit, a legend,
text of at least 9 pt, tick labels that do not overlap, and the content (one line per option,
the plotted values equal to the sweep rows, the hide-communication threshold where the
engine's bandwidth need equals the bandwidth, a non-dominated and complete Pareto front, bars
that add up to the step time).
"""

from __future__ import annotations

from conftest import sweep, run

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer
from matplotlib.text import Text

from fsdpsim.report.plots import data as plot_data

from fsdpsim.report.plots import sweep as plots

from fsdpsim.report.plots import procurement as plots_procurement
from fsdpsim.cli import cli
from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import predict
from fsdpsim.model.presets import get_model
from fsdpsim.hardware.system import resolve_system

UNIT = re.compile(r"\[[^\]]+\]|\([^)]+\)")
MAP_BANDWIDTHS = (12.5, 25, 50, 100, 200, 400, 800, 1600)


@pytest.fixture(scope="module")
def throughput_rows(cat):
    return sweep(cat, model_sizes="1b,10b,100b,1t", gpu="a100-40gb,h100", num_gpus="64",
                 best=True)


@pytest.fixture(scope="module")
def ladder_rows(cat):
    return sweep(cat, model_sizes="1b,3b,10b,30b,100b,300b,1t", gpu="a100-40gb,h200",
                 num_gpus="8,64,512", best=True)


@pytest.fixture(scope="module")
def seq_rows(cat):
    return sweep(cat, model="llama3-8b", gpu="a100-40gb,h200", num_gpus="8,64",
                 micro_batch="1", recompute="full")


@pytest.fixture(scope="module")
def map_rows(cat):
    return plots.bandwidth_map_rows("llama3-8b", "h100", num_gpus=64,
                                    bandwidths_gbps=MAP_BANDWIDTHS, catalog=cat)


@pytest.fixture(scope="module")
def pareto_rows(cat):
    return sweep(cat, model="llama3-70b", gpu="a100-40gb,h100", num_gpus="32..1024",
                 global_batch="1024", tokens="1t", best=True)


@pytest.fixture(scope="module")
def breakdown_rows(cat):
    return sweep(cat, model="llama3-8b", gpu="h100", num_gpus="64",
                 inter_node_gbps_per_gpu="25,100,400", best=True)


# -- readability, from the figure objects --------------------------------------------------------
def check_readable(fig, *, categorical_y: bool = False):
    """Title, labelled axes with units, a legend, text >= 9 pt, no overlapping tick labels."""
    ax = fig.axes[0]
    assert ax.get_title().strip()
    assert UNIT.search(ax.get_xlabel()), ax.get_xlabel()
    assert UNIT.search(ax.get_ylabel()) or categorical_y, ax.get_ylabel()
    assert ax.get_legend() is not None or fig.legends
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for text in fig.findobj(Text):
        if text.get_visible() and text.get_text().strip():
            assert text.get_fontsize() >= 9, (text.get_text(), text.get_fontsize())
    for axes in fig.axes:
        for axis in (axes.xaxis, axes.yaxis):
            boxes = [t.get_window_extent(renderer) for t in axis.get_ticklabels(which="both")
                     if t.get_visible() and t.get_text().strip()]
            for i, a in enumerate(boxes):
                for b in boxes[i + 1:]:
                    assert not a.overlaps(b), f"tick labels overlap on {axis.axis_name}"
    return ax


def test_figures_draw_on_the_agg_canvas_without_pyplot(throughput_rows):
    fig = plots.throughput_vs_model_size(throughput_rows)
    assert type(fig.canvas).__name__ == "FigureCanvasAgg"
    for name in ("sweep.py", "axes.py", "procurement.py"):
        source = (Path(plots.__file__).parent / name).read_text()
        assert "import pyplot" not in source and "matplotlib.pyplot" not in source


# -- 1. throughput -----------------------------------------------------------------------------
@pytest.mark.parametrize("metric, scale", [("tokens_per_s_per_gpu", 1.0), ("mfu", 100.0)])
def test_throughput_one_line_per_system_with_the_rows_values(throughput_rows, metric, scale):
    fig = plots.throughput_vs_model_size(throughput_rows, metric=metric)
    ax = check_readable(fig)
    assert len(ax.lines) == throughput_rows["system"].nunique() == 2
    assert ax.get_xscale() == "log"
    ok = plot_data.feasible(throughput_rows)
    for line, gpu in zip(ax.lines, ("a100-sxm4-40gb", "h100-sxm5-80gb")):
        want = throughput_rows[ok & (throughput_rows["gpu"] == gpu)].sort_values("n_params")
        assert line.get_label() == gpu
        np.testing.assert_allclose(line.get_xdata(), want["n_params"].astype(float))
        np.testing.assert_allclose(line.get_ydata(), want[metric].astype(float) * scale,
                                   rtol=1e-12)
    # 1T does not fit on 64 A100 40GB: that line ends early.
    assert len(ax.lines[0].get_xdata()) < len(ax.lines[1].get_xdata())


def test_throughput_best_of_varying_axes_and_bad_options(cat):
    rows = sweep(cat, model_sizes="1b,10b", gpu="h100", num_gpus="8,64", best=True)
    fig = plots.throughput_vs_model_size(rows, by="gpu")
    ax = fig.axes[0]
    assert len(ax.lines) == 1 and "best of num gpus" in ax.get_title()
    best = rows.groupby("n_params")["tokens_per_s_per_gpu"].max().to_numpy()
    np.testing.assert_allclose(ax.lines[0].get_ydata(), best)
    with pytest.raises(ConfigError, match="metric 'tflops'"):
        plots.throughput_vs_model_size(rows, metric="tflops")
    with pytest.raises(ConfigError, match="by='vendor' is not a column"):
        plots.throughput_vs_model_size(rows, by="vendor")


def test_throughput_from_options_uses_the_sweep(cat):
    fig = plots.throughput_vs_model_size({"model-sizes": "1b,10b", "gpu": "h100,b200",
                                          "num-gpus": "64"}, catalog=cat)
    ax = check_readable(fig)
    assert [line.get_label() for line in ax.lines] == ["h100-sxm5-80gb", "b200"]
    assert all(len(line.get_xdata()) == 2 for line in ax.lines)


# -- 2. memory ceilings ------------------------------------------------------------------------
def test_memory_ceiling_model_size_is_the_largest_fitting_model(ladder_rows):
    fig = plots.memory_ceiling(ladder_rows)
    ax = check_readable(fig)
    assert len(ax.lines) == ladder_rows["gpu"].nunique() == 2
    assert "(39 GiB)" in ax.lines[0].get_label() and "(141 GiB)" in ax.lines[1].get_label()
    for line, gpu in zip(ax.lines, ("a100-sxm4-40gb", "h200-sxm-141gb")):
        for n, y in zip(line.get_xdata(), line.get_ydata()):
            part = ladder_rows[(ladder_rows["gpu"] == gpu) & (ladder_rows["plan.num_gpus"] == n)]
            fitting = [float(p) for p, f in zip(part["n_params"], part["fits"]) if f]
            assert y == max(fitting)
    # More GPUs never lower the ceiling (FSDP shards the states).
    assert all(np.all(np.diff(line.get_ydata()) >= 0) for line in ax.lines)


def test_memory_ceiling_marks_capped_points(cat):
    rows = sweep(cat, model_sizes="1b,2b", gpu="h200", num_gpus="8", best=True)
    table = plot_data.model_size_ceiling(rows)
    assert table["capped"].all()  # 2B fits on 8 H200: the real ceiling is higher
    fig = plots.memory_ceiling(rows)
    assert any(isinstance(c, PathCollection) for c in fig.axes[0].collections)
    assert any("ceiling is higher" in t.get_text() for t in fig.axes[0].get_legend().get_texts())


def test_memory_ceiling_seq_len(seq_rows):
    fig = plots.memory_ceiling(seq_rows, kind="seq_len")
    ax = check_readable(fig)
    assert len(ax.lines) == 2
    for line, gpu in zip(ax.lines, ("a100-sxm4-40gb", "h200-sxm-141gb")):
        want = seq_rows[seq_rows["gpu"] == gpu].sort_values("plan.num_gpus")
        want = want[want["thresholds.max_seq_len"] > 0]
        np.testing.assert_array_equal(line.get_ydata(), want["thresholds.max_seq_len"])
    with pytest.raises(ConfigError, match="kind 'gpus'"):
        plots.memory_ceiling(seq_rows, kind="gpus")


def _shown_labels(axis):
    """Tick labels drawn inside the axis' view (those outside the limits are not seen)."""
    lo, hi = sorted(axis.get_view_interval())
    return [t.get_text() for t, v in zip(axis.get_ticklabels(), axis.get_majorticklocs())
            if lo <= v <= hi and t.get_text().strip()]


@pytest.mark.parametrize("gpu", ["h100", "a100", "h200", "b200"])
def test_memory_ceiling_seq_len_of_one_gpu_has_y_labels(cat, gpu):
    """One GPU's ceiling spans less than a decade; its y axis showed no
    label (llama3-8b on H100, A100) or one (H200, B200)."""
    rows = sweep(cat, model="llama3-8b", gpu=gpu, num_gpus="8..1024", micro_batch="1",
                 recompute="full")
    fig = plots.memory_ceiling(rows, kind="seq_len")
    ax = check_readable(fig)
    shown = _shown_labels(ax.yaxis)
    assert len(shown) >= 3, shown
    lo, hi = ax.get_ylim()
    ys = ax.lines[0].get_ydata()
    assert lo <= ys.min() and ys.max() <= hi


def test_memory_ceiling_same_memory_gpus_are_both_visible(cat):
    """A100 80GB and H100 (80 GiB each) have the same ceiling: one line names
    both instead of one drawn over the other; a GPU of its own keeps its own line."""
    rows = sweep(cat, model_sizes="1b,3b,10b,30b,100b,300b", gpu="a100,h100,h200",
                 num_gpus="8,64", best=True)
    fig = plots.memory_ceiling(rows)
    ax = check_readable(fig)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "a100-sxm4-80gb, h100-sxm5-80gb (80 GiB)" in labels
    assert any(t.startswith("h200") for t in labels) and len(ax.lines) == 2
    # GPUs of one memory size whose ceilings differ: both lines, told apart by line style
    seq = sweep(cat, model="llama3-8b", gpu="a100,h100,mi300x", num_gpus="8,64",
                micro_batch="1", recompute="full")
    fig = plots.memory_ceiling(seq, kind="seq_len")
    ax = fig.axes[0]
    names = " ".join(t.get_text() for t in ax.get_legend().get_texts())
    assert all(g in names for g in ("a100-sxm4-80gb", "h100-sxm5-80gb", "mi300x"))
    styles = {(line.get_linestyle(), line.get_marker()) for line in ax.lines}
    assert len(styles) == len(ax.lines)


# -- 3. bandwidth map ----------------------------------------------------------------------------
def test_bandwidth_map_rows_are_the_engine(map_rows, cat):
    assert len(map_rows) == len(MAP_BANDWIDTHS) * len(plot_data.MAP_MICRO_BATCHES)
    row = map_rows[(map_rows["inter_node_gbps_per_gpu"] == 50)
                   & (map_rows["training.micro_batch"] == 4)].iloc[0]
    p = predict(get_model("llama3-8b"), resolve_system(cat, gpu="h100", inter_node_gbps_per_gpu=50),
                ParallelPlan(num_gpus=64, gpus_per_node=8),
                TrainingConfig(seq_len=4096, micro_batch=4, recompute=row["training.recompute"]))
    d = p.to_dict()
    assert row["tokens_per_s_per_gpu"] == pytest.approx(d["tokens_per_s_per_gpu"], rel=1e-12)
    assert row["thresholds.min_inter_node_gbps_per_gpu"] == pytest.approx(
        d["thresholds"]["min_inter_node_gbps_per_gpu"], rel=1e-12)


def test_bandwidth_map_defaults_to_the_sequence_length_of_everything_else():
    """The map swept sequences of 1,024 tokens, every other default 4,096."""
    from fsdpsim.drivers.sweep.grid import DEFAULTS

    assert plot_data.MAP_SEQ_LEN == int(DEFAULTS["seq-len"]) == 4096
    assert plot_data.merged_options("bandwidth", {})["seq-len"] == "4096"
    assert plot_data.MAP_SEQ_LEN * min(plot_data.MAP_MICRO_BATCHES) == 4096


def test_bandwidth_map_threshold_contour_is_where_the_need_equals_the_bandwidth(map_rows, cat):
    fig = plots.bandwidth_map(map_rows, catalog=cat)
    ax = check_readable(fig)
    threshold = [c for c in ax.collections if c.get_gid() == plots.THRESHOLD_GID]
    assert len(threshold) == 1
    vertices = np.concatenate([p.vertices for p in threshold[0].get_paths() if len(p.vertices)])
    assert len(vertices) >= 2
    need = map_rows.assign(tokens=map_rows["training.seq_len"] * map_rows["training.micro_batch"])
    checked = 0
    for x, y in vertices:
        row = need[np.isclose(need["tokens"], y, rtol=1e-9)].sort_values("inter_node_gbps_per_gpu")
        if row.empty:
            continue  # a vertex on a vertical grid edge
        bw = row["inter_node_gbps_per_gpu"].to_numpy()
        hidden = bw >= row["thresholds.min_inter_node_gbps_per_gpu"].fillna(np.inf).to_numpy()
        j = np.searchsorted(bw, x)  # the grid cell [bw[j-1], bw[j]] holding the vertex
        assert 0 < j < bw.size and not hidden[j - 1] and hidden[j], (x, y)
        checked += 1
    assert checked >= 2
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("hide-comm threshold" in t for t in legend)
    assert any("does not fit" in t for t in legend)  # 128k tokens per GPU do not fit on 80 GB
    cbar = fig.axes[1]
    assert cbar.get_ylabel() == "MFU [%]"


def test_throughput_band_is_the_rows_90_percent_range(throughput_rows):
    """The range (calibration, network and framework uncertainty) as a band."""
    fig = plots.throughput_vs_model_size(throughput_rows)
    ax = fig.axes[0]
    bands = [c for c in ax.collections if c.get_gid() == plots.BAND_GID]
    assert len(bands) == len(ax.lines) == 2
    ok = plot_data.feasible(throughput_rows)
    want = throughput_rows[ok & (throughput_rows["gpu"] == "h100-sxm5-80gb")]
    ys = np.concatenate([p.vertices[:, 1] for p in bands[1].get_paths()])
    assert ys.min() == pytest.approx(want["interval.tokens_per_s_per_gpu_low"].min())
    assert ys.max() == pytest.approx(want["interval.tokens_per_s_per_gpu_high"].max())


def test_bandwidth_map_band_around_the_threshold(map_rows, cat):
    """The threshold moves with the network's uncertainty: a band where it may lie."""
    u = float(map_rows["interval.network_uncertainty"].median())
    assert u > 0
    fig = plots.bandwidth_map(map_rows, catalog=cat)
    assert [c for c in fig.axes[0].collections if c.get_gid() == plots.BAND_GID]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(f"±{100 * u:.0f} %" in t for t in legend)


def test_bandwidth_map_share_contour_separates_network_bound_rows(map_rows, cat):
    """The dotted 95 % line is where the reported bottleneck turns to the inter-node network:
    each vertex lies between a network-bound row (left) and one that is not (right), in the
    row of tokens it is on."""
    fig = plots.bandwidth_map(map_rows, catalog=cat)
    ax = check_readable(fig)
    share = [c for c in ax.collections if c.get_gid() == plots.SHARE_GID]
    assert len(share) == 1
    rows = map_rows[map_rows["fits"].astype(bool)].assign(
        tokens=map_rows["training.seq_len"] * map_rows["training.micro_batch"])
    checked = 0
    for x, y in np.concatenate([p.vertices for p in share[0].get_paths() if len(p.vertices)]):
        row = rows[np.isclose(rows["tokens"], y, rtol=1e-9)].sort_values("inter_node_gbps_per_gpu")
        if row.empty:
            continue
        bw = row["inter_node_gbps_per_gpu"].to_numpy()
        network = (row["bottleneck"].astype(str) == "inter_node_link").to_numpy()
        assert (network == (bw < row["thresholds.inter_node_gbps_per_gpu_at_share"])).all()
        j = np.searchsorted(bw, x)
        assert 0 < j < bw.size and network[j - 1] and not network[j], (x, y)
        checked += 1
    assert checked >= 2
    assert any("95 % throughput threshold" in t.get_text() for t in fig.legends[0].get_texts())


def test_bandwidth_map_marks_real_clusters_at_their_bandwidth(map_rows, cat):
    fig = plots.bandwidth_map(map_rows, tokens_per_gpu=8192, catalog=cat)
    ax = fig.axes[0]
    marks = {float(line.get_xdata()[0]): line.get_label() for line in ax.lines}
    assert marks == {50.0: "50 Gb/s: p4d", 100.0: "100 Gb/s: leonardo",
                     200.0: "200 Gb/s: juwels-booster, jupiter, perlmutter",
                     400.0: "400 Gb/s: dgx-h100"}
    assert all(line.get_ydata()[0] == 8192 for line in ax.lines)
    bare = plots.bandwidth_map(map_rows, clusters=(), catalog=cat)
    assert not bare.axes[0].lines


def test_bandwidth_map_rejects_mixed_rows(map_rows, throughput_rows):
    with pytest.raises(ConfigError, match="vary in gpu"):
        plots.bandwidth_map(pd.concat([map_rows, map_rows.assign(gpu="b200")]))
    with pytest.raises(ConfigError, match="needs the sweep columns"):
        plots.bandwidth_map(map_rows.drop(columns="thresholds.min_inter_node_gbps_per_gpu"))


# -- 4. procurement Pareto front ---------------------------------------------------------------
def test_pareto_front_hand_worked():
    x = [1, 2, 3, 2, 4, 1, 3]
    y = [5, 3, 1, 4, 1, 5, 2]
    # (1,5) twice (equal, both kept), (2,3), (3,1); (2,4) by (2,3), (4,1) by (3,1), (3,2) by (3,1).
    assert plot_data.pareto_front(x, y).tolist() == [True, True, True, False, False, True, False]


def test_procurement_pareto_front_is_non_dominated_and_complete(pareto_rows):
    fig = plots.procurement_pareto(pareto_rows)
    ax = check_readable(fig)
    options = np.concatenate([c.get_offsets() for c in ax.collections
                              if c.get_gid() == plots.OPTIONS_GID])
    front = np.concatenate([c.get_offsets() for c in ax.collections
                            if c.get_gid() == plots.FRONT_GID])
    ok = plot_data.feasible(pareto_rows) & pareto_rows["cost_usd_per_million_tokens"].notna()
    assert len(options) == ok.sum() >= 8
    np.testing.assert_allclose(np.sort(options[:, 0]),
                               np.sort(pareto_rows.loc[ok, "train_time_s"] / 86_400.0))

    def dominated(p, others):
        return np.any(np.all(others <= p, axis=1) & np.any(others < p, axis=1))

    assert not any(dominated(p, options) for p in front)
    on_front = {tuple(p) for p in front}
    assert all(dominated(p, options) for p in options if tuple(p) not in on_front)
    labels = [t for t in ax.texts if t.get_visible()]
    assert labels and all("GPUs" in t.get_text() for t in labels)


def test_procurement_pareto_total_cost_and_every_point_labelled(pareto_rows):
    """A right axis reads the total cost of the token budget; the front's
    labels give it; the points off the front are labelled too (grey)."""
    fig = plots.procurement_pareto(pareto_rows)
    ax = fig.axes[0]
    total = [c for c in ax.child_axes if c.get_gid() == plots_procurement.TOTAL_AXIS_GID]
    assert len(total) == 1 and "total cost of 1T tokens [USD" in total[0].get_ylabel()
    # the secondary axis maps USD per million tokens to USD for 10^12 tokens
    ok = plot_data.feasible(pareto_rows) & pareto_rows["cost_usd_per_million_tokens"].notna()
    row = pareto_rows[ok].iloc[0]
    forward = total[0]._functions[0]
    assert forward(row["cost_usd_per_million_tokens"]) == pytest.approx(row["train_cost_usd"])
    front = [t for t in ax.texts if t.get_gid() == plots_procurement.FRONT_LABEL_GID]
    off = [t for t in ax.texts if t.get_gid() == plots_procurement.OFF_FRONT_LABEL_GID]
    on_front = plot_data.pareto_front(pareto_rows.loc[ok, "train_time_s"],
                                      pareto_rows.loc[ok, "cost_usd_per_million_tokens"])
    assert len(front) == on_front.sum() and len(off) == (~on_front).sum() > 0
    assert all("$" in t.get_text() for t in front)
    assert any(t.get_visible() for t in off)
    assert all("GPUs" in t.get_text() for t in off)


def test_procurement_pareto_needs_a_time_to_train(cat):
    rows = sweep(cat, model="llama3-8b", gpu="h100", num_gpus="8,64", best=True)
    with pytest.raises(ConfigError, match="--tokens"):
        plots.procurement_pareto(rows)
    fig = plots.procurement_pareto(rows, tokens=1e12)
    assert "1T tokens" in fig.axes[0].get_xlabel()
    no_price = sweep(cat, model="llama3-8b", gpu="gaudi3", num_gpus="8", tokens="1t")
    with pytest.raises(ConfigError, match="price"):
        plots.procurement_pareto(no_price)


# -- 5. step breakdown -------------------------------------------------------------------------
def test_step_components_add_up_to_the_step(cat):
    rows = sweep(cat, model="llama3-8b,gpt3-1.3b", gpu="h100", num_gpus="8,64",
                 sharding="full,grad_op,optimizer,none,hybrid", recompute="none,selective,full",
                 micro_batch="1,4")
    rows = rows[rows["step_time_s"].notna()]
    parts = plot_data.step_components(rows)
    assert list(parts.columns) == list(plot_data.STEP_PARTS)
    assert (parts.to_numpy() >= 0).all() and (parts["pipeline bubble"] == 0).all()
    np.testing.assert_allclose(parts.sum(axis=1), rows["step_time_s"], rtol=1e-12)
    np.testing.assert_allclose(parts["recompute"], rows["time.recompute_s"])


@pytest.mark.parametrize("normalize, per", [(False, "token"), (False, "step"),
                                            (True, "token")])
def test_step_breakdown_bars(breakdown_rows, normalize, per):
    fig = plots.step_breakdown(breakdown_rows, normalize=normalize, per=per)
    ax = check_readable(fig, categorical_y=True)
    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    names = [c.get_label() for c in containers]
    assert names[:4] == ["GEMM", "attention", "memory-bound", "recompute"]
    assert "exposed communication" in names and "optimizer" in names
    assert any(n.startswith("pipeline bubble") for n in names)  # the slot, 0 today
    widths = np.sum([[bar.get_width() for bar in c] for c in containers], axis=0)
    step = breakdown_rows["step_time_s"].to_numpy()
    if normalize:
        want = np.full(step.size, 100.0)
    elif per == "step":
        want = step * (1e3 if step.max() < 2 else 1.0)
    else:  # GPU time per token [µs] = 1 / tokens per second per GPU
        want = 1e6 / breakdown_rows["tokens_per_s_per_gpu"].to_numpy()
        assert ax.get_xlabel().startswith("GPU time per token [µs]")
    np.testing.assert_allclose(widths, want, rtol=1e-9)
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        f"{b} Gb/s · mbs {m} · recompute {r}" for b, m, r in
        zip([25, 100, 400], breakdown_rows["training.micro_batch"],
            breakdown_rows["training.recompute"])]
    # Less bandwidth, more exposed communication.
    exposed = [c for c in containers if c.get_label() == "exposed communication"][0]
    assert exposed[0].get_width() > exposed[2].get_width()


def test_step_breakdown_compares_other_micro_batches_per_token(cat):
    """By default the bars are per token (GPU time), so a micro-batch of 4
    is not drawn 4x as long as one of 1 for the same throughput; the axis says so."""
    rows = sweep(cat, model="llama3-8b", gpu="h100", num_gpus="64", micro_batch="1,4",
                 recompute="full", free_batch=True)
    fig = plots.step_breakdown(rows)
    ax = fig.axes[0]
    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    widths = np.sum([[bar.get_width() for bar in c] for c in containers], axis=0)
    np.testing.assert_allclose(widths, 1e6 / rows["tokens_per_s_per_gpu"].to_numpy(), rtol=1e-9)
    assert widths.max() / widths.min() < 2  # per step they differ about 4x
    step = rows["step_time_s"].to_numpy()
    assert step.max() / step.min() > 3
    assert "per token" in ax.get_xlabel()
    with pytest.raises(ConfigError, match="per 'sequence' is not accepted"):
        plots.step_breakdown(rows, per="sequence")


def test_step_breakdown_limits_bars(throughput_rows):
    with pytest.raises(ConfigError, match="at most 3 configurations"):
        plots.step_breakdown(throughput_rows, max_bars=3)


# -- saving and the command line ---------------------------------------------------------------
@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml"),
                                           (".pdf", b"%PDF")])
def test_save_by_suffix(tmp_path, breakdown_rows, suffix, magic):
    path = plots.save(plots.step_breakdown(breakdown_rows), tmp_path / f"f{suffix.upper()}")
    assert path.read_bytes().startswith(magic)


def test_save_rejects_bad_paths(tmp_path, breakdown_rows):
    fig = plots.step_breakdown(breakdown_rows)
    with pytest.raises(ConfigError, match=r"unknown suffix '\.jpg'; accepted: \.png, \.svg"):
        plots.save(fig, tmp_path / "f.jpg")
    with pytest.raises(ConfigError, match="folder"):
        plots.save(fig, tmp_path / "missing" / "f.png")


@pytest.fixture(scope="module")
def rows_csv(tmp_path_factory, pareto_rows):
    path = tmp_path_factory.mktemp("rows") / "rows.csv"
    from fsdpsim.cli.sweep import write
    write(pareto_rows, None, "csv", str(path))
    return path


@pytest.mark.parametrize("kind", ["pareto", "breakdown", "throughput"])
def test_cli_plot_from_a_csv(tmp_path, rows_csv, kind):
    out = tmp_path / f"{kind}.png"
    args = ["plot", kind, "--input", str(rows_csv), "--output", str(out)]
    if kind == "throughput":
        args += ["--by", "plan.num_gpus", "--metric", "mfu"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(b"\x89PNG") and "written to" in result.output


def test_cli_plot_with_inline_sweep_options(tmp_path):
    out = tmp_path / "t.svg"
    result = CliRunner().invoke(cli, ["plot", "throughput", "--model", "llama3-8b,llama3-70b",
                                      "--gpu", "h100,b200", "--num-gpus", "64", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "a sweep of 4 rows" in result.output and out.stat().st_size > 0
    out = tmp_path / "b.png"
    result = CliRunner().invoke(cli, ["plot", "bandwidth", "--inter-node-gbps-per-gpu",
                                      "25,100,400", "--micro-batch", "1,4,16", "-o", str(out)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("args, message", [
    (["plot", "pie", "-o", "x.png"], "unknown plot kind 'pie'; accepted: throughput, memory"),
    (["plot", "pareto", "-o", "x.jpg"], "unknown suffix '.jpg'"),
    (["plot", "pareto", "--metric", "mfu", "-o", "x.png"], "--metric applies to the throughput"),
    (["plot", "pareto", "--input", "nowhere.csv", "-o", "x.png"], "does not exist"),
    (["plot", "pareto", "--input", "rows.txt", "-o", "x.png"], "unknown suffix '.txt'"),
    (["plot", "pareto"], "Missing option '--output'"),
])
def test_cli_plot_errors_are_one_line(capsys, args, message):
    rc, out, err = run(capsys, *args)
    assert rc == 2 and err.count("\n") == 1 and message in err, err


def test_cli_plot_errors_on_rows(capsys, tmp_path, rows_csv):
    bad = tmp_path / "bad.csv"
    pd.read_csv(rows_csv).drop(columns=["cost_usd_per_million_tokens"]).to_csv(bad, index=False)
    rc, _, err = run(capsys, "plot", "pareto", "--input", str(bad), "-o", str(tmp_path / "p.png"))
    assert rc == 2 and "needs the sweep columns cost_usd_per_million_tokens" in err
    assert err.count("\n") == 1
    rc, _, err = run(capsys, "plot", "pareto", "--input", str(rows_csv), "--gpu", "h100",
                     "-o", str(tmp_path / "p.png"))
    assert rc == 2 and "not both" in err
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    rc, _, err = run(capsys, "plot", "pareto", "--input", str(empty), "-o", str(tmp_path / "p.png"))
    assert rc == 2 and "cannot be read" in err and err.count("\n") == 1


def _visible_boxes(fig, texts):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return renderer, [t.get_window_extent(renderer) for t in texts
                      if t.get_visible() and t.get_text().strip()]


def test_procurement_pareto_labels_overlap_nothing_and_stay_inside(cat):
    """Many close options: every shown label is clear of the others and of the legend and
    inside the plotting area; every label of the front is shown."""
    rows = sweep(cat, model="llama3-70b", gpu="h100,h200,b200,mi300x,a100",
                 num_gpus="256,512,1024,2048", tokens="15t", best=True)
    fig = plots.procurement_pareto(rows)
    ax = fig.axes[0]
    renderer, boxes = _visible_boxes(fig, ax.texts)
    legends = [lg.get_window_extent(renderer) for lg in fig.legends]
    legends += [a.get_legend().get_window_extent(renderer) for a in fig.axes if a.get_legend()]
    area = ax.get_window_extent(renderer)
    assert legends and len(boxes) >= 8
    for i, a in enumerate(boxes):
        assert not any(a.overlaps(b) for b in boxes[i + 1:] + legends)
        assert area.x0 <= a.x0 and a.x1 <= area.x1 and area.y0 <= a.y0 and a.y1 <= area.y1
    front = [t for t in ax.texts if t.get_gid() == plots_procurement.FRONT_LABEL_GID]
    assert all(t.get_visible() for t in front)
    total = next(c for c in ax.child_axes if c.get_gid() == plots_procurement.TOTAL_AXIS_GID)
    low, high = total.get_ylim()
    shown = [t for t in total.yaxis.get_ticklabels() if t.get_text().strip()
             and low <= t.get_position()[1] <= high]
    assert len(shown) >= 3, [t.get_text() for t in shown]  # the right axis can be read


def test_compare_memory_legend_covers_no_bar_label(cat):
    """The legend sits outside the bars' area: no value label under it."""
    from fsdpsim.report.plots import compare as plots_compare
    from fsdpsim.drivers.compare import sweep_frame

    rows = _report_rows()
    fig = plots_compare.memory_bars(sweep_frame(rows))
    renderer, boxes = _visible_boxes(fig, fig.axes[0].texts)
    legends = [lg.get_window_extent(renderer) for lg in fig.legends]
    legends += [a.get_legend().get_window_extent(renderer) for a in fig.axes if a.get_legend()]
    assert legends and boxes
    assert not any(b.overlaps(lg) for b in boxes for lg in legends)


def _report_rows():
    from fsdpsim.drivers.compare import Case, compare
    from fsdpsim.hardware.catalog import load_catalog

    catalog = load_catalog()
    spec = get_model("llama3-70b")
    cases = [Case(spec, gpu, resolve_system(catalog, gpu=gpu), 256)
             for gpu in ("h100", "b200", "mi300x")]
    return compare(cases, TrainingConfig(seq_len=4096, global_batch=1024))


def test_report_bandwidth_map_runs_the_rows_own_mesh():
    """The map of a row is that row's searched mesh (its TP and PP degrees in every row of the
    map, an uneven pipeline split included: the sweep takes the framework's split), and the
    caption names it."""
    from fsdpsim.report import html

    for row in _report_rows():
        caption, rows = html._bandwidth_map(row, TrainingConfig(seq_len=4096,
                                                                global_batch=1024), plot_data)
        plan = row.prediction.plan
        assert "FSDP (" not in caption
        assert plan["line"].split(" × ")[0].split("(")[0] in caption
        ran = rows[rows["mfu"].notna()]
        assert not ran.empty
        assert (ran["plan.tp"].astype(int) == plan["tp"]).all()
        assert (ran["plan.pp"].astype(int) == plan["pp"]).all()


def test_procurement_pareto_log_cost_axis_keeps_readable_right_ticks(cat):
    """Costs spanning more than 8x draw on a log axis; the total-cost axis beside it still
    shows at least three labelled ticks (not only the one decade inside the range)."""
    rows = sweep(cat, model="llama3-70b", gpu="h100,b200", num_gpus="256,512,1024",
                 tokens="15t", best=True)
    rows = rows.assign(cost_usd_per_million_tokens=rows["cost_usd_per_million_tokens"].where(
        rows["gpu"] != "b200", rows["cost_usd_per_million_tokens"] * 12))
    fig = plots.procurement_pareto(rows)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    fig.canvas.draw()
    total = next(c for c in ax.child_axes if c.get_gid() == plots_procurement.TOTAL_AXIS_GID)
    low, high = total.get_ylim()
    shown = [t for t in total.yaxis.get_ticklabels(which="both") if t.get_text().strip()
             and low <= t.get_position()[1] <= high]
    assert len(shown) >= 3, [t.get_text() for t in shown]
