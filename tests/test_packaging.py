"""The wheel carries the catalog: `pip install .` must work from any directory."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_contains_package_catalog_and_entry_point(tmp_path):
    """Build the wheel (no isolation: setuptools is already here) and read its file list."""
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                          "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    wheel = next(tmp_path.glob("fsdpsim-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n for n in names if n.startswith("fsdpsim/hardware_catalog/") and n.endswith(".toml")}
    in_tree = {"fsdpsim/hardware_catalog/" + p.relative_to(ROOT / "hardware_catalog").as_posix()
               for p in (ROOT / "hardware_catalog").rglob("*.toml")}
    assert shipped == in_tree and len(in_tree) >= 18
    models = {n for n in names if n.startswith("fsdpsim/model_catalog/") and n.endswith(".toml")}
    assert models == {"fsdpsim/model_catalog/" + p.name
                      for p in (ROOT / "model_catalog").glob("*.toml")} and len(models) >= 10
    data = {n for n in names if n.startswith("fsdpsim/validation_data/") and n.endswith(".csv")}
    assert data == {"fsdpsim/validation_data/" + p.name
                    for p in (ROOT / "validation" / "data").glob("*.csv")} and len(data) >= 4
    for module in ("fsdpsim/cli/__init__.py", "fsdpsim/costs/memory.py",
                   "fsdpsim/measured/harness/reference.py", "fsdpsim/reference/step.py"):
        assert module in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "fsdpsim = fsdpsim.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_builtin_catalog_found_without_the_source_tree(monkeypatch, tmp_path):
    """From another directory the catalog still loads (the package locates its own data)."""
    monkeypatch.chdir(tmp_path)
    code = ("from fsdpsim.hardware.catalog import load_catalog; "
            "from fsdpsim.model.presets import list_models; "
            "print(len(load_catalog(use_env=False).ids('accelerator')), len(list_models()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                         timeout=120)
    assert out.returncode == 0, out.stderr
    accelerators, models = map(int, out.stdout.split())
    assert accelerators >= 26 and models >= 51


def test_shipped_measurements_resolve_by_name_from_any_folder(tmp_path):
    """``validate NAME.csv`` and ``validate validation/data/NAME.csv`` work outside the
    repository (the package finds its own measurement files); a path that exists wins, and an
    unknown name is one line that lists the shipped files."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}

    def validate(name: str):
        return subprocess.run([sys.executable, "-m", "fsdpsim.cli", "validate", name],
                              capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)

    by_name = validate("vtrain_ground_truth_multi.csv")
    by_path = validate("validation/data/vtrain_ground_truth_multi.csv")
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout == by_path.stdout and "109 rows" in by_name.stdout
    own = tmp_path / "vtrain_ground_truth_multi.csv"  # a file of the same name here wins
    lines = (ROOT / "validation" / "data" / own.name).read_text().splitlines(keepends=True)
    own.write_text("".join(lines[:4]))
    assert "3 rows" in validate(own.name).stdout
    missing = validate("no_such_runs.csv")
    assert missing.returncode == 2 and missing.stdout == ""
    assert "hybrid_calibration.csv" in missing.stderr and len(missing.stderr.splitlines()) == 1
