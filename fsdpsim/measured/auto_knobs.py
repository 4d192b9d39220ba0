"""Knobs a measurement row leaves unstated (micro-batch, recompute mode, the interleaved
schedule's model chunks): each such row gets what ``predict`` would choose for it
(:func:`resolve_auto_knobs`), and a ``knobs`` column says so."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import numpy as np
import pandas as pd

from fsdpsim import engine
from fsdpsim.drivers.predict import predict
from fsdpsim.hardware.catalog import Catalog
from fsdpsim.measured import grid
from fsdpsim.measured.cells import check_knobs
from fsdpsim.measured.rows import row_setup, spec_for_row, whole_cell
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import TrainingConfig
from fsdpsim.util.errors import ConfigError

T = TypeVar("T")


def asks_auto_vpp(vpp: Any) -> bool:
    """Whether a ``vpp`` cell asks for the chunk count ``predict`` would choose."""
    return str(vpp).strip().lower() == "auto"


def each_cell(f: Callable[[Any], T], cells: list) -> list[T]:
    """``f`` of each cell, called once per distinct cell (type and value; a column repeats few
    micro-batch, recompute or chunk cells)."""
    seen: dict[tuple[type, Any], T] = {}
    out = []
    for c in cells:
        key = (type(c), c)
        if key not in seen:
            seen[key] = f(c)
        out.append(seen[key])
    return out


def _unstated(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value) or \
        str(value).strip().lower() in ("", "auto", "nan")


def _vpp_candidates(row: pd.Series, spec: ModelSpec) -> list[int]:
    """Model chunks per pipeline rank an ``auto`` interleaved schedule may use: every v >= 2
    with n_layers divisible by pp × v (Megatron's rule)."""
    pp = whole_cell(row, "pp")
    found = [v for v in range(2, spec.n_layers // pp + 1) if spec.n_layers % (pp * v) == 0]
    if not found:
        raise ConfigError(f"n_layers({spec.n_layers}) does not split into pp({pp}) x vpp >= 2 "
                          "model chunks (interleaved schedule)")
    return found


def resolve_auto_knobs(frame: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Rows that do not state their micro-batch, recompute mode or (interleaved schedule)
    number of model chunks get what ``predict`` would choose for them (``auto``: the fastest
    setting that fits; with the row's global batch when it is known), and a ``knobs`` column
    says so. The issue this follows: published runs rarely state these knobs, and guessing them
    badly teaches the model wrong physics."""
    frame = frame.copy()
    if "knobs" not in frame.columns:
        frame["knobs"] = ""
    for column in ("micro_batch", "grad_accum", "recompute", "knobs", "vpp"):
        if column in frame.columns:
            frame[column] = frame[column].astype(object)  # "auto" text becomes a number
    # rows that describe the same run with the same knobs are searched once (the groups are
    # found when the first row needs them)
    group: np.ndarray | None = None
    found: dict[int, tuple] = {}
    chosen_cells: dict[str, dict[int, Any]] = {
        c: {} for c in ("micro_batch", "grad_accum", "recompute", "vpp", "knobs")}
    vpps = frame["vpp"].tolist() if "vpp" in frame.columns else [""] * len(frame)
    cells = zip(frame.index, frame["skip"].tolist(),
                each_cell(_unstated, frame["micro_batch"].tolist()),
                each_cell(_unstated, frame["recompute"].tolist()), each_cell(asks_auto_vpp, vpps))
    for position, (i, skip, auto_mb, auto_rc, auto_vpp) in enumerate(cells):
        if skip or not (auto_mb or auto_rc or auto_vpp):
            continue
        if group is None:
            group = grid.group_ids(frame, grid.setup_columns(frame, ("micro_batch", "grad_accum",
                                                                     "recompute")))
            row_at = grid.rows_of(frame)
        g = int(group[position])
        if g not in found:
            row = row_at(position)
            try:
                vpps_tried = _vpp_candidates(row, spec_for_row(row)) if auto_vpp else [None]
                best = None
                for vpp in vpps_tried:
                    chosen = _predict_knobs(row, catalog, vpp, auto_mb, auto_rc)
                    rank = tuple(float(np.ravel(a)[0]) for a in engine.choice_rank(chosen.values))
                    if best is None or rank < best[0]:
                        best = (rank, vpp, chosen.training)
            except ConfigError as exc:  # not kept: the next row of the group tries again
                frame.at[i, "skip"] = f"auto knobs: {exc}"
                continue
            found[g] = best
        _, vpp, chosen = found[g]
        for column in ("micro_batch", "grad_accum", "recompute"):
            chosen_cells[column][position] = chosen[column]
        if auto_vpp:
            chosen_cells["vpp"][position] = vpp
        chosen_cells["knobs"][position] = "auto: " + ", ".join(
            [f"{k} {chosen[k]}" for k, auto in (("micro_batch", auto_mb), ("recompute", auto_rc))
             if auto] + ([f"vpp {vpp}"] if auto_vpp else []))
    for column, cells_set in chosen_cells.items():
        if cells_set:
            values = frame[column].tolist()
            for position, value in cells_set.items():
                values[position] = value
            frame[column] = pd.Series(values, index=frame.index, dtype=object)
    check_knobs(frame)
    return frame


def _predict_knobs(row: pd.Series, catalog: Catalog, vpp: int | None, auto_mb: bool,
                   auto_rc: bool):
    """``predict`` of one row with its unstated knobs left to ``auto``."""
    spec, system, plan, options = row_setup(row, catalog, vpp)
    global_seqs = float(row.get("global_batch_seqs", float("nan")))
    if global_seqs != global_seqs and not auto_mb and not _unstated(row["grad_accum"]):
        global_seqs = float(row["micro_batch"]) * float(row["grad_accum"]) * plan.dp
    usable = global_seqs == global_seqs and global_seqs % plan.dp == 0
    training = TrainingConfig(micro_batch=None if auto_mb else int(row["micro_batch"]),
                              recompute=None if auto_rc else str(row["recompute"]),
                              global_batch=int(global_seqs) if usable else None, **options)
    # predict's auto ranks a micro-batch count the pipeline schedule cannot run (interleaved
    # 1F1B needs whole rounds of pp) last, and refuses it when nothing else is left.
    return predict(spec, system, plan, training)


