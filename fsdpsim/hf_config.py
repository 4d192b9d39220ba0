"""Offline import of a Hugging Face ``config.json`` into a :class:`~fsdpsim.model.ModelSpec`.

Only the file is read (no network, no ``transformers``). Field meanings and defaults follow the
configuration classes and modeling files of Hugging Face ``transformers`` (``LlamaConfig``,
``MistralConfig``, ``MixtralConfig``, ``Qwen2Config``, ``GPT2Config``, ``GPTNeoXConfig``) and,
for ``mpt``, MosaicML llm-foundry's ``MPTConfig`` (the code that ``trust_remote_code`` MPT
checkpoints run). Sizes that decide the parameter count are required; switches with a
well-known default (biases, tying) fall back to that model type's default.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fsdpsim.errors import ConfigError, shown, suggest
from fsdpsim.files import MAX_TEXT_BYTES, read_text
from fsdpsim.model import ModelSpec, check_plausible_size
from fsdpsim.numbers import MAX_COUNT, Rule, read_number

#: Plausible ranges of the sizes in a config.json (every real model is far inside them; a
#: value outside, NaN, Infinity or a 400-digit integer is rejected, never converted).
_WIDTH = Rule(1, 2**20, whole=True)           # hidden, intermediate, head widths
_LAYERS = Rule(1, 2**14, whole=True)
_HEADS = Rule(1, 2**16, whole=True)
SIZE_RULES: dict[str, Rule] = {
    **{k: _LAYERS for k in ("num_hidden_layers", "n_layer", "n_layers")},
    **{k: _HEADS for k in ("num_attention_heads", "num_key_value_heads", "n_head", "n_heads",
                           "kv_n_heads", "num_local_experts", "num_experts_per_tok")},
    "vocab_size": Rule(1, 2**24, whole=True),
    # positions only add parameters for learned tables; rotary configs state large contexts
    **{k: Rule(1, MAX_COUNT, whole=True) for k in ("max_position_embeddings", "n_positions",
                                                   "max_seq_len")},
}
EXPANSION_RATIO = Rule(0.001, 1024)


class _Config:
    """A parsed config.json with typed, error-reporting accessors."""

    def __init__(self, path: Path, data: dict[str, Any], model_type: str) -> None:
        self.path, self.data, self.model_type = path, data, model_type

    def _where(self, key: str) -> str:
        return f"{self.path}: key {key!r} (model_type {self.model_type!r})"

    def get_int(self, key: str, default: int | None = None, *, required: bool = True,
            data: dict[str, Any] | None = None) -> int | None:
        """A whole number within the key's plausible range (:data:`SIZE_RULES`); missing ->
        ``default`` if not required, else an error."""
        data = self.data if data is None else data
        value = data.get(key)
        if value is None:
            if required and default is None:
                raise ConfigError(
                    f"{self.path}: missing key {key!r}, required for model_type "
                    f"{self.model_type!r} (required keys: {', '.join(REQUIRED[self.model_type])})"
                )
            return default
        return read_number(value, self._where(key), SIZE_RULES.get(key, _WIDTH), text=False)

    def get_bool(self, key: str, default: bool, *, data: dict[str, Any] | None = None) -> bool:
        data = self.data if data is None else data
        value = data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"{self._where(key)} = {shown(value)} must be true or false")
        return value

    def get_text(self, key: str, default: str, *, data: dict[str, Any] | None = None) -> str:
        data = self.data if data is None else data
        value = data.get(key, default)
        if not isinstance(value, str):
            raise ConfigError(f"{self._where(key)} = {shown(value)} must be text")
        return value

    def get_dict(self, key: str) -> dict[str, Any]:
        value = self.data.get(key) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{self._where(key)} = {shown(value)} must be a JSON object")
        return value


# ---------------------------------------------------------------------------- per model type
def _llama_like(c: _Config, *, attention_bias: bool, qkv_bias: bool | None = None,
                moe: bool = False) -> dict[str, Any]:
    """Llama, Mistral, Mixtral, Qwen2: RMSNorm, SwiGLU MLP, rotary, untied by default."""
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
    if moe:
        fields.update(
            n_experts=c.get_int("num_local_experts", 8, required=False),
            experts_per_token=c.get_int("num_experts_per_tok", 2, required=False),
        )
    return fields


def _llama(c: _Config) -> dict[str, Any]:
    # LlamaConfig: attention_bias covers q, k, v and o; mlp_bias covers gate, up and down.
    fields = _llama_like(c, attention_bias=c.get_bool("attention_bias", False))
    fields["mlp_bias"] = c.get_bool("mlp_bias", False)
    return fields


def _mistral(c: _Config) -> dict[str, Any]:
    return _llama_like(c, attention_bias=False)  # MistralAttention: all projections bias=False


def _mixtral(c: _Config) -> dict[str, Any]:
    return _llama_like(c, attention_bias=False, moe=True)  # router gate is bias-free


def _qwen2(c: _Config) -> dict[str, Any]:
    return _llama_like(c, attention_bias=False, qkv_bias=True)  # q/k/v biased, o not


def _gpt2(c: _Config) -> dict[str, Any]:
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


def _gpt_neox(c: _Config) -> dict[str, Any]:
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


_MPT_NORMS = {"layernorm": "layernorm", "low_precision_layernorm": "layernorm",
              "rmsnorm": "rmsnorm", "low_precision_rmsnorm": "rmsnorm",
              "triton_rmsnorm": "rmsnorm"}
_MPT_FFNS = {"mptmlp": "gelu", "mptglu": "swiglu"}


def _mpt(c: _Config) -> dict[str, Any]:
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
    ratio = read_number(c.data.get("expansion_ratio", 4), c._where("expansion_ratio"),
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


_READERS: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "mpt": _mpt,
}

#: Keys without which each model type cannot be counted.
_LLAMA_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "vocab_size")
REQUIRED: dict[str, tuple[str, ...]] = {
    "llama": _LLAMA_KEYS, "mistral": _LLAMA_KEYS, "mixtral": _LLAMA_KEYS, "qwen2": _LLAMA_KEYS,
    "gpt2": ("n_embd", "n_layer", "n_head", "vocab_size"),
    "gpt_neox": _LLAMA_KEYS,
    "mpt": ("d_model", "n_heads", "n_layers", "vocab_size"),
}

#: model_type values :func:`spec_from_hf_config` understands.
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_READERS)


class _HugeInteger(float):
    """An integer of more digits than Python converts (4,300): infinite, named by its size."""

    def __new__(cls, digits: int):
        obj = super().__new__(cls, "inf")
        obj.digits = digits
        return obj

    def __repr__(self) -> str:
        return f"an integer of {self.digits:,} digits"


def _json_int(text: str) -> int | float:
    return int(text) if len(text) <= 1000 else _HugeInteger(len(text.lstrip("-")))


def spec_from_hf_config(path: str | os.PathLike[str], *, name: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` (a file or a directory
    that holds one), offline.

    Parameters
    ----------
    path
        The ``config.json`` file, or the model directory containing it.
    name
        Name for the spec; default ``_name_or_path`` from the file, else the directory name.

    Raises
    ------
    ConfigError
        Missing or malformed file (with line and column), unsupported ``model_type``, a missing
        required key, or values that make an invalid spec; the message names the file.
    """
    path = Path(path)
    try:
        if path.is_dir():
            path = path / "config.json"
    except (OSError, ValueError):  # a name too long for the file system: read_text says so
        pass
    text = read_text(path, "model config file", MAX_TEXT_BYTES, expected="a config.json")
    try:
        data = json.loads(text, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: line {exc.lineno}, column {exc.colno}: malformed JSON ({exc.msg})"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: JSON nested too deeply to read (a config.json is one flat "
                          "object with a few nested ones)") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise ConfigError(f"{path}: cannot read as JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a JSON object, got {type(data).__name__}")

    model_type = data.get("model_type")
    accepted = ", ".join(SUPPORTED_MODEL_TYPES)
    if model_type is None:
        raise ConfigError(f"{path}: missing key 'model_type' (accepted: {accepted})")
    if not isinstance(model_type, str) or model_type not in _READERS:
        hint = suggest(str(model_type), SUPPORTED_MODEL_TYPES)
        raise ConfigError(
            f"{path}: model_type {model_type!r} is not supported{hint} (accepted: {accepted})"
        )

    fields = _READERS[model_type](_Config(path, data, model_type))
    if name is None:
        name = data.get("_name_or_path") or path.resolve().parent.name or str(path)
    try:
        spec = ModelSpec(name=str(name)[:200], **fields)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return check_plausible_size(spec, str(path))
