"""Checks of fsdpsim's analytical model against real torch modules and runs.

This is the only part of fsdpsim that uses torch, and it imports torch lazily: importing
``fsdpsim.measured.harness`` does not import torch; using :func:`build_reference_model` does, and so
do the functions of :mod:`fsdpsim.measured.harness.fsdp_runs` (spawned gloo runs, collective and
FLOP counting) when called.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_reference_model", "launch", "comm_counter", "count_flops", "run_cases",
           "RunCase"]
_FSDP_RUNS = ("launch", "comm_counter", "count_flops", "run_cases", "RunCase")


def __getattr__(name: str) -> Any:
    if name == "build_reference_model":
        from fsdpsim.measured.harness.reference import build_reference_model

        return build_reference_model
    if name in _FSDP_RUNS:
        from fsdpsim.measured.harness import fsdp_runs

        return getattr(fsdp_runs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Fake-tensor FSDP2 memory at real model sizes (fsdpsim.measured.harness.fake_memory); chained so
# the lookups above keep working.
_FAKE_MEMORY = ("MemoryCase", "measure_memory", "fsdpsim_memory", "format_table")
__all__ += list(_FAKE_MEMORY)
_getattr_before_fake_memory = __getattr__


def __getattr__(name: str) -> Any:  # noqa: F811
    if name in _FAKE_MEMORY:
        from fsdpsim.measured.harness import fake_memory, fake_memory_report

        return getattr(fake_memory_report if name == "format_table" else fake_memory, name)
    return _getattr_before_fake_memory(name)
