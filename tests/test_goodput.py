"""Failures, checkpoints and restarts (fsdpsim.costs.goodput): hand-worked values of Young
(1974) and Daly (2006), the properties a buyer relies on (goodput <= 1, falling with the GPU
count, rising with storage bandwidth), and scalar/array/Series agreement."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdpsim.drivers import procurement
from fsdpsim.costs import goodput

HOUR = 3600.0


# -- hand-worked values ----------------------------------------------------------------------------
def test_daly_interval_hand_worked():
    # Daly 2006: δ = 100 s, M = 1,000 s -> δ/(2M) = 0.05, sqrt(2δM) = 447.2136;
    # τ = 447.2136 · (1 + sqrt(0.05)/3 + 0.05/9) − 100 = 447.2136 · 1.0800912 − 100 = 383.0316 s
    assert goodput.daly_interval_s(100.0, 1000.0) == pytest.approx(383.0316, abs=1e-3)
    # Young 1974: sqrt(2 · 100 · 1,000) = 447.2136 s
    assert goodput.young_interval_s(100.0, 1000.0) == pytest.approx(447.2136, abs=1e-3)
    # δ >= 2M: checkpoint once per MTBF
    assert goodput.daly_interval_s(2000.0, 1000.0) == 1000.0
    assert goodput.daly_interval_s(5000.0, 1000.0) == 1000.0


def test_daly_tends_to_young_when_checkpoints_are_short():
    delta, m = 1.0, 1e6
    assert goodput.daly_interval_s(delta, m) == pytest.approx(goodput.young_interval_s(delta, m),
                                                             rel=1e-3)


def test_wall_time_factor_hand_worked():
    # Daly 2006: T_w/T_s = M e^(R/M) (e^((τ+δ)/M) − 1) / τ with τ = 100, δ = 10, R = 60,
    # M = 1,000: 10 · e^0.06 · (e^0.11 − 1) = 10 · 1.0618365 · 0.1162781 = 1.2346830
    expected = 1000 * math.exp(0.06) * math.expm1(0.11) / 100
    assert expected == pytest.approx(1.2346830, rel=1e-6)
    assert math.exp(goodput.log_wall_time_factor(100, 10, 60, 1000)) == pytest.approx(expected,
                                                                                      rel=1e-12)
    assert goodput.goodput(100, 10, 60, 1000) == pytest.approx(0.8099244, rel=1e-6)


def test_without_failures_only_checkpoints_cost_time():
    # M -> infinity: T_w/T_s -> (τ + δ)/τ
    assert goodput.goodput(100.0, 10.0, 600.0, 1e15) == pytest.approx(100 / 110, rel=1e-6)


def test_daly_interval_is_near_the_numerical_optimum():
    """Daly's estimate is within 0.1 % of the best goodput over a fine grid of intervals."""
    for delta, m, r in [(10.0, 3 * HOUR, 600.0), (120.0, HOUR, 60.0), (1.0, 100.0, 0.0),
                        (500.0, 2000.0, 300.0)]:
        taus = np.geomspace(1e-3 * m, 10 * m, 20_001)
        best = goodput.goodput(taus, delta, r, m).max()
        daly = goodput.goodput(goodput.daly_interval_s(delta, m), delta, r, m)
        assert daly <= best * (1 + 1e-6)  # (the grid's best is a hair below the optimum)
        assert daly >= best * (1 - 1e-3), (delta, m, r, daly, best)


def test_job_mtbf_and_interruptions():
    # Llama 3: 419 interruptions in 54 days on 16,384 GPUs -> M_gpu = 50,677 GPU-hours; the job's
    # MTBF is 3.09 h, and 54 days of wall time expect 419 of them.
    m_gpu = procurement.DEFAULT_GPU_MTBF_S
    assert m_gpu / HOUR == pytest.approx(50_677.0, abs=0.1)
    m = goodput.job_mtbf_s(m_gpu, 16_384)
    assert m / HOUR == pytest.approx(54 * 24 / 419)
    assert goodput.expected_interruptions(54 * 86_400, m) == pytest.approx(419)


def test_checkpoint_bytes_are_the_recipes_states():
    # PyTorch FSDP recipe: fp32 parameters + AdamW's two fp32 moments = 12 B per parameter;
    # Megatron's: bf16 parameters + fp32 master + two moments = 2 + 12 = 14 B per parameter.
    assert procurement.checkpoint_bytes(8e9, 2.0, 0, False) == pytest.approx(96e9)
    assert procurement.checkpoint_bytes(405e9, 2.0, 0, True) == pytest.approx(405e9 * 14)
    assert procurement.checkpoint_bytes(1e9, 2.0, 1, False) == pytest.approx(8e9)  # SGD: 4 + 4
    assert goodput.checkpoint_write_s(96e9, 8e9) == pytest.approx(12.0)


# -- properties ------------------------------------------------------------------------------------
positive = st.floats(1e-3, 1e9, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(delta=positive, m=positive, r=st.floats(0, 1e6), tau=positive)
def test_goodput_is_a_fraction_and_never_warns(delta, m, r, tau):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow, no invalid value, on any input
        for interval in (tau, goodput.daly_interval_s(delta, m)):
            g = float(goodput.goodput(interval, delta, r, m))
            assert 0.0 <= g <= 1.0
            assert g <= interval / (interval + delta) * (1 + 1e-12)  # checkpoints alone cost


@settings(max_examples=200, deadline=None, derandomize=True)
@given(n=st.integers(1, 2**21), bw=st.floats(1e6, 1e13), ckpt=st.floats(1e6, 1e14),
       r=st.floats(0, 3600))
def test_goodput_falls_with_the_gpu_count(n, bw, ckpt, r):
    """At a fixed storage bandwidth, and with the default bandwidth per GPU, more GPUs fail
    more often: goodput at Daly's interval never rises with N. (With bandwidth per GPU and no
    restart time it is scale-free: δ/M does not change; equal up to rounding.)"""
    m_gpu = procurement.DEFAULT_GPU_MTBF_S
    delta = goodput.checkpoint_write_s(ckpt, bw)
    gpus = np.array([n, 2 * n])
    m = goodput.job_mtbf_s(m_gpu, gpus)
    g = goodput.goodput(goodput.daly_interval_s(delta, m), delta, r, m)
    assert g[1] <= g[0]
    run = procurement.RunAssumptions(restart_s=r)
    cols = procurement.run_columns(tokens_per_s=1e6, num_gpus=gpus, ok=True,
                                   price_usd_per_gpu_hour=2.0, tdp_w=700.0, power_cap_w=np.inf,
                                   checkpoint_bytes_=ckpt, run=run)
    assert cols["failures.goodput"][1] <= cols["failures.goodput"][0] * (1 + 1e-12)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(n=st.integers(1, 2**21), bw=st.floats(1e6, 1e13), ckpt=st.floats(1e6, 1e14),
       r=st.floats(0, 3600))
def test_goodput_rises_with_storage_bandwidth(n, bw, ckpt, r):
    m = goodput.job_mtbf_s(procurement.DEFAULT_GPU_MTBF_S, n)
    delta = goodput.checkpoint_write_s(ckpt, np.array([bw, 2 * bw]))
    g = goodput.goodput(goodput.daly_interval_s(delta, m), delta, r, m)
    assert g[1] >= g[0]


def test_scalar_array_and_series_agree():
    deltas = np.array([1.0, 30.0, 600.0])
    arr = goodput.goodput(goodput.daly_interval_s(deltas, 1e4), deltas, 300.0, 1e4)
    ser = goodput.goodput(goodput.daly_interval_s(pd.Series(deltas), 1e4), pd.Series(deltas),
                          300.0, 1e4)
    for i, d in enumerate(deltas):
        one = goodput.goodput(goodput.daly_interval_s(d, 1e4), d, 300.0, 1e4)
        assert one == arr[i] == np.asarray(ser)[i]


def test_a_job_that_cannot_progress_reports_no_time():
    # 4M GPUs of a 1,000-hour MTBF fail every 0.9 s: a 10-minute restart never completes.
    cols = procurement.run_columns(tokens_per_s=1e9, num_gpus=2**22, ok=True,
                                   price_usd_per_gpu_hour=2.0, tdp_w=700.0, power_cap_w=np.inf,
                                   checkpoint_bytes_=1e12,
                                   run=procurement.RunAssumptions(tokens=1e12,
                                                                  gpu_mtbf_s=1000 * HOUR))
    assert cols["failures.goodput"] == 0.0
    assert np.isnan(cols["failures.train_time_s"]) and np.isnan(cols["failures.train_cost_usd"])
    assert np.isfinite(cols["train_time_s"])  # the failure-free figures stay
