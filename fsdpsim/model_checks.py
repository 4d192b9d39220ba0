"""Validation of the architecture fields of :class:`~fsdpsim.model.ModelSpec` beyond the dense
block: mixture-of-experts layer layout, multi-head latent attention and attention masks.

Each check raises :class:`~fsdpsim.errors.ConfigError` with one line naming the field, the
model and what is accepted; lists are normalised to tuples (the spec stays hashable).
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

from fsdpsim.errors import ConfigError, suggest

if TYPE_CHECKING:
    from fsdpsim.model import ModelSpec

ATTENTION_MASKS: tuple[str, ...] = ("full", "sliding", "chunked")
#: Fields of multi-head latent attention, all given for ``attention_kind="mla"`` (q_lora_rank
#: may be None there) and all None otherwise.
MLA_FIELDS: tuple[str, ...] = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                               "qk_rope_head_dim", "v_head_dim")


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
    all. Since the layered engine (:mod:`fsdpsim.engine.moe`, issue 13) it times dense and MoE
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
