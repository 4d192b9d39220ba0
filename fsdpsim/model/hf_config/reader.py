"""Typed, error-reporting access to the keys of one parsed ``config.json``.

Every value goes through :func:`fsdpsim.util.numbers.read_number` (or a bool / text / list check);
a bad one raises :class:`~fsdpsim.util.errors.ConfigError` naming the file, the key, the model type
and what is accepted, in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdpsim.util.errors import ConfigError, shown, suggest
from fsdpsim.util.numbers import MAX_COUNT, Rule, read_number

#: Plausible ranges of the sizes in a config.json (every real model is far inside them; a
#: value outside, NaN, Infinity or a 400-digit integer is rejected, never converted).
_WIDTH = Rule(1, 2**20, whole=True)           # hidden, intermediate, head widths, ranks
_LAYERS = Rule(1, 2**14, whole=True)
_HEADS = Rule(1, 2**16, whole=True)
_LAYER_COUNT = Rule(0, 2**14, whole=True)     # counts of special layers, may be 0
SIZE_RULES: dict[str, Rule] = {
    **{k: _LAYERS for k in ("num_hidden_layers", "n_layer", "n_layers", "decoder_sparse_step",
                            "interleave_moe_layer_step", "no_rope_layer_interval")},
    **{k: _HEADS for k in ("num_attention_heads", "num_key_value_heads", "n_head", "n_heads",
                           "kv_n_heads", "num_local_experts", "num_experts_per_tok",
                           "experts_per_token", "num_experts", "n_routed_experts")},
    **{k: _LAYER_COUNT for k in ("first_k_dense_replace", "num_nextn_predict_layers",
                                 "max_window_layers", "n_shared_experts")},
    "vocab_size": Rule(1, 2**24, whole=True),
    # positions only add parameters for learned tables; rotary configs state large contexts
    **{k: Rule(1, MAX_COUNT, whole=True) for k in ("max_position_embeddings", "n_positions",
                                                   "max_seq_len", "sliding_window",
                                                   "attention_chunk_size")},
}


class Config:
    """A parsed config.json (or one of its nested tables) with typed accessors.

    ``required`` lists the keys without which the model type cannot be counted (named in the
    message for a missing one); ``table`` names a nested table (``text_config``) in messages.
    """

    def __init__(self, path: Path, data: dict[str, Any], model_type: str,
                 required: tuple[str, ...], table: str = "") -> None:
        self.path, self.data, self.model_type = path, data, model_type
        self.required, self.table = required, table

    def nested(self, key: str) -> Config:
        """The nested table ``key`` as a Config (Llama 4's ``text_config``)."""
        return Config(self.path, self.get_dict(key), self.model_type, self.required,
                      f"{self.table}{key}.")

    def where(self, key: str) -> str:
        return f"{self.path}: key {self.table + key!r} (model_type {self.model_type!r})"

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get_int(self, key: str, default: int | None = None, *, required: bool = True,
                data: dict[str, Any] | None = None) -> int | None:
        """A whole number within the key's plausible range (:data:`SIZE_RULES`); missing ->
        ``default`` if not required, else an error."""
        data = self.data if data is None else data
        value = data.get(key)
        if value is None:
            if required and default is None:
                raise ConfigError(
                    f"{self.path}: missing key {self.table + key!r}, required for model_type "
                    f"{self.model_type!r} (required keys: {', '.join(self.required)})"
                )
            return default
        return read_number(value, self.where(key), SIZE_RULES.get(key, _WIDTH), text=False)

    def get_bool(self, key: str, default: bool, *, data: dict[str, Any] | None = None) -> bool:
        data = self.data if data is None else data
        value = data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"{self.where(key)} = {shown(value)} must be true or false")
        return value

    def get_text(self, key: str, default: str, *, data: dict[str, Any] | None = None) -> str:
        data = self.data if data is None else data
        value = data.get(key, default)
        if not isinstance(value, str):
            raise ConfigError(f"{self.where(key)} = {shown(value)} must be text")
        return value

    def get_choice(self, key: str, default: str, accepted: tuple[str, ...]) -> str:
        """Text that must be one of ``accepted``."""
        value = self.get_text(key, default)
        if value not in accepted:
            raise ConfigError(f"{self.where(key)} = {shown(value)} is not one of: "
                              f"{', '.join(accepted)}{suggest(value, accepted)}")
        return value

    def get_dict(self, key: str) -> dict[str, Any]:
        value = self.data.get(key) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{self.where(key)} = {shown(value)} must be a JSON object")
        return value

    def get_list(self, key: str, length: int | None = None) -> list[Any] | None:
        """A JSON list (None when the key is missing or null); ``length``: at least that many
        entries (Hugging Face reads the first ``num_hidden_layers``)."""
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise ConfigError(f"{self.where(key)} = {shown(value)} must be a JSON list")
        if length is not None and len(value) < length:
            raise ConfigError(f"{self.where(key)} has {len(value)} entries; accepted: one per "
                              f"layer ({length})")
        return value

    def get_layer_indices(self, key: str, n_layers: int) -> list[int] | None:
        """A list of layer indices, each a whole number from 0 to ``n_layers - 1``."""
        value = self.get_list(key)
        if value is None:
            return None
        rule = Rule(0, n_layers - 1, whole=True)
        return sorted({read_number(i, f"{self.where(key)} entry", rule, text=False)
                       for i in value})

    def get_choices(self, key: str, accepted: tuple[Any, ...], length: int) -> list[Any] | None:
        """A per-layer list of values from ``accepted`` (the first ``length`` are used; JSON
        booleans are refused where numbers are meant)."""
        value = self.get_list(key, length)
        if value is None:
            return None
        for item in value[:length]:
            if isinstance(item, bool) or item not in accepted or isinstance(item, float):
                raise ConfigError(f"{self.where(key)} entry {shown(item)} is not one of: "
                                  f"{', '.join(str(a) for a in accepted)}")
        return value[:length]

    def reject_if(self, key: str, value: Any, accepted: str) -> None:
        """Refuse a value fsdpsim does not model (named, with what is accepted)."""
        raise ConfigError(f"{self.where(key)} = {shown(value)} is not supported; accepted: "
                          f"{accepted}")


def period(items: list[Any]) -> tuple[Any, ...]:
    """The shortest prefix that, repeated, gives ``items`` (``[a, b, a, b, a]`` -> ``(a, b)``)."""
    for p in range(1, len(items) + 1):
        if all(items[i] == items[i % p] for i in range(len(items))):
            return tuple(items[:p])
    return tuple(items)  # (not reached: p = len(items) always matches)
