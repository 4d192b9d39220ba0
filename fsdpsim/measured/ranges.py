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
from fsdpsim.drivers.interval import (comm_uncertainty, faster_ratio, prediction_interval,
                                      slower_twin)
from fsdpsim.hardware.catalog import Catalog
from fsdpsim.hardware.efficiency import resolve as resolve_efficiency
from fsdpsim.measured.rows import row_setup
from fsdpsim.measured.stats import fit_rows
from fsdpsim.plan import frameworks

#: Keys of the engine's outputs the range needs (scalars per row).
_VALUE_KEYS = ("tokens_per_s_per_gpu", "tokens_per_s", "step_time_s", "mfu", "peak_bytes",
               "capacity_bytes", "moe_s", "exposed_comm_s", "bubble_s")
#: The widening flags of :func:`prediction_interval` copied to the rows.
FLAG_COLUMNS = ("calibrated", "efficiency_transferred", "near_memory_limit",
                "mixture_of_experts", "pipeline_across_nodes")


def _row_value(out: Mapping[str, Any], key: str, i: int, n: int) -> float:
    value = np.broadcast_to(np.asarray(out.get(key, 0.0), dtype=float), (n,))
    return float(value[i])


def add_intervals(result: pd.DataFrame, x: Mapping[str, Any], out: Mapping[str, Any],
                  catalog: Catalog, measurements: str | Path | None = None) -> pd.DataFrame:
    """``result`` (:func:`fsdpsim.measured.validate.predict_measurements`' rows, in the order of
    the engine inputs ``x`` and outputs ``out``) with the 90 % range ``predicted_low`` /
    ``predicted_high`` (tokens/s per GPU), ``inside`` (the measured value within it),
    ``in_sample`` (module docstring; ``measurements`` is the file the rows come from) and the
    range's widening flags (:data:`FLAG_COLUMNS`)."""
    n = len(result)
    twin = engine.evaluate({**slower_twin(x), "ceilings": 0.0})
    tps = np.broadcast_to(np.asarray(out["tokens_per_s_per_gpu"], dtype=float), (n,))
    low_tps = np.broadcast_to(np.asarray(twin["tokens_per_s_per_gpu"], dtype=float), (n,))
    slower = np.where(tps > 0, low_tps / np.where(tps > 0, tps, 1.0), 1.0)
    u_fab, u_fw = (np.broadcast_to(np.asarray(a, dtype=float), (n,)) for a in comm_uncertainty(x))
    fittable = fit_rows(result)
    lows, highs, flags, in_sample = [], [], {k: [] for k in FLAG_COLUMNS}, []
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
    return frame


_FITTED_BY = re.compile(r"fitted by `(fsdpsim calibrate [^`]*)`")


def fitted_on(source: str, rows: pd.DataFrame, catalog: Catalog,
              measurements: str | Path | None) -> bool:
    """Whether every row of ``rows`` (from the file ``measurements``) passes the selection of
    an ``fsdpsim calibrate`` command named in ``source`` (module docstring)."""
    if not measurements:
        return False
    for command in _FITTED_BY.findall(source):
        args = shlex.split(command)[2:]
        opts: dict[str, list[str]] = {}
        for flag, value in zip(args[::2], args[1::2]):
            opts.setdefault(flag, []).append(value)
        fit_file = opts.get("--measurements", [""])[0]
        if not fit_file or Path(fit_file).name != Path(str(measurements)).name:
            continue
        gpus = {catalog.accelerator(g).id for g in opts.get("--gpu", [])}
        framework = opts.get("--framework", ["fsdp"])[0].lower()
        keep = rows["gpu"].isin(gpus)
        if framework and "framework" in rows.columns:
            keep &= rows["framework"].fillna("").astype(str).str.lower().str.contains(
                framework, regex=False)
        elif framework and framework not in "pytorch fsdp":  # own schema: PyTorch FSDP
            keep &= False
        if "--where" in opts:
            try:
                chosen = rows.query(opts["--where"][0])
            except Exception:  # a file of the same name without the columns: not those rows
                return False
            keep &= rows.index.isin(chosen.index)
        if bool(keep.all()):
            return True
    return False


def plan_conditions(x: Mapping[str, Any], i: int, n: int) -> dict[str, float]:
    """The plan facts the range reads (:func:`prediction_interval`'s ``plan``): the pipeline
    degree and the pipeline stages per node of row ``i``."""
    keys = ("pp", "pp_per_node")
    return {k: _row_value(x, k, i, n) for k in keys if k in x}


def coverage(frame: pd.DataFrame) -> dict[str, float]:
    """Share of rows whose measured value lies in the 90 % range, and the median relative width
    (high - low) / predicted; NaN for no rows."""
    if frame.empty or "inside" not in frame.columns:
        return {"coverage": float("nan"), "median_width": float("nan")}
    width = ((frame["predicted_high"] - frame["predicted_low"])
             / frame["predicted_tokens_per_s_per_gpu"]).astype(float)
    return {"coverage": float(frame["inside"].astype(bool).mean()),
            "median_width": float(width.median())}


def coverage_summary(frame: pd.DataFrame) -> dict[str, Any]:
    """:func:`coverage` over all rows, the out-of-sample rows and the in-sample ones, with
    their counts."""
    out: dict[str, Any] = {}
    parts = {"all": frame}
    if "in_sample" in frame.columns:
        parts["out_of_sample"] = frame[~frame["in_sample"].astype(bool)]
        parts["in_sample"] = frame[frame["in_sample"].astype(bool)]
    for name, part in parts.items():
        out[name] = {"rows": int(len(part)), **coverage(part)}
    return out
