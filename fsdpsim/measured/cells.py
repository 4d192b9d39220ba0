"""The cells of a measurement file in fsdpsim's schema: what each numeric column accepts
(:data:`COLUMN_RULES`, read with the one number reader), the layout cells' choices and the
micro-batch, accumulation and recompute cells; one clear error naming the row and column for
a cell that is not accepted (a published table's row gets it as its ``skip`` reason)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from fsdpsim import engine
from fsdpsim.measured import grid
from fsdpsim.measured.rows import PLAN_COLUMNS, cell, is_empty
from fsdpsim.plan.knobs import FRAMEWORK, KERNEL_KNOBS, KNOBS, PLAN_SWITCHES
from fsdpsim.plan.parallel import PP_SCHEDULES
from fsdpsim.util import numbers
from fsdpsim.util.codes import first_and_which
from fsdpsim.util.errors import ConfigError, shown
from fsdpsim.util.numbers import TINY, Rule, read_number

#: The kernel knobs a measurement file states (:data:`fsdpsim.plan.knobs.KERNEL_KNOBS` with a
#: column).
_KERNEL = tuple(KNOBS[name] for name in KERNEL_KNOBS if KNOBS[name].column)
_WIDTH, _HEADS = Rule(1, 2**20, whole=True), Rule(1, 2**16, whole=True)
#: The columns whose cell may say auto: what predict would choose (measured/auto_knobs.py).
_AUTO_COLUMNS = ("micro_batch", "grad_accum", "vpp")


def _cell_rule(knob) -> Rule:
    """What the column of ``knob`` accepts: its option's rule, with the word auto where the
    column takes it (:data:`_AUTO_COLUMNS`)."""
    return replace(knob.rule, also="auto") if knob.column in _AUTO_COLUMNS else knob.rule


#: The knob columns a row must fill (every other may be empty: the knob's default).
_REQUIRED = ("gpus_per_node", "seq_len")
#: The numeric columns of fsdpsim's schema and what each accepts (read with the one number
#: reader, :func:`fsdpsim.util.numbers.read_number`); True: an empty cell is allowed. A knob's
#: column (:attr:`fsdpsim.plan.knob.Knob.column`) accepts what its option accepts (its
#: declared rule); the others are the measurement's and the model's own.
COLUMN_RULES: dict[str, tuple[Rule, bool]] = {
    "n_gpus": (numbers.GPUS, False),
    "tokens_per_s_per_gpu": (numbers.TOKENS_PER_S_PER_GPU, False),
    "global_batch_seqs": (numbers.COUNT, True),
    # empty or "auto" (micro_batch, grad_accum, vpp): what predict would choose
    "grad_accum": (numbers.COUNT, True),
    "n_layers": (numbers.LAYERS, True), "d_model": (_WIDTH, True), "n_heads": (_HEADS, True),
    "n_kv_heads": (_HEADS, True), "ffn_size": (_WIDTH, True),
    "vocab": (Rule(1, 2**24, whole=True), True),
    "mtp_layers": (Rule(0, 64, whole=True), True),
    **{k.column: (_cell_rule(k), k.column not in _REQUIRED) for k in KNOBS.values()
       if k.column and k.rule is not None},
}


def read_cells(frame: pd.DataFrame, columns: dict[str, tuple[Rule, bool]], *,
                skip: bool = False, auto: bool = True) -> None:
    """Check the numeric cells of every modelled row and write back the numbers read (``" 8 "``
    and ``"1e3"`` become 8 and 1000); one clear error for the first cell that is not accepted,
    or with ``skip`` (published tables) that message as the row's skip reason. ``auto``: the
    word "auto" passes in the columns that take it (resolved later)."""
    for column, (rule, empty_ok) in columns.items():
        if column not in frame.columns:
            continue
        values = frame[column].astype(object).to_numpy(copy=True)
        rows = np.flatnonzero((frame["skip"] == "").to_numpy(dtype=bool))
        # each distinct cell (value and type, grid.column_codes) read once, at its first row,
        # and written to all its rows; a cell refused is read again below per row, so that
        # the message names the row
        codes = grid.column_codes(values)[rows]
        first, which = first_and_which(codes)
        read = np.empty(first.size, dtype=object)
        written = np.ones(first.size, dtype=bool)
        refused = np.zeros(first.size, dtype=bool)
        cells = values[rows[first]].tolist()
        for k in _plain_floats(cells, rule):  # read as read_number reads them
            read[k] = cells[k]
        for k, value in enumerate(cells):
            if read[k] is not None:
                continue
            if empty_ok and is_empty(value):
                read[k] = float("nan")
            elif auto and isinstance(value, str) and value.strip().lower() == "auto" and \
                    column in _AUTO_COLUMNS:
                written[k] = False
            else:
                try:
                    read[k] = read_number(value, column, rule)
                except ConfigError:
                    written[k], refused[k] = False, True
        at = written[which]
        values[rows[at]] = read[which[at]]
        failed = rows[refused[which]]
        for position in failed.tolist():  # the message names each row
            try:
                read_number(values[position],
                            f"row {shown(frame['id'].iat[position])}: column {column}", rule)
            except ConfigError as exc:
                if not skip:
                    raise
                frame.at[frame.index[position], "skip"] = str(exc)
        frame[column] = pd.Series(values, index=frame.index, dtype=object)


def _plain_floats(cells: list, rule: Rule) -> np.ndarray:
    """Positions of the cells that are Python floats :func:`read_number` gives back as they are
    (finite, accepted by a rule for any number), found for all cells at once
    (:meth:`fsdpsim.util.numbers.Rule.contains`, elementwise)."""
    if rule.whole:
        return np.zeros(0, dtype=int)
    at = np.flatnonzero(np.fromiter((type(c) is float for c in cells), dtype=bool,
                                    count=len(cells)))
    x = np.array([cells[k] for k in at.tolist()], dtype=float)
    with np.errstate(invalid="ignore"):
        above = x > rule.lo if rule.lo_open else x >= rule.lo
        ok = np.isfinite(x) & above & (x <= rule.hi) & ((x == 0) | (np.abs(x) >= TINY))
    return at[ok]


def check_columns(frame: pd.DataFrame) -> None:
    """One clear error for a row of fsdpsim's schema whose numbers are not usable."""
    read_cells(frame, COLUMN_RULES)
    layout = ["id"] + [c for c in ("sequence_parallel", *_CHOICES) if c in frame.columns]
    use = frame.loc[frame["skip"] == "", layout]
    for cells in use.itertuples(index=False, name=None):
        _check_plan_columns(dict(zip(layout, cells)))


#: The choice columns of the schema and what each accepts: the layout's, the plan switches'
#: (:data:`fsdpsim.plan.knobs.PLAN_SWITCHES`), then the kernel knobs'.
_CHOICES = {"pp_schedule": PP_SCHEDULES,
            **{k.column: k.choices for k in (KNOBS[n] for n in PLAN_SWITCHES)
               if k.kind == "choice"},
            **{k.column: k.choices for k in _KERNEL if k.kind == "choice"}}
#: The choice columns whose empty cell is the ``recipe`` profile's default.
_CHOICES_OF_RECIPE = tuple(k.column for k in _KERNEL
                           if k.kind == "choice" and k.default == FRAMEWORK)


def _check_plan_columns(row: pd.Series | dict) -> None:
    """One clear error for a layout cell of fsdpsim's schema that is not usable (the numeric
    ones are read by :func:`_read_cells`)."""
    def refuse(column: str, accepted: str) -> ConfigError:
        empty = ("the recipe profile's default" if column in _CHOICES_OF_RECIPE
                 else PLAN_COLUMNS[column])
        return ConfigError(f"row {shown(row['id'])}: column {column}: {shown(row[column])} is "
                           f"not accepted; accepted: {accepted} (or empty: {empty})")

    sp = cell(row, "sequence_parallel")
    if sp is not None and str(sp).strip().lower() not in ("true", "false", "1", "0", "yes",
                                                          "no", "1.0", "0.0"):
        raise refuse("sequence_parallel", "true or false")
    for column, choices in _CHOICES.items():
        value = cell(row, column)
        if value is not None and str(value) not in choices:
            raise refuse(column, ", ".join(choices))


def check_knobs(frame: pd.DataFrame) -> None:
    """One clear error for a modelled row whose micro-batch, accumulation or recompute mode is
    not usable (a traceback later would be worse)."""
    read_cells(frame, {"micro_batch": (numbers.COUNT, False),
                        "grad_accum": (numbers.COUNT, False)}, auto=False)
    use = frame[frame["skip"] == ""]
    for row_id, recompute in zip(use["id"].tolist(), use["recompute"].tolist()):
        if str(recompute) not in engine.RECOMPUTE_CODES:
            raise ConfigError(f"row {shown(row_id)}: recompute {shown(recompute)} is "
                              f"not accepted; accepted: {', '.join(engine.RECOMPUTE_CODES)}, auto")


