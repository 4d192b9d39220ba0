"""Readers of dense model types: ``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``gpt2``,
``gpt_neox``, ``mpt``, ``nemotron``.

Field meanings and defaults follow Hugging Face ``transformers`` (``LlamaConfig``,
``MistralConfig``, ``Qwen2Config``, ``Qwen3Config``, ``GPT2Config``, ``GPTNeoXConfig``,
``NemotronConfig`` and their modeling files) and, for ``mpt``, MosaicML llm-foundry's
``MPTConfig``. Each reader returns the
keyword arguments of :class:`~fsdpsim.model.spec.ModelSpec` (all but ``name``).
"""

from __future__ import annotations

from typing import Any

from fsdpsim.util.errors import ConfigError, suggest
from fsdpsim.model.hf_config.reader import Config, period
from fsdpsim.util.numbers import Rule, read_number

EXPANSION_RATIO = Rule(0.001, 1024)


# ---------------------------------------------------------------------------- per model type
def llama_like(c: Config, *, attention_bias: bool, qkv_bias: bool | None = None
               ) -> dict[str, Any]:
    """Llama, Mistral, Mixtral, Qwen2/3 and their MoE versions: RMSNorm, SwiGLU MLP, rotary,
    untied by default."""
    fields: dict[str, Any] = dict(
        n_layers=c.get_int("num_hidden_layers"),
        d_model=c.get_int("hidden_size"),
        n_heads=c.get_int("num_attention_heads"),
        n_kv_heads=c.get_int("num_key_value_heads", required=False),
        head_dim=c.get_int("head_dim", required=False),
        ffn_size=c.get_int("intermediate_size"),
        ffn_kind="swiglu",
        vocab_size=c.get_int("vocab_size"),
        tied_embeddings=c.get_bool("tie_word_embeddings", False),
        position="rotary",
        max_seq_len=c.get_int("max_position_embeddings", 2048, required=False),
        norm="rmsnorm",
        norm_bias=False,
        qkv_bias=attention_bias if qkv_bias is None else qkv_bias,
        attn_out_bias=attention_bias,
        mlp_bias=False,
    )
    return fields


def _llama(c: Config) -> dict[str, Any]:
    # LlamaConfig: attention_bias covers q, k, v and o; mlp_bias covers gate, up and down.
    fields = llama_like(c, attention_bias=c.get_bool("attention_bias", False))
    fields["mlp_bias"] = c.get_bool("mlp_bias", False)
    return fields


def sliding_window_fields(c: Config, default: int | None) -> dict[str, Any]:
    """Mistral / Mixtral: ``sliding_window`` (MistralConfig's default 4,096, MixtralConfig's
    None) applies to every layer; null means full attention."""
    if "sliding_window" in c.data and c.data["sliding_window"] is None:
        return {}
    window = c.get_int("sliding_window", default, required=False)
    return {} if window is None else dict(attention_pattern=("sliding",), sliding_window=window)


def qwen_window_fields(c: Config, n_layers: int) -> dict[str, Any]:
    """Qwen2 / Qwen3 (``Qwen3Config.__post_init__``): with ``use_sliding_window`` the layers
    from ``max_window_layers`` on use ``sliding_window``; ``layer_types``, when given, decides
    per layer. Released Qwen2.5 / Qwen3 configs use full attention everywhere."""
    use = c.get_bool("use_sliding_window", False)
    window = c.get_int("sliding_window", 4096, required=False) if use else None
    types = c.get_choices("layer_types", ("full_attention", "sliding_attention"), n_layers)
    if types is None:
        first = c.get_int("max_window_layers", 28, required=False)
        types = ["sliding_attention" if window is not None and i >= first else "full_attention"
                 for i in range(n_layers)]
    return attention_fields(c, types, window)


def attention_fields(c: Config, layer_types: list[str], window: int | None,
                     chunk: int | None = None) -> dict[str, Any]:
    """ModelSpec fields for Hugging Face ``layer_types`` (``full_attention``,
    ``sliding_attention``, ``chunked_attention``), as a repeating pattern."""
    masks = [{"full_attention": "full", "sliding_attention": "sliding",
              "chunked_attention": "chunked"}[t] for t in layer_types]
    if "sliding" in masks and window is None:
        c.reject_if("sliding_window", None, "a window in tokens for the sliding_attention layers")
    if "chunked" in masks and chunk is None:
        c.reject_if("attention_chunk_size", None, "a chunk in tokens for the chunked layers")
    return dict(attention_pattern=period(masks),
                sliding_window=window if "sliding" in masks else None,
                attention_chunk_size=chunk if "chunked" in masks else None)


def _mistral(c: Config) -> dict[str, Any]:
    # MistralAttention: all projections bias=False; MistralConfig(sliding_window=4096).
    return {**llama_like(c, attention_bias=False), **sliding_window_fields(c, 4096)}


def _qwen2(c: Config) -> dict[str, Any]:
    fields = llama_like(c, attention_bias=False, qkv_bias=True)  # q/k/v biased, o not
    return {**fields, **qwen_window_fields(c, fields["n_layers"])}


def _qwen3(c: Config) -> dict[str, Any]:
    # Qwen3Attention: attention_bias on q, k, v and o (default False); q_norm and k_norm are
    # RMSNorm(head_dim) on every head (Qwen3 report, Sec. 2: QK-Norm replaces QKV bias).
    fields = llama_like(c, attention_bias=c.get_bool("attention_bias", False))
    fields["head_dim"] = c.get_int("head_dim", 128, required=False)  # Qwen3Config: 128
    return {**fields, "qk_norm": True, **qwen_window_fields(c, fields["n_layers"])}


def _gpt2(c: Config) -> dict[str, Any]:
    d_model = c.get_int("n_embd")
    return dict(
        n_layers=c.get_int("n_layer"),
        d_model=d_model,
        n_heads=c.get_int("n_head"),
        ffn_size=c.get_int("n_inner", 4 * d_model, required=False),  # None -> 4 * n_embd
        ffn_kind="gelu",
        vocab_size=c.get_int("vocab_size"),
        tied_embeddings=c.get_bool("tie_word_embeddings", True),
        position="learned",
        max_seq_len=c.get_int("n_positions", 1024, required=False),
        norm="layernorm", norm_bias=True,
        qkv_bias=True, attn_out_bias=True, mlp_bias=True,  # Conv1D layers all have biases
    )


def _gpt_neox(c: Config) -> dict[str, Any]:
    # Partial rotary (rotary_pct) changes no parameter count. attention_bias covers the fused
    # query_key_value and dense projections; the MLP always has biases; embed_out has none.
    attention_bias = c.get_bool("attention_bias", True)
    return dict(
        n_layers=c.get_int("num_hidden_layers"),
        d_model=c.get_int("hidden_size"),
        n_heads=c.get_int("num_attention_heads"),
        ffn_size=c.get_int("intermediate_size"),
        ffn_kind="gelu",
        vocab_size=c.get_int("vocab_size"),
        tied_embeddings=c.get_bool("tie_word_embeddings", False),
        position="rotary",
        max_seq_len=c.get_int("max_position_embeddings", 2048, required=False),
        norm="layernorm", norm_bias=True,
        qkv_bias=attention_bias, attn_out_bias=attention_bias, mlp_bias=True,
    )


def _nemotron(c: Config) -> dict[str, Any]:
    # transformers NemotronConfig / modeling_nemotron (Nemotron-4, Minitron): NemotronMLP is
    # up_proj -> relu2 (squared ReLU) -> down_proj, no gate (two matrices: "gelu" kind);
    # NemotronLayerNorm1P is nn.LayerNorm (weight + 1 applied, bias=True) before attention,
    # before the MLP and after the last layer; partial rotary (partial_rotary_factor) has no
    # parameters; attention_bias covers q, k, v and o, mlp_bias up and down (both default
    # False); tie_word_embeddings defaults to False; head_dim defaults to hidden/heads.
    attention_bias = c.get_bool("attention_bias", False)
    fields = llama_like(c, attention_bias=attention_bias)  # the same heads, widths, rotary
    fields.update(
        ffn_kind="gelu",
        max_seq_len=c.get_int("max_position_embeddings", 4096, required=False),
        norm="layernorm", norm_bias=True,
        mlp_bias=c.get_bool("mlp_bias", False),
    )
    return fields


_MPT_NORMS = {"layernorm": "layernorm", "low_precision_layernorm": "layernorm",
              "rmsnorm": "rmsnorm", "low_precision_rmsnorm": "rmsnorm",
              "triton_rmsnorm": "rmsnorm"}
_MPT_FFNS = {"mptmlp": "gelu", "mptglu": "swiglu"}


def _mpt(c: Config) -> dict[str, Any]:
    # llm-foundry MPTConfig: no_bias (default False) removes every bias, LayerNorm's too;
    # alibi or rope switch learned_pos_emb off; fused Wqkv has the same count as q, k, v.
    d_model = c.get_int("d_model")
    attn = c.get_dict("attn_config")
    ffn = c.get_dict("ffn_config")
    no_bias = c.get_bool("no_bias", False)
    if c.get_bool("alibi", False, data=attn):
        position = "alibi"
    elif c.get_bool("rope", False, data=attn):
        position = "rotary"
    elif c.get_bool("learned_pos_emb", True):
        position = "learned"
    else:
        position = "none"

    n_heads = c.get_int("n_heads")
    attn_type = c.get_text("attn_type", "multihead_attention", data=attn)
    kv_heads = {"multihead_attention": n_heads, "multiquery_attention": 1}.get(attn_type)
    if attn_type == "grouped_query_attention":
        kv_heads = c.get_int("kv_n_heads", data=attn)
    if kv_heads is None:
        raise ConfigError(
            f"{c.path}: attn_config.attn_type {attn_type!r} is not one of: multihead_attention, "
            f"multiquery_attention, grouped_query_attention"
        )
    norm_type = c.get_text("norm_type", "low_precision_layernorm")
    if norm_type not in _MPT_NORMS:
        raise ConfigError(
            f"{c.path}: norm_type {norm_type!r} is not one of: {', '.join(_MPT_NORMS)}"
            f"{suggest(str(norm_type), _MPT_NORMS)}"
        )
    ffn_type = c.get_text("ffn_type", "mptmlp", data=ffn)
    if ffn_type not in _MPT_FFNS:
        raise ConfigError(
            f"{c.path}: ffn_config.ffn_type {ffn_type!r} is not one of: {', '.join(_MPT_FFNS)}"
        )
    ratio = read_number(c.data.get("expansion_ratio", 4), c.where("expansion_ratio"),
                        EXPANSION_RATIO, text=False)
    ffn_size = c.get_int("ffn_hidden_size", max(1, int(d_model * ratio)), required=False,
                         data=ffn)
    norm = _MPT_NORMS[norm_type]
    return dict(
        n_layers=c.get_int("n_layers"),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=kv_heads,
        ffn_size=ffn_size,
        ffn_kind=_MPT_FFNS[ffn_type],
        vocab_size=c.get_int("vocab_size"),
        tied_embeddings=c.get_bool("tie_word_embeddings", True),
        position=position,
        max_seq_len=c.get_int("max_seq_len", 2048, required=False),
        norm=norm, norm_bias=norm == "layernorm" and not no_bias,
        qkv_bias=not no_bias, attn_out_bias=not no_bias, mlp_bias=not no_bias,
    )


#: Keys without which each model type cannot be counted.
LLAMA_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "vocab_size")
READERS = {"llama": _llama, "mistral": _mistral, "qwen2": _qwen2, "qwen3": _qwen3,
           "gpt2": _gpt2, "gpt_neox": _gpt_neox, "mpt": _mpt, "nemotron": _nemotron}
REQUIRED: dict[str, tuple[str, ...]] = {
    "llama": LLAMA_KEYS, "mistral": LLAMA_KEYS, "qwen2": LLAMA_KEYS, "qwen3": LLAMA_KEYS,
    "gpt2": ("n_embd", "n_layer", "n_head", "vocab_size"),
    "gpt_neox": LLAMA_KEYS, "nemotron": LLAMA_KEYS,
    "mpt": ("d_model", "n_heads", "n_layers", "vocab_size"),
}
