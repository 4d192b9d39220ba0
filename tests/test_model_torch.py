"""ModelSpec counts and shapes against the real torch reference module (expected == measured)."""

from __future__ import annotations

import itertools
import math

import pytest

from fsdpsim.model.spec import ModelSpec
from fsdpsim.model.presets import PRESETS

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from fsdpsim.measured.harness import build_reference_model  # noqa: E402

ATTENTION_KINDS = {"mha": None, "gqa": 2, "mqa": 1}  # n_kv_heads for 4 query heads
NORMS = {"ln": ("layernorm", True), "ln-nobias": ("layernorm", False), "rms": ("rmsnorm", False)}


def _variants() -> list[ModelSpec]:
    """Every combination of the structural switches; the bias/tying switches cycle through
    all their values across the list so each appears with each structure family."""
    out = []
    grid = itertools.product(["gelu", "swiglu"], ATTENTION_KINDS, ["learned", "rotary", "alibi",
                             "none"], NORMS, [False, True])
    for i, (ffn, attn, position, norm_key, moe) in enumerate(grid):
        norm, norm_bias = NORMS[norm_key]
        bits = [(i >> b) & 1 == 1 for b in range(6)]
        out.append(ModelSpec(
            name=f"{ffn}-{attn}-{position}-{norm_key}-{'moe' if moe else 'dense'}-{i}",
            n_layers=2, d_model=32, n_heads=4, n_kv_heads=ATTENTION_KINDS[attn],
            head_dim=12 if i % 5 == 0 else None,  # q_dim != d_model now and then
            ffn_size=40, ffn_kind=ffn, vocab_size=37, tied_embeddings=bits[0],
            position=position, max_seq_len=8, norm=norm, norm_bias=norm_bias,
            qkv_bias=bits[1], attn_out_bias=bits[2], mlp_bias=bits[3], lm_head_bias=bits[4],
            final_norm=not bits[5] or i % 3 != 0,
            n_experts=3 if moe else 0, experts_per_token=(1 + i % 2) if moe else 0,
            expert_ffn_size=24 if moe and i % 4 == 1 else None,
        ))
    return out


VARIANTS = _variants()


def _component(name: str) -> str:
    """Component of a parameter name, e.g. ``blocks.0.attn_norm.weight`` -> norms."""
    parts = name.split(".")
    top = parts[2] if parts[0] == "blocks" else parts[0]
    return {"tok_emb": "embedding", "pos_emb": "position_embedding", "lm_head": "lm_head",
            "norm": "norms", "attn_norm": "norms", "mlp_norm": "norms", "attn": "attention",
            "mlp": "mlp"}[top]


def _measured(model) -> dict[str, int]:
    counts = dict.fromkeys(("embedding", "position_embedding", "attention", "mlp", "norms",
                            "lm_head"), 0)
    for name, p in model.named_parameters():
        counts[_component(name)] += p.numel()
    return counts


def test_variants_cover_every_switch():
    for field in ("tied_embeddings", "qkv_bias", "attn_out_bias", "mlp_bias", "lm_head_bias",
                  "final_norm", "is_moe"):
        assert {getattr(s, field) for s in VARIANTS} == {False, True}, field
    assert {s.kv_heads for s in VARIANTS} == {4, 2, 1}
    assert {s.position for s in VARIANTS} == {"learned", "rotary", "alibi", "none"}


@pytest.mark.parametrize("spec", VARIANTS, ids=lambda s: s.name)
def test_counts_and_shapes_match_torch(spec):
    torch.manual_seed(0)
    model = build_reference_model(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.n_params
    assert _measured(model) == spec.param_counts()

    shapes = spec.unit_parameter_shapes()
    for block in model.blocks:
        assert [(n, tuple(p.shape)) for n, p in block.named_parameters()] == shapes["block"]
    root = [(n, tuple(p.shape)) for n, p in model.named_parameters()
            if not n.startswith("blocks.")]
    assert root == shapes["root"]
    assert (model.lm_head.weight is model.tok_emb.weight) == spec.tied_embeddings

    idx = torch.randint(0, spec.vocab_size, (2, spec.max_seq_len))
    logits = model(idx)
    assert logits.shape == (2, spec.max_seq_len, spec.vocab_size)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("spec", VARIANTS[::7], ids=lambda s: s.name)
def test_matmul_params_match_flop_counter(spec):
    """Forward FLOPs = 2 * tokens * matmul_params + QK^T and AV products (4*L*B*H*T^2*hs).

    Exact for MoE too: every token passes through exactly ``experts_per_token`` experts."""
    B, T = 3, spec.max_seq_len
    model = build_reference_model(spec)
    with FlopCounterMode(display=False) as counter:
        model(torch.randint(0, spec.vocab_size, (B, T)))
    attention_products = 2 * 2 * spec.n_layers * B * spec.n_heads * T * T * spec.head_size
    assert counter.get_total_flops() == 2 * B * T * spec.matmul_params + attention_products


@pytest.mark.parametrize("spec", VARIANTS[::5], ids=lambda s: s.name)
def test_manual_attention_equals_sdpa(spec):
    torch.manual_seed(1)
    model = build_reference_model(spec, dtype=torch.float64)
    idx = torch.randint(0, spec.vocab_size, (2, spec.max_seq_len))
    manual = model(idx)
    for block in model.blocks:
        block.attn.impl = "sdpa"
    torch.testing.assert_close(model(idx), manual)


def test_causal():
    spec = VARIANTS[3]
    model = build_reference_model(spec, dtype=torch.float64)
    idx = torch.randint(0, spec.vocab_size, (1, spec.max_seq_len))
    changed = idx.clone()
    changed[0, -1] = (idx[0, -1] + 1) % spec.vocab_size
    torch.testing.assert_close(model(idx)[:, :-1], model(changed)[:, :-1])


def test_learned_positions_limit():
    spec = next(s for s in VARIANTS if s.position == "learned")
    model = build_reference_model(spec)
    with pytest.raises(ValueError, match="with_seq_len"):
        model(torch.zeros(1, spec.max_seq_len + 1, dtype=torch.long))


def test_bad_attention_impl():
    from fsdpsim.util.errors import ConfigError

    with pytest.raises(ConfigError, match="sdpa"):
        build_reference_model(VARIANTS[0], attention="spda")


META_PRESETS = ["gpt3-1.3b", "gpt-1.7b", "llama2-7b", "llama3-8b", "mistral-7b",
                "mixtral-8x7b", "qwen2.5-7b", "mpt-125m", "mpt-7b"]


@pytest.mark.parametrize("preset", META_PRESETS)
def test_presets_on_meta_device(preset):
    """Full-size presets built on the meta device (no memory): totals and shapes agree."""
    spec = PRESETS[preset]
    model = build_reference_model(spec, device="meta", dtype=torch.bfloat16)
    assert sum(p.numel() for p in model.parameters()) == spec.n_params
    shapes = spec.unit_parameter_shapes()
    assert [(n, tuple(p.shape)) for n, p in model.blocks[0].named_parameters()] == shapes["block"]
    assert math.prod(model.tok_emb.weight.shape) == spec.vocab_size * spec.d_model


# ------------------------------------------------------------------ host ops per layer
def _dispatched_ops(spec: ModelSpec, attention: str) -> tuple[int, int]:
    """aten ops the dispatcher runs for one block's forward and backward (views included)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from fsdpsim.measured.harness.reference import Block

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    model = build_reference_model(spec, attention=attention)
    block = next(m for m in model.modules() if isinstance(m, Block))
    x = torch.randn(2, 8, spec.d_model, requires_grad=True)
    with Count() as fwd:
        y = block(x)
    with Count() as bwd:
        y.sum().backward()
    return fwd.n, bwd.n


@pytest.mark.parametrize("switch", ["base", "bias", "eager", "swiglu", "rmsnorm"])
def test_host_ops_per_layer_are_what_torch_dispatches(switch):
    """The engine's host-bound floor counts eager ops per layer; the counts are torch's."""
    from fsdpsim.costs import compute

    import dataclasses

    base = ModelSpec(name="gpt-block", n_layers=1, d_model=32, n_heads=4, ffn_size=64,
                     ffn_kind="gelu", vocab_size=37, tied_embeddings=True, max_seq_len=8,
                     position="learned", norm="layernorm", norm_bias=True, qkv_bias=False,
                     attn_out_bias=False, mlp_bias=False)
    spec = {"base": base, "eager": base,
            "bias": dataclasses.replace(base, qkv_bias=True, attn_out_bias=True, mlp_bias=True),
            "swiglu": dataclasses.replace(base, ffn_kind="swiglu"),
            "rmsnorm": dataclasses.replace(base, norm="rmsnorm", norm_bias=False)}[switch]
    measured = _dispatched_ops(spec, "manual" if switch == "eager" else "sdpa")
    flags = dict(flash=switch != "eager", rotary=False, swiglu=switch == "swiglu",
                 rmsnorm=switch == "rmsnorm", linear_bias=switch == "bias")
    expected = tuple(int(v) for v in compute.host_ops_per_layer(**flags))
    assert measured == expected
