"""Unit conversions used at the edges (catalog loader, CLI, plots).

Inside the library every quantity is an SI float whose name carries the unit (``_bytes``,
``_s``, ``_flops_per_s``, ``_bytes_per_s``). Datasheet units (TB/s, GiB, Gb/s, TFLOP/s) appear
only in catalog keys and display columns, and are converted here, once.
"""

from __future__ import annotations

GIB_BYTES = 2.0**30
GB_BYTES = 1e9
TB_PER_S_BYTES_PER_S = 1e12
GB_PER_S_BYTES_PER_S = 1e9
GBIT_PER_S_BYTES_PER_S = 1e9 / 8.0
TFLOPS_FLOPS_PER_S = 1e12
US_S = 1e-6
MS_S = 1e-3
HOUR_S = 3600.0

#: Bytes per element of each precision name fsdpsim accepts.
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5, "mxfp8": 1,
               "fp8-block": 1, "nvfp4": 0.5}


def gib(x_bytes: float) -> float:
    """Bytes to GiB (2**30 bytes) for display."""
    return x_bytes / GIB_BYTES


def million_tokens_text(tokens: float) -> str:
    """A token count in millions with one decimal and thousands separators: ``4.2M``,
    ``2,147.5M`` [-]."""
    return f"{tokens / 1e6:,.1f}M"


def gbit_per_s_to_bytes_per_s(gbit_per_s: float) -> float:
    """Network line rate in Gb/s (decimal, one direction) to bytes/s."""
    return gbit_per_s * GBIT_PER_S_BYTES_PER_S


def bytes_per_s_to_gbit_per_s(bytes_per_s: float) -> float:
    """Bytes/s to Gb/s (decimal) for display."""
    return bytes_per_s / GBIT_PER_S_BYTES_PER_S


def parse_quantity(text: str, *, what: str) -> float:
    """Parse ``"7b"``, ``"1.5t"``, ``"125m"``, ``"15t"``, ``"4096"``, ``"4k"`` into a float.

    Suffixes are decimal (k=1e3, m=1e6, b=g=1e9, t=1e12). ``what`` names the option in errors.
    Read by :func:`fsdpsim.util.numbers.read_number` (finite, ASCII, at most 1e30); fsdpsim's own
    options use the rule of each option (:mod:`fsdpsim.util.numbers`).
    """
    from fsdpsim.util.numbers import DECIMAL, Rule, read_number

    return read_number(text, what, Rule(-1e30, 1e30, suffixes=DECIMAL))
