"""docs/cli.md is the commands' own help (``tools/make_cli_docs.py``), and every command's help
fits 100 columns."""

from __future__ import annotations

import importlib.util

from conftest import ROOT

_SPEC = importlib.util.spec_from_file_location("make_cli_docs", ROOT / "tools" / "make_cli_docs.py")
make_cli_docs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(make_cli_docs)


def test_the_reference_is_what_the_commands_say():
    assert (ROOT / "docs" / "cli.md").read_text() == make_cli_docs.render(), (
        "docs/cli.md is stale: run python tools/make_cli_docs.py")


def test_every_help_line_fits_100_columns():
    wide = [line for line in make_cli_docs.render().splitlines() if len(line) > 100]
    assert wide == []


def test_every_command_is_in_the_reference():
    text = make_cli_docs.render()
    for name in ("predict", "sweep", "search", "compare", "report", "plot", "validate",
                 "calibrate", "catalog list", "catalog show", "model list", "model show"):
        assert f"## `fsdpsim {name}`" in text
