"""CUDA graphs (TrainingConfig.cuda_graphs): what a step replays without the host issuing it
op by op. ``partial`` frees each layer's own ops (Megatron-Core's per-layer Transformer Engine
graphs), ``full`` the whole iteration (``cuda_graph_impl = "full_iteration"``). The MoE side
(routed experts stay eager under partial graphs) is in tests/test_moe_engine.py."""

from __future__ import annotations

import json

import pytest

from fsdpsim.hardware.catalog import load_catalog

CATALOG = load_catalog(use_env=False)
#: A small model at a short sequence: its layers take less device time than the host needs
#: to issue their eager ops, so the step is host bound.
SMALL = ("--model", "gpt3-125m", "--gpu", "h100", "--num-gpus", "8", "--seq-len", "512",
         "--micro-batch", "1", "--recompute", "none", "--format", "json")


def test_graphs_free_a_host_bound_step_and_the_reports_say_so(capsys):
    from conftest import run

    speed = {}
    for graphs in ("none", "partial", "full"):
        rc, out, err = run(capsys, "predict", *SMALL, "--cuda-graphs", graphs)
        assert rc == 0, err
        d = json.loads(out)
        assert d["training"]["cuda_graphs"] == graphs
        speed[graphs] = d["tokens_per_s_per_gpu"]
    assert speed["full"] > 1.05 * speed["none"]  # host bound eagerly
    assert speed["partial"] == pytest.approx(speed["full"], rel=1e-12)  # no experts to leave
    rc, out, err = run(capsys, "predict", *SMALL[:-2], "--cuda-graphs", "full")
    assert rc == 0, err
    assert "full CUDA graphs" in out


def test_sweep_and_search_carry_the_option(capsys):
    from conftest import run, sweep

    rc, out, err = run(capsys, "predict", *SMALL, "--cuda-graphs", "full")
    assert rc == 0, err
    rows = sweep(CATALOG, model="gpt3-125m", gpu="h100", num_gpus="8", seq_len="512",
                 micro_batch="1", recompute="none", cuda_graphs="full")
    assert rows["training.cuda_graphs"].iloc[0] == "full"
    assert rows["tokens_per_s_per_gpu"].iloc[0] == pytest.approx(
        json.loads(out)["tokens_per_s_per_gpu"], rel=1e-9)
    for graphs, flag in (("full", "--cuda-graph-impl full_iteration"),
                         ("partial", "--cuda-graph-impl transformer_engine")):
        rc, out, err = run(capsys, "search", "--model", "llama3-8b", "--gpu", "h100",
                           "--num-gpus", "8", "--top", "1", "--emit", "megatron",
                           "--cuda-graphs", graphs)
        assert rc == 0, err
        assert flag in out


@pytest.mark.parametrize("command", ["predict", "sweep"])
def test_an_unknown_setting_is_one_line(capsys, command):
    from conftest import run

    rc, out, err = run(capsys, command, "--model", "llama3-8b", "--gpu", "h100",
                       "--cuda-graphs", "always")
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "always" in lines[0] and "full" in lines[0], err
