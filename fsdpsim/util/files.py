"""The one reader of user files: ``config.json``, catalog and grid TOML, measurement CSVs and
sweep rows for plots.

Every read is capped (``/dev/zero`` or a multi-gigabyte file given by mistake is refused after
the cap, not read until the kernel kills the process), and every way a path can fail — missing,
a folder, unreadable, a name too long for the file system, a NUL byte — is one
:class:`~fsdpsim.util.errors.ConfigError` naming the file and what was expected.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import Any

from fsdpsim.util.errors import SHOWN_PATH_CHARS, ConfigError, shown


def _name(path: object) -> str:
    return shown(str(path), SHOWN_PATH_CHARS)

MIB = 2**20
#: config.json, catalog and grid TOML: real ones are a few KB.
MAX_TEXT_BYTES = 16 * MIB
#: Measurement CSVs (the published tables are tens of KB).
MAX_TABLE_BYTES = 256 * MIB
#: Sweep rows read back for a figure (a million CSV rows are about 1.5 GB).
MAX_ROWS_BYTES = 4096 * MIB


def _size(limit: int) -> str:
    return f"{limit / MIB:,.0f} MiB"


def _path(path: str | os.PathLike, what: str) -> Path:
    text = os.fspath(path)
    if not str(text).strip():
        raise ConfigError(f"{what}: an empty file name; give a path")
    if "\0" in str(text):
        raise ConfigError(f"{what} {_name(text)}: a file name cannot contain a NUL byte")
    return Path(text)


def _kind(mode: int) -> str:
    return ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")


def open_capped(path: str | os.PathLike, what: str, max_bytes: int,
                regular_only: bool = False) -> Path | io.BytesIO:
    """A regular file's path once its size is checked, or the bytes of anything else (a pipe,
    a device, ``/dev/stdin``) read up to ``max_bytes``: what pandas readers take.
    ``regular_only``: anything but a regular file is refused before it is opened (opening a
    FIFO waits for a writer; a config file is never one)."""
    p = _path(path, what)
    try:
        info = p.stat()
        if stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"{what} {_name(p)} is a folder; give a file")
        if regular_only and not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what} {_name(p)} is {_kind(info.st_mode)}; give a regular file")
        if stat.S_ISREG(info.st_mode):
            if info.st_size > max_bytes:
                raise ConfigError(f"{what} {_name(p)} is {info.st_size / MIB:,.1f} MiB, "
                                  f"more than the {_size(max_bytes)} accepted; is it the right "
                                  "file?")
            with p.open("rb"):  # readable?
                pass
            return p
        return io.BytesIO(_read_capped(p, what, max_bytes))
    except ConfigError:
        raise
    except FileNotFoundError:
        raise ConfigError(f"{what} {_name(p)} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{what} {_name(p)} cannot be read: "
                          f"{exc.strerror or type(exc).__name__}") from None


def _read_capped(p: Path, what: str, max_bytes: int) -> bytes:
    with p.open("rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ConfigError(f"{what} {_name(p)} holds more than the {_size(max_bytes)} "
                          "accepted; is it the right file?")
    return data


def read_bytes(path: str | os.PathLike, what: str, max_bytes: int = MAX_TEXT_BYTES,
               regular_only: bool = False) -> bytes:
    """The bytes of a file, at most ``max_bytes``; one clear error for anything else."""
    source = open_capped(path, what, max_bytes, regular_only)
    if isinstance(source, io.BytesIO):
        return source.getvalue()
    try:
        return _read_capped(source, what, max_bytes)
    except OSError as exc:
        raise ConfigError(f"{what} {_name(source)} cannot be read: "
                          f"{exc.strerror or type(exc).__name__}") from None


def read_text(path: str | os.PathLike, what: str, max_bytes: int = MAX_TEXT_BYTES,
              expected: str = "UTF-8 text", regular_only: bool = False) -> str:
    """The UTF-8 text of a file (a byte-order mark is dropped), at most ``max_bytes``."""
    data = read_bytes(path, what, max_bytes, regular_only)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{str(path)[:SHOWN_PATH_CHARS]}: not UTF-8 text (byte {exc.start}); "
                          f"{expected} is expected") from None


def read_toml(path: str | os.PathLike, what: str,
              max_bytes: int = MAX_TEXT_BYTES) -> dict[str, Any]:
    """A TOML file as a dict; malformed TOML (with its line), nesting too deep for the parser
    and integers too long to convert are one error naming the file."""
    import tomllib

    text = read_text(path, what, max_bytes, expected="UTF-8 TOML")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: malformed TOML: nested too deeply to read") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise ConfigError(f"{path}: malformed TOML: {str(exc).split(';')[0]}") from None


def looks_like_file(text: str) -> bool:
    """Whether ``text`` names an existing path; False for names no file system accepts (too
    long, a NUL byte) instead of an OSError."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


#: The source checkout's root (the folder that holds ``fsdpsim/``).
SOURCE_ROOT = Path(__file__).resolve().parents[2]


def package_data_dir(source_folder: str | os.PathLike, package: str) -> Path:
    """A data folder shipped with fsdpsim: ``source_folder`` (relative to the source checkout's
    root) when this code runs from a checkout that has it, else the installed data package
    ``package`` (how a wheel carries it). The checkout's own wins: an editable install of
    another checkout (a git worktree) would otherwise pair this checkout's code with that
    checkout's data."""
    from importlib import resources

    source_tree = SOURCE_ROOT / source_folder
    if (source_tree / "__init__.py").is_file():
        return source_tree
    try:
        return Path(str(resources.files(package)))
    except ModuleNotFoundError:
        return source_tree


__all__ = ["package_data_dir", "open_capped", "read_bytes", "read_text", "read_toml",
           "looks_like_file", "MAX_TEXT_BYTES", "MAX_TABLE_BYTES", "MAX_ROWS_BYTES"]
