"""``fsdpsim calibrate --local`` and a real FSDP2 step on this CPU against its prediction.

The fits are checked on synthetic data made with the engine's own laws (they must recover
the parameters). The catalog entry is checked by loading it. The end-to-end test measures
this machine (:func:`fsdpsim.measured.harness.local_bench.measure_local`, reduced budget), loads the
entry, predicts one FSDP2 step of a small reference model (d 256, L 4, seq 256, micro-batch 4,
W 2, fp32, eager attention) and compares it with the median of real steps on 2 gloo ranks.
CPU timing on a shared 2-core machine is noisy (other jobs, SMT siblings, gloo threads on the
same cores), so the assertion is loose: within a factor of 2.5 (``pytest -s`` prints the
numbers).

The catalog's plausible ranges admit CPU hosts (fp32 peaks of tens of GFLOP/s, tens of GB/s of
memory bandwidth, gloo links below 1 GB/s with ~0.5 ms per ring step, compute slowdowns above
0.5 under concurrent gloo traffic), so the written entry loads as it is.
"""

from __future__ import annotations


import numpy as np
import pytest

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.cli import main
from fsdpsim.costs.compute import attention_time_s, gemm_time_s
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import predict
from fsdpsim.hardware.system import resolve_system
from fsdpsim.measured.harness import local_bench
from fsdpsim.measured.harness.local_bench import (
    BenchConfig,
    LocalMeasurement,
    catalog_entries,
    catalog_toml,
    fit_alpha_beta,
    fit_attention,
    fit_gemm_law,
    gemm_shapes,
    measured_step_s,
    out_of_range,
)

RATIO_BAND = 2.5  # measured / predicted step time must lie in [1/2.5, 2.5]

SPEC = ModelSpec(
    name="cpu-ref-d256-l4", n_layers=4, d_model=256, n_heads=4, ffn_size=1024, ffn_kind="gelu",
    vocab_size=2048, tied_embeddings=False, position="none", max_seq_len=256, norm="layernorm",
    norm_bias=False, qkv_bias=False, attn_out_bias=False, mlp_bias=False,
)
SEQ_LEN, MICRO_BATCH, WORLD = 256, 4, 2
STEPS, WARMUP = 12, 4  # median of the 8 steps after 4 warm-up steps


def fake_measurement(**changes) -> LocalMeasurement:
    """A plausible 2-rank CPU measurement (values of this machine, 2026-11-30)."""
    cfg = BenchConfig.quick()
    shapes = gemm_shapes(cfg)
    values = dict(
        cpu_model="AMD EPYC", vendor="AMD", date="2026-11-30", ranks=2,
        torch_version="2.13.0+cpu", fp32_peak_flops_per_s=88e9, fp32_best_shape=(256, 256, 256),
        bf16_peak_flops_per_s=150e9, bf16_native=True, gemm_shapes=tuple(shapes),
        gemm_fp32_s=tuple(2.0 * m * n * k / 60e9 for m, n, k in shapes), matmul_fraction=0.7,
        matmul_half_k=8.0, matmul_half_flops=1e5, gemm_fit_rms_log_error=0.1,
        copy_bytes_per_s=12e9, axpy_bytes_per_s=22e9, memory_total_bytes=24 * 2**30,
        resident_bytes=0.25 * 2**30, kernel_overhead_s=5e-6, attention_fraction=0.4,
        attention_half_kv=100.0, gather_bytes=tuple(cfg.gather_bytes),
        all_gather_s=tuple(1e-3 for _ in cfg.gather_bytes),
        reduce_scatter_s=tuple(1e-3 for _ in cfg.gather_bytes),
        link_busbw_bytes_per_s=0.7e9, link_latency_s=500e-6,
        reduce_scatter_busbw_bytes_per_s=0.4e9, reduce_scatter_latency_s=700e-6,
        matmul_alone_flops_per_s=80e9, matmul_during_comm_flops_per_s=50e9, elapsed_s=10.0)
    values.update(changes)
    return LocalMeasurement(**values)


# ============================================================================ fits (no torch)
def test_gemm_fit_recovers_the_engine_law():
    shapes = gemm_shapes(BenchConfig())
    peak, bw = 90e9, 20e9
    truth = (0.6, 12.0, 2e5)
    m, n, k = (np.array(v, dtype=float) for v in zip(*shapes))
    times = gemm_time_s(m, n, k, truth[0] * peak, bw, truth[2], truth[1], 4.0)
    fraction, half_k, half_flops, rms = fit_gemm_law(shapes, times, peak, bw)
    assert fraction == pytest.approx(truth[0], rel=1e-3)
    assert half_k == pytest.approx(truth[1], rel=1e-2)
    assert half_flops == pytest.approx(truth[2], rel=1e-2)
    assert rms < 1e-3


def test_alpha_beta_fit_recovers_busbw_and_latency():
    sizes = np.array([4096, 65536, 524288, 4194304, 16777216], dtype=float)
    busbw, alpha, w = 0.8e9, 300e-6, 2
    times = (w - 1) * (alpha + sizes / w / busbw)
    got_bw, got_alpha = fit_alpha_beta(sizes, times, w)
    assert got_bw == pytest.approx(busbw, rel=1e-3)
    assert got_alpha == pytest.approx(alpha, rel=1e-3)


def test_attention_fit_recovers_fraction_and_half_length():
    lens = np.array([256.0, 1024.0])
    flops = 0.5 * 4.0 * lens**2 * 256
    times = attention_time_s(flops, 80e9, 0.4, lens / 2, 150.0)
    fraction, half = fit_attention(lens, times, 256, 80e9)
    assert fraction == pytest.approx(0.4, rel=1e-3)
    assert half == pytest.approx(150.0, rel=1e-2)


def test_measured_step_is_the_median_of_the_slowest_rank_after_warmup():
    per_rank = [[9.0, 1.0, 2.0, 3.0], [1.0, 1.5, 1.0, 4.0]]
    median, steps = measured_step_s(per_rank, warmup=1)
    assert steps == [1.5, 2.0, 4.0] and median == 2.0
    with pytest.raises(ValueError, match="no timed step"):
        measured_step_s(per_rank, warmup=4)


# ============================================================================ the entry
def test_entry_loads_and_carries_the_measured_values(tmp_path):
    m = fake_measurement()
    (tmp_path / "local.toml").write_text(catalog_toml(m))
    cat = load_catalog([tmp_path], use_env=False)
    acc = cat.accelerator("local-cpu")
    assert acc.peak_flops_per_s["fp32"] == pytest.approx(88e9, rel=1e-3)
    assert acc.peak_flops_per_s["bf16"] == pytest.approx(150e9, rel=1e-3)
    assert acc.hbm_bandwidth_bytes_per_s == pytest.approx(22e9, rel=1e-3)  # best of copy, axpy
    assert acc.memory_bytes == pytest.approx(12 * 2**30, rel=1e-3)  # RAM shared by 2 ranks
    assert acc.link.bandwidth_bytes_per_s == pytest.approx(0.7e9, rel=1e-3)
    assert acc.link.latency_s == pytest.approx(500e-6, rel=1e-3)
    eff = acc.efficiency
    assert (eff.matmul_fraction, eff.hbm_fraction, eff.link_fraction) == (0.7, 1.0, 1.0)
    assert eff.kernel_overhead_s == pytest.approx(5e-6, rel=1e-3)
    assert eff.comm_compute_slowdown == pytest.approx(0.6, rel=1e-3)  # 80 / 50 − 1
    system = resolve_system(cat, cluster="local-node")
    assert system.gpus_per_node == 2 and system.accelerator.id == "local-cpu"
    assert "fsdpsim calibrate --local on 2026-11-30, AMD EPYC" in acc.source


def test_a_fit_at_its_zero_bound_writes_a_loadable_zero(tmp_path):
    """least_squares ends a fit bounded below by 0 at a residue (5.8e-20 on a loaded machine);
    the entry must still load: the residue is written as 0."""
    (tmp_path / "local.toml").write_text(catalog_toml(fake_measurement(attention_half_kv=5.8e-20)))
    acc = load_catalog([tmp_path], use_env=False).accelerator("local-cpu")
    assert acc.efficiency.attention_half_kv == 0.0


def test_entry_without_native_bf16_has_fp32_only(tmp_path):
    (tmp_path / "local.toml").write_text(catalog_toml(fake_measurement(bf16_native=False)))
    acc = load_catalog([tmp_path], use_env=False).accelerator("local-cpu")
    assert set(acc.peak_flops_per_s) == {"fp32"}
    with pytest.raises(Exception, match="precision 'bf16' is not available on local-cpu"):
        acc.peak_for("bf16")


def test_out_of_range_names_each_refused_value():
    problems = out_of_range(catalog_entries(fake_measurement(fp32_peak_flops_per_s=1e3)))
    assert any("peak_dense_tflops.fp32" in p and "outside the catalog range" in p
               for p in problems)


# ============================================================================ the CLI
@pytest.mark.parametrize("argv, text", [
    (["calibrate"], "calibrate needs --measurements CSV and --gpu ID"),
    (["calibrate", "--measurements", "m.csv"], "calibrate needs --gpu ID"),
    (["calibrate", "--local", "--gpu", "h100"], "takes no --gpu"),
    (["calibrate", "--local", "--measurements", "m.csv", "--factor", "hbm_fraction"],
     "takes no --measurements, --factor"),
    (["calibrate", "--ranks", "4"], "only apply to calibrate --local"),
    (["calibrate", "--local", "--output", "x.txt"], "must end in .toml"),
])
def test_calibrate_option_errors_are_one_line(argv, text, capsys, monkeypatch):
    monkeypatch.setattr(local_bench, "measure_local", lambda cfg: pytest.fail("measured"))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and text in err[0], err


def test_calibrate_local_writes_the_entry(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")  # the command checks for it before measuring
    seen = {}

    def fake(cfg):
        seen["cfg"] = cfg
        return fake_measurement()

    monkeypatch.setattr(local_bench, "measure_local", fake)
    out = tmp_path / "cat" / "local.toml"
    assert main(["calibrate", "--local", "--quick", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert seen["cfg"] == BenchConfig.quick(2)
    assert out.exists() and "--cluster local-node" in text
    assert main(["--catalog", str(out.parent), "predict", "--cluster", "local-node",
                 "--num-gpus", "2", "--model", "gpt3-125m", "--seq-len", "256",
                 "--micro-batch", "1", "--precision", "fp32", "--eager-attention",
                 "--format", "json"]) == 0
    assert '"step_time_s"' in capsys.readouterr().out


def test_calibrate_local_names_the_refused_bounds(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(local_bench, "measure_local",
                        lambda cfg: fake_measurement(copy_bytes_per_s=1e6, axpy_bytes_per_s=1e6))
    out = tmp_path / "local.toml"
    assert main(["calibrate", "--local", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hbm_bandwidth_tb_per_s" in err[0] and out.exists()


# ============================================================================ real runs
def _calibrate_predict_and_run(folder) -> tuple[float, str]:
    """calibrate --local (reduced budget) into ``folder``, predict, run real steps;
    (measured / predicted step time, a report)."""
    from fsdpsim.measured.harness.fsdp_runs import launch
    from fsdpsim.measured.harness.local_bench import fsdp_step_times, measure_local

    m = measure_local(BenchConfig.quick(WORLD), timeout_s=180.0)
    folder.mkdir()
    (folder / "local.toml").write_text(catalog_toml(m))
    system = resolve_system(load_catalog([folder], use_env=False), cluster="local-node")
    p = predict(SPEC, system, ParallelPlan(num_gpus=WORLD, gpus_per_node=WORLD),
                TrainingConfig(seq_len=SEQ_LEN, micro_batch=MICRO_BATCH, recompute="none",
                               precision="fp32", flash_attention=False))
    per_rank = launch(fsdp_step_times, WORLD, (SPEC, MICRO_BATCH, SEQ_LEN, STEPS),
                      timeout_s=240.0)
    measured, steps = measured_step_s(per_rank, WARMUP)
    predicted = p.step_time_s
    t = p.to_dict()["time"]
    report = "\n".join(m.summary_lines()) + (
        f"\nFSDP2 step, {SPEC.name}, seq {SEQ_LEN}, micro-batch {MICRO_BATCH}, W {WORLD}, fp32: "
        f"measured {measured * 1e3:.0f} ms (median of {len(steps)}: "
        f"{', '.join(f'{s * 1e3:.0f}' for s in steps)}), predicted {predicted * 1e3:.0f} ms "
        f"(compute {t['compute_s'] * 1e3:.0f}, GEMM {t['gemm_s'] * 1e3:.0f}, attention "
        f"{t['attention_s'] * 1e3:.0f}, memory-bound {t['memory_bound_s'] * 1e3:.0f}, comm "
        f"{t['comm_s'] * 1e3:.0f}, exposed {t['exposed_comm_s'] * 1e3:.0f}); "
        f"measured / predicted = {measured / predicted:.2f}")
    return measured / predicted, report


@pytest.mark.torch
@pytest.mark.slow
def test_predicted_fsdp_step_on_this_cpu(tmp_path):
    """calibrate --local (reduced budget), then real FSDP2 steps against the prediction.

    On a quiet machine the ratio is about 1.3 (2026-11-30: 1.31, 1.36): fsdpsim prices
    element-wise kernels at the streaming bandwidth, while on one CPU thread softmax, GELU and
    log-softmax are compute bound, and FSDP2's copy-in/out and hooks are not modelled. Other
    jobs on the machine slow the steps by up to 2x more. A ratio outside the band is measured
    once more (calibration included) before the test fails: contention passes, a wrong model
    does not.
    """
    pytest.importorskip("torch")
    ratios = []
    for attempt in range(2):
        ratio, report = _calibrate_predict_and_run(tmp_path / f"attempt{attempt}")
        print(f"\nattempt {attempt + 1}:\n{report}")
        ratios.append(ratio)
        if 1.0 / RATIO_BAND <= ratio <= RATIO_BAND:
            break
    assert 1.0 / RATIO_BAND <= ratios[-1] <= RATIO_BAND, ratios
