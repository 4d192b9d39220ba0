"""The notebooks in ``notebooks/`` run from top to bottom without an error.

Each is executed with nbclient in a ``python3`` kernel of this interpreter, with ``notebooks/``
as the working directory and 120 s per cell, as a reader would run it. The notebooks are saved
with their outputs (``tools/run_notebooks.py``), so a reader sees them without running
anything; the test checks that too. About 25 s for all of them on the 2-core development
machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the test extra: pip install '.[test]'")
nbclient = pytest.importorskip("nbclient", reason="needs the test extra: pip install '.[test]'")
pytest.importorskip("ipykernel", reason="needs the test extra: pip install '.[test]'")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
NAMES = ("01_seed_study.ipynb", "02_procurement.ipynb", "03_validation.ipynb")
KERNEL = "python3"
CELL_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """A ``python3`` kernel spec that runs this interpreter, written to a temporary folder put
    first on ``JUPYTER_PATH``: a fresh virtual environment needs no ``ipykernel install``, and
    a ``python3`` spec of another environment (user or system folder) is not picked up."""
    from ipykernel.kernelspec import install

    prefix = tmp_path_factory.mktemp("jupyter")
    install(kernel_name=KERNEL, prefix=str(prefix))
    share = str(prefix / "share" / "jupyter")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", os.pathsep.join(
            p for p in (share, os.environ.get("JUPYTER_PATH", "")) if p))
        yield KERNEL


def execute(name: str, kernel: str):
    """Run every cell of ``notebooks/name``; nbclient raises CellExecutionError on an error."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=kernel,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    return nb


def outputs_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(out.get("data", {}).get("text/plain", ""))
            parts.append(out.get("data", {}).get("text/markdown", ""))
    return "\n".join(parts)


@pytest.mark.slow  # each notebook runs in the kernel: 3-7 s
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs(name, kernel):
    nb = execute(name, kernel)
    errors = [out for cell in nb.cells for out in cell.get("outputs", [])
              if out.get("output_type") == "error"]
    assert not errors
    assert not _warnings(nb)
    text = outputs_text(nb)
    # fsdpsim comes from this repository, not from an installed copy.
    assert f"from {ROOT / 'fsdpsim'}" in text
    assert "Traceback" not in text


@pytest.mark.slow
def test_validation_notebook_skips_without_measurements(kernel, tmp_path, monkeypatch):
    missing = tmp_path / "published_calibration.csv"
    monkeypatch.setenv("FSDPSIM_VALIDATION_CSV", str(missing))
    nb = execute("03_validation.ipynb", kernel)
    text = outputs_text(nb)
    assert f"skipped: no measurements file at {missing}" in text
    assert "rows skipped" not in text  # the analysis cells did not run


@pytest.mark.parametrize("name", NAMES)
def test_notebook_saved_with_its_outputs(name):
    """Committed with outputs (``tools/run_notebooks.py``), run top to bottom
    in one kernel, without an error, so a reader sees them without running anything."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == KERNEL
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), (
        f"{name}: run it with tools/run_notebooks.py before saving")
    assert sum(len(cell.outputs) for cell in code) >= len(code) // 2
    assert not [out for cell in code for out in cell.outputs if out.output_type == "error"]
    assert "Traceback" not in outputs_text(nb)
    assert not _warnings(nb), f"{name}: saved with warnings on stderr"


def _warnings(nb) -> list[str]:
    """What the cells wrote to stderr (pandas' and numpy's warnings land there)."""
    return [out.text for cell in nb.cells if cell.cell_type == "code"
            for out in cell.get("outputs", [])
            if out.get("output_type") == "stream" and out.get("name") == "stderr"]
