"""Leave-one-source-out check of a calibration (``fsdpsim calibrate --loso``).

For each ``source_key`` of the fitted rows, :func:`fsdpsim.measured.calibrate.fit` refits the chosen
factors on every other source's rows, and that fit predicts the held-out source: its error
before (the catalog as it is) and after (the fit that never saw it) says whether the factors
carry to runs they were not fitted on. A fold whose fit improves its own rows (the other
sources) by less than it worsens the held-out source is flagged: the factors then fit the
other sources' peculiarities, not the GPU. Gains and losses are summed absolute errors of
tokens/s per GPU over the rows, in percentage points (row-weighted). A fold whose
``matmul_fraction`` lies above a measured GEMM ceiling of its rows (or whose
``fused_attention_fraction`` lies above a measured attention kernel ceiling) is marked too (the
refit itself is not refused here, so that the report shows what each source asks for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from fsdpsim.measured.calibrate import (DEFAULT_FACTORS, FACTORS, _predict,
                                        attention_ceiling_violations, ceiling_violations, fit)
from fsdpsim.hardware.catalog import Catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.measured.rows import on_gpus
from fsdpsim.measured.validate import engine_inputs


@dataclass(frozen=True)
class Fold:
    """One held-out source."""

    source: str
    rows: int
    values: dict[str, float]
    """Factors fitted without this source (engine units)."""
    mape_before: float
    """MAPE of the held-out rows with the catalog's factors [-]."""
    mape_after: float
    """MAPE of the held-out rows with the fit that left them out [-]."""
    gain_pp: float
    """Summed absolute error the fit removed from its own rows [percentage points]."""
    loss_pp: float
    """Summed absolute error it added to the held-out rows [percentage points] (negative: it
    helped them too)."""

    above_ceiling: tuple[str, ...] = ()
    """(GPU, class, ceiling) texts whose measured best-shape GEMM ceiling the fold's
    ``matmul_fraction`` exceeds (:func:`fsdpsim.measured.calibrate.ceiling_violations`)."""
    above_attention_ceiling: tuple[str, ...] = ()
    """(GPU, ceiling) texts whose measured fused attention kernel ceiling the fold's
    ``fused_attention_fraction`` exceeds
    (:func:`fsdpsim.measured.calibrate.attention_ceiling_violations`)."""

    @property
    def flagged(self) -> bool:
        return self.gain_pp > 0.0 and self.loss_pp > self.gain_pp


def leave_one_source_out(frame: pd.DataFrame, catalog: Catalog, gpus: Sequence[str],
                         factors: Sequence[str] = DEFAULT_FACTORS) -> list[Fold]:
    """One :class:`Fold` per ``source_key`` of the usable rows run on ``gpus``."""
    ids = tuple(catalog.accelerator(g).id for g in gpus)
    if "source_key" not in frame.columns:
        raise ConfigError("--loso needs a source_key column naming each row's source")
    use = frame[(frame["skip"] == "") & on_gpus(frame, catalog, ids)].reset_index(drop=True)
    sources = sorted({str(s) for s in use["source_key"]})
    if len(sources) < 2:
        raise ConfigError(f"--loso needs rows from at least two sources; the usable rows on "
                          f"{', '.join(ids)} come from {len(sources)} "
                          f"({', '.join(sources) or 'none'})")
    x = engine_inputs(use, catalog)
    measured = use["tokens_per_s_per_gpu"].to_numpy(dtype=float)
    before = np.abs(_predict(x, [], np.array([])) / measured - 1.0)
    key = use["source_key"].astype(str).to_numpy()
    folds = []
    for source in sources:
        held = key == source
        values = fit(use[~held], catalog, ids, factors, cross_validate=False,
                     check_ceiling=False).values
        names = list(values)
        after = np.abs(_predict(x, names, np.array([values[n] for n in names])) / measured
                       - 1.0)
        over = (tuple(ceiling_violations(values["matmul_fraction"], use, catalog))
                if "matmul_fraction" in values else ())
        over_attention = (tuple(attention_ceiling_violations(
            values["fused_attention_fraction"], use, catalog))
            if "fused_attention_fraction" in values else ())
        folds.append(Fold(source=source, rows=int(held.sum()), values=values,
                          above_ceiling=over, above_attention_ceiling=over_attention,
                          mape_before=float(before[held].mean()),
                          mape_after=float(after[held].mean()),
                          gain_pp=float(100 * (before[~held] - after[~held]).sum()),
                          loss_pp=float(100 * (after[held] - before[held]).sum())))
    return folds


def report_lines(folds: list[Fold]) -> list[str]:
    """The ``calibrate --loso`` table: per held-out source its rows, MAPE with the catalog and
    with the fit that left it out, the fitted factors (catalog units), and the flag."""
    lines = [f"{'held-out source':<44} {'rows':>5} {'before':>8} {'after':>8} "
             f"{'gain pp':>8} {'loss pp':>8}  fitted without it"]
    for f in folds:
        fitted = ", ".join(f"{FACTORS[n][0]} {v * FACTORS[n][1]:.4g}" for n, v in f.values.items())
        name = f.source if len(f.source) <= 44 else f.source[:43] + "…"
        lines.append(f"{name:<44} {f.rows:>5} {100 * f.mape_before:>6.1f} % "
                     f"{100 * f.mape_after:>6.1f} % {f.gain_pp:>8.1f} {f.loss_pp:>8.1f}  {fitted}"
                     + ("  FLAGGED: worsens the held-out source more than it gains"
                        if f.flagged else "")
                     + ("  ABOVE THE GEMM CEILING of " + "; ".join(f.above_ceiling)
                        if f.above_ceiling else "")
                     + ("  ABOVE THE ATTENTION CEILING of " + "; ".join(f.above_attention_ceiling)
                        if f.above_attention_ceiling else ""))
    return lines
