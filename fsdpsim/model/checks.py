"""Validation of the fields of :class:`~fsdpsim.model.spec.ModelSpec`: the dense block's (types,
ranges, choices, heads and widths) and, beyond it, mixture-of-experts layer layout, multi-head
latent attention and attention masks.

Each check raises :class:`~fsdpsim.util.errors.ConfigError` with one line naming the field, the
model and what is accepted; lists are normalised to tuples (the spec stays hashable).
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

from fsdpsim.util.errors import ConfigError, suggest

if TYPE_CHECKING:
    from fsdpsim.model.spec import ModelSpec

FFN_KINDS: tuple[str, ...] = ("gelu", "swiglu")
POSITIONS: tuple[str, ...] = ("learned", "rotary", "alibi", "none")
NORMS: tuple[str, ...] = ("layernorm", "rmsnorm")
ATTENTION_KINDS: tuple[str, ...] = ("gqa", "mla")
ATTENTION_MASKS: tuple[str, ...] = ("full", "sliding", "chunked")
#: Fields of multi-head latent attention, all given for ``attention_kind="mla"`` (q_lora_rank
#: may be None there) and all None otherwise.
MLA_FIELDS: tuple[str, ...] = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                               "qk_rope_head_dim", "v_head_dim")


def check_fields(spec: ModelSpec) -> None:
    """Every field of a :class:`~fsdpsim.model.spec.ModelSpec`: types, ranges, the named choices and
    the relations between them (heads, widths, experts, router groups), then the MoE layout and
    the attention fields (:func:`check_moe_layers`, :func:`check_attention`,
    :func:`check_attention_pattern`)."""
    where = f"model {spec.name!r}" if isinstance(spec.name, str) else "model"
    if not isinstance(spec.name, str) or not spec.name.strip():
        raise ConfigError(f"model name {spec.name!r} must be a non-empty string")
    for field in ("n_layers", "d_model", "n_heads", "ffn_size", "vocab_size", "max_seq_len"):
        check_int(spec, field, where, minimum=1)
    for field in ("n_kv_heads", "head_dim", "expert_ffn_size"):
        if getattr(spec, field) is not None:
            check_int(spec, field, where, minimum=1)
    for field in ("n_experts", "experts_per_token", "shared_expert_ffn_size", "mtp_layers"):
        check_int(spec, field, where, minimum=0)
    for field in ("router_groups", "router_group_top_k"):
        check_int(spec, field, where, minimum=1)
    for field in MLA_FIELDS + ("sliding_window", "attention_chunk_size"):
        if getattr(spec, field) is not None:
            check_int(spec, field, where, minimum=1)
    for field in (
        "tied_embeddings", "norm_bias", "qkv_bias", "attn_out_bias", "mlp_bias",
        "lm_head_bias", "final_norm", "router_bias", "router_score_bias", "qk_norm",
        "attention_sinks",
    ):
        if not isinstance(getattr(spec, field), bool):
            raise ConfigError(
                f"{field}={getattr(spec, field)!r} in {where} must be True or False"
            )
    for field, accepted in (("ffn_kind", FFN_KINDS), ("position", POSITIONS),
                            ("norm", NORMS), ("attention_kind", ATTENTION_KINDS)):
        value = getattr(spec, field)
        if value not in accepted:
            hint = suggest(value, accepted) if isinstance(value, str) else ""
            raise ConfigError(
                f"{field}={value!r} in {where} is not one of: {', '.join(accepted)}{hint}"
            )

    kv = spec.kv_heads
    if kv > spec.n_heads or spec.n_heads % kv != 0:
        raise ConfigError(
            f"n_heads({spec.n_heads}) % n_kv_heads({kv}) != 0 in {where}: the number of "
            f"key/value heads must divide the number of query heads"
        )
    if (spec.attention_kind == "gqa" and spec.head_dim is None
            and spec.d_model % spec.n_heads != 0):
        raise ConfigError(
            f"d_model({spec.d_model}) % n_heads({spec.n_heads}) != 0 in {where}: give "
            f"head_dim explicitly or choose n_heads dividing d_model"
        )
    if spec.norm == "rmsnorm" and spec.norm_bias:
        raise ConfigError(
            f"norm_bias=True with norm='rmsnorm' in {where}: RMSNorm has no bias; "
            f"use norm='layernorm' or norm_bias=False"
        )
    if spec.n_experts == 0:
        if spec.experts_per_token != 0 or spec.expert_ffn_size is not None:
            raise ConfigError(
                f"experts_per_token({spec.experts_per_token}) / expert_ffn_size"
                f"({spec.expert_ffn_size}) set in {where} but n_experts is 0 (dense); "
                f"set n_experts >= 1 or leave them at 0 / None"
            )
    elif not 1 <= spec.experts_per_token <= spec.n_experts:
        raise ConfigError(
            f"experts_per_token({spec.experts_per_token}) in {where} must be between 1 "
            f"and n_experts({spec.n_experts})"
        )
    if spec.router_groups > 1 and (spec.n_experts % spec.router_groups
                                   or spec.router_group_top_k > spec.router_groups):
        raise ConfigError(
            f"router_groups({spec.router_groups}) / router_group_top_k"
            f"({spec.router_group_top_k}) in {where}: the groups must divide n_experts"
            f"({spec.n_experts}) and router_group_top_k must be at most router_groups")
    if spec.router_groups == 1 and spec.router_group_top_k != 1:
        raise ConfigError(f"router_group_top_k({spec.router_group_top_k}) in {where} needs "
                          f"router_groups > 1")
    check_moe_layers(spec, where)
    check_attention(spec, where)
    check_attention_pattern(spec, where)


def check_int(spec: ModelSpec, field: str, where: str, *, minimum: int) -> None:
    """An integer field of at least ``minimum`` (numpy integers become int)."""
    value = getattr(spec, field)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{field}={value!r} in {where} must be an integer >= {minimum}")
    if value < minimum:
        raise ConfigError(f"{field}={value} in {where} must be an integer >= {minimum}")
    object.__setattr__(spec, field, int(value))  # numpy integers -> int


def check_moe_layers(spec: ModelSpec, where: str) -> None:
    """dense_layers, shared expert and router switches: only with experts, in range."""
    layers = spec.dense_layers
    if isinstance(layers, list):
        layers = tuple(layers)
    if not isinstance(layers, tuple) or not all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in layers):
        raise ConfigError(f"dense_layers={layers!r} in {where} must be a tuple of layer "
                          f"indices (integers)")
    layers = tuple(int(i) for i in layers)
    object.__setattr__(spec, "dense_layers", layers)
    if layers and not (all(0 <= i < spec.n_layers for i in layers)
                       and all(a < b for a, b in zip(layers, layers[1:]))):
        raise ConfigError(f"dense_layers={layers} in {where} must be increasing indices "
                          f"between 0 and n_layers - 1 ({spec.n_layers - 1})")
    moe_only = {"dense_layers": bool(layers), "shared_expert_ffn_size":
                spec.shared_expert_ffn_size > 0, "router_bias": spec.router_bias,
                "router_score_bias": spec.router_score_bias}
    if spec.n_experts == 0 and any(moe_only.values()):
        field = next(k for k, v in moe_only.items() if v)
        raise ConfigError(f"{field}={getattr(spec, field)!r} set in {where} but n_experts "
                          f"is 0 (dense); it applies to mixture-of-experts models only")
    if spec.n_experts and len(layers) == spec.n_layers:
        raise ConfigError(f"dense_layers in {where} lists all {spec.n_layers} layers: a "
                          f"model without MoE layers has n_experts=0")

def check_attention(spec: ModelSpec, where: str) -> None:
    """MLA needs its five sizes (q_lora_rank may be None) and excludes GQA-only options."""
    if spec.attention_kind == "gqa":
        given = [f for f in MLA_FIELDS if getattr(spec, f) is not None]
        if given:
            raise ConfigError(f"{given[0]}={getattr(spec, given[0])} in {where} is an MLA "
                              f"size but attention_kind is 'gqa'; set attention_kind='mla'")
        return
    missing = [f for f in MLA_FIELDS[1:] if getattr(spec, f) is None]
    if missing:
        raise ConfigError(f"attention_kind='mla' in {where} needs {', '.join(missing)} "
                          f"(integers >= 1)")
    if spec.n_kv_heads not in (None, spec.n_heads) or spec.head_dim is not None:
        raise ConfigError(
            f"n_kv_heads({spec.n_kv_heads}) / head_dim({spec.head_dim}) in {where}: MLA "
            f"has one key and value per query head of the MLA sizes; leave them None")
    for field in ("qkv_bias", "attn_out_bias", "qk_norm", "attention_sinks"):
        if getattr(spec, field):
            raise ConfigError(f"{field}=True with attention_kind='mla' in {where} is not "
                              f"supported (accepted: False)")

def check_attention_pattern(spec: ModelSpec, where: str) -> None:
    """attention_pattern: a non-empty tuple of masks, each with the size it needs."""
    pattern = spec.attention_pattern
    if isinstance(pattern, (list, tuple)) and pattern:
        pattern = tuple(pattern)
        object.__setattr__(spec, "attention_pattern", pattern)
    if not isinstance(pattern, tuple) or not pattern or len(pattern) > spec.n_layers:
        raise ConfigError(f"attention_pattern={pattern!r} in {where} must be 1 to n_layers "
                          f"({spec.n_layers}) masks from: {', '.join(ATTENTION_MASKS)}")
    for mask in pattern:
        if mask not in ATTENTION_MASKS:
            hint = suggest(mask, ATTENTION_MASKS) if isinstance(mask, str) else ""
            raise ConfigError(f"attention_pattern entry {mask!r} in {where} is not one of: "
                              f"{', '.join(ATTENTION_MASKS)}{hint}")
    for mask, field in (("sliding", "sliding_window"), ("chunked", "attention_chunk_size")):
        if (mask in pattern) != (getattr(spec, field) is not None):
            raise ConfigError(
                f"{field}={getattr(spec, field)} with attention_pattern={pattern} in "
                f"{where}: a {mask!r} layer needs {field}, and {field} needs a {mask!r} "
                f"layer")


def engine_unsupported(spec: ModelSpec) -> tuple[str, ...]:
    """Features of ``spec`` the step-time engine does not model yet; empty when it models them
    all. The layered engine (:mod:`fsdpsim.engine.moe`) times dense and MoE
    layers apart (routed experts on their real shapes, shared experts, router biases),
    multi-head latent attention's projections, q/k norms, attention sinks (one logit per head:
    no GEMM), multi-token-prediction modules, and sliding-window and chunked attention over the
    query-key pairs their masks keep; no architecture field of ModelSpec is refused today."""
    features: dict[str, bool] = {}
    return tuple(name for name, present in features.items() if present)


def check_engine_supported(spec: ModelSpec) -> None:
    """Raise :class:`ConfigError` naming what the engine cannot model yet, if anything."""
    missing = engine_unsupported(spec)
    if missing:
        raise ConfigError(
            f"model {spec.name!r} ({spec.layer_pattern}) has {', '.join(missing)}, which the "
            f"step-time engine does not model yet (accepted: dense or uniform top-k MoE "
            f"layers); `fsdpsim model show` gives its exact parameter counts and FLOPs")
