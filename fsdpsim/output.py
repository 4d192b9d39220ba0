"""The one writer of command output: text to stdout or to ``--output FILE``, in chunks.

Every command writes through :func:`echo` or :func:`write_chunks`, which flush as they go, so a
failure surfaces while the command runs, as one of two exceptions that
:func:`fsdpsim.cli.main` turns into an exit status:

* :class:`OutputClosed`: the reader went away (``fsdpsim sweep ... | head``). Not an error: the
  rest of the output is dropped quietly and the exit status is 0.
* :class:`OutputError`: the output cannot be written (``> /dev/full``, a full disk, a read-only
  file): one line on stderr naming the output and the reason, exit status 1.

Big outputs (``fsdpsim sweep --format csv|json``) are generated and written chunk by chunk:
memory stays flat however many rows are written.
"""

from __future__ import annotations

import errno
import os
import sys
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


__all__ = ["echo", "write_chunks", "flush_stdout", "OutputClosed", "OutputError",
           "ROWS_PER_CHUNK", "is_stdout"]
