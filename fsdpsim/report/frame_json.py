"""A table's rows as JSON, byte for byte what ``render.to_json(records(frame))`` writes (a list
of one object per row, two-space indents), built column by column: each distinct cell of a
column is encoded once and the rows are joined from the encoded columns. ``json.dumps`` with
an indent runs Python's own encoder, cell by cell (a 20,000-row, 170-column sweep: 9 s); a
sweep repeats most cells (its inputs, plan lines, categories), so this costs a fraction.

The cells are those of :func:`fsdpsim.report.sweep_table.records` (a missing cell is null)
through :func:`fsdpsim.report.render.to_json`'s conversions (a non-finite float is null, numpy
numbers plain ones); a list or object cell keeps ``json.dumps``' layout at its depth."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from fsdpsim.report.render import _jsonable
from fsdpsim.util.codes import column_codes, first_and_which

#: The indent of a row object's members: the list's two spaces and the object's two.
_MEMBER = " " * 4


def frame_json(frame: pd.DataFrame) -> str:
    """``render.to_json(records(frame))``, from each column's distinct cells encoded once."""
    if not len(frame):
        return "[]"
    columns = [_member_text(name, frame.iloc[:, j]) for j, name in enumerate(frame.columns)]
    rows = (",\n".join(row) for row in zip(*columns))
    return "[\n  {\n" + "\n  },\n  {\n".join(rows) + "\n  }\n]"


def _member_text(name, column: pd.Series) -> list[str]:
    """Each cell of ``column`` as its row object's member, ``"name": value``, indented."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
    else:
        try:
            codes = column_codes(column)
        except TypeError:  # unhashable cells (lists): each encoded on its own
            codes = np.arange(len(column))
    first, which = first_and_which(codes)
    cells = column.iloc[first]
    cells = cells.astype(object).where(cells.notna(), None).tolist()  # as records() has them
    key = f"{_MEMBER}{json.dumps(str(name))}: "
    texts = np.array([key + _value_text(cell) for cell in cells], dtype=object)
    return texts[which].tolist()


def _value_text(value) -> str:
    """``json.dumps(_jsonable(value), indent=2)`` at a row member's depth: a Python number,
    text, true, false or null directly (the indenting encoder is Python's own, a few
    microseconds a cell), anything else converted by ``_jsonable`` (numpy numbers, a list or
    an object, by ``json.dumps``, its inner lines indented as the member is)."""
    kind = type(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is float:
        return repr(value) if math.isfinite(value) else "null"
    if kind is int:
        return int.__repr__(value)
    if kind is str:
        return json.dumps(value)
    value = _jsonable(value)
    if type(value) in (bool, float, int, str) or value is None:
        return _value_text(value)
    return json.dumps(value, indent=2).replace("\n", "\n" + _MEMBER)
