"""Megatron-Core's per-module recompute (``recompute_modules``): ``mla_up_proj``
reruns MLA's up projections and frees Q, K and V, ``mlp`` reruns the dense layers' MLP and frees
its internals, ``moe_act`` reruns the experts' activation and frees its output. Time, FLOPs and
memory of each against the formulas, their absence under full recompute and where the module
does not exist, the CLI, and the published recipes that set them."""

from __future__ import annotations

import pytest

from fsdpsim import engine
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.engine import layers, module_recompute, moe
from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import config_inputs, predict
from fsdpsim.model.presets import get_model
from fsdpsim.hardware.system import resolve_system

CATALOG = load_catalog(use_env=False)
GB200 = resolve_system(CATALOG, gpu="gb200")
RACK = ParallelPlan(num_gpus=64, gpus_per_node=64, sharding="optimizer", ep=64,
                    framework="megatron")


def _deepseek(modules=(), recompute="none"):
    training = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64, recompute=recompute,
                              precision="mxfp8", recompute_modules=modules)
    return predict(get_model("deepseek-v3"), GB200, RACK, training).values


def _prepared(model, system, plan, training):
    x = config_inputs(get_model(model), system, plan, training)
    return engine.prepare({**x, "micro_batch": float(training.micro_batch),
                           "recompute": engine.RECOMPUTE_CODES[training.recompute],
                           "grad_accum": 1.0})


def test_names_are_checked_and_ordered():
    training = TrainingConfig(seq_len=4096, recompute_modules="moe_act, mla_up_proj")
    assert training.recompute_modules == ("mla_up_proj", "moe_act")
    with pytest.raises(ConfigError, match="recompute_modules 'core' not accepted; accepted: "
                                          "mla_up_proj, mlp, moe_act"):
        TrainingConfig(seq_len=4096, recompute_modules=("core",))


@pytest.mark.parametrize("module", ["mla_up_proj", "moe_act"])
def test_each_module_adds_its_forward_to_the_backward_and_frees_its_tensors(module):
    """DeepSeek-V3 on a GB200 rack without pipelining: the recompute time grows by the
    module's forward on every layer of its kind (per micro-batch, times the accumulation);
    the saved activations shrink by the module's bytes per token times the tokens."""
    none, with_module = _deepseek(), _deepseek((module,))
    assert none["recompute_s"] == 0.0 and with_module["recompute_s"] > 0.0
    assert with_module["step_time_s"] > none["step_time_s"]
    assert with_module["activations_bytes"] < none["activations_bytes"]
    training = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=64, recompute="none",
                              precision="mxfp8", recompute_modules=(module,))
    g = _prepared("deepseek-v3", GB200, RACK, training)
    r, w = layers.rates(g), layers.widths(g)
    rates = layers.compute._gemm_rates(r.matmul, r.hbm, g.matmul_half_flops,
                                       g.matmul_half_k)
    k, n, n_moe = 64 / 64 / 1, g.n_layers, g.moe_layers
    if module == "mla_up_proj":  # every layer (all MLA), the same GEMMs each
        per_layer = module_recompute.mla_up_proj_fwd_s(g, w, rates, g.compute_bytes)
        expected_s = k * n * per_layer
    else:  # the MoE layers' activation traffic
        ro = moe.routing(g)
        bytes_ = ro.rows * ro.ffn_local * 3.0 * g.compute_bytes
        expected_s = k * n_moe * layers.compute.memory_bound_time_s(bytes_, r.hbm)
    assert with_module["recompute_s"] == pytest.approx(float(expected_s), rel=1e-9)
    if module == "mla_up_proj":  # Q, K, V at the attention core's widths, 61 layers + MTP
        assert g.q_dim == g.kv_dim == 128 * (192 + 128) / 2
        freed_per_token = 62 * 2.0 * 3 * 128 * 160
    else:  # the activation output of every routed row, 58 MoE layers + the MTP's
        ro = moe.routing(g)
        freed_per_token = 59 * ro.rows / ro.tokens * 2048 * 2.0
    assert none["activations_bytes"] - with_module["activations_bytes"] == pytest.approx(
        float(freed_per_token) * 4096, rel=1e-9)


def test_the_mla_up_projections_are_a_few_percent_of_the_flops():
    """109 MFLOP per token and layer (q: 1,536 -> 128 x 192; kv: 512 -> 128 x 256), counted
    in the hardware FLOPs, not the model FLOPs."""
    none, mla = _deepseek(), _deepseek(("mla_up_proj",))
    tokens = 64 * 4096
    extra = mla["hardware_flops_per_step"] - none["hardware_flops_per_step"]
    assert extra == pytest.approx(61 * tokens * 2.0 * 128 * (1536 * 192 + 512 * 256), rel=1e-9)
    assert mla["model_flops_per_step"] == none["model_flops_per_step"]
    assert 0.01 < extra / none["hardware_flops_per_step"] < 0.05


def test_full_recompute_makes_the_modules_moot():
    full = _deepseek(recompute="full")
    both = _deepseek(("mla_up_proj", "moe_act", "mlp"), recompute="full")
    for key in ("step_time_s", "activations_bytes", "peak_bytes", "hardware_flops_per_step"):
        assert both[key] == pytest.approx(full[key], rel=1e-12), key


def test_dense_models_recompute_their_mlp_only():
    """Llama 3 8B: ``mlp`` reruns the MLP forward (GEMMs and the SwiGLU traffic) in every
    layer and frees its internals; MLA and expert modules do not exist there (no change)."""
    h100 = resolve_system(CATALOG, gpu="h100")
    plan = ParallelPlan(8, 8, "full")

    def run(modules):
        training = TrainingConfig(seq_len=4096, micro_batch=1, recompute="none",
                                  recompute_modules=modules)
        return training, predict(get_model("llama3-8b"), h100, plan, training).values

    _, none = run(())
    _, moot = run(("mla_up_proj", "moe_act"))
    assert moot["step_time_s"] == none["step_time_s"]
    assert moot["peak_bytes"] == none["peak_bytes"]
    training, mlp = run(("mlp",))
    g = _prepared("llama3-8b", h100, plan, training)
    expected = 32 * module_recompute.mlp_recompute_s(g, layers.rates(g), layers.widths(g))
    assert mlp["recompute_s"] == pytest.approx(float(expected), rel=1e-9)
    n_ffn = 3.0 if g.fused_glu > 0 else 4.0
    assert none["activations_bytes"] - mlp["activations_bytes"] == pytest.approx(
        32 * 4096 * 2.0 * n_ffn * 14336, rel=1e-9)


def test_cli_sweep_and_megatron_emit(capsys):
    import json

    from conftest import assert_one_line_error, run, sweep

    args = ("predict", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "8",
            "--micro-batch", "1", "--recompute", "none", "--recompute-modules", "mlp",
            "--format", "json")
    rc, out, err = run(capsys, *args)
    assert rc == 0, err
    d = json.loads(out)
    assert d["training"]["recompute_modules"] == ["mlp"]
    rows = sweep(CATALOG, model="llama3-8b", gpu="h100", num_gpus="8", micro_batch="1",
                 recompute="none", recompute_modules="mlp")
    assert rows["tokens_per_s_per_gpu"].iloc[0] == pytest.approx(d["tokens_per_s_per_gpu"],
                                                                 rel=1e-9)
    assert rows["training.recompute_modules"].iloc[0] == "mlp"
    line = assert_one_line_error(*run(capsys, "sweep", "--model", "llama3-8b",
                                      "--recompute-modules", "attn"))
    assert "recompute_modules 'attn' not accepted" in line
    rc, out, err = run(capsys, "search", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus",
                       "8", "--recompute-modules", "mlp", "--top", "1", "--emit", "megatron")
    assert rc == 0, err
    assert "--recompute-modules" in out and "mlp" in out


def test_dense_mlp_recompute_counts_in_the_hardware_flops():
    """Llama 3 8B on 8 GPUs (FSDP, dp 8), b·s = 4,096 tokens: ``mlp`` reruns the SwiGLU MLP's
    three GEMMs in each of the 32 layers, 2·4,096·3·4,096·14,336 FLOPs a layer, on each of the
    8 data-parallel ranks; the model FLOPs do not change, and HFU counts the extra."""
    h100 = resolve_system(CATALOG, gpu="h100")
    plan = ParallelPlan(8, 8, "full")

    def run(modules):
        training = TrainingConfig(seq_len=4096, micro_batch=1, recompute="none",
                                  recompute_modules=modules)
        return predict(get_model("llama3-8b"), h100, plan, training).values

    none, mlp = run(()), run(("mlp",))
    extra = 8 * 32 * 2.0 * 4096 * 3 * 4096 * 14336
    assert mlp["hardware_flops_per_step"] - none["hardware_flops_per_step"] == pytest.approx(
        extra, rel=1e-12)
    assert mlp["model_flops_per_step"] == none["model_flops_per_step"]
    peak = 8 * h100.accelerator.peak_flops_per_s["bf16"]         # HFU's denominator per second
    assert (mlp["hfu"] * mlp["step_time_s"] - none["hfu"] * none["step_time_s"]) * peak \
        == pytest.approx(extra, rel=1e-9)
