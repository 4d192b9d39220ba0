"""The command line's process entry freezes the objects of the command's imports once loaded
and what is left before the process exits (collections then skip them); a call with
arguments, as tests and other programs make in their own process, leaves the collector as it
was."""

import gc
import subprocess
import sys
from pathlib import Path

from fsdpsim.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_a_call_with_arguments_leaves_the_collector_alone(capsys):
    frozen = gc.get_freeze_count()
    for args in (["--version"], ["validate", "--help"], ["calibrate", "--help"]):
        assert main(args) == 0  # the last two load their command's modules
    assert gc.get_freeze_count() == frozen


def test_the_process_entry_exits_with_the_command_status():
    code = ("import gc, sys\nsys.argv = ['fsdpsim', '--version']\nfrom fsdpsim.cli import main\n"
            "status = main()\nprint(status, gc.get_freeze_count() > 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    assert done.stdout.split()[-2:] == ["0", "True"]
    bad = subprocess.run([sys.executable, "-m", "fsdpsim.cli", "validate", "/no/such.csv"],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.startswith("fsdpsim: error:")
