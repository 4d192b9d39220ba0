"""The 90 % range of ``validate``'s rows: coverage by hand, each widening term where its
condition holds, validate's range is predict's, and the coverage docs/accuracy.md quotes."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from fsdpsim.cli.predict import build_prediction, build_system
from fsdpsim.drivers.interval import (NETWORK_UNSTATED_UNCERTAINTY, PIPELINE_BUBBLE_UNCERTAINTY,
                                      comm_uncertainty, prediction_interval)
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.hardware.efficiency import TRANSFER_UNCERTAINTY, resolve
from fsdpsim.measured.ranges import coverage, coverage_summary
from fsdpsim.measured.rows import spec_for_row
from fsdpsim.measured.stats import summarise
from fsdpsim.measured.validate import load_measurements, predict_measurements

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "validation" / "data"
CATALOG = load_catalog(use_env=False)


def test_coverage_by_hand_on_a_tiny_synthetic_frame():
    # predicted 100 each; ranges 90-110, 80-120, 95-105, 50-150; measured 100, 125, 96, 40
    frame = pd.DataFrame({
        "predicted_tokens_per_s_per_gpu": [100.0] * 4,
        "predicted_low": [90.0, 80.0, 95.0, 50.0],
        "predicted_high": [110.0, 120.0, 105.0, 150.0],
        "tokens_per_s_per_gpu": [100.0, 125.0, 96.0, 40.0],
        "in_sample": [True, False, False, False]})
    frame["inside"] = [True, False, True, False]  # as add_intervals decides it
    cov = coverage(frame)
    assert cov["coverage"] == 0.5  # 2 of 4
    assert cov["median_width"] == pytest.approx(0.3)  # widths 0.2, 0.4, 0.1, 1.0
    parts = coverage_summary(frame)
    assert parts["in_sample"] == {"rows": 1, "coverage": 1.0, "median_width": pytest.approx(0.2)}
    assert parts["out_of_sample"]["rows"] == 3
    assert parts["out_of_sample"]["coverage"] == pytest.approx(1 / 3)
    assert parts["out_of_sample"]["median_width"] == pytest.approx(0.4)


def test_validate_marks_inside_from_its_own_range_and_summarises_it():
    rows = predict_measurements(load_measurements(DATA / "published_calibration.csv", CATALOG),
                                CATALOG, intervals=True,
                                measurements="published_calibration.csv")
    measured = rows["tokens_per_s_per_gpu"]
    expect = (measured >= rows["predicted_low"]) & (measured <= rows["predicted_high"])
    assert (rows["inside"] == expect).all()
    assert (rows["predicted_low"] < rows["predicted_tokens_per_s_per_gpu"]).all()
    assert (rows["predicted_high"] > rows["predicted_tokens_per_s_per_gpu"]).all()
    s = summarise(rows)
    assert s["coverage"] == pytest.approx(expect.mean())
    # MosaicML's A100 FSDP rows fitted the A100 factors; Megatron's SC21 rows did not
    mosaic = rows["source_key"] == "mosaicml_llmfoundry"
    assert rows.loc[mosaic, "in_sample"].all() and not rows.loc[~mosaic, "in_sample"].any()
    assert s["rows_out_of_sample"] == int((~mosaic).sum())


def test_an_unnamed_network_widens_the_fabric_uncertainty_on_several_nodes_only():
    x = {"num_gpus": np.array([16.0, 16.0, 8.0]), "gpus_per_node": np.array([8.0, 8.0, 8.0]),
         "nic_uncertainty": np.array([0.10, 0.10, 0.10]),
         "network_stated": np.array([1.0, 0.0, 0.0])}
    u_fab, _ = comm_uncertainty(x)
    assert NETWORK_UNSTATED_UNCERTAINTY == 0.30
    assert u_fab.tolist() == pytest.approx([0.10, 0.30, 0.0])


def _values(**extra):
    return {"tokens_per_s_per_gpu": 100.0, "tokens_per_s": 800.0, "step_time_s": 1.0,
            "mfu": 0.4, **extra}


def test_a_pipeline_across_nodes_widens_by_its_bubble_share():
    system = build_system(SimpleNamespace(obj={"catalog_dirs": ()}), gpu="a100-sxm4-80gb",
                          cluster=None, num_gpus=32, gpus_per_node=8, network=None,
                          inter_node_gbps_per_gpu=200.0, power_cap_w=None, placement="packed")
    eff = system.accelerator.efficiency
    base = prediction_interval(_values(bubble_s=0.2), system,
                               plan={"pp": 4.0, "pp_per_node": 4.0})  # stages on one node
    assert base["pipeline_across_nodes"] is False
    assert base["tokens_per_s_per_gpu_low"] == pytest.approx(100 * eff.throughput_ratio_p05)
    wide = prediction_interval(_values(bubble_s=0.2), system,
                               plan={"pp": 4.0, "pp_per_node": 2.0})
    assert wide["pipeline_across_nodes"] is True
    assert PIPELINE_BUBBLE_UNCERTAINTY == 1.0
    # bubble share 0.2: low x 1 / 1.2, high x 1 / 0.8
    assert wide["tokens_per_s_per_gpu_low"] == pytest.approx(100 * eff.throughput_ratio_p05 / 1.2)
    assert wide["tokens_per_s_per_gpu_high"] == pytest.approx(100 * eff.throughput_ratio_p95 / 0.8)
    no_plan = prediction_interval(_values(bubble_s=0.2), system)
    assert no_plan["tokens_per_s_per_gpu_low"] == base["tokens_per_s_per_gpu_low"]


def test_a100_stacks_other_than_pytorch_bf16_are_transferred_and_widen():
    acc = CATALOG.accelerator("a100-sxm4-80gb")
    own, other = resolve(acc, "bf16", "pytorch"), resolve(acc, "fp16", "megatron-lm")
    assert not own.transferred and other.transferred
    assert dict(own.values) == dict(other.values)  # the same fractions: the prediction is kept
    system = build_system(SimpleNamespace(obj={"catalog_dirs": ()}), gpu="a100-sxm4-80gb",
                          cluster=None, num_gpus=8, gpus_per_node=8, network=None,
                          inter_node_gbps_per_gpu=None, power_cap_w=None, placement="packed")
    eff = acc.efficiency
    a = prediction_interval(_values(), system, efficiency=own)
    b = prediction_interval(_values(), system, efficiency=other)
    assert a["tokens_per_s_per_gpu_low"] == pytest.approx(100 * eff.throughput_ratio_p05)
    assert b["efficiency_transferred"] is True
    assert b["tokens_per_s_per_gpu_low"] == pytest.approx(
        100 * min(eff.throughput_ratio_p05 * (1 - TRANSFER_UNCERTAINTY), 0.70))
    assert b["tokens_per_s_per_gpu_high"] == pytest.approx(
        100 * max(eff.throughput_ratio_p95 * (1 + TRANSFER_UNCERTAINTY), 1.10))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["published_calibration", "hybrid_calibration"])
def test_validates_range_is_predicts_interval(name):
    from test_validate_is_predict import predict_options

    rows = predict_measurements(load_measurements(DATA / f"{name}.csv", CATALOG), CATALOG,
                                intervals=True, measurements=f"{name}.csv")
    ctx = SimpleNamespace(obj={"catalog_dirs": ()})
    sample = rows.iloc[np.linspace(0, len(rows) - 1, 25).round().astype(int)]
    for _, row in sample.iterrows():
        options = predict_options(row)
        system = build_system(ctx, **options)
        p = build_prediction(ctx, system=system, spec=spec_for_row(row), advice=False, **options)
        assert p.interval["tokens_per_s_per_gpu_low"] == pytest.approx(
            row["predicted_low"], rel=1e-6), (name, row["id"])
        assert p.interval["tokens_per_s_per_gpu_high"] == pytest.approx(
            row["predicted_high"], rel=1e-6), (name, row["id"])


#: docs/accuracy.md's table line per file: "| file | rows | coverage % | out-of-sample rows |
#: out-of-sample coverage % | median width % |".
_DOC_LINE = re.compile(r"^\| `(?P<file>[a-z_0-9]+)\.csv` \| (?P<rows>\d+) \| (?P<cov>\d+) % \| "
                       r"(?P<oos_rows>\d+) \| (?P<oos>\d+) % \| (?P<width>\d+) % \|", re.M)


def _quoted() -> dict[str, dict[str, int]]:
    text = (ROOT / "docs" / "accuracy.md").read_text()
    return {m["file"]: {k: int(m[k]) for k in ("rows", "cov", "oos_rows", "oos", "width")}
            for m in _DOC_LINE.finditer(text)}


def test_accuracy_md_quotes_every_calibration_file():
    assert set(_quoted()) == {p.stem for p in DATA.glob("*.csv")}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in DATA.glob("*.csv")))
def test_coverage_quoted_in_accuracy_md_is_validates(name):
    rows = predict_measurements(load_measurements(DATA / f"{name}.csv", CATALOG), CATALOG,
                                intervals=True, measurements=f"{name}.csv")
    s = summarise(rows)
    quoted = _quoted()[name]
    assert quoted["rows"] == s["rows"]
    assert quoted["cov"] == round(100 * s["coverage"])
    assert quoted["oos_rows"] == s["rows_out_of_sample"]
    assert quoted["oos"] == round(100 * s["coverage_out_of_sample"])
    assert quoted["width"] == round(100 * s["median_width"])


@pytest.mark.slow
def test_sweep_gives_predicts_range_for_a_pipeline_across_nodes(capsys):
    import io
    import json

    from fsdpsim.cli import main

    flags = ["--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "32", "--gpus-per-node", "8",
             "--pp", "8", "--tp", "1", "--seq-len", "4096", "--global-batch", "256",
             "--micro-batch", "1", "--recompute", "none", "--sharding", "none"]
    assert main(["predict", *flags, "--format", "json"]) == 0
    interval = json.loads(capsys.readouterr().out)["interval"]
    assert interval["pipeline_across_nodes"] is True
    assert main(["sweep", *flags, "--format", "csv"]) == 0
    row = pd.read_csv(io.StringIO(capsys.readouterr().out)).iloc[0]
    assert bool(row["interval.pipeline_across_nodes"])
    for end in ("low", "high"):
        assert row[f"interval.tokens_per_s_per_gpu_{end}"] == pytest.approx(
            interval[f"tokens_per_s_per_gpu_{end}"], rel=1e-9)


def test_in_sample_follows_the_fitting_commands_selection():
    from fsdpsim.measured.ranges import fitted_on

    source = ("fitted by `fsdpsim calibrate --measurements hopper_bf16_nanotron.csv --gpu h100 "
              "--framework '' --factor matmul_fraction --where 'n_gpus == 8 and pp == 1'`")
    row = dict(gpu="h100-sxm5-80gb", n_gpus=8, pp=1)
    assert fitted_on(source, pd.DataFrame([row]), CATALOG, "data/hopper_bf16_nanotron.csv")
    assert not fitted_on(source, pd.DataFrame([row]), CATALOG, "other.csv")  # another file
    assert not fitted_on(source, pd.DataFrame([{**row, "n_gpus": 16}]), CATALOG,
                         "hopper_bf16_nanotron.csv")  # outside --where
    assert not fitted_on(source, pd.DataFrame([{**row, "gpu": "a100-sxm4-80gb"}]), CATALOG,
                         "hopper_bf16_nanotron.csv")  # not a --gpu
    assert not fitted_on(source, pd.DataFrame([{"gpu": "h100-sxm5-80gb"}]), CATALOG,
                         "hopper_bf16_nanotron.csv")  # the --where columns missing
    megatron = ("fitted by `fsdpsim calibrate --measurements validation/data/hybrid_calibration.csv "
                "--gpu gb200 --factor matmul_fraction --framework megatron`")
    nemo = dict(gpu="gb200", framework="NeMo Megatron-Bridge 25.09 container (Megatron-Core)")
    assert fitted_on(megatron, pd.DataFrame([nemo]), CATALOG, "hybrid_calibration.csv")
    assert not fitted_on(megatron, pd.DataFrame([{**nemo, "framework": "InternEvo"}]), CATALOG,
                         "hybrid_calibration.csv")


def test_in_sample_of_many_rows_at_once_is_each_rows_own():
    """fitted_rows (every row at once) = fitted_on of each row as a one-row frame: rows in and
    out of --gpu and --where, and a --where some rows cannot be evaluated on (then row by row,
    where the rows that lack the column are not selected)."""
    from fsdpsim.measured.ranges import fitted_on, fitted_rows

    source = ("fitted by `fsdpsim calibrate --measurements hopper_bf16_nanotron.csv --gpu h100 "
              "--framework '' --factor matmul_fraction --where 'n_gpus == 8 and pp == 1'`; "
              "a100 fitted by `fsdpsim calibrate --measurements hopper_bf16_nanotron.csv --gpu "
              "a100 --framework '' --where 'n_gpus == 16'`")
    rows = pd.DataFrame([dict(gpu=g, n_gpus=n, pp=p) for g in ("h100-sxm5-80gb",
                                                                "a100-sxm4-80gb", "b200")
                         for n in (8, 16) for p in (1, 2)])
    want = [fitted_on(source, rows.iloc[[k]], CATALOG, "hopper_bf16_nanotron.csv")
            for k in range(len(rows))]
    got = fitted_rows(source, rows, CATALOG, "hopper_bf16_nanotron.csv").tolist()
    assert got == want and sum(got) == 1 + 2  # h100 on 8 GPUs without PP; a100 on 16
    assert not fitted_rows(source, rows, CATALOG, "other.csv").any()
    # a --where that cannot be evaluated (text methods on a number column), named first: no
    # row is in-sample, as for each row on its own
    unreadable = ("fitted by `fsdpsim calibrate --measurements hopper_bf16_nanotron.csv --gpu "
                  "a100 --where 'n_gpus.str.len() == 2'`; " + source)
    assert not fitted_rows(unreadable, rows, CATALOG, "hopper_bf16_nanotron.csv").any()
    assert fitted_rows(unreadable, rows, CATALOG, "hopper_bf16_nanotron.csv").tolist() == [
        fitted_on(unreadable, rows.iloc[[k]], CATALOG, "hopper_bf16_nanotron.csv")
        for k in range(len(rows))]
