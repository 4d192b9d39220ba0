"""Rows of a large input grouped by the engine's branches, each group evaluated on its own.

:func:`fsdpsim.engine._evaluate` takes the layered-model path (MoE, MLA, MTP: about three times
the work of a dense layer) and the pipeline's stages only when some row of its input needs
them; a grid that mixes rows pays for every branch on every row and masks
the results. :func:`split` sorts the rows by their *structure* (the branches they need) so
each structure is evaluated alone, and :func:`constants` turns a column that holds one value
into that value, so the engine computes it once (a group of one model and one GPU: most of the
model and hardware inputs). Each row's numbers are those of the row evaluated on its own: every
operation of the engine is element-wise, and a branch a row does not need only adds exact
zeros to it (the engine snapshot in ``tests/test_engine_groups.py`` compares grouped against
masked evaluation bit for bit).

Structures with fewer than :data:`MIN_GROUP_ROWS` rows are evaluated together (masked):
below that the engine's per-call cost (a few thousand numpy operations) outweighs the branch.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from fsdpsim.engine.moe import LAYERED_KEYS

#: A structure with fewer rows than this joins the masked remainder (module docstring).
MIN_GROUP_ROWS = 4_096
#: Inputs whose ``> 1`` is one bit of a row's structure (absent: a data-parallel plan). Pipelined
#: rows evaluate two more memory stages and the schedule; splitting on ``tp`` and ``cp`` as well
#: measured slower on bench_sweep's hybrid mix (more, smaller groups for less work saved).
PARALLEL_KEYS = ("pp",)


def _column(x: Mapping[str, object], key: str, n: int) -> np.ndarray | None:
    """Input ``key`` as a flat array of ``n`` rows, or None where it is one value (absent or a
    number: it splits nothing)."""
    v = x.get(key)
    if v is None or np.ndim(v) == 0 or np.size(v) != n:
        return None
    return np.asarray(v).reshape(-1)


def structure(x: Mapping[str, object], n: int) -> np.ndarray | None:
    """Each row's structure code (bits: layered model, then :data:`PARALLEL_KEYS` above 1),
    or None when no input that sets it varies by row."""
    code = None
    layered = [c > 0 for c in (_column(x, k, n) for k in LAYERED_KEYS) if c is not None]
    if layered:
        code = np.logical_or.reduce(layered).astype(np.int64)
    for bit, key in enumerate(PARALLEL_KEYS, start=1):
        col = _column(x, key, n)
        if col is not None:
            code = (0 if code is None else code) | ((col > 1).astype(np.int64) << bit)
    return code


def split(x: Mapping[str, object], n: int) -> list[np.ndarray] | None:
    """The rows of each group, ascending (one group per structure of at least
    :data:`MIN_GROUP_ROWS` rows, the other rows together), or None for one group."""
    code = structure(x, n)
    if code is None:
        return None
    counts = np.bincount(code)
    big = np.flatnonzero(counts >= MIN_GROUP_ROWS)
    if np.count_nonzero(counts) < 2 or (big.size == 1 and counts[big[0]] == n):
        return None
    # one pass over the codes per group (a handful), not a sort of the rows
    parts = [np.flatnonzero(code == c) for c in big]
    if big.size < np.count_nonzero(counts):  # the small structures, together
        in_big = np.zeros(counts.size, dtype=bool)
        in_big[big] = True
        parts.append(np.flatnonzero(~in_big[code]))
    return parts


def no_value(dtype: np.dtype):
    """What a row holds in an output it does not have (a grid's unpipelined rows have no middle
    stage; a stage evaluated on some rows only): NaN in a float column, else False or 0."""
    return np.nan if dtype.kind in "fc" else 0


def constants(x: Mapping[str, object]) -> dict[str, object]:
    """``x`` with every array input whose entries are all one value (bit for bit: a column of
    NaN too, -0.0 apart from 0.0) replaced by that value."""
    return {key: one_value(v) for key, v in x.items()}


def one_value(v):
    """``v``'s one value where ``v`` is a flat array whose entries are all that value (bit for
    bit), else ``v`` itself."""
    if type(v) is np.ndarray and v.ndim == 1 and v.size > 1:
        bits = v.view(np.int64) if v.dtype == _FLOAT64 else v
        first, size = bits[0], bits.size
        # the last, middle and quarter entries first: most columns that vary differ there
        if bits[-1] == first and bits[size >> 1] == first and bits[size >> 2] == first:
            if bits.dtype.kind in "biu":  # integers (a float's bits): the extremes agree
                same = bits.min() == bits.max()  # 2/3 of the instructions of comparing
            else:
                same = not np.count_nonzero(bits != first)
            if same:
                return v[0]
    return v


_FLOAT64 = np.dtype(np.float64)


def common_value(values: list) -> np.generic | None:
    """The one value, as a numpy scalar, that every entry of ``values`` (each an array of a
    group's rows or one value) holds on all its rows, bit for bit and of one dtype; else
    None."""
    same = None
    for v in values:
        v = np.asarray(one_value(v))
        if v.ndim:
            return None
        if same is None:
            same = v
        elif v.dtype != same.dtype or v.tobytes() != same.tobytes():
            return None
    return None if same is None else same[()]


class Twins:
    """Finds, among a block's columns seen so far, one bit-identical to a new column (the
    builders give several names one column's values: ``tp``, ``tp_size``, ``etp``; ``shard_size``,
    ``dp_world_size``, ``edp_size``), so a group gathers those values once for all the names.
    A few probe entries key each column; only a column whose probes match is compared in full
    (one pass of about one instruction per entry, a tenth of a gather's)."""

    def __init__(self):
        self._seen: dict[tuple, list[tuple[str, np.ndarray]]] = {}

    def twin(self, key: str, v: np.ndarray) -> str | None:
        """The name of an earlier column bit-identical to ``v`` (a flat array), else None,
        ``v`` then remembered under ``key``."""
        bits = v.view(np.int64) if v.dtype == np.float64 else v
        size = bits.size
        probe = (v.dtype, size, bits[0], bits[-1], bits[size >> 1], bits[size >> 2],
                 bits[(3 * size) >> 2], bits[size >> 3])
        earlier = self._seen.setdefault(probe, [])
        for name, other in earlier:
            if not np.count_nonzero(bits != other):
                return name
        earlier.append((key, bits))
        return None

