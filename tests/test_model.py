"""Model specs, presets and HF config import: exact counts, no torch needed."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdpsim.model import layers as model_layers
from fsdpsim.util.errors import ConfigError
from fsdpsim.model.hf_config import SUPPORTED_MODEL_TYPES, spec_from_hf_config
from fsdpsim.model.spec import COMPONENTS, ModelSpec
from fsdpsim.model.presets import ALIASES, PRESETS, get_model, list_models

CALIBRATION = (Path(__file__).resolve().parents[1]
               / "validation/data/published_calibration.csv")


def _rows(source_key: str) -> list[dict[str, str]]:
    with CALIBRATION.open(newline="") as f:
        return [r for r in csv.DictReader(f) if r["source_key"] == source_key]


def tiny(**overrides) -> ModelSpec:
    """A small valid spec; tests override what they exercise."""
    fields = dict(
        name="tiny", n_layers=2, d_model=64, n_heads=4, ffn_size=128, ffn_kind="gelu",
        vocab_size=100, tied_embeddings=True, position="learned", max_seq_len=32,
        norm="layernorm", norm_bias=True, qkv_bias=True, attn_out_bias=True, mlp_bias=True,
    )
    fields.update(overrides)
    return ModelSpec(**fields)


# ---------------------------------------------------------------------------- exact counts
# Totals of the released checkpoints (sum of tensor sizes in the Hugging Face safetensors
# index / model cards), each re-derived by hand below for at least one model.
EXACT = {
    "llama2-7b": 6_738_415_616,       # meta-llama/Llama-2-7b-hf
    "llama2-13b": 13_015_864_320,     # meta-llama/Llama-2-13b-hf
    "llama2-70b": 68_976_648_192,     # meta-llama/Llama-2-70b-hf
    "llama3-8b": 8_030_261_248,       # meta-llama/Meta-Llama-3-8B
    "llama3.1-8b": 8_030_261_248,     # same architecture, longer context
    "llama3-70b": 70_553_706_496,     # meta-llama/Meta-Llama-3-70B
    "llama3.1-405b": 405_853_388_800,  # meta-llama/Llama-3.1-405B
    "mistral-7b": 7_241_732_096,      # mistralai/Mistral-7B-v0.1
    "mixtral-8x7b": 46_702_792_704,   # mistralai/Mixtral-8x7B-v0.1
    "qwen2.5-7b": 7_615_616_512,      # Qwen/Qwen2.5-7B (model card: 7.61B)
}


@pytest.mark.parametrize("preset, expected", EXACT.items())
def test_released_checkpoint_totals(preset, expected):
    assert get_model(preset).n_params == expected


def test_llama3_8b_by_hand():
    # d=4096, 32 q heads, 8 kv heads of 128, SwiGLU 14336, V=128256, untied, RMSNorm.
    d, kv, f, V, L = 4096, 8 * 128, 14336, 128256, 32
    attention = 2 * d * d + 2 * d * kv  # Wq, Wo + Wk, Wv
    mlp = 3 * d * f
    norms = 2 * d
    expected = L * (attention + mlp + norms) + 2 * V * d + d
    spec = get_model("llama3-8b")
    assert expected == 8_030_261_248 == spec.n_params
    assert spec.block_params == attention + mlp + norms == 218_112_000
    assert spec.param_counts() == {
        "embedding": V * d, "position_embedding": 0, "attention": L * attention,
        "mlp": L * mlp, "norms": (2 * L + 1) * d, "lm_head": V * d,
    }
    # matmul weights: everything but the embedding lookup and the norm scales.
    assert spec.matmul_params == expected - V * d - (2 * L + 1) * d


def test_qwen25_7b_by_hand_and_non_embedding():
    # q/k/v biases: 3584 + 2 * 512 per layer; model card: 6.53B non-embedding parameters.
    spec = get_model("qwen2.5-7b")
    d, kv = 3584, 4 * 128
    assert spec.param_counts()["attention"] == 28 * (2 * d * d + 2 * d * kv + d + 2 * kv)
    counts = spec.param_counts()
    non_embedding = spec.n_params - counts["embedding"] - counts["lm_head"]
    assert round(non_embedding / 1e9, 2) == 6.53
    assert not spec.tied_embeddings and not get_model("qwen2.5-72b").tied_embeddings
    assert round(get_model("qwen2.5-72b").n_params / 1e9, 1) == 72.7  # model card: 72.7B


def test_mixtral_active_params():
    # Jiang et al. 2024: 47B total, 13B active (12.9B) with 2 of 8 experts per token.
    spec = get_model("mixtral-8x7b")
    expert = 3 * 4096 * 14336
    assert spec.n_params - spec.active_params == 32 * 6 * expert
    assert spec.active_params == 12_879_925_248
    assert spec.active_ffn_size == 2 * 14336 and spec.is_moe
    assert get_model("mistral-7b").active_params == get_model("mistral-7b").n_params


def test_gpt3_175b_kaplan_formula():
    # 12*L*d^2 + 13*L*d per the block (Kaplan et al. 2020; Narayanan et al. 2021 Eq. 2),
    # plus (V + s)*d embeddings and the final LayerNorm: 174.6e9 (SC21 Table 2 quotes 174.6B).
    spec = get_model("gpt3-175b")
    L, d, V, s = 96, 12288, 50257, 2048
    assert spec.block_params == 12 * d * d + 13 * d
    assert spec.n_params == 12 * L * d * d + 13 * L * d + (V + s) * d + 2 * d == 174_604_259_328
    assert spec.matmul_params == 12 * L * d * d + V * d


@pytest.mark.parametrize("preset, quoted", [
    ("gpt3-125m", 125e6), ("gpt3-350m", 350e6), ("gpt3-760m", 760e6), ("gpt3-1.3b", 1.3e9),
    ("gpt3-2.7b", 2.7e9), ("gpt3-6.7b", 6.7e9), ("gpt3-13b", 13e9), ("gpt3-175b", 175e9),
])
def test_gpt3_table_2_1(preset, quoted):
    """Brown et al. 2020, Table 2.1 (n_params column is rounded to the model name)."""
    assert get_model(preset).n_params == pytest.approx(quoted, rel=0.02)


def test_megatron_sc21_sizes_round_to_table():
    """Narayanan et al. 2021 Tables 1 and 2 quote sizes to 0.1B; every row's L, h, heads and
    vocab must match the preset and its count must round to the quoted size."""
    checked = 0
    for row in _rows("megatron_sc21"):
        if not row["model"].startswith("GPT-") or row["model"] == "GPT-3 175B":
            continue  # "GPT-3 175B" is the nominal name of the 174.6B model
        size = row["model"].removeprefix("GPT-").lower()
        spec = get_model("gpt-1t" if size == "1008.0b" else f"gpt-{size}")
        assert (spec.n_layers, spec.d_model, spec.n_heads, spec.vocab_size) == (
            int(row["n_layers"]), int(row["d_model"]), int(row["n_heads"]), int(row["vocab"]))
        assert spec.ffn_size == int(row["ffn_size"])
        n_params = spec.with_seq_len(int(row["seq_len"])).n_params
        assert abs(n_params - float(row["n_params"])) <= 0.05e9
        checked += 1
    assert checked >= 20


def test_mpt_benchmark_rows_exact():
    """Every llm-foundry benchmark row: n_params exactly, at the row's sequence length."""
    rows = _rows("mosaicml_llmfoundry")
    assert len(rows) == 139
    for row in rows:
        spec = get_model(row["model"].lower()).with_seq_len(int(row["seq_len"]))
        assert (spec.n_layers, spec.d_model, spec.n_heads, spec.ffn_size, spec.vocab_size) == (
            int(row["n_layers"]), int(row["d_model"]), int(row["n_heads"]),
            int(row["ffn_size"]), int(row["vocab"]))
        assert spec.n_params == int(row["n_params"]), row["id"]


def test_mpt_convention_by_hand():
    # MPT-7B at 2048: all biases (no_bias=False) and LayerNorm biases, learned positions.
    L, d, V, s = 32, 4096, 50368, 2048
    assert get_model("mpt-7b").n_params == 12 * L * d * d + 13 * L * d + (V + s) * d + 2 * d
    assert get_model("mpt-7b").n_params == 6_658_859_008


def test_with_seq_len():
    mpt = get_model("mpt-125m")
    assert mpt.with_seq_len(4096).n_params - mpt.n_params == 2048 * 768
    assert mpt.with_seq_len(4096).max_seq_len == 4096 and mpt.max_seq_len == 2048
    llama = get_model("llama3-8b")
    assert llama.with_seq_len(131072).n_params == llama.n_params
    for bad in (0, -1, 2.5, "2048", True):
        with pytest.raises(ConfigError, match="sequence length"):
            mpt.with_seq_len(bad)


def test_unit_shapes_llama_block():
    shapes = get_model("llama3-8b").unit_parameter_shapes()
    assert shapes["block"] == [
        ("attn_norm.weight", (4096,)),
        ("attn.q.weight", (4096, 4096)), ("attn.k.weight", (1024, 4096)),
        ("attn.v.weight", (1024, 4096)), ("attn.o.weight", (4096, 4096)),
        ("mlp_norm.weight", (4096,)),
        ("mlp.gate.weight", (14336, 4096)), ("mlp.up.weight", (14336, 4096)),
        ("mlp.down.weight", (4096, 14336)),
    ]
    assert shapes["root"] == [
        ("tok_emb.weight", (128256, 4096)), ("norm.weight", (4096,)),
        ("lm_head.weight", (128256, 4096)),
    ]


def test_unit_shapes_tied_gpt_root():
    root = get_model("mpt-125m").unit_parameter_shapes()["root"]
    assert root == [("tok_emb.weight", (50368, 768)), ("pos_emb.weight", (2048, 768)),
                    ("norm.weight", (768,)), ("norm.bias", (768,))]


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_consistent(preset):
    spec = PRESETS[preset]
    assert spec.name == preset == preset.lower()
    counts = spec.param_counts()
    assert tuple(counts) == COMPONENTS
    assert spec.n_params == sum(counts.values())
    numel = lambda shapes: sum(_prod(shape) for _, shape in shapes)  # noqa: E731
    if spec.uniform_layers:
        shapes = spec.unit_parameter_shapes()
        assert numel(shapes["block"]) == spec.block_params
        assert spec.n_layers * numel(shapes["block"]) + numel(shapes["root"]) == spec.n_params
    else:  # dense and MoE layers: one shape list per layer
        with pytest.raises(ConfigError, match="blocks differ"):
            spec.unit_parameter_shapes()
    layers = [numel(spec.layer_parameter_shapes(i)) for i in range(spec.n_layers)]
    assert layers == [layer.params for layer in spec.layers]
    root = numel(model_layers.root_parameter_shapes(spec))
    assert sum(layers) + root == spec.n_params


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


# ---------------------------------------------------------------------------- validation
@pytest.mark.parametrize("overrides, field", [
    (dict(n_layers=0), "n_layers"),
    (dict(d_model=-64), "d_model"),
    (dict(n_heads=2.0), "n_heads"),
    (dict(vocab_size=True), "vocab_size"),
    (dict(n_kv_heads=3), "n_kv_heads"),
    (dict(n_kv_heads=8), "n_kv_heads"),
    (dict(n_heads=6), "n_heads"),
    (dict(head_dim=0), "head_dim"),
    (dict(ffn_kind="relu"), "ffn_kind"),
    (dict(ffn_kind="swiglu2"), "swiglu"),
    (dict(position="rope"), "position"),
    (dict(norm="rms"), "rmsnorm"),
    (dict(norm="rmsnorm"), "norm_bias"),
    (dict(qkv_bias=1), "qkv_bias"),
    (dict(experts_per_token=2), "experts_per_token"),
    (dict(n_experts=4, experts_per_token=5), "experts_per_token"),
    (dict(n_experts=4), "experts_per_token"),
    (dict(n_experts=-1), "n_experts"),
    (dict(expert_ffn_size=64), "expert_ffn_size"),
    (dict(name=""), "name"),
    (dict(max_seq_len=0), "max_seq_len"),
])
def test_invalid_spec_names_field(overrides, field):
    with pytest.raises(ConfigError, match=field):
        tiny(**overrides)


def test_head_dim_allows_non_dividing_heads():
    spec = tiny(n_heads=6, head_dim=16, n_kv_heads=2)
    assert (spec.q_dim, spec.kv_dim, spec.kv_heads, spec.head_size) == (96, 32, 2, 16)
    assert spec.param_counts()["attention"] == 2 * (64 * 96 * 2 + 64 * 32 * 2 + 96 + 64 + 64)


def test_dense_defaults():
    spec = tiny()
    assert (spec.kv_heads, spec.head_size, spec.q_dim, spec.kv_dim) == (4, 16, 64, 64)
    assert not spec.is_moe and spec.active_ffn_size == 128 and spec.expert_size == 128


# ---------------------------------------------------------------------------- presets API
def test_get_model_lookup():
    assert get_model("Llama3-8B") is PRESETS["llama3-8b"]
    assert get_model("gpt-1008b") is PRESETS["gpt-1t"]
    assert all(target in PRESETS for target in ALIASES.values())
    assert list_models() == list(PRESETS)
    for required in ("gpt3-175b", "llama3-405b", "llama3.1-70b", "mixtral-8x7b", "qwen2.5-72b",
                     "mpt-70b", "gpt-1t"):
        assert required in list_models()


def test_get_model_unknown_suggests():
    with pytest.raises(ConfigError, match=r"llama3-8b.*fsdpsim model list"):
        get_model("llama3-8")
    with pytest.raises(ConfigError, match="fsdpsim model list"):
        get_model("zzzzzz")


def test_get_model_path(tmp_path):
    path = _write(tmp_path, LLAMA3_8B)
    assert get_model(str(path)).n_params == 8_030_261_248
    assert get_model(str(tmp_path)).n_params == 8_030_261_248  # directory holding config.json
    with pytest.raises(ConfigError, match="does not exist"):
        get_model(str(tmp_path / "missing.json"))


# ---------------------------------------------------------------------------- HF import
LLAMA3_8B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 8192, "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5, "hidden_act": "silu", "rope_theta": 500000.0,
}
MISTRAL_7B = {
    "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096,
}
MIXTRAL = {**MISTRAL_7B, "model_type": "mixtral", "num_local_experts": 8,
           "num_experts_per_tok": 2}
QWEN25_7B = {
    "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "vocab_size": 152064, "tie_word_embeddings": False, "max_position_embeddings": 131072,
}
QWEN25_05B = {
    "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "vocab_size": 151936, "tie_word_embeddings": True,
}
GPT2_SMALL = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
              "n_positions": 1024, "vocab_size": 50257, "n_inner": None}
PYTHIA_160M = {
    "model_type": "gpt_neox", "hidden_size": 768, "intermediate_size": 3072,
    "num_attention_heads": 12, "num_hidden_layers": 12, "vocab_size": 50304,
    "max_position_embeddings": 2048, "rotary_pct": 0.25, "tie_word_embeddings": False,
    "use_parallel_residual": True,
}
MPT_7B = {
    "model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32,
    "expansion_ratio": 4, "max_seq_len": 2048, "vocab_size": 50432, "no_bias": True,
    "learned_pos_emb": True, "attn_config": {"alibi": True, "attn_impl": "torch"},
}
MPT_BENCH_125M = {"model_type": "mpt", "d_model": 768, "n_heads": 12, "n_layers": 12,
                  "expansion_ratio": 4, "max_seq_len": 2048, "vocab_size": 50368,
                  "attn_config": {"attn_impl": "flash"}}


def _write(tmp_path: Path, config: dict | str, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(config if isinstance(config, str) else json.dumps(config, indent=2))
    return path


@pytest.mark.parametrize("config, expected", [
    (LLAMA3_8B, 8_030_261_248),
    (MISTRAL_7B, 7_241_732_096),
    (MIXTRAL, 46_702_792_704),
    (QWEN25_7B, 7_615_616_512),
    (QWEN25_05B, 494_032_768),   # Qwen/Qwen2.5-0.5B: 0.49B, tied embeddings
    (GPT2_SMALL, 124_439_808),   # openai-community/gpt2: 124,439,808
    (PYTHIA_160M, 162_322_944),  # Biderman et al. 2023 (Pythia), Table 1: 162,322,944
    (MPT_7B, 6_649_286_656),     # mosaicml/mpt-7b: no biases, ALiBi, vocab 50432
    (MPT_BENCH_125M, 125_311_488),  # llm-foundry defaults == the mpt-125m preset
])
def test_hf_import_counts(tmp_path, config, expected):
    spec = spec_from_hf_config(_write(tmp_path, config))
    assert spec.n_params == expected
    assert spec.name == tmp_path.name


def test_hf_import_fields(tmp_path):
    qwen = spec_from_hf_config(_write(tmp_path, QWEN25_05B), name="qwen-small")
    assert qwen.name == "qwen-small"
    assert (qwen.qkv_bias, qwen.attn_out_bias, qwen.mlp_bias, qwen.tied_embeddings) == (
        True, False, False, True)
    mpt = spec_from_hf_config(_write(tmp_path, MPT_7B))
    assert (mpt.position, mpt.norm_bias, mpt.qkv_bias, mpt.tied_embeddings) == (
        "alibi", False, False, True)
    neox = spec_from_hf_config(_write(tmp_path, PYTHIA_160M))
    assert (neox.position, neox.ffn_kind, neox.norm_bias, neox.tied_embeddings) == (
        "rotary", "gelu", True, False)
    gpt2 = spec_from_hf_config(_write(tmp_path, {**GPT2_SMALL, "n_inner": 1000}))
    assert gpt2.ffn_size == 1000 and gpt2.position == "learned" and gpt2.max_seq_len == 1024
    mixtral = spec_from_hf_config(_write(tmp_path, MIXTRAL))
    assert (mixtral.n_experts, mixtral.experts_per_token, mixtral.expert_size) == (8, 2, 14336)
    llama = spec_from_hf_config(_write(tmp_path, {**LLAMA3_8B, "attention_bias": True,
                                                  "mlp_bias": True, "head_dim": 64}))
    assert llama.qkv_bias and llama.attn_out_bias and llama.mlp_bias and llama.q_dim == 2048
    gqa = spec_from_hf_config(_write(tmp_path, {
        **MPT_BENCH_125M, "norm_type": "rmsnorm", "ffn_config": {"ffn_type": "mptglu"},
        "attn_config": {"attn_type": "grouped_query_attention", "kv_n_heads": 4, "rope": True},
    }))
    assert (gqa.kv_heads, gqa.norm, gqa.ffn_kind, gqa.position) == (4, "rmsnorm", "swiglu",
                                                                   "rotary")
    assert set(SUPPORTED_MODEL_TYPES) >= {"llama", "mistral", "mixtral", "qwen2", "gpt2",
                                          "gpt_neox", "mpt"}


def test_hf_malformed_json_names_line(tmp_path):
    path = _write(tmp_path, '{\n  "model_type": "llama",\n  "hidden_size": 4096\n  "x": 1\n}')
    with pytest.raises(ConfigError, match=r"config\.json: line 4, column 3: malformed JSON"):
        spec_from_hf_config(path)


@pytest.mark.parametrize("config, pattern", [
    ({**LLAMA3_8B, "model_type": "lama"}, r"model_type 'lama' is not supported.*llama"),
    ({**LLAMA3_8B, "model_type": "t5"}, r"'t5'.*accepted: llama, mistral"),
    ({"hidden_size": 4096}, r"missing key 'model_type'.*accepted"),
    ({k: v for k, v in LLAMA3_8B.items() if k != "hidden_size"},
     r"missing key 'hidden_size'.*model_type 'llama'.*required keys: hidden_size"),
    ({k: v for k, v in GPT2_SMALL.items() if k != "n_head"}, r"missing key 'n_head'"),
    ({**LLAMA3_8B, "num_key_value_heads": 5}, r"config\.json: .*n_kv_heads\(5\)"),
    ({**LLAMA3_8B, "hidden_size": "big"},
     r"'hidden_size'.*'big' is not accepted; accepted: a whole number"),
    ({**LLAMA3_8B, "tie_word_embeddings": "no"}, r"'tie_word_embeddings'.*true or false"),
    ({**MPT_7B, "norm_type": "batchnorm"}, r"norm_type 'batchnorm'"),
    ([1, 2], r"top level must be a JSON object"),
])
def test_hf_bad_configs(tmp_path, config, pattern):
    path = _write(tmp_path, config)
    with pytest.raises(ConfigError, match=pattern) as info:
        spec_from_hf_config(path)
    assert str(path) in str(info.value)


def test_hf_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        spec_from_hf_config(tmp_path / "nope.json")


# ---------------------------------------------------------------------------- properties
@st.composite
def specs(draw, max_layers: int = 8) -> ModelSpec:
    head_size = draw(st.integers(1, 16))
    kv_heads = draw(st.integers(1, 4))
    n_heads = kv_heads * draw(st.integers(1, 4))
    norm = draw(st.sampled_from(["layernorm", "rmsnorm"]))
    n_experts = draw(st.sampled_from([0, 0, 1, 4]))
    return ModelSpec(
        name="h", n_layers=draw(st.integers(1, max_layers)), d_model=draw(st.integers(1, 96)),
        n_heads=n_heads, n_kv_heads=kv_heads, head_dim=head_size,
        ffn_size=draw(st.integers(1, 256)), ffn_kind=draw(st.sampled_from(["gelu", "swiglu"])),
        vocab_size=draw(st.integers(1, 1000)), tied_embeddings=draw(st.booleans()),
        position=draw(st.sampled_from(["learned", "rotary", "alibi", "none"])),
        max_seq_len=draw(st.integers(1, 4096)), norm=norm,
        norm_bias=norm == "layernorm" and draw(st.booleans()),
        qkv_bias=draw(st.booleans()), attn_out_bias=draw(st.booleans()),
        mlp_bias=draw(st.booleans()), lm_head_bias=draw(st.booleans()),
        final_norm=draw(st.booleans()), n_experts=n_experts,
        experts_per_token=draw(st.integers(1, n_experts)) if n_experts else 0,
        expert_ffn_size=draw(st.none() | st.integers(1, 64)) if n_experts else None,
    )


@settings(max_examples=300, deadline=None)
@given(specs())
def test_counts_add_up(spec):
    counts = spec.param_counts()
    assert spec.n_params == sum(counts.values())
    assert all(v >= 0 for v in counts.values())
    shapes = spec.unit_parameter_shapes()
    block = sum(_prod(s) for _, s in shapes["block"])
    root = sum(_prod(s) for _, s in shapes["root"])
    assert block == spec.block_params
    assert spec.n_layers * block + root == spec.n_params
    names = [n for n, _ in shapes["block"]] + [n for n, _ in shapes["root"]]
    assert len(names) == len(set(names))
    assert spec.matmul_params <= spec.active_params + spec.vocab_size * spec.d_model
    assert spec.active_params <= spec.n_params
    assert (spec.active_params == spec.n_params) == (spec.experts_per_token == spec.n_experts)


@settings(max_examples=200, deadline=None)
@given(specs(), st.integers(1, 8))
def test_monotone_in_layers_and_seq_len(spec, extra):
    deeper = ModelSpec(**{**spec.__dict__, "n_layers": spec.n_layers + extra})
    assert deeper.n_params - spec.n_params == extra * spec.block_params > 0
    assert deeper.matmul_params > spec.matmul_params
    longer = spec.with_seq_len(spec.max_seq_len + extra)
    grow = extra * spec.d_model if spec.position == "learned" else 0
    assert longer.n_params - spec.n_params == grow


def test_no_torch_import():
    code = ("import sys, fsdpsim, fsdpsim.model.spec, fsdpsim.model.presets, fsdpsim.model.hf_config, "
            "fsdpsim.measured.harness; fsdpsim.model.presets.get_model('llama3-8b'); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True,
                   cwd=Path(__file__).resolve().parents[1])


@pytest.mark.parametrize("size", [1e9, 7e9, 70e9, 1.5e12, 3.2e9])
def test_ladder_ids_printed_by_sweep_name_the_same_model(size):
    """A ladder id that `sweep --model-sizes` prints (ladder-7b) works wherever a
    model id does (`model show`, `predict --model`), naming the same model."""
    from fsdpsim.model.ladder import ladder_model
    from fsdpsim.model.presets import get_model

    made = ladder_model(size)
    again = get_model(made.name)
    assert (again.n_layers, again.d_model, again.n_heads, again.ffn_size) == \
        (made.n_layers, made.d_model, made.n_heads, made.ffn_size)
    assert again.n_params == made.n_params


def test_a_bad_ladder_id_is_one_clear_error():
    from fsdpsim.model.presets import get_model

    with pytest.raises(ConfigError, match="ladder-abc.*accepted"):
        get_model("ladder-abc")


def test_hf_configs_with_one_name_do_not_clash(tmp_path, cat):
    """Two configs in one folder are named by their files; two config.json
    files whose model names coincide keep their rows apart (named by path); the same file
    twice is one line naming it."""
    from conftest import sweep

    folder = tmp_path / "configs"
    folder.mkdir()
    small = _write(folder, {**QWEN25_05B}, "small.json")
    big = _write(folder, {**LLAMA3_8B}, "big.json")
    assert (spec_from_hf_config(small).name, spec_from_hf_config(big).name) == ("small", "big")
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
    a = _write(tmp_path / "a", {**QWEN25_05B, "_name_or_path": "my-model"})
    b = _write(tmp_path / "b", {**LLAMA3_8B, "_name_or_path": "my-model"})
    rows = sweep(cat, model=f"{small},{big},{tmp_path / 'a'},{b}", num_gpus="8",
                 micro_batch="1", recompute="full", seq_len="2048")
    assert list(rows["model"]) == ["small", "big", f"my-model ({a.resolve()})",
                                   f"my-model ({b.resolve()})"]
    assert list(rows["n_params"]) == [494_032_768, 8_030_261_248, 494_032_768, 8_030_261_248]
    with pytest.raises(ConfigError, match=r"--model: my-model given more than once \(.*a/config"):
        sweep(cat, model=f"{a},{tmp_path / 'a'}", num_gpus="8")
