"""The wheel carries the catalog: `pip install .` must work from any directory (issue 2)."""

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
    for module in ("fsdpsim/cli/__init__.py", "fsdpsim/costs/memory.py", "fsdpsim/measured/harness/reference.py"):
        assert module in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "fsdpsim = fsdpsim.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_builtin_catalog_found_without_the_source_tree(monkeypatch, tmp_path):
    """From another directory the catalog still loads (the package locates its own data)."""
    monkeypatch.chdir(tmp_path)
    code = ("from fsdpsim.hardware.catalog import load_catalog; "
            "print(len(load_catalog(use_env=False).ids('accelerator')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 26
