"""Tensor, sequence and context parallelism costs: hand-worked values, invariants, Table 2.

The same functions are checked call for call and byte for byte against torch DTensor runs in
``tests/test_torch_tp.py``; these tests need no torch.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdpsim.costs import context_parallel as cpc
from fsdpsim.costs import tensor_parallel as tpc
from fsdpsim.costs.vocab import padded_vocab
from fsdpsim.costs.activations import activation_bytes_per_layer
from fsdpsim.util.errors import ConfigError
from fsdpsim.model.spec import ModelSpec

LAYER_KEYS = [f"{p}_{k}_{q}" for p in tpc.PHASES for k in tpc.TP_KINDS
              for q in ("calls", "bytes")]
HEAD_PARTS = [f"forward_{part}_all_reduce_{q}" for part in ("embedding", "loss")
              for q in ("calls", "bytes")]

GPT_BIAS = ModelSpec(name="gelu-bias", n_layers=2, d_model=32, n_heads=4, ffn_size=128,
                     ffn_kind="gelu", vocab_size=64, tied_embeddings=False, position="learned",
                     max_seq_len=16, norm="layernorm", norm_bias=True, qkv_bias=True,
                     attn_out_bias=True, mlp_bias=True, lm_head_bias=True)
LLAMA_GQA = ModelSpec(name="llama-gqa", n_layers=2, d_model=32, n_heads=8, n_kv_heads=4,
                      head_dim=4, ffn_size=64, ffn_kind="swiglu", vocab_size=64,
                      tied_embeddings=False, position="rotary", max_seq_len=16, norm="rmsnorm",
                      norm_bias=False, qkv_bias=False, attn_out_bias=False, mlp_bias=False)
MOE = ModelSpec(name="moe", n_layers=1, d_model=16, n_heads=2, ffn_size=32, ffn_kind="swiglu",
                vocab_size=32, tied_embeddings=True, position="none", max_seq_len=8,
                norm="rmsnorm", norm_bias=False, qkv_bias=False, attn_out_bias=False,
                mlp_bias=False, n_experts=2, experts_per_token=1)


# -- tensor parallelism: one layer ----------------------------------------------------------------
def test_layer_hand_worked_megatron():
    """b = 2, s = 2048, h = 4096, bf16, t = 8: one [b·s, h] activation m = 33,554,432 B."""
    m = 2 * 2048 * 4096 * 2
    plain = tpc.tp_layer_collectives(2 * 2048, 4096, 2, 8, False)
    assert (plain.forward_all_reduce_calls, plain.forward_all_reduce_bytes) == (2, 2 * m)
    assert (plain.backward_all_reduce_calls, plain.backward_all_reduce_bytes) == (2, 2 * m)
    for key in ("all_gather", "reduce_scatter"):
        assert (getattr(plain, f"forward_{key}_calls")
                == getattr(plain, f"backward_{key}_bytes") == 0)
    sp = tpc.tp_layer_collectives(2 * 2048, 4096, 2, 8, True)
    assert sp.forward_all_reduce_calls == sp.backward_all_reduce_calls == 0
    assert (sp.forward_all_gather_calls, sp.forward_all_gather_bytes) == (2, 2 * m)
    assert (sp.forward_reduce_scatter_calls, sp.forward_reduce_scatter_bytes) == (2, 2 * m)
    assert (sp.backward_reduce_scatter_calls, sp.backward_reduce_scatter_bytes) == (2, 2 * m)
    # Megatron re-gathers each block input for the weight gradient: 2 + 2 all-gathers.
    assert (sp.backward_all_gather_calls, sp.backward_all_gather_bytes) == (4, 4 * m)


def test_layer_torch_layout():
    """torch DTensor: one backward all-reduce per ColwiseParallel linear, no re-gather."""
    m = 32 * 32 * 4
    plain = tpc.tp_layer_collectives(32, 32, 4, 2, False, column_linears=5)
    assert (plain.backward_all_reduce_calls, plain.backward_all_reduce_bytes) == (5, 5 * m)
    sp = tpc.tp_layer_collectives(32, 32, 4, 2, True, column_linears=5, regather_input=False)
    assert (sp.backward_all_gather_calls, sp.backward_all_gather_bytes) == (2, 2 * m)
    assert sp.backward_all_reduce_calls == 0  # column_linears only matters without SP


@pytest.mark.parametrize("sp", [False, True])
def test_tp_one_is_free(sp):
    layer = tpc.tp_layer_collectives(4096, 4096, 2, 1, sp)
    head = tpc.tp_head_collectives(4096, 4096, 32000, 2, 1, sp)
    assert set(layer._fields) == set(LAYER_KEYS)
    assert set(head._fields) == set(LAYER_KEYS) | set(HEAD_PARTS)
    assert all(np.all(v == 0) for v in [*layer, *head])


@pytest.mark.parametrize("sp,loss_parallel", [(False, True), (True, True), (False, False)])
def test_head_forward_all_reduce_parts_add_up(sp, loss_parallel):
    head = tpc.tp_head_collectives(4096, 4096, 32000, 2, 8, sp, loss_parallel)
    for q in ("calls", "bytes"):
        assert getattr(head, f"forward_all_reduce_{q}") == (
            getattr(head, f"forward_embedding_all_reduce_{q}")
            + getattr(head, f"forward_loss_all_reduce_{q}"))


@settings(max_examples=60, deadline=None)
@given(tokens=st.integers(1, 1 << 16), d=st.integers(1, 1 << 14), e=st.sampled_from([1, 2, 4]),
       t=st.sampled_from([2, 3, 4, 8, 16]))
def test_sp_moves_as_much_as_tp(tokens, d, e, t):
    """Each all-reduce of m bytes becomes an all-gather of m plus a reduce-scatter of m: the
    ring wire bytes are equal ([2] §4.2.2): 2·AR = AG + RS in tensor bytes. Megatron's
    backward re-gather adds exactly (t−1)/t · 2m on top."""
    def wire(c, phase):
        return tpc.ring_wire_bytes(getattr(c, f"{phase}_all_reduce_bytes"),
                                   getattr(c, f"{phase}_all_gather_bytes"),
                                   getattr(c, f"{phase}_reduce_scatter_bytes"), t)

    plain = tpc.tp_layer_collectives(tokens, d, e, t, False)
    sp = tpc.tp_layer_collectives(tokens, d, e, t, True, regather_input=False)
    megatron_sp = tpc.tp_layer_collectives(tokens, d, e, t, True)
    assert 2 * plain.forward_all_reduce_bytes == (sp.forward_all_gather_bytes
                                                     + sp.forward_reduce_scatter_bytes)
    for phase in tpc.PHASES:
        assert wire(plain, phase) == pytest.approx(wire(sp, phase), rel=1e-12)
    m = tokens * d * e
    assert wire(megatron_sp, "backward") - wire(sp, "backward") == pytest.approx(
        (t - 1) / t * 2 * m, rel=1e-12)


def test_layer_array_matches_scalar():
    tp = np.array([1, 2, 4, 8])[:, None]
    sp = np.array([False, True])[None, :]
    grid = tpc.tp_layer_collectives(1024, 512, 2, tp, sp, column_linears=3)
    for i, t in enumerate([1, 2, 4, 8]):
        for j, s in enumerate([False, True]):
            one = tpc.tp_layer_collectives(1024, 512, 2, t, s, column_linears=3)
            for key in LAYER_KEYS:
                assert getattr(grid, key).shape == (4, 2)
                assert getattr(grid, key)[i, j] == getattr(one, key)


def test_bad_degree():
    with pytest.raises(ConfigError, match="tp must be >= 1"):
        tpc.tp_layer_collectives(8, 8, 2, 0, False)


# -- head: embedding, LM head, loss ---------------------------------------------------------------
def test_head_hand_worked():
    """tokens 8, h 4, V 16, bf16, t = 2: m = 8·4·2 = 64 B; loss scalars 8 · 4 B each."""
    plain = tpc.tp_head_collectives(8, 4, 16, 2, 2, False)
    assert (plain.forward_all_reduce_calls, plain.forward_all_reduce_bytes) == (
        1 + 3, 64 + 3 * 32)                          # embedding output; max, sum-exp, target
    assert (plain.backward_all_reduce_calls, plain.backward_all_reduce_bytes) == (1, 64)
    sp = tpc.tp_head_collectives(8, 4, 16, 2, 2, True)
    assert (sp.forward_reduce_scatter_calls, sp.forward_reduce_scatter_bytes) == (1, 64)
    assert (sp.forward_all_gather_calls, sp.forward_all_gather_bytes) == (1, 64)
    assert (sp.forward_all_reduce_calls, sp.forward_all_reduce_bytes) == (3, 96)
    assert (sp.backward_all_gather_calls, sp.backward_all_gather_bytes) == (2, 128)
    assert (sp.backward_reduce_scatter_calls, sp.backward_reduce_scatter_bytes) == (1, 64)
    torch_sp = tpc.tp_head_collectives(8, 4, 16, 2, 2, True, regather_input=False,
                                       target_logit_bytes=2)
    assert torch_sp.backward_all_gather_calls == 1
    assert torch_sp.forward_all_reduce_bytes == 8 * (4 + 4 + 2)
    gathered = tpc.tp_head_collectives(8, 4, 16, 2, 2, False, loss_parallel=False)
    assert (gathered.forward_all_reduce_calls, gathered.forward_all_reduce_bytes) == (1, 64)
    assert (gathered.forward_all_gather_calls, gathered.forward_all_gather_bytes) == (
        1, 8 * 16 * 2)                               # the whole logits


# -- per-rank shapes -----------------------------------------------------------------------------
@pytest.mark.parametrize("spec,tp", [(GPT_BIAS, 2), (GPT_BIAS, 4), (LLAMA_GQA, 4), (MOE, 2)])
def test_local_shapes_split_exactly_one_dim(spec, tp):
    units = spec.unit_parameter_shapes()
    local = tpc.tp_local_shapes(units, tp)
    for unit, pairs in units.items():
        assert [n for n, _ in local[unit]] == [n for n, _ in pairs]
        for (name, full), (_, part) in zip(pairs, local[unit], strict=True):
            role = tpc.tp_role(name)
            split = {"column": 0, "vocab": 0, "row": 1}.get(role)
            if split is None:
                assert part == full, name
            else:
                assert part[split] * tp == full[split], name
                assert part[:split] + part[split + 1:] == full[:split] + full[split + 1:]


def test_local_shapes_hand_worked():
    local = dict(tpc.tp_local_shapes(GPT_BIAS.unit_parameter_shapes()["block"], 4))
    assert local["attn.q.weight"] == (8, 32) and local["attn.q.bias"] == (8,)
    assert local["attn.o.weight"] == (32, 8) and local["attn.o.bias"] == (32,)
    assert local["mlp.up.weight"] == (32, 32) and local["mlp.down.weight"] == (32, 32)
    assert local["attn_norm.weight"] == local["attn_norm.bias"] == (32,)
    root = dict(tpc.tp_local_shapes(GPT_BIAS.unit_parameter_shapes()["root"], 4))
    assert root == {"tok_emb.weight": (16, 32), "pos_emb.weight": (16, 32),
                    "norm.weight": (32,), "norm.bias": (32,), "lm_head.weight": (16, 32),
                    "lm_head.bias": (16,)}
    moe = dict(tpc.tp_local_shapes(MOE.unit_parameter_shapes()["block"], 2))
    assert moe["mlp.router.weight"] == (2, 16)
    assert moe["mlp.experts.1.gate.weight"] == (16, 16)
    assert moe["mlp.experts.1.down.weight"] == (16, 16)


def test_local_shapes_errors():
    odd_vocab = dataclasses.replace(LLAMA_GQA, vocab_size=63)
    with pytest.raises(ConfigError, match=r"tok_emb.weight \(63, 32\): dim 0 \(63\) % tp\(2\)"):
        tpc.tp_local_shapes(odd_vocab.unit_parameter_shapes()["root"], 2)
    with pytest.raises(ConfigError, match=r"attn.k.weight \(16, 32\): dim 0 \(16\) % tp\(32\)"):
        tpc.tp_local_shapes(LLAMA_GQA.unit_parameter_shapes()["block"], 32)
    with pytest.raises(ConfigError, match="no tensor-parallel layout"):
        tpc.tp_local_shapes([("mystery.weight", (4, 4))], 2)
    with pytest.raises(ConfigError, match="tp=0"):
        tpc.tp_local_shapes([], 0)


def test_grad_sync_hand_worked():
    """GPT_BIAS: 2 layers × 2 LayerNorms + final, each weight and bias of 32: 10 tensors,
    320 elements; row-parallel biases 2 × 2 × 32 = 128 elements (Megatron only)."""
    shapes = [(f"blocks.{i}.{n}", s) for i in range(2)
              for n, s in GPT_BIAS.unit_parameter_shapes()["block"]]
    shapes += GPT_BIAS.unit_parameter_shapes()["root"]
    megatron = tpc.tp_grad_sync(shapes, 4, 2, True)
    assert (megatron.calls, megatron.bytes) == (1, (320 + 128) * 4)
    torch_fsdp = tpc.tp_grad_sync(shapes, 4, 2, True, implementation="torch")
    assert (torch_fsdp.calls, torch_fsdp.bytes) == (10, 320 * 4)
    adamw = tpc.tp_grad_sync(shapes, 4, 2, True, implementation="torch",
                             reductions_per_tensor=3)
    assert (adamw.calls, adamw.bytes) == (30, 3 * 320 * 4)
    for off in (tpc.tp_grad_sync(shapes, 4, 2, False), tpc.tp_grad_sync(shapes, 4, 1, True)):
        assert off.calls == off.bytes == 0
    with pytest.raises(ConfigError, match="implementation='nccl'"):
        tpc.tp_grad_sync(shapes, 4, 2, True, implementation="nccl")


# -- context parallelism -------------------------------------------------------------------------
def test_ring_hand_worked():
    """The docstring case: b 2, s 16, 2 heads of 8, fp32, cp 2: K+V block 2048 B."""
    torch_ag = cpc.cp_ring_attention_bytes(32, 16, 4, 2, implementation="torch")
    assert (torch_ag.forward_calls, torch_ag.forward_bytes) == (1, 4096)
    assert (torch_ag.backward_kv_calls, torch_ag.backward_kv_bytes) == (1, 4096)
    assert (torch_ag.backward_dkv_calls, torch_ag.backward_dkv_bytes) == (2, 4096)
    torch_a2a = cpc.cp_ring_attention_bytes(32, 16, 4, 2, implementation="torch",
                                            rotate="all_to_all")
    assert (torch_a2a.forward_calls, torch_a2a.forward_bytes) == (1, 2048)
    megatron = cpc.cp_ring_attention_bytes(32, 16, 4, 2)
    assert [getattr(megatron, k) for k in ("forward_bytes", "backward_kv_bytes",
                                           "backward_dkv_bytes")] == [2048, 2048, 2048]
    # Llama-3 8B-like, b 1, s 131072, 8 KV heads × 128, bf16, cp 8, tp 2: block 2·16384·512·2.
    big = cpc.cp_ring_attention_bytes(131072, 1024, 2, 8, 2)
    assert big.forward_bytes == 7 * 2 * 16384 * 512 * 2


@settings(max_examples=40, deadline=None)
@given(tokens=st.integers(1, 1 << 20), kv=st.integers(1, 8192), cp=st.integers(1, 16),
       tp=st.sampled_from([1, 2, 4, 8]))
def test_ring_torch_gather_sends_what_the_ring_sends(tokens, kv, cp, tp):
    """An all-gather of cp blocks sends (cp−1)/cp of its output: the ring's cp−1 blocks."""
    megatron = cpc.cp_ring_attention_bytes(tokens, kv, 2, cp, tp)
    gathered = cpc.cp_ring_attention_bytes(tokens, kv, 2, cp, tp, implementation="torch")
    rotated = cpc.cp_ring_attention_bytes(tokens, kv, 2, cp, tp, implementation="torch",
                                          rotate="all_to_all")
    sent = tpc.ring_wire_bytes(0, gathered.forward_bytes, 0, cp)
    assert sent == pytest.approx(megatron.forward_bytes, rel=1e-12, abs=1e-9)
    assert rotated.forward_bytes == pytest.approx(megatron.forward_bytes, rel=1e-12)
    # torch's dK, dV accumulators (fp32 = 2 × bf16) make one more hop than Megatron's.
    assert rotated.backward_dkv_bytes == pytest.approx(
        2 * cp / max(cp - 1, 1) * megatron.backward_dkv_bytes if cp > 1 else 0, rel=1e-12)


def test_ulysses_hand_worked():
    """s 8192, MHA h 4096, bf16, cp 8: per pass 4 all-to-alls of 1024 tokens × 4096 each,
    4·N·h/P = 4·8192·4096/8 elements ([6] §3.2)."""
    out = cpc.cp_all_to_all_bytes(8192, 4096, 4096, 2, 8)
    assert out.forward_calls == out.backward_calls == 4
    assert out.forward_bytes == out.backward_bytes == 4 * 8192 * 4096 / 8 * 2
    gqa = cpc.cp_all_to_all_bytes(8192, 4096, 1024, 2, 8, tp=2)
    assert gqa.forward_bytes == 1024 * (4096 + 2 * 1024 + 4096) / 2 * 2
    off = cpc.cp_all_to_all_bytes(8192, 4096, 4096, 2, 1)
    assert off.forward_calls == off.forward_bytes == 0


def _causal_pairs_per_rank(s, cp):
    """Brute force: causal (query, key) pairs of the queries in chunks r and 2cp−1−r."""
    c = s // (2 * cp)
    out = []
    for r in range(cp):
        rows = [*range(r * c, (r + 1) * c), *range((2 * cp - 1 - r) * c, (2 * cp - r) * c)]
        out.append(sum(i + 1 for i in rows))
    return out


@pytest.mark.parametrize("cp", [1, 2, 3, 4, 8])
def test_attention_share(cp):
    s = 16 * cp
    pairs = _causal_pairs_per_rank(s, cp)
    assert len(set(pairs)) == 1                                 # balanced
    assert pairs[0] * cp == s * (s + 1) // 2
    assert cpc.cp_attention_flops_share(cp) == pytest.approx(pairs[0] / (s * (s + 1) / 2))
    c = s // (2 * cp)                                           # full squares per kernel call
    calls = (2 * c) ** 2 + (cp - 1) * (2 * c) * c
    assert cpc.cp_attention_flops_share(cp, causal_skip=False) == pytest.approx(calls / s**2)


def test_cp_feasibility():
    assert cpc.cp_feasible(4096, 32, 8, 4).all()
    assert not cpc.cp_feasible(4100, 32, 8, 4)
    mask = cpc.cp_feasible(4096, 32, 8, np.array([2, 4, 8]), 2, method="ulysses")
    assert mask.tolist() == [True, True, False]                 # 4 KV heads per TP rank
    with pytest.raises(ConfigError, match=r"seq_len\(4100\).*cp\(4\).*2\*cp"):
        cpc.check_context_parallel(4100, 32, 8, 4)
    with pytest.raises(ConfigError, match="method='tree'"):
        cpc.cp_feasible(4096, 32, 8, 4, method="tree")
    with pytest.raises(ConfigError, match="implementation='te'"):
        cpc.cp_ring_attention_bytes(1, 1, 2, 2, implementation="te")
    with pytest.raises(ConfigError, match="rotate='ring'"):
        cpc.cp_ring_attention_bytes(1, 1, 2, 2, implementation="torch", rotate="ring")


# -- Korthikanti et al. 2022, Table 2 ------------------------------------------------------------
# GPT-3 175B, 530B and 1T shapes of [2] Table 3 (s 2048, b 1, t 8) and a small odd case.
TABLE2_SHAPES = [(2048, 1, 12288, 96, 8), (2048, 1, 20480, 128, 8), (2048, 1, 25600, 160, 8),
                 (512, 4, 1024, 16, 2)]


@pytest.mark.parametrize("s,b,h,a,t", TABLE2_SHAPES)
def test_korthikanti_table2(s, b, h, a, t):
    """Activation bytes per layer, 16-bit, GELU MLP f = 4h, MHA, dropout, no flash ([2] Table
    2), reproduced exactly (the Table's full-recompute row 2sbh is without SP: with SP the
    stored layer input is itself split, 2sbh/t)."""
    def act(recompute, tp, sp):
        return activation_bytes_per_layer(b, s, h, h, h, 4 * h, "gelu", a, recompute,
                                          flash_attention=False, act_bytes=2, dropout=True,
                                          tp=tp, sequence_parallel=sp)

    sbh = s * b * h
    rows = {
        ("none", 1, False): sbh * (34 + 5 * a * s / h),
        ("none", t, False): sbh * (10 + 24 / t + 5 * a * s / (h * t)),
        ("none", t, True): sbh / t * (34 + 5 * a * s / h),
        ("selective", t, False): sbh * (10 + 24 / t),
        ("selective", t, True): sbh * 34 / t,
        ("full", 1, False): 2 * sbh,
        ("full", t, False): 2 * sbh,
    }
    for (recompute, tp, sp), expected in rows.items():
        assert act(recompute, tp, sp) == pytest.approx(expected, rel=1e-12), (recompute, tp, sp)
    assert act("full", t, True) == pytest.approx(2 * sbh / t, rel=1e-12)
    # Table 2 is per layer: fused_glu changes nothing for a GELU MLP.
    assert activation_bytes_per_layer(b, s, h, h, h, 4 * h, "gelu", a, flash_attention=False,
                                      dropout=True, fused_glu=False) == rows[("none", 1, False)]


def test_root_forward_all_reduces_are_costed_each_at_its_own_size():
    """llama3-8b, tp 8 without SP, b·s = 2,048 on H100, one micro-batch, no recompute: each of
    the 32 layers all-reduces m = 2,048·4,096·2 B four times (two forward, two backward); the
    root all-reduces the embedding output (m) and the LM head's input gradient (m) and, for
    the vocab-parallel loss, three per-token fp32 scalars (4·2,048 B each). NCCL picks an
    algorithm per call, so tp_s = 32·4·t(m) + 2·t(m) + 3·t(8,192 B), not
    32·4·t(m) + 4·t((m + 3·8,192)/4) + t(m) (the forward's four calls at their mean size)."""
    from fsdpsim import engine
    from fsdpsim.costs import nccl
    from fsdpsim.drivers.predict import config_inputs, predict
    from fsdpsim.engine import collectives, layers
    from fsdpsim.hardware.catalog import load_catalog
    from fsdpsim.hardware.system import resolve_system
    from fsdpsim.model.presets import get_model
    from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig

    system = resolve_system(load_catalog(use_env=False), gpu="h100")
    plan = ParallelPlan(8, 8, "none", tp=8, sequence_parallel=False)
    training = TrainingConfig(seq_len=2048, micro_batch=1, recompute="none")
    model = get_model("llama3-8b")
    g = engine.prepare({**config_inputs(model, system, plan, training), "micro_batch": 1.0,
                        "recompute": engine.RECOMPUTE_CODES["none"], "grad_accum": 1.0})
    cands = collectives.GroupCandidates(g, layers.rates(g), "tp").ar

    def t(nbytes):
        return float(nccl.time_s(nbytes, cands))
    m, loss = 2048 * 4096 * 2.0, 4.0 * 2048
    tp_s = predict(model, system, plan, training).values["tp_s"]
    assert tp_s == pytest.approx(32 * 4 * t(m) + 2 * t(m) + 3 * t(loss), rel=1e-9)
    mean_size = 32 * 4 * t(m) + 4 * t((m + 3 * loss) / 4) + t(m)
    assert mean_size - tp_s > 20e-6          # the mean-size charge overstated the root


def test_padded_vocab_is_megatrons_rule_for_the_engine_and_the_published_rows():
    """Megatron's _vocab_size_with_padding: a multiple of 128·tp with tp > 1; the model's own
    vocabulary on one rank. The engine's model inputs hold it; a published row keeps a stated
    vocabulary that tp divides and pads one it does not by the same rule."""
    from fsdpsim.engine.build import model_inputs
    from fsdpsim.measured.published.text import tp_vocab
    from fsdpsim.model.presets import get_model

    assert padded_vocab(50257, 1) == 50257
    assert padded_vocab(50257, 2) == 50432          # 197 · 256
    assert padded_vocab(128256, 4) == 128512        # 251 · 512
    assert padded_vocab(128256, 2) == 128256        # already 501 · 256
    assert padded_vocab(32000, 8) == 32768          # 32 · 1024
    spec = get_model("gpt3-175b")
    for tp in (1, 2, 8):
        assert model_inputs(spec, 8, tp=tp)["vocab_size"] == padded_vocab(spec.vocab_size, tp)
    assert tp_vocab(50257, 4) == padded_vocab(50257, 4) == 50688
    assert tp_vocab(128256, 4) == 128256
