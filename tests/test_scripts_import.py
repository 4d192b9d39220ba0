"""Every script of benchmarks/ and tools/ imports (its imports name what the package has), so a
module moved in the package cannot leave a benchmark that fails before it measures anything."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, load_script

SCRIPTS = sorted([*ROOT.glob("benchmarks/*.py"), *ROOT.glob("tools/*.py")])
#: Optional extras a script may need (skipped where not installed).
OPTIONAL = ("dask", "distributed", "pyarrow", "torch", "nbformat", "nbclient")


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_imports(path):
    try:
        load_script(path, f"_script_{path.stem}")
    except ModuleNotFoundError as missing:
        if missing.name and missing.name.split(".")[0] in OPTIONAL:
            pytest.skip(f"needs {missing.name}")
        raise
