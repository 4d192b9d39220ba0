"""The CSV text of a table built column by column (fsdpsim.report.frame_csv) is byte for byte
pandas' ``to_csv(index=False)``, for every kind of cell a measurements table holds."""

import numpy as np
import pandas as pd
import pytest

from fsdpsim.report.frame_csv import _kind, frame_csv


def _mixed() -> pd.DataFrame:
    rows = 7
    return pd.DataFrame({
        "text": pd.Series(["a", "b,c", 'say "x"', "line\nbreak", "cr\rhere", "", None],
                          dtype="str"),
        # cells equal in Python but printed apart: 1, 1.0, True, "1"; 0.0 and -0.0
        "object": pd.Series([1, 1.0, True, "1", -0.0, 0.0, None], dtype=object),
        "object_missing": pd.Series([float("nan"), None, pd.NA, "x", 2.5, np.float64(2.5),
                                     "y,z"], dtype=object),
        "float": [0.1, -0.0, np.nan, 1e16, 1e-5, np.inf, 1 / 3],
        "float32": np.array([0.1, 2.5, np.nan, 1e10, 3, 4, 5], dtype=np.float32),
        "int": np.arange(rows) * 10**12,
        "bool": [True, False, True, True, False, False, True],
        "repeated": ["same"] * rows,
        "with space": [1.5] * rows,
        # a sweep's kinds: categories of text (one unused, a missing cell) and nullable integers
        "category": pd.Categorical(["b", "a,x", None, "b", 'q"', "a,x", "b"],
                                   categories=["b", "a,x", 'q"', "unused"]),
        "nullable": pd.array([1, None, -3, 10**15, 1, None, 0], dtype="Int64"),
    })


@pytest.mark.parametrize("header", [True, False])
@pytest.mark.parametrize("take", [slice(None), [0, 0, 3, 3, 6, 1, 1, 2], [2, 5], []])
def test_frame_csv_is_pandas_to_csv(take, header):
    frame = _mixed().iloc[take].reset_index(drop=True)
    assert frame_csv(frame, header=header) == frame.to_csv(index=False, header=header)


def test_a_column_pandas_formats_itself_makes_the_table_pandas_own():
    for other in (pd.Series([pd.Timestamp("2026-12-01")] * 7),
                  pd.Categorical([1.5, 2.5, None, 1.5, 1.5, 2.5, 1.5]),  # categories of numbers
                  pd.array([0.5, None, 1, 2, 3, 4, 5], dtype="Float64")):
        frame = _mixed().assign(other=other)
        assert frame_csv(frame) == frame.to_csv(index=False)


def test_a_sweeps_rows_are_pandas_csv():
    """A sweep's frame (categories, nullable integers, text, floats with NaN and infinities,
    rows without a prediction) as ``sweep --format csv`` writes it, byte for byte pandas'."""
    from fsdpsim.drivers.sweep.grid import build_grid
    from fsdpsim.drivers.sweep.run import run_sweep
    from fsdpsim.hardware.catalog import load_catalog

    grid = build_grid(load_catalog(use_env=False), {
        "model": "llama3-8b,mixtral-8x7b", "gpu": "h100,mi300x", "num-gpus": "8,12,64",
        "tp": "1,2", "pp": "1,2", "seq-len": "4k", "micro-batch": "1,64"})
    frame = run_sweep(grid)
    assert frame["infeasible"].notna().any() and frame["infeasible"].isna().any()
    assert {str(d) for d in frame.dtypes} >= {"category", "Int64", "float64", "bool"}
    assert None not in {_kind(d) for d in frame.dtypes}  # every column its own, none pandas'
    assert frame_csv(frame) == frame.to_csv(index=False)
