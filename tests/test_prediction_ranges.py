"""The 90 % range of ``validate``'s rows: coverage by hand, each widening term where its
condition holds, validate's range is predict's, and the coverage docs/accuracy.md quotes."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from fsdpsim.cli.predict import build_prediction, build_system
from fsdpsim.drivers.interval import (NETWORK_UNSTATED_UNCERTAINTY, PIPELINE_BUBBLE_UNCERTAINTY,
                                      SCALE_WIDENING_PER_DOUBLING, comm_uncertainty,
                                      fit_span_doublings, prediction_interval)
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.hardware.efficiency import TRANSFER_UNCERTAINTY, fit_span_of, resolve
from fsdpsim.hardware.spec import FitSpan
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


@functools.lru_cache(maxsize=None)
def _validated(name: str) -> pd.DataFrame:
    """``validate``'s rows of one calibration file with their ranges (computed once)."""
    return predict_measurements(load_measurements(DATA / f"{name}.csv", CATALOG), CATALOG,
                                intervals=True, measurements=f"{name}.csv")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in DATA.glob("*.csv")))
def test_coverage_quoted_in_accuracy_md_is_validates(name):
    s = summarise(_validated(name))
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
    # 32 GPUs past the 8 that H100's PyTorch BF16 table was fitted on: two doublings
    assert interval["beyond_fit_span"] is True
    assert interval["fit_span_doublings"] == pytest.approx(2.0)
    assert main(["sweep", *flags, "--format", "csv"]) == 0
    row = pd.read_csv(io.StringIO(capsys.readouterr().out)).iloc[0]
    assert bool(row["interval.pipeline_across_nodes"]) and bool(row["interval.beyond_fit_span"])
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


def _fitted_tables():
    """(accelerator, table name, source, span) of every catalog table that records a fit's
    span: the fallback ``[efficiency]`` and the stack tables."""
    out = []
    for ident in CATALOG.ids("accelerator"):
        eff = CATALOG.accelerator(ident).efficiency
        if eff.fit_span is not None:
            out.append((ident, "efficiency", eff.source, eff.fit_span))
        for cls in ("bf16", "fp8"):
            for stack, table in eff.tables.get(cls, {}).items():
                if hasattr(table, "get") and fit_span_of(table) is not None:
                    out.append((ident, f"efficiency.{cls}.{stack}", table["source"],
                                fit_span_of(table)))
    return out


def test_every_fitted_table_records_its_span():
    fitted = re.compile(r"fitted by `fsdpsim calibrate")
    for ident in CATALOG.ids("accelerator"):
        eff = CATALOG.accelerator(ident).efficiency
        tables = [eff.source] + [t["source"] for cls in ("bf16", "fp8")
                                 for t in eff.tables.get(cls, {}).values()
                                 if hasattr(t, "get") and "source" in t]
        spans = [eff.fit_span] + [fit_span_of(t) for cls in ("bf16", "fp8")
                                  for t in eff.tables.get(cls, {}).values()
                                  if hasattr(t, "get") and "source" in t]
        for source, span in zip(tables, spans):
            assert (span is not None) == bool(fitted.search(source)), (ident, source[:80])
    assert len(_fitted_tables()) == 9


@pytest.mark.slow
def test_catalog_span_is_the_span_of_the_rows_its_command_fits():
    """The span each table records is recomputed from the file its calibrate command names,
    with that command's selection (fsdpsim.measured.ranges.fit_span): it cannot drift."""
    from fsdpsim.measured.ranges import fit_span

    loaded = {}
    for ident, name, source, span in _fitted_tables():
        file = re.search(r"--measurements (\S+)", source).group(1)
        path = DATA / Path(file).name
        if path not in loaded:
            loaded[path] = load_measurements(path, CATALOG)
        assert fit_span(source, loaded[path], CATALOG, path.name) == span, (ident, name)


def test_fit_span_doublings_by_hand():
    span = FitSpan(gpus_min=8, gpus_max=8, params_min=1_000_000_000, params_max=8_000_000_000)
    got = fit_span_doublings(np.array([4.0, 8.0, 64.0, 8.0, 8.0, 512.0]),
                             np.array([2e9, 8e9, 2e9, 0.25e9, 64e9, 32e9]), span)
    # fewer GPUs: nothing; 64 = 3 doublings of 8; 0.25B two halvings of 1B; 64B three
    # doublings of 8B; 512 GPUs and 32B: 6 + 2
    assert got.tolist() == pytest.approx([0.0, 0.0, 3.0, 2.0, 3.0, 8.0])


def _h100_system(num_gpus):
    return build_system(SimpleNamespace(obj={"catalog_dirs": ()}), gpu="h100-sxm5-80gb",
                        cluster=None, num_gpus=num_gpus, gpus_per_node=8, network=None,
                        inter_node_gbps_per_gpu=None, power_cap_w=None, placement="packed")


def test_the_scale_term_widens_beyond_the_fit_span_only():
    acc = CATALOG.accelerator("h100-sxm5-80gb")
    eff = resolve(acc, "bf16", "pytorch")  # fitted on 8 GPUs, 1.34B-8.32B (nanotron rows)
    assert eff.fit_span == FitSpan(8, 8, 1_342_244_864, 8_321_765_376)
    lo, hi = eff.interval
    r = SCALE_WIDENING_PER_DOUBLING
    inside = prediction_interval(_values(), _h100_system(8), efficiency=eff,
                                 plan={"num_gpus": 8.0, "n_params": 8e9})
    assert inside["beyond_fit_span"] is False and inside["fit_span_doublings"] == 0.0
    assert inside["tokens_per_s_per_gpu_low"] == pytest.approx(100 * lo)
    assert inside["tokens_per_s_per_gpu_high"] == pytest.approx(100 * hi)
    wide = prediction_interval(_values(), _h100_system(32), efficiency=eff,
                               plan={"num_gpus": 32.0, "n_params": 8e9})  # 2 doublings
    assert wide["beyond_fit_span"] is True and wide["fit_span_doublings"] == pytest.approx(2)
    assert wide["tokens_per_s_per_gpu_low"] == pytest.approx(100 * lo / (1 + r) ** 2)
    assert wide["tokens_per_s_per_gpu_high"] == pytest.approx(100 * hi * (1 + r) ** 2)
    # a table without a recorded span (B200's literature table) and a plan without the scale
    # facts: no term
    b200 = resolve(CATALOG.accelerator("b200"), "bf16", "pytorch")
    assert b200.fit_span is None
    none = prediction_interval(_values(), _h100_system(32), efficiency=b200,
                               plan={"num_gpus": 512.0, "n_params": 70e9})
    assert none["beyond_fit_span"] is False
    no_plan = prediction_interval(_values(), _h100_system(32), efficiency=eff)
    assert no_plan["tokens_per_s_per_gpu_low"] == inside["tokens_per_s_per_gpu_low"]


def test_predict_notes_the_scale_beyond_the_fit():
    from fsdpsim.drivers.interval import fit_span_notes

    eff = resolve(CATALOG.accelerator("h100-sxm5-80gb"), "bf16", "pytorch")
    note, = fit_span_notes(512, 8e9, eff)
    assert note.startswith("GPU count 512 beyond the 8 its h100-sxm5-80gb bf16 pytorch table "
                           "was fitted on: range widened x1.42 on each end")
    assert fit_span_notes(8, 8e9, eff) == [] and fit_span_notes(4, 2e9, eff) == []
    note, = fit_span_notes(8, 70e9, eff)
    assert "model size 70B outside the 1.34-8.32B its" in note


def test_a_span_given_in_part_is_one_clear_error():
    from fsdpsim.util.errors import ConfigError

    with pytest.raises(ConfigError, match="missing fit_params_min, fit_params_max"):
        fit_span_of({"fit_gpus_min": 8, "fit_gpus_max": 8}, "x.toml")
    with pytest.raises(ConfigError, match="a minimum above its maximum"):
        fit_span_of({"fit_gpus_min": 16, "fit_gpus_max": 8, "fit_params_min": 10**9,
                     "fit_params_max": 10**9}, "x.toml")


def test_rate_rule_and_held_out_coverage_by_hand():
    """Two files: A's beyond-span row needs a rate of 0.2 to be covered (2 doublings, measured
    0.6, low end 0.9 / 1.06^2 at the shipped rate), B's is covered at any rate. One vote per
    file: A + B reach 90 % only when both are in; B alone asks for 0."""
    from fsdpsim.measured.ranges import held_out_coverage, widening_rate

    r = SCALE_WIDENING_PER_DOUBLING

    def frame(measured, doublings):
        return pd.DataFrame({"predicted_tokens_per_s_per_gpu": [1.0],
                             "predicted_low": [0.9 / (1 + r) ** doublings],
                             "predicted_high": [1.1 * (1 + r) ** doublings],
                             "tokens_per_s_per_gpu": [measured], "in_sample": [False],
                             "fit_span_doublings": [float(doublings)], "inside": [False]})

    a, b = frame(0.6, 2), frame(1.0, 1)
    # 0.9 / (1 + x)^2 <= 0.6: x >= sqrt(1.5) - 1 = 0.2247 -> 0.23 on the 0.01 grid
    assert widening_rate({"a": a, "b": b}) == 0.23
    assert widening_rate({"b": b}) == 0.0
    held = held_out_coverage({"a": a, "b": b})
    assert held["a"]["rate"] == 0.0 and held["a"]["coverage"] == 0.0
    assert held["b"]["rate"] == 0.23 and held["b"]["coverage"] == 1.0
    assert held["all"]["rows"] == 2 and held["all"]["coverage"] == 0.5


#: docs/accuracy.md's held-out line per file: "| `file.csv` held out | out-of-sample rows |
#: rate | in range % | median width % |", and the line of all five.
_HELD_LINE = re.compile(r"^\| (?:`(?P<file>[a-z_0-9]+)\.csv` held out|all five, each held out) "
                        r"\| (?P<rows>\d+) \| (?P<rate>[0-9.]+|per file) \| (?P<cov>\d+) % \| "
                        r"(?P<width>\d+) % \|", re.M)


@pytest.mark.slow
def test_widening_rate_and_held_out_coverage_quoted_in_accuracy_md():
    """The shipped rate is the rule's choice on the five files, and each file's coverage with
    the rate chosen on the other four is what docs/accuracy.md quotes."""
    from fsdpsim.measured.ranges import held_out_coverage, widening_rate

    frames = {p.stem: _validated(p.stem) for p in sorted(DATA.glob("*.csv"))}
    assert widening_rate(frames) == SCALE_WIDENING_PER_DOUBLING
    held = held_out_coverage(frames)
    text = (ROOT / "docs" / "accuracy.md").read_text()
    quoted = {m["file"] or "all": m for m in _HELD_LINE.finditer(text)}
    assert set(quoted) == set(held)
    for name, got in held.items():
        line = quoted[name]
        assert int(line["rows"]) == got["rows"], name
        if name != "all":
            assert float(line["rate"]) == pytest.approx(got["rate"]), name
        assert int(line["cov"]) == round(100 * got["coverage"]), name
        assert int(line["width"]) == round(100 * got["median_width"]), name


def test_high_end_stays_below_the_gemm_ceiling():
    """However many widening terms apply (a transferred table, a pipeline across nodes, scale
    beyond the fit), the high end's HFU against the format's own peak stays at or below the
    measured GEMM ceiling (H100 BF16 MAMF 0.803), and the prediction stays inside its range;
    without the cap such plans' high ends ran past the dense peak."""
    import json

    from conftest import invoke

    d = json.loads(invoke(
        "predict", "--model", "llama3-405b", "--gpu", "h100", "--num-gpus", "2048",
        "--framework", "megatron", "--plan",
        "zero1-8 × tp8(sp,overlap) × pp32(interleaved, v=4, m=128) · ckpt none · mb 1",
        "--format", "json"))
    i = d["interval"]
    ratio = i["tokens_per_s_per_gpu_high"] / d["tokens_per_s_per_gpu"]
    assert i["beyond_fit_span"] and i["pipeline_across_nodes"]
    assert d["hfu"] * d["mfu_native"] / d["mfu"] * ratio == pytest.approx(0.803, rel=1e-9)
    assert i["tokens_per_s_per_gpu_low"] <= d["tokens_per_s_per_gpu"] <= \
        i["tokens_per_s_per_gpu_high"]
