"""Rerun every ``$ fsdpsim ...`` example of README.md and put its real output in place.

A ```text block whose first line is ``$ fsdpsim ...`` is rerun in the repository root; its
output replaces the block's. A block that shows part of the report (a ``[...]`` line) keeps
that shape: the same number of leading lines, then ``[...]``, then the report from the line
that followed ``[...]`` before (matched by its first words) to the end.

    python tools/refresh_readme.py README.md
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

BLOCK = re.compile(r"```text\n(\$ fsdpsim [^\n]*)\n(.*?)```", re.S)


def run(command: str) -> list[str]:
    args = shlex.split(command[2:])
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    return done.stdout.rstrip("\n").split("\n")


def refresh(match: re.Match) -> str:
    command, old = match.group(1), match.group(2).rstrip("\n").split("\n")
    new = run(command)
    if "[...]" in old:
        cut = old.index("[...]")
        resume = old[cut + 1].split()[:3] if cut + 1 < len(old) else None
        start = next((i for i, line in enumerate(new) if resume and line.split()[:3] == resume),
                     len(new))
        new = new[:cut] + ["[...]"] + new[start:]
    return "```text\n" + command + "\n" + "\n".join(new) + "\n```"


def main(path: str) -> None:
    p = Path(path)
    p.write_text(BLOCK.sub(refresh, p.read_text()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "README.md")
