"""The mappings a :class:`fsdpsim.drivers.predict.Prediction` holds: the chosen row of the
engine's outputs as Python numbers (:func:`row_of`), with the memory ceilings solved when first
read (:class:`CeilingValues`), and the configuration's one-value engine inputs read through
without a copy (:class:`OneValueInputs`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fsdpsim import engine
from fsdpsim.costs.compute import NUMBER_TYPES


class CeilingValues(Mapping):
    """The chosen row's outputs, read-only; ``max_micro_batch`` and ``max_seq_len`` (the
    memory ceilings, :func:`fsdpsim.costs.ceilings.peak_and_ceilings`) are solved by one more
    engine call the first time either is read, or the mapping is iterated: a caller that wants
    the step time alone does not pay for them (they cost about a third of a ``predict``)."""

    KEYS = ("max_micro_batch", "max_seq_len")

    def __init__(self, row: dict[str, float], inputs: Mapping[str, Any]):
        self._row, self._inputs = dict(row), inputs

    def _solve(self) -> None:
        if self._inputs is not None:
            out = engine.evaluate({**self._inputs, "ceilings": 1.0})
            for key in self.KEYS:
                self._row[key] = float(np.asarray(out[key], dtype=float).reshape(-1)[0])
            self._inputs = None

    def __getitem__(self, key: str):
        if key in self.KEYS:
            self._solve()
        return self._row[key]

    def __contains__(self, key: object) -> bool:
        return key in self._row or key in self.KEYS

    def __iter__(self):
        self._solve()
        return iter(self._row)

    def __len__(self) -> int:
        self._solve()
        return len(self._row)

    def __repr__(self) -> str:
        return f"CeilingValues({dict(self)!r})"


def row_of(out: Mapping[str, np.ndarray], i: int) -> dict[str, float]:
    """Row ``i`` of the engine's outputs as Python numbers (a single value serves every row)."""
    row = {}
    for key, arr in out.items():
        kind = type(arr)
        if kind in NUMBER_TYPES:  # one value (numpy scalar or Python number) serves every row
            row[key] = float(arr)
            continue
        a = arr if kind is np.ndarray else np.asarray(arr)
        value = a.item(i) if a.size > 1 else a.item(0)  # a Python number
        row[key] = value if a.dtype.kind == "b" else float(value)
    return row


#: Types of one value, checked inline before :func:`_is_one_value` (most inputs are these).
_ONE_VALUE_TYPES = NUMBER_TYPES | frozenset((bool, np.bool_, np.int64))


class OneValueInputs(Mapping):
    """The one-value entries of a configuration's engine inputs (a number or a 0-d array; not
    the candidates' columns), read through to them without a copy: ``Prediction.inputs``. A
    key is checked when read; iterating filters every key once."""

    __slots__ = ("_x", "_names")

    def __init__(self, x: Mapping[str, Any]):
        self._x, self._names = x, None

    def __getitem__(self, key: str) -> Any:
        v = self._x[key]
        if type(v) in _ONE_VALUE_TYPES or _is_one_value(v):
            return v
        raise KeyError(key)

    def _keys(self) -> tuple[str, ...]:
        if self._names is None:
            self._names = tuple(k for k, v in self._x.items()
                                if type(v) in _ONE_VALUE_TYPES or _is_one_value(v))
        return self._names

    def __iter__(self):
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


def _is_one_value(v) -> bool:
    """Whether input ``v`` is one value (a number or a 0-d array), not a column: what
    ``isinstance(v, (int, float)) or np.ndim(v) == 0`` says, without ``np.ndim``'s call on the
    numbers and arrays that make up most of the inputs."""
    kind = type(v)
    if kind in NUMBER_TYPES or isinstance(v, (int, float, np.generic)):
        return True
    return v.ndim == 0 if kind is np.ndarray else np.ndim(v) == 0


__all__ = ["CeilingValues", "OneValueInputs", "row_of"]
