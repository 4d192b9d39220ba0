"""The LM head's precision under low-precision training (which ops stay in BF16). Megatron-Core's output layer is a ``tensor_parallel.ColumnParallelLinear``, outside
Transformer Engine's FP8 autocast, so it runs in the 16-bit type unless ``fp8_output_proj``
(Megatron-LM 3f6a2ed844, MXFP8 only); torchtitan's FP8 recipes filter ``output`` out of their
conversion. fsdpsim's default is the 16-bit head; ``--fp8-lm-head`` runs it in the format."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdpsim import engine
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.costs import compute
from fsdpsim.engine import layers
from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import config_inputs, predict
from fsdpsim.model.presets import get_model
from fsdpsim.hardware.system import resolve_system

CATALOG = load_catalog(use_env=False)
ROOT = Path(__file__).resolve().parents[1]
H100 = resolve_system(CATALOG, gpu="h100-sxm5-80gb")


def _root_times(precision, fp8_lm_head, system=H100):
    training = TrainingConfig(seq_len=4096, micro_batch=1, recompute="none",
                              precision=precision, fp8_lm_head=fp8_lm_head)
    x = config_inputs(get_model("llama3-8b"), system, ParallelPlan(8, 8, "full"), training)
    g = engine.prepare({**x, "micro_batch": 1.0, "recompute": 0, "grad_accum": 1.0})
    r, w = layers.rates(g), layers.widths(g)
    return g, r, w, layers.root_times(g, r, w)


@pytest.mark.parametrize("precision", ["fp8", "mxfp8"])
def test_the_head_runs_at_the_16_bit_peak_unless_asked(precision):
    """The head's GEMMs take the time of ``compute.linear_time_s`` at the 16-bit rate (half
    H100's FP8 peak) by default and at the format's rate with ``fp8_lm_head``."""
    system = H100 if precision == "fp8" else resolve_system(CATALOG, gpu="b200")
    g, r, w, sixteen = _root_times(precision, False, system)
    _, _, _, low = _root_times(precision, True, system)
    acc = system.accelerator
    assert g.lm_head_peak_ratio == pytest.approx(
        acc.peak_for("bf16") / acc.peak_for("fp8"), rel=1e-12)
    assert g.lm_head_peak_ratio == pytest.approx(0.5, rel=0.01)
    for rate, times in ((r.matmul * g.lm_head_peak_ratio, sixteen), (r.matmul, low)):
        fwd, bwd = compute.linear_time_s(w.tokens, w.vocab, g.d_model, rate, r.hbm,
                                         g.matmul_half_flops, g.matmul_half_k,
                                         g.compute_bytes)
        assert times.head_gemm_s == pytest.approx(fwd, rel=1e-12)
        assert times.head_gemm_bwd_s == pytest.approx(bwd, rel=1e-12)
    # a 4,096 x 4,096 x 128,256 GEMM is compute bound: the 16-bit head takes ~2x as long
    assert 1.8 < sixteen.head_gemm_s / low.head_gemm_s < 2.01


def test_bf16_runs_are_unchanged_and_fp8_runs_slow_down_by_the_head():
    """In BF16 the head is already 16-bit (ratio 1); in FP8 the step grows by about the head's
    extra GEMM time (a single-GPU-node FSDP run: compute bound)."""
    g, _, _, _ = _root_times("bf16", False)
    assert g.lm_head_peak_ratio == 1.0
    plan = ParallelPlan(8, 8, "full")
    steps = {}
    for head in (False, True):
        training = TrainingConfig(seq_len=4096, micro_batch=1, recompute="none",
                                  precision="fp8", fp8_lm_head=head)
        steps[head] = predict(get_model("llama3-8b"), H100, plan, training)
    _, _, _, sixteen = _root_times("fp8", False)
    _, _, _, low = _root_times("fp8", True)
    extra = (sixteen.head_gemm_s + sixteen.head_gemm_bwd_s
             - low.head_gemm_s - low.head_gemm_bwd_s)
    grown = steps[False].values["compute_s"] - steps[True].values["compute_s"]
    assert grown == pytest.approx(extra, rel=1e-9)
    assert steps[False].values["mfu"] < steps[True].values["mfu"]
    assert steps[False].values["model_flops_per_step"] == steps[True].values["model_flops_per_step"]


def test_fp8_lm_head_needs_a_low_precision_everywhere(capsys):
    from conftest import assert_one_line_error, run

    with pytest.raises(ConfigError, match="fp8_lm_head needs a low-precision format"):
        TrainingConfig(seq_len=4096, precision="bf16", fp8_lm_head=True)
    for command in (("predict",), ("search",), ("compare", "--gpu", "h100", "--num-gpus", "8")):
        line = assert_one_line_error(*run(capsys, *command, "--model", "llama3-8b",
                                          "--fp8-lm-head"))
        assert "fp8_lm_head needs a low-precision format" in line
    line = assert_one_line_error(*run(capsys, "sweep", "--model", "llama3-8b",
                                      "--fp8-lm-head"))
    assert "--fp8-lm-head needs a low-precision --precision" in line


def test_cli_and_sweep_carry_the_option(capsys):
    import json

    from conftest import run, sweep

    args = ("predict", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "8",
            "--precision", "fp8", "--micro-batch", "1", "--recompute", "none",
            "--format", "json")
    rc, plain, err = run(capsys, *args)
    assert rc == 0, err
    rc, head, err = run(capsys, *args, "--fp8-lm-head")
    assert rc == 0, err
    plain, head = json.loads(plain), json.loads(head)
    assert plain["training"]["fp8_lm_head"] is False and head["training"]["fp8_lm_head"] is True
    assert head["tokens_per_s_per_gpu"] > plain["tokens_per_s_per_gpu"]
    rows = sweep(CATALOG, model="llama3-8b", gpu="h100", num_gpus="8", precision="fp8",
                 micro_batch="1", recompute="none", fp8_lm_head=True)
    assert bool(rows["training.fp8_lm_head"].iloc[0])
    assert rows["tokens_per_s_per_gpu"].iloc[0] == pytest.approx(
        head["tokens_per_s_per_gpu"], rel=1e-9)
    rc, out, err = run(capsys, "search", "--model", "llama3-8b", "--gpu", "b200",
                       "--num-gpus", "8", "--precision", "mxfp8", "--fp8-lm-head", "--top", "1",
                       "--emit", "megatron")
    assert rc == 0, err
    assert "fp8_output_proj" in out


def test_published_deepseek_rows_carry_the_head_precision():
    from fsdpsim.measured.validate import load_measurements

    rows = load_measurements(ROOT / "validation" / "data" / "hybrid_calibration.csv", CATALOG)
    ds = rows[rows["model"].astype(str).str.contains("DeepSeek") & (rows["skip"] == "")]
    head = ds[ds["fp8_lm_head"] == True]  # noqa: E712 (a column of objects)
    assert len(head) >= 6 and set(head["gpu"]) <= {"gb300", "gb200", "b300"}
    assert set(head["precision_format"]) == {"mxfp8"}
    others = rows[~rows.index.isin(head.index) & (rows["skip"] == "")]
    assert not others["fp8_lm_head"].fillna(False).astype(bool).any()


def test_torchtitan_emit_filters_the_head_unless_asked(capsys):
    """torchtitan's FP8 recipes keep the output layer in BF16 (``filter_fqns = ["output"]``);
    the emitted config does the same unless ``--fp8-lm-head``."""
    from conftest import run

    args = ("search", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "8",
            "--precision", "fp8", "--top", "1", "--emit", "torchtitan", "--fix",
            "recompute=none", "--fix", "sharding=full")  # a plan torchtitan can run
    rc, out, err = run(capsys, *args)
    assert rc == 0, err
    assert 'filter_fqns = ["output"]' in out
    rc, out, err = run(capsys, *args, "--fp8-lm-head")
    assert rc == 0, err
    assert "filter_fqns" not in out.split("[quantize.linear.float8]")[1]
