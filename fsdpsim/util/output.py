"""The one writer of command output: text to stdout or to ``--output FILE``, in chunks.

Every command writes through :func:`echo` or :func:`write_chunks`, which flush as they go, so a
failure surfaces while the command runs, as one of two exceptions that
:func:`fsdpsim.cli.main` turns into an exit status:

* :class:`OutputClosed`: the reader went away (``fsdpsim sweep ... | head``). Not an error: the
  rest of the output is dropped quietly and the exit status is 0.
* :class:`OutputError`: the output cannot be written (``> /dev/full``, a full disk, a read-only
  file): one line on stderr naming the output and the reason, exit status 2, as for bad input.

Commands that write a file (``--output``) call :func:`check_output_path` before they work, so a
file that cannot be written is refused at once, not after the work, and :func:`cannot_write`
for a failure while writing: every command reports an unwritable output the same way.

Big outputs (``fsdpsim sweep --format csv|json``) are generated and written chunk by chunk:
memory stays flat however many rows are written.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator

#: Rows formatted per chunk by the streaming writers (a few MB of text).
ROWS_PER_CHUNK = 8192


class OutputClosed(Exception):
    """The reader of stdout closed the pipe."""


class OutputError(Exception):
    """The output cannot be written; the message names it and the reason."""


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so that Python's final flush of what is still buffered cannot
    fail again (it would print "Exception ignored ..." and exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (tests capture stdout)
        pass


def _failed(exc: OSError, target: str) -> Exception:
    if isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE:
        if target == "standard output":
            _silence_stdout()
        return OutputClosed()
    if target == "standard output":
        _silence_stdout()
    reason = exc.strerror or str(exc) or type(exc).__name__
    return OutputError(f"cannot write {target}: {reason}")


def cannot_write(path: str | os.PathLike, exc: OSError, option: str = "--output"
                 ) -> OutputError:
    """The one error for a file that failed while being written (every command's)."""
    return OutputError(f"cannot write {option} {_shown_path(path)}: "
                       f"{exc.strerror or str(exc) or type(exc).__name__}")


def _shown_path(path: str | os.PathLike) -> str:
    from fsdpsim.util.errors import SHOWN_PATH_CHARS, shown

    return shown(os.fspath(path), SHOWN_PATH_CHARS)


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def check_output_path(path: str | os.PathLike | None, option: str = "--output", *,
                      make_parents: bool = False) -> None:
    """Refuse, before any work, an output file that cannot be written: an empty name, a NUL
    byte, a name longer than the file system takes, a folder, a missing folder (unless
    ``make_parents``: the nearest existing one must then be writable), a file or folder
    without write permission or on a read-only file system. ``None`` and ``-`` (stdout) pass.
    Nothing is left behind: a regular file is opened for writing without truncation (and
    removed again if the check created it); a device or pipe (``/dev/null``) passes as is."""
    from fsdpsim.util.errors import ConfigError

    if path is None or path == "-":
        return
    text = os.fspath(path)
    name = _shown_path(text)
    if not text.strip():
        raise ConfigError(f"{option} {name}: an empty file name; give a file")
    if "\0" in text:
        raise ConfigError(f"{option} {name}: a file name cannot contain a NUL byte")
    target = Path(text)
    try:
        info = target.stat()
    except FileNotFoundError:
        info = None
    except NotADirectoryError:
        raise ConfigError(f"{option} {name}: a folder on the path is a file") from None
    except OSError as exc:
        raise ConfigError(f"{option} {name} cannot be written: "
                          f"{exc.strerror or type(exc).__name__}") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{option} {name} is a folder; give a file name inside it")
    if info is not None and not stat.S_ISREG(info.st_mode):
        return  # /dev/null, a pipe: nothing to check without writing to it
    folder = target.resolve().parent if info is None else target.parent
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder.name)
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(f"{option} {name}: {_shown_path(folder)} is not a folder")
    if missing and not make_parents:
        raise ConfigError(f"{option} {name}: folder {_shown_path(target.resolve().parent)} "
                          "does not exist; create it first")
    limit = _name_max(folder)
    for part in [*missing, target.name]:
        if len(part.encode("utf-8", "surrogateescape")) > limit:
            raise ConfigError(f"{option} {name}: the name {_shown_path(part)} is longer than "
                              f"the {limit} bytes the file system accepts")
    try:
        if missing:
            with tempfile.TemporaryFile(dir=folder):
                pass  # the nearest existing folder takes new files
        elif info is None:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            os.close(fd)
            os.unlink(target)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_APPEND))
    except OSError as exc:
        raise ConfigError(f"{option} {name} cannot be written: "
                          f"{exc.strerror or type(exc).__name__}") from None


def echo(text: str = "", nl: bool = True) -> None:
    """Write ``text`` (and a newline) to stdout and flush."""
    write_chunks([text + ("\n" if nl else "")])


def flush_stdout() -> None:
    """Flush stdout (what other code may still have buffered) with the same error handling."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        raise _failed(exc, "standard output") from None


@contextmanager
def _open(path: str | None) -> Iterator[tuple[IO[str], str]]:
    if path is None or path == "-":
        yield sys.stdout, "standard output"
        return
    target = f"--output {path!r}"
    try:
        fh = Path(path).open("w", encoding="utf-8", newline="")
    except OSError as exc:
        raise _failed(exc, target) from None
    try:
        yield fh, target
    finally:
        try:
            fh.close()
        except OSError:
            pass


def write_chunks(chunks: Iterable[str], path: str | None = None) -> int:
    """Write text chunks to stdout (``path`` None or ``-``) or to the file ``path``, flushing
    after each; returns the characters written. Generating a chunk is the caller's iterator,
    so nothing holds more than one chunk."""
    written = 0
    with _open(path) as (fh, target):
        try:
            for chunk in chunks:
                if chunk:
                    fh.write(chunk)
                    fh.flush()
                    written += len(chunk)
        except OSError as exc:
            raise _failed(exc, target) from None
    return written


def is_stdout(path: str | None) -> bool:
    return path is None or path == "-"


def write_parquet(frame, path: str | os.PathLike) -> None:
    """``frame`` (a DataFrame) as one Parquet file, in a schema that does not depend on which
    rows it holds: a column with no value in these rows (all missing) is text, and categorical
    codes are 32-bit. A single-process sweep's file and a distributed sweep's partitions
    (:mod:`fsdpsim.drivers.sweep.distributed`) therefore read back as the same table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    fields = []
    for f in table.schema:
        kind = f.type
        if pa.types.is_null(kind):
            kind = pa.large_string()
        elif pa.types.is_dictionary(kind):
            value = pa.large_string() if pa.types.is_null(kind.value_type) else kind.value_type
            kind = pa.dictionary(pa.int32(), value)
        fields.append(pa.field(f.name, kind))
    pq.write_table(table.cast(pa.schema(fields, metadata=table.schema.metadata)), path)


__all__ = ["echo", "write_chunks", "write_parquet", "flush_stdout", "OutputClosed",
           "OutputError", "ROWS_PER_CHUNK", "is_stdout", "check_output_path", "cannot_write"]
