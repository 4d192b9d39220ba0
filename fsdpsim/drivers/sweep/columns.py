"""The output columns of a sweep (:mod:`fsdpsim.drivers.sweep.run`): the inputs of every row, each
prediction field (named as in predict's JSON, flattened with dots), the plan, the prediction
interval, cost, energy and the ``infeasible`` reason."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from fsdpsim import engine

from fsdpsim.drivers import procurement

from fsdpsim.drivers import sensitivity
from fsdpsim.hardware.efficiency import resolve as resolve_efficiency
from fsdpsim.drivers.sweep.grid import Grid
from fsdpsim.plan.parallel import LOW_PRECISION, RECOMPUTES, SHARDED, SHARDINGS, TrainingConfig
from fsdpsim.drivers.predict import (COMM_KEYS, HFU_CONVENTION, MEMORY_KEYS, MFU_CONVENTION,
                             MODEL_PARALLEL_COMM, TIME_KEYS, faster_ratio, plan_line,
                             prediction_interval, training_inputs)
from fsdpsim.hardware.system import cluster_too_small
from fsdpsim.plan import knobs
from fsdpsim.plan.frameworks import profile
from fsdpsim.util.units import GIB_BYTES
from fsdpsim.drivers.sweep.tables import _Tables

_DEFAULT_TRAINING = TrainingConfig(seq_len=1)

#: Output columns taken from the engine, named as in predict's JSON flattened with dots.
THROUGHPUT_COLUMNS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu",
                      "mfu_native",
                      "model_flops_per_step", "hardware_flops_per_step")
DETAIL_COLUMNS = {
    "memory.peak_bytes": "peak_bytes", "memory.capacity_bytes": "capacity_bytes",
    **{f"memory.{k}": k for k in MEMORY_KEYS},
    **{f"time.{k}": k for k in TIME_KEYS},
    **{f"comm.{k}": k for k in COMM_KEYS}, "comm.exposed_s": "exposed_comm_s",
    **{f"comm.{dim}_{name}": key for dim, keys in MODEL_PARALLEL_COMM.items()
       for name, key in zip(("bytes", "s", "exposed_s"), keys)},
    "memory.stages.first": "peak_bytes_first_stage", "memory.stages.last": "peak_bytes_last_stage",
}
INT_COLUMNS = ("n_params", "plan.num_gpus", "plan.gpus_per_node", "plan.dp_shard",
               "plan.dp_replicate", "plan.zero", "plan.dp", "plan.tp", "plan.pp", "plan.cp",
               "plan.vpp", "training.seq_len", "training.micro_batch",
               "training.grad_accum", "training.global_batch", "candidates",
               "candidates_fitting", "thresholds.max_micro_batch", "thresholds.max_seq_len")



def _first_reason(reasons: np.ndarray, mask: np.ndarray, fmt: Callable[..., str], *cols) -> None:
    """Set ``reasons`` where ``mask`` holds and none is set yet, formatting once per distinct
    row."""
    idx = np.flatnonzero(mask & np.equal(reasons, None))
    if not idx.size:
        return
    values, codes = zip(*(np.unique(np.asarray(c)[idx], return_inverse=True) for c in cols))
    dims = tuple(v.size for v in values)
    keys, inverse = np.unique(np.ravel_multi_index([c.ravel() for c in codes], dims),
                              return_inverse=True)
    parts = np.unravel_index(keys, dims)
    messages = [fmt(*(v[i] for v, i in zip(values, row))) for row in zip(*parts)]
    reasons[idx] = np.array(messages, dtype=object)[inverse.ravel()]


def _utilisation_columns(grid: Grid, t: _Tables, p: dict[str, np.ndarray],
                         constant: Callable[[str], Any]) -> dict[str, Any]:
    """predict's ``utilisation``: the peaks MFU/HFU and ``mfu_native`` divide by, and the
    conventions (:meth:`fsdpsim.drivers.predict.Prediction.utilisation`)."""
    at = p["h"] * len(grid.precisions) + p["pr"]  # the system table's rows: system x precision
    native = np.array(grid.precision_names, dtype=object)[at]
    peak, native_peak = t.system["mfu_peak_flops_per_s"][at], t.system["peak_flops_per_s"][at]
    low = np.isin(native.astype(str), LOW_PRECISION)
    return {"utilisation.peak_precision": np.where(low & (peak != native_peak),
                                                   "bf16", native).astype(object),
            "utilisation.peak_flops_per_s_per_gpu": peak.astype(float),
            "utilisation.native_precision": native,
            "utilisation.native_peak_flops_per_s_per_gpu": native_peak.astype(float),
            "utilisation.mfu": constant(MFU_CONVENTION),
            "utilisation.hfu": constant(HFU_CONVENTION)}


def _columns_of(grid: Grid, t: _Tables, p, c, out, reasons, valid, counts, fitting,
                gbatch) -> dict[str, Any]:
    """The output rows: inputs, every prediction field, cost, energy and ``infeasible``."""
    rows = _Rows(valid.size, np.flatnonzero(valid), out)
    cols = _input_columns(grid, t, p, c, rows, gbatch)
    cols["candidates"] = counts.astype(float)
    cols["candidates_fitting"] = fitting
    cols.update(_prediction_columns(grid, t, p, rows))
    cols.update(_intervals(grid, p["h"], rows.at, cols, _twins(rows)))
    # bottleneck and thresholds: the sensitivity post-pass (fsdpsim.drivers.sensitivity), as predict
    for name, column in sensitivity.report_columns(
            {k: rows.value(k) for k in sensitivity.OUTPUTS}).items():
        cols[name] = rows.spread(column)  # NaN where predict says null
    for k in ("max_micro_batch", "max_seq_len"):  # absent without ceilings
        cols[f"thresholds.{k}"] = rows.spread(out[k]) if k in out else np.full(rows.n, np.nan)
    _not_runnable(grid, t, p, c, rows, cols, reasons, valid)
    cols.update(_economics(grid, cols, p["h"], p["pr"], np.equal(reasons, None)))
    cols["infeasible"] = reasons
    return cols


class _Rows:
    """The sweep's ``n`` output rows and the ``at`` of them with a prediction: the engine's
    outputs ``out`` (and the chosen knobs) hold one entry per such row."""

    def __init__(self, n: int, at: np.ndarray, out: dict[str, Any]):
        self.n, self.at, self.out = n, at, out

    def spread(self, values, fill=np.nan):
        """``values`` of the rows with a prediction on all rows, ``fill`` elsewhere."""
        full = np.full(self.n, fill, dtype=float if isinstance(fill, float) else object)
        full[self.at] = values
        return full

    def value(self, key):  # no valid row: no engine call, no outputs
        return self.out[key] if self.at.size else np.zeros(0)

    def knob(self, names, codes):
        """A chosen knob as a categorical; missing (-1) where the point is invalid."""
        full = np.full(self.n, -1)
        full[self.at] = codes
        return pd.Categorical.from_codes(full, categories=list(names))

    def constant(self, value):
        return pd.Categorical.from_codes(np.zeros(self.n, dtype=int), categories=[value])


def _named(names, codes):
    """Text columns as categoricals: cheap for millions of rows."""
    return pd.Categorical.from_codes(codes, categories=list(dict.fromkeys(names))
                                     ) if len(set(names)) == len(names) else \
        np.array(names, dtype=object)[codes]


def _per_entry(names, codes):
    """A text column per table entry, as a categorical."""
    categories = list(dict.fromkeys(names))
    return _named(categories, np.array([categories.index(x) for x in names], dtype=int)[codes])


def _per_training(trainings, name: str, codes) -> np.ndarray:
    """Field ``name`` of the system x precision entries' TrainingConfigs on every row
    (``codes``: each row's entry): true/false as booleans, a list as comma-separated text."""
    values = [getattr(tr, name) for tr in trainings]
    if all(isinstance(v, bool) for v in values):
        return np.array(values, dtype=bool)[codes]
    cells = np.empty(len(values), dtype=object)
    cells[:] = [",".join(v) if isinstance(v, tuple) else v for v in values]
    return cells[codes]


def _input_columns(grid: Grid, t: _Tables, p, c, rows: _Rows, gbatch) -> dict[str, Any]:
    """The inputs of every row, named as predict's JSON: model, system, plan and training
    (the chosen micro-batch, accumulation and recompute where the row has a prediction)."""
    n, at, spread = rows.n, rows.at, rows.spread

    def per_system(attr):
        return np.array([attr(x) for x in grid.hardware], dtype=float)[p["h"]]
    spec_rows = t.spec_of[p["m"], p["sq"]]
    sys_at = p["h"] * len(grid.precisions) + p["pr"]  # rows of the system x precision tables
    sharding_names = np.asarray(rows.knob(SHARDINGS, c["sh"]).astype(object))
    sharded = np.isin(sharding_names, SHARDED)
    kept = sharded & grid.keep_gathered
    num_gpus = np.array(grid.num_gpus, dtype=float)[p["g"]]
    plan_rows = t.plan_index(p["g"][at], p["h"][at], p["ly"][at], c["sh"])
    layouts = np.array(grid.layouts, dtype=float)[p["ly"]]
    dp = num_gpus / np.prod(layouts, axis=1)
    global_batch = gbatch.copy()
    global_batch[at] = c["mb"] * c["accum"] * dp[at]
    hw = grid.hardware
    return {
        "model": _named([s.name for s in t.specs], spec_rows),
        "n_params": np.array([s.n_params for s in t.specs], dtype=float)[spec_rows],
        "system": _named([x.system.label for x in hw], p["h"]),
        "gpu": _named([x.gpu for x in hw], p["h"]),
        "cluster": _named([x.cluster for x in hw], p["h"]),
        "network": _named([x.network for x in hw], p["h"]),
        "inter_node_gbps_per_gpu": per_system(lambda x: x.inter_node_gbps_per_gpu),
        "power_cap_w": per_system(lambda x: x.power_cap_w),
        "plan.num_gpus": num_gpus,
        "plan.gpus_per_node": spread(t.plan["gpus_per_node"][plan_rows]),
        "plan.sharding": rows.knob(SHARDINGS, c["sh"]),
        **_plan_columns(t, plan_rows, c, grid.recompute_layers, spread, n),
        "plan.reshard_after_forward": ~kept & (np.nan_to_num(spread(t.plan["reshard"][plan_rows]),
                                                             nan=1.0) > 0.5),
        "plan.keep_gathered": kept,
        "plan.grad_sync": np.where(sharded & (grid.grad_sync == "last"), "last",
                                   "every").astype(object),
        "training.seq_len": np.array(grid.seq_lens, dtype=float)[p["sq"]],
        "training.micro_batch": spread(c["mb"]),
        "training.grad_accum": spread(c["accum"]),
        "training.global_batch": global_batch,
        "training.recompute": rows.knob(RECOMPUTES, c["rc"]),
        "training.precision": _per_entry(grid.precision_names, sys_at),
        "training.optimizer": rows.constant(grid.optimizer),
        "training.reduce_dtype": _per_entry([tr.reduce_dtype or "fp32" for tr in t.trainings],
                                            sys_at),
        "training.flash_attention": np.full(n, _DEFAULT_TRAINING.flash_attention),
        "training.recompute_layers": np.full(n, grid.recompute_layers, dtype=object),
        "training.dropout": np.full(n, _DEFAULT_TRAINING.dropout),
        "training.moe_capacity_factor": np.full(n, grid.moe_capacity_factor, dtype=object),
        "training.moe_imbalance": np.full(n, grid.moe_imbalance, dtype=object),
        # every kernel knob, as predict's JSON (plan/knobs.kernel_fields): the grid's, else the
        # framework's default at each entry's precision
        **{knobs.KNOBS[name].field: _per_training(t.trainings, name, sys_at)
           for name in knobs.KERNEL_KNOBS},
    }


def _prediction_columns(grid: Grid, t: _Tables, p, rows: _Rows) -> dict[str, Any]:
    """The engine's outputs of every row, named as predict's JSON: throughput, utilisation,
    fit and bottleneck, memory, time and communication (NaN where the row has none)."""
    n, at, spread, value = rows.n, rows.at, rows.spread, rows.value
    cols: dict[str, Any] = {key: spread(value(key)) for key in THROUGHPUT_COLUMNS}
    cols.update(_utilisation_columns(grid, t, p, rows.constant))
    cols["fits"] = np.zeros(n, dtype=bool)
    cols["fits"][at] = value("fits")
    cols["bottleneck"] = rows.knob(engine.BOTTLENECKS, value("bottleneck").astype(int))
    for name, key in DETAIL_COLUMNS.items():
        cols[name] = spread(value(key))
    # the busiest middle stage's peak where an uneven split gives it more layers than the
    # first (predict's memory.stages.middle; absent there otherwise: NaN here)
    stage = t.stage_index(t.spec_of[p["m"], p["sq"]], p["ly"])[at]
    heavier = t.stages["layers_mid"][stage] > t.stages["layers_first"][stage]
    middle = np.full(at.size, np.nan)
    if at.size and heavier.any():
        middle[heavier] = rows.out["peak_bytes_mid_stage"][heavier]
    cols["memory.stages.middle"] = spread(middle)
    with np.errstate(invalid="ignore", divide="ignore"):  # invalid rows: NaN
        step = cols["step_time_s"]
        cols["time.moe_share"] = np.where(step > 0, cols["time.moe_s"] / step,
                                          np.where(np.isnan(step), np.nan, 0.0))
    return cols


def _twins(rows: _Rows) -> dict[str, np.ndarray]:
    """The engine's twin outputs (the plan on a slower network, the uncertainties) on every
    row, for :func:`_intervals`."""
    twins = {k: np.full(rows.n, np.nan if k == "twin_tokens_per_s_per_gpu" else
                        1.0 if k.startswith("twin_pp") else 0.0)
             for k in ("twin_tokens_per_s_per_gpu", "twin_u_fabric", "twin_u_framework",
                       "twin_pp", "twin_pp_per_node")}
    if rows.at.size:
        for k in twins:
            twins[k][rows.at] = rows.out[k]
    return twins


def _not_runnable(grid: Grid, t: _Tables, p, c, rows: _Rows, cols: dict[str, Any],
                  reasons: np.ndarray, valid: np.ndarray) -> None:
    """Evaluated, but not a run one can do: a reason (and so no cost or energy) where the
    interleaved schedule cannot run the micro-batches, the cluster has too few GPUs or the
    plan does not fit."""
    ok = np.ones(rows.n, dtype=bool)
    ok[rows.at] = rows.value("pipeline_ok")
    pp = np.array(grid.layouts, dtype=float)[p["ly"]][:, 1]
    _first_reason(reasons, valid & ~ok, lambda m, pp: (
        f"the interleaved schedule needs the micro-batches ({int(m)}) in whole rounds of "
        f"pp({int(pp)})"), rows.spread(c["accum"]), pp)
    num_gpus, max_gpus = cols["plan.num_gpus"], t.max_gpus[p["h"]]
    _first_reason(reasons, num_gpus > max_gpus, lambda g, have, i: cluster_too_small(
        g, grid.hardware[int(i)].cluster, have), num_gpus, max_gpus, p["h"])
    # (The peak is in memory.peak_bytes; one message per capacity keeps this cheap.)
    _first_reason(reasons, valid & ~cols["fits"], lambda b: (
        f"does not fit: peak memory > {b:.2f} GiB usable"),
        np.round(np.nan_to_num(cols["memory.capacity_bytes"]) / GIB_BYTES, 2))


#: Plan fields of predict's report (:func:`fsdpsim.drivers.predict.plan_summary`) that the sweep
#: takes from the plan table; the rest it writes itself.
PLAN_FIELDS = ("sharding", "zero", "dp", "dp_shard", "dp_replicate", "tp", "pp", "cp", "vpp",
               "pp_schedule", *knobs.PLAN_SWITCHES, "mesh_order", "pp_first_layers",
               "pp_last_layers", "pp_layers", "framework", "ep", "etp", "expert_dp")


def _plan_columns(t: _Tables, plan_rows, c, recompute_layers, spread, n: int) -> dict[str, Any]:
    """predict's ``plan`` fields for the chosen plan of every row (one line per distinct plan,
    micro-batch, accumulation and recompute: :func:`fsdpsim.plan.spelling.format_plan`)."""
    cols: dict[str, Any] = {}
    summaries = [summary for summary, _ in t.plan_text]
    for name in PLAN_FIELDS:
        if name == "sharding":
            continue
        values = [None if sm is None else sm[name] for sm in summaries]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
               if v is not None) and any(v is not None for v in values):
            table = np.array([np.nan if v is None else v for v in values], dtype=float)
            cols[f"plan.{name}"] = spread(table[plan_rows])
        else:
            table = np.empty(len(values), dtype=object)  # one cell per plan (lists stay whole)
            table[:] = values
            cols[f"plan.{name}"] = spread(table[plan_rows], fill=None)
    lines = np.full(plan_rows.size, None, dtype=object)
    keys = {}
    for i, key in enumerate(zip(plan_rows.tolist(), c["accum"].astype(int).tolist(),
                                c["mb"].astype(int).tolist(), c["rc"].astype(int).tolist())):
        if key not in keys:
            row, m, mb, rc = key
            keys[key] = plan_line(t.plan_text[row][1], m, mb, RECOMPUTES[rc], recompute_layers)
        lines[i] = keys[key]
    cols["plan.line"] = spread(lines, fill=None)
    return cols


def _intervals(grid: Grid, h: np.ndarray, at: np.ndarray, cols: dict[str, Any],
               twins: dict[str, np.ndarray]):
    """predict's 90 % interval columns (:func:`fsdpsim.drivers.predict.prediction_interval`),
    computed for all rows of one system at once."""
    n = h.size
    out: dict[str, np.ndarray] = {}
    # every column, also in a chunk of points without a prediction (streamed CSV keeps its shape)
    empty = {k: np.zeros(0) for k in ("tokens_per_s_per_gpu", "tokens_per_s", "step_time_s",
                                      "mfu", "peak_bytes", "capacity_bytes")}
    for k, v in prediction_interval(empty, grid.hardware[0].system,
                                    uncertainty=(np.zeros(0), np.zeros(0))).items():
        flag = isinstance(v, bool) or (isinstance(v, np.ndarray) and v.dtype == bool)
        out[f"interval.{k}"] = np.full(n, None if flag else np.nan,
                                       dtype=object if flag else float)
    for i, hw in enumerate(grid.hardware):
        rows = at[h[at] == i]
        if not rows.size:
            continue
        values = {k: cols[k][rows] for k in ("tokens_per_s_per_gpu", "tokens_per_s",
                                             "step_time_s", "mfu", "hfu", "mfu_native")}
        values.update(peak_bytes=cols["memory.peak_bytes"][rows],
                      capacity_bytes=cols["memory.capacity_bytes"][rows],
                      exposed_comm_s=cols["comm.exposed_s"][rows])
        if "time.moe_s" in cols:
            values["moe_s"] = cols["time.moe_s"][rows]
        values["bubble_s"] = cols["time.bubble_s"][rows]
        plan = {"pp": twins["twin_pp"][rows], "pp_per_node": twins["twin_pp_per_node"][rows],
                "num_gpus": cols["plan.num_gpus"][rows], "n_params": cols["n_params"][rows]}
        uncertainty = (twins["twin_u_fabric"][rows], twins["twin_u_framework"][rows])
        twin = twins["twin_tokens_per_s_per_gpu"][rows]
        slower = np.where(np.isnan(twin), 1.0, twin / values["tokens_per_s_per_gpu"])
        comm = (slower, faster_ratio(values, uncertainty))
        # the fractions' table per precision of the framework's kernel stack
        precisions = np.asarray(cols["training.precision"], dtype=object)[rows]
        for precision in dict.fromkeys(precisions.tolist()):
            part = precisions == precision
            stack_eff = resolve_efficiency(hw.system.accelerator, str(precision),
                                           profile(grid.framework).kernel_stack)
            for k, v in prediction_interval(
                    {k: v[part] for k, v in values.items()}, hw.system,
                    comm=tuple(c[part] for c in comm),
                    uncertainty=tuple(u[part] for u in uncertainty),
                    efficiency=stack_eff, plan={k: v[part] for k, v in plan.items()}).items():
                flag = isinstance(v, bool) or (isinstance(v, np.ndarray) and v.dtype == bool)
                column = out.setdefault(f"interval.{k}", np.full(
                    n, None if flag else np.nan, dtype=object if flag else float))
                column[rows[part]] = v
    return out


def _economics(grid: Grid, cols: dict[str, Any], h: np.ndarray, pr: np.ndarray,
               ok: np.ndarray) -> dict[str, Any]:
    """Cost, energy, time to train and failure columns:
    :func:`fsdpsim.drivers.procurement.run_columns` on every row (the function predict's report
    calls), with each system's price and TDP."""
    prices = [grid.price(x) for x in grid.hardware]
    price_h = np.array([np.nan if x is None else x.usd_per_gpu_hour for x in prices])[h]
    tdp = np.array([grid.tdp_w.get(x.gpu, np.nan) for x in grid.hardware], dtype=float)[h]
    # A capped GPU draws at most its cap (the energy model charges board power for the step).
    cap = np.array([x.system.power_cap_w or np.inf for x in grid.hardware], dtype=float)[h]
    compute_bytes = np.array([training_inputs(TrainingConfig(seq_len=1, precision=x))
                              ["compute_bytes"] for x in grid.precision_names],
                             dtype=float)[h * len(grid.precisions) + pr]
    megatron = float(profile(grid.framework).recipe == "megatron")  # the engine's input
    ckpt = procurement.checkpoint_bytes(cols["n_params"], compute_bytes,
                                        engine.OPTIMIZER_CODES[grid.optimizer],
                                        megatron)
    out = procurement.run_columns(tokens_per_s=cols["tokens_per_s"],
                                  num_gpus=cols["plan.num_gpus"], ok=ok,
                                  price_usd_per_gpu_hour=price_h, tdp_w=tdp, power_cap_w=cap,
                                  checkpoint_bytes_=ckpt, run=grid.run)
    text = procurement.price_columns(prices)
    first = {k: v for k, v in out.items() if not k.startswith(("failures.", "train_"))}
    return {**first, **{k: np.array(v, dtype=object)[h] for k, v in text.items()},
            **{k: v for k, v in out.items() if k not in first}}
