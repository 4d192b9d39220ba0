"""The 90 % range of every validated row, whether it holds the measured value, and coverage.

``fsdpsim validate`` gives each row the range ``predict`` would print for it
(:func:`fsdpsim.drivers.interval.prediction_interval` on the row's system and GPU x precision x
kernel stack, with the slower-twin evaluation of :func:`fsdpsim.drivers.interval.slower_twin`),
and summarises how often the measured tokens/s per GPU falls inside (coverage) and how wide the
range is (median of (high - low) / predicted). The point prediction is not touched: the twin is a
second engine call.

A row is *in-sample* when it was one of the rows the fractions its prediction uses were fitted
on: its GPU x precision x stack triple resolves to its own table (not transferred), that table's
``source`` names the ``fsdpsim calibrate`` command that fitted it (``fitted by `fsdpsim calibrate
--measurements FILE --gpu G ... --framework F --where Q```), and the row passes that command's
selection: same file, its GPU among the ``--gpu`` ones, its framework containing ``F`` (default
``fsdp``), ``Q`` true, and a row a fit may use (:func:`fsdpsim.measured.stats.fit_rows`: no
doubtful subset, block-scaled format or MoE model). Every other row is out-of-sample; its
coverage is the honest figure.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from fsdpsim import engine
from fsdpsim.drivers.interval import (SCALE_WIDENING_PER_DOUBLING, comm_uncertainty,
                                      faster_ratio, prediction_interval, slower_twin)
from fsdpsim.hardware.catalog import Catalog
from fsdpsim.hardware.efficiency import resolve as resolve_efficiency
from fsdpsim.hardware.spec import FitSpan
from fsdpsim.measured.rows import on_gpus, row_setup, spec_for_row
from fsdpsim.measured.stats import coverage, coverage_summary, fit_rows  # noqa: F401
from fsdpsim.plan import frameworks

#: Keys of the engine's outputs the range needs (scalars per row).
_VALUE_KEYS = ("tokens_per_s_per_gpu", "tokens_per_s", "step_time_s", "mfu", "hfu",
               "mfu_native", "peak_bytes", "capacity_bytes", "moe_s", "exposed_comm_s",
               "bubble_s")
#: The widening flags of :func:`prediction_interval` copied to the rows.
FLAG_COLUMNS = ("calibrated", "efficiency_transferred", "near_memory_limit",
                "mixture_of_experts", "pipeline_across_nodes", "beyond_fit_span")
#: The engine inputs of a run the range reads besides its outputs
#: (:func:`prediction_interval`'s ``plan``).
PLAN_KEYS = ("pp", "pp_per_node", "num_gpus", "n_params")


def _row_value(out: Mapping[str, Any], key: str, i: int, n: int) -> float:
    value = np.broadcast_to(np.asarray(out.get(key, 0.0), dtype=float), (n,))
    return float(value[i])


def add_intervals(result: pd.DataFrame, x: Mapping[str, Any], out: Mapping[str, Any],
                  catalog: Catalog, measurements: str | Path | None = None,
                  run: np.ndarray | None = None, setups: Any = None) -> pd.DataFrame:
    """``result`` (:func:`fsdpsim.measured.validate.predict_measurements`' rows) with the 90 %
    range ``predicted_low`` / ``predicted_high`` (tokens/s per GPU), ``inside`` (the measured
    value within it), ``in_sample`` (module docstring; ``measurements`` is the file the rows
    come from), the range's widening flags (:data:`FLAG_COLUMNS`) and ``fit_span_doublings``
    (:func:`fsdpsim.drivers.interval.fit_span_doublings`).

    ``x`` and ``out`` are the engine inputs and outputs of each distinct run and ``run`` each
    row's run (default: every row its own, in order); the slower twin is evaluated and the
    range worked out once per run (one array call of :func:`prediction_interval` for the runs
    on one accelerator, precision, kernel stack and power cap), then gathered per row.
    ``setups``: the rows' :class:`fsdpsim.measured.grid.Setups` (default: built from
    ``result``). The numbers are :func:`add_intervals_per_row`'s."""
    from fsdpsim.measured import grid

    n = len(result)
    run = np.arange(n) if run is None else np.asarray(run)
    if setups is None:
        setups = grid.Setups(result.drop(columns=[c for c in PREDICTED if c in result]), catalog)
    first = grid.first_positions(run)
    n_runs = first.size
    twin = engine.evaluate({**slower_twin(x), "ceilings": 0.0})
    tps = np.broadcast_to(np.asarray(out["tokens_per_s_per_gpu"], dtype=float), (n_runs,))
    low_tps = np.broadcast_to(np.asarray(twin["tokens_per_s_per_gpu"], dtype=float), (n_runs,))
    slower = np.where(tps > 0, low_tps / np.where(tps > 0, tps, 1.0), 1.0)
    u_fab, u_fw = (np.broadcast_to(np.asarray(a, dtype=float), (n_runs,))
                   for a in comm_uncertainty(x))
    values = {k: np.broadcast_to(np.asarray(out.get(k, 0.0), dtype=float), (n_runs,))
              for k in _VALUE_KEYS}
    conditions = {k: np.broadcast_to(np.asarray(x[k], dtype=float), (n_runs,))
                  for k in PLAN_KEYS if k in x}
    # the range reads of a run's system only its accelerator and power cap, and the resolved
    # efficiency table: runs that share them are worked out in one array call
    tables: dict[tuple, Any] = {}
    blocks: dict[tuple, list[int]] = {}
    systems: dict[tuple, Any] = {}
    efficiencies = []
    for r, position in enumerate(first.tolist()):
        _, system, plan, options = setups(position)
        table = (id(system.accelerator), options["precision"],
                 frameworks.profile(plan.framework).kernel_stack)
        if table not in tables:  # (the accelerator kept: its id stays its own)
            tables[table] = (system.accelerator, resolve_efficiency(
                system.accelerator, options["precision"], table[2]))
        efficiencies.append(tables[table][1])
        block = (table, system.power_cap_w)
        blocks.setdefault(block, []).append(r)
        systems.setdefault(block, system)
    low, high, doublings = np.empty(n_runs), np.empty(n_runs), np.empty(n_runs)
    flags = {k: np.zeros(n_runs, dtype=bool) for k in FLAG_COLUMNS}
    for block, members in blocks.items():
        at = np.array(members)
        these = {k: v[at] for k, v in values.items()}
        rng = prediction_interval(
            these, systems[block],
            comm=(slower[at], faster_ratio(these, (u_fab[at], u_fw[at]))),
            efficiency=tables[block[0]][1], plan={k: v[at] for k, v in conditions.items()})
        low[at] = rng["tokens_per_s_per_gpu_low"]
        high[at] = rng["tokens_per_s_per_gpu_high"]
        doublings[at] = rng["fit_span_doublings"]
        for k in FLAG_COLUMNS:
            flags[k][at] = np.asarray(rng.get(k, False), dtype=bool)
    frame = result.copy()
    frame["predicted_low"] = low[run]
    frame["predicted_high"] = high[run]
    measured = frame["tokens_per_s_per_gpu"].astype(float)
    frame["inside"] = (measured >= frame["predicted_low"]) & (measured <= frame["predicted_high"])
    frame["in_sample"] = _in_sample(result, efficiencies, run, catalog, measurements)
    for k in FLAG_COLUMNS:
        frame[k] = flags[k][run]
    frame["fit_span_doublings"] = doublings[run]
    return frame


#: The columns :func:`fsdpsim.measured.validate.predict_measurements` adds to the rows (no
#: row setup reads them).
PREDICTED = ("predicted_tokens_per_s_per_gpu", "predicted_mfu", "fits", "moe", "bottleneck",
             "error")


def _in_sample(result: pd.DataFrame, efficiencies: list, run: np.ndarray, catalog: Catalog,
               measurements: str | Path | None) -> np.ndarray:
    """Each row's ``in_sample`` (module docstring): its run's efficiency table is its own (not
    transferred), it is a row a fit may use, and the ``fsdpsim calibrate`` command its table's
    source names selects it (:func:`fitted_rows`, once per distinct source)."""
    fittable = fit_rows(result)
    own = np.array([not eff.transferred for eff in efficiencies], dtype=bool)[run]
    candidates = own & result.index.isin(fittable.index)
    sources = np.array([eff.source for eff in efficiencies], dtype=object)[run]
    found = np.zeros(len(result), dtype=bool)
    for source in dict.fromkeys(sources[candidates].tolist()):
        at = np.flatnonzero(candidates & (sources == source))
        found[at] = fitted_rows(source, result.iloc[at], catalog, measurements)
    return found


def add_intervals_per_row(result: pd.DataFrame, x: Mapping[str, Any], out: Mapping[str, Any],
                          catalog: Catalog, measurements: str | Path | None = None
                          ) -> pd.DataFrame:
    """:func:`add_intervals` one row at a time, with ``x`` and ``out`` given per row (the
    reference the grouped path is tested against)."""
    n = len(result)
    twin = engine.evaluate({**slower_twin(x), "ceilings": 0.0})
    tps = np.broadcast_to(np.asarray(out["tokens_per_s_per_gpu"], dtype=float), (n,))
    low_tps = np.broadcast_to(np.asarray(twin["tokens_per_s_per_gpu"], dtype=float), (n,))
    slower = np.where(tps > 0, low_tps / np.where(tps > 0, tps, 1.0), 1.0)
    u_fab, u_fw = (np.broadcast_to(np.asarray(a, dtype=float), (n,)) for a in comm_uncertainty(x))
    fittable = fit_rows(result)
    lows, highs, flags, in_sample = [], [], {k: [] for k in FLAG_COLUMNS}, []
    doublings = []
    for i, (index, row) in enumerate(result.iterrows()):
        _, system, plan, options = row_setup(row, catalog)
        stack = frameworks.profile(plan.framework).kernel_stack
        eff = resolve_efficiency(system.accelerator, options["precision"], stack)
        values = {k: _row_value(out, k, i, n) for k in _VALUE_KEYS}
        uncertainty = (u_fab[i], u_fw[i])
        rng = prediction_interval(values, system,
                                  comm=(slower[i], faster_ratio(values, uncertainty)),
                                  efficiency=eff, plan=plan_conditions(x, i, n))
        lows.append(rng["tokens_per_s_per_gpu_low"])
        highs.append(rng["tokens_per_s_per_gpu_high"])
        doublings.append(rng["fit_span_doublings"])
        for k in FLAG_COLUMNS:
            flags[k].append(bool(rng.get(k, False)))
        in_sample.append(not eff.transferred and index in fittable.index
                         and fitted_on(eff.source, fittable.loc[[index]], catalog, measurements))
    frame = result.copy()
    frame["predicted_low"] = lows
    frame["predicted_high"] = highs
    measured = frame["tokens_per_s_per_gpu"].astype(float)
    frame["inside"] = (measured >= frame["predicted_low"]) & (measured <= frame["predicted_high"])
    frame["in_sample"] = in_sample
    for k, v in flags.items():
        frame[k] = v
    frame["fit_span_doublings"] = doublings
    return frame


_FITTED_BY = re.compile(r"fitted by `(fsdpsim calibrate [^`]*)`")


def _commands(source: str, measurements: str | Path | None):
    """The options (flag -> values) of each ``fsdpsim calibrate`` command named in ``source``
    that fitted the file ``measurements`` (by name)."""
    if not measurements:
        return
    for command in _FITTED_BY.findall(source):
        args = shlex.split(command)[2:]
        opts: dict[str, list[str]] = {}
        for flag, value in zip(args[::2], args[1::2]):
            opts.setdefault(flag, []).append(value)
        fit_file = opts.get("--measurements", [""])[0]
        if fit_file and Path(fit_file).name == Path(str(measurements)).name:
            yield opts


def _kept(opts: dict[str, list[str]], rows: pd.DataFrame, catalog: Catalog
          ) -> pd.Series | None:
    """Which of ``rows`` a calibrate command's selection (``--gpu``, ``--framework``,
    ``--where``) keeps; None when its ``--where`` cannot be evaluated on them (a file of the
    same name without the columns: not those rows)."""
    framework = opts.get("--framework", ["fsdp"])[0].lower()
    keep = on_gpus(rows, catalog, opts.get("--gpu", []))
    if framework and "framework" in rows.columns:
        keep &= rows["framework"].fillna("").astype(str).str.lower().str.contains(
            framework, regex=False)
    elif framework and framework not in "pytorch fsdp":  # own schema: PyTorch FSDP
        keep &= False
    if "--where" in opts:
        try:
            chosen = rows.query(opts["--where"][0])
        except Exception:  # pandas raises many types for a condition it cannot evaluate
            return None
        keep &= rows.index.isin(chosen.index)
    return keep


def fitted_on(source: str, rows: pd.DataFrame, catalog: Catalog,
              measurements: str | Path | None) -> bool:
    """Whether every row of ``rows`` (from the file ``measurements``) passes the selection of
    an ``fsdpsim calibrate`` command named in ``source`` (module docstring)."""
    for opts in _commands(source, measurements):
        keep = _kept(opts, rows, catalog)
        if keep is None:
            return False
        if bool(keep.all()):
            return True
    return False


def fitted_rows(source: str, rows: pd.DataFrame, catalog: Catalog,
                measurements: str | Path | None) -> np.ndarray:
    """:func:`fitted_on` of each row of ``rows`` on its own, for all of them at once: each
    command's ``--where`` is evaluated on the rows together, which is the same row by row for
    a condition on each row's cells (what calibrate's ``--where`` states); where it cannot be
    evaluated on them together, row by row."""
    found = np.zeros(len(rows), dtype=bool)
    for opts in _commands(source, measurements):
        keep = _kept(opts, rows, catalog)
        if keep is None:
            return np.array([fitted_on(source, rows.iloc[[k]], catalog, measurements)
                             for k in range(len(rows))], dtype=bool)
        found |= keep.to_numpy(dtype=bool)
    return found


def plan_conditions(x: Mapping[str, Any], i: int, n: int) -> dict[str, float]:
    """The plan facts the range reads (:func:`prediction_interval`'s ``plan``) of row ``i``:
    the pipeline degree, the pipeline stages per node, the GPU count and the model's
    parameters (:data:`PLAN_KEYS`)."""
    return {k: _row_value(x, k, i, n) for k in PLAN_KEYS if k in x}


def fit_span(source: str, every: pd.DataFrame, catalog: Catalog,
             measurements: str | Path) -> FitSpan | None:
    """The span (GPU count, model parameters) of the rows of ``every`` (the whole file
    ``measurements``, as loaded) that the ``fsdpsim calibrate`` command named in ``source``
    fitted: its selection (:func:`fitted_rows`) of the rows a fit may use (:func:`fit_rows`)
    that are modelled (not skipped), as ``calibrate`` keeps them; None if it selects none. The
    catalog records it next to the table's ``source`` (``fit_gpus_min`` .. ``fit_params_max``)."""
    rows = fit_rows(every)
    rows = rows[rows["skip"] == ""] if "skip" in rows.columns else rows
    rows = rows[fitted_rows(source, rows, catalog, measurements)]
    if rows.empty:
        return None
    params = [spec_for_row(row).n_params for _, row in rows.iterrows()]
    return FitSpan(int(rows["n_gpus"].min()), int(rows["n_gpus"].max()), int(min(params)),
                   int(max(params)))


def at_rate(frame: pd.DataFrame, rate: float) -> pd.DataFrame:
    """``frame`` (``validate``'s rows with their ranges) with the scale-beyond-the-fit term at
    ``rate`` per doubling instead of :data:`SCALE_WIDENING_PER_DOUBLING`: both ends rescaled by
    ((1 + rate) / (1 + r_shipped))^d, d the row's ``fit_span_doublings``, and ``inside``
    recomputed (the term is the range's last factor, so this is the range at that rate)."""
    scale = ((1.0 + rate) / (1.0 + SCALE_WIDENING_PER_DOUBLING)) ** frame["fit_span_doublings"]
    out = frame.copy()
    out["predicted_low"] = frame["predicted_low"] / scale
    out["predicted_high"] = frame["predicted_high"] * scale
    measured = out["tokens_per_s_per_gpu"].astype(float)
    out["inside"] = (measured >= out["predicted_low"]) & (measured <= out["predicted_high"])
    return out


#: Rates :func:`widening_rate` tries, per doubling [-].
RATES = np.round(np.arange(0.0, 1.0 + 1e-9, 0.01), 2)
#: Share of the out-of-sample rows beyond their table's span a 90 % range should hold.
TARGET_COVERAGE = 0.9


def widening_rate(frames: Mapping[str, pd.DataFrame]) -> float:
    """The rate of :data:`SCALE_WIDENING_PER_DOUBLING` chosen on the files ``frames`` (name ->
    ``validate``'s rows with ranges): the smallest of :data:`RATES` at which the out-of-sample
    rows beyond their table's span (``fit_span_doublings`` > 0) hold the measured value for at
    least :data:`TARGET_COVERAGE` of them, averaged with one vote per file that has such rows
    (so that one large file does not decide alone); 0 where no file has any."""
    beyond = [f[~f["in_sample"].astype(bool) & (f["fit_span_doublings"] > 0)]
              for f in frames.values()]
    beyond = [f for f in beyond if not f.empty]
    if not beyond:
        return 0.0
    for rate in RATES.tolist():
        if np.mean([at_rate(f, rate)["inside"].mean() for f in beyond]) >= TARGET_COVERAGE:
            return rate
    return float(RATES[-1])


def held_out_coverage(frames: Mapping[str, pd.DataFrame]) -> dict[str, dict[str, float]]:
    """Leave-one-file-out check of :func:`widening_rate`: for each file, the rate chosen on the
    other files and the out-of-sample rows' :func:`coverage` at that rate (``rate``, ``rows``,
    ``coverage``, ``median_width``); ``"all"``: every file's held-out rows together."""
    out: dict[str, dict[str, float]] = {}
    held = []
    for name, frame in frames.items():
        rate = widening_rate({k: v for k, v in frames.items() if k != name})
        rows = at_rate(frame[~frame["in_sample"].astype(bool)], rate)
        held.append(rows)
        out[name] = {"rate": rate, "rows": int(len(rows)), **coverage(rows)}
    together = pd.concat(held, ignore_index=True)
    out["all"] = {"rate": float("nan"), "rows": int(len(together)), **coverage(together)}
    return out
