"""Rendering: tables, JSON and CSV for the CLI. Human units appear here and nowhere deeper."""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping, Sequence

from fsdpsim.util.text import WIDTH, flatten, wrap
from fsdpsim.util.units import GIB_BYTES

FORMATS = ("table", "json", "csv")


def _jsonable(value: Any) -> Any:
    import numpy as np  # not at start-up: `fsdpsim --version` needs no numpy

    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def to_json(data: Any) -> str:
    """JSON text; non-finite floats become null, numpy scalars plain numbers."""
    return json.dumps(_jsonable(data), indent=2)


def table(rows: Sequence[Mapping[str, Any]], columns: Iterable[str] | None = None) -> str:
    """Aligned plain-text table of ``rows``."""
    if not rows:
        return "(no rows)"
    import pandas as pd  # imported here, not at start-up (benchmarks/bench_startup.py)

    frame = pd.DataFrame(list(rows), columns=list(columns) if columns else None)
    frame = frame.astype(object).where(frame.notna(), "")
    return frame.to_string(index=False)


def narrow_table(rows: Sequence[Mapping[str, Any]], rename: Mapping[str, str] | None = None,
                 cell: int = 22, width: int = WIDTH) -> str:
    """:func:`table` for a screen: headers renamed (``rename``), text cells longer than ``cell``
    shortened with "…", and columns left out from the right while the table is wider than
    ``width`` (named in a last line; CSV and JSON keep every column and every character)."""
    rename = rename or {}

    def short(v: Any) -> Any:
        return v[:cell - 1] + "…" if isinstance(v, str) and len(v) > cell else v

    shown = [{rename.get(k, k): short(v) for k, v in r.items()} for r in rows]
    columns = list(shown[0]) if shown else []
    left_out: list[str] = []
    text = table(shown, columns)
    while len(columns) > 2 and max(len(line) for line in text.split("\n")) > width:
        left_out.insert(0, columns.pop())
        text = table(shown, columns)
    if left_out:
        text += "\n" + wrap(f"(left out at {width} columns, see --format csv: "
                            f"{', '.join(left_out)})", hanging=" ", width=width)
    return text


def csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    import pandas as pd

    return pd.DataFrame([flatten(r) for r in rows]).to_csv(index=False)


def note_lines(notes: Iterable[str], width: int = WIDTH) -> list[str]:
    """``  - note`` lines, each wrapped at ``width`` with a hanging indent under its text."""
    return [wrap(str(n), "  - ", "    ", width) for n in notes]


def key_values(pairs: Sequence[tuple[str, Any]], indent: int = 2, width: int = WIDTH) -> str:
    """Aligned ``key  value`` lines; a value longer than the line wraps under its own first
    character (or four spaces in from the key when the keys are too wide for that)."""
    keys = max((len(k) for k, _ in pairs), default=0)
    column = indent + keys + 2
    hanging = " " * (column if column <= width // 2 else indent + 4)
    return "\n".join(wrap(str(v), f"{' ' * indent}{k:<{keys}}  ", hanging, width)
                     for k, v in pairs)


def gib(x: float) -> str:
    return f"{x / GIB_BYTES:,.2f} GiB"


def seconds(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    if x >= 1:
        return f"{x:,.3f} s"
    return f"{x * 1e3:,.2f} ms"


def raw_entry_lines(data: Mapping[str, Any], indent: int = 2) -> list[str]:
    """A catalog entry as written (datasheet units), subtables indented."""
    lines: list[str] = []
    scalars = [(k, v) for k, v in data.items() if not isinstance(v, Mapping)]
    if scalars:
        lines.append(key_values([(k, _show(v)) for k, v in scalars], indent))
    for key, value in data.items():
        if isinstance(value, Mapping):
            lines.append(f"{' ' * indent}[{key}]")
            lines.extend(raw_entry_lines(value, indent + 2))
    return lines


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)
