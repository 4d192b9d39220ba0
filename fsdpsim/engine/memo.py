"""A stage's results on distinct rows, kept across evaluations of one process and looked up by
the exact bits of the fields the stage read (:func:`fsdpsim.engine.distinct.evaluate`).

A sweep evaluates its grid block by block (``fsdpsim sweep`` calls the engine on 65,536 rows at a
time; a Dask worker on chunk after chunk), and the blocks repeat the same layers: one
layer's compute and tensor- and context-parallel collectives depend on the model, the GPU, the
TP and CP groups, the tokens and the recompute mode, a few thousand combinations that every
block of bench_sweep's DeepSeek-V3 hybrid grid holds again. The engine computes them once and
looks them up in later blocks.

Exactness. A row is looked up by every field the stage read: the fields of one value in the
group by their bits (part of the table's key), the varying ones by a 64-bit hash of their bits
and then compared field by field with the kept row (a hash collision is a miss, never a wrong
row). Every operation of the engine is element-wise, so a row's numbers do not depend on the
rows evaluated with it (the premise of the engine's grouped and distinct evaluations, tested
bit for bit); what the batch decides is the form of the result: which optional parts exist
(a MoE layer's kinds; None for a grid without MoE rows), which are one number rather than an
array, which arrays are one object. A table keeps rows of one such form (the *skeleton*:
structure, flags, numbers, shared arrays, dtypes), and serves a group only with the flags the
stage would set on it (``flags``: the branches a group takes as a whole, computed by the same
function the stage sets them with); a group whose missing rows evaluate to another form is
evaluated whole, as without the memo. A key's rows are kept from its second group on
(:func:`admit`); ``engine.evaluate(memo=False)`` neither looks up nor keeps any. The key holds
the stage's inputs, not its code: code that changes an engine function in place (a test's
monkeypatch) calls :func:`clear` first.
"""

from __future__ import annotations

import struct

import numpy as np

from fsdpsim.engine.results import Result

#: Rows a table keeps at most (a table about to outgrow it starts again from the new rows);
#: 0 turns the memo off.
MAX_ROWS = 65_536
#: Bytes all tables keep at most (more: every other table is dropped): bench_sweep's DeepSeek-V3
#: hybrid grid keeps 2,880 and 5,760 layers of ~90 arrays each, 6 MB.
MAX_BYTES = 64 * 2**20

#: The tables, by (stage, varying fields, the bits of the fields of one value, flags); each a
#: list of tables of one skeleton each.
_TABLES: dict[tuple, list["Table"]] = {}


_MISSING = object()


class NotKept(Exception):
    """A result the memo cannot keep (an array of another shape, an object it does not know)."""


def clear() -> None:
    """Drop every table and the keys seen."""
    _TABLES.clear()
    _SEEN.clear()


def key(stage: str, g, reads, columns: list[tuple[str, ...]], flags) -> tuple | None:
    """The key of the tables a group's rows are looked up in: the ``stage``, the names of its
    varying fields (``columns``: the names of each column hashed, in order), the exact bits of
    every other field it read in ``g`` (``reads``), and the group's ``flags``; None where a field
    of one value is of a type the key does not hold."""
    varying = {name for names in columns for name in names}
    constants = []
    for name in sorted(reads):
        if name in varying:
            continue
        value = getattr(g, name, _MISSING)
        bits = ("missing",) if value is _MISSING else _bits(value)
        if bits is None:
            return None
        constants.append((name, bits))
    return (stage, tuple(columns), tuple(constants), flags)


def _bits(value) -> tuple | None:
    """A field of one value as its type and exact bits (-0.0 apart from 0.0, NaNs by their
    bits); None for a value of another kind."""
    kind = type(value)
    if value is None:
        return ("none",)
    if kind is float:
        return ("float", struct.pack("<d", value))
    if kind is bool or kind is int:
        return (kind.__name__, int(value))
    if isinstance(value, np.generic) or (kind is np.ndarray and value.ndim == 0):
        return (np.asarray(value).dtype.str, np.asarray(value).tobytes())
    return None


class _Exact:
    """A number of a result's skeleton, equal to another only with the same type and bits."""

    __slots__ = ("value", "_key")

    def __init__(self, value):
        self.value = value
        self._key = (type(value), _bits(value))

    def __eq__(self, other) -> bool:
        return type(other) is _Exact and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)


def flatten(result, d: int) -> tuple[tuple, list[np.ndarray]]:
    """``result`` of ``d`` rows as its skeleton (hashable: structure, flags, numbers, which
    arrays are one object, their dtypes) and its arrays (each once)."""
    leaves: list[np.ndarray] = []
    index: dict[int, int] = {}

    def walk(value):
        kind = type(value)
        if kind is np.ndarray:
            if value.shape != (d,):
                raise NotKept(f"an array of shape {value.shape}, not ({d},)")
            at = index.get(id(value))
            if at is None:
                at = index[id(value)] = len(leaves)
                leaves.append(value)
            return ("array", at, value.dtype.str)
        if isinstance(value, Result):
            return (kind, tuple(walk(getattr(value, f)) for f in kind._fields))
        if kind is tuple:
            return ("tuple", tuple(walk(v) for v in value))
        if _bits(value) is None:
            raise NotKept(f"a {kind.__name__}")
        return ("value", _Exact(value))

    return walk(result), leaves


def unflatten(skeleton: tuple, leaves: list[np.ndarray]):
    """The result of ``skeleton`` (:func:`flatten`) with ``leaves`` as its arrays."""
    return _build(skeleton, leaves.__getitem__, lazy=False)


def _build(skeleton: tuple, leaf, lazy: bool):
    """The result of ``skeleton`` whose arrays are ``leaf(index)``: each result made at once, or
    (``lazy``) as a :class:`_Gathered` of its kind, whose fields are made when first read."""
    tag = skeleton[0]
    if tag == "array":
        return leaf(skeleton[1])
    if tag == "value":
        return skeleton[1].value
    if tag == "tuple":
        return tuple(_build(s, leaf, lazy) for s in skeleton[1])
    if lazy:
        return _Gathered(tag, skeleton[1], leaf)
    return tag(*[_build(s, leaf, lazy) for s in skeleton[1]])


class _Gathered:
    """A result (of kind ``kind``) whose fields are made when first read (:func:`_build`); only
    read, as the stages after the layer's read it (no :func:`fsdpsim.engine.results.replace`)."""

    __slots__ = ("_kind", "_shapes", "_leaf", "__dict__")

    def __init__(self, kind, shapes, leaf):
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_shapes", dict(zip(kind._fields, shapes)))
        object.__setattr__(self, "_leaf", leaf)

    def __getattr__(self, name: str):
        shapes = object.__getattribute__(self, "_shapes")
        if name not in shapes:
            raise AttributeError(f"{object.__getattribute__(self, '_kind').__name__} has no "
                                 f"field {name!r}")
        value = _build(shapes[name], object.__getattribute__(self, "_leaf"), lazy=True)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"a result is read-only: cannot set {name!r}")


class Table:
    """Rows of one skeleton: their hashes (sorted), their fields' bits (one uint64 array per
    hashed column) and their result arrays, row for row."""

    __slots__ = ("skeleton", "hashes", "columns", "leaves")

    def __init__(self, skeleton: tuple):
        self.skeleton = skeleton
        self.hashes = np.empty(0, dtype=np.uint64)
        self.columns: list[np.ndarray] = []
        self.leaves: list[np.ndarray] = []

    def find(self, hashes: np.ndarray, columns: list[np.ndarray]) -> np.ndarray:
        """Each row's index in the table (rows of ``hashes`` and field bits ``columns``), -1
        where the table does not hold it (a hash it lacks, or one whose fields differ)."""
        size = self.hashes.size
        if not size:
            return np.full(hashes.size, -1, dtype=np.intp)
        at = np.minimum(np.searchsorted(self.hashes, hashes), size - 1)
        held = self.hashes.take(at) == hashes
        for kept, column in zip(self.columns, columns):
            held &= kept.take(at) == column
        return np.where(held, at, -1)

    def add(self, hashes: np.ndarray, columns: list[np.ndarray],
            leaves: list[np.ndarray]) -> None:
        """Rows of ``hashes``, field bits ``columns`` and result arrays ``leaves``, kept (all of
        them in place of the table's where the table would outgrow :data:`MAX_ROWS`)."""
        if self.hashes.size + hashes.size > MAX_ROWS:
            self.hashes, self.columns, self.leaves = hashes[:0], [c[:0] for c in columns], \
                [v[:0] for v in leaves]
            if hashes.size > MAX_ROWS:
                return
        all_hashes = np.concatenate([self.hashes, hashes])
        order = np.argsort(all_hashes, kind="stable")
        self.hashes = all_hashes.take(order)
        self.columns = [np.concatenate([a, b]).take(order)
                        for a, b in zip(self.columns or [c[:0] for c in columns], columns)]
        self.leaves = [np.concatenate([a, b]).take(order)
                       for a, b in zip(self.leaves or [v[:0] for v in leaves], leaves)]

    @property
    def nbytes(self) -> int:
        """The bytes the table keeps."""
        return self.hashes.nbytes + sum(a.nbytes for a in (*self.columns, *self.leaves))

    def result(self, at: np.ndarray):
        """The result of the table's rows ``at``, each array gathered when first read (a
        layer's widths and its kinds' parts are read by no later stage)."""
        leaves = self.leaves
        gathered: dict[int, np.ndarray] = {}

        def leaf(i: int) -> np.ndarray:
            value = gathered.get(i)
            if value is None:
                value = gathered[i] = leaves[i].take(at)
            return value

        return _build(self.skeleton, leaf, lazy=True)


def lookup(table_key: tuple, hashes: np.ndarray, columns: list[np.ndarray]
           ) -> tuple["Table | None", np.ndarray | None]:
    """The table of ``table_key`` that holds most of the rows (``hashes``, field bits
    ``columns``) and their indices in it (-1: not held); (None, None) without one."""
    best, best_at, best_held = None, None, 0
    for table in _TABLES.get(table_key, ()):
        at = table.find(hashes, columns)
        held = int(np.count_nonzero(at >= 0))
        if held > best_held:
            best, best_at, best_held = table, at, held
    return best, best_at


#: Keys seen once (their rows not kept yet, :func:`admit`), and keys whose groups had more
#: distinct rows than the memo looks at (:func:`refuse`: False), at most :data:`MAX_SEEN`.
_SEEN: dict[tuple, bool] = {}
MAX_SEEN = 1024


def admit(table_key: tuple) -> bool:
    """Whether rows of ``table_key`` are worth keeping: the second group of that key and later
    ones (a key seen once is remembered, :func:`seen`): a key whose rows never come back (a
    one-off grid's, a search's candidates) keeps nothing."""
    if seen(table_key):
        return True
    if table_key not in _SEEN:
        if len(_SEEN) >= MAX_SEEN:
            _SEEN.clear()
        _SEEN[table_key] = True
    return False


def seen(table_key: tuple) -> bool:
    """Whether ``table_key`` has tables or was seen before (and not refused)."""
    return table_key in _TABLES or _SEEN.get(table_key, False)


def refuse(table_key: tuple) -> None:
    """``table_key``'s groups have more distinct rows than are worth finding: not looked at
    with the memo's wider share again (:data:`fsdpsim.engine.distinct.MEMO_SHARE`)."""
    _TABLES.pop(table_key, None)
    _SEEN[table_key] = False


def store(table_key: tuple, skeleton: tuple, hashes: np.ndarray, columns: list[np.ndarray],
          leaves: list[np.ndarray]) -> None:
    """Rows evaluated to ``skeleton`` (``hashes``, field bits ``columns``, result arrays
    ``leaves``) into the table of ``table_key`` and that skeleton."""
    tables = _TABLES.setdefault(table_key, [])
    for table in tables:
        if table.skeleton == skeleton:
            break
    else:
        table = Table(skeleton)
        tables.append(table)
    new = table.find(hashes, columns) < 0  # rows the table holds already are not kept twice
    if new.all():
        table.add(hashes, columns, leaves)
    elif new.any():
        table.add(hashes[new], [c[new] for c in columns], [v[new] for v in leaves])
    if sum(t.nbytes for kept in _TABLES.values() for t in kept) > MAX_BYTES:
        _TABLES.clear()  # the oldest grids' rows go first: all but this table
        _TABLES[table_key] = [table] if table.nbytes <= MAX_BYTES else []


def conform(skeleton: tuple, result, d: int) -> list[np.ndarray] | None:
    """The arrays of ``result`` (of ``d`` rows) as leaves of ``skeleton`` (a table's), where it
    has that form but for numbers in place of some of the skeleton's arrays (rows evaluated
    without the rows that made those parts vary: the number on each row); None where it has
    another form (structure, flags, numbers, dtypes, or two values where the skeleton shares
    one array)."""
    leaves: dict[int, np.ndarray] = {}

    def walk(shape, value) -> bool:
        tag = shape[0]
        if tag == "array":
            at, dtype = shape[1], np.dtype(shape[2])
            if type(value) is np.ndarray:
                if value.shape != (d,) or value.dtype != dtype:
                    return False
            elif _bits(value) is not None and value is not None and \
                    np.asarray(value).dtype.kind == dtype.kind:
                value = np.full(d, value, dtype=dtype)
            else:
                return False
            if at in leaves:  # one array in the skeleton: the same values here
                return leaves[at] is value or leaves[at].tobytes() == value.tobytes()
            leaves[at] = value
            return True
        if tag == "value":
            return shape[1] == _Exact(value)
        if tag == "tuple":
            return (type(value) is tuple and len(value) == len(shape[1])
                    and all(walk(s, v) for s, v in zip(shape[1], value)))
        return (type(value) is tag
                and all(walk(s, getattr(value, f)) for s, f in zip(shape[1], tag._fields)))

    if not walk(skeleton, result):
        return None
    return [leaves[i] for i in range(len(leaves))]


def merged(table: Table, at: np.ndarray, miss: np.ndarray, leaves: list[np.ndarray]):
    """The result of every row: the table's rows ``at`` where held, ``leaves`` (one array per
    leaf, on the rows ``miss`` in their order) on the others."""
    out = []
    for kept, fresh in zip(table.leaves, leaves):
        column = kept.take(np.where(miss, 0, at))
        column[miss] = fresh
        out.append(column)
    return unflatten(table.skeleton, out)
