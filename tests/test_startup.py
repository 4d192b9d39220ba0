"""Fast start: commands import pandas, matplotlib and scipy only when they need them.

Each check runs in a fresh interpreter (this test process has pandas loaded already): it
imports the CLI module, runs a command in that same process through :func:`fsdpsim.cli.main`
and reports which heavy modules ended up in ``sys.modules``. The timing itself is
``benchmarks/bench_startup.py`` (README, Tests and benchmarks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pandas", "matplotlib", "scipy")


def _loaded_after(args: list[str]) -> dict:
    """Run ``fsdpsim ARGS`` in-process in a fresh interpreter: its exit status and which of
    :data:`HEAVY` (and numpy) it imported."""
    code = (
        "import json, sys\n"
        "import fsdpsim.cli\n"
        "after_import = [m for m in %r if m in sys.modules]\n"
        "rc = fsdpsim.cli.main(%r)\n"
        "print('\\n' + json.dumps({'rc': rc, 'after_import': after_import,\n"
        "    'after_run': [m for m in %r if m in sys.modules]}))\n"
    ) % (HEAVY + ("numpy",), args, HEAVY + ("numpy",))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FSDPSIM_CATALOG", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_cli_import_and_table_predict_load_no_pandas_or_matplotlib():
    got = _loaded_after(["predict", "--model", "llama3-8b", "--num-gpus", "64", "--tokens",
                         "15t"])
    assert got["rc"] == 0
    assert got["after_import"] == []  # not even numpy: `fsdpsim --version` needs none
    assert got["after_run"] == ["numpy"], got


def test_version_loads_nothing_heavy():
    got = _loaded_after(["--version"])
    assert got["rc"] == 0 and got["after_run"] == []


def test_the_check_can_fail():
    """The same probe sees pandas where a command does need it (CSV output)."""
    got = _loaded_after(["predict", "--num-gpus", "8", "--format", "csv"])
    assert got["rc"] == 0 and "pandas" in got["after_run"]


@pytest.mark.slow
def test_startup_benchmark_runs_and_reports_the_ceiling(capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_startup
    finally:
        sys.path.pop(0)
    assert bench_startup.main(["--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "bare interpreter" in out and "predict's imports" in out
    assert out.count("0.2 s ceiling") == 2  # the two cases the ceiling is about
