"""Defects users reproduced, each pinned: one line on stderr naming the value and what is
accepted, exit status 2, nothing on stdout, never a traceback (and never a hang)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, assert_one_line_error, run

#: One run of fsdpsim's own measurement schema (llama3-8b, FSDP on 16 H100).
ROW = dict(id="x", model="llama3-8b", gpu="h100", n_gpus=16, gpus_per_node=8,
           inter_node_gbps_per_gpu=400, seq_len=4096, micro_batch=2, grad_accum=1,
           sharding="full", recompute="none", tokens_per_s_per_gpu=8000)
HEADER = ",".join(ROW)
CELLS = ",".join(str(v) for v in ROW.values())


# -- measurement CSVs whose rows hold more fields than the header ---------------------------------
@pytest.mark.parametrize("extra, line_no", [(",7", 2), (",7,8", 2), (",7,8,9", 2)])
def test_rows_with_more_fields_than_the_header_name_the_line(capsys, tmp_path, extra, line_no):
    """Every row one (or more) field too long: pandas took the leading cells as an index and
    shifted the columns (one extra) or failed on a MultiIndex (two or more)."""
    path = tmp_path / "m.csv"
    path.write_text(f"{HEADER}\n{CELLS}{extra}\n{CELLS.replace('x', 'y', 1)}{extra}\n")
    line = assert_one_line_error(*run(capsys, "validate", str(path)))
    fields = len(ROW) + extra.count(",")
    assert f"line {line_no} has {fields} fields, the header {len(ROW)}" in line, line


def test_one_row_with_more_fields_names_its_line(capsys, tmp_path):
    path = tmp_path / "m.csv"
    path.write_text(f"{HEADER}\n{CELLS}\n{CELLS.replace('x', 'y', 1)},7\n")
    line = assert_one_line_error(*run(capsys, "validate", str(path)))
    assert "line 3" in line and f"Expected {len(ROW)} fields" in line, line


def test_reading_a_large_mixed_column_warns_nothing(tmp_path):
    """pandas reads big files in chunks and warns (DtypeWarning) when a column's type differs
    between chunks; the reader takes each column whole."""
    path = tmp_path / "m.csv"
    numbers = "\n".join(f"{i},1" for i in range(300_000))
    path.write_text(f"id,mixed\n{numbers}\n{300_000},text\n")
    proc = subprocess.run([sys.executable, "-W", "default", "-m", "fsdpsim.cli", "validate",
                           str(path)], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == ""
    assert "Warning" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "missing column(s)" in proc.stderr


# -- search --fix recompute_layers=0 --------------------------------------------------------------
@pytest.mark.parametrize("emit, says", [("torchtitan", 'mode = "none"'),
                                        ("megatron", "--tensor-model-parallel-size")])
def test_search_with_no_layer_recomputed_exports_no_recompute(capsys, emit, says):
    rc, out, err = run(capsys, "search", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus",
                       "8", "--fix", "recompute_layers=0", "--fix", "sharding=full",
                       "--emit", emit)  # FSDP: a plan both frameworks run
    assert rc == 0, err
    assert says in out and "recompute-num-layers" not in out and "every 0" not in out


# -- output paths: checked before the work, every command alike -----------------------------------
LONG_NAME = "a" * 300 + ".toml"


@pytest.mark.parametrize("name, says", [(LONG_NAME, "File name too long"),
                                        ("file/out.toml", "a folder on the path is a file")])
def test_calibrate_output_is_checked_before_the_fit(capsys, tmp_path, monkeypatch, name, says):
    (tmp_path / "file").write_text("")
    fitted = []
    import fsdpsim.measured.calibrate as calibration

    monkeypatch.setattr(calibration, "fit", lambda *a, **k: fitted.append(1))
    line = assert_one_line_error(*run(
        capsys, "calibrate", "--measurements", str(ROOT / "validation/data/"
                                                   "published_calibration.csv"),
        "--gpu", "a100-sxm4-80gb", "--output", str(tmp_path / name)))
    assert says in line and not fitted, line


def _unwritable(tmp_path: Path, suffix: str) -> str:
    (tmp_path / "file").write_text("")
    return str(tmp_path / "file" / f"out{suffix}")


@pytest.mark.parametrize("args, suffix", [
    (("sweep", "--num-gpus", "8"), ".csv"),
    (("plot", "throughput"), ".png"),
    (("report", "--gpu", "h100", "--num-gpus", "8"), ".html"),
    (("calibrate", "--measurements", "validation/data/published_calibration.csv", "--gpu",
      "a100-sxm4-80gb"), ".toml"),
])
def test_unwritable_output_is_one_line_exit_2(capsys, tmp_path, monkeypatch, args, suffix):
    monkeypatch.chdir(ROOT)
    line = assert_one_line_error(*run(capsys, *args, "--output", _unwritable(tmp_path, suffix)))
    assert "--output" in line and "out" + suffix in line, line


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_write_that_fails_midway_is_exit_2(capsys, tmp_path):
    """Every command's write failure goes through output.cannot_write: status 2, one line."""
    from fsdpsim.util.output import OutputError, cannot_write

    err = cannot_write(tmp_path / "x.svg", OSError(28, "No space left on device"))
    assert isinstance(err, OutputError) and "No space left on device" in str(err)
    line = assert_one_line_error(*run(capsys, "sweep", "--num-gpus", "8", "-o", "/dev/full"))
    assert "/dev/full" in line and "No space left" in line


# -- a model config that is not a regular file -----------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_model_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    # opening the FIFO would wait for a writer forever: the timeout turns that into a failure
    proc = subprocess.run([sys.executable, "-m", "fsdpsim.cli", "predict", "--model", str(fifo)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "a named pipe (FIFO); give a regular file" in proc.stderr, proc.stderr


# -- calibrate's filters ----------------------------------------------------------------------------
def test_calibrate_unknown_framework_names_it_and_the_accepted_ones(capsys):
    line = assert_one_line_error(*run(
        capsys, "calibrate", "--measurements", str(ROOT / "validation/data/"
                                                   "published_calibration.csv"),
        "--gpu", "a100", "--framework", "zzz"))
    assert "--framework 'zzz' matches no framework" in line
    assert "'Megatron-LM PTD-P'" in line and "or '' for every row" in line


def test_calibrate_known_framework_says_which_filter_left_nothing(capsys):
    line = assert_one_line_error(*run(
        capsys, "calibrate", "--measurements", str(ROOT / "validation/data/"
                                                   "published_calibration.csv"),
        "--gpu", "h100", "--framework", "fsdp"))
    assert "139 with --framework 'fsdp'" in line and "0 on --gpu h100-sxm5-80gb" in line
    assert "fittable rows' GPUs: a100-sxm4-40gb, a100-sxm4-80gb" in line


# -- search spaces too large to search --------------------------------------------------------------
def test_search_on_a_million_gpus_at_a_batch_too_large_answers_before_building(capsys,
                                                                               monkeypatch):
    """DeepSeek-V3 on 2^20 GPUs at a batch of 2^20, under a framework whose mesh dimensions
    take any order (FSDP1 on a user's device mesh), has tens of millions of candidates: the
    search refuses from its size estimate, before a plan is built (building one fails this
    test)."""
    import fsdpsim.drivers.search.run as search_module
    import fsdpsim.drivers.search.explain as explain

    def refuse(*_a, **_k):
        raise AssertionError("plans were built")

    monkeypatch.setattr(explain, "enumerate_plans", refuse)
    monkeypatch.setattr(search_module, "enumerate_families", refuse)
    line = assert_one_line_error(*run(capsys, "search", "--model", "deepseek-v3", "--num-gpus",
                                      "1048576", "--global-batch", "1048576",
                                      "--framework", "fsdp1"))
    assert "too large: up to" in line and "20,000,000" in line and "--fix" in line


@pytest.mark.slow  # about 10 s
def test_search_on_a_million_gpus_at_the_default_batch_ranks_plans(capsys):
    """At the default batch each mesh trains the batch moved to its data-parallel degree, so
    DeepSeek-V3 on 2^20 GPUs gets ranked plans, each with the batch it trains stated."""
    rc, out, err = run(capsys, "search", "--model", "deepseek-v3", "--num-gpus", "1048576",
                       "--top", "1")
    assert rc == 0, err
    assert " 1. " in out
    # millions of tokens with thousands separators (2,147.5M)
    assert re.search(r"global batch [\d,]+ sequences \(\d{1,3}(,\d{3})*\.\dM tokens, the "
                     r"default 1,024 moved to a multiple of every plan's dp\)",
                     " ".join(out.split()))


@pytest.mark.parametrize("model, gpus", [("llama3-8b", 64), ("gpt3-175b", 256),
                                         ("mixtral-8x7b", 64)])
def test_size_estimate_bounds_what_the_search_evaluates(cat, model, gpus):
    """The estimate is an upper bound of the plans and candidates evaluated (so the limit never
    refuses a space smaller than it)."""
    from fsdpsim.plan.parallel import TrainingConfig
    from fsdpsim.model.presets import get_model
    from fsdpsim.drivers.search.run import search
    from fsdpsim.drivers.search.space import SearchSpace, estimate_size
    from fsdpsim.hardware.system import resolve_system

    spec = get_model(model)
    system = resolve_system(cat, gpu="h100")
    training = TrainingConfig(seq_len=4096, global_batch=256)
    result = search(spec, system, gpus, training, SearchSpace())
    plans, candidates = estimate_size(spec, gpus, 8, 4096, 256, SearchSpace())
    assert 0 < result.plans <= plans and 0 < result.candidates <= candidates


def test_search_over_a_gpu_list_bounds_the_sum(capsys, monkeypatch):
    """Each count under the limit can still add up to hours over a --num-gpus range: the sum
    is refused before any count is searched."""
    import fsdpsim.drivers.search.run as search_module

    monkeypatch.setattr(search_module, "enumerate_families",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("searched")))
    line = assert_one_line_error(*run(capsys, "search", "--model", "deepseek-v3", "--num-gpus",
                                      "8..4194304", "--global-batch", "65536",
                                      "--framework", "fsdp1"))
    assert "candidates together, more than the 20,000,000" in line and "fewer GPU counts" in line


# -- defaults from the GPU: its 16-bit format, its usual node's network -------------------------
def test_v100_runs_in_fp16_when_no_precision_is_given(capsys):
    """A V100 has no bf16: without --precision, predict, search and compare run fp16 and say
    so; a given --precision is still checked against the GPU."""
    rc, out, err = run(capsys, "predict", "--model", "gpt3-1.3b", "--gpu", "v100",
                       "--num-gpus", "8")
    assert rc == 0, err
    assert "precision not given: fp16, the default for v100-sxm2-32gb (it has no bf16)" in out
    rc, out, err = run(capsys, "search", "--model", "gpt3-1.3b", "--gpu", "v100", "--num-gpus",
                       "8", "--top", "1")
    assert rc == 0, err
    assert "· fp16 ·" in out
    rc, out, err = run(capsys, "compare", "--model", "gpt3-1.3b", "--gpu", "v100,h100",
                       "--num-gpus", "8", "--plan", "fsdp", "--format", "json")
    assert rc == 0, err
    assert '"precision": "fp16"' in out and '"precision": "bf16"' in out
    rc, out, err = run(capsys, "predict", "--model", "gpt3-1.3b", "--gpu", "v100",
                       "--num-gpus", "8", "--precision", "bf16")
    assert rc == 2 and "has: fp16, fp32" in err
    rc, out, err = run(capsys, "predict", "--model", "gpt3-1.3b", "--gpu", "h100",
                       "--num-gpus", "8", "--format", "json")
    assert rc == 0 and '"precision": "bf16"' in out and "precision not given" not in out


def test_predict_header_names_the_default_network(capsys):
    """Only --gpu: the header names the network assumed and that it is the GPU's default (the
    A100's DGX A100 HDR 200); a given --network wins."""
    rc, out, err = run(capsys, "predict", "--model", "gpt3-1.3b", "--gpu", "a100",
                       "--num-gpus", "16")
    header = " ".join(out.split("\n  plan")[0].split())
    assert rc == 0 and "1x ib-hdr-200 per GPU (the GPU's default, as dgx-a100-80gb)" in header
    rc, out, err = run(capsys, "predict", "--model", "gpt3-1.3b", "--gpu", "a100",
                       "--num-gpus", "16", "--network", "ib-ndr-400")
    header = " ".join(out.split("\n  plan")[0].split())
    assert rc == 0 and header.endswith("1x ib-ndr-400 per GPU") and "default" not in header
