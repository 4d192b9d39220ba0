"""``validate`` evaluates a file as one grid (rows grouped by the run they describe, inputs
built once per group, :mod:`fsdpsim.measured.grid`) with the numbers of the per-row path.

For every calibration file (``validation/data/*.csv``, all rows): the grid's engine inputs
equal the per-row builder's (:func:`fsdpsim.measured.validate.engine_inputs_per_row`) key for
key and bit for bit; ``validate --format csv`` is byte for byte the table the per-row inputs
give (evaluated row by row in the engine, with the sensitivity post-pass); a published file's
grouped conversion equals converting each row on its own; and a file whose rows each appear
twice (new ids, one copy's measurement changed) predicts each copy as its original.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from fsdpsim import engine
from fsdpsim.cli import cli
from fsdpsim.drivers import sensitivity
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.measured import grid
from fsdpsim.measured.published import tables
from fsdpsim.measured.validate import (engine_inputs, engine_inputs_per_row, load_measurements,
                                       predict_measurements)

DATA = Path(__file__).resolve().parents[1] / "validation" / "data"
FILES = sorted(DATA.glob("*.csv"))
CATALOG = load_catalog(use_env=False)


def _modelled(path: Path) -> pd.DataFrame:
    frame = load_measurements(path, CATALOG)
    return frame[frame["skip"] == ""].reset_index(drop=True)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_grid_inputs_equal_per_row_inputs(path):
    use = _modelled(path)
    got, want = engine_inputs(use, CATALOG), engine_inputs_per_row(use, CATALOG)
    assert list(got) == list(want)
    for key in want:
        assert got[key].dtype == want[key].dtype, key
        np.testing.assert_array_equal(got[key], want[key], err_msg=key, strict=True)


def _per_row_table(use: pd.DataFrame, path: Path | None = None) -> pd.DataFrame:
    """What ``validate`` reports, from the per-row inputs (every row its own run); with
    ``path``, the 90 % range columns too, row by row
    (:func:`fsdpsim.measured.ranges.add_intervals_per_row`)."""
    x = engine_inputs_per_row(use, CATALOG)
    out = engine.evaluate(x)
    result = use.copy()
    result["predicted_tokens_per_s_per_gpu"] = out["tokens_per_s_per_gpu"]
    result["predicted_mfu"] = out["mfu"]
    result["fits"] = out["fits"]
    result["moe"] = np.broadcast_to(np.asarray(out.get("moe_s", 0.0)) > 0, len(use))
    result["bottleneck"] = [engine.BOTTLENECKS[int(b)] for b in np.broadcast_to(
        sensitivity.analyse(x)["bottleneck"], len(use))]
    measured = result["tokens_per_s_per_gpu"].astype(float)
    result["error"] = result["predicted_tokens_per_s_per_gpu"] / measured - 1.0
    if path is not None:
        from fsdpsim.measured.ranges import add_intervals_per_row

        result = add_intervals_per_row(result, x, out, CATALOG, path)
    return result


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_validate_csv_is_the_per_row_table_byte_for_byte(path):
    """The CLI's table (shared runs gathered per row, ranges from the gathered inputs) equals
    the table built with every row its own run, ranges included."""
    done = CliRunner().invoke(cli, ["validate", str(path), "--format", "csv"])
    assert done.exit_code == 0, done.output
    assert done.output == _per_row_table(_modelled(path), path).to_csv(index=False)


@pytest.mark.parametrize("path", [p for p in FILES if "vtrain" not in p.stem],
                         ids=lambda p: p.stem)
def test_grouped_conversion_equals_row_by_row(path):
    raw = pd.read_csv(path, dtype={"id": str}, low_memory=False)
    raw.columns = [str(c).strip().lstrip("\ufeff") for c in raw.columns]
    got = tables.from_published(raw, CATALOG)
    rows = []
    for _, r in raw.iterrows():  # each row on its own, as a pandas row
        row, before, after, model_flops = tables._convert(r, raw.columns, CATALOG, {})
        measured, source = tables.tokens_per_s_per_gpu(r, model_flops)
        rows.append({**row, "id": r.get("id"), "tokens_per_s_per_gpu": measured,
                     "measured_from": source,
                     "skip": before or ("no measurement (tokens/s, step time or TFLOP/s per GPU)"
                                        if measured != measured else "") or after})
    pd.testing.assert_frame_equal(got, pd.DataFrame(rows))


def test_repeated_rows_predict_as_their_originals(tmp_path):
    path = DATA / "hybrid_calibration.csv"
    raw = pd.read_csv(path, dtype={"id": str}, low_memory=False)
    twice = pd.concat([raw, raw.assign(id=raw["id"] + "-copy",
                                       tokens_per_s_per_gpu=raw["tokens_per_s_per_gpu"] * 1.5)],
                      ignore_index=True)
    copy = tmp_path / "twice.csv"
    twice.to_csv(copy, index=False)
    one = predict_measurements(_modelled(path), CATALOG)
    both = predict_measurements(_modelled(copy), CATALOG)
    assert len(both) == 2 * len(one)
    for half in (both.iloc[:len(one)], both.iloc[len(one):]):
        half = half.reset_index(drop=True)
        for column in ("predicted_tokens_per_s_per_gpu", "predicted_mfu", "fits", "bottleneck",
                       "micro_batch", "recompute", "knobs"):
            assert half[column].tolist() == one[column].tolist(), column


def test_codes_tell_apart_what_the_setup_reads_differently():
    # 1, 1.0, "1" and True compare equal in Python but are different cells; so are NaN, None
    # and 0.0 / -0.0
    cells = pd.Series([1, 1.0, "1", True, None, float("nan"), 0.0, -0.0, 1], dtype=object)
    codes = grid.column_codes(cells)
    assert len(set(codes[:8].tolist())) == 8
    assert codes[8] == codes[0]
    floats = grid.column_codes(pd.Series([0.0, -0.0, np.nan, 0.0]))
    assert floats[0] == floats[3] and len({*floats[:3].tolist()}) == 3


def test_codes_of_a_column_of_one_type_tell_apart_what_prints_apart():
    # Python floats in an object column by their bits (as a float column), ints by value
    # (one beyond 64 bits too)
    floats = grid.column_codes(np.array([0.0, -0.0, float("nan"), 0.0, 1.5], dtype=object))
    assert floats[0] == floats[3] and len({*floats[:3].tolist(), floats[4]}) == 4
    ints = grid.column_codes(np.array([1, 2**70, 1, 2], dtype=object))
    assert ints[0] == ints[2] and len(set(ints.tolist())) == 3
    assert grid.column_codes(np.array([], dtype=object)).size == 0


def test_a_failing_row_is_named_even_when_its_group_failed_before(tmp_path):
    # two rows of one run with a cell the setup refuses: each skip reason names its own row
    # (a group's failure is not shared)
    path = DATA / "hybrid_calibration.csv"
    raw = pd.read_csv(path, dtype={"id": str}, low_memory=False).head(1)
    bad = pd.concat([raw.assign(id="first"), raw.assign(id="second")], ignore_index=True)
    bad["ep_overlap"] = "maybe"
    copy = tmp_path / "bad.csv"
    bad.to_csv(copy, index=False)
    frame = load_measurements(copy, CATALOG)
    assert "'first'" in frame["skip"].iloc[0] and "ep_overlap" in frame["skip"].iloc[0]
    assert "'second'" in frame["skip"].iloc[1]


def test_calibrate_fits_the_same_factors_as_with_every_row_its_own_run(monkeypatch):
    """calibrate's least squares over distinct runs = over every row on its own."""
    from fsdpsim.measured import calibrate

    frame = load_measurements(DATA / "hybrid_calibration.csv", CATALOG)
    frame = frame[frame["gpu"] == CATALOG.accelerator("h100").id]
    # every run twice (the second copy measured 10 % faster): runs shared by rows
    frame = pd.concat([frame, frame.assign(id=frame["id"] + "-copy", tokens_per_s_per_gpu=
                                           frame["tokens_per_s_per_gpu"] * 1.1)],
                      ignore_index=True)
    factors = ("matmul_fraction", "hbm_fraction")
    grid_fit = calibrate.fit(frame, CATALOG, ["h100"], factors, check_ceiling=False)

    def per_row(use, catalog):
        return engine_inputs_per_row(use, catalog), np.arange(len(use))

    monkeypatch.setattr(calibrate, "distinct_inputs", per_row)
    row_fit = calibrate.fit(frame, CATALOG, ["h100"], factors, check_ceiling=False)
    assert grid_fit.values == row_fit.values
    assert (grid_fit.before, grid_fit.after, grid_fit.cross_validated, grid_fit.interval) == \
        (row_fit.before, row_fit.after, row_fit.cross_validated, row_fit.interval)
    pd.testing.assert_frame_equal(grid_fit.rows, row_fit.rows)


def test_calibrate_jacobian_in_one_engine_call_fits_as_point_by_point(monkeypatch):
    """The finite-difference points of each Jacobian evaluated in one engine call (least_squares'
    workers) give the fit of evaluating them one by one, bit for bit, in fewer engine calls."""
    from fsdpsim.measured import calibrate

    if not calibrate._HAS_WORKERS:
        pytest.skip("SciPy without least_squares(workers=...)")
    frame = load_measurements(DATA / "hybrid_calibration.csv", CATALOG)
    frame = frame[frame["gpu"] == CATALOG.accelerator("h100").id]
    factors = ("matmul_fraction", "hbm_fraction")
    calls = []
    evaluate = calibrate.engine.evaluate
    monkeypatch.setattr(calibrate.engine, "evaluate", lambda x: calls.append(1) or evaluate(x))
    batched = calibrate.fit(frame, CATALOG, ["h100"], factors, check_ceiling=False)
    n_batched = len(calls)
    monkeypatch.setattr(calibrate, "_HAS_WORKERS", False)
    one_by_one = calibrate.fit(frame, CATALOG, ["h100"], factors, check_ceiling=False)
    assert n_batched < len(calls) - n_batched
    assert batched.values == one_by_one.values
    assert (batched.after, batched.cross_validated, batched.interval) == \
        (one_by_one.after, one_by_one.cross_validated, one_by_one.interval)
    pd.testing.assert_frame_equal(batched.rows, one_by_one.rows)


@pytest.mark.parametrize("plan", [dict(num_gpus=64, gpus_per_node=8, sharding="full"),
                                  dict(num_gpus=32, gpus_per_node=8, sharding="hybrid", tp=2),
                                  dict(num_gpus=8, gpus_per_node=8, sharding="optimizer", tp=4)])
def test_rows_that_differ_in_bus_bandwidth_share_the_rest_of_their_inputs(plan):
    """The grid builds one layout's inputs once and its groups' pinned bus bandwidths apart
    (engine.build.busbw_inputs, the only inputs those enter): the builder's inputs on each
    such system."""
    from fsdpsim.engine.build import busbw_inputs, config_inputs
    from fsdpsim.hardware.system import resolve_system
    from fsdpsim.model.presets import get_model
    from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig

    spec, plan = get_model("llama3-8b"), ParallelPlan(**plan)
    training = TrainingConfig(seq_len=4096, micro_batch=1, recompute="none")
    pinned = [None, {"busbw_allreduce_intra_gbs": 400.0},
              {"busbw_allreduce_inter_gbs": 90.0, "busbw_allgather_inter_gbs": 80.0,
               "busbw_reducescatter_inter_gbs": 70.0},
              {c: 50.0 for c in ("busbw_allreduce_intra_gbs", "busbw_allreduce_inter_gbs",
                                 "busbw_allgather_inter_gbs", "busbw_reducescatter_inter_gbs")}]
    systems = [resolve_system(CATALOG, gpu="h100", gpus_per_node=8, busbw_gbs=p) for p in pinned]
    base = config_inputs(spec, systems[0], plan, training)
    for system in systems[1:]:
        want = config_inputs(spec, system, plan, training)
        got = {**base, **busbw_inputs(system)}
        assert list(got) == list(want)
        np.testing.assert_equal(got, want)
        assert got != base
