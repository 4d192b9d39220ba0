"""Fit the physical efficiency factors of one GPU type to measured runs.

Only factors that mean something physically are fitted, one set per GPU type, never per row:
the achievable matmul fraction, the FlashAttention fraction, the achievable HBM fraction, and
(when the data can identify them) the per-kernel overhead and the achievable fractions of the
links. The fit minimises the squared log error of tokens/s per GPU with
:func:`scipy.optimize.least_squares` inside each factor's catalog range, and refuses to fit a
factor the data cannot identify (its predictions barely move across its range, or it is
collinear with another).
"""

from __future__ import annotations

import datetime as _dt
import inspect
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from fsdpsim import engine
from fsdpsim.hardware.catalog import Catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.measured.stats import summarise
from fsdpsim.measured.grid import distinct_inputs
from fsdpsim.measured.rows import on_gpus

#: engine input name -> (catalog [efficiency] key, catalog units per engine unit, bounds)
FACTORS = {
    "matmul_fraction": ("matmul_fraction", 1.0, (0.2, 1.0)),
    "attention_fraction": ("attention_fraction", 1.0, (0.1, 1.0)),
    "fused_attention_fraction": ("fused_attention_fraction", 1.0, (0.1, 1.0)),
    "hbm_fraction": ("hbm_fraction", 1.0, (0.6, 1.0)),
    "kernel_overhead_s": ("kernel_overhead_us", 1e6, (0.0, 50e-6)),
    "matmul_half_k": ("matmul_half_k", 1.0, (0.0, 256.0)),
    "attention_half_kv": ("attention_half_kv", 1.0, (0.0, 4096.0)),
    "link_fraction": ("link_fraction", 1.0, (0.3, 1.0)),
    "comm_compute_slowdown": ("comm_compute_slowdown", 1.0, (0.0, 0.5)),
    "nic_fraction": ("achievable_fraction", 1.0, (0.02, 1.0)),
}
#: Factors a kernel stack's split table holds (fsdpsim.hardware.efficiency.STACK_KEYS).
STACK_FACTORS = ("matmul_fraction", "attention_fraction", "fused_attention_fraction")
DEFAULT_FACTORS = ("matmul_fraction", "matmul_half_k", "attention_fraction",
                   "attention_half_kv", "hbm_fraction", "nic_fraction")
NETWORK_FACTORS = ("nic_fraction",)
#: Whether :func:`scipy.optimize.least_squares` takes ``workers`` (a map for the Jacobian's
#: finite-difference points; SciPy 1.16 and later): the points are then evaluated in one
#: engine call, with the same numbers as one by one.
_HAS_WORKERS = "workers" in inspect.signature(least_squares).parameters
#: A factor is identifiable when moving it across 50 % of its range changes some prediction by
#: at least this much (relative).
MIN_SENSITIVITY = 0.005
CV_FOLDS = 5


@dataclass(frozen=True)
class CalibrationResult:
    gpus: tuple[str, ...]
    values: dict[str, float]
    """Fitted engine-unit values, by engine input name."""
    before: dict[str, float]
    after: dict[str, float]
    rows: pd.DataFrame
    refused: dict[str, str]

    networks: tuple[str, ...] = ()
    cross_validated: dict[str, float] | None = None
    """Error summary of 5-fold cross-validated predictions (out of sample)."""
    interval: tuple[float, float] = (1.0, 1.0)
    """5th and 95th percentiles of measured / predicted tokens/s, out of sample."""
    table: tuple[str, str] | None = None
    """(precision class, kernel stack) whose split table the rows run at
    (:func:`split_table`); None = the fallback ``[accelerator.efficiency]``."""

    def overlay_toml(self, source: str) -> str:
        """A catalog overlay (``override = true``) that sets the fitted factors: accelerator
        efficiencies on every fitted GPU, the network fraction on the rows' network."""
        today = _dt.date.today().isoformat()
        how = (f"fsdpsim calibrate on {today}: least squares of log tokens/s per GPU over "
               f"{self.after['rows']} rows of {source}; interval = 5-95 % of measured/predicted "
               f"in {CV_FOLDS}-fold cross-validation")
        lines = ["# Written by `fsdpsim calibrate`; pass with --catalog DIR or FSDPSIM_CATALOG.",
                 f"# Fitted to {source}: {self.after['rows']} rows, tokens/s per GPU MAPE "
                 f"{100 * self.before['mape']:.1f} % -> {100 * self.after['mape']:.1f} %."]
        gpu_factors = {n: v for n, v in self.values.items() if n not in NETWORK_FACTORS}
        if gpu_factors:
            for gpu in self.gpus:
                lines += ["", "[[accelerator]]", f'id = "{gpu}"', "override = true"]
                split = {n: v for n, v in gpu_factors.items()
                         if self.table is not None and n in STACK_FACTORS}
                rest = {n: v for n, v in gpu_factors.items() if n not in split}
                if rest or not split:
                    lines += ["", "[accelerator.efficiency]"]
                    lines += [f"{FACTORS[n][0]} = {v * FACTORS[n][1]:.4g}"
                              for n, v in rest.items()]
                    if not split:
                        lines.append(f"throughput_ratio_p05 = {self.interval[0]:.4g}")
                        lines.append(f"throughput_ratio_p95 = {self.interval[1]:.4g}")
                    lines.append(f'source = "{how}"')
                if split:
                    lines += ["", f"[accelerator.efficiency.{self.table[0]}.{self.table[1]}]"]
                    lines += [f"{FACTORS[n][0]} = {v * FACTORS[n][1]:.4g}"
                              for n, v in split.items()]
                    lines.append(f"throughput_ratio_p05 = {self.interval[0]:.4g}")
                    lines.append(f"throughput_ratio_p95 = {self.interval[1]:.4g}")
                    lines.append(f'source = "{how}"')
        if "nic_fraction" in self.values:
            for net in self.networks:
                lines += ["", "[[network]]", f'id = "{net}"', "override = true",
                          f"achievable_fraction = {self.values['nic_fraction']:.4g}",
                          f'fraction_source = "{how}"']
        return "\n".join(lines) + "\n"


def _predict(x: dict[str, np.ndarray], names: Sequence[str], theta: np.ndarray) -> np.ndarray:
    y = dict(x)
    for name, value in zip(names, theta):
        y[name] = np.full_like(np.asarray(x[name], dtype=float), value)
    y["ceilings"] = 0.0
    return np.asarray(engine.evaluate(y)["tokens_per_s_per_gpu"], dtype=float)


def fit(frame: pd.DataFrame, catalog: Catalog, gpus: Sequence[str],
        factors: Sequence[str] = DEFAULT_FACTORS, cross_validate: bool = True,
        check_ceiling: bool = True) -> CalibrationResult:
    """Fit ``factors`` shared by the accelerators ``gpus`` to the rows run on them.
    ``cross_validate``: also the 5-fold out-of-sample errors and interval (else the interval
    is (1, 1)). A fitted ``matmul_fraction`` above the measured ceiling of a row's GPU and
    precision class (:func:`ceiling_violations`), or a ``fused_attention_fraction`` above the
    GPU's measured fused attention kernel ceiling (:func:`attention_ceiling_violations`), is
    refused with one clear error."""
    ids = tuple(catalog.accelerator(g).id for g in gpus)
    unknown = [f for f in factors if f not in FACTORS]
    if unknown:
        raise ConfigError(f"cannot fit {', '.join(unknown)}; fittable: {', '.join(FACTORS)}")
    use = frame[(frame["skip"] == "") & on_gpus(frame, catalog, ids)].reset_index(drop=True)
    if len(use) < len(factors) + 2:
        raise ConfigError(f"{len(use)} usable rows for {', '.join(ids)}: too few to fit "
                          f"{len(factors)} factors (need at least {len(factors) + 2})")
    problem = _Problem(use, catalog, factors)
    base, refused = problem.identify()
    names = [factors[i] for i in problem.keep]
    if not names:
        raise ConfigError("no factor can be identified from these rows: " + "; ".join(
            f"{k}: {v}" for k, v in refused.items()))
    everything = np.arange(len(use))
    theta = problem.full(problem.solve(everything).x)
    before_rows = _predicted(use, base)
    after_rows = _predicted(use, problem.predict(theta))
    values = {n: float(theta[factors.index(n)]) for n in names}
    if check_ceiling:
        _check_ceilings(values, use, catalog)
    if not cross_validate:
        return CalibrationResult(gpus=ids, values=values, before=summarise(before_rows),
                                 after=summarise(after_rows), rows=after_rows, refused=refused,
                                 table=split_table(use, catalog))
    # Out-of-sample check: k-fold cross-validation refits on k-1 folds and predicts the
    # held-out fold; its ratios measured/predicted give the prediction interval.
    folds = np.arange(len(use)) % CV_FOLDS
    np.random.default_rng(0).shuffle(folds)
    cv_pred = np.empty(len(use))
    for k in range(CV_FOLDS):
        held = folds == k
        cv_pred[held] = problem.predict(problem.full(problem.solve(everything[~held]).x))[held]
    ratio = problem.measured / cv_pred
    interval = (float(np.quantile(ratio, 0.05)), float(np.quantile(ratio, 0.95)))
    networks = tuple(sorted({str(n) for n in use.get("network", pd.Series(dtype=str)).dropna()
                             if str(n)}))
    if "nic_fraction" in names and len(networks) != 1:
        raise ConfigError(f"nic_fraction is a property of one network, but the rows use "
                          f"{len(networks)} ({', '.join(networks) or 'none named'}); give the "
                          "network column or drop nic_fraction with --factor")
    return CalibrationResult(gpus=ids, values=values,
                             before=summarise(before_rows), after=summarise(after_rows),
                             rows=after_rows, refused=refused, networks=networks,
                             cross_validated=summarise(_predicted(use, cv_pred)),
                             interval=interval, table=split_table(use, catalog))


class _Problem:
    """The least-squares problem of one fit: the rows' distinct runs (each evaluated once and
    gathered per row, :func:`fsdpsim.measured.grid.distinct_inputs`), their measurements,
    each factor's start (its mean over the rows, inside its bounds) and bounds, and the
    factors fitted (``keep``: positions in ``factors``; the others stay at their start)."""

    def __init__(self, use: pd.DataFrame, catalog: Catalog, factors: Sequence[str]):
        self.runs, self.run = distinct_inputs(use, catalog)
        self.factors = factors
        self.measured = use["tokens_per_s_per_gpu"].to_numpy(dtype=float)
        x = {k: v[self.run] for k, v in self.runs.items()}
        start = np.array([float(np.mean(x[f])) for f in factors])
        self.lo = np.array([FACTORS[f][2][0] for f in factors])
        self.hi = np.array([FACTORS[f][2][1] for f in factors])
        self.start = np.clip(start, self.lo + 1e-9, self.hi - 1e-9)
        self.keep = list(range(len(factors)))

    def full(self, theta: np.ndarray) -> np.ndarray:
        """Every factor's value: the fitted ones ``theta``, the others at their start."""
        out = self.start.copy()
        out[self.keep] = theta
        return out

    def predict(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Tokens/s per GPU of ``rows`` (default: all) at factors ``theta``: the distinct
        runs among them evaluated, each row given its run's."""
        present, back = np.unique(self.run if rows is None else self.run[rows],
                                  return_inverse=True)
        return _predict({k: v[present] for k, v in self.runs.items()}, self.factors,
                        theta)[back]

    def predict_many(self, thetas: list[np.ndarray], rows: np.ndarray) -> list[np.ndarray]:
        """:meth:`predict` of ``rows`` at each of ``thetas`` in one engine call: the distinct
        runs among them stacked once per theta (the engine works elementwise)."""
        present, back = np.unique(self.run[rows], return_inverse=True)
        y = {k: np.tile(v[present], len(thetas)) for k, v in self.runs.items()}
        for j, name in enumerate(self.factors):
            y[name] = np.repeat(np.array([theta[j] for theta in thetas], dtype=float),
                                present.size)
        y["ceilings"] = 0.0
        tps = np.asarray(engine.evaluate(y)["tokens_per_s_per_gpu"], dtype=float)
        return [part[back] for part in np.split(tps, len(thetas))]

    def identify(self) -> tuple[np.ndarray, dict[str, str]]:
        """Keep the factors whose move across half their range (away from the nearer bound)
        changes some prediction by at least :data:`MIN_SENSITIVITY`; the predictions at the
        start and why each other factor is not fitted."""
        start, lo, hi = self.start, self.lo, self.hi
        refused: dict[str, str] = {}
        base = self.predict(start)
        keep = []
        for i, name in enumerate(self.factors):
            # half the range away from the nearer bound (the midpoint for both branches would
            # leave a factor starting there looking unidentifiable)
            probe = start.copy()
            half = 0.5 * (hi[i] - lo[i])
            probe[i] = start[i] - half if start[i] - lo[i] > hi[i] - start[i] else start[i] + half
            change = np.max(np.abs(self.predict(probe) / base - 1.0))
            if change < MIN_SENSITIVITY:
                refused[name] = (f"not identifiable from these rows: moving it to {probe[i]:.3g} "
                                 f"changes predictions by at most {100 * change:.2f} %")
            else:
                keep.append(i)
        self.keep = keep
        return base, refused

    def solve(self, rows: np.ndarray):
        """:func:`scipy.optimize.least_squares` of the log error of ``rows`` over the kept
        factors, inside their bounds, from their start."""
        keep, measured = self.keep, self.measured

        def residuals(theta):
            return np.log(self.predict(self.full(theta), rows) / measured[rows])

        def jacobian_points(_, thetas):
            """least_squares' ``workers``: the residuals at the finite-difference points of
            one Jacobian, in one engine call (:meth:`predict_many`)."""
            fulls = [self.full(theta) for theta in thetas]
            return [np.log(p / measured[rows]) for p in self.predict_many(fulls, rows)]

        batched = {"workers": jacobian_points} if _HAS_WORKERS else {}  # SciPy >= 1.16
        return least_squares(residuals, self.start[keep], bounds=(self.lo[keep], self.hi[keep]),
                             x_scale="jac", **batched)


def _predicted(use: pd.DataFrame, predicted: np.ndarray) -> pd.DataFrame:
    """The rows with a prediction of tokens/s per GPU and its relative error."""
    rows = use.copy()
    rows["predicted_tokens_per_s_per_gpu"] = predicted
    rows["error"] = predicted / rows["tokens_per_s_per_gpu"].to_numpy(dtype=float) - 1.0
    return rows


def _check_ceilings(values: dict[str, float], use: pd.DataFrame, catalog: Catalog) -> None:
    """Refuse a fitted ``matmul_fraction`` above a row's measured GEMM ceiling, or a
    ``fused_attention_fraction`` above its GPU's attention kernel ceiling."""
    if "matmul_fraction" in values:
        over = ceiling_violations(values["matmul_fraction"], use, catalog)
        if over:
            raise ConfigError(f"fitted matmul_fraction {values['matmul_fraction']:.4g} is above "
                              f"the measured best-shape GEMM ceiling of {'; '.join(over)}: not "
                              "written (the rows ask for more than the GPU's best GEMM "
                              "delivers, so another term of the model is off for them)")
    if "fused_attention_fraction" in values:
        over = attention_ceiling_violations(values["fused_attention_fraction"], use, catalog)
        if over:
            raise ConfigError(f"fitted fused_attention_fraction "
                              f"{values['fused_attention_fraction']:.4g} is above the measured "
                              f"fused attention kernel ceiling of {'; '.join(over)}: not written "
                              "(the rows ask for more than the GPU's attention kernel delivers, "
                              "so another term of the model is off for them)")


def ceiling_violations(matmul_fraction: float, rows: pd.DataFrame,
                       catalog: Catalog) -> list[str]:
    """Each (GPU, precision class) of ``rows`` whose catalog ceiling (``matmul_ceiling``:
    best-shape GEMM / dense peak, the MAMF table of hardware.md §6.1) is below
    ``matmul_fraction``, as text naming the ceiling and its source; [] when none is."""
    from fsdpsim.hardware.efficiency import precision_class

    out = []
    pairs = sorted({(str(g), str(p)) for g, p in zip(rows["gpu"], rows["precision"])})
    seen = set()
    for gpu, precision in pairs:
        cls = precision_class(precision)
        table = catalog.accelerator(gpu).efficiency.tables.get(cls, {}) if cls else {}
        ceiling = table.get("matmul_ceiling")
        if ceiling is not None and matmul_fraction > ceiling and (gpu, cls) not in seen:
            seen.add((gpu, cls))
            out.append(f"{gpu} {cls} {ceiling:.4g} ({table.get('ceiling_source', 'no source')})")
    return out


def attention_ceiling_violations(fused_attention_fraction: float, rows: pd.DataFrame,
                                 catalog: Catalog) -> list[str]:
    """Each GPU of ``rows`` whose catalog fused attention ceiling (``fused_attention_ceiling``
    of its 16-bit class table: the fused attention kernel's forward+backward FLOP/s over the
    dense 16-bit peak, measured in kernel benchmarks; attention runs in the 16-bit type unless
    ``fp8_attention``) is below ``fused_attention_fraction``, as text naming the ceiling and its
    source; [] when none is."""
    out = []
    for gpu in sorted({str(g) for g in rows["gpu"]}):
        table = catalog.accelerator(gpu).efficiency.tables.get("bf16", {})
        ceiling = table.get("fused_attention_ceiling")
        if ceiling is not None and fused_attention_fraction > ceiling:
            out.append(f"{gpu} fused attention {ceiling:.4g} "
                       f"({table.get('attention_ceiling_source', 'no source')})")
    return out


def split_table(rows: pd.DataFrame, catalog: Catalog) -> tuple[str, str] | None:
    """(precision class, kernel stack) of ``rows`` when they share one and some GPU of theirs
    resolves it from a split table (:func:`fsdpsim.hardware.efficiency.resolve`): the fitted
    fractions belong there, or the fallback table would not reach these rows. None otherwise (the
    fallback ``[accelerator.efficiency]``, as for a GPU without split tables)."""
    from fsdpsim.hardware.efficiency import precision_class, resolve
    from fsdpsim.plan.frameworks import profile

    recipes = rows["recipe"] if "recipe" in rows.columns else pd.Series("fsdp2", index=rows.index)
    triples = {(str(g), str(p), profile(str(r) or "fsdp2").kernel_stack)
               for g, p, r in zip(rows["gpu"], rows["precision"], recipes)}
    pairs = {(precision_class(p), stack) for _, p, stack in triples}
    if len(pairs) != 1 or None in next(iter(pairs)):
        return None
    if any(resolve(catalog.accelerator(g), p, stack).table is not None for g, p, stack in triples):
        return next(iter(pairs))
    return None
