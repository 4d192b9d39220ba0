"""``validation/gpu_check.py`` on a machine without a GPU, and committed GPU measurements.

The script's logic (GPU-name mapping, the prediction and comparison of a row, the CSV it
writes) is checked with a fake measurement; running it without CUDA must exit with status 2
and one line on stderr. Every CSV committed under ``tests/measurements/`` (written by the
script on a GPU machine) is compared with the *current* fsdpsim: measured / predicted step time
within ``STEP_RATIO_BAND`` (0.6..1.6) and ``max_memory_allocated`` / predicted allocator peak
within ``MEMORY_RATIO_BAND`` (0.8..1.25); that check is first exercised on files the script
writes here, so it runs (and can fail) with no CSV committed.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import load_script

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.measured.validate import load_measurements, predict_measurements

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "validation" / "gpu_check.py"
MEASUREMENTS = sorted((ROOT / "tests" / "measurements").glob("*.csv"))


script = load_script(SCRIPT, "gpu_check")
CATALOG = load_catalog(use_env=False)
VERSIONS = {"torch_version": "2.13.0+cu128", "cuda_version": "12.8", "fsdpsim_version": "0.1.0"}


@pytest.mark.parametrize("name, ident", [
    ("NVIDIA H200", "h200-sxm-141gb"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"),
    ("NVIDIA H100 PCIe", "h100-pcie-80gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA GH200 480GB", "gh200-96gb"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    ("AMD Instinct MI300X", "mi300x"),
])
def test_device_names_map_to_catalog_ids(name, ident):
    assert script.catalog_id_for(name) == ident
    CATALOG.accelerator(ident)  # every target exists in the catalog


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 4090", "NVIDIA H200 NVL", "Quadro P1000"])
def test_unknown_gpu_is_a_clear_error(name):
    with pytest.raises(ConfigError, match=rf"GPU '{name}' has no fsdpsim catalog entry.*--gpu"):
        script.catalog_id_for(name)


def test_case_parsing():
    assert script.parse_case("gpt3-1.3b:4:full") == script.Case("gpt3-1.3b", 4, "full", 2048)
    assert script.parse_case("gpt3-125m:8", 1024) == script.Case("gpt3-125m", 8, "none", 1024)
    for bad in ("gpt3-125m", "gpt3-125m:x", "gpt3-125m:8:selective", "gpt3-125m:0"):
        with pytest.raises(ConfigError, match="--case"):
            script.parse_case(bad)
    with pytest.raises(ConfigError, match="unknown model"):
        script.parse_case("gpt9-1t:1")


def fake_row(step_factor: float = 1.0, memory_factor: float = 1.0, **measured):
    """A row whose measurement is fsdpsim's own prediction times the given factors."""
    case = script.Case("gpt3-350m", 8, "none")
    pred = script.predict_case(case, "h200-sxm-141gb", 1, CATALOG)
    base = {"step_s": pred["predicted_step_s"] * step_factor, "steps": 10,
            "max_allocated_bytes": pred["predicted_allocated_bytes"] * memory_factor,
            "max_reserved_bytes": pred["predicted_allocated_bytes"] * memory_factor * 1.05}
    base.update(measured)
    return script.make_row(case, "h200-sxm-141gb", "NVIDIA H200", 1, base, VERSIONS, "2026-11-30",
                       CATALOG)


def test_row_compares_measured_with_predicted():
    row = fake_row(step_factor=1.25, memory_factor=0.9)
    assert row["step_ratio"] == pytest.approx(1.25)
    assert row["memory_ratio"] == pytest.approx(0.9)
    assert row["measured_tokens_per_s_per_gpu"] == pytest.approx(
        row["predicted_tokens_per_s_per_gpu"] / 1.25)
    assert row["tokens_per_s_per_gpu"] == row["measured_tokens_per_s_per_gpu"]
    # fsdpsim's peak = allocator-managed bytes + fragmentation + the runtime reserve
    assert row["predicted_peak_bytes"] > row["predicted_allocated_bytes"]
    assert script.check_row(row, CATALOG) == []
    assert "outside 0.6..1.6" in script.check_row(fake_row(step_factor=2.0), CATALOG)[0]
    assert "max_memory_allocated" in script.check_row(fake_row(memory_factor=1.5), CATALOG)[0]


def test_failed_run_is_kept_with_a_skip_reason():
    row = fake_row(error="out of memory: CUDA out of memory")
    assert math.isnan(row["measured_step_s"]) and row["skip"].startswith("out of memory")
    assert script.check_row(row, CATALOG) == []
    assert "n/a" in script.format_row(row)


def test_csv_has_the_columns_and_is_a_validate_measurements_file(tmp_path):
    rows = [fake_row(1.1, 1.0), fake_row(error="out of memory")]
    path = script.write_csv(rows, tmp_path / "sub" / "gpu_check-h200.csv")
    back = script.read_csv(path)
    assert tuple(back[0]) == script.COLUMNS
    for column in ("gpu", "n_gpus", "model", "seq_len", "micro_batch", "recompute",
                   "measured_step_s", "predicted_step_s", "measured_tokens_per_s_per_gpu",
                   "predicted_tokens_per_s_per_gpu", "max_allocated_bytes", "max_reserved_bytes",
                   "predicted_peak_bytes", "torch_version", "date"):
        assert column in script.COLUMNS
    assert float(back[0]["step_ratio"]) == pytest.approx(1.1, rel=1e-5)
    assert back[1]["measured_step_s"] == "" and back[1]["skip"] == "out of memory"
    assert script.check_row(back[0], CATALOG) == []  # strings from the CSV work too
    # `fsdpsim validate` reads the same file: the failed row is skipped, the other predicted
    result = predict_measurements(load_measurements(path), CATALOG)
    assert len(result) == 1
    assert result["error"].iloc[0] == pytest.approx(1.1 - 1.0, abs=1e-3)


def test_without_cuda_the_script_exits_with_one_line():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = subprocess.run([sys.executable, str(SCRIPT), "--steps", "1"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1, done.stderr
    assert err[0].startswith("gpu_check: no CUDA device") and done.stdout == ""


@pytest.mark.torch
@pytest.mark.slow
def test_training_code_runs_on_cpu_ranks(tmp_path, monkeypatch):
    """The GPU script's training path (FSDP2 with bf16 MixedPrecisionPolicy, SDPA, the
    recompute wrapper, two spawned ranks, results back through the queue, the CSV row) on two
    gloo CPU ranks with a short sequence; only the CUDA calls differ on a GPU."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # spawned ranks import the script module
    case = script.Case("gpt3-125m", 1, "full", seq_len=32)
    results = script.run_on_gpus([case], world=2, steps=1, warmup=0,
                                 deadline=time.time() + 300, device="cpu")
    assert [c for c, _ in results] == [case]
    measured = results[0][1]
    assert measured["steps"] == 1 and measured["step_s"] > 0, measured
    row = script.make_row(case, "h200-sxm-141gb", "cpu", 2, measured, VERSIONS, "2026-11-30",
                          CATALOG)
    assert row["skip"] == "" and row["measured_tokens_per_s_per_gpu"] == pytest.approx(
        32 / measured["step_s"])
    script.write_csv([row], tmp_path / "smoke.csv")


def _file_problems(path: Path) -> list[str]:
    """What is wrong with a measurement CSV written by the script: no rows, missing columns,
    or rows outside the bands against the *current* fsdpsim (each row printed)."""
    rows = script.read_csv(path)
    if not rows:
        return [f"{path.name} has no rows"]
    if not set(script.COLUMNS) <= set(rows[0]):
        return [f"{path.name} lacks columns"]
    for row in rows:
        print(script.format_row({k: _number(v) for k, v in row.items()}))
    return [p for row in rows for p in script.check_row(row, CATALOG)]


def test_measurement_files_are_checked_against_the_current_model(tmp_path):
    """The check applied to every CSV committed under tests/measurements/ (none ship yet: run
    validation/gpu_check.py on a GPU machine and commit its file), first on files the script
    writes here: in-band rows pass; a row 2x slower than predicted, a file without rows and
    one missing columns fail."""
    good = script.write_csv([fake_row(1.1, 1.0), fake_row(error="out of memory")],
                            tmp_path / "good.csv")
    assert _file_problems(good) == []
    slow = script.write_csv([fake_row(1.0, 1.0), fake_row(step_factor=2.0)],
                            tmp_path / "slow.csv")
    problems = _file_problems(slow)
    assert len(problems) == 1 and "outside 0.6..1.6" in problems[0]
    (tmp_path / "empty.csv").write_text(",".join(script.COLUMNS) + "\n")
    assert _file_problems(tmp_path / "empty.csv") == ["empty.csv has no rows"]
    (tmp_path / "narrow.csv").write_text("id,gpu\nx,h100\n")
    assert _file_problems(tmp_path / "narrow.csv") == ["narrow.csv lacks columns"]
    committed = [p for path in MEASUREMENTS for p in _file_problems(path)]
    assert not committed, "\n".join(committed)


def _number(text: str):
    try:
        return float(text) if text != "" else float("nan")
    except ValueError:
        return text


def test_headroom_sweep_ballast_and_rows():
    """--headroom runs each case again with a ballast tensor so fsdpsim's predicted peak is a
    given share of the memory left; those rows record num_alloc_retries and are data for the
    allocator-pressure model, so their step time is not checked against fsdpsim."""
    assert script.parse_shares("0.85, 0.9,0.98") == [0.85, 0.9, 0.98]
    for bad in ("0", "1.5", "x", ","):
        with pytest.raises(ConfigError, match="--headroom"):
            script.parse_shares(bad)
    case = script.Case("gpt3-350m", 8, "none", target_share=0.95)
    assert script.ballast_bytes(case, 100e9, 57e9) == int(100e9 - 57e9 / 0.95)
    assert script.ballast_bytes(script.Case("gpt3-350m", 8), 100e9, 57e9) == 0
    assert script.ballast_bytes(case, 50e9, 57e9) == 0
    pred = script.predict_case(case, "h200-sxm-141gb", 1, CATALOG)
    row = script.make_row(case, "h200-sxm-141gb", "NVIDIA H200", 1,
                          {"step_s": 3.0 * pred["predicted_step_s"], "steps": 10,
                           "max_allocated_bytes": pred["predicted_allocated_bytes"],
                           "max_reserved_bytes": pred["predicted_allocated_bytes"],
                           "num_alloc_retries": 42, "ballast_bytes": 7},
                          VERSIONS, "2026-11-30", CATALOG)
    assert row["id"].endswith("-at0.95") and row["target_share"] == 0.95
    assert (row["num_alloc_retries"], row["ballast_bytes"]) == (42, 7)
    assert script.check_row(row, CATALOG) == []  # 3x slower: not a failure for such a row
    assert set(row) == set(script.COLUMNS)
