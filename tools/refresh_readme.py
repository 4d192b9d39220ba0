"""Rerun every ``$ fsdpsim ...`` example of README.md and put its real output in place.

A ```text block whose first line is ``$ fsdpsim ...`` is rerun in the repository root; its
output replaces the block's. A command may go on over several lines, each but the last ending
in `` \\`` (as in a shell), to keep the README's lines within 100 columns. A block that shows
part of the report keeps that shape: the same number of leading lines, then for each ``[...]``
line the part of the report that starts at the line that followed it before (matched by its
words up to the first number): to the end of that section (the next blank line) when the old
part had no blank line, else to the end of the report.

    python tools/refresh_readme.py README.md
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

BLOCK = re.compile(r"```text\n(\$ fsdpsim (?:[^\n]*\\\n)*[^\n]*)\n(.*?)```", re.S)


def command_args(command: str) -> list[str]:
    """The arguments of a ``$ fsdpsim ...`` command, continuation lines joined."""
    return shlex.split(re.sub(r"\\\n\s*", " ", command)[2:])


def run(command: str) -> list[str]:
    done = subprocess.run(command_args(command), capture_output=True, text=True, check=True)
    return done.stdout.rstrip("\n").split("\n")


def _key(line: str) -> list[str]:
    """A report line's words up to the first one with a digit (its label, not its numbers)."""
    words = line.split()
    cut = next((i for i, w in enumerate(words) if re.search(r"\d", w)), len(words))
    return words[:max(cut, 1)]


def excerpt(old: list[str], new: list[str]) -> list[str]:
    """``new`` cut to the shape of ``old``, whose left-out parts are ``[...]`` lines."""
    cuts = [i for i, line in enumerate(old) if line == "[...]"]
    out = new[:cuts[0]]
    for n, cut in enumerate(cuts):
        part = old[cut + 1:cuts[n + 1] if n + 1 < len(cuts) else len(old)]
        out.append("[...]")
        if not part:
            continue
        start = next((i for i, line in enumerate(new) if _key(line) == _key(part[0])), len(new))
        end = len(new)
        if "" not in part:
            end = next((i for i in range(start, len(new)) if not new[i].strip()), len(new))
        out += new[start:end]
    return out


def refresh(match: re.Match) -> str:
    command, old = match.group(1), match.group(2).rstrip("\n").split("\n")
    new = run(command)
    if "[...]" in old:
        new = excerpt(old, new)
    return "```text\n" + command + "\n" + "\n".join(new) + "\n```"


def main(path: str) -> None:
    p = Path(path)
    p.write_text(BLOCK.sub(refresh, p.read_text()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "README.md")
