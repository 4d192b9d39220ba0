"""Mixture-of-experts and newer architectures: exact counts of the published configs against the
published totals, presets equal to the configs, the per-layer view, FLOPs per token per layer,
and clear errors for bad input. No torch (tests/test_moe_torch.py compares with torch)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdpsim.model import layers as model_layers
from fsdpsim.costs import compute
from fsdpsim.util.errors import ConfigError
from fsdpsim.model.hf_config import SUPPORTED_MODEL_TYPES, spec_from_hf_config
from fsdpsim.model.spec import ModelSpec
from fsdpsim.model.flops import (chunked_causal_pairs, full_causal_pairs, keys_per_query,
                                 sliding_window_pairs)
from fsdpsim.model.presets import PRESETS, get_model

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"

#: Preset id -> folder of the released config.json it is built from.
PRESET_CONFIGS = {
    "deepseek-v3": "deepseek-ai__DeepSeek-V3",
    "kimi-k2": "moonshotai__Kimi-K2-Instruct",
    "mixtral-8x7b": "mistralai__Mixtral-8x7B-v0.1",
    "mixtral-8x22b": "mistral-community__Mixtral-8x22B-v0.1",
    "qwen3-8b": "Qwen__Qwen3-8B",
    "qwen3-30b-a3b": "Qwen__Qwen3-30B-A3B",
    "qwen3-235b-a22b": "Qwen__Qwen3-235B-A22B",
    "gpt-oss-20b": "openai__gpt-oss-20b",
    "gpt-oss-120b": "openai__gpt-oss-120b",
    "llama4-scout": "meta-llama__Llama-4-Scout-17B-16E",
    "llama4-maverick": "meta-llama__Llama-4-Maverick-17B-128E",
}


def _config(folder: str) -> ModelSpec:
    return spec_from_hf_config(HF_CONFIGS / folder)


@pytest.mark.parametrize("preset, folder", PRESET_CONFIGS.items())
def test_presets_equal_the_released_configs(preset, folder):
    assert dataclasses.replace(_config(folder), name=preset) == PRESETS[preset]


def test_supported_model_types():
    assert {"mixtral", "qwen3", "qwen3_moe", "deepseek_v3", "kimi_k2", "gpt_oss",
            "llama4", "llama4_text"} <= set(SUPPORTED_MODEL_TYPES)
    assert {p.name for p in HF_CONFIGS.iterdir() if p.is_dir()} >= set(PRESET_CONFIGS.values())


# ---------------------------------------------------------------------------- DeepSeek-V3
def test_deepseek_v3_by_hand():
    """DeepSeek-V3 (arXiv:2412.19437 Sec. 4.2; README_WEIGHTS.md): 671B main model, 36.6B
    activated including the 0.9B output head (the token-embedding table is not counted)."""
    d, H, V, L = 7168, 128, 129280, 61
    r_q, r_kv, nope, rope, v = 1536, 512, 128, 64, 128
    attention = (d * r_q + r_q + r_q * H * (nope + rope)          # W_DQ, RMSNorm, W_UQ
                 + d * (r_kv + rope) + r_kv + r_kv * H * (nope + v)  # W_DKV;W_KR, RMSNorm, W_UKV
                 + H * v * d)                                       # W_O
    expert = 3 * d * 2048
    router = d * 256 + 256                                          # gate + score bias
    moe = router + 256 * expert + expert                            # + 1 shared expert
    dense = 3 * d * 18432
    total = L * (attention + 2 * d) + 3 * dense + 58 * moe + 2 * V * d + d
    spec = get_model("deepseek-v3")
    assert spec.n_params == total == 671_026_419_200
    assert round(spec.n_params / 1e9) == 671
    assert spec.expert_params == 58 * 256 * expert
    active = total - 58 * (256 - 8) * expert
    assert spec.active_params == active
    assert spec.active_params_without_embedding == active - V * d == 36_625_618_432
    assert round(spec.active_params_without_embedding / 1e8) == 366   # "36.6B", paper 37B
    # One MTP module: enorm, hnorm, eh_proj (2d -> d), a MoE block, the head's norm.
    mtp = 3 * d + 2 * d * d + attention + 2 * d + moe
    assert spec.mtp_params == mtp == 11_610_068_224
    # README_WEIGHTS: "11.5B unique parameters"; the 0.10B gap is exactly eh_proj.
    assert spec.mtp_params - 2 * d * d == pytest.approx(11.5e9, abs=0.01e9)


def test_deepseek_v3_685b_on_hugging_face_is_mtp_and_fp8_scales():
    """HF shows 685B: the 671B main model + the MTP module (11.6B) + the copies of embedding and
    output head the checkpoint stores in it (model.layers.61.embed_tokens / shared_head.head) +
    the float32 block scales (weight_scale_inv, one per 128 x 128 block of every FP8 linear:
    the attention projections and the expert, shared and dense MLPs; routers stay bf16)."""
    spec = get_model("deepseek-v3")
    V, d = spec.vocab_size, spec.d_model
    checkpoint = spec.n_params + spec.mtp_params + spec.mtp_layers * 2 * V * d
    assert checkpoint == 684_489_845_504

    def scales(shapes):
        return sum(math.ceil(s[0] / 128) * math.ceil(s[1] / 128) for n, s in shapes
                   if len(s) == 2 and n.startswith(("attn.", "mlp.")) and "router" not in n)

    layers = sum(scales(spec.layer_parameter_shapes(i)) for i in range(spec.n_layers))
    mtp = scales(spec.layer_parameter_shapes(spec.n_layers - 1))
    assert round((checkpoint + layers + mtp) / 1e9) == 685
    assert round(checkpoint / 1e9) == 684  # (without the scales it would read 684B)


def test_kimi_k2():
    """Kimi K2 (arXiv:2507.20534): "1.04T total, 32.6B activated" (model card: 1T / 32B).
    The released config counts 1.026T / 32.9B; the 1.3 % gap to 1.04T is not explained by the
    config (no MTP module, num_nextn_predict_layers 0) and is reported, not fitted."""
    spec = get_model("kimi-k2")
    assert spec.n_params == 1_026_408_232_448
    assert spec.active_params == 32_861_500_928
    assert abs(spec.n_params / 1.04e12 - 1) < 0.015
    assert abs(spec.active_params / 32.6e9 - 1) < 0.01
    assert spec.layer_pattern.startswith("1 dense + 60 MoE layers (384 experts, top-8")


# ---------------------------------------------------------------------------- published totals
#: (total, active, convention of "active", source); each must agree to the published figure's
#: last digit (publishers round or truncate).
PUBLISHED = {
    # Mistral AI, Mixtral announcement and arXiv:2401.04088: 46.7B total, 12.9B per token.
    "mixtral-8x7b": (46.7e9, 12.9e9, 0.1e9, "active_params"),
    # Mistral AI, "Cheaper, Better, Faster, Stronger" (2024-04-17): 141B total, 39B active.
    "mixtral-8x22b": (141e9, 39e9, 1e9, "active_params"),
    # Qwen3 model cards: 235B total / 22B activated; 30.5B / 3.3B; 8.2B.
    "qwen3-235b-a22b": (235e9, 22e9, 1e9, "active_params"),
    "qwen3-30b-a3b": (30.5e9, 3.3e9, 0.1e9, "active_params"),
    "qwen3-8b": (8.2e9, 8.2e9, 0.1e9, "active_params"),
    # gpt-oss model card (arXiv:2508.10925) Table 1: 116.83B / 5.13B and 20.91B / 3.61B,
    # "active" counting the unembedding but not the embedding.
    "gpt-oss-120b": (116.83e9, 5.13e9, 0.01e9, "active_params_without_embedding"),
    "gpt-oss-20b": (20.91e9, 3.61e9, 0.01e9, "active_params_without_embedding"),
    # Meta Llama 4 model card: Maverick 400B total, 17B active; Scout below (vision encoder).
    "llama4-maverick": (400e9, 17e9, 1e9, "active_params"),
}


@pytest.mark.parametrize("preset", PUBLISHED)
def test_published_totals(preset):
    total, active, unit, convention = PUBLISHED[preset]
    spec = get_model(preset)
    assert abs(spec.n_params - total) < unit
    assert abs(getattr(spec, convention) - active) < unit


EXACT = {  # preset: (total, active incl. the embedding table, routed expert parameters)
    "mixtral-8x7b": (46_702_792_704, 12_879_925_248, 45_097_156_608),
    "mixtral-8x22b": (140_620_634_112, 39_152_031_744, 135_291_469_824),
    "qwen3-8b": (8_190_735_360, 8_190_735_360, 0),
    "qwen3-30b-a3b": (30_532_122_624, 3_353_032_704, 28_991_029_248),
    "qwen3-235b-a22b": (235_093_634_560, 22_190_763_520, 227_096_395_776),
    "gpt-oss-20b": (20_914_757_184, 4_187_440_704, 19_116_933_120),
    "gpt-oss-120b": (116_829_156_672, 5_711_982_912, 114_701_598_720),
    "llama4-scout": (107_769_861_120, 17_172_894_720, 96_636_764_160),
    "llama4-maverick": (400_711_848_960, 17_184_691_200, 386_547_056_640),
    "deepseek-v3": (671_026_419_200, 37_552_297_472, 653_908_770_816),
    "kimi-k2": (1_026_408_232_448, 32_861_500_928, 1_014_686_023_680),
}


@pytest.mark.parametrize("preset", EXACT)
def test_exact_counts(preset):
    spec = get_model(preset)
    assert (spec.n_params, spec.active_params, spec.expert_params) == EXACT[preset]
    assert spec.dense_params + spec.expert_params == spec.n_params


def test_qwen3_non_embedding_and_qk_norm():
    # Model cards: "Number of Parameters (Non-Embedding)" 234B, 29.9B, 6.95B.
    for preset, published, unit in (("qwen3-235b-a22b", 234e9, 1e9),
                                    ("qwen3-30b-a3b", 29.9e9, 0.1e9),
                                    ("qwen3-8b", 6.95e9, 0.01e9)):
        spec = get_model(preset)
        counts = spec.param_counts()
        assert abs(spec.n_params - counts["embedding"] - counts["lm_head"] - published) < unit
    spec = get_model("qwen3-8b")  # q_norm and k_norm: 128 each, per layer
    d, kv = 4096, 8 * 128
    assert spec.param_counts()["attention"] == 36 * (2 * d * d + 2 * d * kv + 2 * 128)


def test_qwen3_0_6b_tied():
    spec = _config("Qwen__Qwen3-0.6B")
    assert spec.tied_embeddings and spec.n_params == 596_049_920   # "0.6B", 0.44B non-embedding
    assert abs(spec.n_params - spec.param_counts()["embedding"] - 0.44e9) < 0.01e9


def test_gpt_oss_components():
    """gpt-oss model card Table 1: MLP 114.71B / 19.12B, attention 0.96B / 0.64B, embedding
    plus unembedding 1.16B for both."""
    for preset, mlp, attention in (("gpt-oss-120b", 114.71e9, 0.96e9),
                                   ("gpt-oss-20b", 19.12e9, 0.64e9)):
        counts = get_model(preset).param_counts()
        assert abs(counts["mlp"] - mlp) < 0.01e9
        assert abs(counts["attention"] - attention) < 0.01e9
        assert abs(counts["embedding"] + counts["lm_head"] - 1.16e9) < 0.01e9


def test_llama4_scout_text_model():
    """Meta: Scout 109B total, 17B active. The text model counts 107.8B: the rest is the vision
    encoder and projector of the multimodal checkpoint (not modelled), about 1 % here."""
    spec = get_model("llama4-scout")
    assert 0.985 < spec.n_params / 109e9 < 1.0
    assert round(spec.active_params / 1e9) == 17
    assert spec.layer_pattern == ("48 MoE layers (16 experts, top-1 + shared); attention 36 "
                                  "chunked 8192 + 12 full")
    maverick = get_model("llama4-maverick")
    assert [layer.mlp for layer in maverick.layers[:4]] == ["dense", "moe", "dense", "moe"]
    assert [layer.mask for layer in maverick.layers[:4]] == ["chunked"] * 3 + ["full"]


# ---------------------------------------------------------------------------- per-layer view
def test_layer_view_of_deepseek_v3():
    spec = get_model("deepseek-v3")
    layers = spec.layers
    assert len(layers) == 61 and [layer.mlp for layer in layers[:4]] == ["dense"] * 3 + ["moe"]
    assert {layer.attention for layer in layers} == {"mla"} and layers[0].kind == "dense, MLA, full"
    assert layers[0].expert_params == 0 and layers[3].expert_params == 256 * 3 * 7168 * 2048
    assert layers[3].dense_params == layers[3].params - layers[3].expert_params
    assert spec.layer_pattern == ("3 dense + 58 MoE layers (256 experts, top-8 + shared), MLA; "
                                  "1 MTP module")
    assert not spec.uniform_layers
    with pytest.raises(ConfigError, match="blocks differ"):
        spec.block_params
    assert spec.engine_unsupported == ()  # the layered engine times it


def test_engine_support():
    """Since the layered engine every architecture field is timed; the refusal
    machinery stays for features to come."""
    from fsdpsim.model.presets import list_models

    assert all(get_model(name).engine_unsupported == () for name in list_models())


# ---------------------------------------------------------------------------- FLOPs
@settings(max_examples=300, deadline=None)
@given(s=st.integers(1, 300), w=st.integers(1, 64))
def test_pair_counts_equal_brute_force(s, w):
    q = np.arange(s)[:, None]
    kv = np.arange(s)[None, :]
    causal = kv <= q
    assert full_causal_pairs(s) == causal.sum()
    assert sliding_window_pairs(s, w) == (causal & (kv > q - w)).sum()
    assert chunked_causal_pairs(s, w) == (causal & (kv // w == q // w)).sum()


def test_pair_counts_vectorised():
    s = np.array([1, 100, 4096, 131072])
    assert np.array_equal(sliding_window_pairs(s, 128),
                          [sliding_window_pairs(int(x), 128) for x in s])
    assert np.array_equal(chunked_causal_pairs(s[:, None], np.array([[8], [8192]]).T),
                          [[chunked_causal_pairs(int(x), c) for c in (8, 8192)] for x in s])


def test_gpt_oss_layer_flops_by_hand():
    spec = get_model("gpt-oss-120b")
    s = 4096
    flops = spec.layer_flops_per_token(s)
    d, H, kv, hd = 2880, 64, 8, 64
    projection = 2 * (d * H * hd + 2 * d * kv * hd + H * hd * d)
    assert np.all(flops["attention_projection_flops"] == projection)
    sliding_keys = (128 * 129 / 2 + (s - 128) * 128) / s
    full_keys = (s + 1) / 2
    assert flops["attention_score_flops"][0] == pytest.approx(4 * H * hd * sliding_keys)
    assert flops["attention_score_flops"][1] == pytest.approx(4 * H * hd * full_keys)
    assert np.all(flops["mlp_flops"] == 2 * 4 * 3 * d * 2880)      # top-4 experts
    assert np.all(flops["router_flops"] == 2 * d * 128)
    total = flops["total_flops"].sum() + 2 * d * 201088
    assert spec.forward_flops_per_token(s) == pytest.approx(total)


def test_deepseek_v3_layer_flops_by_hand():
    spec = get_model("deepseek-v3")
    flops = spec.layer_flops_per_token(np.array([4096, 32768]))
    assert flops["total_flops"].shape == (61, 2)
    d, H = 7168, 128
    projection = 2 * (d * 1536 + 1536 * H * 192 + d * 576 + 512 * H * 256 + H * 128 * d)
    assert np.all(flops["attention_projection_flops"] == projection)
    # Scores with 192-wide query/key heads, values with 128-wide heads, full causal.
    assert flops["attention_score_flops"][5, 0] == pytest.approx(2 * H * (192 + 128) * 4097 / 2)
    assert np.all(flops["mlp_flops"][:3] == 2 * 3 * d * 18432)
    assert np.all(flops["mlp_flops"][3:] == 2 * 3 * d * 2048 * (8 + 1))  # 8 routed + 1 shared
    assert np.all(flops["router_flops"][:3] == 0)
    assert np.all(flops["router_flops"][3:] == 2 * d * 256)
    from fsdpsim.model.flops import mtp_forward_flops_per_token

    mtp = mtp_forward_flops_per_token(spec, 4096)
    assert mtp == pytest.approx(2 * 2 * d * d + flops["total_flops"][-1, 0] + 2 * d * 129280)


def test_llama4_chunked_flops():
    spec = get_model("llama4-scout")
    s = 16384  # two full chunks of 8192
    scores = spec.layer_flops_per_token(s)["attention_score_flops"]
    H, hd = 40, 128
    assert scores[0] == pytest.approx(4 * H * hd * (8192 + 1) / 2)      # chunked: (c + 1) / 2
    assert scores[3] == pytest.approx(4 * H * hd * (s + 1) / 2)         # NoPE layer: full
    mlp = spec.layer_flops_per_token(s)["mlp_flops"]
    assert np.all(mlp == 2 * 3 * 5120 * 8192 * 2)                       # top-1 + shared


@pytest.mark.parametrize("preset", ["llama3-8b", "gpt3-175b", "mixtral-8x7b", "mpt-7b"])
def test_dense_flops_agree_with_the_engine(preset):
    """For models the engine already handles, the per-layer functions give its matmul FLOPs
    and its causal attention FLOPs plus the diagonal (the engine counts s²/2 pairs, exactly
    s(s+1)/2 are computed)."""
    spec = get_model(preset)
    s = 2048
    flops = spec.layer_flops_per_token(s)
    matmul = compute.layer_matmul_flops_fwd(1, spec.d_model, spec.q_dim, spec.kv_dim,
                                            spec.expert_size, spec.ffn_kind == "swiglu",
                                            spec.experts_per_token or 1)
    router = 2 * spec.d_model * spec.n_experts
    assert flops["attention_projection_flops"][0] + flops["mlp_flops"][0] == pytest.approx(matmul)
    assert flops["router_flops"][0] == router
    engine = compute.attention_flops_fwd(1, s, spec.q_dim, causal=True) / s
    assert flops["attention_score_flops"][0] - engine == pytest.approx(2 * spec.q_dim)
    total = spec.forward_flops_per_token(s)
    assert total == pytest.approx(2 * spec.matmul_params + flops["attention_score_flops"].sum())


def test_flops_reject_bad_seq_len():
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="seq_len"):
            get_model("mixtral-8x7b").layer_flops_per_token(bad)


def test_keys_per_query_window_longer_than_sequence_is_full():
    assert keys_per_query(100, "sliding", 4096) == keys_per_query(100, "full")
    assert keys_per_query(100, "chunked", 8192) == keys_per_query(100, "full")


# ---------------------------------------------------------------------------- invariants
@st.composite
def moe_specs(draw) -> ModelSpec:
    n_layers = draw(st.integers(1, 8))
    mla = draw(st.booleans())
    n_experts = draw(st.sampled_from([0, 1, 4, 7]))
    dense = sorted(draw(st.sets(st.integers(0, n_layers - 1), max_size=n_layers - 1))) \
        if n_experts else []
    masks = draw(st.lists(st.sampled_from(["full", "sliding", "chunked"]), min_size=1,
                          max_size=n_layers))
    n_heads = draw(st.integers(1, 6))
    fields = dict(
        name="h", n_layers=n_layers, d_model=draw(st.integers(1, 48)), n_heads=n_heads,
        ffn_size=draw(st.integers(1, 64)), ffn_kind=draw(st.sampled_from(["gelu", "swiglu"])),
        vocab_size=draw(st.integers(1, 200)), tied_embeddings=draw(st.booleans()),
        position="rotary", max_seq_len=64, norm="rmsnorm", norm_bias=False,
        qkv_bias=False, attn_out_bias=False, mlp_bias=draw(st.booleans()),
        n_experts=n_experts, experts_per_token=draw(st.integers(1, n_experts)) if n_experts else 0,
        expert_ffn_size=draw(st.integers(1, 32)) if n_experts else None,
        dense_layers=tuple(dense),
        shared_expert_ffn_size=draw(st.integers(0, 16)) if n_experts else 0,
        router_bias=bool(n_experts) and draw(st.booleans()),
        router_score_bias=bool(n_experts) and draw(st.booleans()),
        attention_pattern=tuple(masks),
        sliding_window=draw(st.integers(1, 16)) if "sliding" in masks else None,
        attention_chunk_size=draw(st.integers(1, 16)) if "chunked" in masks else None,
        mtp_layers=draw(st.integers(0, 2)),
    )
    if mla:
        fields.update(attention_kind="mla", q_lora_rank=draw(st.none() | st.integers(1, 16)),
                      kv_lora_rank=draw(st.integers(1, 16)),
                      qk_nope_head_dim=draw(st.integers(1, 8)),
                      qk_rope_head_dim=draw(st.integers(1, 8)), v_head_dim=draw(st.integers(1, 8)))
    else:
        kv = draw(st.sampled_from([h for h in range(1, n_heads + 1) if n_heads % h == 0]))
        fields.update(n_kv_heads=kv, head_dim=draw(st.integers(1, 8)),
                      qkv_bias=draw(st.booleans()), attn_out_bias=draw(st.booleans()),
                      qk_norm=draw(st.booleans()), attention_sinks=draw(st.booleans()))
    return ModelSpec(**fields)


def _numel(shapes) -> int:
    return sum(math.prod(s) for _, s in shapes)


@settings(max_examples=300, deadline=None)
@given(moe_specs())
def test_counts_add_up_for_every_architecture(spec):
    counts = spec.param_counts()
    assert spec.n_params == sum(counts.values()) and all(v >= 0 for v in counts.values())
    layers = spec.layers
    assert [_numel(spec.layer_parameter_shapes(i)) for i in range(spec.n_layers)] == [
        layer.params for layer in layers]
    names = [n for n, _ in spec.layer_parameter_shapes(spec.n_layers - 1)]
    assert len(names) == len(set(names))
    root = _numel(model_layers.root_parameter_shapes(spec))
    assert sum(layer.params for layer in layers) + root == spec.n_params
    assert _numel(model_layers.mtp_parameter_shapes(spec)) * spec.mtp_layers == spec.mtp_params
    assert spec.expert_params + spec.dense_params == spec.n_params
    assert spec.active_params <= spec.n_params
    full_use = not spec.is_moe or spec.experts_per_token == spec.n_experts or all(
        layer.mlp == "dense" for layer in layers)
    assert (spec.active_params == spec.n_params) == full_use
    assert spec.matmul_params <= spec.active_params + spec.vocab_size * spec.d_model
    assert [layer.mlp == "dense" for layer in layers] == [
        not spec.is_moe or i in spec.dense_layers for i in range(spec.n_layers)]
    flops = spec.layer_flops_per_token(np.array([1, 33]))
    assert np.all(flops["total_flops"] > 0)
    assert np.all(np.diff(flops["attention_score_flops"], axis=1) >= 0)  # longer: more pairs
    shapes = {tuple(spec.layer_parameter_shapes(i)) for i in range(spec.n_layers)}
    assert spec.uniform_layers == (len(shapes) == 1)


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("overrides, pattern", [
    (dict(dense_layers=(0,)), r"dense_layers=\(0,\).*n_experts is 0"),
    (dict(n_experts=4, experts_per_token=1, dense_layers=(0, 1)), r"lists all 2 layers"),
    (dict(n_experts=4, experts_per_token=1, dense_layers=(1, 0)), r"dense_layers.*increasing"),
    (dict(n_experts=4, experts_per_token=1, dense_layers=(5,)), r"dense_layers.*between 0"),
    (dict(n_experts=4, experts_per_token=1, dense_layers=("0",)), r"dense_layers.*integers"),
    (dict(shared_expert_ffn_size=8), r"shared_expert_ffn_size=8.*n_experts is 0"),
    (dict(router_bias=True), r"router_bias=True.*n_experts is 0"),
    (dict(shared_expert_ffn_size=-1), r"shared_expert_ffn_size=-1.*>= 0"),
    (dict(attention_kind="mla"), r"attention_kind='mla'.*needs kv_lora_rank"),
    (dict(attention_kind="mqa"), r"attention_kind='mqa'.*gqa, mla"),
    (dict(kv_lora_rank=8), r"kv_lora_rank=8.*attention_kind is 'gqa'"),
    (dict(attention_pattern=("sliding",)), r"sliding_window=None.*needs sliding_window"),
    (dict(sliding_window=128), r"sliding_window=128.*needs a 'sliding' layer"),
    (dict(attention_pattern=("full", "local")), r"'local'.*full, sliding, chunked"),
    (dict(attention_pattern=()), r"attention_pattern=\(\).*1 to n_layers"),
    (dict(attention_pattern=("full",) * 3), r"1 to n_layers \(2\)"),
    (dict(attention_chunk_size=0, attention_pattern=("chunked",)), r"attention_chunk_size=0"),
    (dict(mtp_layers=-1), r"mtp_layers=-1"),
    (dict(qk_norm="yes"), r"qk_norm='yes'.*True or False"),
])
def test_invalid_architecture_fields(overrides, pattern):
    base = dict(name="tiny", n_layers=2, d_model=64, n_heads=4, ffn_size=128, ffn_kind="swiglu",
                vocab_size=100, tied_embeddings=False, position="rotary", max_seq_len=32,
                norm="rmsnorm", norm_bias=False, qkv_bias=False, attn_out_bias=False,
                mlp_bias=False)
    with pytest.raises(ConfigError, match=pattern):
        ModelSpec(**{**base, **overrides})


def test_mla_refuses_gqa_options():
    mla = dict(attention_kind="mla", q_lora_rank=None, kv_lora_rank=8, qk_nope_head_dim=4,
               qk_rope_head_dim=2, v_head_dim=4)
    base = dataclasses.asdict(get_model("llama3-8b"))
    base.update(n_kv_heads=None, head_dim=None, **mla)
    ModelSpec(**base)
    with pytest.raises(ConfigError, match=r"n_kv_heads\(8\).*MLA"):
        ModelSpec(**{**base, "n_kv_heads": 8})
    with pytest.raises(ConfigError, match=r"qk_norm=True with attention_kind='mla'"):
        ModelSpec(**{**base, "qk_norm": True})


def _write(tmp_path, config) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def _released(folder: str) -> dict:
    return json.loads((HF_CONFIGS / folder / "config.json").read_text())


@pytest.mark.parametrize("folder, change, pattern", [
    ("deepseek-ai__DeepSeek-V3", {"kv_lora_rank": None},
     r"missing key 'kv_lora_rank'.*deepseek_v3.*required keys: hidden_size"),
    ("deepseek-ai__DeepSeek-V3", {"q_lora_rank": "__drop__"}, r"missing key 'q_lora_rank'"),
    ("deepseek-ai__DeepSeek-V3", {"num_key_value_heads": 64},
     r"'num_key_value_heads'.*64 is not supported; accepted: num_attention_heads \(128\)"),
    ("deepseek-ai__DeepSeek-V3", {"attention_bias": True}, r"'attention_bias'.*accepted: false"),
    ("deepseek-ai__DeepSeek-V3", {"topk_method": "noaux"},
     r"'topk_method'.*not one of: noaux_tc, greedy.*did you mean: noaux_tc"),
    ("deepseek-ai__DeepSeek-V3", {"first_k_dense_replace": 61}, r"lists all 61 layers"),
    ("deepseek-ai__DeepSeek-V3", {"n_routed_experts": 0},
     r"'n_routed_experts'.*0 is not accepted; accepted: a whole number from 1"),
    ("deepseek-ai__DeepSeek-V3", {"num_experts_per_tok": 300}, r"experts_per_token\(300\)"),
    ("moonshotai__Kimi-K2-Instruct", {"num_nextn_predict_layers": -1},
     r"'num_nextn_predict_layers'.*-1 is not accepted"),
    ("openai__gpt-oss-120b", {"layer_types": ["sliding_attention"] * 35},
     r"'layer_types' \(model_type 'gpt_oss'\) has 35 entries; accepted: one per layer \(36\)"),
    ("openai__gpt-oss-120b", {"layer_types": ["local"] * 36},
     r"'layer_types'.* entry 'local' is not one of: full_attention, sliding_attention"),
    ("openai__gpt-oss-120b", {"sliding_window": None},
     r"'sliding_window'.* = None is not supported; accepted: a window"),
    ("openai__gpt-oss-120b", {"experts_per_token": 2},
     r"'experts_per_token'.* = 2 is not supported; accepted: the same as num_experts_per_tok"),
    ("openai__gpt-oss-120b", {"num_local_experts": None}, r"missing key 'num_local_experts'"),
    ("Qwen__Qwen3-235B-A22B", {"use_sliding_window": True}, r"'use_sliding_window'.*false"),
    ("Qwen__Qwen3-235B-A22B", {"mlp_only_layers": [94]},
     r"'mlp_only_layers'.* entry: 94 is not accepted; accepted: a whole number from 0 to 93"),
    ("Qwen__Qwen3-235B-A22B", {"moe_intermediate_size": 1.5}, r"'moe_intermediate_size'"),
    ("meta-llama__Llama-4-Scout-17B-16E", {"text_config": {
        **_released("meta-llama__Llama-4-Scout-17B-16E")["text_config"],
        "no_rope_layers": ["yes"] * 48}},
     r"'text_config.no_rope_layers'.* entry 'yes' is not one of: 0, 1"),
    ("meta-llama__Llama-4-Maverick-17B-128E", {"text_config": "x"},
     r"'text_config'.* = 'x' must be a JSON object"),
])
def test_bad_configs_name_the_key(tmp_path, folder, change, pattern):
    config = _released(folder)
    for key, value in change.items():
        if value == "__drop__":
            config.pop(key)
        else:
            config[key] = value
    with pytest.raises(ConfigError, match=pattern) as info:
        spec_from_hf_config(_write(tmp_path, config))
    assert "\n" not in str(info.value)


def test_llama4_text_config_keys(tmp_path):
    config = _released("meta-llama__Llama-4-Maverick-17B-128E")
    del config["text_config"]["intermediate_size_mlp"]
    with pytest.raises(ConfigError, match=r"missing key 'text_config.intermediate_size_mlp'"):
        spec_from_hf_config(_write(tmp_path, config))
    config["text_config"]["attention_chunk_size"] = None
    config["text_config"]["intermediate_size_mlp"] = 16384
    with pytest.raises(ConfigError, match=r"'text_config.attention_chunk_size'"):
        spec_from_hf_config(_write(tmp_path, config))
    text = {**_released("meta-llama__Llama-4-Scout-17B-16E")["text_config"]}
    scout = spec_from_hf_config(_write(tmp_path, text))   # model_type llama4_text
    assert scout.n_params == get_model("llama4-scout").n_params


def test_mistral_and_mixtral_windows(tmp_path):
    """MistralConfig's sliding_window defaults to 4096 (every layer), MixtralConfig's to None."""
    mistral = {"model_type": "mistral", "hidden_size": 64, "num_hidden_layers": 2,
               "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}
    spec = spec_from_hf_config(_write(tmp_path, mistral))
    assert spec.attention_pattern == ("sliding",) and spec.sliding_window == 4096
    spec = spec_from_hf_config(_write(tmp_path, {**mistral, "sliding_window": None}))
    assert spec.attention_pattern == ("full",) and spec.sliding_window is None
    mixtral = {**mistral, "model_type": "mixtral"}
    assert spec_from_hf_config(_write(tmp_path, mixtral)).sliding_window is None
    assert spec_from_hf_config(_write(tmp_path, {**mixtral, "sliding_window": 8})
                               ).attention_pattern == ("sliding",)


# ---------------------------------------------------------------------------- CLI
def test_model_show_prints_totals_and_pattern():
    from conftest import invoke

    table = invoke("model", "show", "deepseek-v3")
    lines = table.splitlines()
    assert lines[0] == "model deepseek-v3"
    assert lines[1] == ("layers 3 dense + 58 MoE layers (256 experts, top-8 + shared), MLA; "
                        "1 MTP module")
    assert "total 671,026,419,200; active per token 37,552,297,472" in table
    assert "11,610,068,224" in table
    data = json.loads(invoke("model", "show", "gpt-oss-120b", "--format", "json"))
    assert data["n_params"] == 116_829_156_672
    assert data["active_params_without_embedding"] == 5_132_849_472
    assert data["layer_pattern"].endswith("attention 18 sliding-window 128 + 18 full")
    assert data["spec"]["attention_pattern"] == ["sliding", "full"]
    maverick = json.loads(invoke("model", "show", "llama4-maverick", "--format", "json"))
    assert maverick["block_params"] is None and maverick["spec"]["dense_layers"][:2] == [0, 2]
    folder = HF_CONFIGS / "moonshotai__Kimi-K2-Instruct"
    assert json.loads(invoke("model", "show", str(folder), "--format", "json"))[
        "n_params"] == get_model("kimi-k2").n_params
    rows = json.loads(invoke("model", "list", "--format", "json"))
    assert {r["id"] for r in rows} >= set(PRESET_CONFIGS)
    assert {r["id"]: r["active_params"] for r in rows}["qwen3-30b-a3b"] == 3_353_032_704


def test_cli_bad_config_and_unsupported_engine_exit_2(capsys, tmp_path):
    from conftest import assert_one_line_error, run

    config = _released("deepseek-ai__DeepSeek-V3")
    del config["n_routed_experts"]
    line = assert_one_line_error(*run(capsys, "model", "show", str(_write(tmp_path, config))))
    assert "missing key 'n_routed_experts'" in line and "required keys" in line
    # dense models refuse expert parallelism in one line naming the degree
    line = assert_one_line_error(*run(capsys, "predict", "--model", "llama3-8b", "--ep", "8",
                                      "--num-gpus", "64"))
    assert "ep(8) > 1 needs a mixture-of-experts model" in line
    rc, out, _ = run(capsys, "predict", "--model", "mixtral-8x22b", "--num-gpus", "64",
                     "--format", "json")
    assert rc == 0 and json.loads(out)
