"""Helpers every cost function applies to its arguments, numbers and numpy arrays alike: the
one conversion (:func:`as_array`, :func:`as_values`), reductions to one boolean
(:func:`any_of`, :func:`all_of`), and ``np.maximum`` / ``np.minimum`` / ``np.where`` with
numpy's results, bit for bit, at a fraction of their cost where the engine calls them most:
on one configuration's numbers (predict) and on a group of rows of one structure (a sweep's
block, :mod:`fsdpsim.engine.groups`), where most conditions hold on every row or none.
"""

from __future__ import annotations

import math

import numpy as np


def as_array(x) -> np.ndarray:
    """``np.asarray(x, dtype=float)``: the one conversion cost functions apply to inputs; a
    numpy float scalar (one configuration's input, :func:`fsdpsim.engine.prepare`) is kept as
    it is, and a Python number becomes one, which numpy's arithmetic treats as a 0-d array at
    a fraction of its overhead (the same values)."""
    kind = type(x)
    if kind is np.float64:
        return x
    if kind is float or kind is int or kind is bool:
        return np.float64(x)
    return np.asarray(x, dtype=float)


def as_values(x, dtype=None):
    """``np.asarray(x, dtype)`` that keeps one value a numpy scalar (of ``dtype``; a Python
    number becomes one), not a 0-d array: codes and flags of one configuration
    (:func:`fsdpsim.engine.prepare`), on which numpy's operators cost a tenth of their cost on
    a 0-d array; the values are the same. Arrays as ``np.asarray`` returns them."""
    if isinstance(x, np.generic):
        return x if dtype is None else x.astype(dtype)
    if type(x) in _WHERE_SCALARS:
        return np.asarray(x, dtype=dtype)[()]
    return np.asarray(x, dtype=dtype)


def any_of(mask) -> bool:
    """``np.any(mask)``: whether any entry is true (non-zero), as ``np.count_nonzero`` counts
    them, a third of the time of ``np.any`` or ``np.logical_or.reduce`` on the one-
    configuration path, where the engine asks it dozens of times a call."""
    if type(mask) in _SCALAR_BOOLS:
        return bool(mask)
    if type(mask) in NUMBER_TYPES:  # one number (a count): non-zero, NaN included
        return bool(mask != 0)
    if type(mask) is _NDARRAY and mask.size >= _BIT_SELECT_MIN and mask.dtype is _FLOAT64:
        # a long float array (counts of calls per row): the flags of a comparison with 0.0,
        # counted (NaN non-zero, -0.0 zero, as np.count_nonzero has them), 2 instructions an
        # entry where np.count_nonzero of the floats costs 8 (callgrind, 42,358 entries)
        return np.count_nonzero(mask != 0.0) > 0
    return np.count_nonzero(mask) > 0


def all_of(mask) -> bool:
    """``np.all(mask)`` (see :func:`any_of`)."""
    if type(mask) in _SCALAR_BOOLS:
        return bool(mask)
    if type(mask) in NUMBER_TYPES:
        return bool(mask != 0)
    if type(mask) is _NDARRAY and mask.size >= _BIT_SELECT_MIN and mask.dtype is _FLOAT64:
        return not np.count_nonzero(mask == 0.0)  # as any_of
    return np.count_nonzero(mask) == np.size(mask)


def one_flag(mask):
    """``mask`` (booleans), or its one value as a numpy boolean where every entry of a long
    array holds it (a group of rows inside one node, or all across nodes): the terms that read
    it are then numbers, not arrays of one value (the same values). Below
    :data:`_BIT_SELECT_MIN` entries (predict's configuration and its twin) the count would cost
    more than the arithmetic it saves."""
    if type(mask) is _NDARRAY and mask.size >= _BIT_SELECT_MIN:
        held = np.count_nonzero(mask)
        if held == 0 or held == mask.size:
            return np.bool_(held)
    return mask


_SCALAR_BOOLS = frozenset((bool, np.bool_))
#: Types :func:`maximum`, :func:`minimum` and :func:`where` treat as one number (also how
#: the engine's one-configuration path recognises a number: prepare(), predict's row).
NUMBER_TYPES = frozenset((float, int, np.float64))
#: Types :func:`where` picks between without numpy: numbers, integer codes and flags.
_WHERE_SCALARS = NUMBER_TYPES | frozenset((bool, np.bool_, np.int64))


# numpy's ufuncs cost about a microsecond a call on numpy scalars (one configuration's inputs,
# fsdpsim.engine.prepare), five times Python's comparison; arrays go to numpy unchanged.
def maximum(a, b):
    """``np.maximum(a, b)`` (NaN propagates), without numpy's overhead on two numbers, and
    against a number beside a long array on two arrays (:func:`_filled`)."""
    ta, tb = type(a), type(b)
    if ta in NUMBER_TYPES and tb in NUMBER_TYPES:
        return a if a >= b else b if b > a else a + b  # a + b: NaN when either is NaN
    return np.maximum(*_as_two_arrays(a, b, ta, tb))


def minimum(a, b):
    """``np.minimum(a, b)`` (NaN propagates), without numpy's overhead on two numbers, and
    against a number beside a long array on two arrays (:func:`_filled`)."""
    ta, tb = type(a), type(b)
    if ta in NUMBER_TYPES and tb in NUMBER_TYPES:
        return a if a <= b else b if b < a else a + b
    return np.minimum(*_as_two_arrays(a, b, ta, tb))


def _as_two_arrays(a, b, ta, tb) -> tuple:
    """``a`` and ``b`` (of types ``ta``, ``tb``), a float number beside a float64 array of
    :data:`_FILLED_MIN` entries or more given as an array of its own (:func:`_filled`); else
    as they are."""
    if tb in _FLOAT_NUMBERS:
        if ta is _NDARRAY and a.size >= _FILLED_MIN and a.dtype is _FLOAT64:
            return a, _filled(b, a.shape)
    elif ta in _FLOAT_NUMBERS and tb is _NDARRAY and b.size >= _FILLED_MIN \
            and b.dtype is _FLOAT64:
        return _filled(a, b.shape), b
    return a, b


#: From this many entries on, :func:`maximum` and :func:`minimum` compare a float64 array with
#: a number as two arrays: numpy 2's ``maximum``/``minimum`` of an array and a number run an
#: element-by-element loop, 3x the time of two arrays (measured on 4,096-42,358 entries).
_FILLED_MIN = 2048
_FLOAT_NUMBERS = frozenset((float, np.float64))
_NDARRAY = np.ndarray


#: Read-only arrays of one number, by (shape, the number's bits), kept while
#: :func:`share_sides` is on (an engine evaluation compares with the same few numbers often).
_FILLED: dict = {}


def _filled(value, shape) -> np.ndarray:
    """A read-only float64 array of ``shape`` holding ``value`` (a NaN's own bits): in
    :func:`maximum` and :func:`minimum` in place of a float number beside a float64 array of
    :data:`_FILLED_MIN` entries or more, numpy's values bit for bit (NaN, signed zeros), dtype
    and shape."""
    key = (shape, float(value).hex())  # -0.0 apart from 0.0; NaNs are not kept
    arr = _FILLED.get(key)
    if arr is None:
        arr = np.full(shape, value, dtype=np.float64)
        arr.flags.writeable = False
        if _SIDES_SHARED and value == value:
            if len(_FILLED) >= 64:
                _FILLED.clear()
            _FILLED[key] = arr
    return arr


def filled_ids() -> set[int]:
    """The ids of the read-only arrays of one number kept now (:func:`_filled`), which a caller
    that hands arrays out copies first (the engine's outputs)."""
    return {id(arr) for arr in _FILLED.values()}


def where(cond, a, b):
    """``np.where(cond, a, b)`` of numbers, without numpy's overhead when ``cond`` is one
    boolean and ``a`` and ``b`` are numbers, codes or flags (then one of them, not a 0-d array)
    or float64 arrays (then a copy of one, :func:`_new_side`),
    without its per-element work when ``cond`` picks one float side everywhere (one boolean, or
    a mask that holds everywhere or nowhere, or one float side given twice: :func:`_one_side`),
    and without its per-element branch on a long boolean mask of floats (:func:`_bit_select`)."""
    kind = type(cond)
    if kind is np.ndarray:
        if a is b and _is_float(a):  # one side: its values on every entry, whatever cond holds
            return _one_side(a, cond.shape, a, b)
        if cond.dtype is _BOOL and cond.size >= _BIT_SELECT_MIN:
            held = np.count_nonzero(cond)
            if held == cond.size or not held:  # one side on every row (a group's branch)
                if _is_float(a) and _is_float(b):
                    return _one_side(a if held else b, cond.shape, a, b)
            else:
                bits_a, bits_b = _float_bits(a), _float_bits(b)
                if bits_a is not None and bits_b is not None:
                    return _bit_select(cond, bits_a, bits_b)
    elif kind in _SCALAR_BOOLS:
        if type(a) in _WHERE_SCALARS and type(b) in _WHERE_SCALARS:
            return a if cond else b
        if _is_float(a) and _is_float(b):
            if _is_long(a) or _is_long(b):
                return _one_side(a if cond else b, (), a, b)
            return _new_side(a if cond else b, broadcast_shape(_shape(a), _shape(b)))
    return np.where(cond, a, b)


def _new_side(side, shape):
    """``np.where(cond, a, b)`` of one boolean ``cond`` on float64 ``a`` and ``b`` (numbers or
    short arrays, the configuration and its twin of predict) of broadcast shape ``shape``:
    ``side`` (``a`` or ``b``) in a new float64 array, as ``np.where`` returns it, at a fraction
    of its cost."""
    if type(side) is np.ndarray and side.shape == shape:
        return side.copy()
    out = np.empty(shape)
    out[...] = side
    return out


_BOOL, _FLOAT64 = np.dtype(bool), np.dtype(np.float64)


def _is_long(v) -> bool:
    """Whether ``v`` is an array of :data:`_BIT_SELECT_MIN` entries or more (shorter ones:
    ``np.where`` is as quick; only such an array may come back from :func:`where` itself,
    :func:`share_sides`)."""
    return type(v) is np.ndarray and v.size >= _BIT_SELECT_MIN


may_be_shared = _is_long


def _is_float(v) -> bool:
    """Whether ``v`` is a float64 array or a float number (what :func:`_one_side` returns as
    ``np.where`` would: float64)."""
    t = type(v)
    return t is float or t is np.float64 or (t is np.ndarray and v.dtype is _FLOAT64)


def _one_side(side, cond_shape, a, b):
    """``np.where(cond, a, b)`` where ``cond`` (of shape ``cond_shape``) picks ``side`` (``a`` or
    ``b``, a float64 array or number) on every entry: a new float64 array of the broadcast shape
    with its values, or the number itself where all three are one value. numpy's ``where``
    does per-element work for that (a group of rows of one structure takes one branch of most
    of the engine's conditions)."""
    if type(side) is np.ndarray:
        shape = side.shape
        if ((cond_shape == shape or not cond_shape)
                and (type(a) is not np.ndarray or a.shape == shape)
                and (type(b) is not np.ndarray or b.shape == shape)):
            return side if _SIDES_SHARED else side.copy()
    shape = broadcast_shape(cond_shape, _shape(a), _shape(b))
    if type(side) is np.ndarray:
        if side.shape == shape:
            return side if _SIDES_SHARED else side.copy()
        return np.broadcast_to(side, shape).copy()
    if not shape:
        return np.float64(side)
    # inside the engine's evaluation, one read-only array per number and long shape
    # (:func:`_filled`: a group's conditions pick 0.0 on every row dozens of times)
    if _SIDES_SHARED and math.prod(shape) >= _BIT_SELECT_MIN:
        return _filled(side, shape)
    return np.full(shape, side)


def _shape(v) -> tuple:
    """``np.shape(v)``, read off an array directly; ``()`` for a number without asking numpy."""
    kind = type(v)
    if kind is np.ndarray:
        return v.shape
    return () if kind in NUMBER_TYPES else np.shape(v)


def broadcast_shape(*shapes) -> tuple:
    """``np.broadcast_shapes(*shapes)``, without its cost (microseconds a call) where every
    shape is one value's ``()`` or the same as the others."""
    full = ()
    for shape in shapes:
        if shape and shape != full:
            if full:
                return np.broadcast_shapes(*shapes)
            full = shape
    return full


#: Whether :func:`where` may return the side it picks everywhere itself (:func:`share_sides`).
_SIDES_SHARED = False


def share_sides(on: bool) -> bool:
    """From now on (``on``) :func:`where` returns the side its condition picks on every entry
    itself, not a copy of it (:func:`_one_side`), or again a copy; returns the setting before.
    For a caller that changes no array in place and hands none of its results out as its own
    inputs (the engine's evaluation, :func:`fsdpsim.engine._evaluate`), which then restores
    the setting: a select of many rows then costs nothing."""
    global _SIDES_SHARED
    before, _SIDES_SHARED = _SIDES_SHARED, bool(on)
    _MASK_OF[:] = None, None  # the remembered masks and filled arrays hold only inside one
    _MASKS.clear()  # such evaluation
    _FILLED.clear()
    return before


#: From this many entries on, :func:`where` selects float64s by their bits: numpy's ``where``
#: branches per element, which costs 5-10x an arithmetic pass on a mask that mixes rows
#: (a sweep's grid); the bitwise select costs three.
_BIT_SELECT_MIN = 64


def _float_bits(v):
    """``v``'s float64 bit patterns as int64 (an array as a view), or None where ``v`` is not a
    float64 array or a number (then :func:`where` leaves the dtype to ``np.where``)."""
    t = type(v)
    if t is np.ndarray:
        return v.view(np.int64) if v.dtype is _FLOAT64 else None
    if t is float or t is np.float64:
        return np.float64(v).view(np.int64)
    return None


def _bit_select(cond, bits_a, bits_b):
    """``np.where(cond, a, b)`` from the bits of ``a`` and ``b`` (int64), without a branch:
    ``((a ^ b) & mask) ^ b``, with ``mask`` all ones where ``cond`` holds and 0 elsewhere
    (:func:`_bit_mask`), is ``a``'s bits where ``cond`` holds and ``b``'s elsewhere, so every
    value (NaN, -0.0, inf) comes back exactly as ``np.where`` returns it. Where ``b`` (or
    ``a``) is +0.0, all of whose bits are 0, that is ``a & mask`` (``b * ~cond``)."""
    if type(bits_b) is np.int64 and not bits_b:
        return np.bitwise_and(bits_a, _bit_mask(cond)).view(np.float64)
    if type(bits_a) is np.int64 and not bits_a:
        return np.multiply(bits_b, ~cond).view(np.float64)
    diff = np.bitwise_xor(bits_a, bits_b)
    if broadcast_shape(diff.shape, cond.shape) == diff.shape:
        np.bitwise_and(diff, _bit_mask(cond), out=diff)
    else:
        diff = np.bitwise_and(diff, _bit_mask(cond))
    diff ^= bits_b
    return diff.view(np.float64)


def read_only(value, shape):
    """``value`` as a read-only float array of ``shape``: a view (no copies on the hot path of a
    sweep), or for a small result a copy, which is quicker to make than a broadcast view; one
    configuration's value (``shape`` ``()``) as a numpy float scalar (immutable as well)."""
    if not shape:
        return np.float64(value)
    arr = np.asarray(value, dtype=float)
    if arr.shape == shape:
        arr = arr.view()
    elif math.prod(shape) > SMALL_BROADCAST:
        return np.broadcast_to(arr, shape)
    else:
        full = np.empty(shape)
        full[...] = arr
        arr = full
    arr.flags.writeable = False
    return arr


#: Results up to this many entries are broadcast by copying (see :func:`read_only`).
SMALL_BROADCAST = 1024

#: The condition :func:`_bit_mask` last turned into a mask, and that mask (kept while
#: :func:`share_sides` is on: the engine, which changes no array in place, selects several
#: terms on one condition in a row, such as the binding memory moment's).
_MASK_OF: list = [None, None]
#: The masks of earlier conditions of the same entries (:func:`_bit_mask`), by a few probe
#: entries, while :func:`share_sides` is on: the engine tests one condition anew in several
#: stages (``pp > 1``, ``recompute == 2``; on 65,536 rows of bench_sweep's hybrid Mixtral mix,
#: 34 distinct conditions for 127 masks). At most :data:`_MASKS_KEPT` of them.
_MASKS: dict[tuple, list] = {}
_MASKS_KEPT = 8


def _bit_mask(cond):
    """``cond`` (a boolean array) as int64 masks: all 64 bits set where it holds, 0 elsewhere
    (AVX2 ands 64-bit integers four at a time; it has no 64-bit multiply); the mask of an
    earlier condition with the same entries where one is kept (:func:`_same_bools`)."""
    if _MASK_OF[0] is cond:
        return _MASK_OF[1]
    key = None
    if _SIDES_SHARED and cond.strides == (1,):  # a contiguous row of flags
        size = cond.size
        key = (size, cond[0], cond[-1], cond[size >> 1], cond[size >> 2], cond[size >> 3],
               cond[(3 * size) >> 2])
        for earlier, mask in _MASKS.get(key, ()):
            if _same_bools(earlier, cond):
                _MASK_OF[:] = cond, mask
                return mask
    # negated as bytes (32 a SIMD instruction), then widened: 2/3 of the instructions of
    # negating the widened entries (callgrind, 42,358 entries)
    mask = np.negative(cond.view(np.int8)).astype(np.int64)
    if _SIDES_SHARED:
        _MASK_OF[:] = cond, mask
        if key is not None:
            if sum(map(len, _MASKS.values())) >= _MASKS_KEPT:
                _MASKS.clear()
            _MASKS.setdefault(key, []).append((cond, mask))
    return mask


def _same_bools(a, b) -> bool:
    """Whether the contiguous boolean rows ``a`` and ``b`` of one length hold the same entries,
    compared eight at a time as 64-bit words (a sixth of the instructions of making a mask,
    a fifth of comparing entry by entry: callgrind, 65,533 entries)."""
    whole = a.size & ~7
    return (not np.count_nonzero(a[:whole].view(np.uint64) != b[:whole].view(np.uint64))
            and not np.count_nonzero(a[whole:] != b[whole:]))

