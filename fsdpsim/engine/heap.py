"""Keep freed temporaries on the heap while the engine evaluates large blocks.

One block of :data:`fsdpsim.engine.BLOCK_ROWS` configurations allocates and frees about 1,500
float arrays of 512 KiB. With glibc's default tuning most of them go back to the kernel when
freed (the heap's top is trimmed past 128 KiB, or the array is ``mmap``-ed on its own), so the
next array faults its pages in again: measured on the engine benchmark
(``benchmarks/bench_sweep.py``), 15,000 page faults per block and 40 % of the CPU time in the
kernel. :func:`keep_freed_memory` raises glibc's ``mmap`` and trim thresholds once per process
(``mallopt``, glibc ``malloc/malloc.c``; the ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` environment variables do the same at start-up), so freed blocks are
reused instead: the process keeps up to :data:`TRIM_THRESHOLD_BYTES` of free heap. No number
the engine computes changes. Elsewhere than glibc, or with ``FSDPSIM_KEEP_HEAP=0`` in the
environment, it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: Arrays below this size come from the heap, not from a private ``mmap`` each (glibc's
#: largest allowed value on 64-bit, ``HEAP_MAX_SIZE / 2``).
MMAP_THRESHOLD_BYTES = 32 << 20
#: Free memory at the top of the heap kept for reuse before it is returned to the kernel.
TRIM_THRESHOLD_BYTES = 128 << 20
#: ``mallopt`` parameters (glibc ``malloc.h``).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3

_tuned: bool | None = None  # None: not tried yet


def keep_freed_memory() -> bool:
    """Tune glibc's allocator once per process for large blocks (module docstring); True if it
    was tuned (now or before)."""
    global _tuned
    if _tuned is None:
        _tuned = _tune()
    return _tuned


def _tune() -> bool:
    """The ``mallopt`` calls of :func:`keep_freed_memory`; False where they do not apply."""
    if not sys.platform.startswith("linux") or os.environ.get("FSDPSIM_KEEP_HEAP") == "0":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library symbols to look up, or no mallopt
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
