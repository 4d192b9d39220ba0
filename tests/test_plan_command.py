"""Every plan search ranks carries the ``fsdpsim predict`` command that reproduces its numbers:
the command, run as a user would, gives the same step time and peak memory (1e-9), for dense
and MoE models; ``predict --plan`` refuses a plan option given beside it."""

from __future__ import annotations

import json
import math
import shlex

import pytest
from click.testing import CliRunner

from fsdpsim.cli import cli, main
from fsdpsim.util.units import GIB_BYTES


def _json(args: list[str]) -> dict:
    result = CliRunner().invoke(cli, args + ["--format", "json"])
    assert result.exit_code == 0, (args, result.output)
    return json.loads(result.output)


def _rerun_all(search_args: list[str]) -> int:
    report = _json(["search", *search_args])
    plans = report["plans"]
    assert plans
    for p in plans:
        words = shlex.split(p["predict_command"])
        assert words[:2] == ["fsdpsim", "predict"] and "--plan" in words
        d = _json(words[1:])
        assert math.isclose(d["step_time_s"], p["step_time_s"], rel_tol=1e-9), p["plan"]
        assert math.isclose(d["memory"]["peak_bytes"], p["peak_gib"] * GIB_BYTES,
                            rel_tol=1e-9), p["plan"]
        assert d["plan"]["line"].split(" · ckpt")[0] == p["plan"].split(" · ckpt")[0]
        for key in ("etp", "ep_overlap", "pp_first_layers", "pp_last_layers", "tp", "pp",
                    "vpp", "dp_shard", "dp_replicate", "sharding"):
            assert d["plan"][key] == p[key], (key, p["plan"])
        assert p["pp_schedule"] in (None, d["plan"]["pp_schedule"])
        assert d["training"]["micro_batch"] == p["micro_batch"]
        assert d["training"]["grad_accum"] == p["grad_accum"]
    return len(plans)


@pytest.mark.parametrize("args", [
    ["--model", "llama3-70b", "--gpu", "h100", "--num-gpus", "64", "--top", "12"],
    ["--model", "qwen3-30b-a3b", "--gpu", "b200", "--num-gpus", "32", "--top", "12"],
    ["--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "16", "--seq-len", "16k",
     "--precision", "fp8", "--framework", "megatron", "--top", "8"],
])
def test_searched_plans_rerun_to_the_same_numbers(args):
    assert _rerun_all(args) >= 8


@pytest.mark.parametrize("knobs", [
    ["--framework", "megatron", "--no-fused-loss"],  # the profile's default is on
    ["--fused-loss"],  # fsdp2's default is off
    ["--framework", "megatron", "--precision", "fp8", "--bf16-layers", "2", "--fp8-lm-head",
     "--cuda-graphs", "partial"],
])
def test_kernel_knobs_unlike_the_framework_default_ride_in_the_command(knobs):
    """A kernel knob given against its framework's default is in the command (spelt on or
    off), so the rerun is the same plan with the same numbers."""
    assert _rerun_all(["--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "16",
                       "--top", "3", *knobs]) == 3


@pytest.mark.slow
def test_deepseek_v3_plans_rerun_to_the_same_numbers():
    assert _rerun_all(["--model", "deepseek-v3", "--gpu", "gb200", "--num-gpus", "256",
                       "--top", "10"]) == 10


def test_plan_with_a_plan_option_is_a_one_line_error(capsys):
    assert main(["predict", "--model", "llama3-70b", "--num-gpus", "16",
                 "--plan", "fsdp2 × tp8(sp) · ckpt full · mb 1", "--tp", "8"]) == 2
    out, err = capsys.readouterr()
    assert not out and "--tp" in err and len(err.strip().splitlines()) == 1


def test_plan_and_a_different_global_batch_is_an_error(capsys):
    assert main(["predict", "--model", "llama3-8b", "--num-gpus", "8",
                 "--plan", "fsdp8 · ckpt none · mb 1 · accum 2", "--global-batch", "32"]) == 2
    out, err = capsys.readouterr()
    assert not out and "16" in err and len(err.strip().splitlines()) == 1


def test_a_plan_broken_over_lines_reads_the_same():
    one = _json(["predict", "--model", "llama3-70b", "--num-gpus", "16",
                 "--plan", "fsdp2 × tp8(sp) · ckpt full · mb 1"])
    two = _json(["predict", "--model", "llama3-70b", "--num-gpus", "16",
                 "--plan", "fsdp2 × tp8(sp) ·\n        ckpt full · mb 1"])
    assert one["step_time_s"] == two["step_time_s"]


def test_compared_rows_carry_their_command_and_keep_headroom():
    data = _json(["compare", "--model", "llama3-70b,qwen3-30b-a3b", "--gpu", "h100,b200",
                  "--num-gpus", "64"])
    assert len(data["rows"]) == 4
    for row in data["rows"]:
        assert row["peak_bytes"] <= 0.9 * row["capacity_bytes"] and not row[
            "above_default_budget"]
        d = _json(shlex.split(row["predict_command"])[1:])
        assert math.isclose(d["step_time_s"], row["step_time_s"], rel_tol=1e-9)
        assert math.isclose(d["memory"]["peak_bytes"], row["peak_bytes"], rel_tol=1e-9)


def test_compare_text_and_search_table_fit_100_columns():
    for args in (["compare", "--model", "llama3-70b", "--gpu", "h100,b200", "--num-gpus", "64"],
                 ["search", "--model", "llama3-70b", "--num-gpus", "256", "--global-batch",
                  "512", "--top", "5"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0
        assert max(len(line) for line in result.output.splitlines()) <= 100
        assert "fsdpsim predict" in result.output


def test_large_gpu_counts_train_the_default_batch_moved_to_their_dp():
    """Without --global-batch each mesh trains the default batch moved to a multiple of its dp
    (predict's rule): 8,192 GPUs of data parallelism run 8,192 sequences, not none of 1,024;
    the predict commands rerun them. --global-batch stays fixed for every mesh."""
    args = ["--model", "llama3-70b", "--gpu", "h100", "--tokens", "15t", "--deadline-days",
            "30", "--num-gpus", "8192"]
    report = _json(["search", *args])
    assert report["query"]["global_batch"] == 1024 and report["query"]["global_batch_default"]
    assert report["plans"] and all(p["global_batch"] % p["dp"] == 0 for p in report["plans"])
    assert any(p["global_batch"] != 1024 for p in report["plans"])
    assert all("--global-batch" not in p["predict_command"] for p in report["plans"])
    # torchtitan's per-op selective checkpointing is among what fsdp2 (the default) tries
    assert {p["sharding"] for p in report["plans"]} <= {"full", "hybrid", "none"}
    assert "op-selective" in {p["recompute"] for p in report["plans"]}
    assert _rerun_all(args + ["--top", "3"]) == 3
    text = CliRunner().invoke(cli, ["search", *args, "--top", "1"]).output
    words = " ".join(text.split())  # the header wraps
    assert ("global batch 8,192 sequences (33.6M tokens, the default 1,024 moved to a multiple "
            "of every plan's dp)") in words
    assert "Megatron-LM cannot run this plan" in text  # torchtitan's per-op recompute
    fixed = _json(["search", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "64",
                   "--global-batch", "128", "--top", "5"])
    assert not fixed["query"]["global_batch_default"]
    assert {p["global_batch"] for p in fixed["plans"]} == {128}
