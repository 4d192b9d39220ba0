"""``sweep``: predict every configuration of a :class:`~fsdpsim.grid.Grid` with the one engine.

The grid is walked in chunks of points. For each chunk the numeric inputs of
:func:`fsdpsim.engine.evaluate` are built as arrays (from the same ``model_inputs``,
``system_inputs``, ``plan_inputs`` and ``training_inputs`` that :func:`fsdpsim.predict.predict`
uses, evaluated once per distinct combination and gathered) and the engine is called once per
block of at most ``eval_chunk`` configurations. A row therefore carries exactly the numbers
``predict`` gives for the same configuration.

Free knobs (``auto``) are expanded into their candidates (sharding: every strategy; recompute:
none, selective, full; micro-batch: the divisors of the per-GPU batch, else 1, 2, 4, ..., 256)
in predict's order; a first pass without the memory ceilings ranks them, and each point keeps
the fastest candidate that fits (when none fits: the smallest peak memory, as predict does),
which a second pass evaluates in full.

Invalid combinations (a GPU count that is not whole nodes, a precision the GPU lacks, a global
batch that does not split) become rows with an ``infeasible`` reason and no prediction. Rows
that do not fit, or need more GPUs than the named cluster has, keep their prediction and say why
in ``infeasible``; their cost and energy columns are empty.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from fsdpsim import engine, procurement, sensitivity
from fsdpsim.grid import Grid, default_global_batch
from fsdpsim.parallel import LOW_PRECISION, RECOMPUTES, SHARDED, SHARDINGS, TrainingConfig
from fsdpsim.predict import (AUTO_MICRO_BATCHES, COMM_KEYS, HFU_CONVENTION, MEMORY_KEYS,
                             MFU_CONVENTION, MODEL_PARALLEL_COMM, TIME_KEYS, comm_uncertainty,
                             divisors, faster_ratio, plan_summary, prediction_interval,
                             slower_twin, training_inputs)
from fsdpsim.system import cluster_too_small
from fsdpsim.units import GIB_BYTES
from fsdpsim.sweep_tables import _Tables, _gather

#: Configurations per engine call: large enough to amortise the call, small enough that the
#: temporaries stay in cache (measured fastest on the development machine; benchmarks/).
EVAL_CHUNK = 65_536
#: Candidate configurations expanded at a time (bounds memory for huge grids).
CANDIDATES_PER_CHUNK = 262_144
_DEFAULT_TRAINING = TrainingConfig(seq_len=1)
_RANK_KEYS = ("tokens_per_s", "fits", "peak_bytes", "capacity_bytes", "pipeline_ok")

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
    """Set ``reasons`` where ``mask`` holds and none is set yet, formatting once per distinct row."""
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


def estimated_candidates(grid: Grid) -> int:
    """Configurations a sweep evaluates: points times the candidates of the free knobs (a
    global batch's divisors are counted as the nine default micro-batches)."""
    per_point = ((len(SHARDINGS) if grid.shardings is None else 1)
                 * (len(RECOMPUTES) if grid.recomputes is None else 1)
                 * (len(AUTO_MICRO_BATCHES) if grid.micro_batches is None else 1))
    return grid.n_points * per_point


def run_sweep(grid: Grid, *, progress: Callable[[int], None] | None = None,
              eval_chunk: int = EVAL_CHUNK) -> pd.DataFrame:
    """One row per point of ``grid`` with every prediction field (see the module docstring).

    ``progress`` is called with the number of points finished after each chunk.
    """
    parts = list(iter_sweep(grid, progress=progress, eval_chunk=eval_chunk, frames=False))
    return _frame({k: _concat([q[k] for q in parts]) for k in parts[0]})


def iter_sweep(grid: Grid, *, progress: Callable[[int], None] | None = None,
               eval_chunk: int = EVAL_CHUNK, frames: bool = True,
               candidates_per_chunk: int | None = None) -> Iterator[Any]:
    """The rows of :func:`run_sweep` as consecutive DataFrames of a chunk of points each (at
    most ``candidates_per_chunk`` candidate configurations, default
    :data:`CANDIDATES_PER_CHUNK`), for writers that stream: memory stays that of one chunk
    however big the grid. ``frames=False`` yields the raw columns."""
    if len(grid.grad_syncs) > 1:  # a block of rows per gradient sync, each its own grid
        for sync in grid.grad_syncs:
            yield from iter_sweep(dataclasses.replace(grid, grad_syncs=(sync,)),
                                  progress=progress, eval_chunk=eval_chunk, frames=frames,
                                  candidates_per_chunk=candidates_per_chunk)
        return
    tables = _Tables(grid)
    per_chunk = candidates_per_chunk or CANDIDATES_PER_CHUNK
    step = max(1, per_chunk * grid.n_points // max(estimated_candidates(grid), 1))
    for start in range(0, grid.n_points, step):
        stop = min(start + step, grid.n_points)
        part = _sweep_points(grid, tables, np.arange(start, stop), eval_chunk)
        yield _frame(part) if frames else part
        if progress is not None:
            progress(stop - start)


def _utilisation_columns(grid: Grid, t: _Tables, p: dict[str, np.ndarray],
                         constant: Callable[[str], Any]) -> dict[str, Any]:
    """predict's ``utilisation``: the peaks MFU/HFU and ``mfu_native`` divide by, and the
    conventions (:meth:`fsdpsim.predict.Prediction.utilisation`)."""
    at = p["h"] * len(grid.precisions) + p["pr"]  # the system table's rows: system x precision
    native = np.array(grid.precisions, dtype=object)[p["pr"]]
    peak, native_peak = t.system["mfu_peak_flops_per_s"][at], t.system["peak_flops_per_s"][at]
    low = np.isin(native.astype(str), LOW_PRECISION)
    return {"utilisation.peak_precision": np.where(low & (peak != native_peak),
                                                   "bf16", native).astype(object),
            "utilisation.peak_flops_per_s_per_gpu": peak.astype(float),
            "utilisation.native_precision": native,
            "utilisation.native_peak_flops_per_s_per_gpu": native_peak.astype(float),
            "utilisation.mfu": constant(MFU_CONVENTION),
            "utilisation.hfu": constant(HFU_CONVENTION)}


def _frame(columns: dict[str, Any]) -> pd.DataFrame:
    frame = pd.DataFrame(columns, copy=False)
    for name in INT_COLUMNS:  # whole numbers, missing where the point has no prediction
        values = frame[name].to_numpy(dtype=float)
        missing = np.isnan(values)
        frame[name] = pd.arrays.IntegerArray(np.where(missing, 0, values).astype(np.int64),
                                             missing)
    return frame


def _concat(parts: list) -> Any:
    """One column from its chunks (categoricals of one chunk share their categories)."""
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], pd.Categorical):
        return pd.Categorical.from_codes(np.concatenate([q.codes for q in parts]),
                                         categories=parts[0].categories)
    return np.concatenate(parts)


def _sweep_points(grid: Grid, t: _Tables, points: np.ndarray,
                  eval_chunk: int) -> dict[str, Any]:
    """The columns of the rows of ``points`` (flat indices into ``grid.shape``)."""
    p = dict(zip(("m", "h", "pr", "g", "ly", "sq", "gb", "sh", "mb", "rc"),
                 np.unravel_index(points, grid.shape)))
    n = points.size
    num_gpus = np.array(grid.num_gpus)[p["g"]]
    gbatch = np.array([np.nan if b is None else b for b in grid.global_batches])[p["gb"]]
    if grid.batch_tokens is not None:  # --best: about 4M tokens per step at each seq len
        per_seq = [default_global_batch(s, grid.batch_tokens) for s in grid.seq_lens]
        gbatch = np.where(np.isnan(gbatch), np.array(per_seq, dtype=float)[p["sq"]], gbatch)
    sh_code = (np.full(n, -1) if grid.shardings is None
               else np.array([SHARDINGS.index(s) for s in grid.shardings])[p["sh"]])
    mb_fixed = (np.full(n, np.nan) if grid.micro_batches is None
                else np.array(grid.micro_batches, dtype=float)[p["mb"]])
    rc_code = (np.full(n, -1) if grid.recomputes is None
               else np.array([RECOMPUTES.index(r) for r in grid.recomputes])[p["rc"]])
    layouts = np.array(grid.layouts, dtype=np.int64)[p["ly"]]
    # the data-parallel degree: GPUs / (tp pp cp); at least 1 where the layout does not divide
    # the GPUs (those points are invalid already: no division by zero, no RuntimeWarning)
    dp = np.maximum(num_gpus // np.prod(layouts, axis=1), 1)

    # ---- invalid combinations: a reason and no prediction --------------------------------------
    # a fixed sharding: its plan's reason; auto: valid when some strategy's plan is (each
    # candidate strategy is then one whose plan is valid, as predict's auto sharding does)
    plan_ok = t.plan_ok[p["g"], p["h"], p["ly"]]  # (points, shardings), from the small table
    if grid.shardings is None:
        reasons = np.where(plan_ok.any(axis=1), None, t.plan_reason[p["g"], p["h"], p["ly"], 0])
    else:
        reasons = t.plan_reason[p["g"], p["h"], p["ly"], sh_code]
    reasons = np.where(np.equal(reasons, None), t.system_reason[p["h"], p["pr"]], reasons)
    reasons = np.where(np.equal(reasons, None),
                       t.model_reason[t.spec_of[p["m"], p["sq"]], p["ly"], p["sq"]], reasons)
    has_gb = ~np.isnan(gbatch)
    gb_int = np.where(has_gb, gbatch, 0).astype(np.int64)
    _first_reason(reasons, has_gb & (gb_int % dp != 0),
                  lambda b, d: f"global_batch({b}) is not divisible by the data-parallel degree "
                               f"({d})", gb_int, dp)
    per_gpu = np.where(has_gb, gb_int // dp, 0)
    mb_int = np.where(np.isnan(mb_fixed), 1, mb_fixed).astype(np.int64)
    _first_reason(reasons, has_gb & ~np.isnan(mb_fixed) & (per_gpu % mb_int != 0),
                  lambda b, d, q, k: f"global_batch({b}) / dp({d}) = {q} sequences per GPU does "
                                     f"not split into micro-batches of {k}",
                  gb_int, dp, per_gpu, mb_int)
    valid = np.equal(reasons, None)

    # ---- candidates of the valid points, evaluated --------------------------------------------
    c = _expand(grid, valid, sh_code, per_gpu, mb_fixed, rc_code, plan_ok)
    c["accum"] = np.where(has_gb[c["owner"]], per_gpu[c["owner"]] / c["mb"], 1.0)
    seq = np.array(grid.seq_lens, dtype=float)[p["sq"]]

    def inputs(rows: np.ndarray) -> dict[str, Any]:
        o = c["owner"][rows]
        x: dict[str, Any] = {}
        plan = t.plan_index(p["g"][o], p["h"][o], p["ly"][o], c["sh"][rows])
        cols, inverse = t.model_columns(t.spec_of[p["m"][o], p["sq"][o]],
                                        t.plan["shard_size"][plan], t.plan["tp"][plan])
        _gather(cols, inverse, x)
        _gather(t.system, np.ravel_multi_index((p["h"][o], p["pr"][o]), t.system_reason.shape), x)
        _gather(t.plan, plan, x)
        _gather(t.training, p["pr"][o], x)
        x.update(seq_len=seq[o], micro_batch=c["mb"][rows], recompute=c["rc"][rows],
                 grad_accum=c["accum"][rows])
        # Even pipeline stages (the model checks guarantee the split).
        layers = x["n_layers"] / x["pp"]
        x.update(layers_first=layers, layers_mid=layers, layers_last=layers)
        return x

    free = bool(grid.free)
    n_cand = c["owner"].size
    out = _evaluate(inputs, n_cand, eval_chunk, ceilings=grid.ceilings and not free,
                    keys=_RANK_KEYS if free else None)
    counts = np.bincount(c["owner"], minlength=n)
    fitting = np.bincount(c["owner"], weights=out["fits"].astype(float), minlength=n)
    if free and n_cand:
        win = _winners(c["owner"], out)
        out = _evaluate(lambda rows: inputs(win[rows]), win.size, eval_chunk,
                        ceilings=grid.ceilings)
        c = {k: v[win] for k, v in c.items()}  # ``inputs`` reads c: now the winners' rows
    out.update(_slower_twins(t, p, c, inputs, eval_chunk))
    out.update(sensitivity.analyse_in_chunks(inputs, c["sh"].size, eval_chunk))
    return _columns_of(grid, t, p, c, out, reasons, valid, counts, fitting, gbatch)


def _slower_twins(t: _Tables, p, c, chosen: Callable[[np.ndarray], dict],
                  eval_chunk: int) -> dict[str, np.ndarray]:
    """Each point's chosen configuration again on a slower network and framework
    (:func:`fsdpsim.predict.slower_twin`, as predict evaluates it): its throughput, and the
    network's and framework's uncertainty (:func:`fsdpsim.predict.comm_uncertainty`). Only
    multi-node rows are evaluated (sweep's framework is fsdp2, with no uncertainty of its own;
    on one node the twin is the row itself)."""
    n = c["sh"].size
    o = c["owner"]
    plan = t.plan_index(p["g"][o], p["h"][o], p["ly"][o], c["sh"])
    multi = np.flatnonzero(t.plan["num_gpus"][plan] > t.plan["gpus_per_node"][plan])
    out = {"twin_tokens_per_s_per_gpu": np.full(n, np.nan), "twin_u_fabric": np.zeros(n),
           "twin_u_framework": np.zeros(n)}
    if not multi.size:
        return out

    def twin(rows):
        x = chosen(multi[rows])
        u_fab, u_fw = comm_uncertainty(x)
        out["twin_u_fabric"][multi[rows]] = u_fab
        out["twin_u_framework"][multi[rows]] = u_fw
        return slower_twin(x)

    slow = _evaluate(twin, multi.size, eval_chunk, ceilings=False,
                     keys=("tokens_per_s_per_gpu",))
    out["twin_tokens_per_s_per_gpu"][multi] = slow["tokens_per_s_per_gpu"]
    return out


def _expand(grid: Grid, valid, sh_code, per_gpu, mb_fixed, rc_code,
            plan_ok) -> dict[str, np.ndarray]:
    """Candidates of the valid points in predict's order (sharding, micro-batch, recompute):
    the owning point, sharding code, micro-batch and recompute code of each. An automatic
    sharding tries the strategies whose plan is valid at the point (``plan_ok``)."""
    owner = np.flatnonzero(valid)
    sh = sh_code[owner]
    if grid.shardings is None:
        k = len(SHARDINGS)
        owner, sh = np.repeat(owner, k), np.tile(np.arange(k), owner.size)
        keep = plan_ok[owner, sh]
        owner, sh = owner[keep], sh[keep]
    if grid.micro_batches is None:
        # Divisors of the per-GPU batch when a global batch pins it, else AUTO_MICRO_BATCHES.
        uniq, inverse = np.unique(per_gpu[owner], return_inverse=True)
        lists = [list(AUTO_MICRO_BATCHES) if u == 0 else divisors(int(u)) for u in uniq]
        sizes = np.array([len(x) for x in lists], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        flat = np.array([v for x in lists for v in x], dtype=float)
        reps = sizes[inverse.ravel()] if owner.size else np.zeros(0, dtype=np.int64)
        row = np.repeat(np.arange(owner.size), reps)
        offset = np.arange(row.size) - np.repeat(np.cumsum(reps) - reps, reps)
        mb = flat[starts[inverse.ravel()][row] + offset] if row.size else np.zeros(0)
        owner, sh = owner[row], sh[row]
    else:
        mb = mb_fixed[owner]
    if grid.recomputes is None:
        k = len(RECOMPUTES)
        owner, sh, mb = np.repeat(owner, k), np.repeat(sh, k), np.repeat(mb, k)
        rc = np.tile(np.arange(k), owner.size // k)
    else:
        rc = rc_code[owner]
    return {"owner": owner, "sh": sh, "mb": mb, "rc": rc}


def _evaluate(inputs: Callable[[np.ndarray], dict], n: int, eval_chunk: int, *, ceilings: bool,
              keys=None) -> dict[str, np.ndarray]:
    """:func:`engine.evaluate` over ``n`` rows in blocks; outputs as full-length arrays."""
    parts: list[dict[str, np.ndarray]] = []
    for start in range(0, n, eval_chunk):
        rows = np.arange(start, min(start + eval_chunk, n))
        x = inputs(rows)
        x["ceilings"] = 1.0 if ceilings else 0.0
        y = engine.evaluate(x)
        parts.append({k: np.broadcast_to(y[k], rows.shape) for k in (keys or y)})
    if not parts:
        return {"fits": np.zeros(0, dtype=bool)}
    return {k: np.concatenate([q[k] for q in parts]) for k in parts[0]}


def _winners(owner: np.ndarray, out: dict[str, np.ndarray]) -> np.ndarray:
    """Index of each point's chosen candidate by :func:`engine.choice_rank` (predict's rule:
    the fastest that fits with memory headroom, then the fastest that fits, else the smallest
    peak memory), first on ties. Points in ascending order."""
    tier, key = engine.choice_rank(out)
    order = np.lexsort((np.arange(owner.size), key, tier, owner))
    first = np.ones(order.size, dtype=bool)
    first[1:] = owner[order][1:] != owner[order][:-1]
    return order[first]


def _columns_of(grid: Grid, t: _Tables, p, c, out, reasons, valid, counts, fitting,
                gbatch) -> dict[str, Any]:
    """The output rows: inputs, every prediction field, cost, energy and ``infeasible``."""
    n = valid.size
    at = np.flatnonzero(valid)  # rows with a prediction; c and out hold one entry per such row

    def spread(values, fill=np.nan):
        full = np.full(n, fill, dtype=float if isinstance(fill, float) else object)
        full[at] = values
        return full

    def value(key):  # no valid row: no engine call, no outputs
        return out[key] if at.size else np.zeros(0)

    def per_system(attr):
        return np.array([attr(x) for x in grid.hardware], dtype=float)[p["h"]]

    def named(names, codes):  # text columns as categoricals: cheap for millions of rows
        return pd.Categorical.from_codes(codes, categories=list(dict.fromkeys(names))
                                         ) if len(set(names)) == len(names) else \
            np.array(names, dtype=object)[codes]

    def knob(names, codes):  # a chosen knob; missing (-1) where the point is invalid
        full = np.full(n, -1)
        full[at] = codes
        return pd.Categorical.from_codes(full, categories=list(names))

    def constant(value):
        return pd.Categorical.from_codes(np.zeros(n, dtype=int), categories=[value])

    spec_rows = t.spec_of[p["m"], p["sq"]]
    sharding_names = np.asarray(knob(SHARDINGS, c["sh"]).astype(object))
    sharded = np.isin(sharding_names, SHARDED)
    kept = sharded & grid.keep_gathered
    num_gpus = np.array(grid.num_gpus, dtype=float)[p["g"]]
    plan_rows = t.plan_index(p["g"][at], p["h"][at], p["ly"][at], c["sh"])
    layouts = np.array(grid.layouts, dtype=float)[p["ly"]]
    dp = num_gpus / np.prod(layouts, axis=1)
    global_batch = gbatch.copy()
    global_batch[at] = c["mb"] * c["accum"] * dp[at]
    hw = grid.hardware
    cols: dict[str, Any] = {
        "model": named([s.name for s in t.specs], spec_rows),
        "n_params": np.array([s.n_params for s in t.specs], dtype=float)[spec_rows],
        "system": named([x.system.label for x in hw], p["h"]),
        "gpu": named([x.gpu for x in hw], p["h"]),
        "cluster": named([x.cluster for x in hw], p["h"]),
        "network": named([x.network for x in hw], p["h"]),
        "inter_node_gbps_per_gpu": per_system(lambda x: x.inter_node_gbps_per_gpu),
        "power_cap_w": per_system(lambda x: x.power_cap_w),
        "plan.num_gpus": num_gpus,
        "plan.gpus_per_node": spread(t.plan["gpus_per_node"][plan_rows]),
        "plan.sharding": knob(SHARDINGS, c["sh"]),
        **_plan_columns(t, plan_rows, c["accum"], spread, n),
        "plan.reshard_after_forward": ~kept,
        "plan.keep_gathered": kept,
        "plan.grad_sync": np.where(sharded & (grid.grad_sync == "last"), "last",
                                   "every").astype(object),
        "training.seq_len": np.array(grid.seq_lens, dtype=float)[p["sq"]],
        "training.micro_batch": spread(c["mb"]),
        "training.grad_accum": spread(c["accum"]),
        "training.global_batch": global_batch,
        "training.recompute": knob(RECOMPUTES, c["rc"]),
        "training.precision": named(list(grid.precisions), p["pr"]),
        "training.optimizer": constant(_DEFAULT_TRAINING.optimizer),
        "training.reduce_dtype": constant(_DEFAULT_TRAINING.reduce_dtype or "fp32"),
        "training.flash_attention": np.full(n, _DEFAULT_TRAINING.flash_attention),
        "training.fused_loss": np.full(n, _DEFAULT_TRAINING.fused_loss),
        "training.recompute_layers": np.full(n, grid.recompute_layers, dtype=object),
        "training.dropout": np.full(n, _DEFAULT_TRAINING.dropout),
        "training.moe_capacity_factor": np.full(n, grid.moe_capacity_factor, dtype=object),
        "training.moe_imbalance": np.full(n, grid.moe_imbalance, dtype=object),
        "training.moe_fp8_dispatch": np.full(n, grid.moe_fp8_dispatch),
        "training.moe_dispatcher": np.full(n, grid.moe_dispatcher, dtype=object),
        "training.fp8_attention": t.training["fp8_attention"][p["pr"]] > 0,
        "training.fp8_lm_head": t.training["fp8_lm_head"][p["pr"]] > 0,
        "training.recompute_modules": np.full(n, ",".join(grid.recompute_modules), dtype=object),
        "candidates": counts.astype(float),
        "candidates_fitting": fitting,
    }
    for key in THROUGHPUT_COLUMNS:
        cols[key] = spread(value(key))
    cols.update(_utilisation_columns(grid, t, p, constant))
    cols["fits"] = np.zeros(n, dtype=bool)
    cols["fits"][at] = value("fits")
    cols["bottleneck"] = knob(engine.BOTTLENECKS, value("bottleneck").astype(int))
    for name, key in DETAIL_COLUMNS.items():
        cols[name] = spread(value(key))
    with np.errstate(invalid="ignore", divide="ignore"):  # invalid rows: NaN
        step = cols["step_time_s"]
        cols["time.moe_share"] = np.where(step > 0, cols["time.moe_s"] / step,
                                          np.where(np.isnan(step), np.nan, 0.0))
    twins = {k: np.full(n, np.nan if k == "twin_tokens_per_s_per_gpu" else 0.0)
             for k in ("twin_tokens_per_s_per_gpu", "twin_u_fabric", "twin_u_framework")}
    if at.size:
        for k in twins:
            twins[k][at] = out[k]
    cols.update(_intervals(grid, p["h"], at, cols, twins))
    # bottleneck and thresholds: the sensitivity post-pass (fsdpsim.sensitivity), as predict
    for name, column in sensitivity.report_columns(
            {k: value(k) for k in sensitivity.OUTPUTS}).items():
        cols[name] = spread(column)  # NaN where predict says null
    for k in ("max_micro_batch", "max_seq_len"):  # absent without ceilings
        cols[f"thresholds.{k}"] = spread(out[k]) if k in out else np.full(n, np.nan)

    # ---- evaluated, but not a run one can do: a reason, and no cost or energy -----------------
    ok = np.ones(n, dtype=bool)
    ok[at] = value("pipeline_ok")
    _first_reason(reasons, valid & ~ok, lambda m, pp: (
        f"the interleaved schedule needs the micro-batches ({int(m)}) in whole rounds of "
        f"pp({int(pp)})"), spread(c["accum"]), layouts[:, 1])
    max_gpus = t.max_gpus[p["h"]]
    _first_reason(reasons, num_gpus > max_gpus, lambda g, have, i: cluster_too_small(
        g, hw[int(i)].cluster, have), num_gpus, max_gpus, p["h"])
    # (The peak is in memory.peak_bytes; one message per capacity keeps this cheap.)
    _first_reason(reasons, valid & ~cols["fits"], lambda b: (
        f"does not fit: peak memory > {b:.2f} GiB usable"),
        np.round(np.nan_to_num(cols["memory.capacity_bytes"]) / GIB_BYTES, 2))
    cols.update(_economics(grid, cols, p["h"], p["pr"], np.equal(reasons, None)))
    cols["infeasible"] = reasons
    return cols


#: Plan fields of predict's report (:func:`fsdpsim.predict.plan_summary`) that the sweep takes
#: from the plan table; the rest it writes itself.
PLAN_FIELDS = ("sharding", "zero", "dp", "dp_shard", "dp_replicate", "tp", "pp", "cp", "vpp",
               "pp_schedule", "sequence_parallel", "cp_kind", "tp_overlap", "mesh_order",
               "pp_first_layers", "pp_last_layers", "framework", "ep", "etp", "expert_dp",
               "ep_overlap")


def _plan_columns(t: _Tables, plan_rows, accum, spread, n: int) -> dict[str, Any]:
    """predict's ``plan`` fields for the chosen plan of every row (one summary per distinct
    plan and number of micro-batches: the one-line form shows m for pipelines)."""
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
            table = np.array(values, dtype=object)
            cols[f"plan.{name}"] = spread(table[plan_rows], fill=None)
    lines = np.full(plan_rows.size, None, dtype=object)
    keys = {}
    for i, (row, m) in enumerate(zip(plan_rows.tolist(), accum.tolist())):
        key = (row, int(m))
        if key not in keys:
            keys[key] = plan_summary(t.plan_text[row][1], int(m))["line"]
        lines[i] = keys[key]
    cols["plan.line"] = spread(lines, fill=None)
    return cols


def _intervals(grid: Grid, h: np.ndarray, at: np.ndarray, cols: dict[str, Any],
               twins: dict[str, np.ndarray]):
    """predict's 90 % interval columns (:func:`fsdpsim.predict.prediction_interval`), computed
    for all rows of one system at once."""
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
                                             "step_time_s", "mfu")}
        values.update(peak_bytes=cols["memory.peak_bytes"][rows],
                      capacity_bytes=cols["memory.capacity_bytes"][rows],
                      exposed_comm_s=cols["comm.exposed_s"][rows])
        uncertainty = (twins["twin_u_fabric"][rows], twins["twin_u_framework"][rows])
        twin = twins["twin_tokens_per_s_per_gpu"][rows]
        slower = np.where(np.isnan(twin), 1.0, twin / values["tokens_per_s_per_gpu"])
        comm = (slower, faster_ratio(values, uncertainty))
        for k, v in prediction_interval(values, hw.system, comm=comm,
                                        uncertainty=uncertainty).items():
            flag = isinstance(v, bool) or (isinstance(v, np.ndarray) and v.dtype == bool)
            column = out.setdefault(f"interval.{k}", np.full(n, None if flag else np.nan,
                                                             dtype=object if flag else float))
            column[rows] = v
    return out


def _economics(grid: Grid, cols: dict[str, Any], h: np.ndarray, pr: np.ndarray,
               ok: np.ndarray) -> dict[str, Any]:
    """Cost, energy, time to train and failure columns: :func:`fsdpsim.procurement.run_columns`
    on every row (the function predict's report calls), with each system's price and TDP."""
    prices = [grid.price(x) for x in grid.hardware]
    price_h = np.array([np.nan if x is None else x.usd_per_gpu_hour for x in prices])[h]
    tdp = np.array([grid.tdp_w.get(x.gpu, np.nan) for x in grid.hardware], dtype=float)[h]
    # A capped GPU draws at most its cap (the energy model charges board power for the step).
    cap = np.array([x.system.power_cap_w or np.inf for x in grid.hardware], dtype=float)[h]
    compute_bytes = np.array([training_inputs(TrainingConfig(seq_len=1, precision=x))
                              ["compute_bytes"] for x in grid.precisions], dtype=float)[pr]
    megatron = np.equal(np.asarray(cols["plan.framework"], dtype=object), "megatron")
    ckpt = procurement.checkpoint_bytes(cols["n_params"], compute_bytes,
                                        engine.OPTIMIZER_CODES[_DEFAULT_TRAINING.optimizer],
                                        megatron)
    out = procurement.run_columns(tokens_per_s=cols["tokens_per_s"],
                                  num_gpus=cols["plan.num_gpus"], ok=ok,
                                  price_usd_per_gpu_hour=price_h, tdp_w=tdp, power_cap_w=cap,
                                  checkpoint_bytes_=ckpt, run=grid.run)
    text = procurement.price_columns(prices)
    first = {k: v for k, v in out.items() if not k.startswith(("failures.", "train_"))}
    return {**first, **{k: np.array(v, dtype=object)[h] for k, v in text.items()},
            **{k: v for k, v in out.items() if k not in first}}
