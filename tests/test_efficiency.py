"""Efficiency per GPU x precision x kernel stack (fsdpsim.hardware.efficiency): the catalog's split
tables, their resolution and transfer, the measured ceilings, and the leave-one-source-out
check of ``fsdpsim calibrate``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import assert_one_line_error, run
from fsdpsim.hardware import efficiency
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.costs import compute
from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import config_inputs, predict
from fsdpsim.model.presets import get_model
from fsdpsim.hardware.system import resolve_system

CATALOG = load_catalog(use_env=False)
ROOT = Path(__file__).resolve().parents[1]
H100 = resolve_system(CATALOG, gpu="h100-sxm5-80gb")
LLAMA = get_model("llama3-8b")


def _inputs(precision: str, framework: str):
    training = TrainingConfig(seq_len=4096, micro_batch=1, recompute="none",
                              precision=precision)
    return config_inputs(LLAMA, H100, ParallelPlan(8, 8, "full", framework=framework),
                         training)


def test_the_loader_reads_the_per_precision_tables():
    acc = CATALOG.accelerator("h100")
    tables = acc.efficiency.tables
    assert tables["bf16"]["pytorch"]["matmul_fraction"] == 0.6609
    assert tables["bf16"]["matmul_ceiling"] == 0.803
    assert tables["fp8"]["matmul_ceiling"] == 0.709
    assert tables["fitted_on"] == ("te", "fp8")
    bf16 = efficiency.resolve(acc, "bf16", "pytorch")
    fp8 = efficiency.resolve(acc, "fp8", "te")
    assert bf16.values["matmul_fraction"] == 0.6609 and not bf16.transferred
    assert fp8.values["matmul_fraction"] == 0.6667 and not fp8.transferred
    # a GPU whose one table declares nothing resolves to it, silently
    v100 = efficiency.resolve(CATALOG.accelerator("v100-sxm2-32gb"), "fp16", "te")
    assert v100.values["matmul_fraction"] > 0 and v100.notes() == [] and not v100.transferred
    # A100's one table declares its fit (PyTorch FSDP, BF16): other stacks take it, transferred
    a100 = efficiency.resolve(CATALOG.accelerator("a100-sxm4-80gb"), "bf16", "te")
    assert a100.values["matmul_fraction"] == 0.755 and a100.transferred
    assert "transferred from (pytorch, bf16)" in a100.notes()[0]
    own = efficiency.resolve(CATALOG.accelerator("a100-sxm4-80gb"), "bf16", "pytorch")
    assert own.values["matmul_fraction"] == 0.755 and own.notes() == []


def _user(tmp_path: Path, extra: str) -> Path:
    text = (ROOT / "tests" / "test_catalog.py").read_text()
    accelerator = text.split('ACCELERATOR = """\\\n', 1)[1].split('"""', 1)[0]
    (tmp_path / "user.toml").write_text(accelerator + extra)
    return tmp_path


@pytest.mark.parametrize("extra, words", [
    ("\n[accelerator.efficiency.bf16.pytorch]\nmatmul_fraction = 0.7\n",
     "[efficiency.bf16.pytorch]: missing required key 'source'"),
    ("\n[accelerator.efficiency.bf16]\nmatmul_fraction = 0.7\n",
     "unknown key 'matmul_fraction'"),
    ("\n[accelerator.efficiency.bf16.torch]\nmatmul_fraction = 0.7\nsource = 'x'\n",
     "unknown key 'torch'"),
    ("\n[accelerator.efficiency.fp8.te]\nsource = 'x'\n", "sets no fraction"),
    ("\n[accelerator.efficiency.bf16]\nmatmul_ceiling = 0.8\n", ""),  # a ceiling alone is fine
    ("\n[accelerator.efficiency.bf16.te]\nmatmul_fraction = 1.7\nsource = 'x'\n",
     "[bf16] [te]: key 'matmul_fraction': 1.7 is not accepted"),
])
def test_a_malformed_split_table_is_one_clear_line(tmp_path, capsys, extra, words):
    folder = _user(tmp_path, extra)
    if not words:
        assert load_catalog([folder], use_env=False).accelerator("test-gpu").efficiency.tables[
            "bf16"]["matmul_ceiling"] == 0.8
        return
    with pytest.raises(ConfigError) as info:
        load_catalog([folder], use_env=False)
    assert words in str(info.value)
    line = assert_one_line_error(*run(capsys, "--catalog", str(folder), "predict", "--gpu",
                                      "test-gpu"))
    assert words in line


def test_a_fallback_stack_needs_its_precision(tmp_path):
    folder = _user(tmp_path, "").joinpath("user.toml")
    folder.write_text(folder.read_text().replace('source = "unit test"\n"""', "")
                      + 'stack = "te"\n')
    with pytest.raises(ConfigError, match="'stack' and 'precision' .* go together"):
        load_catalog([tmp_path], use_env=False)


def test_fp8_and_bf16_plans_on_h100_use_different_fractions():
    """One 8,192-cube GEMM, hand-checked from the catalog's numbers: BF16 under PyTorch at
    989.4 TFLOP/s x 0.6609, FP8 under Transformer Engine at 1,978.9 TFLOP/s x 0.6667, each with
    the tile term (k + 256) and the Hockney tail 3.30 GFLOP / rate (compute.gemm_time_s)."""
    n = 8192.0
    for precision, framework, peak, fraction in (("bf16", "fsdp2", 989.4e12, 0.6609),
                                                 ("fp8", "megatron", 1978.9e12, 0.6667)):
        x = _inputs(precision, framework)
        assert x["matmul_fraction"] == fraction
        rate = x["peak_flops_per_s"] * x["matmul_fraction"]
        t = compute.gemm_time_s(n, n, n, rate, x["hbm_bytes_per_s"] * x["hbm_fraction"],
                                x["matmul_half_flops"], x["matmul_half_k"])
        by_hand = (2 * n * n * (n + 256) + 3.30e9) / (peak * fraction)
        assert float(t) == pytest.approx(by_hand, rel=1e-9)
    # 16-bit GEMMs under PyTorch: 1.734 ms + 5.0 us; 8-bit under TE: 0.859 ms + 2.5 us
    assert (2 * n * n * (n + 256) + 3.30e9) / (989.4e12 * 0.6609) == pytest.approx(1.7391e-3,
                                                                                   rel=1e-3)


def test_a_transferred_triple_is_named_in_notes_and_widens_the_range():
    training = TrainingConfig(seq_len=4096, micro_batch=1, recompute="none", precision="bf16")
    own = predict(LLAMA, H100, ParallelPlan(8, 8, "full"), training)
    moved = predict(LLAMA, H100, ParallelPlan(8, 8, "optimizer", framework="megatron"),
                    training)
    note = [n for n in moved.notes if "transferred from" in n]
    assert note and "(te, bf16)" in note[0] and "(pytorch, bf16)" in note[0]
    assert not [n for n in own.notes if "transferred from" in n]
    assert moved.interval["efficiency_transferred"] and not own.interval["efficiency_transferred"]
    lo_own, hi_own = (own.interval[k] / own.values["tokens_per_s_per_gpu"]
                      for k in ("tokens_per_s_per_gpu_low", "tokens_per_s_per_gpu_high"))
    lo, hi = (moved.interval[k] / moved.values["tokens_per_s_per_gpu"]
              for k in ("tokens_per_s_per_gpu_low", "tokens_per_s_per_gpu_high"))
    # both use the uncalibrated 0.70..1.10 (the PyTorch table states no range); the transfer
    # widens it by 12.5 % on each side (H100's two fitted stacks: 0.823 and 0.940 of MAMF),
    # times the plans' communication terms (>= 1 apart)
    t = efficiency.TRANSFER_UNCERTAINTY
    assert t == pytest.approx(1 - (0.6609 / 0.803) / (0.6667 / 0.709), abs=0.005)
    assert lo_own == pytest.approx(0.70, rel=0.02) and hi_own == pytest.approx(1.10, rel=0.02)
    assert lo <= 0.70 * (1 - t) * 1.0001 and hi >= 1.10 * (1 + t) * 0.9999


@pytest.mark.parametrize("gpu, fraction", [("b200", 0.639), ("mi300x", 0.423)])
def test_a_table_scaled_from_another_gpus_fit_is_a_transfer(gpu, fraction, capsys):
    """B200's and MI300X's PyTorch BF16 tables are literature values (MAMF x H100's fitted share
    of its MAMF): predict names them as carried from H100 and widens the range by the transfer
    spread on both ends, so a run at half the predicted speed is inside it."""
    got = efficiency.resolve(CATALOG.accelerator(gpu), "bf16", "pytorch")
    assert got.values["matmul_fraction"] == fraction and got.transferred
    assert got.scaled_from == "h100-sxm5-80gb" and not got.calibrated
    system = resolve_system(CATALOG, gpu=gpu)
    training = TrainingConfig(seq_len=4096, micro_batch=1, recompute="none", precision="bf16")
    p = predict(LLAMA, system, ParallelPlan(8, 8, "full"), training)
    assert [n for n in p.notes if "carries h100-sxm5-80gb's fit" in n]
    assert p.interval["efficiency_transferred"] and not p.interval["calibrated"]
    t = efficiency.SCALED_UNCERTAINTY
    assert t == pytest.approx(1 - 450 / 668.4, abs=0.005) and got.uncertainty == t
    lo, hi = (p.interval[k] / p.values["tokens_per_s_per_gpu"]
              for k in ("tokens_per_s_per_gpu_low", "tokens_per_s_per_gpu_high"))
    assert lo <= 0.70 * (1 - t) * 1.0001 < 0.5 and hi >= 1.10 * (1 + t) * 0.9999
    rc, out, err = run(capsys, "predict", "--gpu", gpu, "--precision", "bf16")
    assert rc == 0, err
    assert "carries h100-sxm5-80gb's fit" in " ".join(out.split())


def test_predict_cli_prints_the_transfer_note(capsys):
    rc, out, err = run(capsys, "predict", "--gpu", "h100", "--precision", "bf16",
                       "--framework", "megatron", "--sharding", "optimizer")
    assert rc == 0, err
    assert "no calibration for stack x precision (te, bf16)" in out
    assert "transferred from (pytorch, bf16)" in out


def test_the_h100_fp8_fit_is_below_its_ceiling_and_a_fit_above_one_is_noted(tmp_path):
    """H100's Transformer Engine FP8 fit (0.6667) is under its FP8 MAMF ceiling 0.709: no note.
    Under a (made-up) ceiling of 0.6 the same fraction is said to absorb other terms."""
    assert efficiency.resolve(CATALOG.accelerator("h100"), "fp8", "te").notes() == []
    (tmp_path / "ceiling.toml").write_text(
        '[[accelerator]]\nid = "h100-sxm5-80gb"\noverride = true\n\n'
        '[accelerator.efficiency.fp8]\nmatmul_ceiling = 0.6\nceiling_source = "unit test"\n')
    acc = load_catalog([tmp_path], use_env=False).accelerator("h100")
    note = efficiency.resolve(acc, "fp8", "te").notes()
    assert len(note) == 1 and "above the measured best-shape GEMM ceiling 0.6" in note[0]


# --- calibrate: the ceiling check and leave-one-source-out on a synthetic two-source file ----

A_IDS = ["mosaic-145", "mosaic-146", "mosaic-147", "mosaic-155", "mosaic-156", "mosaic-157"]
B_IDS = ["mosaic-148", "mosaic-158", "mosaic-159"]


@pytest.fixture(scope="module")
def two_sources(tmp_path_factory):
    """Nine compute-bound MosaicML A100-40GB rows (MPT-7B, 13B): source ``src-a`` measured
    exactly at today's prediction, ``src-b`` at 0.8 x it (predicted 25 % too fast)."""
    from fsdpsim.measured.calibrate import _predict
    from fsdpsim.measured.validate import engine_inputs, load_measurements

    raw = pd.read_csv(ROOT / "validation" / "data" / "published_calibration.csv")
    raw = raw[raw["id"].isin(A_IDS + B_IDS)].reset_index(drop=True)
    folder = tmp_path_factory.mktemp("loso")
    path = folder / "two.csv"
    raw.to_csv(path, index=False)
    rows = load_measurements(str(path), CATALOG)
    predicted = _predict(engine_inputs(rows, CATALOG), [], np.array([]))
    by_id = dict(zip(rows["id"], predicted))
    b = raw["id"].isin(B_IDS)
    raw["source_key"] = np.where(b, "src-b", "src-a")
    raw["tokens_per_s_per_gpu"] = [by_id[i] * (0.8 if i in B_IDS else 1.0) for i in raw["id"]]
    raw.to_csv(path, index=False)
    return path


def test_loso_on_two_sources_gives_the_hand_checked_numbers(two_sources, capsys):
    from fsdpsim.measured.loso import leave_one_source_out
    from fsdpsim.measured.validate import load_measurements

    rows = load_measurements(str(two_sources), CATALOG)
    folds = {f.source: f for f in leave_one_source_out(rows, CATALOG, ["a100-sxm4-40gb"],
                                                        ["matmul_fraction"])}
    a, b = folds["src-a"], folds["src-b"]
    # B held out: the fit on A alone keeps the catalog's 0.755 (A is measured at it), so B's
    # error stays 1/0.8 - 1 = 25 % before and after; nothing gained, nothing lost
    assert b.rows == 3 and b.values["matmul_fraction"] == pytest.approx(0.755, abs=1e-3)
    assert b.mape_before == pytest.approx(0.25, abs=1e-6)
    assert b.mape_after == pytest.approx(0.25, abs=2e-3)
    assert abs(b.gain_pp) < 0.5 and abs(b.loss_pp) < 0.5 and not b.flagged
    # A held out: the fit on B alone slows every prediction to ~0.8x (GEMM-bound rows), so B
    # gains 3 x 25 = 75 points and A, exact before, loses ~6 x 20 = 120: flagged
    assert a.rows == 6 and a.mape_before == pytest.approx(0.0, abs=1e-6)
    assert a.gain_pp == pytest.approx(75.0, abs=3.0)
    assert a.mape_after == pytest.approx(0.20, abs=0.03)
    assert a.loss_pp == pytest.approx(6 * 100 * a.mape_after, rel=1e-9)
    assert a.flagged
    rc, out, err = run(capsys, "calibrate", "--measurements", str(two_sources), "--gpu",
                       "a100-sxm4-40gb", "--framework", "", "--factor", "matmul_fraction",
                       "--loso")
    assert rc == 0, err
    assert "src-a" in out and "FLAGGED" in out and out.count("FLAGGED") == 1
    assert "ABOVE THE GEMM CEILING" not in out and not a.above_ceiling


def test_loso_marks_a_fold_above_the_ceiling(two_sources, tmp_path, capsys):
    """With a (made-up) A100 16-bit ceiling of 0.74, the fold fitted on A alone (0.755) is
    above it and marked; the fold fitted on B alone (about 0.6) is not."""
    (tmp_path / "ceiling.toml").write_text(
        '[[accelerator]]\nid = "a100-sxm4-40gb"\noverride = true\n\n'
        '[accelerator.efficiency.bf16]\nmatmul_ceiling = 0.74\nceiling_source = "unit test"\n')
    rc, out, err = run(capsys, "--catalog", str(tmp_path), "calibrate", "--measurements",
                       str(two_sources), "--gpu", "a100-sxm4-40gb", "--framework", "",
                       "--factor", "matmul_fraction", "--loso")
    assert rc == 0, err
    marked = [line for line in out.splitlines() if "ABOVE THE GEMM CEILING" in line]
    assert len(marked) == 1 and marked[0].startswith("src-b")
    assert "a100-sxm4-40gb bf16 0.74 (unit test)" in marked[0]


def test_calibrate_refuses_a_fit_above_the_ceiling(two_sources, tmp_path, capsys):
    """With a (made-up) A100 16-bit ceiling of 0.5, the rows' fit (about 0.72) is refused."""
    (tmp_path / "ceiling.toml").write_text(
        '[[accelerator]]\nid = "a100-sxm4-40gb"\noverride = true\n\n'
        '[accelerator.efficiency.bf16]\nmatmul_ceiling = 0.5\n'
        'ceiling_source = "unit test"\n')
    line = assert_one_line_error(*run(
        capsys, "--catalog", str(tmp_path), "calibrate", "--measurements", str(two_sources),
        "--gpu", "a100-sxm4-40gb", "--framework", "", "--factor", "matmul_fraction"))
    assert "above the measured best-shape GEMM ceiling of a100-sxm4-40gb bf16 0.5 (unit test)" \
        in line
    # the same rows under the built-in catalog (no A100 ceiling) fit
    rc, out, err = run(capsys, "calibrate", "--measurements", str(two_sources), "--gpu",
                       "a100-sxm4-40gb", "--framework", "", "--factor", "matmul_fraction")
    assert rc == 0, err


def test_h100_attention_fit_is_below_its_kernel_ceiling_and_one_above_is_refused(tmp_path,
                                                                                 capsys):
    """H100's fused attention ceiling (cuDNN forward+backward in FlashAttention-3's kernel
    benchmarks) is 0.57: the fit (0.3432) is under it, no text. Under a (made-up) ceiling of 0.3
    the same fraction is named, and calibrate refuses the rows' fit with one line."""
    from fsdpsim.measured.calibrate import attention_ceiling_violations

    rows = pd.DataFrame({"gpu": ["h100-sxm5-80gb"], "precision": ["fp8"]})
    table = CATALOG.accelerator("h100").efficiency.tables["bf16"]
    assert table["fused_attention_ceiling"] == 0.57
    fitted = efficiency.resolve(CATALOG.accelerator("h100"), "fp8", "te").values[
        "fused_attention_fraction"]
    assert fitted < 0.57 and attention_ceiling_violations(fitted, rows, CATALOG) == []
    (tmp_path / "ceiling.toml").write_text(
        '[[accelerator]]\nid = "h100-sxm5-80gb"\noverride = true\n\n'
        '[accelerator.efficiency.bf16]\nfused_attention_ceiling = 0.3\n'
        'attention_ceiling_source = "unit test"\n')
    low = load_catalog([tmp_path], use_env=False)
    assert attention_ceiling_violations(fitted, rows, low) == [
        "h100-sxm5-80gb fused attention 0.3 (unit test)"]
    line = assert_one_line_error(*run(
        capsys, "--catalog", str(tmp_path), "calibrate", "--measurements",
        str(ROOT / "validation" / "data" / "hybrid_calibration.csv"), "--gpu", "h100-sxm5-80gb",
        "--framework", "", "--factor", "fused_attention_fraction", "--factor",
        "matmul_fraction"))
    assert "above the measured fused attention kernel ceiling of h100-sxm5-80gb fused " \
        "attention 0.3 (unit test)" in line


def test_where_keeps_rows_or_says_why_not(two_sources, capsys):
    line = assert_one_line_error(*run(
        capsys, "calibrate", "--measurements", str(two_sources), "--gpu", "a100-sxm4-40gb",
        "--framework", "", "--where", "n_gpus >", "--factor", "matmul_fraction"))
    assert "--where 'n_gpus >' cannot be evaluated" in line
    line = assert_one_line_error(*run(
        capsys, "calibrate", "--measurements", str(two_sources), "--gpu", "a100-sxm4-40gb",
        "--framework", "", "--where", "n_gpus > 100000", "--factor", "matmul_fraction"))
    assert "keeps none of the 9 rows" in line


def test_calibrate_writes_fractions_to_the_table_the_rows_run_at(tmp_path):
    """H100 PyTorch BF16 rows resolve from ``[efficiency.bf16.pytorch]``: a fit of them must
    land there (the fallback table would not reach them); A100 rows, without split tables, and
    rows of two precision classes keep the fallback table."""
    from fsdpsim.measured.calibrate import CalibrationResult, split_table

    def rows(gpu, precisions, recipe="fsdp2"):
        return pd.DataFrame({"gpu": gpu, "precision": precisions, "recipe": recipe})

    assert split_table(rows("h100-sxm5-80gb", ["bf16", "bf16"]), CATALOG) == ("bf16", "pytorch")
    assert split_table(rows("h100-sxm5-80gb", ["bf16", "bf16"], "megatron"), CATALOG) == (
        "bf16", "te")  # resolved by transfer from the pytorch table: the fit is its own
    assert split_table(rows("h100-sxm5-80gb", ["bf16", "fp8"]), CATALOG) is None
    assert split_table(rows("a100-sxm4-80gb", ["bf16"]), CATALOG) is None
    result = CalibrationResult(gpus=("h100-sxm5-80gb",), values={"matmul_fraction": 0.61,
                                                                  "hbm_fraction": 0.7},
                               before={"mape": 0.2}, after={"rows": 6, "mape": 0.02},
                               rows=pd.DataFrame(), refused={},
                               interval=(0.9, 1.1), table=("bf16", "pytorch"))
    (tmp_path / "fit.toml").write_text(result.overlay_toml("x.csv"))
    acc = load_catalog([tmp_path], use_env=False).accelerator("h100")
    assert acc.efficiency.hbm_fraction == 0.7
    assert acc.efficiency.matmul_fraction == 0.6667  # the fallback keeps the FP8 fit
    got = efficiency.resolve(acc, "bf16", "pytorch")
    assert got.values["matmul_fraction"] == 0.61 and got.interval == (0.9, 1.1)


NANOTRON = ROOT / "validation" / "data" / "hopper_bf16_nanotron.csv"


def test_the_h100_pytorch_bf16_fraction_is_what_its_command_gives(capsys):
    """The catalog's [efficiency.bf16.pytorch] on H100 is reproduced by the command its source
    names (the single-node, pipeline-free nanotron rows), written to that table."""
    rc, out, err = run(capsys, "calibrate", "--measurements", str(NANOTRON), "--gpu", "h100",
                       "--framework", "", "--factor", "matmul_fraction", "--where",
                       "n_gpus == 8 and pp == 1 and tp <= 4")
    assert rc == 0, err
    # the catalog already holds the fit: before and after agree
    assert "before: 20 rows, MAPE 4.3 %" in out and "after : 20 rows, MAPE 4.3 %" in out
    assert "[accelerator.efficiency.bf16.pytorch]\nmatmul_fraction = 0.6609" in out


def test_only_transformer_engine_runs_the_fused_attention_fraction():
    """Megatron's recipe selects the fused-attention fraction in the engine; under DeepSpeed,
    InternEvo or Megatron-LM 2021 (the same recipe, not Transformer Engine) it is the
    FlashAttention-2 one: H100's 0.3432 (TE, fitted) against its 0.187."""
    acc = CATALOG.accelerator("h100")
    assert efficiency.resolve(acc, "bf16", "te").values["fused_attention_fraction"] == 0.3432
    for stack in ("deepspeed", "megatron-lm", "pytorch"):
        got = efficiency.resolve(acc, "bf16", stack).values
        assert got["fused_attention_fraction"] == got["attention_fraction"] == 0.187
