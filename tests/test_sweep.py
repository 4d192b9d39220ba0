"""``fsdpsim sweep``: grid parsing, the model ladder, economics, the vectorised sweep (equal to
``predict`` on every field), ``--best``, infeasible rows, the CLI contract and the benchmark.

Error tests go through :func:`fsdpsim.cli.main` (one line on stderr, exit 2); output tests
through click's ``CliRunner``.
"""

from __future__ import annotations

from conftest import assert_one_line_error, invoke, load_script, run, sweep

import importlib.util
import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from fsdpsim.cli import sweep as cli_sweep
from fsdpsim.cli import cli
from fsdpsim.costs import economics
from fsdpsim.util.errors import ConfigError
from fsdpsim.drivers.sweep.grid import build_grid, read_grid_file
from fsdpsim.drivers.sweep.values import parse_counts, parse_prices, parse_sizes
from fsdpsim.model.ladder import (FFN_MULTIPLE, HEAD_DIM, KV_HEADS, _layer_and_fixed_params,
                                  ladder_model)
from fsdpsim.plan.parallel import SHARDINGS, ParallelPlan, TrainingConfig
from fsdpsim.plan.training import default_global_batch
from fsdpsim.drivers.predict import AUTO_MICRO_BATCHES, predict
from fsdpsim.model.presets import get_model
from fsdpsim.report.render import flatten
from fsdpsim.drivers.sweep.run import run_sweep
from fsdpsim.hardware.system import resolve_system

ROOT = Path(__file__).resolve().parent.parent


def same(a, b) -> bool:
    """Exact equality; None (predict) matches a missing value (sweep)."""
    missing = lambda v: v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))  # noqa: E731
    if missing(a) or missing(b):
        return missing(a) and missing(b)
    return a == b


# -- grid values ---------------------------------------------------------------------------------
def test_count_ranges_are_powers_of_two_between_the_ends():
    assert parse_counts("8..4096", "--num-gpus") == [2**k for k in range(3, 13)]
    assert parse_counts("24..100", "--num-gpus") == [24, 32, 64, 100]
    assert parse_counts(["8", "16,8", 64], "--num-gpus") == [8, 16, 64]
    assert parse_counts("4k", "--seq-len") == [4096]  # k = 1,024 for sequence lengths
    assert parse_counts("1k..32k", "--seq-len") == [2**k for k in range(10, 16)]
    assert parse_counts("8..8", "--num-gpus") == [8]


@pytest.mark.parametrize("text", ["8..4", "0", "-8", "x", "8..", "1.5", ""])
def test_bad_counts_raise(text):
    with pytest.raises(ConfigError):
        parse_counts(text, "--num-gpus")


def test_model_size_range_is_a_125_series():
    assert parse_sizes("1b..1t") == [1e9, 2e9, 5e9, 1e10, 2e10, 5e10, 1e11, 2e11, 5e11, 1e12]
    assert parse_sizes("3b..70b") == [3e9, 5e9, 1e10, 2e10, 5e10, 7e10]
    with pytest.raises(ConfigError, match="empty"):
        parse_sizes("1t..1b")


def test_prices(cat):
    assert parse_prices("h100=2.5/h,b200=$6", cat) == {"h100-sxm5-80gb": 2.5, "b200": 6.0}
    assert parse_prices({"mi300x": 3}, cat) == {"mi300x": 3.0}
    for bad in ("nogpu=2", "h100=abc", "h100", "h100=-1"):
        with pytest.raises(ConfigError, match="--price"):
            parse_prices(bad, cat)


def test_grid_file(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('model = ["llama3-8b"]\nnum_gpus = "8..32"\nbest = true\n')
    assert read_grid_file(path) == {"model": ["llama3-8b"], "num-gpus": "8..32", "best": True}
    path.write_text('modell = "llama3-8b"\n')
    with pytest.raises(ConfigError, match=r"unknown key 'modell'; accepted: model, model-sizes"):
        read_grid_file(path)
    path.write_text("model = [\n")
    with pytest.raises(ConfigError, match="malformed TOML"):
        read_grid_file(path)
    with pytest.raises(ConfigError, match="does not exist"):
        read_grid_file(tmp_path / "missing.toml")


# -- model ladder --------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [3e8, 1e9, 2e9, 7e9, 8e9, 13e9, 34e9, 70e9, 175e9, 405e9, 1e12,
                                  5e12])
def test_ladder_sizes_within_ten_percent(size):
    spec = ladder_model(size)
    assert abs(spec.n_params / size - 1) <= 0.10
    # The shape rule: heads of 128, GQA 8 (or MHA below 8 heads), SwiGLU 8/3·d rounded to 256.
    assert spec.head_size == HEAD_DIM and spec.ffn_kind == "swiglu"
    assert spec.kv_heads == min(KV_HEADS, spec.n_heads)
    assert spec.ffn_size % FFN_MULTIPLE == 0 and 0 <= spec.ffn_size - 8 * spec.d_model / 3 < 256
    assert spec.vocab_size == 128256 and not spec.tied_embeddings
    if size >= 2e9:
        assert 50 <= spec.d_model / spec.n_layers <= 200  # aspect ratio near 128


def test_ladder_count_formula_matches_the_spec():
    for size in (1e9, 70e9, 1e12):
        spec = ladder_model(size)
        per_layer, fixed = _layer_and_fixed_params(np.array([spec.d_model]))
        assert spec.n_layers * per_layer[0] + fixed[0] == spec.n_params


def test_ladder_llama3_like_at_8b_and_405b():
    """Close to the published shapes it is modelled on (Llama 3 Table 3)."""
    assert ladder_model(8e9).d_model == 4096
    assert ladder_model(405e9).n_layers in range(110, 140)


def test_ladder_too_small():
    with pytest.raises(ConfigError, match="outside the ladder"):
        ladder_model(1e7)


# -- economics -----------------------------------------------------------------------------------
def test_economics_hand_worked():
    # 64 GPUs at $2.5/h and 700 W delivering 649,212 tokens/s:
    # cost = 2.5/3600 · 64 / 649,212 = 6.8459e-8 USD/token = $0.068459 per million tokens;
    # energy = 700 · 64 / 649,212 = 0.069007 J/token; with PUE 1.2: 0.082808 J/token.
    usd = economics.cost_per_token_usd(2.5 / 3600, 64, 649_212)
    assert usd * 1e6 == pytest.approx(0.068459, rel=1e-4)
    assert economics.energy_per_token_j(700, 64, 649_212) == pytest.approx(0.069007, rel=1e-4)
    assert economics.energy_per_token_j(700, 64, 649_212, 1.2) == pytest.approx(0.082808, rel=1e-4)
    # 15T tokens at 1M tokens/s: 1.5e7 s (173.6 days); cost and energy scale with tokens.
    assert economics.time_to_train_s(15e12, 1e6) == pytest.approx(1.5e7)
    assert economics.training_cost_usd(15e12, 1.0, 100, 1e6) == pytest.approx(1.5e9)
    assert economics.training_energy_j(1e6, 700, 8, 1e3) == pytest.approx(5.6e6)


def test_economics_scalar_array_series_agree():
    tps = np.array([1e5, 2e5, 4e5])
    arr = economics.cost_per_token_usd(1e-3, 8, tps)
    ser = economics.cost_per_token_usd(1e-3, 8, pd.Series(tps))
    for i, t in enumerate(tps):
        assert economics.cost_per_token_usd(1e-3, 8, t) == arr[i] == np.asarray(ser)[i]


# -- the sweep equals predict ----------------------------------------------------------------------
POINTS = [  # (sweep options, predict arguments): fixed micro-batch and recompute
    ({"model": "llama3-8b", "gpu": "h100", "num_gpus": "64", "micro_batch": "2",
      "recompute": "none"}, ("llama3-8b", "h100", 64, "full", dict(micro_batch=2, recompute="none"))),
    ({"model": "llama3-70b", "gpu": "b200", "num_gpus": "32", "micro_batch": "1",
      "recompute": "selective", "sharding": "hybrid", "global_batch": "256", "seq_len": "8192"},
     ("llama3-70b", "b200", 32, "hybrid",
      dict(micro_batch=1, recompute="selective", global_batch=256, seq_len=8192))),
    ({"model": "mixtral-8x7b", "gpu": "mi300x", "num_gpus": "16", "micro_batch": "2",
      "recompute": "full", "sharding": "optimizer", "precision": "fp8"},
     ("mixtral-8x7b", "mi300x", 16, "optimizer", dict(micro_batch=2, recompute="full",
                                                      precision="fp8"))),
    ({"model": "gpt3-1.3b", "gpu": "a100", "num_gpus": "8", "micro_batch": "4",
      "recompute": "none", "sharding": "none", "seq_len": "2048"},
     ("gpt3-1.3b", "a100", 8, "none", dict(micro_batch=4, recompute="none", seq_len=2048))),
    ({"model": "llama3-8b", "gpu": "h100", "num_gpus": "4", "micro_batch": "1",
      "recompute": "full", "sharding": "grad_op", "inter_node_gbps_per_gpu": "100"},
     ("llama3-8b", "h100", 4, "grad_op", dict(micro_batch=1, recompute="full"))),
    ({"model": "llama3-8b", "gpu": "h100", "num_gpus": "64", "micro_batch": "2",
      "recompute": "full", "global_batch": "512", "grad_sync": "last",
      "keep_params_gathered": "true"},
     ("llama3-8b", "h100", 64, "full", dict(micro_batch=2, recompute="full", global_batch=512),
      dict(grad_sync="last", keep_gathered=True))),
    ({"model": "llama3-8b", "gpu": "h100", "num_gpus": "32", "micro_batch": "1",
      "recompute": "selective", "tp": "2", "cp": "2", "seq_len": "16384", "global_batch": "64"},
     ("llama3-8b", "h100", 32, "full",
      dict(micro_batch=1, recompute="selective", seq_len=16384, global_batch=64),
      dict(tp=2, cp=2))),
    ({"model": "llama3-70b", "gpu": "h100", "num_gpus": "64", "micro_batch": "1",
      "recompute": "full", "tp": "8", "sharding": "optimizer", "tp_overlap": "true"},
     ("llama3-70b", "h100", 64, "optimizer", dict(micro_batch=1, recompute="full"),
      dict(tp=8, tp_overlap=True))),
    ({"model": "llama3-8b", "gpu": "h100", "num_gpus": "32", "micro_batch": "2",
      "recompute": "op-selective", "tp": "2", "seq_len": "8192", "global_batch": "64"},
     ("llama3-8b", "h100", 32, "full",
      dict(micro_batch=2, recompute="op-selective", seq_len=8192, global_batch=64),
      dict(tp=2))),
]


def _predict(cat, model, gpu, num_gpus, sharding, training, plan_kw=None, **system):
    sysm = resolve_system(cat, gpu=gpu, **system)
    plan = ParallelPlan(num_gpus=num_gpus, gpus_per_node=sysm.gpus_per_node, sharding=sharding,
                        **(plan_kw or {}))
    training = {"seq_len": 4096, **training}
    if "global_batch" not in training:  # every command's default batch
        training["global_batch"] = default_global_batch(
            training["seq_len"], plan.dp * (training.get("micro_batch") or 1))
    return predict(get_model(model), sysm, plan, TrainingConfig(**training))


@pytest.mark.parametrize("options, args", POINTS)
def test_sweep_row_equals_predict_exactly(cat, options, args):
    frame = sweep(cat, **options)
    assert len(frame) == 1
    row = frame.iloc[0].to_dict()
    system = ({"inter_node_gbps_per_gpu": float(options["inter_node_gbps_per_gpu"])}
              if "inter_node_gbps_per_gpu" in options else {})
    expected = flatten(_predict(cat, *args, **system).to_dict())
    compared = [k for k in expected if not k.startswith("chosen") and k not in ("notes", "advice", "fit_advice")]
    assert len(compared) > 60
    diffs = {k: (expected[k], row[k]) for k in compared if not same(expected[k], row[k])}
    assert not diffs
    assert row["step_time_s"] == expected["step_time_s"]  # exact, not approximately


def test_free_knobs_choose_what_predict_chooses(cat):
    frame = sweep(cat, model="llama3-8b,llama3-70b", gpu="h100,b200", num_gpus="8,64",
                  global_batch="none,512")
    assert len(frame) == 16 and (frame["candidates"] > 1).all()
    for row in frame.to_dict("records"):
        gb = None if row["candidates"] == 27 else 512  # 9 micro-batches x 3 without a batch
        p = _predict(cat, row["model"], row["gpu"], int(row["plan.num_gpus"]), "full",
                     {"global_batch": gb}).to_dict()
        assert row["training.micro_batch"] == p["training"]["micro_batch"]
        assert row["training.recompute"] == p["training"]["recompute"]
        assert row["step_time_s"] == p["step_time_s"]
        assert bool(row["fits"]) == p["fits"]


def test_learned_positions_grow_with_the_sequence_as_in_the_cli(cat):
    frame = sweep(cat, model="mpt-7b", gpu="a100", num_gpus="16", seq_len="8192",
                  micro_batch="1", recompute="none")
    spec = get_model("mpt-7b").with_seq_len(8192)
    assert frame["n_params"].iloc[0] == spec.n_params
    sysm = resolve_system(cat, gpu="a100")
    p = predict(spec, sysm, ParallelPlan(num_gpus=16, gpus_per_node=8),
                TrainingConfig(seq_len=8192, micro_batch=1, recompute="none",
                               global_batch=default_global_batch(8192, 16)))
    assert frame["step_time_s"].iloc[0] == p.step_time_s


def test_best_picks_the_fastest_fitting_row(cat):
    common = dict(model="llama3-8b,llama3-70b", gpu="h100,mi300x", num_gpus="8,32")
    # --best under the default framework (torchtitan's FSDP2) frees what torchtitan runs:
    # FSDP2, HSDP or DDP, and no, op-level selective or full recompute
    every = sweep(cat, **common, sharding="full,hybrid,none",
                  micro_batch=",".join(map(str, AUTO_MICRO_BATCHES)),
                  recompute="none,op-selective,full", free_batch=True)
    best = sweep(cat, **common, best=True, free_batch=True)  # as many rows as `every`
    assert len(every) == 8 * 3 * 9 * 3 and len(best) == 8
    keys = ["model", "gpu", "plan.num_gpus"]
    fitting = every[every["fits"]].astype({"model": str, "gpu": str})
    # predict's rule (engine.choice_rank): the fastest with memory headroom, else the fastest.
    roomy = fitting["memory.peak_bytes"] <= 0.9 * fitting["memory.capacity_bytes"]
    ranked = fitting.assign(tier=np.where(roomy, 0, 1), speed=-fitting["tokens_per_s"])
    fastest = ranked.sort_values(["tier", "speed"], kind="stable").groupby(keys).head(1)
    for row in best.astype({"model": str, "gpu": str}).to_dict("records"):
        match = fastest[(fastest["model"] == row["model"]) & (fastest["gpu"] == row["gpu"])
                        & (fastest["plan.num_gpus"] == row["plan.num_gpus"])]
        if match.empty:  # nothing fits: the smallest memory footprint, flagged
            assert not row["fits"] and row["infeasible"].startswith("does not fit")
            continue
        want = match.iloc[0]
        assert row["tokens_per_s"] == want["tokens_per_s"]
        assert (row["plan.sharding"], row["training.micro_batch"], row["training.recompute"]) == (
            want["plan.sharding"], want["training.micro_batch"], want["training.recompute"])
        assert row["candidates"] == 3 * 9 * 3
        assert row["candidates_fitting"] == len(fitting[(fitting["model"] == row["model"])
                                                        & (fitting["gpu"] == row["gpu"])
                                                        & (fitting["plan.num_gpus"]
                                                           == row["plan.num_gpus"])])


def test_infeasible_rows_carry_a_reason(cat):
    frame = sweep(cat, model="llama3-70b", gpu="a100,h100", num_gpus="4,12,16",
                  precision="bf16,fp8", global_batch="48", micro_batch="5", recompute="full")
    by = {(r["gpu"], r["plan.num_gpus"], r["training.precision"]): r
          for r in frame.to_dict("records")}
    assert "not a multiple of gpus_per_node(8)" in by[("h100-sxm5-80gb", 12, "bf16")]["infeasible"]
    assert "precision 'fp8' is not available" in by[("a100-sxm4-80gb", 16, "fp8")]["infeasible"]
    assert "does not split into micro-batches of 5" in by[("h100-sxm5-80gb", 16, "bf16")]["infeasible"]
    assert "not divisible by the data-parallel degree" not in str(by[("h100-sxm5-80gb", 4, "bf16")])
    invalid = frame[frame["infeasible"].notna() & frame["step_time_s"].isna()]
    assert len(invalid) == len(frame) - frame["step_time_s"].notna().sum()
    assert not invalid["fits"].any() and invalid["cost_usd_per_million_tokens"].isna().all()
    # No global batch that splits: 48 / 16 = 3 per GPU is not a multiple of 5.
    frame = sweep(cat, model="llama3-8b", gpu="h100", num_gpus="32", global_batch="48")
    assert "not divisible by the data-parallel degree (32)" in frame["infeasible"].iloc[0]


def test_points_that_do_not_fit_keep_their_prediction(cat):
    frame = sweep(cat, model="llama3-70b", gpu="h100", num_gpus="8", micro_batch="1",
                  recompute="full")
    row = frame.iloc[0]
    assert not row["fits"] and row["step_time_s"] > 0 and row["bottleneck"] == "memory_capacity"
    assert row["infeasible"].startswith("does not fit: peak")
    assert math.isnan(row["cost_usd_per_million_tokens"])


def test_cluster_size_limits_the_gpu_count(cat):
    frame = sweep(cat, cluster="eos", model="llama3-8b", num_gpus="4096,8192")
    assert pd.isna(frame["infeasible"].iloc[0])
    assert frame["infeasible"].iloc[1] == "num_gpus(8192) is more than cluster eos has (4608)"
    assert frame["step_time_s"].iloc[1] > 0


def test_cost_energy_and_training_columns(cat):
    frame = sweep(cat, model="llama3-8b", gpu="h100", num_gpus="64", tokens="15t", pue="1.2",
                  price="h100=2/h")
    r = frame.iloc[0]
    tps = r["tokens_per_s"]
    assert r["price_usd_per_gpu_hour"] == 2.0 and r["tdp_w"] == 700
    assert r["cost_usd_per_million_tokens"] == pytest.approx(1e6 * 2 / 3600 * 64 / tps)
    assert r["energy_kwh_per_million_tokens"] == pytest.approx(1e6 * 700 * 64 * 1.2 / tps / 3.6e6)
    assert r["train_time_s"] == pytest.approx(15e12 / tps)
    assert r["train_cost_usd"] == pytest.approx(15e12 / 1e6 * r["cost_usd_per_million_tokens"])
    assert r["train_energy_kwh"] == pytest.approx(15e6 * r["energy_kwh_per_million_tokens"])
    catalog_price = sweep(cat, model="llama3-8b", gpu="h100", num_gpus="64")
    h100 = cat.accelerator("h100")
    assert catalog_price["price_usd_per_gpu_hour"].iloc[0] == h100.rent_usd_per_hour
    assert catalog_price["price_source"].iloc[0] == h100.price_source  # traceable to the catalog


def test_ceilings_off_leaves_them_empty_and_changes_nothing_else(cat):
    on = sweep(cat, model="llama3-8b", gpu="h100", num_gpus="8,64", best=True)
    off = sweep(cat, model="llama3-8b", gpu="h100", num_gpus="8,64", best=True, ceilings=False)
    assert off["thresholds.max_micro_batch"].isna().all() and on["thresholds.max_seq_len"].notna().all()
    pd.testing.assert_series_equal(on["step_time_s"], off["step_time_s"])


def test_thousand_point_sweep(cat):
    """864 points, every one answered (its wall time, < 30 s, is checked by
    ``benchmarks/check_timings.py``, not here: a timing flakes on a loaded machine)."""
    grid = build_grid(cat, {"model-sizes": "1b..500b", "gpu": "h100,b200,mi300x",
                            "num-gpus": "8..1024", "inter-node-gbps-per-gpu": "50,100,200,400",
                            "best": True})
    assert grid.n_points == 9 * 3 * 8 * 4
    frame = run_sweep(grid)
    assert len(frame) == grid.n_points and frame["fits"].sum() > 200
    # More inter-node bandwidth never makes a point slower: memory does not depend on it, so
    # the fastest fitting candidate is a maximum of functions that each do not decrease.
    f = frame[frame["fits"]].astype({"model": str, "gpu": str})
    for _, g in f.groupby(["model", "gpu", "plan.num_gpus"]):
        tps = g.sort_values("inter_node_gbps_per_gpu")["tokens_per_s"].to_numpy()
        assert (np.diff(tps) >= -1e-12 * tps.max()).all()


def test_empty_or_inconsistent_grid_is_an_error(cat):
    for options in ({"num-gpus": "8..4"}, {"sharding": "auto,full"}, {"model": "llama3-8b,llama3-8b"},
                    {"gpu": "nope"}, {"precision": "fp9"}, {"pue": "0.5"}, {"tokens": "-1"},
                    {"bogus": 1}):
        with pytest.raises(ConfigError):
            build_grid(cat, options)


# -- the command line ----------------------------------------------------------------------------
def test_cli_csv_has_every_predict_field():
    text = invoke("sweep", "--model", "llama3-8b", "--num-gpus", "8,64", "--micro-batch", "2",
                  "--recompute", "none", "--format", "csv")
    frame = pd.read_csv(io.StringIO(text))
    p = json.loads(invoke("predict", "--model", "llama3-8b", "--num-gpus", "64", "--micro-batch",
                          "2", "--recompute", "none", "--format", "json"))
    flat = {k: v for k, v in flatten(p).items()
            if not k.startswith("chosen") and k not in ("notes", "advice", "fit_advice")}
    assert set(flat) <= set(frame.columns)
    assert frame["step_time_s"].iloc[1] == p["step_time_s"]  # CSV keeps every digit
    assert "infeasible" in frame.columns and len(frame) == 2


def test_cli_json_equals_predict_json():
    rows = json.loads(invoke("sweep", "--model", "llama3-70b", "--gpu", "b200", "--num-gpus",
                             "16", "--best", "--format", "json"))
    assert len(rows) == 1
    row = rows[0]
    p = json.loads(invoke("predict", "--model", "llama3-70b", "--gpu", "b200", "--num-gpus",
                          "16", "--sharding", row["plan.sharding"], "--micro-batch",
                          str(row["training.micro_batch"]), "--recompute",
                          row["training.recompute"], "--global-batch",
                          str(row["training.global_batch"]), "--format", "json"))
    assert row["training.global_batch"] == 1024  # --best: about 4M tokens of 4,096
    for key, value in flatten(p).items():
        if not key.startswith("chosen") and key not in ("notes", "advice", "fit_advice"):
            assert row[key] == value, key


def test_default_precision_per_gpu_is_consistent_with_predict():
    """--precision not given: each GPU row runs its own default (fp16 on the V100, which has
    no bf16; bf16 on the H100) in sweep as in predict, field for field; a given --precision
    still applies to every row."""
    rows = json.loads(invoke("sweep", "--model", "gpt3-1.3b", "--gpu", "h100,v100",
                             "--num-gpus", "16", "--micro-batch", "2", "--recompute", "none",
                             "--format", "json"))
    assert [r["training.precision"] for r in rows] == ["bf16", "fp16"]
    for row in rows:
        assert row["infeasible"] is None
        p = json.loads(invoke("predict", "--model", "gpt3-1.3b", "--gpu", row["gpu"],
                              "--num-gpus", "16", "--micro-batch", "2", "--recompute", "none",
                              "--format", "json"))
        for key, value in flatten(p).items():
            if not key.startswith("chosen") and key not in ("notes", "advice", "fit_advice"):
                assert row[key] == value, (row["gpu"], key)
    given = json.loads(invoke("sweep", "--model", "gpt3-1.3b", "--gpu", "h100,v100",
                              "--num-gpus", "16", "--precision", "bf16", "--format", "json"))
    assert "not available on v100" in given[1]["infeasible"]


def test_cli_table_and_grid_file(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text('model = ["llama3-8b", "llama3-70b"]\ngpu = "h100,gaudi3"\n'
                    'num-gpus = "8..32"\nbest = true\ntokens = "1t"\n')
    out = invoke("sweep", "--grid", str(grid), "--num-gpus", "64")  # the command line wins
    lines = out.splitlines()
    assert lines[0].startswith("fsdpsim sweep: 4 points")
    header = next(ln for ln in lines if "tok/s/GPU" in ln)
    assert header.split()[-2:] == ["days", "$M"]  # with failures; MWh left out to fit
    assert "left out to fit 100 columns: MWh" in out
    assert len([ln for ln in lines if "llama3-" in ln]) == 4
    assert max(map(len, lines)) <= 100
    wide = invoke("sweep", "--grid", str(grid), "--num-gpus", "64", "--wide").splitlines()
    header = next(ln for ln in wide if "tok/s/GPU" in ln)
    assert "train days" in header and "w/ failures days" in header
    words = " ".join(out.split())  # notes wrap at 100 columns
    assert "upper bound of accelerator power" in words
    assert "no price for gaudi3" in words  # (the catalog has none)


def test_cli_output_file_and_progress(tmp_path, monkeypatch):
    monkeypatch.setattr(cli_sweep, "PROGRESS_MIN_CANDIDATES", 0)
    target = tmp_path / "rows.json"
    result = CliRunner().invoke(cli, ["sweep", "--num-gpus", "8..64", "--format", "json",
                                      "--output", str(target)], catch_exceptions=False)
    assert result.exit_code == 0
    assert "4 rows (4 feasible) written to" in result.stdout
    assert "sweeping 4 points" in result.stderr
    assert len(json.loads(target.read_text())) == 4


@pytest.mark.parametrize("name, fmt", [("rows.csv", "csv"), ("ROWS.Json", "json"),
                                       ("rows.txt", "table"), ("rows", "table")])
def test_cli_output_format_follows_the_file_name(tmp_path, name, fmt):
    """Without --format, ``-o`` names the format by its suffix (a table in rows.csv would be
    read as broken CSV); the same bytes as --format given."""
    target = tmp_path / name
    invoke("sweep", "--num-gpus", "8,16", "--output", str(target))
    text = target.read_text()
    twin = tmp_path / f"twin-{name}"
    invoke("sweep", "--num-gpus", "8,16", "--format", fmt, "--output", str(twin))
    assert text == twin.read_text()
    if fmt == "csv":
        assert len(pd.read_csv(target)) == 2
    elif fmt == "json":
        assert len(json.loads(text)) == 2
    else:
        assert "tok/s/GPU" in text


@pytest.mark.parametrize("fmt, name", [("json", "rows.csv"), ("table", "rows.csv"),
                                       ("csv", "rows.parquet")])
def test_cli_a_format_other_than_the_file_names_is_one_line(capsys, tmp_path, fmt, name):
    target = tmp_path / name
    line = assert_one_line_error(*run(capsys, "sweep", "--format", fmt, "--output", str(target)))
    assert repr(str(target)) in line and f"--format {fmt}" in line
    assert not target.exists()


def test_cli_parquet(tmp_path, monkeypatch, capsys):
    target = tmp_path / "rows.parquet"
    if importlib.util.find_spec("pyarrow") is not None:
        invoke("sweep", "--num-gpus", "8,16", "--format", "parquet", "--output", str(target))
        assert len(pd.read_parquet(target)) == 2
        line = assert_one_line_error(*run(capsys, "sweep", "--format", "parquet"))
        assert "--output" in line
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pyarrow" else real(name, *a))
    line = assert_one_line_error(*run(capsys, "sweep", "--format", "parquet", "--output",
                                      str(target)))
    assert "pip install pyarrow" in line


@pytest.mark.parametrize("args, needle", [
    (["--num-gpus", "8..4"], "range '8..4' is empty"),
    (["--num-gpus", "12x"], "--num-gpus"),
    (["--sharding", "zero3"], "accepted: full, grad_op"),
    (["--recompute", "auto,none"], "'auto' cannot be combined"),
    (["--model", "llama9"], "unknown model"),
    (["--model-sizes", "1m"], "outside the ladder"),
    (["--gpu", "h1000"], "h1000"),
    (["--precision", "fp9"], "accepted: bf16"),
    (["--price", "h1000=2/h"], "--price"),
    (["--price", "h100=cheap"], "--price"),
    (["--pue", "0.9"], "--pue"),
    (["--tokens", "lots"], "--tokens"),
    (["--grid", "/nonexistent/grid.toml"], "does not exist"),
    (["--output", "/nonexistent/dir/out.csv"], "does not exist"),
    (["--inter-node-gbps-per-gpu", "0"], "'0' is not accepted; accepted: a number from 0.001"),
])
def test_cli_bad_input_is_one_line(capsys, args, needle):
    line = assert_one_line_error(*run(capsys, "sweep", *args))
    assert needle in line


def test_cli_grid_file_unknown_key_is_one_line(capsys, tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text('model = "llama3-8b"\ngpus = "h100"\n')
    line = assert_one_line_error(*run(capsys, "sweep", "--grid", str(grid)))
    assert "unknown key 'gpus'" in line and "accepted: model, model-sizes, gpu" in line


# -- the benchmark -------------------------------------------------------------------------------
def test_benchmark_runs_and_reports_a_rate():
    bench = load_script(ROOT / "benchmarks" / "bench_sweep.py", "bench_sweep")
    assert bench.bench_evaluate(n=2000, repeat=1) > 0
    assert bench.bench_evaluate(n=2000, repeat=1, chunk=512) > 0
    hybrid = bench.bench_inputs(2000, hybrid=True)
    assert (hybrid["tp"] > 1).any() and (hybrid["pp"] > 1).any() and (hybrid["cp"] > 1).any()
    assert bench.bench_evaluate(repeat=1, inputs=hybrid) > 0


def test_shard_group_size_in_sweep_equals_predict():
    """Sweep takes --shard-group-size (HSDP), and its row is predict's."""
    rows = json.loads(invoke("sweep", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus",
                             "1024", "--sharding", "hybrid", "--shard-group-size", "64",
                             "--micro-batch", "1", "--seq-len", "2048", "--recompute", "none",
                             "--format", "json"))
    p = json.loads(invoke("predict", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus",
                          "1024", "--sharding", "hybrid", "--shard-group-size", "64",
                          "--micro-batch", "1", "--seq-len", "2048", "--recompute", "none",
                          "--format", "json"))
    assert rows[0]["plan.dp_shard"] == p["plan"]["dp_shard"] == 64
    assert rows[0]["tokens_per_s_per_gpu"] == p["tokens_per_s_per_gpu"]


def test_best_keeps_the_global_batch_fixed_unless_free_batch(cat):
    """--best compares like runs (one global batch for every row: about 4M
    tokens, or --global-batch), --free-batch lets each row run one micro-batch per GPU, and
    the table and notes say which batch each row used."""
    common = dict(model="llama3-8b", gpu="h100,h200", num_gpus="8,64")
    fixed = sweep(cat, **common, best=True)
    assert set(fixed["training.global_batch"]) == {1024}  # 4 Mi tokens / 4,096
    assert (fixed["training.micro_batch"] * fixed["training.grad_accum"]
            * fixed["plan.dp"] == 1024).all()
    at_8k = sweep(cat, **common, best=True, seq_len="8192")
    assert set(at_8k["training.global_batch"]) == {512}
    given = sweep(cat, **common, best=True, global_batch="256")
    assert set(given["training.global_batch"]) == {256}
    free = sweep(cat, **common, best=True, free_batch=True)
    assert (free["training.grad_accum"] == 1).all()
    assert (free["training.global_batch"] == free["training.micro_batch"] * free["plan.dp"]).all()
    with pytest.raises(ConfigError, match="--global-batch or --free-batch"):
        sweep(cat, **common, best=True, free_batch=True, global_batch="256")
    out = invoke("sweep", "--model", "llama3-8b", "--gpu", "h100,h200", "--num-gpus", "8",
                 "--best")
    assert "batch" in out.splitlines()[1]
    assert "global batch (batch): 1,024 sequences at seq 4,096" in out
    out = invoke("sweep", "--model", "llama3-8b", "--gpu", "h100,h200", "--num-gpus", "8",
                 "--best", "--free-batch")
    assert "global batch: one micro-batch per GPU" in out


def test_grad_sync_takes_a_list_and_each_row_equals_predict(cat, capsys):
    """--grad-sync every,last (a list, like every grid option) gives a block of
    rows per value, each equal to predict with that value."""
    options = dict(model="llama3-8b", gpu="h100", num_gpus="8,64", micro_batch="1",
                   recompute="none", global_batch="512")
    rows = sweep(cat, grad_sync="every,last", **options)
    assert len(rows) == 4
    assert list(rows["plan.grad_sync"]) == ["every", "every", "last", "last"]
    for sync in ("every", "last"):
        alone = sweep(cat, grad_sync=sync, **options)
        both = rows[rows["plan.grad_sync"] == sync].reset_index(drop=True)
        pd.testing.assert_series_equal(both["step_time_s"], alone["step_time_s"])
        expected = _predict(cat, "llama3-8b", "h100", 64, "full",
                            dict(micro_batch=1, recompute="none", global_batch=512),
                            dict(grad_sync=sync))
        assert both["step_time_s"].iloc[1] == expected.values["step_time_s"]
        assert both["memory.peak_bytes"].iloc[1] == expected.values["peak_bytes"]
    out = invoke("sweep", "--model", "llama3-8b", "--num-gpus", "8", "--micro-batch", "1",
                 "--global-batch", "64", "--grad-sync", "every,last")
    assert "2 gradient syncs" in out and "grad sync" in out
    line = assert_one_line_error(*run(capsys, "sweep", "--grad-sync", "every,sometimes"))
    assert "--grad-sync 'sometimes' is not accepted; accepted: every, last" in line


def test_seq_len_k_is_1024_and_the_help_says_so(cat):
    """8k = 8,192 tokens in sweep (lists, ranges, grid files) as in predict."""
    rows = sweep(cat, model="llama3-8b", num_gpus="8", seq_len="8k,4k..16k", micro_batch="1",
                 recompute="full")
    assert list(rows["training.seq_len"]) == [8192, 4096, 16384]
    assert "8k = 8,192" in " ".join(invoke("sweep", "--help").split())
    assert "32k = 32,768" in " ".join(invoke("predict", "--help").split())
    assert "k = 1,024" in " ".join(invoke("plot", "--help").split())  # --tokens-per-gpu
    d = json.loads(invoke("predict", "--seq-len", "8k", "--format", "json"))
    assert d["training"]["seq_len"] == 8192


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


@pytest.mark.parametrize("args", [
    ("--framework", "megatron", "--tp", "2", "--num-gpus", "16"),
    ("--framework", "megatron-2021", "--precision", "fp8", "--num-gpus", "8"),
    ("--framework", "deepspeed-zero3", "--num-gpus", "16"),
    ("--framework", "fsdp1", "--zero", "2", "--num-gpus", "8"),
    ("--framework", "internevo", "--zero", "1", "--num-gpus", "16"),
    ("--framework", "nanotron", "--optimizer", "sgd", "--tp", "2", "--num-gpus", "8"),
    ("--framework", "megatron", "--precision", "nvfp4", "--gpu", "b200", "--num-gpus", "8"),
    ("--zero", "0", "--optimizer", "sgd", "--num-gpus", "16"),
    ("--zero", "3", "--num-gpus", "8")])
def test_framework_zero_and_optimizer_in_sweep_equal_predict(args):
    """sweep's --framework, --zero and --optimizer: every field of the row is predict's with
    the same flags (the framework's kernel stack, collectives, uncertainty and knob defaults,
    the ZeRO stage's plan, the optimizer's states and checkpoint)."""
    common = ("--model", "llama3-8b", "--micro-batch", "1", "--recompute", "selective",
              *args)
    rows = json.loads(invoke("sweep", *common, "--format", "json"))
    assert len(rows) == 1
    assert rows[0]["infeasible"] is None or rows[0]["infeasible"].startswith("does not fit")
    p = flatten(json.loads(invoke("predict", *common, "--format", "json")))
    diffs = {k: (v, rows[0].get(k, "absent")) for k, v in p.items()
             if not k.startswith("chosen") and k not in ("notes", "advice", "fit_advice")
             and not (_missing(v) and _missing(rows[0].get(k))) and rows[0].get(k) != v}
    assert diffs == {}


def test_zero_is_the_sharding_axis_and_not_beside_sharding(cat, capsys):
    by_zero = sweep(cat, zero="0,1,2,3", num_gpus="8", micro_batch="1", recompute="none")
    by_name = sweep(cat, sharding="none,optimizer,grad_op,full", num_gpus="8", micro_batch="1",
                    recompute="none")
    assert list(by_zero["plan.sharding"]) == ["none", "optimizer", "grad_op", "full"]
    assert list(by_zero["tokens_per_s"]) == list(by_name["tokens_per_s"])
    line = assert_one_line_error(*run(capsys, "sweep", "--zero", "1", "--sharding", "full"))
    assert "--sharding or --zero" in line
    line = assert_one_line_error(*run(capsys, "sweep", "--zero", "4"))
    assert "--zero" in line
    line = assert_one_line_error(*run(capsys, "sweep", "--framework", "jax"))
    assert "--framework" in line and "megatron" in line
    line = assert_one_line_error(*run(capsys, "sweep", "--optimizer", "adam"))
    assert "--optimizer" in line and "adamw" in line


def test_default_batch_moves_to_a_multiple_of_dp_instead_of_dropping_rows(cat):
    """GPU counts whose data-parallel degree exceeds (or does not divide) the default batch run
    the nearest multiple of it, and the note says so; every row stays feasible."""
    frame = sweep(cat, model="llama3-8b", gpu="h100", num_gpus="512..4096", best=True,
                  tokens="15t")
    assert frame["infeasible"].isna().all() or (frame["infeasible"].fillna("") == "").all()
    assert list(frame["training.global_batch"]) == [1024, 1024, 2048, 4096]
    assert (frame["training.global_batch"] % frame["plan.dp"] == 0).all()
    out = invoke("sweep", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "512..2048",
                 "--best")
    assert "1 row(s) whose data-parallel degree does not" in " ".join(out.split())


@pytest.mark.parametrize("args", [
    # 126 layers over 8 stages: torchtitan's split (15, 16 x6, 15)
    ("--model", "llama3-405b", "--num-gpus", "512", "--tp", "8", "--pp", "8"),
    # Megatron's account-for-embedding/loss split, interleaved
    ("--model", "llama3-405b", "--num-gpus", "512", "--tp", "8", "--pp", "8", "--vpp", "2",
     "--pp-schedule", "interleaved", "--framework", "megatron"),
    # 61 layers, 3 dense ones first: the stages' MoE layers counted by index, as predict
    ("--model", "deepseek-v3", "--gpu", "h200", "--num-gpus", "512", "--tp", "2", "--pp", "4",
     "--ep", "8", "--framework", "megatron", "--precision", "fp8")])
def test_uneven_pipeline_split_row_equals_predict(args):
    """Layers that do not divide over the stages: sweep takes the framework's split as predict
    does (no row refused for it), every field equal, and its notes say the split."""
    common = (*args, "--micro-batch", "1", "--recompute", "full", "--global-batch", "256")
    text = invoke("sweep", *common)
    assert "pipeline split of" in text and "layers per stage" in text
    rows = json.loads(invoke("sweep", *common, "--format", "json"))
    assert len(rows) == 1 and rows[0]["infeasible"] is None
    predicted = json.loads(invoke("predict", *common, "--format", "json"))
    assert any(n.startswith("pipeline split:") for n in predicted["notes"])
    p = flatten(predicted)
    diffs = {k: (v, rows[0].get(k, "absent")) for k, v in p.items()
             if not k.startswith("chosen") and k not in ("notes", "advice", "fit_advice")
             and not (_missing(v) and _missing(rows[0].get(k))) and rows[0].get(k) != v}
    assert diffs == {}
