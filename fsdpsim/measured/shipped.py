"""The measurement files that ship with fsdpsim, found by name from any folder.

In a source tree they are ``validation/data/*.csv``; an installed wheel carries the same files
as the data package ``fsdpsim.validation_data``. ``fsdpsim validate hybrid_calibration.csv``
(or ``validation/data/hybrid_calibration.csv``) therefore works wherever it is run; a path that
exists always wins.
"""

from __future__ import annotations

import os
from pathlib import Path

from fsdpsim.util.files import package_data_dir

#: The folder of the shipped files, relative to a source checkout's root.
SOURCE_FOLDER = Path("validation") / "data"


def data_dir() -> Path:
    """The folder of the shipped measurement files (a source checkout's own wins, as the
    catalog's does: :func:`fsdpsim.hardware.catalog.builtin_dir`)."""
    return package_data_dir(SOURCE_FOLDER, "fsdpsim.validation_data")


def names() -> list[str]:
    """The shipped measurement files' names, sorted."""
    folder = data_dir()
    return sorted(p.name for p in folder.glob("*.csv")) if folder.is_dir() else []


def resolve(path: str | os.PathLike) -> str | os.PathLike:
    """``path`` itself when it exists (or is not a plain name of a shipped file); else the
    shipped file it names: a bare file name, or ``validation/data/NAME`` given from another
    folder."""
    text = os.fspath(path)
    given = Path(text)
    if not text.strip() or "\0" in text or given.exists():
        return path
    parts = given.parts
    if len(parts) == 1 or tuple(parts[-3:-1]) == SOURCE_FOLDER.parts:
        shipped = data_dir() / given.name
        if shipped.is_file():
            return shipped
    return path


__all__ = ["data_dir", "names", "resolve"]
