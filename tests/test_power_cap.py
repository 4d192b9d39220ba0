"""Power caps: the DVFS clock law, its effect on predictions, sweeps, energy and published rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.cli import main
from fsdpsim.costs import compute
from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import predict
from fsdpsim.model.presets import get_model
from fsdpsim.measured.published.tables import from_published, parse_power_cap
from fsdpsim.hardware.system import resolve_system

CATALOG = load_catalog(use_env=False)
SPEC = get_model("llama3-8b")
PLAN = ParallelPlan(num_gpus=64, gpus_per_node=8)
TRAINING = TrainingConfig(seq_len=4096, micro_batch=2, recompute="none")


def test_clock_law_hand_worked():
    """H100 SXM, 700 W TDP, static draw 70 W, capped at 500 W: ((500 − 70) / (700 − 70))^(1/3)
    = 0.68254^(1/3) = 0.8805; at or above TDP the clock is the TDP clock."""
    assert compute.power_capped_clock_ratio(500, 700) == pytest.approx(0.8805, abs=1e-4)
    assert compute.power_capped_clock_ratio(700, 700) == 1.0
    assert compute.power_capped_clock_ratio(900, 700) == 1.0


@given(st.floats(80, 700), st.floats(80, 700))
def test_clock_rises_with_the_cap(a, b):
    lo, hi = sorted((a, b))
    assert compute.power_capped_clock_ratio(lo, 700) <= compute.power_capped_clock_ratio(hi, 700)


def test_a_cap_slows_compute_not_communication():
    free = predict(SPEC, resolve_system(CATALOG, gpu="h100"), PLAN, TRAINING).to_dict()
    capped = predict(SPEC, resolve_system(CATALOG, gpu="h100", power_cap_w=500), PLAN,
                     TRAINING).to_dict()
    ratio = compute.power_capped_clock_ratio(500, 700)
    assert capped["time"]["gemm_s"] == pytest.approx(free["time"]["gemm_s"] / ratio, rel=0.02)
    assert capped["time"]["memory_bound_s"] == pytest.approx(free["time"]["memory_bound_s"])
    assert capped["time"]["comm_s"] == pytest.approx(free["time"]["comm_s"])
    assert capped["mfu"] < free["mfu"]  # MFU stays against the nominal peak
    assert not capped["interval"]["calibrated"]
    assert capped["interval"]["tokens_per_s_per_gpu_low"] <= 0.70 * capped["tokens_per_s_per_gpu"] + 1e-6
    assert any("power cap 500 W" in n for n in capped["notes"])


@pytest.mark.parametrize("argv, words", [
    (["--gpu", "h100", "--power-cap-w", "800"], "at most its TDP (700 W)"),
    (["--gpu", "h100", "--power-cap-w", "50"], "more than its static draw"),
    (["--gpu", "tpu-v5p", "--power-cap-w", "100"], "has no tdp_w"),
])
def test_bad_caps_are_one_line_exit_2(argv, words, capsys):
    assert main(["predict", "--model", "llama3-8b", "--num-gpus", "8", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_sweep_over_caps_trades_speed_for_energy(capsys):
    assert main(["sweep", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "64",
                 "--power-cap-w", "400,550,700", "--best", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rows.sort(key=lambda r: r["power_cap_w"])
    tps = [r["tokens_per_s_per_gpu"] for r in rows]
    kwh = [r["energy_kwh_per_million_tokens"] for r in rows]
    assert tps == sorted(tps) and kwh == sorted(kwh)  # faster and hungrier as the cap rises
    assert [r["power_cap_w"] for r in rows] == [400, 550, 700]


@pytest.mark.parametrize("texts, expected", [
    (("H100 80GB (500 W)",), 500.0), (("H100 80GB",), None),
    (("H100", "trained on H100 at 500 W"), 500.0), (("H100", "power-capped to 450W"), 450.0),
    (("H100", "a node draws 5,000 W"), None), (("H100 (700 W)",), None),
])
def test_published_rows_state_their_cap(texts, expected):
    assert parse_power_cap(CATALOG, "h100-sxm5-80gb", *texts) == expected


def test_a_capped_published_row_is_predicted_slower():
    row = {"id": "r", "source_key": "lab", "model": "Llama-3-8B", "n_layers": 32, "d_model": 4096,
           "n_heads": 32, "n_kv_heads": 8, "ffn_size": 14336, "vocab": 128256, "seq_len": 4096,
           "n_gpus": 8, "gpus_per_node": 8, "framework": "torchtitan FSDP2", "tp": 1, "pp": 1,
           "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": "none",
           "precision": "bf16", "tokens_per_s_per_gpu": 8000.0}
    frame = from_published(pd.DataFrame([{**row, "gpu": "H100 80GB"},
                                         {**row, "id": "c", "gpu": "H100 80GB (500 W)"}]), CATALOG)
    assert np.isnan(frame.loc[0, "power_cap_w"]) and frame.loc[1, "power_cap_w"] == 500
    from fsdpsim.measured.validate import predict_measurements
    pred = predict_measurements(frame, CATALOG)["predicted_tokens_per_s_per_gpu"]
    assert pred[1] < 0.95 * pred[0]


def test_resolve_system_reports_the_cap():
    system = resolve_system(CATALOG, gpu="h100", power_cap_w=500)
    assert system.power_cap_w == 500 and system.compute_clock_ratio == pytest.approx(0.8805, abs=1e-4)
    assert "power-capped to 500 W of 700 W" in system.label
    with pytest.raises(ConfigError):
        resolve_system(CATALOG, gpu="h100", power_cap_w=0)


def test_range_widens_near_the_memory_limit():
    """Calibration rows above 85 % of memory ran as slow as 0.75x their prediction; the 90 %
    range says so there and only there."""
    from fsdpsim.drivers.predict import NEAR_LIMIT_RATIO_LOW

    system = resolve_system(CATALOG, gpu="a100")
    tight = predict(get_model("mpt-30b"), system, ParallelPlan(8, 8),
                    TrainingConfig(seq_len=8192, micro_batch=1, recompute="full")).to_dict()
    roomy = predict(get_model("mpt-1b"), system, ParallelPlan(8, 8),
                    TrainingConfig(seq_len=2048, micro_batch=1, recompute="full")).to_dict()
    assert tight["memory"]["peak_bytes"] > 0.85 * tight["memory"]["capacity_bytes"]
    assert tight["interval"]["near_memory_limit"] and not roomy["interval"]["near_memory_limit"]
    assert tight["interval"]["tokens_per_s_per_gpu_low"] == pytest.approx(
        NEAR_LIMIT_RATIO_LOW * tight["tokens_per_s_per_gpu"])
    p05 = system.accelerator.efficiency.throughput_ratio_p05
    assert roomy["interval"]["tokens_per_s_per_gpu_low"] == pytest.approx(
        p05 * roomy["tokens_per_s_per_gpu"])
