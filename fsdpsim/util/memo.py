"""Results remembered per object that cannot be hashed (frozen dataclasses holding mapping
proxies: an Accelerator, a System), keyed by the object's identity."""

from __future__ import annotations

from typing import Any, Callable, Hashable, TypeVar

T = TypeVar("T")

#: Entries a table holds before it is emptied (a process meets a few systems, not hundreds).
MAX_ENTRIES = 256


def by_identity(table: dict, obj: Any, rest: tuple[Hashable, ...],
                build: Callable[[], T]) -> T:
    """``build()`` remembered in ``table`` under ``(id(obj), *rest)``. The object is kept
    beside its result, so its id cannot be reused by another object while the entry lives;
    an entry whose id now names another object is built afresh."""
    key = (id(obj), *rest)
    known = table.get(key)
    if known is None or known[0] is not obj:
        if len(table) >= MAX_ENTRIES:
            table.clear()
        known = table[key] = (obj, build())
    return known[1]
