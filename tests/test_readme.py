"""The README for a newcomer: it starts with the two commands CI runs, its
question table's commands run, its examples fit 100 columns and its links resolve."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsdpsim.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
WIDTH = 100
#: Lines of example blocks that may be wider (none now: commands wrap with a backslash).
WIDE_EXCEPTIONS: tuple[str, ...] = ()


def questions() -> list[tuple[str, str]]:
    """(question, command) rows of the table under "What do you want to know?"."""
    text = README.read_text()
    part = text.split("## What do you want to know?", 1)[1].split("\n## ", 1)[0]
    return [(m.group(1).strip(), m.group(2)) for m in
            re.finditer(r"^\| ([^|`]+) \| `(fsdpsim [^`]+)` \|$", part, re.M)]


def test_the_readme_starts_with_the_two_commands():
    assert README.read_text().startswith(
        "# fsdpsim\n\n```bash\n"
        "pip install . && fsdpsim predict --model llama3-8b --gpu h100 --num-gpus 64\n"
        "pip install '.[test]' && python -m pytest -q\n```\n")


def test_the_question_table_covers_the_procurement_questions():
    asked = " ".join(q.lower() for q, _ in questions())
    for words in ("fit", "fast", "cheapest", "network", "compare clusters", "parallel plan"):
        assert words in asked, words
    assert questions()[0][1].startswith("fsdpsim predict")


@pytest.mark.parametrize("question, command", questions())
def test_each_question_command_runs(question, command, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the validation file's path is relative to the repository
    args = shlex.split(command)[1:]
    if "-o" in args:
        args[args.index("-o") + 1] = str(tmp_path / Path(args[args.index("-o") + 1]).name)
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, (command, result.output)
    assert result.output.strip()


def example_lines(path: Path) -> list[str]:
    return [line for block in re.findall(r"^```[a-z]*\n(.*?)^```", path.read_text(), re.M | re.S)
            for line in block.split("\n")]


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_example_lines_fit_100_columns(path):
    wide = [line for line in example_lines(path)
            if len(line) > WIDTH and line not in WIDE_EXCEPTIONS]
    assert not wide, wide


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_resolve(path):
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        where = (path.parent / file).resolve() if file else path
        if not where.exists():
            broken.append(target)
        elif anchor and (where.suffix != ".md" or anchor not in anchors(where)):
            broken.append(target)
    assert not broken, broken
    if path == README:  # the reference moved to docs/, with a link from the README to each
        for doc in DOCS:
            assert f"](docs/{doc.name}" in text, doc.name


def test_predict_and_sweep_tables_fit_100_columns():
    runner = CliRunner()
    for args in (["predict", "--model", "llama3-405b", "--gpu", "h100", "--num-gpus", "1152",
                  "--tp", "8", "--pp", "9", "--zero", "1", "--tokens", "15t"],
                 ["sweep", "--model", "llama3-8b,llama3-70b", "--gpu", "h100,b200,mi300x",
                  "--num-gpus", "64,128", "--best", "--tokens", "15t"]):
        out = runner.invoke(cli, args, catch_exceptions=False).output
        assert max(map(len, out.splitlines())) <= WIDTH, args
