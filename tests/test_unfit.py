"""A plan that does not fit: predict's headline says so first, its throughput and MFU are
marked as not runnable, and the advice comes from the hybrid search (a plan on these GPUs, or
the fewest GPUs a searched plan fits on), each as a predict command that fits."""

from __future__ import annotations

import json
import shlex

from click.testing import CliRunner

from fsdpsim.cli import cli

ARGS = ["predict", "--model", "llama3-70b", "--gpu", "h100", "--num-gpus", "16"]


def test_headline_says_does_not_fit_first_and_numbers_are_if_it_fitted():
    out = CliRunner().invoke(cli, ARGS).output
    lines = out.splitlines()
    verdict = next(line for line in lines[1:] if not line.startswith("  "))  # after the header
    assert verdict.startswith("DOES NOT FIT")
    tokens = next(line for line in lines if line.strip().startswith("tokens/s per GPU"))
    mfu = next(line for line in lines if line.strip().startswith("MFU / HFU"))
    assert "if it fitted" in tokens and "if it fitted" in mfu
    assert "throughput if it fitted (not runnable)" in out
    assert max(len(line) for line in lines) <= 100


def test_advice_consults_the_hybrid_search():
    d = json.loads(CliRunner().invoke(cli, ARGS + ["--format", "json"]).output)
    assert not d["fits"]
    advice = {a["num_gpus"]: a for a in d["fit_advice"]}
    # on 16 GPUs only a tight hybrid plan torchtitan runs (above the default 90 % budget);
    # 32 fit within it
    assert advice[16]["within_default_budget"] is False and " × pp2" in advice[16]["plan"]
    assert advice[32]["within_default_budget"] is True
    for a in d["fit_advice"]:
        rerun = json.loads(CliRunner().invoke(
            cli, shlex.split(a["predict_command"])[1:] + ["--format", "json"]).output)
        assert rerun["fits"] and rerun["plan"]["num_gpus"] == a["num_gpus"]
        assert rerun["fit_advice"] == []


def test_a_fitting_plan_has_no_headline_and_no_fit_advice():
    d = json.loads(CliRunner().invoke(cli, ["predict", "--model", "llama3-8b", "--num-gpus",
                                            "8", "--format", "json"]).output)
    assert d["fits"] and d["fit_advice"] == []
    out = CliRunner().invoke(cli, ["predict", "--model", "llama3-8b", "--num-gpus", "8"]).output
    assert "DOES NOT FIT" not in out and "if it fitted" not in out


def test_sweep_marks_rows_above_the_default_budget():
    out = CliRunner().invoke(cli, ["sweep", "--model", "llama3-8b", "--gpu", "h100",
                                   "--num-gpus", "8", "--micro-batch", "1,2",
                                   "--recompute", "none"]).output
    rows = [line.split() for line in out.splitlines() if line.strip()[:1] in ("1", "2")]
    mem = {r[0]: next(c for c in r if "/80" in c) for r in rows}
    assert mem["1"] == "48/80" and mem["2"] == "76/80~"  # 95 % of memory: marked
    assert "~ = above 90 % of the GPU's memory" in out


def test_search_with_nothing_in_the_default_budget_says_the_tight_budget(capsys):
    from fsdpsim.cli import main

    assert main(["search", "--model", "llama3-70b", "--num-gpus", "16"]) == 2
    err = capsys.readouterr().err
    assert "fits 72.0 GiB per GPU" in err and "(tight: above the default budget)" in err
