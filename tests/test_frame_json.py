"""A table's rows as JSON built column by column (fsdpsim.report.frame_json) are byte for byte
``render.to_json(records(frame))``: every kind of cell a sweep's rows hold, lists included."""

import numpy as np
import pandas as pd
import pytest

from test_frame_csv import _mixed

from fsdpsim.report import render
from fsdpsim.report.frame_json import frame_json
from fsdpsim.report.sweep_table import records


def _with_lists(frame: pd.DataFrame) -> pd.DataFrame:
    cells = [[16, 15], None, [], {"a": [1, 2.5]}, [np.int64(3)], "x", [float("nan")]]
    return frame.assign(lists=pd.Series(cells[:len(frame)], dtype=object, index=frame.index),
                        numpy_scalars=pd.Series([np.float32(0.1), np.int64(7), np.bool_(True),
                                                 pd.NA, np.nan, np.inf, -0.0][:len(frame)],
                                                dtype=object, index=frame.index),
                        when=pd.Timestamp("2026-12-03"))


@pytest.mark.parametrize("take", [slice(None), [0, 0, 3, 3, 6, 1, 1, 2], [2, 5], []])
def test_frame_json_is_render_to_json_of_records(take):
    for frame in (_mixed(), _with_lists(_mixed())):
        part = frame.iloc[take].reset_index(drop=True)
        assert frame_json(part) == render.to_json(records(part))


def test_a_sweeps_rows_are_render_to_json():
    from fsdpsim.drivers.sweep.grid import build_grid
    from fsdpsim.drivers.sweep.run import run_sweep
    from fsdpsim.hardware.catalog import load_catalog

    grid = build_grid(load_catalog(use_env=False), {
        "model": "llama3-8b,mixtral-8x7b", "gpu": "h100,mi300x", "num-gpus": "8,12,64",
        "tp": "1,2", "pp": "1,2", "seq-len": "4k", "micro-batch": "1,64"})
    frame = run_sweep(grid)
    assert frame["infeasible"].notna().any() and frame["infeasible"].isna().any()
    assert frame_json(frame) == render.to_json(records(frame))
