"""A table's CSV text, byte for byte what :meth:`pandas.DataFrame.to_csv` (``index=False``)
writes, built column by column: each distinct cell of a column is formatted once and the
rows are joined from the formatted columns. A measurements table repeats most cells (a run's
configuration over its repeats), so this costs a fraction of pandas' cell-by-cell writer.

pandas' rules, followed here: a missing cell (None, NaN, NA) is the empty field; a numpy
column's cells are ``ndarray.astype(str)`` (a float64's shortest round-trip text, the same as
Python's ``repr``); other cells are what :mod:`csv`'s writer makes of them (``repr`` of a
float, ``str`` of anything else, quoted where the text holds the delimiter, the quote
character or a line break); a categorical column of text is its categories' texts (a missing
cell empty) and a nullable integer column (``Int64``) its numbers' digits (a missing cell
empty). A column of any other kind (dates, categories of numbers, nullable floats), or a table
without rows, is written by pandas itself. ``fsdpsim sweep --format csv`` writes its rows
through it (a 69,120-row, 170-column DeepSeek-V3 sweep: 11 s in pandas' writer)."""

from __future__ import annotations

import csv
import io
import os
import re
from typing import Any

import numpy as np
import pandas as pd

from fsdpsim.util.codes import column_codes, first_and_which

#: A character that makes the csv writer quote a text field (delimiter, quote, line break).
_QUOTED = re.compile('[,"\r\n]')


def frame_csv(frame: pd.DataFrame, header: bool = True) -> str:
    """``frame.to_csv(index=False, header=header)``, from each column's distinct cells
    formatted once."""
    kinds = [_kind(dtype) for dtype in frame.dtypes]
    if not len(frame) or not kinds or None in kinds or isinstance(frame.columns, pd.MultiIndex):
        return frame.to_csv(index=False, header=header)
    fields = _Fields()
    header = fields.line(list(frame.columns)) if header else ""
    columns = [_column_text(frame.iloc[:, j], kind, fields) for j, kind in enumerate(kinds)]
    end = os.linesep  # pandas' line terminator
    return header + "".join(",".join(row) + end for row in zip(*columns))


def _kind(dtype) -> str | None:
    """How a column of ``dtype`` is formatted: ``float`` (numpy float64), ``numpy`` (other
    numpy numbers and booleans), ``text`` (pandas' string dtype), ``object``, ``category``
    (categories of text), ``integer`` (a nullable integer dtype); None: by pandas."""
    if isinstance(dtype, pd.StringDtype):
        return "text"
    if isinstance(dtype, pd.CategoricalDtype):
        categories = dtype.categories
        text = isinstance(categories.dtype, pd.StringDtype) or categories.dtype == object
        return "category" if text and all(type(c) is str for c in categories) else None
    if isinstance(dtype, pd.api.extensions.ExtensionDtype) and dtype.kind == "i":
        return "integer"  # signed: every value fits int64
    if not isinstance(dtype, np.dtype):
        return None
    if dtype == np.float64:
        return "float"
    return "numpy" if dtype.kind in "fiub" else "object" if dtype.kind == "O" else None


def _column_text(column: pd.Series, kind: str, fields: "_Fields") -> list[str]:
    """Each cell of ``column`` as its CSV field."""
    if kind == "text":  # its distinct texts, a missing cell (code -1) the last, empty field
        codes, uniques = pd.factorize(column)
        return np.array(fields.texts(list(uniques)) + [""], dtype=object)[codes].tolist()
    if kind == "category":  # its categories' texts, a missing cell (code -1) the last, empty
        texts = fields.texts(list(column.cat.categories))
        return np.array(texts + [""], dtype=object)[column.cat.codes.to_numpy()].tolist()
    if kind == "integer":  # the digits of each distinct number, a missing cell empty
        missing = column.isna().to_numpy()
        values = column.to_numpy(dtype=np.int64, na_value=0)
        first, which = first_and_which(values)
        out = np.array(values[first].astype(str).tolist() + [""], dtype=object)
        which[missing] = first.size
        return out[which].tolist()
    values = column.to_numpy()
    first, which = first_and_which(column_codes(values))
    cells = values[first]
    missing = pd.isna(cells)
    if kind == "float":  # astype(str) of float64 is Python's repr, which is faster
        texts = list(map(repr, cells.tolist()))
    elif kind == "numpy":
        texts = cells.astype(str).tolist()
    else:
        texts = fields.texts(cells.tolist())
    out = np.array(texts, dtype=object)
    out[missing] = ""
    return out[which].tolist()


class _Fields:
    """Fields as :mod:`csv`'s writer writes them (pandas' dialect: comma, double quote,
    minimal quoting)."""

    def __init__(self) -> None:
        self._buffer = io.StringIO()
        self._writer = csv.writer(self._buffer, lineterminator=os.linesep)

    def line(self, cells: list[Any]) -> str:
        """One CSV line of ``cells``."""
        self._buffer.seek(0)
        self._buffer.truncate()
        self._writer.writerow(cells)
        return self._buffer.getvalue()

    def texts(self, cells: list[Any]) -> list[str]:
        """Each cell's field: a column of plain text or of floats at once, else cell by
        cell (:meth:`text`)."""
        kinds = set(map(type, cells))
        if kinds == {str} and not _QUOTED.search("".join(cells)):
            return cells
        if kinds == {float}:
            return list(map(repr, cells))
        return [self.text(cell) for cell in cells]

    def text(self, cell: Any) -> str:
        """One cell's field: the common types directly, any other through the writer."""
        kind = type(cell)
        if kind is str and not _QUOTED.search(cell):
            return cell
        if kind is float:
            return repr(cell)
        if kind is int or kind is bool:
            return str(cell)
        line = self.line([cell, ""])  # a second field: a lone empty field is written quoted
        return line[:len(line) - 1 - len(os.linesep)]
