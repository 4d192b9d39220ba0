"""A measurements file as one grid: rows grouped by what they describe, the per-row objects
(model, system, plan, training options: :func:`fsdpsim.measured.rows.row_setup`) built once
per group and the engine inputs gathered per row, as :mod:`fsdpsim.drivers.sweep.tables` does
for a sweep's distinct models, systems and plans.

Two rows belong to one group when every cell the setup can read is the same value of the same
type (floats bit for bit); the cells that never enter it (the label, the measurement, the
knobs given per row) are left out of the key. A row whose setup fails is never served from a
group: it is set up on its own, so its message names it.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from fsdpsim.hardware.catalog import Catalog
from fsdpsim.hardware.system import BUSBW_COLUMNS
from fsdpsim.measured.rows import SPEC_COLUMNS, row_setup, row_system, spec_for_row
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.codes import column_codes

#: Columns no row setup reads (label, measurement, per-row knobs and bookkeeping).
NOT_SETUP = ("id", "tokens_per_s_per_gpu", "skip", "knobs", "micro_batch", "grad_accum",
             "recompute", "measured_from", "modelled_as")


def group_ids(frame: pd.DataFrame, columns: Iterable[str],
              within: np.ndarray | None = None) -> np.ndarray:
    """Each row's group (0, 1, ... in order of first appearance): rows with the same cells in
    ``columns`` (:func:`column_codes`) share one; ``within``: groups the rows already fall in,
    split by ``columns``."""
    return _combined(len(frame), [column_codes(frame[c]) for c in columns], within)


def _combined(n: int, codes: list[np.ndarray], within: np.ndarray | None = None) -> np.ndarray:
    """:func:`group_ids` of ``n`` rows from their columns' codes."""
    ids = np.zeros(n, dtype=np.int64) if within is None else within
    for column in codes:
        column = column.astype(np.int64)
        ids = pd.factorize(ids * (int(column.max(initial=0)) + 2) + (column + 1))[0]
    return ids


def setup_columns(frame: pd.DataFrame, also: Iterable[str] = ()) -> list[str]:
    """The columns of ``frame`` a row's setup may read: all but :data:`NOT_SETUP`, plus
    ``also``."""
    extra = set(also)
    return [c for c in frame.columns if c not in NOT_SETUP or c in extra]


class Cells(dict):
    """One row's cells by column, read as a :class:`pandas.Series` row is (``get``, ``[]``,
    ``in``, ``index``) without building one."""

    @property
    def index(self):
        return self.keys()


def rows_of(frame: pd.DataFrame, values: np.ndarray | None = None) -> Callable[[int], Cells]:
    """The row at a position with the values :meth:`pandas.DataFrame.iterrows` yields (one
    array of the frame's values, built once; ``values``: ``frame.values`` when the caller has
    it)."""
    values = frame.values if values is None else values
    columns = list(frame.columns)

    def row(position: int) -> Cells:
        return Cells(zip(columns, values[position]))

    return row


#: Setup cells that enter only the row's system: the measured bus bandwidths.
PINNED = BUSBW_COLUMNS

#: Setups already built per catalog, by the row's setup cells (shared by the stages of one
#: ``validate``: the layout check, the auto knobs and the engine inputs).
_BUILT: "weakref.WeakKeyDictionary[Catalog, dict]" = weakref.WeakKeyDictionary()
#: Setups kept per catalog at most (then the memory starts again).
MAX_KEPT = 200_000


class Setups:
    """:func:`fsdpsim.measured.rows.row_setup` of a frame's rows, once per group of equal setup
    cells (and ``vpp`` override); failures are not kept (each failing row is set up again, so
    its error names it).

    Groups that differ only in their measured bus bandwidths (:data:`PINNED`, cells that enter
    nothing but the row's system, :func:`fsdpsim.measured.rows.row_system`) share one layout
    (:attr:`layout`): its model, plan and options are built once, each group's system on its
    own."""

    def __init__(self, frame: pd.DataFrame, catalog: Catalog):
        self.catalog = catalog
        self.columns = setup_columns(frame)
        self._codes = [column_codes(frame[c]) for c in self.columns]
        self._pinned = [c in PINNED for c in self.columns]
        #: Each row's layout: its group without the measured bus bandwidth cells.
        self.layout = _combined(len(frame), [k for k, p in zip(self._codes, self._pinned)
                                             if not p])
        self.group = _combined(len(frame), [k for k, p in zip(self._codes, self._pinned) if p],
                               self.layout)
        self._frame = frame
        self._row: Callable[[int], Cells] | None = None
        # where the setup cells are in a row of values, and their names as a key
        self._at = [list(frame.columns).index(c) for c in self.columns]
        self._names = tuple(self.columns)
        self._keys: tuple[list, list] | None = None
        self._done: dict[tuple[int, Any], tuple] = {}
        self._built = _BUILT.setdefault(catalog, {})
        self._specs: dict[tuple, Any] = {}

    def _spec(self, row: Cells):
        """The row's model (:func:`fsdpsim.measured.rows.spec_for_row`), once per distinct
        model cells (:data:`fsdpsim.measured.rows.SPEC_COLUMNS`); a failure is not kept."""
        key = tuple((c in row, type(row.get(c)), repr(row.get(c))) for c in SPEC_COLUMNS)
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = spec_for_row(row)
        return spec

    def __call__(self, position: int, vpp: int | None = None) -> tuple:
        key = (int(self.group[position]), vpp)
        found = self._done.get(key)
        if found is None:
            if self._keys is None:
                self._keys = self._group_keys()
            content = (self._names, vpp, self._keys[0][key[0]])
            found = self._built.get(content)
            if found is None:
                layout = ("layout", self._names, vpp, self._keys[1][key[0]])
                found = self._build(position, vpp, self._built.get(layout))
                if len(self._built) >= MAX_KEPT - 1:
                    self._built.clear()
                self._built.setdefault(layout, found)
                self._built[content] = found
            self._done[key] = found
        return found

    def row(self, position: int) -> Cells:
        """The row at ``position`` (:func:`rows_of`: the frame's values read at the first
        call; a stage whose setups are all built before never reads them)."""
        if self._row is None:
            self._row = rows_of(self._frame)
        return self._row(position)

    def _group_keys(self) -> tuple[list[tuple], list[tuple]]:
        """Each group's setup cells, each as its type and ``repr`` (the key of :data:`_BUILT`),
        and its layout's (the same without :data:`PINNED`); each distinct cell of a column
        written once."""
        first = first_positions(self.group)
        values = self._frame.iloc[first].values  # each group's first row
        columns = []
        for at, codes in zip(self._at, self._codes):
            _, one, which = np.unique(codes[first], return_index=True, return_inverse=True)
            texts = [(type(v), repr(v)) for v in values[one, at].tolist()]
            columns.append([texts[k] for k in which.ravel().tolist()])
        layout = [c for c, p in zip(columns, self._pinned) if not p]
        return list(zip(*columns)), list(zip(*layout))

    def _build(self, position: int, vpp: int | None, layout: tuple | None) -> tuple:
        """The row's setup: its layout's model, plan and options with the row's own system
        (the system of the layout's scale-up domain), or on its own where it has no layout
        yet or its system fails (the row's error is then :func:`row_setup`'s)."""
        row = self.row(position)
        if layout is not None:
            spec, system, plan, options = layout
            try:
                return spec, row_system(row, self.catalog, system.gpus_per_node), plan, options
            except ConfigError:
                pass
        return row_setup(row, self.catalog, vpp, self._spec(row))


def engine_inputs(frame: pd.DataFrame, catalog: Catalog) -> dict[str, np.ndarray]:
    """:func:`fsdpsim.measured.validate.engine_inputs_per_row` as a grid (same numbers): the
    inputs of :func:`distinct_inputs` gathered per row."""
    x, inverse = distinct_inputs(frame, catalog)
    return {k: v[inverse] for k, v in x.items()}


def distinct_inputs(frame: pd.DataFrame, catalog: Catalog, setups: Setups | None = None
                    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The engine inputs of each distinct run of ``frame`` and each row's run (``inputs[k][
    inverse]`` is :func:`fsdpsim.measured.validate.engine_inputs_per_row`). A run is a group
    of equal setup cells with one micro-batch, accumulation and recompute mode. The builder
    ``predict`` uses (:func:`fsdpsim.engine.build.config_inputs`, which reads the recompute
    mode but not the micro-batch) runs once per layout (:attr:`Setups.layout`) and recompute
    mode; the groups of a layout differ only in their systems' pinned bus bandwidths, which
    enter only :func:`fsdpsim.engine.build.busbw_inputs`, set per group. The training
    options are checked once per layout, micro-batch and recompute mode, as the per-row path
    checks every row's. ``setups``: the frame's :class:`Setups`, when the caller keeps them
    for later stages."""
    from fsdpsim import engine
    from fsdpsim.drivers.predict import config_inputs
    from fsdpsim.engine.build import busbw_inputs
    from fsdpsim.engine.build_moe import uniform_keys
    from fsdpsim.plan.parallel import TrainingConfig

    setups = setups if setups is not None else Setups(frame, catalog)
    mb = [int(v) for v in frame["micro_batch"].tolist()]
    ga = [int(v) for v in frame["grad_accum"].tolist()]
    rc = [str(v) for v in frame["recompute"].tolist()]
    runs = group_ids(pd.DataFrame({"g": setups.group, "mb": mb, "ga": ga, "rc": rc}),
                     ("g", "mb", "ga", "rc"))
    first = first_positions(runs)
    codes = np.empty(first.size, dtype=float)
    trainings: dict[tuple[int, int, str], Any] = {}  # by layout, micro-batch and recompute
    bases: list[dict[str, Any]] = []  # the builder's inputs per layout and recompute mode
    base_at: dict[tuple[int, str], int] = {}
    base_of: list[int] = []  # each group's base
    pinned: dict[int, dict[str, float]] = {}  # the bus bandwidth inputs of groups not a base
    for r, pos in enumerate(first.tolist()):
        g, layout = int(setups.group[pos]), int(setups.layout[pos])
        spec, system, plan, options = setups(pos)
        run = (layout, mb[pos], rc[pos])
        if run not in trainings:
            trainings[run] = TrainingConfig(micro_batch=mb[pos], recompute=rc[pos], **options)
        training = trainings[run]
        codes[r] = engine.RECOMPUTE_CODES[training.recompute]
        if g == len(base_of):  # the group's first run (groups appear in order)
            b = base_at.get((layout, rc[pos]))
            if b is None:
                b = base_at[layout, rc[pos]] = len(bases)
                x = config_inputs(spec, system, plan, training)
                # the per-row keys as the per-row path orders them (values set below)
                x.update({"micro_batch": 0.0, "grad_accum": 0.0, "recompute": 0.0})
                bases.append(x)
            else:
                pinned[g] = busbw_inputs(system)
            base_of.append(b)
    bases = uniform_keys(bases)
    keys = list(bases[0])
    groups = np.array([[row[k] for k in keys] for row in bases], dtype=float)[base_of]
    if pinned:
        at = [keys.index(k) for k in next(iter(pinned.values()))]
        for g, values in pinned.items():
            groups[g, at] = list(values.values())
    table = groups[setups.group[first]]
    out = {k: np.ascontiguousarray(table[:, j]) for j, k in enumerate(keys)}
    out["micro_batch"] = np.array(mb, dtype=float)[first]
    out["grad_accum"] = np.array(ga, dtype=float)[first]
    out["recompute"] = codes
    return out, runs


def first_positions(ids: np.ndarray) -> np.ndarray:
    """Position of the first row of each group (groups numbered in order of appearance)."""
    _, first = np.unique(ids, return_index=True)
    return first
