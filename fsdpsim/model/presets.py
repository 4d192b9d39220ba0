"""Named model presets and the single entry point :func:`get_model`.

Each family is built by one small function so a preset line reads like the table it comes from.

References
----------
[1] Brown et al., "Language Models are Few-Shot Learners", arXiv:2005.14165 (2020), Table 2.1.
[2] Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM", SC21, arXiv:2104.04473, Tables 1 and 2.
[3] Touvron et al., "Llama 2: Open Foundation and Fine-Tuned Chat Models", arXiv:2307.09288
    (2023), and the released ``config.json`` files (meta-llama/Llama-2-*-hf).
[4] Llama Team, "The Llama 3 Herd of Models", arXiv:2407.21783 (2024), Table 3.
[5] Jiang et al., "Mistral 7B", arXiv:2310.06825 (2023), Table 1; Jiang et al., "Mixtral of
    Experts", arXiv:2401.04088 (2024), Table 1.
[6] Qwen Team, "Qwen2.5 Technical Report", arXiv:2412.15115 (2024), Table 1, and the released
    ``config.json`` files (Qwen/Qwen2.5-7B, Qwen/Qwen2.5-72B).
[7] MosaicML llm-foundry, ``scripts/train/yamls/pretrain/mpt-*.yaml`` and
    ``scripts/train/benchmarking/README.md`` (github.com/mosaicml/llm-foundry).
[8] DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437 (2024), Sec. 4.2 and
    deepseek-ai/DeepSeek-V3 ``config.json``; Kimi Team, "Kimi K2", arXiv:2507.20534 (2025) and
    moonshotai/Kimi-K2-Instruct ``config.json``.
[9] Qwen Team, "Qwen3 Technical Report", arXiv:2505.09388 (2025), Tables 1-2, and
    Qwen/Qwen3-{8B,30B-A3B,235B-A22B} ``config.json``.
[10] OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", arXiv:2508.10925 (2025), Table 1, and
    openai/gpt-oss-{20b,120b} ``config.json``.
[11] Meta, Llama 4 model card and meta-llama/Llama-4-{Scout-17B-16E,Maverick-17B-128E}
    ``config.json`` (``text_config``; the vision encoder is not modelled).

The released ``config.json`` of each model after [8]-[11] is kept in tests/data/hf_configs/; the
tests check that each preset equals the spec imported from it.
"""

from __future__ import annotations


from fsdpsim.util.errors import ConfigError, shown, suggest
from fsdpsim.model.spec import ModelSpec


def _gpt(name: str, n_layers: int, d_model: int, n_heads: int, *, vocab_size: int,
         max_seq_len: int = 2048) -> ModelSpec:
    """GPT-2/3-style block: LayerNorm with bias, GELU MLP of width 4d, every linear with a
    bias, learned positions, tied embeddings (Brown et al. 2020 [1], Sec. 2.1)."""
    return ModelSpec(
        name=name, n_layers=n_layers, d_model=d_model, n_heads=n_heads,
        ffn_size=4 * d_model, ffn_kind="gelu", vocab_size=vocab_size, tied_embeddings=True,
        position="learned", max_seq_len=max_seq_len, norm="layernorm", norm_bias=True,
        qkv_bias=True, attn_out_bias=True, mlp_bias=True,
    )


def _llama(name: str, n_layers: int, d_model: int, n_heads: int, n_kv_heads: int,
           ffn_size: int, *, vocab_size: int, max_seq_len: int, tied: bool = False,
           qkv_bias: bool = False, n_experts: int = 0, experts_per_token: int = 0) -> ModelSpec:
    """Llama-style block: RMSNorm, SwiGLU MLP, rotary positions, no linear biases except
    optional q/k/v biases (Qwen2), optional top-k MoE (Mixtral)."""
    return ModelSpec(
        name=name, n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads,
        ffn_size=ffn_size, ffn_kind="swiglu", vocab_size=vocab_size, tied_embeddings=tied,
        position="rotary", max_seq_len=max_seq_len, norm="rmsnorm", norm_bias=False,
        qkv_bias=qkv_bias, attn_out_bias=False, mlp_bias=False,
        n_experts=n_experts, experts_per_token=experts_per_token,
    )


def _qwen3_moe(name: str, n_layers: int, d_model: int, n_heads: int, expert: int, *,
               dense_ffn: int) -> ModelSpec:
    """Qwen3 MoE [9]: 128 experts top-8 of width ``expert``, no shared expert, QK-Norm on heads
    of 128, 4 KV heads, vocab 151936, untied, context 40960."""
    return ModelSpec(
        name=name, n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=4,
        head_dim=128, ffn_size=dense_ffn, ffn_kind="swiglu", vocab_size=151936,
        tied_embeddings=False, position="rotary", max_seq_len=40960, norm="rmsnorm",
        norm_bias=False, qkv_bias=False, attn_out_bias=False, mlp_bias=False, qk_norm=True,
        n_experts=128, experts_per_token=8, expert_ffn_size=expert,
    )


def _deepseek_v3(name: str, n_heads: int, n_experts: int, first_dense: int, *, vocab_size: int,
                 max_seq_len: int, mtp_layers: int, groups: int = 1,
                 group_top_k: int = 1) -> ModelSpec:
    """DeepSeek-V3 architecture [8] (also Kimi K2): 61 layers of width 7168, MLA (q rank 1536,
    kv rank 512, heads of 128 + 64 rotary, values of 128), the first layers dense (18432), the
    others top-8 of ``n_experts`` experts of 2048 plus one shared, score-bias router, routing
    limited to ``group_top_k`` of ``groups`` expert groups (``n_group``, ``topk_group``)."""
    return ModelSpec(
        name=name, n_layers=61, d_model=7168, n_heads=n_heads, ffn_size=18432,
        ffn_kind="swiglu", vocab_size=vocab_size, tied_embeddings=False, position="rotary",
        max_seq_len=max_seq_len, norm="rmsnorm", norm_bias=False, qkv_bias=False,
        attn_out_bias=False, mlp_bias=False, attention_kind="mla", q_lora_rank=1536,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        n_experts=n_experts, experts_per_token=8, expert_ffn_size=2048,
        shared_expert_ffn_size=2048, router_score_bias=True,
        dense_layers=tuple(range(first_dense)), mtp_layers=mtp_layers,
        router_groups=groups, router_group_top_k=group_top_k,
    )


def _gpt_oss(name: str, n_layers: int, n_experts: int) -> ModelSpec:
    """gpt-oss [10]: width 2880, 64 query / 8 KV heads of 64 with biases and sinks, banded
    window of 128 on every other layer (sliding first), experts of 2880 with biases, top-4,
    biased router, vocab 201088, untied, context 131072."""
    return ModelSpec(
        name=name, n_layers=n_layers, d_model=2880, n_heads=64, n_kv_heads=8, head_dim=64,
        ffn_size=2880, ffn_kind="swiglu", vocab_size=201088, tied_embeddings=False,
        position="rotary", max_seq_len=131072, norm="rmsnorm", norm_bias=False, qkv_bias=True,
        attn_out_bias=True, mlp_bias=True, attention_sinks=True,
        attention_pattern=("sliding", "full"), sliding_window=128,
        n_experts=n_experts, experts_per_token=4, router_bias=True,
    )


def _llama4(name: str, n_experts: int, moe_step: int, *, max_seq_len: int) -> ModelSpec:
    """Llama 4 text model [11]: 48 layers of width 5120, 40 query / 8 KV heads of 128, chunked
    attention (8192) on three of four layers, full on the fourth; MoE layers every
    ``moe_step``-th layer with top-1 of ``n_experts`` experts of 8192 plus a shared one,
    dense layers of 16384; vocab 202048, untied."""
    return ModelSpec(
        name=name, n_layers=48, d_model=5120, n_heads=40, n_kv_heads=8, head_dim=128,
        ffn_size=16384, ffn_kind="swiglu", vocab_size=202048, tied_embeddings=False,
        position="rotary", max_seq_len=max_seq_len, norm="rmsnorm", norm_bias=False,
        qkv_bias=False, attn_out_bias=False, mlp_bias=False,
        attention_pattern=("chunked", "chunked", "chunked", "full"), attention_chunk_size=8192,
        n_experts=n_experts, experts_per_token=1, expert_ffn_size=8192,
        shared_expert_ffn_size=8192,
        dense_layers=tuple(i for i in range(48) if (i + 1) % moe_step != 0),
    )


def _build() -> dict[str, ModelSpec]:
    specs: list[ModelSpec] = []

    # GPT-3, Brown et al. 2020 [1] Table 2.1 (n_layers, d_model, n_heads); vocab 50257, n_ctx
    # 2048. The table lists GPT-3 XL as 24 heads of 128 and 13B as d_model 5140, neither of
    # which multiplies out to d_model; we keep d_head = 128 (16 heads for 1.3B) and use 5120
    # for 13B, which reproduce the quoted 1.3B and 13B totals.
    gpt3 = [("125m", 12, 768, 12), ("350m", 24, 1024, 16), ("760m", 24, 1536, 16),
            ("1.3b", 24, 2048, 16), ("2.7b", 32, 2560, 32), ("6.7b", 32, 4096, 32),
            ("13b", 40, 5120, 40), ("175b", 96, 12288, 96)]
    specs += [_gpt(f"gpt3-{size}", L, d, h, vocab_size=50257) for size, L, d, h in gpt3]

    # Megatron-LM GPT models, Narayanan et al. 2021 [2] Table 1 (+ Table 2's 174.6B):
    # vocab 51200, sequence 2048, same block as GPT-3.
    megatron = [("1.7b", 24, 2304, 24), ("3.6b", 30, 3072, 32), ("7.5b", 36, 4096, 32),
                ("18.4b", 40, 6144, 48), ("39.1b", 48, 8192, 64), ("76.1b", 60, 10240, 80),
                ("145.6b", 80, 12288, 96), ("174.6b", 96, 12288, 96),
                ("310.1b", 96, 16384, 128), ("529.6b", 105, 20480, 128),
                ("1t", 128, 25600, 160)]
    specs += [_gpt(f"gpt-{size}", L, d, h, vocab_size=51200) for size, L, d, h in megatron]

    # Llama 2 [3]: vocab 32000, context 4096; 70B uses 8 KV heads.
    specs += [
        _llama("llama2-7b", 32, 4096, 32, 32, 11008, vocab_size=32000, max_seq_len=4096),
        _llama("llama2-13b", 40, 5120, 40, 40, 13824, vocab_size=32000, max_seq_len=4096),
        _llama("llama2-70b", 80, 8192, 64, 8, 28672, vocab_size=32000, max_seq_len=4096),
    ]
    # Llama 3 / 3.1 [4] Table 3: vocab 128256, 8 KV heads, untied. 3.1 is the same
    # architecture with a 128K context (rotary, so no parameter changes).
    llama3 = [("8b", 32, 4096, 32, 14336), ("70b", 80, 8192, 64, 28672),
              ("405b", 126, 16384, 128, 53248)]
    for version, ctx in (("llama3", 8192), ("llama3.1", 131072)):
        specs += [_llama(f"{version}-{size}", L, d, h, 8, f, vocab_size=128256, max_seq_len=ctx)
                  for size, L, d, h, f in llama3]

    # Mistral 7B and Mixtral 8x7B [5]: vocab 32000, 8 KV heads, untied; Mixtral 8 experts top-2.
    specs += [
        _llama("mistral-7b", 32, 4096, 32, 8, 14336, vocab_size=32000, max_seq_len=32768),
        _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, vocab_size=32000, max_seq_len=32768,
               n_experts=8, experts_per_token=2),
    ]
    # Qwen2.5 [6]: q/k/v biases, vocab 152064; 7B and 72B are untied (only <= 3B tie).
    specs += [
        _llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, vocab_size=152064, max_seq_len=32768,
               qkv_bias=True),
        _llama("qwen2.5-72b", 80, 8192, 64, 8, 29568, vocab_size=152064, max_seq_len=32768,
               qkv_bias=True),
    ]

    # Mixtral 8x22B [5]: 56 layers, 48 heads, 8 KV heads, vocab 32000 (mistral-community
    # /Mixtral-8x22B-v0.1), context 65536.
    specs.append(_llama("mixtral-8x22b", 56, 6144, 48, 8, 16384, vocab_size=32000,
                        max_seq_len=65536, n_experts=8, experts_per_token=2))
    # Qwen3 [9]: dense 8B (QK-Norm, heads of 128) and the two MoE models.
    specs.append(ModelSpec(
        name="qwen3-8b", n_layers=36, d_model=4096, n_heads=32, n_kv_heads=8, head_dim=128,
        ffn_size=12288, ffn_kind="swiglu", vocab_size=151936, tied_embeddings=False,
        position="rotary", max_seq_len=40960, norm="rmsnorm", norm_bias=False, qkv_bias=False,
        attn_out_bias=False, mlp_bias=False, qk_norm=True))
    specs += [_qwen3_moe("qwen3-30b-a3b", 48, 2048, 32, 768, dense_ffn=6144),
              _qwen3_moe("qwen3-235b-a22b", 94, 4096, 64, 1536, dense_ffn=12288)]
    # DeepSeek-V3 [8]: 128 heads, 256 experts, 3 dense layers, vocab 129280, one MTP module;
    # Kimi K2: the same architecture with 64 heads, 384 experts, 1 dense layer, vocab 163840.
    specs += [_deepseek_v3("deepseek-v3", 128, 256, 3, vocab_size=129280, max_seq_len=163840,
                           mtp_layers=1, groups=8, group_top_k=4),
              _deepseek_v3("kimi-k2", 64, 384, 1, vocab_size=163840, max_seq_len=131072,
                           mtp_layers=0)]
    specs += [_gpt_oss("gpt-oss-20b", 24, 32), _gpt_oss("gpt-oss-120b", 36, 128)]
    specs += [_llama4("llama4-scout", 16, 1, max_seq_len=10485760),
              _llama4("llama4-maverick", 128, 2, max_seq_len=1048576)]

    # MPT as trained in llm-foundry's benchmark table [7]: the pretrain yamls set d_model,
    # n_heads, n_layers, expansion_ratio 4 and vocab 50368 and leave MPTConfig's defaults
    # no_bias=False, learned_pos_emb=True, alibi=False. So every linear and LayerNorm has a
    # bias and the learned position table has max_seq_len (= the run's sequence length)
    # rows; the table's n_params are 12*L*d^2 + 13*L*d + (V + s)*d + 2*d exactly. (The
    # released mosaicml/mpt-7b checkpoint differs: no_bias, ALiBi, vocab 50432.)
    mpt = [("125m", 12, 768, 12), ("350m", 24, 1024, 16), ("760m", 24, 1536, 12),
           ("1b", 24, 2048, 16), ("3b", 32, 2560, 20), ("7b", 32, 4096, 32),
           ("13b", 40, 5120, 40), ("30b", 48, 7168, 56), ("70b", 80, 8192, 64)]
    specs += [_gpt(f"mpt-{size}", L, d, h, vocab_size=50368) for size, L, d, h in mpt]

    registry = {spec.name: spec for spec in specs}
    assert len(registry) == len(specs), "duplicate preset id"
    assert all(k == k.lower() for k in registry), "preset ids are lowercase"
    return registry


#: All presets by lowercase id, in family order.
PRESETS: dict[str, ModelSpec] = _build()

#: Other spellings accepted by :func:`get_model`.
ALIASES: dict[str, str] = {
    "gpt-1008b": "gpt-1t",
    "gpt-1008.0b": "gpt-1t",
    "gpt-175b": "gpt-174.6b",
    "gpt-530b": "gpt-529.6b",
    "llama-2-7b": "llama2-7b",
    "llama-2-13b": "llama2-13b",
    "llama-2-70b": "llama2-70b",
    "kimi-k2-instruct": "kimi-k2",
    "llama4-scout-17b-16e": "llama4-scout",
    "llama4-maverick-17b-128e": "llama4-maverick",
}


def list_models() -> list[str]:
    """Preset ids in family order (GPT-3, Megatron GPT, Llama, Mistral, Qwen, MoE families,
    MPT)."""
    return list(PRESETS)


def _looks_like_path(text: str) -> bool:
    from fsdpsim.util.files import looks_like_file

    return text.endswith(".json") or "/" in text or "\\" in text or looks_like_file(text)


#: Ids of the size ladder (:mod:`fsdpsim.model.ladder`): ``ladder-<size>``, as sweep names them.
LADDER_PREFIX = "ladder-"


def get_model(name_or_path: str) -> ModelSpec:
    """The preset with id ``name_or_path`` (case-insensitive), a size-ladder model by the id
    ``sweep --model-sizes`` prints (``ladder-7b``), or a spec imported from a Hugging Face
    ``config.json`` (a file path, or a directory that holds one).

    Raises
    ------
    ConfigError
        Unknown id (with the closest preset ids), or an unreadable / unsupported config file.
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ConfigError(f"model {shown(name_or_path)} must be a preset id or a config.json path")
    key = name_or_path.strip().lower()
    key = ALIASES.get(key, key)
    if key in PRESETS:
        return PRESETS[key]
    if key.startswith(LADDER_PREFIX) and not _looks_like_path(name_or_path):
        # the id `sweep --model-sizes` prints (ladder-7b): the same ladder model again
        from fsdpsim.model.ladder import ladder_model
        from fsdpsim.util.numbers import MODEL_SIZE, read_number

        size = read_number(key[len(LADDER_PREFIX):], f"model {shown(name_or_path)}", MODEL_SIZE)
        return ladder_model(size)
    if _looks_like_path(name_or_path):
        from fsdpsim.model.hf_config import spec_from_hf_config

        return spec_from_hf_config(name_or_path)
    raise ConfigError(
        f"unknown model {shown(name_or_path)}{suggest(key, list(PRESETS) + list(ALIASES))}; give a "
        f"preset id or a path to a Hugging Face config.json (see `fsdpsim model list`)"
    )
