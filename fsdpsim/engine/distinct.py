"""A stage of a group's rows evaluated on its distinct rows only, then spread back to every row.

A stage reads a few of the prepared inputs (:class:`fsdpsim.engine.inputs.Prepared`): one
layer's compute and its tensor- and context-parallel collectives
(:func:`fsdpsim.engine.stages.layer_costs`) depend on the model, the GPU, the TP and CP groups,
the tokens and the recompute mode (and a MoE model's share of MoE layers on a middle stage), not
on the GPU count or the sharding. A sweep's grid crosses those: a block of DeepSeek-V3's hybrid
grid (bench_sweep) has 5,751 distinct layers in 42,358 rows. :func:`evaluate` computes the stage
once per distinct combination of the fields it reads and gathers each result to its rows. Every
operation of the engine is element-wise, so a row's numbers are those it gets evaluated with
all the others (tests compare bit for bit).

The fields a stage reads are learnt, not listed: the stage runs on a view of the inputs that
takes a field onto the distinct rows when the stage first reads it and records its name
(:class:`RowsView`). Rows are told apart by the fields read so far (the first evaluation of a
process: none, so one row, which reads them); where the stage read a field that varies and was
not among them, the rows were told apart too coarsely: the field joins them and the stage runs
again. So a result is always that of rows that agree on every field the stage read, whatever
branch a grid takes, and no list of fields has to be kept beside the code.

Rows are told apart by a 64-bit hash of their fields' bits, sorted; every row is then compared
field by field with its group's first row (a hash collision never merges two rows): a few
passes over the rows a field, about a third of what a 42,358-row layer costs.

With ``flags``, distinct rows an earlier evaluation of the process computed are looked up in
:mod:`fsdpsim.engine.memo` rather than computed: a sweep's later blocks repeat the layers of
its first.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fsdpsim.engine import memo
from fsdpsim.engine.inputs import Prepared
from fsdpsim.engine.results import Result

#: Groups of fewer rows are evaluated whole (the hash and the gathers cost more than they save).
MIN_ROWS = 4_096
#: Where more than this share of a group's rows are distinct, it is evaluated whole (bench_sweep's
#: DeepSeek-V3 hybrid grid, 0.12-0.14, runs 10-15 % quicker; a mix of models at 0.24 no quicker,
#: at 0.43 10 % slower).
MAX_DISTINCT_SHARE = 0.2
#: Where the memo has seen a group's key (:mod:`fsdpsim.engine.memo`), its distinct rows are
#: looked for up to this share of its rows: looked up rather than computed, they are worth it
#: at a higher share (bench_sweep's hybrid mix of four models, 0.24-0.27 distinct in blocks of
#: 131,072: three blocks, memo warm, 344.3 ms against 366.5 at 0.2, best of 7 alternated); a
#: key whose groups have more is refused.
MEMO_SHARE = 0.4
#: :func:`distinct_rows` first counts the distinct rows among every ``SAMPLE_STRIDE``-th: where
#: more than ``SAMPLE_SHARE`` of those are distinct, the group has more than about 0.22 of its
#: rows distinct (d rows of n equally often: a sample of m holds d·(1 − exp(−m/d))), and the
#: sort of all rows is skipped.
SAMPLE_STRIDE = 4
SAMPLE_SHARE = 0.6
#: Fields each stage has been seen to read (by the stage's qualified name), grown as grids
#: reveal more (never shrunk: a field read once is a field the stage may read).
_READS: dict[str, set[str]] = {}
_MIX = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio, odd: a multiplicative hash


class NotSpreadable(Exception):
    """A stage result holds a value :func:`spread` cannot gather row by row, or the stage asked
    for something the view of the distinct rows does not do (:meth:`RowsView.replace`): the stage
    then runs on every row."""


def evaluate(stage: Callable[[Prepared], object], g: Prepared, n: int,
             worth: Callable[[Prepared], bool] | None = None,
             flags: Callable[[Prepared], tuple] | None = None):
    """``stage(g)`` for the ``n`` rows of ``g`` (a group's prepared inputs), computed on their
    distinct rows where few enough (module docstring) and, with ``worth``, where ``worth(g)``
    says the stage costs more than finding them; the same values either way. With ``flags``
    (the branches the stage takes on a group as a whole, as it sets them), the distinct rows
    an earlier evaluation of the process computed are looked up, not computed again
    (:mod:`fsdpsim.engine.memo`)."""
    if n < MIN_ROWS or (worth is not None and not worth(g)):
        return stage(g)
    name = stage.__qualname__
    reads = _READS.setdefault(name, set())
    group_flags = None if flags is None or not memo.MAX_ROWS else flags(g)
    while True:
        columns, names = _columns(g, reads, n)
        known = set(reads)
        table_key = (None if group_flags is None else
                     memo.key(name, g, known, names, group_flags))
        # a key the memo has seen: up to MEMO_SHARE distinct rows, found without a sample
        # first (the rows to keep, then those to look up)
        wide = table_key is not None and memo.seen(table_key)
        most = int((MEMO_SHARE if wide else MAX_DISTINCT_SHARE) * n)
        found = _distinct(columns, n, most, sample=not wide)
        if found is None:
            if wide:
                memo.refuse(table_key)
            elif table_key is not None:
                memo.admit(table_key)  # seen once: the next group of this key looks wider
            return stage(g)
        first, inverse, hashes = found
        try:
            result, read = _on_distinct(stage, g, n, first, hashes, columns, table_key, known)
        except NotSpreadable:
            return stage(g)
        new = {k for k in read if k not in reads and _is_column(getattr(g, k), n)}
        reads.update(read)
        if not new:  # every varying field read was a field the rows were told apart by
            break
    if type(result) is _Held:  # every row held: its arrays straight from the memo's table
        return result.table.result(result.at.take(inverse))
    try:
        return spread(result, inverse, first.size)
    except NotSpreadable:
        return stage(g)


class _Held:
    """Distinct rows the memo holds every one of: the table and their indices in it."""

    __slots__ = ("table", "at")

    def __init__(self, table: "memo.Table", at: np.ndarray):
        self.table, self.at = table, at


def _on_distinct(stage, g: Prepared, n: int, first: np.ndarray, hashes: np.ndarray,
                 columns: list[np.ndarray], table_key: tuple | None, known: set[str]):
    """``stage`` on the distinct rows ``first`` of ``g``'s ``n`` (their hashes ``hashes``, their
    varying fields ``columns``), looked up in the memo's table of ``table_key`` where it holds
    them (None: no memo), and the fields the stage read (nothing where every row was held).
    Rows evaluated are kept in the memo where the stage read no field beyond ``known``, the
    fields the key was made of; rows that evaluate to another form than the table's (its
    skeleton, :mod:`fsdpsim.engine.memo`) make every row evaluated."""
    if table_key is None:
        view = RowsView.of(g, first, n)
        return stage(view), view.read
    bits = [c.view(np.uint64).take(first) for c in columns]
    table, at = memo.lookup(table_key, hashes, bits)
    read: set[str] = set()
    if table is not None:
        miss = at < 0
        if not miss.any():
            return _Held(table, at), read
        view = RowsView.of(g, first[miss], n)
        leaves = memo.conform(table.skeleton, stage(view), int(np.count_nonzero(miss)))
        read |= view.read
        if leaves is not None:
            result = memo.merged(table, at, miss, leaves)
            if view.read <= known:
                memo.store(table_key, table.skeleton, hashes[miss], [b[miss] for b in bits],
                           leaves)
            return result, read
    view = RowsView.of(g, first, n)
    result = stage(view)
    if view.read <= known and (table is not None or memo.admit(table_key)):
        kept = _kept(result, first.size)
        if kept is not None:
            memo.store(table_key, kept[0], hashes, bits, kept[1])
    return result, read | view.read


def _kept(result, d: int):
    """``result`` of ``d`` rows as the memo keeps it (:func:`fsdpsim.engine.memo.flatten`), or
    None where it cannot."""
    try:
        return memo.flatten(result, d)
    except memo.NotKept:
        return None


def _is_column(v, n: int) -> bool:
    """Whether ``v`` is a field that varies by row: an array of the group's ``n`` rows."""
    return type(v) is np.ndarray and v.shape == (n,)


def _columns(g: Prepared, names, n: int) -> tuple[list[np.ndarray], list[tuple[str, ...]]]:
    """The fields ``names`` of ``g`` that are arrays of ``n`` rows, each array once (the
    builders give one column several names), in name order, and the names of each."""
    seen: dict[int, np.ndarray] = {}
    named: dict[int, list[str]] = {}
    for k in sorted(names):
        v = getattr(g, k, None)
        if _is_column(v, n):
            seen.setdefault(id(v), v)
            named.setdefault(id(v), []).append(k)
    return list(seen.values()), [tuple(named[i]) for i in seen]


def distinct_rows(columns: list[np.ndarray], n: int, most: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """The first row of each distinct combination of ``columns`` (arrays of ``n`` rows, bit for
    bit: -0.0 apart from 0.0, NaNs by their bits) and each row's index among them:
    ``(first, inverse)`` with ``column[first][inverse] == column`` for every column; None where
    there are more than ``most`` of them (told before the rows are compared) or a column is not
    of 8-byte entries. ``first`` is in hash order, not row order."""
    found = _distinct(columns, n, most)
    return None if found is None else found[:2]


def _distinct(columns: list[np.ndarray], n: int, most: int | None = None, sample: bool = True
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`distinct_rows`, and the hash of each distinct row (:func:`_hash`, ascending);
    without ``sample``, the count of ``most`` is told on all rows only."""
    if not columns:
        return (np.zeros(1, dtype=np.intp), np.zeros(n, dtype=np.intp),
                np.zeros(1, dtype=np.uint64))
    if any(c.dtype.itemsize != 8 for c in columns):
        return None
    bits = [c.view(np.uint64) for c in columns]
    if sample and most is not None and n >= 4 * SAMPLE_STRIDE:  # a quarter tells most grids
        hashed = np.sort(_hash([b[::SAMPLE_STRIDE] for b in bits]))
        if np.count_nonzero(hashed[1:] != hashed[:-1]) >= SAMPLE_SHARE * hashed.size:
            return None
    h = _hash(bits)
    order = np.argsort(h)
    sorted_h = h.take(order)
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(sorted_h[1:], sorted_h[:-1], out=new[1:])
    if most is not None and np.count_nonzero(new) > most:
        return None
    first = order[new]
    inverse = np.empty(n, dtype=np.intp)
    inverse[order] = np.cumsum(new) - 1
    rep = first.take(inverse)
    for b in bits:  # every row equals its group's first row: no collision merged two
        if np.count_nonzero(b.take(rep) != b):
            return None
    return first, inverse, sorted_h[new]


def _hash(bits: list[np.ndarray]) -> np.ndarray:
    """A 64-bit hash of each row of the columns ``bits`` (uint64 views, one length): each word
    xored in, its high half folded onto its low half, then multiplied (a float's exponent and
    leading mantissa bits are its high ones: multiplying alone carries a difference there only
    upwards, and rows of powers of two collided), the high bits folded down at the end."""
    h = bits[0] ^ (bits[0] >> np.uint64(32))
    h *= _MIX
    for b in bits[1:]:
        h ^= b
        h ^= h >> np.uint64(32)
        h *= _MIX
    h ^= h >> np.uint64(29)
    return h


class RowsView(Prepared):
    """Prepared inputs on some of their rows only (``first``, of ``n``): each field taken onto
    them when first read (a field of one value stays), its name recorded in ``read``. The
    distinct rows of :func:`evaluate`; the rows of a pipeline's heavier middle stage
    (:func:`fsdpsim.engine.memory.engine_memory`)."""

    __slots__ = ("_full", "_first", "_n", "read")

    @classmethod
    def of(cls, full: Prepared, first: np.ndarray, n: int) -> "RowsView":
        view = object.__new__(cls)
        object.__setattr__(view, "_full", full)
        object.__setattr__(view, "_first", first)
        object.__setattr__(view, "_n", n)
        object.__setattr__(view, "read", set())
        return view

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(self._full, name)
        self.read.add(name)
        if _is_column(value, self._n):
            value = value.take(self._first)
        self.__dict__[name] = value
        return value

    def replace(self, **changes: object) -> "RowsView":
        raise NotSpreadable("a stage that makes changed inputs runs on every row")


def spread(result, inverse: np.ndarray, d: int, memo: dict | None = None):
    """``result`` of ``d`` distinct rows on every row (``inverse``: each row's distinct row):
    arrays of ``d`` entries gathered, numbers and flags as they are, results and tuples field by
    field; one object spread once (results that share an array share its spread)."""
    memo = {} if memo is None else memo
    key = id(result)
    if key in memo:
        return memo[key]
    kind = type(result)
    if kind is np.ndarray:
        if result.shape != (d,):
            raise NotSpreadable(f"an array of shape {result.shape}, not ({d},)")
        out = result.take(inverse)
    elif isinstance(result, Result):
        out = kind(*[spread(getattr(result, f), inverse, d, memo) for f in kind._fields])
    elif kind is tuple:
        out = tuple(spread(v, inverse, d, memo) for v in result)
    elif result is None or kind in _ONE_VALUE:
        out = result
    else:
        raise NotSpreadable(f"a {kind.__name__}")
    memo[key] = out
    return out


_ONE_VALUE = frozenset((bool, int, float, np.float64, np.bool_, np.int64))
