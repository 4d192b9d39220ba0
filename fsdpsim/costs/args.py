"""Argument checks shared by the vectorised cost functions (one clear error per bad value)."""

from __future__ import annotations

import numpy as np

from fsdpsim.costs.compute import any_of, as_array
from fsdpsim.util.errors import ConfigError, suggest


def choice_codes(value, names, what):
    """Map a string (array) or integer-code (array) to integer codes of ``names``.

    Raises :class:`ConfigError` naming every unknown value and the accepted ones.
    """
    arr = np.asarray(value)
    if arr.dtype.kind in "iu":
        bad = arr[(arr < 0) | (arr >= len(names))]
        if bad.size:
            raise ConfigError(f"{what}: codes {sorted(set(bad.tolist()))} are out of range; "
                              f"accepted: 0..{len(names) - 1} for {', '.join(names)}")
        return arr
    if arr.dtype.kind not in "USO":
        raise ConfigError(f"{what}: expected a string or an array of strings, got {value!r}; "
                          f"accepted: {', '.join(names)}")
    codes = np.full(arr.shape, -1)
    for i, name in enumerate(names):
        codes = np.where(arr == name, i, codes)
    if any_of(codes < 0):
        bad = sorted({str(v) for v in np.atleast_1d(arr)[np.atleast_1d(codes) < 0]})
        raise ConfigError(f"{what}: unknown value(s) {', '.join(map(repr, bad))}; accepted: "
                          f"{', '.join(names)}" + suggest(bad[0], names))
    return codes


def check_at_least_one(what, value):
    """``value`` as an array, or a :class:`ConfigError` if any element is below 1."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):  # the common scalar case
        if value >= 1:
            return np.float64(value)
    x = as_array(value)
    if (x < 1).any():
        raise ConfigError(f"{what} must be >= 1, got {sorted(set(x[x < 1].ravel().tolist()))}")
    return x
