"""Plain text and records every layer may produce: wrapped lines and flattened mappings."""

from __future__ import annotations

import re
from typing import Any, Mapping

#: Widest line of the table output (terminals, the README's examples); only a single word
#: longer than this (a URL) is left as it is.
WIDTH = 100


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping → one level with ``a.b`` keys (for CSV rows)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        elif isinstance(value, (list, tuple)):
            out[name] = "; ".join(str(v) for v in value)
        else:
            out[name] = value
    return out


#: The space between a number and its unit (``10 %``, ``±10 %``, ``2.44 s``, ``4.9 TB``),
#: where a wrapped line must not break.
_UNIT_SPACE = re.compile(r"(?<=\d) (?=(?:%|GiB|GB/s|GB|TB/s|TB|Gb/s|ms|s|W|kWh|MWh|GWh|"
                         r"TFLOP/s)(?![\w/]))")
_NO_BREAK = "\u00a0"


def wrap(text: str, indent: str = "", hanging: str | None = None, width: int = WIDTH) -> str:
    """``text`` wrapped at ``width`` columns: the first line after ``indent``, the others after
    ``hanging`` (default: ``indent``). Words are never split (a URL stays whole), nor a number
    from its unit (``10 %``)."""
    import textwrap

    if len(indent) + len(text) <= width and "\n" not in text:
        return indent + text
    kept = _UNIT_SPACE.sub(_NO_BREAK, text)
    return textwrap.fill(kept, width, initial_indent=indent,
                         subsequent_indent=indent if hanging is None else hanging,
                         break_long_words=False, break_on_hyphens=False).replace(_NO_BREAK, " ")
