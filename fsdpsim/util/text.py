"""Plain text and records every layer may produce: wrapped lines and flattened mappings."""

from __future__ import annotations

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


def wrap(text: str, indent: str = "", hanging: str | None = None, width: int = WIDTH) -> str:
    """``text`` wrapped at ``width`` columns: the first line after ``indent``, the others after
    ``hanging`` (default: ``indent``). Words are never split (a URL stays whole)."""
    import textwrap

    if len(indent) + len(text) <= width and "\n" not in text:
        return indent + text
    return textwrap.fill(text, width, initial_indent=indent,
                         subsequent_indent=indent if hanging is None else hanging,
                         break_long_words=False, break_on_hyphens=False)
