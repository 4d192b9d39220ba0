"""``sweep``: predict every configuration of a :class:`~fsdpsim.drivers.sweep.grid.Grid` with the
one engine.

The grid is walked in chunks of points. For each chunk the numeric inputs of
:func:`fsdpsim.engine.evaluate` are built as arrays (from the same ``model_inputs``,
``system_inputs``, ``plan_inputs`` and ``training_inputs`` that
:func:`fsdpsim.drivers.predict.predict` uses, evaluated once per distinct combination and gathered)
and the engine is called once per block of at most ``eval_chunk`` configurations. A row therefore
carries exactly the numbers ``predict`` gives for the same configuration.

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

from fsdpsim import engine

from fsdpsim.drivers import sensitivity
from fsdpsim.drivers.sweep.grid import Grid, default_global_batch
from fsdpsim.plan.frameworks import profile
from fsdpsim.plan.parallel import RECOMPUTES, SHARDINGS
from fsdpsim.engine.build import framework_recomputes, op_selective_refused
from fsdpsim.drivers.predict import AUTO_MICRO_BATCHES, comm_uncertainty, divisors, slower_twin
from fsdpsim.drivers.sweep.columns import INT_COLUMNS, _columns_of, _first_reason
from fsdpsim.drivers.sweep.tables import _Tables, _gather

#: Configurations per engine call: large enough to amortise the call, small enough that the
#: temporaries stay in cache (measured fastest on the development machine; benchmarks/).
EVAL_CHUNK = 65_536
#: Candidate configurations expanded at a time (bounds memory for huge grids).
CANDIDATES_PER_CHUNK = 262_144
_RANK_KEYS = ("tokens_per_s", "fits", "peak_bytes", "capacity_bytes", "pipeline_ok")

def estimated_candidates(grid: Grid) -> int:
    """Configurations a sweep evaluates: points times the candidates of the free knobs (a
    global batch's divisors are counted as the nine default micro-batches)."""
    per_point = ((len(SHARDINGS) if grid.shardings is None else 1)
                 * (len(framework_recomputes(grid.framework)) if grid.recomputes is None else 1)
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
    if grid.batch_tokens is not None:  # the default batch: about 4M tokens, a multiple of dp
        seqs = np.array(grid.seq_lens, dtype=np.int64)[p["sq"]]
        step = dp * np.where(np.isnan(mb_fixed), 1, mb_fixed).astype(np.int64)
        gbatch = np.where(np.isnan(gbatch),
                          default_global_batch(seqs, step, grid.batch_tokens), gbatch)

    # ---- invalid combinations: a reason and no prediction --------------------------------------
    # a fixed sharding: its plan's reason; auto: valid when some strategy's plan is (each
    # candidate strategy is then one whose plan is valid, as predict's auto sharding does)
    plan_ok = t.plan_ok[p["g"], p["h"], p["ly"]]  # (points, shardings), from the small table
    if grid.shardings is None:  # auto: the strategies the framework runs (search's rule)
        runs = dict(profile(grid.framework).supports).get("sharding", SHARDINGS)
        plan_ok = plan_ok & np.array([sh in runs for sh in SHARDINGS])
        reasons = np.where(plan_ok.any(axis=1), None, t.plan_reason[p["g"], p["h"], p["ly"], 0])
    else:
        reasons = t.plan_reason[p["g"], p["h"], p["ly"], sh_code]
    reasons = np.where(np.equal(reasons, None), t.system_reason[p["h"], p["pr"]], reasons)
    reasons = np.where(np.equal(reasons, None),
                       t.model_reason[t.spec_of[p["m"], p["sq"]], p["ly"], p["sq"]], reasons)
    if "op-selective" in (grid.recomputes or ()):  # a dense-layer policy (engine.build)
        why = np.array([op_selective_refused(s) for s in t.specs], dtype=object)
        spec_at = t.spec_of[p["m"], p["sq"]]
        refused = (rc_code == RECOMPUTES.index("op-selective")) & ~np.equal(why[spec_at], None)
        _first_reason(reasons, refused, lambda k: why[k], spec_at)
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
    c = _expand(grid, valid, sh_code, per_gpu, mb_fixed, rc_code, plan_ok,
                _auto_recompute_codes(grid, t, p))
    c["accum"] = np.where(has_gb[c["owner"]], per_gpu[c["owner"]] / c["mb"], 1.0)
    seq = np.array(grid.seq_lens, dtype=float)[p["sq"]]

    def inputs(rows: np.ndarray) -> dict[str, Any]:
        o = c["owner"][rows]
        x: dict[str, Any] = {}
        plan = t.plan_index(p["g"][o], p["h"][o], p["ly"][o], c["sh"][rows])
        cols, inverse = t.model_columns(t.spec_of[p["m"][o], p["sq"][o]],
                                        t.plan["shard_size"][plan], t.plan["tp"][plan])
        _gather(cols, inverse, x)
        at = np.ravel_multi_index((p["h"][o], p["pr"][o]), t.system_reason.shape)
        _gather(t.system, at, x)
        _gather(t.plan, plan, x)
        _gather(t.training, at, x)
        x.update(seq_len=seq[o], micro_batch=c["mb"][rows], recompute=c["rc"][rows],
                 grad_accum=c["accum"][rows])
        # each stage's layers: the framework's split of the model over the layout, as predict
        _gather(t.stages, t.stage_index(t.spec_of[p["m"][o], p["sq"][o]], p["ly"][o]), x)
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
    (:func:`fsdpsim.drivers.predict.slower_twin`, as predict evaluates it): its throughput, the
    network's and framework's uncertainty (:func:`fsdpsim.drivers.predict.comm_uncertainty`) and
    its pipeline degree and stages per node (``twin_pp``, ``twin_pp_per_node``). Only
    multi-node rows are evaluated where the framework has no uncertainty of its own (on one
    node the twin is then the row itself)."""
    n = c["sh"].size
    o = c["owner"]
    plan = t.plan_index(p["g"][o], p["h"][o], p["ly"][o], c["sh"])
    multi = (np.arange(n) if profile(t.grid.framework).uncertainty > 0 else  # every row
             np.flatnonzero(t.plan["num_gpus"][plan] > t.plan["gpus_per_node"][plan]))
    out = {"twin_tokens_per_s_per_gpu": np.full(n, np.nan), "twin_u_fabric": np.zeros(n),
           "twin_u_framework": np.zeros(n), "twin_pp": np.ones(n), "twin_pp_per_node": np.ones(n)}
    if not multi.size:
        return out

    def twin(rows):
        x = chosen(multi[rows])
        u_fab, u_fw = comm_uncertainty(x)
        out["twin_u_fabric"][multi[rows]] = u_fab
        out["twin_u_framework"][multi[rows]] = u_fw
        for k in ("pp", "pp_per_node"):  # a pipeline across nodes widens the range
            out[f"twin_{k}"][multi[rows]] = np.asarray(x.get(k, 1.0), dtype=float)
        return slower_twin(x)

    slow = _evaluate(twin, multi.size, eval_chunk, ceilings=False,
                     keys=("tokens_per_s_per_gpu",))
    out["twin_tokens_per_s_per_gpu"][multi] = slow["tokens_per_s_per_gpu"]
    return out


def _auto_recompute_codes(grid: Grid, t, p: dict) -> np.ndarray:
    """(points, k) recompute codes an automatic recompute tries at each point: the
    framework's modes (:func:`fsdpsim.engine.build.auto_recomputes`, predict's), with a model
    that cannot run op-level selective trying ``none`` in its place (a repeated candidate: the
    first of equals wins, so the choice is predict's)."""
    modes = framework_recomputes(grid.framework)
    codes = np.tile(np.array([RECOMPUTES.index(m) for m in modes]), (p["m"].size, 1))
    if "op-selective" in modes:
        refused = np.array([op_selective_refused(s) is not None for s in t.specs])
        at = refused[t.spec_of[p["m"], p["sq"]]]
        column = modes.index("op-selective")
        codes[at, column] = RECOMPUTES.index("none")
    return codes


def _expand(grid: Grid, valid, sh_code, per_gpu, mb_fixed, rc_code,
            plan_ok, auto_rc) -> dict[str, np.ndarray]:
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
    if grid.recomputes is None:  # auto: the framework's modes at each point (auto_rc)
        k = auto_rc.shape[1]
        rc = auto_rc[owner].reshape(-1)
        owner, sh, mb = np.repeat(owner, k), np.repeat(sh, k), np.repeat(mb, k)
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
    # an output only some blocks have (the busiest middle stage's memory of an uneven
    # pipeline split): NaN in the others
    names = dict.fromkeys(k for q in parts for k in q)
    return {k: np.concatenate([q[k] if k in q else np.full(len(q["fits"]), np.nan)
                               for q in parts]) for k in names}


def _winners(owner: np.ndarray, out: dict[str, np.ndarray]) -> np.ndarray:
    """Index of each point's chosen candidate by :func:`engine.choice_rank` (predict's rule:
    the fastest that fits with memory headroom, then the fastest that fits, else the smallest
    peak memory), first on ties. Points in ascending order."""
    tier, key = engine.choice_rank(out)
    order = np.lexsort((np.arange(owner.size), key, tier, owner))
    first = np.ones(order.size, dtype=bool)
    first[1:] = owner[order][1:] != owner[order][:-1]
    return order[first]
