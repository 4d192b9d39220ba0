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
    # each distinct run evaluated once and gathered per row (grid.distinct_inputs)
    runs, run = distinct_inputs(use, catalog)
    x = {k: v[run] for k, v in runs.items()}

    def predict_rows(theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Tokens/s per GPU of ``rows`` (default: all) at factors ``theta``: the distinct
        runs among them evaluated, each row given its run's."""
        present, back = np.unique(run if rows is None else run[rows], return_inverse=True)
        return _predict({k: v[present] for k, v in runs.items()}, factors, theta)[back]

    def predict_many(thetas: list[np.ndarray], rows: np.ndarray) -> list[np.ndarray]:
        """:func:`predict_rows` of ``rows`` at each of ``thetas`` in one engine call: the
        distinct runs among them stacked once per theta (the engine works elementwise)."""
        present, back = np.unique(run[rows], return_inverse=True)
        y = {k: np.tile(v[present], len(thetas)) for k, v in runs.items()}
        for j, name in enumerate(factors):
            y[name] = np.repeat(np.array([theta[j] for theta in thetas], dtype=float),
                                present.size)
        y["ceilings"] = 0.0
        tps = np.asarray(engine.evaluate(y)["tokens_per_s_per_gpu"], dtype=float)
        return [part[back] for part in np.split(tps, len(thetas))]

    measured = use["tokens_per_s_per_gpu"].to_numpy(dtype=float)
    start = np.array([float(np.mean(x[f])) for f in factors])
    lo = np.array([FACTORS[f][2][0] for f in factors])
    hi = np.array([FACTORS[f][2][1] for f in factors])
    start = np.clip(start, lo + 1e-9, hi - 1e-9)

    refused: dict[str, str] = {}
    base = predict_rows(start)
    keep = []
    for i, name in enumerate(factors):
        # half the range away from the nearer bound (the midpoint for both branches would
        # leave a factor starting there looking unidentifiable)
        probe = start.copy()
        half = 0.5 * (hi[i] - lo[i])
        probe[i] = start[i] - half if start[i] - lo[i] > hi[i] - start[i] else start[i] + half
        change = np.max(np.abs(predict_rows(probe) / base - 1.0))
        if change < MIN_SENSITIVITY:
            refused[name] = (f"not identifiable from these rows: moving it to {probe[i]:.3g} "
                             f"changes predictions by at most {100 * change:.2f} %")
        else:
            keep.append(i)
    names = [factors[i] for i in keep]
    if not names:
        raise ConfigError("no factor can be identified from these rows: " + "; ".join(
            f"{k}: {v}" for k, v in refused.items()))

    def solve(rows: np.ndarray):
        def residuals(theta):
            full = start.copy()
            full[keep] = theta
            return np.log(predict_rows(full, rows) / measured[rows])

        def jacobian_points(_, thetas):
            """least_squares' ``workers``: the residuals at the finite-difference points of
            one Jacobian, in one engine call (:func:`predict_many`)."""
            fulls = []
            for theta in thetas:
                fulls.append(start.copy())
                fulls[-1][keep] = theta
            return [np.log(p / measured[rows]) for p in predict_many(fulls, rows)]

        batched = {"workers": jacobian_points} if _HAS_WORKERS else {}  # SciPy >= 1.16
        return least_squares(residuals, start[keep], bounds=(lo[keep], hi[keep]), x_scale="jac",
                             **batched)

    everything = np.arange(len(use))
    sol = solve(everything)
    theta = start.copy()
    theta[keep] = sol.x
    before_rows = use.copy()
    before_rows["predicted_tokens_per_s_per_gpu"] = base
    before_rows["error"] = base / measured - 1.0
    after_pred = predict_rows(theta)
    after_rows = use.copy()
    after_rows["predicted_tokens_per_s_per_gpu"] = after_pred
    after_rows["error"] = after_pred / measured - 1.0
    values = {n: float(theta[factors.index(n)]) for n in names}
    if check_ceiling and "matmul_fraction" in values:
        over = ceiling_violations(values["matmul_fraction"], use, catalog)
        if over:
            raise ConfigError(f"fitted matmul_fraction {values['matmul_fraction']:.4g} is above "
                              f"the measured best-shape GEMM ceiling of {'; '.join(over)}: not "
                              "written (the rows ask for more than the GPU's best GEMM "
                              "delivers, so another term of the model is off for them)")
    if check_ceiling and "fused_attention_fraction" in values:
        over = attention_ceiling_violations(values["fused_attention_fraction"], use, catalog)
        if over:
            raise ConfigError(f"fitted fused_attention_fraction "
                              f"{values['fused_attention_fraction']:.4g} is above the measured "
                              f"fused attention kernel ceiling of {'; '.join(over)}: not written "
                              "(the rows ask for more than the GPU's attention kernel delivers, "
                              "so another term of the model is off for them)")
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
        cv_theta = start.copy()
        cv_theta[keep] = solve(everything[~held]).x
        cv_pred[held] = predict_rows(cv_theta)[held]
    cv_rows = use.copy()
    cv_rows["predicted_tokens_per_s_per_gpu"] = cv_pred
    cv_rows["error"] = cv_pred / measured - 1.0
    ratio = measured / cv_pred
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
                             cross_validated=summarise(cv_rows), interval=interval,
                             table=split_table(use, catalog))


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
    resolves it from a split table (:func:`fsdpsim.hardware.efficiency.resolve`): the fitted fractions
    belong there, or the fallback table would not reach these rows. None otherwise (the
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
