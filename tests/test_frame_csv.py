"""The CSV text of a table built column by column (fsdpsim.report.frame_csv) is byte for byte
pandas' ``to_csv(index=False)``, for every kind of cell a measurements table holds."""

import numpy as np
import pandas as pd
import pytest

from fsdpsim.report.frame_csv import frame_csv


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
    })


@pytest.mark.parametrize("take", [slice(None), [0, 0, 3, 3, 6, 1, 1, 2], []])
def test_frame_csv_is_pandas_to_csv(take):
    frame = _mixed().iloc[take].reset_index(drop=True)
    assert frame_csv(frame) == frame.to_csv(index=False)


def test_a_column_pandas_formats_itself_makes_the_table_pandas_own():
    frame = _mixed().assign(when=pd.Timestamp("2026-12-01"),
                            nullable=pd.array([1, None, 3, 4, 5, 6, 7], dtype="Int64"))
    assert frame_csv(frame) == frame.to_csv(index=False)
