"""MoE and newer architectures against torch: the module structure of each family's reference
modelling code (fsdpsim.measured.harness.hf_reference, built from a config.json dict without fsdpsim's
reader) must have exactly the parameters that spec_from_hf_config counts, in total, per
component, per layer and for the routed experts; its forward must run exactly the matmul FLOPs
and attend exactly the query-key pairs that ModelSpec's per-layer FLOP functions give."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fsdpsim.model.hf_config import spec_from_hf_config
from fsdpsim.model.flops import keys_per_query

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from fsdpsim.measured.harness.hf_reference import build_hf_style_model  # noqa: E402

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"

#: Small configs of every family, each switching on what its family can do.
TINY = {
    "mixtral-window": {
        "model_type": "mixtral", "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 24,
        "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 50,
        "sliding_window": 5, "tie_word_embeddings": False},
    "qwen3-dense-tied-sliding": {
        "model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12,
        "intermediate_size": 40, "vocab_size": 50, "tie_word_embeddings": True,
        "use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1},
    "qwen3-moe-sparse-step": {
        "model_type": "qwen3_moe", "hidden_size": 32, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8,
        "intermediate_size": 48, "moe_intermediate_size": 16, "num_experts": 6,
        "num_experts_per_tok": 2, "decoder_sparse_step": 2, "mlp_only_layers": [3],
        "vocab_size": 50},
    "deepseek-v3-mtp": {
        "model_type": "deepseek_v3", "hidden_size": 32, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 12,
        "kv_lora_rank": 8, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4, "v_head_dim": 5,
        "intermediate_size": 40, "moe_intermediate_size": 12, "n_routed_experts": 6,
        "num_experts_per_tok": 2, "n_shared_experts": 2, "first_k_dense_replace": 1,
        "num_nextn_predict_layers": 1, "topk_method": "noaux_tc", "vocab_size": 50},
    "kimi-k2-no-q-lora": {
        "model_type": "kimi_k2", "hidden_size": 24, "num_hidden_layers": 2,
        "num_attention_heads": 2, "q_lora_rank": None, "kv_lora_rank": 6,
        "qk_nope_head_dim": 4, "qk_rope_head_dim": 2, "v_head_dim": 3,
        "intermediate_size": 20, "moe_intermediate_size": 8, "n_routed_experts": 5,
        "num_experts_per_tok": 3, "n_shared_experts": 1, "first_k_dense_replace": 0,
        "topk_method": "greedy", "vocab_size": 40},
    "gpt-oss-default-layers": {
        "model_type": "gpt_oss", "hidden_size": 32, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "intermediate_size": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
        "sliding_window": 3, "vocab_size": 50},
    "gpt-oss-listed-layers": {
        "model_type": "gpt_oss", "hidden_size": 16, "num_hidden_layers": 3,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
        "intermediate_size": 12, "num_local_experts": 3, "num_experts_per_tok": 1,
        "experts_per_token": 1, "sliding_window": 2, "vocab_size": 30,
        "layer_types": ["full_attention", "sliding_attention", "sliding_attention"]},
    "llama4-interleaved": {
        "model_type": "llama4", "tie_word_embeddings": False,
        "text_config": {
            "hidden_size": 32, "num_hidden_layers": 8, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 16,
            "intermediate_size_mlp": 40, "num_local_experts": 4, "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 2, "attention_chunk_size": 3, "vocab_size": 50}},
    "llama4-text-lists": {
        "model_type": "llama4", "text_config": {
            "hidden_size": 16, "num_hidden_layers": 3, "num_attention_heads": 2,
            "num_key_value_heads": 1, "head_dim": 8, "intermediate_size": 8,
            "intermediate_size_mlp": 24, "num_local_experts": 3, "num_experts_per_tok": 2,
            "moe_layers": [0, 2], "no_rope_layers": [1, 0, 1], "attention_chunk_size": 2,
            "vocab_size": 30}},
}


def _spec(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return spec_from_hf_config(path)


def _component(name: str) -> str:
    if name.startswith("mtp."):
        return "mtp"
    if name == "model.embed_tokens.weight":
        return "embedding"
    if name == "lm_head.weight":
        return "lm_head"
    if name == "model.norm.weight" or re.search(r"\.(input|post_attention)_layernorm\.", name):
        return "norms"
    if ".self_attn." in name:
        return "attention"
    if re.search(r"\.(mlp|feed_forward|block_sparse_moe)\.", name):
        return "mlp"
    raise AssertionError(f"unclassified parameter {name}")


def _measured(model) -> dict[str, int]:
    counts = dict.fromkeys(("embedding", "position_embedding", "attention", "mlp", "norms",
                            "lm_head", "mtp"), 0)
    for name, p in model.named_parameters():
        counts[_component(name)] += p.numel()
    return counts


def _layer_numel(model, index: int, component: str | None = None, experts: bool = False) -> int:
    prefix = f"model.layers.{index}."
    return sum(p.numel() for n, p in model.named_parameters()
               if n.startswith(prefix) and (component is None or _component(n) == component)
               and (not experts or ".experts." in n))


@pytest.mark.parametrize("case", TINY)
def test_parameters_match_reference_modules(tmp_path, case):
    spec = _spec(tmp_path, TINY[case])
    model = build_hf_style_model(TINY[case])
    measured = _measured(model)
    assert sum(p.numel() for p in model.parameters()) == spec.n_params + spec.mtp_params
    assert measured.pop("mtp") == spec.mtp_params
    assert measured == spec.param_counts()
    for layer in spec.layers:
        assert _layer_numel(model, layer.index) == layer.params
        assert _layer_numel(model, layer.index, "attention") == layer.attention_params
        assert _layer_numel(model, layer.index, "mlp") == layer.mlp_params
        assert _layer_numel(model, layer.index, "norms") == layer.norm_params
        assert _layer_numel(model, layer.index, experts=True) == layer.expert_params
        assert layer.mlp == ("moe" if model.moe[layer.index] else "dense")
    experts = sum(p.numel() for n, p in model.named_parameters()
                  if ".experts." in n and not n.startswith("mtp."))
    assert experts == spec.expert_params
    assert spec.dense_params == spec.n_params - experts
    # Active: each MoE layer uses k of its E identical experts.
    idle = sum(_layer_numel(model, i, experts=True) * (spec.n_experts - spec.experts_per_token)
               // spec.n_experts for i, moe in enumerate(model.moe) if moe)
    assert spec.active_params == spec.n_params - idle
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == spec.tied_embeddings


@pytest.mark.parametrize("case", TINY)
def test_every_case_exercises_its_switches(tmp_path, case):
    """The tiny configs really contain what they are named for (else the tests above could
    pass on a structure that does not have it)."""
    spec = _spec(tmp_path, TINY[case])
    kinds = {layer.mask for layer in spec.layers}
    expected = {
        "mixtral-window": lambda: kinds == {"sliding"} and spec.n_experts == 4,
        "qwen3-dense-tied-sliding": lambda: kinds == {"full", "sliding"} and spec.qk_norm
        and spec.tied_embeddings,
        "qwen3-moe-sparse-step": lambda: spec.dense_layers == (0, 2, 3),
        "deepseek-v3-mtp": lambda: spec.mtp_layers == 1 and spec.router_score_bias
        and spec.dense_layers == (0,) and spec.shared_expert_ffn_size == 24,
        "kimi-k2-no-q-lora": lambda: spec.q_lora_rank is None and not spec.router_score_bias
        and spec.dense_layers == (),
        "gpt-oss-default-layers": lambda: spec.attention_pattern == ("sliding", "full")
        and spec.attention_sinks and spec.router_bias and spec.mlp_bias,
        "gpt-oss-listed-layers": lambda: spec.attention_pattern == ("full", "sliding",
                                                                     "sliding"),
        "llama4-interleaved": lambda: spec.dense_layers == (0, 2, 4, 6) and spec.attention_pattern
        == ("chunked", "chunked", "chunked", "full") and spec.shared_expert_ffn_size == 16,
        "llama4-text-lists": lambda: spec.dense_layers == (1,)
        and spec.attention_pattern == ("chunked", "full"),  # repeats: chunked, full, chunked
    }[case]
    assert expected()


@pytest.mark.parametrize("case", TINY)
def test_forward_flops_match_flop_counter(tmp_path, case):
    """FlopCounterMode over one forward = 2·B·T·matmul_params + the attention products over the
    full T x T square (explicit matmuls) + the MTP modules; every token runs exactly k experts
    plus the shared one."""
    spec = _spec(tmp_path, TINY[case])
    torch.manual_seed(0)
    model = build_hf_style_model(TINY[case])
    B, T = 2, 7
    with FlopCounterMode(display=False) as counter:
        logits, mtp = model(torch.randint(0, spec.vocab_size, (B, T)))
    assert logits.shape == (B, T, spec.vocab_size) and torch.isfinite(logits).all()
    square = 2 * B * spec.n_heads * T * T * (spec.head_size + spec.value_head_size)
    last = spec.layers[-1]
    mtp_flops = spec.mtp_layers * (2 * B * T * (2 * spec.d_model ** 2 + last.matmul_params
                                                + spec.vocab_size * spec.d_model) + square)
    expected = 2 * B * T * spec.matmul_params + spec.n_layers * square + mtp_flops
    assert counter.get_total_flops() == expected
    assert len(mtp) == spec.mtp_layers


@pytest.mark.parametrize("case", TINY)
@pytest.mark.parametrize("T", [1, 2, 5, 7, 12])
def test_attention_pairs_match_the_masks(tmp_path, case, T):
    """Each layer's score FLOPs per token x T = 2·H·(d_qk + d_v) x the True entries of the
    mask the torch module attends with (sliding windows, chunks, full)."""
    spec = _spec(tmp_path, TINY[case])
    model = build_hf_style_model(TINY[case], device="meta")
    per_token = spec.layer_flops_per_token(T)["attention_score_flops"]
    for layer, mask in zip(spec.layers, model.layer_masks(T)):
        pairs = int(mask.sum())
        assert keys_per_query(T, layer.mask, layer.window) * T == pytest.approx(pairs, abs=1e-9)
        per_pair = 2 * spec.n_heads * (spec.head_size + spec.value_head_size)
        assert per_token[layer.index] * T == pytest.approx(per_pair * pairs, rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("folder", sorted(p.name for p in HF_CONFIGS.iterdir() if p.is_dir()))
def test_published_configs_on_meta_device(folder):
    """The full-size modules of the published configs (meta device: no memory) have exactly
    the counted parameters."""
    config = json.loads((HF_CONFIGS / folder / "config.json").read_text())
    spec = spec_from_hf_config(HF_CONFIGS / folder)
    model = build_hf_style_model(config, device="meta", dtype=torch.bfloat16)
    assert sum(p.numel() for p in model.parameters()) == spec.n_params + spec.mtp_params
    measured = _measured(model)
    assert measured.pop("mtp") == spec.mtp_params
    assert measured == spec.param_counts()
