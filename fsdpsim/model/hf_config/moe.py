"""Readers of mixture-of-experts model types: ``mixtral``, ``qwen3_moe``, ``deepseek_v3`` and
``kimi_k2`` (the same architecture), ``gpt_oss``, ``llama4`` / ``llama4_text``.

Each follows the module list of the reference modelling code, so the counts are those of the
real checkpoints:

* Mixtral: Hugging Face ``MixtralSparseMoeBlock`` (bias-free router, 8 SwiGLU experts);
* Qwen3 MoE: ``Qwen3MoeSparseMoeBlock`` (128 experts of ``moe_intermediate_size``, no shared
  expert), QK-Norm, dense ``Qwen3MoeMLP`` on ``mlp_only_layers`` and off the
  ``decoder_sparse_step`` layers (Qwen3 technical report, arXiv:2505.09388, Sec. 2);
* DeepSeek-V3 / Kimi K2: ``modeling_deepseek.py`` of deepseek-ai/DeepSeek-V3 and
  ``transformers/models/deepseek_v3/modeling_deepseek_v3.py`` (commit 00b676f): MLA, dense MLP on
  the first ``first_k_dense_replace`` layers, routed + shared experts, the router's
  ``e_score_correction_bias`` for ``topk_method="noaux_tc"``, ``num_nextn_predict_layers`` MTP
  modules (DeepSeek-V3 report, arXiv:2412.19437, Sec. 2; Kimi K2 report, arXiv:2507.20534);
* gpt-oss: ``transformers/models/gpt_oss/modeling_gpt_oss.py`` (commit 00d4b3d): biased
  q/k/v/o, one sink logit per head, biased router, experts with biases, alternating
  sliding-window (128) and full layers (model card, arXiv:2508.10925, Sec. 2.1). Its clamped
  SwiGLU (``(up + 1) * gate * sigmoid(1.702 gate)``) has SwiGLU's three matrices;
* Llama 4: ``transformers/models/llama4/{configuration,modeling}_llama4.py`` (commit 000c33f):
  the text model of ``text_config``; a shared expert of ``intermediate_size`` in every MoE
  layer, dense MLPs of ``intermediate_size_mlp`` off ``moe_layers``, chunked attention on the
  RoPE layers and full attention on the NoPE ones (``no_rope_layers``). The vision encoder
  and projector of the multimodal checkpoints are not modelled.
"""

from __future__ import annotations

from typing import Any

from fsdpsim.model.hf_config.dense import (LLAMA_KEYS, attention_fields, llama_like,
                                     sliding_window_fields)
from fsdpsim.model.hf_config.reader import Config

LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def _dense_layers(n_layers: int, is_moe) -> tuple[int, ...]:
    return tuple(i for i in range(n_layers) if not is_moe(i))


def _mixtral(c: Config) -> dict[str, Any]:
    # MixtralSparseMoeBlock: gate = Linear(d, E, bias=False); MixtralConfig(sliding_window=None).
    return {**llama_like(c, attention_bias=False),
            "n_experts": c.get_int("num_local_experts", 8, required=False),
            "experts_per_token": c.get_int("num_experts_per_tok", 2, required=False),
            **sliding_window_fields(c, None)}


def _qwen3_moe(c: Config) -> dict[str, Any]:
    fields = llama_like(c, attention_bias=c.get_bool("attention_bias", False))
    n_layers = fields["n_layers"]
    if c.get_bool("use_sliding_window", False):
        c.reject_if("use_sliding_window", True, "false (every released Qwen3 MoE model uses "
                    "full attention in every layer)")
    key = "num_experts" if c.has("num_experts") or not c.has("num_local_experts") \
        else "num_local_experts"  # Qwen3MoeConfig maps one to the other
    step = c.get_int("decoder_sparse_step", 1, required=False)
    mlp_only = set(c.get_layer_indices("mlp_only_layers", n_layers) or [])
    dense = _dense_layers(n_layers, lambda i: i not in mlp_only and (i + 1) % step == 0)
    return {**fields, "qk_norm": True, "n_experts": c.get_int(key),
            "experts_per_token": c.get_int("num_experts_per_tok", 8, required=False),
            "expert_ffn_size": c.get_int("moe_intermediate_size"), "dense_layers": dense}


_TOPK_METHODS = ("noaux_tc", "greedy", "group_limited_greedy")


def _deepseek_v3(c: Config) -> dict[str, Any]:
    n_layers, n_heads = c.get_int("num_hidden_layers"), c.get_int("num_attention_heads")
    kv_heads = c.get_int("num_key_value_heads", n_heads, required=False)
    if kv_heads != n_heads:
        c.reject_if("num_key_value_heads", kv_heads, f"num_attention_heads ({n_heads}): MLA "
                    f"makes one key and value per query head")
    if c.get_bool("attention_bias", False):
        c.reject_if("attention_bias", True, "false (as in every DeepSeek-V3 and Kimi K2 model)")
    if "q_lora_rank" not in c.data:
        c.get_int("q_lora_rank")  # required; null means a full query projection (V2-Lite)
    # modeling_deepseek.py: layer i is MoE when i >= first_k_dense_replace and
    # i % moe_layer_freq == 0 (every released config has moe_layer_freq 1).
    first_dense = c.get_int("first_k_dense_replace")
    freq = c.get_int("moe_layer_freq", 1, required=False)
    dense = _dense_layers(n_layers, lambda i: i >= first_dense and i % freq == 0)
    topk = c.get_choice("topk_method", "noaux_tc", _TOPK_METHODS)
    expert = c.get_int("moe_intermediate_size")
    return dict(
        n_layers=n_layers, d_model=c.get_int("hidden_size"), n_heads=n_heads,
        ffn_size=c.get_int("intermediate_size"), ffn_kind="swiglu",
        vocab_size=c.get_int("vocab_size"),
        tied_embeddings=c.get_bool("tie_word_embeddings", False), position="rotary",
        max_seq_len=c.get_int("max_position_embeddings", 4096, required=False),
        norm="rmsnorm", norm_bias=False, qkv_bias=False, attn_out_bias=False, mlp_bias=False,
        attention_kind="mla", q_lora_rank=c.get_int("q_lora_rank", required=False),
        kv_lora_rank=c.get_int("kv_lora_rank"), qk_nope_head_dim=c.get_int("qk_nope_head_dim"),
        qk_rope_head_dim=c.get_int("qk_rope_head_dim"), v_head_dim=c.get_int("v_head_dim"),
        n_experts=c.get_int("n_routed_experts"),
        experts_per_token=c.get_int("num_experts_per_tok"), expert_ffn_size=expert,
        # DeepseekV3MoE: one shared MLP of moe_intermediate_size * n_shared_experts.
        shared_expert_ffn_size=expert * c.get_int("n_shared_experts"),
        router_score_bias=topk == "noaux_tc", dense_layers=dense,
        mtp_layers=c.get_int("num_nextn_predict_layers", 0, required=False),
        # group-limited routing (DeepseekV3TopkRouter: n_group, topk_group)
        router_groups=c.get_int("n_group", 1, required=False),
        router_group_top_k=c.get_int("topk_group", 1, required=False),
    )


def _gpt_oss(c: Config) -> dict[str, Any]:
    fields = llama_like(c, attention_bias=c.get_bool("attention_bias", True))
    n_layers = fields["n_layers"]
    fields["head_dim"] = c.get_int("head_dim", 64, required=False)   # GptOssConfig: 64
    k = c.get_int("num_experts_per_tok", 4, required=False)
    if c.has("experts_per_token") and c.get_int("experts_per_token") != k:
        c.reject_if("experts_per_token", c.data["experts_per_token"],
                    f"the same as num_experts_per_tok ({k})")
    # GptOssConfig: layer_types default alternates, sliding first.
    types = c.get_choices("layer_types", LAYER_TYPES[:2], n_layers) or [
        "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]
    window = (None if "sliding_window" in c.data and c.data["sliding_window"] is None
              else c.get_int("sliding_window", 128, required=False))  # GptOssConfig: 128
    return {**fields, "mlp_bias": True, "n_experts": c.get_int("num_local_experts"),
            "experts_per_token": k, "router_bias": True, "attention_sinks": True,
            **attention_fields(c, types, window)}


def _llama4(c: Config) -> dict[str, Any]:
    t = c.nested("text_config") if c.model_type == "llama4" else c
    fields = llama_like(t, attention_bias=t.get_bool("attention_bias", False))
    n_layers = fields["n_layers"]
    fields["head_dim"] = t.get_int("head_dim", 128, required=False)  # Llama4TextConfig: 128
    if not t.has("tie_word_embeddings"):
        fields["tied_embeddings"] = c.get_bool("tie_word_embeddings", False)
    # Llama4TextConfig.__post_init__: moe_layers default every interleave_moe_layer_step-th
    # layer; no_rope_layers default a NoPE layer every no_rope_layer_interval-th; RoPE layers
    # use chunked attention, NoPE layers full attention (unless layer_types says otherwise).
    step = t.get_int("interleave_moe_layer_step", 1, required=False)
    moe_layers = t.get_layer_indices("moe_layers", n_layers)
    moe = set(range(step - 1, n_layers, step) if moe_layers is None else moe_layers)
    dense = _dense_layers(n_layers, lambda i: i in moe)
    interval = t.get_int("no_rope_layer_interval", 4, required=False)
    rope = t.get_choices("no_rope_layers", (0, 1), n_layers) or [
        int((i + 1) % interval != 0) for i in range(n_layers)]
    types = t.get_choices("layer_types", LAYER_TYPES[::2], n_layers) or [
        "chunked_attention" if rope[i] else "full_attention" for i in range(n_layers)]
    chunk = (t.get_int("attention_chunk_size", 8192, required=False)
             if t.data.get("attention_chunk_size", 8192) is not None else None)
    dense_width = t.get_int("intermediate_size_mlp", None if dense else 16384,
                            required=bool(dense))
    expert = fields["ffn_size"]
    return {**fields, "ffn_size": dense_width, "n_experts": t.get_int("num_local_experts"),
            "experts_per_token": t.get_int("num_experts_per_tok", 1, required=False),
            "expert_ffn_size": expert, "shared_expert_ffn_size": expert,
            "dense_layers": dense, **attention_fields(t, types, None, chunk)}


_MLA_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
             "vocab_size", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
             "v_head_dim", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
             "moe_intermediate_size", "first_k_dense_replace")
READERS = {"mixtral": _mixtral, "qwen3_moe": _qwen3_moe, "deepseek_v3": _deepseek_v3,
           "kimi_k2": _deepseek_v3, "gpt_oss": _gpt_oss, "llama4": _llama4,
           "llama4_text": _llama4}
REQUIRED: dict[str, tuple[str, ...]] = {
    "mixtral": LLAMA_KEYS,
    "qwen3_moe": LLAMA_KEYS + ("num_experts", "moe_intermediate_size"),
    "deepseek_v3": _MLA_KEYS, "kimi_k2": _MLA_KEYS,
    "gpt_oss": LLAMA_KEYS + ("num_local_experts",),
    "llama4": tuple(f"text_config.{k}" for k in LLAMA_KEYS + ("num_local_experts",)),
    "llama4_text": LLAMA_KEYS + ("num_local_experts",),
}
