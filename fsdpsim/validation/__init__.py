"""Checks of fsdpsim's analytical model against real torch modules and runs.

This is the only part of fsdpsim that uses torch, and it imports torch lazily: importing
``fsdpsim.validation`` does not import torch; using :func:`build_reference_model` does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_reference_model"]


def __getattr__(name: str) -> Any:
    if name == "build_reference_model":
        from fsdpsim.validation.reference import build_reference_model

        return build_reference_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
