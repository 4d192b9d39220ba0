"""The scalar reference model (fsdpsim/reference/) against the engine, through
``fsdpsim.drivers.predict`` (the CLI's path): random configurations inside the reference's
scope must agree to a relative 1e-9 on every reported number; configurations outside it must
be refused with a ConfigError; the reference must not use the engine or the cost functions."""

from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fsdpsim import reference
from fsdpsim.drivers.predict import predict
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.hardware.system import BUSBW_COLUMNS, resolve_system
from fsdpsim.model.presets import PRESETS
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.util.errors import ConfigError

CATALOG = load_catalog(use_env=False)
#: reference key -> engine key (Prediction.values)
COMPARED = {"step_time_s": "step_time_s", "tokens_per_s_per_gpu": "tokens_per_s_per_gpu",
            "mfu": "mfu", "hfu": "hfu", "peak_memory_bytes": "peak_bytes",
            "compute_s": "compute_s", "gemm_s": "gemm_s", "attention_s": "attention_s",
            "memory_bound_s": "memory_bound_s", "recompute_s": "recompute_s",
            "optimizer_s": "optimizer_s", "all_gather_s": "all_gather_s",
            "reduce_scatter_s": "reduce_scatter_s", "all_reduce_s": "all_reduce_s",
            "exposed_comm_s": "exposed_comm_s", "model_flops_per_step": "model_flops_per_step",
            "hardware_flops_per_step": "hardware_flops_per_step", "tp_s": "tp_s",
            "tp_exposed_s": "tp_exposed_s", "bubble_s": "bubble_s", "pp_s": "pp_s",
            "cp_s": "cp_s", "cp_exposed_s": "cp_exposed_s", "mfu_native": "mfu_native"}
RTOL = 1e-9
DENSE = sorted(name for name, spec in PRESETS.items()
               if not spec.engine_unsupported and not spec.is_moe
               and spec.attention_kind != "mla" and not spec.mtp_layers and not spec.qk_norm
               and set(spec.attention_pattern) == {"full"} and spec.n_params < 8e10)
GPUS = sorted(CATALOG.ids("accelerator"))
CLUSTERS = sorted(CATALOG.ids("cluster"))


@st.composite
def small_models(draw):
    """A random small dense decoder: GPT-like or Llama-like switches, GQA, odd widths (FSDP2
    padding bites when dim 0 does not divide the shard count)."""
    head_dim = draw(st.sampled_from([16, 32, 64, 80, 128]))
    n_heads = draw(st.sampled_from([1, 2, 3, 4, 8, 12, 16]))
    kv_heads = draw(st.sampled_from([h for h in range(1, n_heads + 1) if n_heads % h == 0]))
    llama = draw(st.booleans())
    ffn_sizes = st.one_of(st.integers(8, 4000), st.integers(1, 500).map(lambda v: 8 * v))
    return ModelSpec(
        name="random", n_layers=draw(st.integers(1, 12)), d_model=n_heads * head_dim,
        n_heads=n_heads, n_kv_heads=kv_heads, ffn_size=draw(ffn_sizes),
        ffn_kind="swiglu" if llama else "gelu", vocab_size=draw(st.integers(100, 60000)),
        tied_embeddings=draw(st.booleans()), position="rotary" if llama else "learned",
        max_seq_len=8192, norm="rmsnorm" if llama else "layernorm", norm_bias=not llama,
        qkv_bias=draw(st.booleans()), attn_out_bias=draw(st.booleans()),
        mlp_bias=draw(st.booleans()))


@st.composite
def configurations(draw):
    model = draw(st.one_of(st.sampled_from(DENSE).map(PRESETS.__getitem__), small_models()))
    # a GPU, or a catalog cluster (some with oversubscribed pods of 3,072 GPUs)
    cluster = draw(st.one_of(st.none(), st.none(), st.sampled_from(CLUSTERS)))
    gpu = None if cluster else draw(st.sampled_from(GPUS))
    try:  # any network, a power cap sometimes, either placement
        system = resolve_system(
            CATALOG, gpu=gpu, cluster=cluster,
            placement=draw(st.sampled_from(["packed", "fragmented"])),
            network=draw(st.sampled_from([None] + sorted(CATALOG.ids("network")))),
            power_cap_w=draw(st.sampled_from([None, None, 300.0, 500.0])),
            busbw_gbs=draw(st.one_of(st.none(), st.none(), st.dictionaries(
                st.sampled_from(BUSBW_COLUMNS), st.floats(5.0, 900.0), min_size=1))))
    except ConfigError:  # a cap above the part's power, say
        assume(False)
    per_node = system.gpus_per_node
    counts = sorted({d for d in range(1, per_node + 1) if per_node % d == 0}
                    | {per_node * 2 ** i for i in range(1, 11 if system.pod_gpus else 8)})
    num_gpus = draw(st.sampled_from(counts))
    # tensor parallelism inside a scale-up domain
    tp = draw(st.sampled_from([t for t in counts if per_node % t == 0 and num_gpus % t == 0]))
    # 1F1B pipelining over whole layers; sometimes an uneven first or last stage
    pp = draw(st.sampled_from([p for p in (1, 2, 3, 4, 8) if num_gpus % (tp * p) == 0
                               and model.n_layers >= p]))
    pp_first = pp_last = None
    if pp > 1 and draw(st.booleans()):
        pp_first = draw(st.integers(1, model.n_layers - pp + 1))
        if draw(st.booleans()):
            pp_last = draw(st.integers(1, max(1, model.n_layers - pp_first)))
    # context parallelism, ring or Ulysses
    cp = draw(st.sampled_from([c for c in (1, 2, 4, 8) if num_gpus % (tp * pp * c) == 0]))
    dp = num_gpus // (tp * pp * cp)
    sharding = draw(st.sampled_from(reference.STRATEGIES))
    shard_group = None
    if sharding == "hybrid":  # HSDP: any shard group size dividing dp, or the default
        shard_group = draw(st.sampled_from([None] + [d for d in range(1, dp + 1) if dp % d == 0]))
    sharded = sharding in ("full", "grad_op", "hybrid")
    plan = ParallelPlan(num_gpus=num_gpus, gpus_per_node=per_node, sharding=sharding,
                        shard_group_size=shard_group, reshard_after_forward=draw(st.booleans()),
                        keep_gathered=sharding in ("full", "hybrid") and draw(st.booleans()),
                        grad_sync=draw(st.sampled_from(["every", "last"])) if sharded
                        else "every",
                        tp=tp, sequence_parallel=draw(st.booleans()) if tp > 1 else None,
                        tp_overlap=tp > 1 and draw(st.booleans()), pp=pp, cp=cp,
                        cp_kind=draw(st.sampled_from(["ring", "all2all"])),
                        pp_first_layers=pp_first, pp_last_layers=pp_last,
                        framework=draw(st.sampled_from(reference.FRAMEWORKS)),
                        pp_schedule=draw(st.sampled_from(["gpipe", "1f1b", "zb-h1"]))
                        if pp > 1 else None)
    assume(not (plan.framework == "megatron" and pp > 1 and sharding == "optimizer"))
    precision = draw(st.sampled_from(sorted(reference.DTYPE_BYTES) + list(reference.LOW_PRECISION)))
    low = precision in reference.LOW_PRECISION
    micro_batch = draw(st.integers(1, 8))
    try:
        training = _training(draw, model, plan, pp, micro_batch, precision, low)
    except ConfigError:  # a combination TrainingConfig itself refuses
        assume(False)
    return model, system, plan, training


def _training(draw, model, plan, pp, micro_batch, precision, low):
    return TrainingConfig(
        seq_len=draw(st.sampled_from([s for s in (128, 256, 512, 1024, 2048, 4096)
                                      if s <= model.max_seq_len])),
        micro_batch=micro_batch,
        global_batch=micro_batch * plan.dp * draw(st.integers(1, 12 if pp > 1 else 4)),
        recompute=draw(st.sampled_from(["none", "selective", "full", "op-selective"])),
        precision=precision,
        reduce_dtype=draw(st.sampled_from([None, "fp32", "bf16"])),
        optimizer=draw(st.sampled_from(["adamw", "sgd"])),
        flash_attention=draw(st.booleans()), fused_loss=draw(st.booleans()),
        dropout=draw(st.booleans()),
        cuda_graphs=draw(st.sampled_from(["none", "none", "partial", "full"])),
        recompute_modules=draw(st.sampled_from([(), (), ("mlp",), ("mla_up_proj", "moe_act")])),
        recompute_layers=draw(st.one_of(st.none(), st.integers(0, model.n_layers))),
        fp8_attention=low and draw(st.booleans()), fp8_lm_head=low and draw(st.booleans()),
        bf16_layers=draw(st.one_of(st.none(), st.integers(0, model.n_layers))) if low else None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.filter_too_much])
@given(configurations())
def test_reference_agrees_with_engine(config):
    _agree(*config)


def _agree(model, system, plan, training):
    try:  # a model the plan cannot split (heads, widths over tp): both refuse it
        prediction = predict(model, system, plan, training)
    except ConfigError:
        with pytest.raises(ConfigError):
            reference.predict(model, system, plan, training)
        return
    engine = prediction.values
    ref = reference.predict(model, system, plan, training)
    for key, engine_key in COMPARED.items():
        # exposed communication (step − compute) and the bubble (makespan − busiest stage)
        # are differences: where they cancel, compare them against the step
        floor = RTOL * engine["step_time_s"] if key in ("exposed_comm_s", "bubble_s") else 0.0
        assert math.isclose(ref[key], engine[engine_key], rel_tol=RTOL, abs_tol=floor), (
            key, ref[key], engine[engine_key])
    assert ref["fits"] == bool(engine["fits"])
    assert ref["grad_accum"] == prediction.training["grad_accum"]


def _h100():
    return resolve_system(CATALOG, gpu="h100-sxm5-80gb")


@pytest.mark.parametrize("change", [
    {"model": "mixtral-8x7b"},
    {"plan": {"pp": 2, "pp_schedule": "interleaved", "vpp": 2}},
    {"plan": {"pp": 2, "vpp": 2}},
    {"plan": {"tp": 16, "num_gpus": 32}},
    {"plan": {"framework": "internevo"}},
    {"plan": {"framework": "megatron", "pp": 2, "sharding": "optimizer"}},
    {"plan": {"framework": "deepspeed-zero3-2021"}},
    {"training": {"micro_batch": None, "global_batch": 64}},
    {"training": {"recompute": None}},
])
def test_out_of_scope_is_refused(change):
    model = PRESETS[change.get("model", "llama3-8b")]
    plan = ParallelPlan(**{"num_gpus": 16, "gpus_per_node": 8, **change.get("plan", {})})
    training = TrainingConfig(**{"seq_len": 2048, "micro_batch": 1, "recompute": "full",
                                 **change.get("training", {})})
    with pytest.raises(ConfigError, match="fsdpsim.reference covers"):
        reference.predict(model, _h100(), plan, training)


def test_reference_uses_neither_engine_nor_costs():
    """No module of the reference package imports the engine, the cost functions, a driver
    or numpy."""
    modules = sorted(Path(reference.__file__).parent.glob("*.py"))
    assert len(modules) > 1
    imported = set()
    for tree in (ast.parse(path.read_text()) for path in modules):
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for a in node.names}
    assert not {m for m in imported if m and m.startswith(("fsdpsim.engine", "fsdpsim.costs",
                                                           "fsdpsim.drivers", "numpy"))}


@pytest.mark.parametrize("p,m", [(1, 1), (1, 5), (2, 2), (4, 4), (4, 9), (8, 3), (3, 12)])
def test_one_f_one_b_equal_stages(p, m):
    """Equal stages, no transfer time: (m + p − 1)·(f + b) for m ≥ p (Narayanan et al. SC21
    §2.2.1), and for any m when forward and backward take equally long."""
    f, b = 1.0, 2.0
    makespan = reference.pipeline_makespan_s("1f1b", [f] * p, [b] * p, [0.0] * p, m, 0.0)
    if m >= p:
        assert makespan == pytest.approx((m + p - 1) * (f + b), rel=1e-12)
    one = reference.pipeline_makespan_s("1f1b", [1.0] * p, [1.0] * p, [0.0] * p, m, 0.0)
    assert one == pytest.approx((m + p - 1) * 2.0, rel=1e-12)


def test_one_f_one_b_transfers_on_the_critical_path():
    """One micro-batch through p stages: p forwards, p backwards and 2·(p − 1) transfers."""
    makespan = reference.pipeline_makespan_s("1f1b", [1.0] * 4, [2.0] * 4, [0.0] * 4, 1, 0.5)
    assert makespan == pytest.approx(4 * 3.0 + 2 * 3 * 0.5)


def test_linear_time_by_hand():
    """A 1024-token (1024 × 4096)·(4096 × 4096) GEMM at R = 1e15 FLOP/s, W = 2e12 B/s, no tile
    loss or tail: forward 2·1024·4096·4096 / 1e15 s (compute bound); backward twice that."""
    fwd, bwd = reference.linear_times_s(1024, 4096, 4096, 1e15, 2e12, 2.0, 0.0, 0.0)
    assert fwd == pytest.approx(2 * 1024 * 4096 * 4096 / 1e15)
    assert bwd == pytest.approx(2 * fwd)
    # memory bound when tiny: the three matrices' bytes over W
    fwd, _ = reference.linear_times_s(1, 4096, 4096, 1e15, 2e12, 2.0, 0.0, 0.0)
    assert fwd == pytest.approx(2.0 * (4096 + 4096 * 4096 + 4096) / 2e12)


@pytest.mark.parametrize("p,m", [(2, 3), (4, 4), (4, 9)])
def test_gpipe_equal_stages(p, m):
    """GPipe with equal stages and no transfer time: (m + p − 1)·(f + b) (Huang et al. 2019)."""
    makespan = reference.pipeline_makespan_s("gpipe", [1.0] * p, [2.0] * p, [0.0] * p, m, 0.0)
    assert makespan == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize("sharding,tp,pp,shard_group", [
    ("full", 1, 1, None), ("hybrid", 8, 1, 64), ("hybrid", 1, 1, 512), ("none", 8, 4, None),
    ("optimizer", 4, 2, None)])
def test_agrees_across_oversubscribed_pods(sharding, tp, pp, shard_group):
    """Llama 3's cluster (3,072-GPU pods, 1:7 above them): 8,192 GPUs, groups that span pods
    (HSDP's replica groups with few members per pod lose uplink bandwidth)."""
    system = resolve_system(CATALOG, cluster="llama3-ib")
    plan = ParallelPlan(num_gpus=8192, gpus_per_node=8, sharding=sharding, tp=tp, pp=pp,
                        shard_group_size=shard_group)
    training = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=8 * plan.dp,
                              recompute="full")
    _agree(PRESETS["llama3-70b"], system, plan, training)


@pytest.mark.parametrize("model,tp,sp,pp,flash,layers", [
    ("llama3-8b", 1, True, 1, True, None), ("llama3-8b", 4, True, 1, True, None),
    ("llama3-8b", 4, False, 2, False, 8), ("gpt3-1.3b", 2, True, 1, True, None),
    ("gpt3-1.3b", 1, True, 1, False, 3), ("gpt3-1.3b-nobias", 2, True, 1, True, None),
    ("gpt3-1.3b-nobias", 1, True, 1, False, None)])
def test_op_selective_agrees(model, tp, sp, pp, flash, layers):
    """torchtitan's op-level policy (recompute op-selective) on SwiGLU and GELU blocks, with
    and without biases (every linear saved), TP's sequence parallelism, eager attention and
    partial recompute: the reference's saved bytes, rerun matmuls and replayed all-gathers are
    the engine's."""
    spec = (dataclasses.replace(PRESETS["gpt3-1.3b"], qkv_bias=False, attn_out_bias=False,
                                mlp_bias=False) if model.endswith("nobias") else PRESETS[model])
    plan = ParallelPlan(num_gpus=16, gpus_per_node=8, tp=tp, pp=pp, sequence_parallel=sp)
    training = TrainingConfig(seq_len=2048, micro_batch=2, global_batch=2 * plan.dp * pp,
                              recompute="op-selective", flash_attention=flash,
                              recompute_layers=layers)
    _agree(spec, _h100(), plan, training)


def test_op_selective_is_refused_where_not_modelled():
    """Biases on some projections only (Qwen2.5: QKV), MoE layers: both refuse op-selective."""
    plan = ParallelPlan(num_gpus=16, gpus_per_node=8)
    training = TrainingConfig(seq_len=2048, micro_batch=1, recompute="op-selective")
    for name in ("qwen2.5-7b", "mixtral-8x7b"):
        with pytest.raises(ConfigError, match="op-selective"):
            predict(PRESETS[name], _h100(), plan, training)
