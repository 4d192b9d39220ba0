"""Every command's text output fits a 100-column terminal: tables, notes, wrapped plans and
commands, the validate row table. ``--format csv``/``json`` keep every column; the text a person
reads does not run off the screen. Help text is checked in ``tests/test_cli_docs.py``."""

from __future__ import annotations

from conftest import run

import pytest

WIDTH = 100

COMMANDS = [
    ("predict",),
    ("predict", "--model", "llama3-70b", "--gpu", "h100", "--num-gpus", "256", "--tp", "8",
     "--pp", "4", "--vpp", "2", "--global-batch", "1024"),
    ("predict", "--model", "llama3-70b", "--gpu", "h100", "--num-gpus", "16"),  # does not fit
    ("predict", "--model", "mixtral-8x7b", "--gpu", "h100", "--num-gpus", "64", "--ep", "8"),
    ("sweep", "--model", "llama3-8b,llama3-70b", "--num-gpus", "8,64"),
    ("sweep", "--model", "llama3-8b", "--num-gpus", "8,64", "--best"),
    ("sweep", "--model", "llama3-70b", "--num-gpus", "64", "--pp", "2,4", "--recompute", "full",
     "--recompute-layers", "30"),  # a long plan column and an infeasible reason
    ("search", "--model", "llama3-70b", "--gpu", "h100", "--num-gpus", "64"),
    ("search", "--model", "mixtral-8x7b", "--gpu", "h100", "--num-gpus", "64", "--explain"),
    ("search", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "4096", "--tokens", "15t",
     "--budget-usd", "3.1m", "--deadline-days", "10"),
    ("compare", "--model", "llama3-70b", "--gpu", "h100,b200,mi300x", "--num-gpus", "64"),
    ("catalog", "list"),
    ("catalog", "show", "h100"),
    ("model", "list"),
    ("model", "show", "deepseek-v3"),
    ("validate", "hybrid_calibration.csv"),
    ("validate", "published_calibration.csv", "--by", "source"),
]


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a)[:60])
def test_text_output_fits_100_columns(capsys, args):
    rc, out, err = run(capsys, *args)
    assert rc == 0, err
    assert out.strip()
    assert _too_wide(out) == [], f"{' '.join(args)}: lines over {WIDTH} columns"
    assert _too_wide(err) == []


def test_validate_rows_keep_the_error_and_range_on_screen(capsys):
    """The per-row table puts measured, predicted, error and the 90 % range before the columns
    it may leave out at 100 columns, and names what it left out."""
    rc, out, _ = run(capsys, "validate", "hybrid_calibration.csv")
    assert rc == 0
    header = next(line for line in out.splitlines() if line.split()[:2] == ["id", "gpu"])
    for column in ("measured", "predicted", "error", "90 % range"):
        assert column in header
    assert "see --format csv" in out
