"""A per-user disk cache of checked built-in catalog entries, so that a command does not parse
and check the same TOML files again in every process.

An entry is the pickled result of ``build()``, stored under a name derived from a hash of the
bytes of every data file it was built from and of the size and modification time of every
source file of the code that built it (and of the Python version): a changed catalog file or
changed code gives another name, so a stale entry is never read. Any failure to read or write
the cache (no home folder, a read-only disk, a damaged file) falls back to ``build()``; a
``build()`` that raises caches nothing.

The folder is ``FSDPSIM_CACHE_DIR``, else ``$XDG_CACHE_HOME/fsdpsim``, else
``~/.cache/fsdpsim``; ``FSDPSIM_CACHE_DIR`` set to an empty value turns the cache off.
Python's own ``__pycache__`` is the model (a cache keyed by what it was made from).
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Callable, Iterable, TypeVar

try:  # hashlib's import builds every OpenSSL constructor (milliseconds); blake2 is built in
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import blake2b

T = TypeVar("T")

#: Bumped when the layout of cached entries changes in a way the code key does not see.
FORMAT = 1


def cache_dir() -> Path | None:
    """The cache folder, or None when ``FSDPSIM_CACHE_DIR`` is set empty (cache off)."""
    given = os.environ.get("FSDPSIM_CACHE_DIR")
    if given is not None:
        return Path(given) if given.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fsdpsim"


def _key(data_files: Iterable[Path], code_dirs: Iterable[Path]) -> str:
    h = blake2b(digest_size=16)
    h.update(f"{FORMAT} {sys.version}".encode())
    for path in data_files:
        h.update(str(path).encode() + b"\0")
        h.update(Path(path).read_bytes())
    for folder in code_dirs:
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.name.endswith(".py"):
                st = entry.stat()
                h.update(f"{entry.path} {st.st_size} {st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def cached(tag: str, data_files: list[Path], code_dirs: list[Path], build: Callable[[], T]) -> T:
    """``build()``, read from the cache when an entry for these data files and this code exists,
    else computed and stored (best effort)."""
    folder = cache_dir()
    if folder is None:
        return build()
    # one entry per tag and checkout: a new key replaces this checkout's older entry only
    where = blake2b(str(Path(__file__).resolve()).encode(), digest_size=4).hexdigest()
    prefix = f"{tag}-{where}-"
    try:
        path = folder / f"{prefix}{_key(data_files, code_dirs)}.pickle"
    except OSError:
        return build()
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)
    except Exception:  # absent, unreadable or damaged: build it again
        pass
    value = build()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob(f"{prefix}*.pickle"):
            old.unlink(missing_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp, path)
    except Exception:
        pass
    return value


__all__ = ["cached", "cache_dir"]
