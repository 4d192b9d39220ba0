"""Execute the notebooks in ``notebooks/`` top to bottom and save them with their outputs.

The notebooks are committed with their outputs, so a reader sees the figures
and tables without running anything; CI re-executes them (``tests/test_notebooks.py``) and
fails if a cell errors. Each runs in a ``python3`` kernel of this interpreter with
``notebooks/`` as the working directory, as the test runs them; per-cell timing metadata is
dropped so that a re-run only changes what the cells print.

    python tools/run_notebooks.py [NAME.ipynb ...]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CELL_TIMEOUT_S = 300


def run(path: Path, kernel: str) -> None:
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=kernel,
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    print(f"{path.name}: {sum(c.cell_type == 'code' for c in nb.cells)} code cells run, saved")


def main(names: list[str]) -> int:
    import os

    from ipykernel.kernelspec import install

    with tempfile.TemporaryDirectory() as prefix:  # a python3 kernel of this interpreter
        install(kernel_name="python3", prefix=prefix)
        share = str(Path(prefix) / "share" / "jupyter")
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            p for p in (share, os.environ.get("JUPYTER_PATH", "")) if p)
        for name in names or sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")):
            run(NOTEBOOKS / name, "python3")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
