"""The data behind the figures of :mod:`fsdpsim.report.plots.sweep`: sweep rows in, plain tables
out.

Nothing here draws (matplotlib lives in :mod:`fsdpsim.report.plots.sweep` only) and nothing computes
a cost: every number comes from a sweep row (:func:`fsdpsim.drivers.sweep.run.run_sweep`, the one
engine). This module selects, groups and reshapes those rows: the largest model that fits per GPU
count, the Pareto front of cost against time, the parts of a step, the bandwidth × tokens grid.

Column names are those of ``fsdpsim sweep`` (predict's JSON flattened with dots).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from fsdpsim.hardware.catalog import Catalog, load_catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.files import MAX_ROWS_BYTES, open_capped
from fsdpsim.drivers.sweep.grid import DEFAULTS as GRID_DEFAULTS
from fsdpsim.drivers.sweep.grid import build_grid
from fsdpsim.hardware.system import resolve_system
from fsdpsim.plan.knobs import KNOBS, PLAN_SWITCHES, switch_fields
from fsdpsim.util.units import GBIT_PER_S_BYTES_PER_S

KINDS = ("throughput", "memory", "bandwidth", "pareto", "breakdown")

#: Inter-node bandwidths of the default bandwidth map [Gb/s per GPU]: 12.5 to 1,600, four
#: points per doubling (50, 100, 200, 400 Gb/s are on the grid).
MAP_BANDWIDTHS_GBPS = tuple(float(12.5 * 2 ** (k / 4)) for k in range(29))
#: Micro-batches of the default bandwidth map (tokens per GPU = micro-batch × sequence length:
#: 4,096 to 131,072 tokens).
MAP_MICRO_BATCHES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
#: Sequence length of the default bandwidth map: the sweep's and predict's default
#: (:data:`fsdpsim.drivers.sweep.grid.DEFAULTS`), as every other figure uses.
MAP_SEQ_LEN = int(GRID_DEFAULTS["seq-len"])
#: Real installations marked on the bandwidth map (catalog node or cluster ids).
MAP_CLUSTERS = ("p4d", "leonardo", "juwels-booster", "jupiter", "perlmutter", "dgx-h100")

#: Model sizes of the default memory-ceiling sweep: 1B to 5T, six steps per decade.
CEILING_SIZES = ("1b,1.5b,2b,3b,5b,7b,10b,15b,20b,30b,50b,70b,100b,150b,200b,300b,500b,700b,"
                 "1t,1.5t,2t,3t,5t")
#: Sweep options each figure uses when it is given options instead of rows; the caller's
#: options win. ``model``/``model-sizes`` and ``gpu``/``cluster`` replace each other.
DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {
    "throughput": {"model-sizes": "1b..1t", "gpu": "a100,h100,b200", "num-gpus": "512",
                   "best": True},
    "memory": {"model-sizes": CEILING_SIZES, "gpu": "a100-40gb,a100,h200,b200",
               "num-gpus": "8..4096", "best": True,
               "free-batch": True},
    "memory-seq": {"model": "llama3-70b", "gpu": "a100-40gb,a100,h200,b200",
                   "num-gpus": "8..1024", "micro-batch": "1", "recompute": "full"},
    "bandwidth": {"model": "llama3-8b", "gpu": "h100", "num-gpus": "64",
                  "inter-node-gbps-per-gpu": list(MAP_BANDWIDTHS_GBPS),
                  "seq-len": str(MAP_SEQ_LEN), "micro-batch": list(MAP_MICRO_BATCHES),
                  "sharding": "full", "recompute": "auto"},
    "pareto": {"model": "llama3-70b", "gpu": "a100-40gb,h100", "num-gpus": "64..2048",
               "global-batch": "2048", "tokens": "1t", "best": True},
    "breakdown": {"model": "llama3-8b", "gpu": "h100", "num-gpus": "64",
                  "inter-node-gbps-per-gpu": "25,50,100,200,400", "best": True},
}
_REPLACES = (("model", "model-sizes"), ("gpu", "cluster"))

#: Columns each figure reads.
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "throughput": ("n_params", "tokens_per_s_per_gpu", "mfu", "fits"),
    "memory": ("n_params", "gpu", "plan.num_gpus", "fits", "memory.capacity_bytes"),
    "memory-seq": ("gpu", "plan.num_gpus", "thresholds.max_seq_len", "memory.capacity_bytes"),
    "bandwidth": ("model", "gpu", "plan.num_gpus", "inter_node_gbps_per_gpu", "training.seq_len",
                  "training.micro_batch", "mfu", "fits", "thresholds.min_inter_node_gbps_per_gpu"),
    "pareto": ("gpu", "plan.num_gpus", "cost_usd_per_million_tokens", "tokens_per_s"),
    "breakdown": ("step_time_s", "tokens_per_s_per_gpu", "time.compute_s", "time.gemm_s",
                  "time.attention_s", "time.memory_bound_s", "time.recompute_s", "time.optimizer_s",
                  "time.exposed_comm_s"),
}
#: Columns that tell configurations apart, in the order labels name them.
LABEL_COLUMNS = ("model", "cluster", "gpu", "network", "inter_node_gbps_per_gpu", "plan.num_gpus",
                 "training.seq_len", "training.precision", "plan.sharding",
                 "training.micro_batch", "training.recompute")


# -- rows ----------------------------------------------------------------------------------------
def merged_options(kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` over :data:`DEFAULT_OPTIONS` of ``kind`` (keys as ``fsdpsim sweep`` names)."""
    given = {str(k).strip().lower().replace("_", "-"): v for k, v in options.items()
             if v is not None and v != () and v != []}
    defaults = dict(DEFAULT_OPTIONS[kind])
    for group in _REPLACES:
        if any(k in given for k in group):
            for k in group:
                defaults.pop(k, None)
    return {**defaults, **given}


def sweep_rows(options: Mapping[str, Any], catalog: Catalog | None = None) -> pd.DataFrame:
    """Rows of ``fsdpsim sweep`` for ``options`` (names as
    :data:`fsdpsim.drivers.sweep.grid.GRID_KEYS`)."""
    from fsdpsim.drivers.sweep.run import run_sweep

    return run_sweep(build_grid(catalog or load_catalog(), options))


def rows_for(kind: str, rows: pd.DataFrame | Mapping[str, Any],
             catalog: Catalog | None = None) -> pd.DataFrame:
    """``rows`` itself, or the sweep of ``rows`` taken as options (over the kind's defaults);
    checked for the columns ``kind`` reads."""
    if isinstance(rows, pd.DataFrame):
        frame = rows
    elif isinstance(rows, Mapping):
        frame = sweep_rows(merged_options(kind, rows), catalog)
    else:
        raise ConfigError(f"expected a DataFrame of sweep rows or a mapping of sweep options, "
                          f"got {type(rows).__name__}")
    require_columns(frame, kind)
    return frame


def require_columns(rows: pd.DataFrame, kind: str) -> None:
    missing = [c for c in REQUIRED_COLUMNS[kind] if c not in rows.columns]
    if missing:
        raise ConfigError(f"the {kind} plot needs the sweep columns {', '.join(missing)}, "
                          f"which the rows lack; give rows of `fsdpsim sweep`")
    if rows.empty:
        raise ConfigError(f"the {kind} plot got no rows")


def read_rows(path: str | Path) -> pd.DataFrame:
    """Sweep rows from a CSV, JSON (records) or Parquet file written by ``fsdpsim sweep``."""
    path = Path(path)
    readers = {".csv": pd.read_csv, ".json": pd.read_json, ".parquet": pd.read_parquet}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise ConfigError(f"--input {str(path)!r}: unknown suffix {path.suffix!r}; accepted: "
                          f"{', '.join(readers)}")
    source = open_capped(path, "--input", MAX_ROWS_BYTES)
    try:
        # copy(): one block per dtype. read_csv leaves a block per column, and adding columns
        # to a frame of more than 100 blocks makes pandas warn on stderr (PerformanceWarning).
        return reader(source).copy()
    except (ValueError, OSError, ImportError) as exc:  # pandas' parse errors are ValueErrors
        raise ConfigError(f"--input {str(path)!r} cannot be read: "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                          ) from None


def feasible(rows: pd.DataFrame) -> pd.Series:
    """Rows one can run: a prediction that fits, within the named cluster."""
    ok = rows["fits"].astype(bool) if "fits" in rows else pd.Series(True, index=rows.index)
    if "infeasible" in rows:
        ok &= rows["infeasible"].isna() | (rows["infeasible"].astype(str) == "")
    return ok


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and np.isnan(value)) or \
        value is pd.NA else str(value)


def _fmt_value(column: str, value: Any) -> str:
    if column == "plan.num_gpus":
        return f"{int(value):,} GPUs"
    if column == "inter_node_gbps_per_gpu":
        return f"{float(value):.4g} Gb/s"
    if column == "training.seq_len":
        return f"seq {int(value):,}"
    if column == "training.micro_batch":
        return f"mbs {int(value)}"
    if column in ("plan.sharding", "training.recompute"):
        return f"{column.split('.')[1]} {value}"
    return _text(value)


def config_labels(rows: pd.DataFrame, columns: Sequence[str] = LABEL_COLUMNS,
                  keep: Sequence[str] = ()) -> list[str]:
    """One short label per row naming the columns that vary (and those in ``keep``)."""
    present = [c for c in columns if c in rows.columns]
    varying = [c for c in present
               if c in keep or rows[c].map(_text).nunique() > 1]
    if "cluster" in varying and (rows["cluster"].map(_text) != "").all():
        # a cluster names its GPU, and its network where each cluster has one in the rows
        for implied in ("gpu", "network", "inter_node_gbps_per_gpu"):
            if implied in varying and (implied == "gpu" or implied not in keep and rows.groupby(
                    rows["cluster"].map(_text))[implied].agg(lambda v: v.map(_text).nunique())
                    .max() == 1):
                varying.remove(implied)
    labels = []
    for _, row in rows[varying].iterrows():
        parts = [_fmt_value(c, row[c]) for c in varying]
        if "cluster" in varying and "gpu" in varying and _text(row["cluster"]):
            parts.remove(_text(row["gpu"]))
        labels.append(" · ".join(p for p in parts if p) or "configuration")
    return labels


def group_labels(rows: pd.DataFrame, by: str) -> pd.Series:
    """Legend label of each row's group. For ``by="system"`` the shortest unique hardware name:
    the cluster (or GPU) id, then with the network and bandwidth, else the full system label."""
    if by not in rows.columns:
        raise ConfigError(f"by={by!r} is not a column of the rows; accepted: e.g. system, gpu, "
                          "cluster, plan.num_gpus, training.seq_len")
    if by != "system" or not {"gpu", "cluster", "network"} <= set(rows.columns):
        return rows[by].map(lambda v: _fmt_value(by, v))
    systems = rows.drop_duplicates("system")
    base = [_text(c) or _text(g) for c, g in zip(systems["cluster"], systems["gpu"])]
    longer = [f"{b} · {_text(n)}" + (f" · {float(w):.4g} Gb/s"
                                      if "inter_node_gbps_per_gpu" in systems else "")
              for b, n, w in zip(base, systems["network"],
                                 systems.get("inter_node_gbps_per_gpu", systems["network"]))]
    for labels in (base, longer, list(systems["system"].astype(str))):
        if len(set(labels)) == len(labels):
            return rows["system"].map(dict(zip(systems["system"], labels)))
    return rows["system"].astype(str)


# -- throughput and memory ceilings ---------------------------------------------------------------
def best_per_group(rows: pd.DataFrame, group: Sequence[str], value: str) -> pd.DataFrame:
    """The row with the largest ``value`` per ``group`` (NaN values ignored)."""
    rows = rows[rows[value].notna()]
    index = rows.groupby(list(group), sort=True, observed=True)[value].idxmax()
    return rows.loc[index.to_numpy()]


def ceiling_group_columns(rows: pd.DataFrame, extra: Sequence[str]) -> list[str]:
    """``gpu`` plus the columns of ``extra`` that vary: one line each."""
    return ["gpu"] + [c for c in extra if c in rows and rows[c].map(_text).nunique() > 1]


def model_size_ceiling(rows: pd.DataFrame) -> pd.DataFrame:
    """Largest ``n_params`` that fits per GPU group and GPU count, from a model-size sweep.

    Columns: the group columns, ``plan.num_gpus``, ``n_params`` (largest fitting), ``capped``
    (the largest size of the sweep fits, so the real ceiling is higher) and ``capacity_bytes``.
    """
    group = ceiling_group_columns(rows, ("training.seq_len", "training.precision"))
    keys = group + ["plan.num_gpus"]
    fit = rows[rows["fits"].astype(bool)]
    out = fit.groupby(keys, observed=True, sort=True)["n_params"].max().rename("n_params")
    top = rows.groupby(keys, observed=True, sort=True)["n_params"].max().rename("top")
    cap = rows.groupby(group, observed=True)["memory.capacity_bytes"].max().rename(
        "capacity_bytes")
    frame = out.to_frame().join(top).reset_index().join(cap, on=group)
    frame["capped"] = frame["n_params"] >= frame["top"]
    return frame.drop(columns="top")


def seq_len_ceiling(rows: pd.DataFrame) -> pd.DataFrame:
    """Longest sequence that fits (``thresholds.max_seq_len``, largest over the rows of a
    group) per GPU group and GPU count; columns as :func:`model_size_ceiling`."""
    if rows["thresholds.max_seq_len"].isna().all():
        raise ConfigError("the rows have no thresholds.max_seq_len: run the sweep with ceilings "
                          "on (the default; not --no-ceilings)")
    group = ceiling_group_columns(rows, ("model", "training.precision"))
    keys = group + ["plan.num_gpus"]
    best = best_per_group(rows, keys, "thresholds.max_seq_len")
    frame = best[keys + ["thresholds.max_seq_len", "memory.capacity_bytes"]].rename(
        columns={"thresholds.max_seq_len": "max_seq_len",
                 "memory.capacity_bytes": "capacity_bytes"})
    frame = with_columns(frame[frame["max_seq_len"] > 0], capped=False)
    return frame.sort_values(keys).reset_index(drop=True)


# -- Pareto front -------------------------------------------------------------------------------
def pareto_front(x: Sequence[float], y: Sequence[float]) -> np.ndarray:
    """Boolean mask of the points no other point dominates when both ``x`` and ``y`` are to be
    minimised (dominated: another point is no larger in both and smaller in one). Equal points
    are all on the front."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    order = np.lexsort((y, x))  # by x, then y
    front = np.zeros(x.size, dtype=bool)
    best_y, last = np.inf, None
    for i in order:
        if y[i] < best_y or (last is not None and x[i] == x[last] and y[i] == y[last]):
            front[i] = True
            best_y, last = y[i], i
    return front


def with_columns(frame: pd.DataFrame, **columns) -> pd.DataFrame:
    """``frame.assign(**columns)`` in one concatenation (sweep rows hold many categorical
    columns, one block each, and pandas warns on every insert into such a frame)."""
    return pd.concat([frame, pd.DataFrame(columns, index=frame.index)], axis=1)


def train_time_s(rows: pd.DataFrame, tokens: float | None) -> pd.Series:
    """Time to train: the rows' ``train_time_s``, or ``tokens`` / tokens per second."""
    if tokens is not None:
        return tokens / rows["tokens_per_s"]
    if "train_time_s" not in rows:
        raise ConfigError("the pareto plot needs the time to train: run the sweep with --tokens "
                          "(e.g. --tokens 1t) or pass tokens=")
    return rows["train_time_s"]


# -- step breakdown -----------------------------------------------------------------------------
#: Parts of a step, in stacking order (label, colour key).
STEP_PARTS = ("GEMM", "attention", "memory-bound", "recompute", "other compute",
              "exposed communication", "optimizer", "pipeline bubble")


def step_components(rows: pd.DataFrame) -> pd.DataFrame:
    """Seconds per step of each part of :data:`STEP_PARTS`, one row per configuration.

    compute = GEMM + attention + memory-bound (which includes the optimizer) + recompute +
    launch overhead ("other compute", when kernel launches bound a layer); the step adds the
    exposed communication. The pipeline bubble is 0 until pipeline parallelism exists
    (``time.pipeline_bubble_s`` is read when present).
    """
    t = {k: rows[f"time.{k}"].to_numpy(dtype=float) for k in
         ("compute_s", "gemm_s", "attention_s", "memory_bound_s", "recompute_s", "optimizer_s",
          "exposed_comm_s")}
    other = t["compute_s"] - t["gemm_s"] - t["attention_s"] - t["memory_bound_s"] \
        - t["recompute_s"]
    bubble = (rows["time.pipeline_bubble_s"].to_numpy(dtype=float)
              if "time.pipeline_bubble_s" in rows else np.zeros(len(rows)))
    parts = (t["gemm_s"], t["attention_s"], t["memory_bound_s"] - t["optimizer_s"],
             t["recompute_s"], np.maximum(other, 0.0), t["exposed_comm_s"], t["optimizer_s"],
             bubble)
    return pd.DataFrame(dict(zip(STEP_PARTS, parts)), index=rows.index)


# -- bandwidth map ------------------------------------------------------------------------------
def bandwidth_map_rows(model: str, gpu: str, *, num_gpus: int = 64,
                       gpus_per_node: int | None = None,
                       bandwidths_gbps: Sequence[float] = MAP_BANDWIDTHS_GBPS,
                       seq_len: int = MAP_SEQ_LEN,
                       micro_batches: Sequence[int] = MAP_MICRO_BATCHES,
                       sharding: str = "full", recompute: str = "auto",
                       precision: str = "bf16",
                       plan_options: Mapping[str, Any] | None = None,
                       catalog: Catalog | None = None) -> pd.DataFrame:
    """Sweep rows for :func:`fsdpsim.report.plots.sweep.bandwidth_map`: ``model`` on ``num_gpus`` ×
    ``gpu`` at every inter-node bandwidth per GPU [Gb/s, one direction] × micro-batch (tokens per
    GPU per micro-batch = micro-batch × ``seq_len``), in one vectorised sweep (the engine of
    ``predict``). ``recompute="auto"`` keeps the fastest setting that fits at each point; each
    point runs one micro-batch per GPU per step (``free-batch``: the map is of one micro-batch's
    communication against its compute). ``plan_options`` (sweep options, e.g.
    :func:`plan_sweep_options` of a searched plan) replace the FSDP plan: the map then shows that
    mesh at every micro-batch and bandwidth, at the plan's global batch."""
    options: dict[str, Any] = {
        "model": model, "gpu": gpu, "num-gpus": str(num_gpus),
        "inter-node-gbps-per-gpu": [float(b) for b in bandwidths_gbps],
        "seq-len": str(seq_len), "micro-batch": [int(m) for m in micro_batches],
        "sharding": sharding, "recompute": recompute, "precision": precision,
        "free-batch": True}
    if gpus_per_node is not None:
        options["gpus-per-node"] = str(gpus_per_node)
    options.update(plan_options or {})
    if "global-batch" in options:  # a plan's own batch: its accumulation at each micro-batch
        del options["free-batch"]
    return sweep_rows(options, catalog)


def plan_sweep_options(plan: Mapping[str, Any], training: Mapping[str, Any]) -> dict[str, Any]:
    """Sweep options that run the mesh of a predicted plan (``Prediction.plan`` and
    ``.training`` as mappings): sharding, TP/PP/CP/EP degrees and their switches, the schedule,
    recompute, the global batch and the framework (whose rule splits the layers over the
    stages). Micro-batch and bandwidth are left to the map's axes; a stated split
    (first/last-stage layers, per-rank counts) the sweep does not take: its stages follow the
    framework's split."""
    out: dict[str, Any] = {
        "sharding": str(plan["sharding"]), "recompute": str(training["recompute"]),
        "global-batch": str(int(training["global_batch"]))}
    if plan.get("framework"):
        out["framework"] = str(plan["framework"])
    for name in ("tp", "pp", "cp", "vpp", "ep"):
        out[name] = str(int(plan[name]))
    if int(plan["ep"]) > 1 and plan.get("etp") is not None:
        out["etp"] = str(int(plan["etp"]))
    if int(plan["pp"]) > 1 and plan.get("pp_schedule"):
        out["pp-schedule"] = str(plan["pp_schedule"])
    if plan["sharding"] == "hybrid":
        out["shard-group-size"] = str(int(plan["dp_shard"]))
    fields = switch_fields(plan)  # each switch sweep takes, where the plan states it
    for k in (KNOBS[name] for name in PLAN_SWITCHES if "sweep" in KNOBS[name].commands):
        if fields[k.name] is not None:
            out[k.option[2:]] = bool(fields[k.name]) if k.kind == "flag" else str(fields[k.name])
    if training.get("recompute_layers") is not None:
        out["recompute-layers"] = str(int(training["recompute_layers"]))
    return out


def bandwidth_grid(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """The rows as 2-D arrays over (tokens per GPU per micro-batch, bandwidth).

    Keys: ``bandwidth_gbps`` (x, ascending), ``tokens`` (y, ascending), ``mfu`` (NaN where
    nothing fits or no row), ``fits``, ``log_ratio`` = log10(bandwidth / bandwidth needed to
    hide the communication) — 0 on the hide-communication threshold, +3 without inter-node
    traffic, -3 where communication cannot hide at any bandwidth; ``log_ratio_share`` the same
    for the bandwidth at which throughput reaches 95 % of its infinite-bandwidth value (0 where
    the bottleneck turns to the network; NaN for rows of a sweep file without that column);
    ``uncertainty``, the rows' median network uncertainty (``interval.network_uncertainty``;
    0 without it).
    """
    for column in ("model", "gpu", "plan.num_gpus", "plan.sharding"):
        named = rows[column].map(_text) if column in rows else pd.Series([], dtype=str)
        named = named[named != ""]  # rows the sweep could not run name no plan
        if named.nunique() > 1:
            raise ConfigError(f"the bandwidth map shows one configuration; the rows vary in "
                              f"{column} ({', '.join(sorted(set(named)))}): filter them first")
    ok = rows["mfu"].notna()
    r = rows[ok]
    tokens = r["training.seq_len"].astype(float) * r["training.micro_batch"].astype(float)
    share_col = "thresholds.inter_node_gbps_per_gpu_at_share"  # absent in older sweep files
    frame = pd.DataFrame({"x": r["inter_node_gbps_per_gpu"].astype(float).round(6),
                          "y": tokens, "mfu": r["mfu"].astype(float),
                          "fits": r["fits"].astype(bool),
                          "need": r["thresholds.min_inter_node_gbps_per_gpu"].astype(float),
                          "need_share": (r[share_col].astype(float) if share_col in r
                                         else np.nan)})
    if frame.duplicated(["x", "y"]).any():
        raise ConfigError("the bandwidth map needs one row per bandwidth and tokens per GPU; the "
                          "rows repeat some (e.g. several sequence lengths giving equal tokens)")
    xs, ys = np.sort(frame["x"].unique()), np.sort(frame["y"].unique())
    if xs.size < 2 or ys.size < 2:
        raise ConfigError("the bandwidth map needs at least two bandwidths "
                          "(--inter-node-gbps-per-gpu) and two tokens per GPU (--micro-batch)")
    grid = {k: np.full((ys.size, xs.size), np.nan)
            for k in ("mfu", "fits", "log_ratio", "log_ratio_share")}
    i, j = np.searchsorted(ys, frame["y"]), np.searchsorted(xs, frame["x"])
    grid["mfu"][i, j] = np.where(frame["fits"], frame["mfu"], np.nan)
    grid["fits"][i, j] = frame["fits"].astype(float)
    for key, column in (("log_ratio", "need"), ("log_ratio_share", "need_share")):
        need = frame[column].to_numpy()
        ratio = np.where(np.isnan(need), -3.0, np.where(need <= 0, 3.0, np.log10(
            frame["x"].to_numpy() / np.where(need > 0, need, 1.0))))
        grid[key][i, j] = np.clip(ratio, -3.0, 3.0)
    if not frame["need_share"].notna().any():
        grid["log_ratio_share"][:] = np.nan
    u = (rows.loc[ok, "interval.network_uncertainty"].astype(float)
         if "interval.network_uncertainty" in rows else pd.Series(dtype=float))
    return {"bandwidth_gbps": xs, "tokens": ys, **grid,
            "uncertainty": float(u.median()) if u.notna().any() else 0.0}


def cluster_bandwidths(catalog: Catalog, ids: Sequence[str] = MAP_CLUSTERS
                       ) -> list[tuple[str, str, float]]:
    """(id, accelerator id, inter-node Gb/s per GPU) of catalog nodes or clusters, as the engine
    sees them (:func:`fsdpsim.hardware.system.resolve_system`)."""
    out = []
    for ident in ids:
        system = resolve_system(catalog, cluster=ident)
        out.append((catalog.find(ident)[1], system.accelerator.id,
                    system.inter_node_bandwidth_bytes_per_s_per_gpu / GBIT_PER_S_BYTES_PER_S))
    return out


__all__ = ["KINDS", "DEFAULT_OPTIONS", "REQUIRED_COLUMNS", "bandwidth_map_rows",
           "bandwidth_grid", "cluster_bandwidths", "config_labels", "feasible", "group_labels",
           "model_size_ceiling", "pareto_front", "read_rows", "rows_for", "seq_len_ceiling",
           "step_components", "sweep_rows", "train_time_s"]
