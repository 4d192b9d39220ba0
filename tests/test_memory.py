"""Memory model: hand-worked values, paper reproductions, scalar/array agreement, invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fsdpsim.costs import ceilings
from fsdpsim.costs import memory as mem
from fsdpsim.util.errors import ConfigError

GIB = 2.0**30

# Llama-2-7B shapes (Touvron et al. 2023): h 4096, 32 heads, f 11008 SwiGLU, V 32000, L 32.
LLAMA7B = dict(d_model=4096, q_dim=4096, kv_dim=4096, ffn_size=11008, ffn_kind="swiglu",
               n_heads=32)
LLAMA7B_PARAMS = 6_738_415_616
LLAMA7B_LAYER_PARAMS = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096   # 202,383,360
LLAMA7B_ROOT_PARAMS = 2 * 32000 * 4096                              # embedding + LM head
# GPT-3 175B shapes (Brown et al. 2020): h 12288, 96 heads, f = 4h.
GPT3 = dict(d_model=12288, q_dim=12288, kv_dim=12288, ffn_size=4 * 12288, ffn_kind="gelu",
            n_heads=96)

# Byte recipes (param, grad, optimizer, compute param, compute grad, reduce grad).
RECIPES = {
    "torch_amp_adamw": (4, 4, 8, 2, 2, 4),
    "zero_paper": (2, 2, 12, 2, 2, 2),
    "fp32_adamw": (4, 4, 8, 4, 4, 4),
    "torch_amp_sgd": (4, 4, 0, 2, 2, 2),
    "bf16_reduce_momentum": (4, 4, 4, 2, 2, 2),
}


def recipe_kwargs(name):
    p, g, o, cp_, cg, rg = RECIPES[name]
    return dict(param_bytes=p, grad_bytes=g, optimizer_bytes_per_param=o,
                compute_param_bytes=cp_, compute_grad_bytes=cg, reduce_grad_bytes=rg)


# -- model states ---------------------------------------------------------------------------------
def test_zero_paper_figure_1():
    """Rajbhandari et al. 2020 (ZeRO, SC'20) Fig. 1: Ψ = 7.5B, N_d = 64, K = 12, fp16 params
    and grads: 120 GB (baseline DP), 31.4 GB (P_os), 16.6 GB (P_os+g), 1.9 GB (P_os+g+p)."""
    strategies = np.array(["none", "optimizer", "grad_op", "full"])
    states = mem.model_state_bytes(7.5e9, 64, 1, strategies, param_bytes=2, grad_bytes=2,
                                   optimizer_bytes_per_param=12)
    total_gb = sum(states.values()) / 1e9
    np.testing.assert_allclose(total_gb, [120.0, 31.4, 16.6, 1.9], atol=0.05)
    # and the exact values of (2 + 2 + K)Ψ, 4Ψ + KΨ/N, 2Ψ + (2 + K)Ψ/N, (2 + 2 + K)Ψ/N
    np.testing.assert_allclose(total_gb, [120.0, 31.40625, 16.640625, 1.875], rtol=1e-12)


def test_pytorch_fsdp_states_match_fsdp_mem_tracker():
    """Llama-7B, fp32 AdamW, FSDP2 at W = 8 (FSDPMemTracker under FakeTensorMode,
    tests/data/reference/torch_validation_on_cpu.md §4b): sharded param 3.138 GiB, optimizer
    6.276 GiB; unsharded param at the peak = root + one layer = 1.731 GiB."""
    states = mem.model_state_bytes(LLAMA7B_PARAMS, 8, 1, "full")
    assert states["params_bytes"] / GIB == pytest.approx(3.138, abs=6e-4)
    assert states["optimizer_bytes"] / GIB == pytest.approx(6.276, abs=6e-4)
    buffers = mem.fsdp_buffer_bytes(LLAMA7B_LAYER_PARAMS, LLAMA7B_PARAMS, 8, "full",
                                    compute_param_bytes=4, prefetch_units=1,
                                    resident_numel=LLAMA7B_ROOT_PARAMS)
    assert buffers["unsharded_params_bytes"] / GIB == pytest.approx(1.731, abs=6e-4)


def test_model_state_table_hand_values():
    n, shard, padded = 1000.0, 8, 1024.0
    expected = {  # (params, grads, optimizer) in bytes with p = 4, g = 4, K = 8
        "none": (4000, 4000, 8000),
        "optimizer": (4000, 4000, 8 * 128),
        "grad_op": (4000, 4 * 128, 8 * 128),
        "full": (4 * 128, 4 * 128, 8 * 128),
        "hybrid": (4 * 128, 4 * 128, 8 * 128),
    }
    for strategy, (p, g, o) in expected.items():
        states = mem.model_state_bytes(n, shard, 4, strategy, padded_n_params=padded)
        assert (states["params_bytes"], states["grads_bytes"], states["optimizer_bytes"]) == (
            p, g, o), strategy


def test_strategy_codes_equal_strings_and_bad_values_raise():
    names = np.array(mem.STRATEGIES)
    by_name = mem.model_state_bytes(1e9, 8, 1, names)
    by_code = mem.model_state_bytes(1e9, 8, 1, np.arange(5))
    for key in by_name:
        np.testing.assert_array_equal(by_name[key], by_code[key])
    with pytest.raises(ConfigError, match="'ful'.*did you mean: full"):
        mem.model_state_bytes(1e9, 8, 1, "ful")
    with pytest.raises(ConfigError, match="'zero3'"):
        mem.model_state_bytes(1e9, 8, 1, np.array(["full", "zero3"]))
    with pytest.raises(ConfigError, match="shard_size must be >= 1"):
        mem.model_state_bytes(1e9, 0, 1, "full")
    with pytest.raises(ConfigError, match="recompute"):
        mem.activation_bytes_per_layer(1, 8, 8, 8, 8, 32, "gelu", 1, "some")
    with pytest.raises(ConfigError, match="ffn_kind"):
        mem.activation_bytes_per_layer(1, 8, 8, 8, 8, 32, "relu", 1)


# -- FSDP buffers ---------------------------------------------------------------------------------
def test_fsdp_buffers_hand_values():
    unit, n = 2e8, 6.4e9
    full = mem.fsdp_buffer_bytes(unit, n, 8, "full")
    assert full["unsharded_params_bytes"] == 2 * unit * 2       # two units in flight, bf16
    assert full["unsharded_grads_bytes"] == unit * (2 + 4)      # bf16 grad + fp32 cast
    same_dtype = mem.fsdp_buffer_bytes(unit, n, 8, "full", reduce_grad_bytes=2)
    assert same_dtype["unsharded_grads_bytes"] == unit * 2
    kept = mem.fsdp_buffer_bytes(unit, n, 8, "full", reshard_after_forward=False)
    assert kept["unsharded_params_bytes"] == n * 2              # every unit stays gathered
    root = mem.fsdp_buffer_bytes(unit, n, 8, "hybrid", resident_numel=3e8)
    assert root["unsharded_params_bytes"] == (2 * unit + 3e8) * 2
    one_unit_model = mem.fsdp_buffer_bytes(n, n, 8, "full")
    assert one_unit_model["unsharded_params_bytes"] == n * 2    # cannot exceed the model
    # replicated parameters: a cast of all of them when the compute dtype differs, else none
    for strategy in ("none", "optimizer", "grad_op"):
        cast = mem.fsdp_buffer_bytes(unit, n, 8, strategy)
        assert cast["unsharded_params_bytes"] == n * 2
        same = mem.fsdp_buffer_bytes(unit, n, 8, strategy, param_bytes=2)
        assert same["unsharded_params_bytes"] == 0
    # one GPU, same dtype: the shard is the parameter, nothing is gathered
    alone = mem.fsdp_buffer_bytes(unit, n, 1, "full", compute_param_bytes=4)
    assert alone["unsharded_params_bytes"] == 0


def test_pytorch_shard_grad_op_equals_zero2_with_master_in_optimizer():
    """The two spellings of PyTorch SHARD_GRAD_OP in the module docstring agree at the peak
    (up to fp32 vs bf16 compute copies: none here)."""
    n, unit, shard = 6.4e9, 2e8, 8
    as_full = {**mem.model_state_bytes(n, shard, 1, "full"),
               **mem.fsdp_buffer_bytes(unit, n, shard, "full", reshard_after_forward=False)}
    as_zero2 = {**mem.model_state_bytes(n, shard, 1, "grad_op", param_bytes=2,
                                        optimizer_bytes_per_param=12),
                **mem.fsdp_buffer_bytes(unit, n, shard, "grad_op", param_bytes=2)}
    assert sum(as_full.values()) == pytest.approx(sum(as_zero2.values()), rel=1e-12)
    assert sum(as_full.values()) == pytest.approx(2 * n + 16 * n / shard + 6 * unit, rel=1e-12)


# -- activations ----------------------------------------------------------------------------------
def test_gelu_mha_flash_is_32_sbh_plus_logsumexp():
    """b = 1, s = 4096, h = 4096, 32 heads, f = 4h, bf16, no dropout, FlashAttention:
    32·s·b·h = 2^29 B = 512 MiB, plus the fp32 logsumexp 4·a·s·b = 2^19 B = 512 KiB."""
    a = mem.activation_bytes_per_layer(1, 4096, 4096, 4096, 4096, 16384, "gelu", 32)
    assert a == 2**29 + 2**19
    assert a / 2**20 == pytest.approx(512.5)


def test_llama7b_layer_hand_value():
    """SwiGLU, fused: 2·(2h + 2q + 2kv) + 2·(2h + 3f) = 49,152 + 82,432 = 131,584 B/token;
    ×4096 tokens = 538,968,064 B, + logsumexp 4·32·4096 = 524,288 B. Unfused SwiGLU keeps the
    SiLU output too: + 2·f·s = 90,177,536 B."""
    fused = mem.activation_bytes_per_layer(1, 4096, recompute="none", **LLAMA7B)
    assert fused == 539_492_352
    unfused = mem.activation_bytes_per_layer(1, 4096, **LLAMA7B, fused_glu=False)
    assert unfused - fused == 2 * 11008 * 4096


def test_gqa_llama3_8b_layer_hand_value():
    """Llama-3-8B: h 4096, q 4096, kv 1024, f 14336, 32 heads, s 8192:
    2·(2h + 2q + 2kv) = 36,864 and 2·(2h + 3f) = 102,400 B/token → 139,264 × 8192 =
    1,140,850,688 B, + logsumexp 4·32·8192 = 1,048,576 B."""
    a = mem.activation_bytes_per_layer(1, 8192, 4096, 4096, 1024, 14336, "swiglu", 32)
    assert a == 1_140_850_688 + 1_048_576


def test_korthikanti_eq1_gpt3():
    """Korthikanti et al. 2022 Eq. 1: s·b·h·(34 + 5·a·s/h) with dropout, no flash, bf16."""
    s, b, h, a = 2048, 1, 12288, 96
    got = mem.activation_bytes_per_layer(b, s, **GPT3, flash_attention=False, dropout=True)
    assert got == s * b * h * (34 + 5 * a * s / h)


@given(b=st.integers(1, 16), s=st.integers(1, 1 << 15), head_dim=st.sampled_from([64, 128]),
       a=st.integers(1, 128))
def test_korthikanti_eq1_property(b, s, head_dim, a):
    h = a * head_dim
    got = mem.activation_bytes_per_layer(b, s, h, h, h, 4 * h, "gelu", a,
                                         flash_attention=False, dropout=True)
    assert got == pytest.approx(s * b * h * (34 + 5 * a * s / h), rel=1e-12)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_korthikanti_table2_tensor_parallel_rows(t):
    """Korthikanti et al. 2022 Table 2 (GPT-3 shapes, dropout, no flash): TP, TP + SP,
    TP + selective, TP + SP + selective, full recompute."""
    s, b, h, a = 2048, 2, 12288, 96
    sbh = s * b * h

    def acts(recompute, sp):
        return mem.activation_bytes_per_layer(b, s, **GPT3, recompute=recompute,
                                              flash_attention=False, dropout=True, tp=t,
                                              sequence_parallel=sp)

    assert acts("none", False) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert acts("none", True) == pytest.approx(sbh * (34 / t + 5 * a * s / (h * t)))
    assert acts("selective", False) == pytest.approx(sbh * (10 + 24 / t))
    assert acts("selective", True) == pytest.approx(sbh * 34 / t)
    assert acts("full", False) == pytest.approx(sbh * 2)
    assert acts("full", True) == pytest.approx(sbh * 2 / t)


def test_context_parallel_divides_everything():
    base = mem.activation_bytes_per_layer(1, 8192, **LLAMA7B)
    assert mem.activation_bytes_per_layer(1, 8192, **LLAMA7B, cp=4) == pytest.approx(base / 4)
    nf = mem.activation_bytes_per_layer(1, 8192, **LLAMA7B, flash_attention=False)
    assert mem.activation_bytes_per_layer(1, 8192, **LLAMA7B, flash_attention=False,
                                          cp=4) == pytest.approx(nf / 4)


def test_recompute_policies_hand_values():
    b, s, h, a = 2, 4096, 4096, 32
    none = mem.activation_bytes_per_layer(b, s, **LLAMA7B)
    lse = 4 * a * s * b
    assert mem.activation_bytes_per_layer(b, s, **LLAMA7B, recompute="selective") == none - lse
    assert mem.activation_bytes_per_layer(b, s, **LLAMA7B, recompute="full") == 2 * s * b * h
    no_flash = mem.activation_bytes_per_layer(b, s, **LLAMA7B, flash_attention=False)
    softmax = 2 * a * s * s * b                                 # bf16 softmax output, no dropout
    assert no_flash - (none - lse) == softmax
    assert mem.activation_bytes_per_layer(b, s, **LLAMA7B, recompute="selective",
                                          flash_attention=False) == none - lse
    # the working set of one recomputed layer is what it did not keep
    assert mem.recompute_working_bytes(b, s, **LLAMA7B, recompute="none") == 0
    assert mem.recompute_working_bytes(b, s, **LLAMA7B, recompute="full") == none - 2 * s * b * h
    assert mem.recompute_working_bytes(b, s, **LLAMA7B, recompute="selective",
                                       flash_attention=False) == softmax


def test_logits_and_head_hand_values():
    """bf16 logits + fp32 log-softmax + two fp32 gradients = 2 + 3·4 = 14 B per logit."""
    assert mem.logits_bytes(1, 4096, 32000) == 14 * 4096 * 32000 == 1_835_008_000
    assert mem.logits_bytes(1, 4096, 32000, loss_fp32=False) == 8 * 4096 * 32000
    assert mem.logits_bytes(2, 4096, 128256, tp=2, cp=2) == 14 * 2 * 4096 * 128256 / 4
    assert mem.head_activation_bytes(2, 4096, 4096) == 2 * 2 * 2 * 4096 * 4096
    assert mem.head_activation_bytes(2, 4096, 4096, tp=4) == 2 * 2 * 2 * 4096 * 4096 / 4
    assert mem.head_activation_bytes(2, 4096, 4096, tp=4, sequence_parallel=False) == (
        2 * 2 * 2 * 4096 * 4096)


# -- the peak -------------------------------------------------------------------------------------
LLAMA7B_RUN = dict(n_params=LLAMA7B_PARAMS, unit_numel=LLAMA7B_LAYER_PARAMS, shard_size=8,
                   strategy="full", n_layers=32, vocab_size=32000, **LLAMA7B)


def test_peak_hand_value_llama7b_full_recompute():
    """Llama-2-7B, FULL_SHARD over 8 GPUs, PyTorch bf16 mixed precision + AdamW, b = 1,
    s = 4096, full recompute, FlashAttention, 1 GiB reserved, 5 % fragmentation.

    states = 4Ψ/8 + 4Ψ/8 + 8Ψ/8 = 13,476,831,232; S = 32 layers · 2·s·h = 1,073,741,824;
    W = 539,492,352 − 33,554,432 = 505,937,920; H = 2·2·s·h = 67,108,864.
    Loss backward: states + S + H + 14·s·V (1,835,008,000) = 16,452,689,920 allocated.
    First block backward: states + 2 units · 202,383,360 · 2 B (809,533,440) + one unit's
    gradient 202,383,360 · (2 + 4) B (1,214,300,160) + S + W + held logits 2·s·V (262,144,000)
    = 17,342,488,576 allocated: the binding moment.
    """
    got = mem.peak_memory_bytes(micro_batch=1, seq_len=4096, recompute="full",
                                runtime_reserved_bytes=GIB, allocator_fraction=0.05,
                                **LLAMA7B_RUN)
    expected = {
        "params_bytes": 3_369_207_808,
        "grads_bytes": 3_369_207_808,
        "optimizer_bytes": 6_738_415_616,
        "unsharded_params_bytes": 809_533_440,
        "unsharded_grads_bytes": 1_214_300_160,
        "activations_bytes": 1_579_679_744,        # S + W
        "logits_bytes": 262_144_000,               # held by the loop: 2 · s · V
        "runtime_reserved_bytes": 1_073_741_824,
        "fragmentation_bytes": 867_124_428.8,      # 0.05 · 17,342,488,576
        "peak_bytes": 19_283_354_828.8,
    }
    assert set(got) == set(mem.PEAK_KEYS)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key
    loss = mem.peak_memory_bytes(micro_batch=1, seq_len=4096, recompute="full",
                                 runtime_reserved_bytes=GIB, allocator_fraction=0.05,
                                 moment="loss", **LLAMA7B_RUN)
    assert loss["peak_bytes"] == pytest.approx(16_452_689_920 * 1.05 + GIB, rel=1e-12)
    assert loss["logits_bytes"] == 1_835_008_000 and loss["unsharded_grads_bytes"] == 0


def test_peak_scalar_and_array_inputs_agree():
    rng = np.random.default_rng(0)
    n = 40
    strategy = rng.choice(mem.STRATEGIES, n)
    recompute = rng.choice(mem.RECOMPUTE, n)
    ffn_kind = rng.choice(mem.FFN_KINDS, n)
    flash = rng.random(n) < 0.5
    shard = rng.choice([1, 2, 8, 64], n)
    b = rng.integers(1, 9, n)
    s = rng.choice([512, 2048, 8192], n)
    arrays = mem.peak_memory_bytes(
        n_params=7e9, unit_numel=2e8, shard_size=shard, strategy=strategy, n_layers=32,
        micro_batch=b, seq_len=s, d_model=4096, q_dim=4096, kv_dim=1024, ffn_size=14336,
        ffn_kind=ffn_kind, n_heads=32, vocab_size=128256, recompute=recompute,
        flash_attention=flash, allocator_fraction=0.03, runtime_reserved_bytes=1e9)
    for i in range(n):
        one = mem.peak_memory_bytes(
            n_params=7e9, unit_numel=2e8, shard_size=int(shard[i]), strategy=str(strategy[i]),
            n_layers=32, micro_batch=int(b[i]), seq_len=int(s[i]), d_model=4096, q_dim=4096,
            kv_dim=1024, ffn_size=14336, ffn_kind=str(ffn_kind[i]), n_heads=32,
            vocab_size=128256, recompute=str(recompute[i]), flash_attention=bool(flash[i]),
            allocator_fraction=0.03, runtime_reserved_bytes=1e9)
        for key in mem.PEAK_KEYS:
            assert np.shape(one[key]) == ()
            assert arrays[key][i] == pytest.approx(float(one[key]), rel=1e-14), key
    assert all(v.shape == (n,) for v in arrays.values())


def test_ceiling_hand_values_and_fits():
    """Llama-2-7B, 8-way FULL_SHARD, s = 4096, full recompute. Each moment is affine in b; the
    peak is the larger of the two, so the ceiling is the smaller of the two moments' ceilings."""
    run = dict(seq_len=4096, recompute="full", **LLAMA7B_RUN)
    for moment in ("loss", "block"):
        p0 = mem.peak_memory_bytes(micro_batch=0, moment=moment, **run)["peak_bytes"]
        slope = mem.peak_memory_bytes(micro_batch=1, moment=moment, **run)["peak_bytes"] - p0
        cap = np.array([p0 - 1.0, p0 + slope - 1.0, p0 + slope, p0 + 10.5 * slope])
        np.testing.assert_array_equal(ceilings.max_micro_batch(cap, moment=moment, **run),
                                      [0, 0, 1, 10])
    cap = np.linspace(10 * GIB, 200 * GIB, 40)
    b_max = ceilings.max_micro_batch(cap, **run)
    assert np.all(np.diff(b_max) >= 0) and b_max[-1] > b_max[0]
    peak = mem.peak_memory_bytes(micro_batch=b_max, **run)["peak_bytes"]
    assert np.all(ceilings.fits(peak[b_max > 0], cap[b_max > 0]))
    assert not np.any(ceilings.fits(mem.peak_memory_bytes(micro_batch=b_max + 1, **run)["peak_bytes"],
                               cap))


def test_max_seq_len_multiple_and_bounds():
    run = dict(micro_batch=1, recompute="none", **LLAMA7B_RUN)
    cap = np.array([1e9, 40e9, 80e9, 1e15])
    s_max = ceilings.max_seq_len(cap, multiple_of=128, **run)
    assert s_max[0] == 0                      # the model states alone do not fit
    assert np.all(s_max % 128 == 0)
    assert s_max[3] == 2**24                  # capped at the search bound
    peak = mem.peak_memory_bytes(seq_len=s_max[1:3], **run)["peak_bytes"]
    assert np.all(peak <= cap[1:3])
    over = mem.peak_memory_bytes(seq_len=s_max[1:3] + 128, **run)["peak_bytes"]
    assert np.all(over > cap[1:3])
    with pytest.raises(TypeError):
        ceilings.max_seq_len(80e9, seq_len=4096, **run)


# -- invariants (hypothesis) ----------------------------------------------------------------------
def configs():
    """A realistic configuration: FSDP units are at most 1/8 of the model."""
    return st.fixed_dictionaries(dict(
        n_params=st.integers(10**7, 10**11).map(float),
        n_units=st.integers(8, 128),
        recipe=st.sampled_from(sorted(RECIPES)),
        n_layers=st.integers(1, 96),
        micro_batch=st.integers(1, 16),
        seq_len=st.integers(1, 1 << 16),
        head_dim=st.sampled_from([64, 128]),
        n_heads=st.integers(1, 64),
        kv_ratio=st.sampled_from([1, 4, 8]),
        ffn_mult=st.floats(2.0, 4.0),
        ffn_kind=st.sampled_from(mem.FFN_KINDS),
        vocab_size=st.integers(1000, 256_000),
        recompute=st.sampled_from(mem.RECOMPUTE),
        flash_attention=st.booleans(),
        dropout=st.booleans(),
        prefetch_units=st.integers(1, 2),
        reshard_after_forward=st.booleans(),
        allocator_fraction=st.floats(0.0, 0.2),
        runtime_reserved_bytes=st.floats(0.0, 4e9),
    ))


def peak_kwargs(c, **overrides):
    h = c["n_heads"] * c["head_dim"]
    kwargs = dict(
        n_params=c["n_params"], unit_numel=c["n_params"] / c["n_units"], shard_size=8,
        strategy="full", n_layers=c["n_layers"], micro_batch=c["micro_batch"],
        seq_len=c["seq_len"], d_model=h, q_dim=h, kv_dim=h / c["kv_ratio"],
        ffn_size=round(c["ffn_mult"] * h), ffn_kind=c["ffn_kind"], n_heads=c["n_heads"],
        vocab_size=c["vocab_size"], recompute=c["recompute"],
        flash_attention=c["flash_attention"], dropout=c["dropout"],
        prefetch_units=c["prefetch_units"], reshard_after_forward=c["reshard_after_forward"],
        allocator_fraction=c["allocator_fraction"],
        runtime_reserved_bytes=c["runtime_reserved_bytes"], **recipe_kwargs(c["recipe"]))
    kwargs.update(overrides)
    return kwargs


def peak(c, **overrides):
    return mem.peak_memory_bytes(**peak_kwargs(c, **overrides))["peak_bytes"]


RELAX = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


@RELAX
@given(c=configs(), shard=st.sampled_from([1, 2, 4, 8, 16, 64, 512]))
def test_more_sharding_never_grows_memory(c, shard):
    """none ≥ optimizer ≥ grad_op ≥ full = hybrid at the same shard size (resharding FSDP).

    Without resharding after forward, FSDP holds its shard *and* every gathered unit, so it
    may exceed a replicated ZeRO-2 parameter copy by at most that shard, param_bytes·Ψ_s."""
    padded = np.ceil(c["n_params"] / shard) * shard
    strategies = np.array(["none", "optimizer", "grad_op", "full", "hybrid"])
    p = peak(c, strategy=strategies, shard_size=shard, padded_n_params=padded,
             reshard_after_forward=True)
    tol = 1e-9 * p
    assert p[0] >= p[1] - tol[0]
    assert p[1] >= p[2] - tol[1]
    assert p[2] >= p[3] - tol[2]
    assert p[3] == pytest.approx(p[4], rel=1e-12)
    kept = peak(c, strategy="full", shard_size=shard, padded_n_params=padded,
                reshard_after_forward=False)
    assert kept >= p[3] - tol[3]
    shard_bytes = (1 + c["allocator_fraction"]) * RECIPES[c["recipe"]][0] * padded / shard
    assert kept <= p[2] + shard_bytes + tol[2]


@RELAX
@given(c=configs(), strategy=st.sampled_from(mem.STRATEGIES))
def test_memory_non_increasing_in_shard_size(c, strategy):
    shards = np.array([1, 2, 3, 4, 8, 16, 64, 256, 4096])
    padded = np.ceil(c["n_params"] / shards) * shards
    p = peak(c, strategy=strategy, shard_size=shards, padded_n_params=padded)
    assert np.all(np.diff(p) <= 1e-9 * p[:-1])


@RELAX
@given(c=configs(), strategy=st.sampled_from(mem.STRATEGIES))
def test_memory_non_decreasing_in_micro_batch_and_seq_len(c, strategy):
    p_b = peak(c, strategy=strategy, micro_batch=np.arange(1, 33))
    assert np.all(np.diff(p_b) >= 0)
    p_s = peak(c, strategy=strategy, seq_len=np.unique(np.geomspace(1, 1 << 17, 60).round()))
    assert np.all(np.diff(p_s) >= 0)


@RELAX
@given(c=configs())
def test_full_recompute_le_selective_le_none(c):
    p = peak(c, recompute=np.array(["full", "selective", "none"]))
    assert p[0] <= p[1] <= p[2]
    kw = peak_kwargs(c)
    shape = [kw[k] for k in ("micro_batch", "seq_len", "d_model", "q_dim", "kv_dim", "ffn_size",
                             "ffn_kind", "n_heads")]
    per_layer = mem.activation_bytes_per_layer(*shape, np.array(["full", "selective", "none"]),
                                               flash_attention=c["flash_attention"],
                                               dropout=c["dropout"])
    assert per_layer[0] <= per_layer[1] <= per_layer[2]


@RELAX
@given(c=configs(), strategy=st.sampled_from(mem.STRATEGIES),
       capacity_gib=st.floats(1.0, 1000.0))
def test_max_micro_batch_is_exact(c, strategy, capacity_gib):
    cap = capacity_gib * GIB
    kwargs = peak_kwargs(c, strategy=strategy)
    del kwargs["micro_batch"]
    b_max = int(ceilings.max_micro_batch(cap, **kwargs))
    assert b_max >= 0
    if b_max > 0:
        assert mem.peak_memory_bytes(micro_batch=b_max, **kwargs)["peak_bytes"] <= cap
    assert mem.peak_memory_bytes(micro_batch=b_max + 1, **kwargs)["peak_bytes"] > cap


@RELAX
@given(c=configs(), strategy=st.sampled_from(mem.STRATEGIES),
       capacity_gib=st.floats(1.0, 1000.0), step=st.sampled_from([1, 64, 1024]))
def test_max_seq_len_is_exact(c, strategy, capacity_gib, step):
    cap = capacity_gib * GIB
    kwargs = peak_kwargs(c, strategy=strategy)
    del kwargs["seq_len"]
    s_max = int(ceilings.max_seq_len(cap, multiple_of=step, **kwargs))
    assume(s_max < 2**24)
    assert s_max % step == 0
    if s_max > 0:
        assert mem.peak_memory_bytes(seq_len=s_max, **kwargs)["peak_bytes"] <= cap
    assert mem.peak_memory_bytes(seq_len=s_max + step, **kwargs)["peak_bytes"] > cap


@RELAX
@given(c=configs(), caps=st.lists(st.floats(1.0, 500.0), min_size=1, max_size=6))
def test_ceilings_vectorise_over_capacity(c, caps):
    cap = np.array(caps) * GIB
    kwargs = peak_kwargs(c)
    del kwargs["micro_batch"]
    together = ceilings.max_micro_batch(cap, **kwargs)
    apart = [int(ceilings.max_micro_batch(x, **kwargs)) for x in cap]
    np.testing.assert_array_equal(together, apart)
    kwargs = peak_kwargs(c)
    del kwargs["seq_len"]
    together = ceilings.max_seq_len(cap, **kwargs)
    apart = [int(ceilings.max_seq_len(x, **kwargs)) for x in cap]
    np.testing.assert_array_equal(together, apart)


def test_memory_inputs_are_typed_by_concern_and_refuse_a_misspelt_keyword():
    """The keywords sort into their concerns; a misspelt one is an error naming it, not a
    default silently used; the inputs are frozen; the ceilings' points change the batch only."""
    from fsdpsim.costs.memory_inputs import MemoryInputs

    inputs = MemoryInputs.of(micro_batch=1, seq_len=4096, recompute="full", **LLAMA7B_RUN)
    assert inputs.batch.seq_len == 4096 and inputs.activations.recompute == "full"
    assert inputs.states.n_params == LLAMA7B_RUN["n_params"]
    assert inputs.logits.vocab_size == LLAMA7B_RUN["vocab_size"]
    with pytest.raises(TypeError, match="'recompte'"):
        MemoryInputs.of(micro_batch=1, seq_len=4096, recompte="full", **LLAMA7B_RUN)
    with pytest.raises(TypeError, match="'recompte'"):
        mem.peak_memory_bytes(micro_batch=1, seq_len=4096, recompte="full", **LLAMA7B_RUN)
    with pytest.raises(TypeError, match="missing keyword 'seq_len'"):
        MemoryInputs.of(micro_batch=1, **LLAMA7B_RUN)
    with pytest.raises(AttributeError):
        inputs.batch.micro_batch = 2
    with pytest.raises(AttributeError):  # no field can be added either
        object.__setattr__(inputs.batch, "micro_batches", 2)
    with pytest.raises(AttributeError):  # nor one read that is not declared
        inputs.activations.recompte
    moved = inputs.with_batch(2, 1024)
    assert (moved.batch.micro_batch, moved.batch.seq_len) == (2, 1024)
    assert moved.states is inputs.states and moved.activations is inputs.activations
    assert (mem.binding_terms(*mem.memory_moments(moved))["peak_bytes"]
            == mem.peak_memory_bytes(micro_batch=2, seq_len=1024, recompute="full",
                                     **LLAMA7B_RUN)["peak_bytes"])
