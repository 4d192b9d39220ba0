"""Node-deduplicated expert dispatch (DeepEP / HybridEP) and FP8 attention: the
dedup factor against a Monte Carlo of routing, its effect on the engine, FP8 attention's speed,
the CLI options and their refusals, and the published recipes that set them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fsdpsim.drivers import predict
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.costs import moe
from fsdpsim.costs.compute import FP8_ATTENTION_SPEEDUP
from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.model.presets import get_model
from fsdpsim.hardware.system import resolve_system

CATALOG = load_catalog()
ROOT = Path(__file__).resolve().parents[1]


def _simulated_factor(nodes, top_k, n_experts, groups, group_top_k, tokens=20_000, seed=0):
    """Remote nodes a token reaches over its remote routed copies, for random router scores
    (the benchmarks' force-balanced routing: Megatron ``apply_random_logits``) and Megatron's
    ``group_limited_topk`` when ``groups`` > 1: a group scores the sum of its top
    ``k / group_top_k`` experts, the ``group_top_k`` best groups stay, the top ``k`` experts
    among them are chosen. Experts on consecutive ranks, ``n_experts / nodes`` a node; the
    sender on node 0."""
    rng = np.random.default_rng(seed)
    scores = rng.random((tokens, n_experts))
    if groups > 1:
        per_group = scores.reshape(tokens, groups, -1)
        group_score = np.sort(per_group, axis=-1)[..., -(top_k // group_top_k):].sum(-1)
        kept = np.argsort(-group_score, axis=1)[:, :group_top_k]
        mask = np.zeros((tokens, groups), dtype=bool)
        np.put_along_axis(mask, kept, True, axis=1)
        scores = np.where(np.repeat(mask, n_experts // groups, axis=1), scores, -1.0)
    experts = np.argsort(-scores, axis=1)[:, :top_k]
    node = experts * nodes // n_experts
    remote_copies = np.count_nonzero(node != 0)
    hit = np.zeros((tokens, nodes), dtype=bool)
    np.put_along_axis(hit, node, True, axis=1)
    remote_nodes = np.count_nonzero(hit[:, 1:])
    return remote_nodes / remote_copies


@pytest.mark.parametrize("nodes, top_k, n_experts, groups, group_top_k", [
    (8, 8, 256, 8, 4),      # DeepSeek-V3 over 8 nodes: one group a node
    (4, 8, 256, 8, 4),      # two groups a node
    (2, 8, 256, 8, 4),
    (8, 8, 256, 1, 1),      # no group-limited routing
    (4, 2, 8, 1, 1),        # Mixtral over 4 nodes
])
def test_dedup_factor_matches_simulated_routing(nodes, top_k, n_experts, groups, group_top_k):
    closed = float(moe.node_dedup_factor(nodes, top_k, n_experts, groups, group_top_k))
    simulated = _simulated_factor(nodes, top_k, n_experts, groups, group_top_k)
    assert closed == pytest.approx(simulated, rel=0.02)


def test_dedup_factor_by_hand_and_bounds():
    """DeepSeek-V3 over 8 nodes: 4 of 8 groups, one a node, so half the nodes are hit:
    8 · 0.5 / 8 = 0.5; on one node nothing crosses a NIC (factor 1); never above 1."""
    assert moe.node_dedup_factor(8, 8, 256, 8, 4) == pytest.approx(0.5, abs=1e-15)
    assert moe.node_dedup_factor(1, 8, 256, 8, 4) == 1.0
    n = np.arange(1, 129, dtype=float)
    for k, e in ((1, 8), (2, 8), (8, 256), (4, 128)):
        f = moe.node_dedup_factor(n, k, e)
        assert np.all((f > 0) & (f <= 1.0))
    assert moe.node_dedup_factor(8, 1, 64) == pytest.approx(1.0)  # one copy: nothing to merge


def _deepseek(gpu, num_gpus, per_node, plan, dispatcher, precision="fp8", fp8_attention=False):
    system = resolve_system(CATALOG, gpu=gpu, gpus_per_node=per_node)
    plan = {**plan, "gpus_per_node": per_node}
    training = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=8192, recompute="none",
                              precision=precision, moe_imbalance=1.0,
                              moe_dispatcher=dispatcher, fp8_attention=fp8_attention)
    return predict.predict(get_model("deepseek-v3"), system,
                           ParallelPlan(num_gpus=num_gpus, **plan), training)


H100_PLAN = dict(sharding="optimizer", framework="megatron", tp=2, pp=8, vpp=4, ep=64,
                 pp_first_layers=7, pp_last_layers=6)


def test_deepep_sends_fewer_bytes_over_the_nics_and_one_copy_per_rank():
    """Across nodes the dispatch gets cheaper (never dearer); inside one NVLink domain the flex
    dispatcher sends a token once per rank it needs (64 ranks of 4 experts: ~0.94 of the 8
    routed copies) at the catalog's measured ep_link_fraction instead of NCCL's link_fraction."""
    plain = _deepseek("h100-sxm5-80gb", 1024, 8, H100_PLAN, "alltoall")
    dedup = _deepseek("h100-sxm5-80gb", 1024, 8, H100_PLAN, "deepep")
    assert dedup.values["ep_s"] < 0.9 * plain.values["ep_s"]
    assert dedup.step_time_s < plain.step_time_s
    assert dedup.values["ep_bytes"] == plain.values["ep_bytes"]  # tensor bytes passed: same
    rack = dict(sharding="optimizer", framework="megatron", pp=4, vpp=4, ep=64,
                pp_first_layers=16, pp_last_layers=13)
    a = _deepseek("gb200", 256, 64, rack, "alltoall")
    b = _deepseek("gb200", 256, 64, rack, "deepep")
    eff = resolve_system(CATALOG, gpu="gb200").accelerator.efficiency
    ratio = moe.node_dedup_factor(64, 8, 256, 8, 4) * eff.link_fraction / eff.ep_link_fraction
    assert 0.9 < moe.node_dedup_factor(64, 8, 256, 8, 4) < 1.0
    # the 63 per-peer latencies of each call are the same for both: they pull the ratio to 1
    assert 0.95 * ratio < b.values["ep_s"] / a.values["ep_s"] < ratio


def test_fp8_attention_runs_attention_at_the_measured_speed_up():
    """Attention time falls by FP8_ATTENTION_SPEEDUP (FlashAttention-3's FP8 / FP16 rate),
    GEMM time does not move."""
    rack = dict(sharding="optimizer", framework="megatron", pp=4, vpp=4, ep=64,
                pp_first_layers=16, pp_last_layers=13)
    off = _deepseek("gb300", 256, 64, rack, "deepep", precision="mxfp8")
    on = _deepseek("gb300", 256, 64, rack, "deepep", precision="mxfp8", fp8_attention=True)
    assert FP8_ATTENTION_SPEEDUP == pytest.approx(1.2 / 0.74)
    assert off.values["attention_s"] / on.values["attention_s"] == pytest.approx(
        FP8_ATTENTION_SPEEDUP, rel=1e-9)
    assert on.values["gemm_s"] == pytest.approx(off.values["gemm_s"], rel=1e-12)
    assert on.tokens_per_s_per_gpu > off.tokens_per_s_per_gpu


def test_fp8_attention_and_dispatcher_refusals():
    with pytest.raises(ConfigError, match="fp8_attention needs a low-precision format"):
        TrainingConfig(seq_len=4096, precision="bf16", fp8_attention=True)
    with pytest.raises(ConfigError, match="moe_dispatcher"):
        TrainingConfig(seq_len=4096, moe_dispatcher="nccl")


@pytest.mark.parametrize("args, words", [
    (("--fp8-attention",), "fp8_attention needs a low-precision format"),
    (("--moe-dispatcher", "nccl"), "--moe-dispatcher"),
])
def test_cli_refuses_bad_values_in_one_line(capsys, args, words):
    from conftest import assert_one_line_error, run

    line = assert_one_line_error(*run(capsys, "predict", "--model", "mixtral-8x7b",
                                      "--num-gpus", "64", *args))
    assert words in line


def test_cli_options_reach_the_json(capsys):
    import json

    from conftest import run

    rc, out, err = run(capsys, "predict", "--model", "mixtral-8x7b", "--num-gpus", "64",
                       "--ep", "8", "--precision", "fp8", "--fp8-attention",
                       "--moe-dispatcher", "deepep", "--format", "json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["training"]["fp8_attention"] is True and d["training"]["moe_dispatcher"] == "deepep"


def test_deepseek_v3_router_groups_from_its_config_and_preset():
    from fsdpsim.model.hf_config import spec_from_hf_config

    path = Path(__file__).parent / "data" / "hf_configs" / "deepseek-ai__DeepSeek-V3"
    spec = spec_from_hf_config(path / "config.json")
    assert (spec.router_groups, spec.router_group_top_k) == (8, 4)
    preset = get_model("deepseek-v3")
    assert (preset.router_groups, preset.router_group_top_k) == (8, 4)
    with pytest.raises(ConfigError, match="router_groups"):
        preset.__class__(**{**preset.__dict__, "router_groups": 7})


def test_published_deepseek_rows_carry_the_recipes_dispatch_and_fp8_attention():
    """Every Megatron-Bridge DeepSeek-V3 row dispatches with DeepEP/HybridEP but the 25.09
    token-drop runs and 25.11's B200 (the alltoall dispatcher); only GB300 MXFP8 from 26.06
    (commit 8af195c0a) runs attention in FP8."""
    from fsdpsim.measured.validate import load_measurements

    rows = load_measurements(ROOT / "validation" / "data" / "hybrid_calibration.csv", CATALOG)
    ds = rows[rows["model"].astype(str).str.contains("DeepSeek") & (rows["skip"] == "")]
    plain = ds[ds["moe_dispatcher"] == "alltoall"]
    assert len(ds) >= 34 and set(ds["moe_dispatcher"]) == {"deepep", "alltoall"}
    assert all(("25.09" in s and "tokendrop" in m) or ("25.11" in s and g == "b200")
               for s, m, g in zip(plain["source_key"], plain["model"], plain["gpu"]))
    fp8 = ds[ds["fp8_attention"] == True]  # noqa: E712 (a column of objects)
    assert len(fp8) >= 4 and set(fp8["gpu"]) == {"gb300"}
    assert set(fp8["precision_format"]) == {"mxfp8"}


def test_search_takes_the_kernel_options_and_emits_them(capsys):
    """``search --moe-dispatcher deepep --fp8-attention``: the options reach the plans (the
    best plan with EP 16 across two nodes is faster than with the plain all-to-all and 16-bit
    attention) and the Megatron arguments name them."""
    import json

    from conftest import run

    common = ("search", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "64",
              "--precision", "fp8", "--fix", "ep=16,tp=1,pp=1", "--top", "1")
    rc, plain, err = run(capsys, *common, "--format", "json")
    assert rc == 0, err
    rc, dedup, err = run(capsys, *common, "--moe-dispatcher", "deepep", "--fp8-attention",
                         "--format", "json")
    assert rc == 0, err
    best = [json.loads(out)["plans"][0] for out in (plain, dedup)]
    assert best[1]["tokens_per_s_per_gpu"] > best[0]["tokens_per_s_per_gpu"]
    rc, out, err = run(capsys, *common, "--moe-dispatcher", "deepep", "--fp8-attention",
                       "--emit", "megatron")
    assert rc == 0, err
    for flag in ("--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep",
                 "--fp8-dot-product-attention"):
        assert flag in out


def test_search_refuses_fp8_attention_in_bf16(capsys):
    from conftest import assert_one_line_error, run

    line = assert_one_line_error(*run(capsys, "search", "--model", "llama3-8b",
                                      "--fp8-attention"))
    assert "fp8_attention needs a low-precision format" in line


def _sweep_row(*args):
    from fsdpsim.drivers.sweep.grid import build_grid
    from fsdpsim.drivers.sweep.run import run_sweep

    options = dict(zip(args[::2], args[1::2]))
    return run_sweep(build_grid(CATALOG, options))


@pytest.mark.parametrize("kernels", [{}, {"moe-dispatcher": "deepep", "fp8-attention": True}])
def test_sweep_equals_predict_with_the_kernel_options(kernels):
    """Regression: ``sweep --sharding optimizer --ep 16`` on 64 H100 was infeasible because the
    HSDP plan of the same layout was (its reason covered every sharding); now each sharding
    has its own reason, and the row equals predict, with the kernel options too."""
    rows = _sweep_row("model", "qwen3-30b-a3b", "gpu", "h100", "num-gpus", "64", "ep", "16",
                      "precision", "fp8", "sharding", "optimizer", "micro-batch", "1",
                      "recompute", "full", "global-batch", "64",
                      *[x for kv in kernels.items() for x in kv])
    assert len(rows) == 1 and bool(rows["fits"].iloc[0])
    system = resolve_system(CATALOG, gpu="h100-sxm5-80gb")
    training = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64, recompute="full",
                              precision="fp8",
                              moe_dispatcher=kernels.get("moe-dispatcher", "alltoall"),
                              fp8_attention=bool(kernels.get("fp8-attention")))
    expected = predict.predict(get_model("qwen3-30b-a3b"), system,
                               ParallelPlan(num_gpus=64, gpus_per_node=8, sharding="optimizer",
                                            ep=16), training)
    assert rows["tokens_per_s_per_gpu"].iloc[0] == pytest.approx(
        expected.tokens_per_s_per_gpu, rel=1e-9)
    assert rows["training.moe_dispatcher"].iloc[0] == training.moe_dispatcher
    assert bool(rows["training.fp8_attention"].iloc[0]) == training.fp8_attention


def test_sweep_auto_sharding_skips_the_invalid_strategies():
    """With the sharding automatic, a layout whose HSDP plan is invalid still gets the best of
    the valid strategies (not an infeasible row)."""
    rows = _sweep_row("model", "qwen3-30b-a3b", "gpu", "h100", "num-gpus", "64", "ep", "16",
                      "precision", "fp8", "best", True, "micro-batch", "1", "recompute", "full")
    assert bool(rows["fits"].iloc[0]) and rows["plan.sharding"].iloc[0] != "hybrid"


def test_sweep_refuses_fp8_attention_without_a_low_precision():
    with pytest.raises(ConfigError, match="--fp8-attention needs a low-precision"):
        _sweep_row("model", "llama3-8b", "fp8-attention", True)


@pytest.mark.slow
def test_compare_says_when_the_kernel_options_are_on(capsys):
    import json

    from conftest import run

    args = ("compare", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "64",
            "--precision", "fp8")
    rc, out, err = run(capsys, *args, "--moe-dispatcher", "deepep")
    assert rc == 0, err
    assert "expert dispatch once per destination node" in out and "FP8 (--fp8" not in out
    rc, out, err = run(capsys, *args, "--fp8-attention", "--format", "json")
    assert rc == 0, err
    query = json.loads(out)["query"]
    assert query["fp8_attention"] is True and query["moe_dispatcher"] == "alltoall"


@pytest.mark.parametrize("key, value", [("moe-dispatcher", "deepep,alltoall"),
                                        ("cp-kind", "ring,all2all"),
                                        ("pp-schedule", "1f1b,gpipe")])
def test_sweep_refuses_a_list_for_a_grid_wide_choice(key, value):
    """Regression: a list for an option the whole grid shares kept its first value silently."""
    with pytest.raises(ConfigError, match=f"--{key} takes one value"):
        _sweep_row("model", "llama3-8b", key, value)
