"""Integer codes of a table's cells that tell apart what prints or reads apart: the grouping
of :mod:`fsdpsim.measured.grid` and the cell formatting of :mod:`fsdpsim.report.frame_csv`."""

from __future__ import annotations

import numpy as np
import pandas as pd


def column_codes(values: pd.Series | np.ndarray) -> np.ndarray:
    """Integer codes of a column, equal exactly where the cells are the same value of the same
    type: floats by their bits (NaN, -0.0 apart from 0.0), other cells by value and type (``1``,
    ``1.0``, ``"1"`` and ``True`` apart, ``None`` apart from NaN)."""
    if isinstance(values, pd.Series) and isinstance(values.dtype, pd.StringDtype):
        return pd.factorize(values)[0]  # text cells (one type) and missing ones (-1)
    a = values.to_numpy() if isinstance(values, pd.Series) else np.asarray(values)
    if a.dtype.kind == "f":
        return pd.factorize(a.astype(np.float64).view(np.int64))[0]
    if a.dtype.kind in "iub":
        return pd.factorize(a)[0]
    a = a.astype(object)
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    kinds = set(map(type, a.tolist()))
    if kinds == {float}:  # Python floats only: by their bits, as a float column
        return pd.factorize(a.astype(np.float64).view(np.int64))[0]
    if kinds == {int}:  # Python ints only: as an integer column where they fit
        try:
            return pd.factorize(a.astype(np.int64))[0]
        except OverflowError:
            return pd.factorize(a)[0]
    if len(kinds) == 1 and kinds <= {str, bool}:  # one type whose equal values print alike
        return pd.factorize(a)[0]
    codes, uniques = pd.factorize(a)  # missing cells (None, NaN, NA) are -1
    types = pd.factorize(_TYPE_OF(a))[0].astype(np.int64)
    # 0.0 and -0.0 are equal values that print apart
    for u in [u for u, v in enumerate(uniques) if isinstance(v, float) and v == 0.0]:
        at = np.flatnonzero(codes == u)
        types[at] += (int(types.max()) + 1) * np.signbit(a[at].astype(float))
    return (codes.astype(np.int64) + 1) * (int(types.max()) + 1) + types


def first_and_which(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of integer codes (:func:`column_codes`): where each distinct code first occurs, and each
    entry's index among the distinct codes (``np.unique``'s index and inverse, flat), so a
    column's distinct cells are read or formatted once and spread to every row."""
    _, first, which = np.unique(codes, return_index=True, return_inverse=True)
    return first, which.ravel()


#: Each cell's type, elementwise over an object array.
_TYPE_OF = np.frompyfunc(type, 1, 1)
