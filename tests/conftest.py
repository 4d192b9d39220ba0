"""Shared fixtures. Tests import fsdpsim from the source tree (the repository root)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The published measurements live in the repository (validation/data/, copied from
#: shared/validation with their sources), so a plain clone reproduces the accuracy table.
VALIDATION_DATA = ROOT / "validation" / "data"
VALIDATION_CSV = VALIDATION_DATA / "published_calibration.csv"


def load_script(path: Path, name: str):
    """A script of the repository (tools/, benchmarks/, validation/) imported as module
    ``name``; registered in ``sys.modules`` first, where dataclasses look their module up."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

# -- shared by the CLI, sweep and plot tests --------------------------------------------------
import pytest  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from fsdpsim.hardware.catalog import ENV_VAR, load_catalog  # noqa: E402


@pytest.fixture(autouse=True)
def _no_user_catalog(monkeypatch):
    """A developer's FSDPSIM_CATALOG must not change what the tests see."""
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.fixture(autouse=True)
def _no_kept_layers():
    """Each test starts without the layers earlier tests' evaluations kept
    (fsdpsim.engine.memo): a test that changes an engine function in place is not served rows
    computed before."""
    from fsdpsim.engine import memo

    memo.clear()


@pytest.fixture(scope="module")
def cat():
    """The built-in catalog alone."""
    return load_catalog(use_env=False)


def sweep(cat, **options):
    """Run a sweep from keyword options (``num_gpus="8..64"`` = ``--num-gpus 8..64``)."""
    from fsdpsim.drivers.sweep.grid import build_grid
    from fsdpsim.drivers.sweep.run import run_sweep

    return run_sweep(build_grid(cat, {k.replace("_", "-"): v for k, v in options.items()}))


def run(capsys, *args: str) -> tuple[int, str, str]:
    """``fsdpsim ARGS`` through :func:`fsdpsim.cli.main`: (exit status, stdout, stderr)."""
    from fsdpsim.cli import main

    capsys.readouterr()
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def invoke(*args: str) -> str:
    """stdout of a command that must succeed (CliRunner; exceptions propagate)."""
    from fsdpsim.cli import cli

    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def assert_one_line_error(rc: int, out: str, err: str) -> str:
    """Bad input: exit status 2, nothing on stdout, one ``fsdpsim: error: ...`` line, no traceback."""
    assert rc == 2, (rc, out, err)
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fsdpsim: error: ") and lines[0] != "fsdpsim: error: "
    return lines[0]


def overlay_catalog(folder: Path, factors: dict[str, dict[str, float]]):
    """The built-in catalog with some accelerators' efficiency factors replaced (a catalog
    overlay written to ``folder``): for tests whose cases were chosen at factors recalibrated
    since. A value that is itself a table (key ``"bf16.pytorch"``) replaces that split table
    (:mod:`fsdpsim.hardware.efficiency`)."""
    lines = []
    for gpu, values in factors.items():
        flat = {k: v for k, v in values.items() if not isinstance(v, dict)}
        lines += ["[[accelerator]]", f'id = "{gpu}"', "override = true", "",
                  "[accelerator.efficiency]", *(f"{k} = {v}" for k, v in flat.items()), ""]
        for name, table in values.items():
            if isinstance(table, dict):
                lines += [f"[accelerator.efficiency.{name}]",
                          *(f"{k} = {json.dumps(v)}" for k, v in table.items()), ""]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "overlay.toml").write_text("\n".join(lines))
    return load_catalog((str(folder),), use_env=False)
