"""The per-layer view of a :class:`~fsdpsim.model.spec.ModelSpec`: exact parameter counts and
shapes.

A model is a stack of layers that may differ: a mixture-of-experts model may keep a few dense
MLP layers (DeepSeek-V3's first three, every other layer of Llama 4 Maverick), and the attention
mask may alternate between full, sliding-window and chunked layers (gpt-oss, Llama 4). Each layer
is one :class:`LayerSpec`; parameters split into *expert* parameters (the routed experts, which
expert parallelism shards) and *dense* ones (everything else: attention, norms, router, shared
experts, dense MLPs), because that is the split later sharding work needs.

Counting, per layer of width ``d`` with ``H`` query heads (``q``, ``kv`` as in
:mod:`fsdpsim.model.spec`; ``r_q``, ``r_kv`` the MLA ranks; ``n``, ``r``, ``v`` the MLA no-position,
rotary and value head widths)::

    GQA attention = d*q + 2*d*kv + q*d  [+ biases] [+ 2*head (q/k RMSNorm)] [+ H (sinks)]
    MLA attention = d*r_q + r_q + r_q*H*(n + r)          (W_DQ, its RMSNorm, W_UQ)
                  + d*(r_kv + r) + r_kv + r_kv*H*(n + v) (W_DKV with W_KR, its RMSNorm, W_UK;W_UV)
                  + H*v*d                                (W_O)
    MoE MLP       = d*E [+ E router bias] [+ E score bias] + E*expert + shared MLP
    active MoE    = the same with k of the E experts

Attention follows DeepSeek-V3 [1] Eq. 1-11 (the module list of its ``modeling_deepseek.py``);
the MoE follows DeepSeekMoE [1] Eq. 12-16 (shared + routed experts), Mixtral [2] Sec. 2.1,
Qwen3 [3] Sec. 2, gpt-oss [4] Sec. 2.1 and Llama 4 [5].

References
----------
[1] DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437 (2024), Sec. 2.1-2.2;
    deepseek-ai/DeepSeek-V3 ``README_WEIGHTS.md`` (main model 671B, MTP module 11.5B unique).
[2] Jiang et al., "Mixtral of Experts", arXiv:2401.04088 (2024), Sec. 2.1.
[3] Qwen Team, "Qwen3 Technical Report", arXiv:2505.09388 (2025), Sec. 2 (QK-Norm, 128 experts,
    8 active, no shared experts).
[4] OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", arXiv:2508.10925 (2025), Sec. 2.1.
[5] Meta, Llama 4 model card (github.com/meta-llama/llama-models, models/llama4/MODEL_CARD.md);
    Hugging Face transformers ``models/llama4/modeling_llama4.py`` (commit 000c33f).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from fsdpsim.model.spec import ModelSpec

MlpKind = Literal["dense", "moe"]
Mask = Literal["full", "sliding", "chunked"]
Shapes = list[tuple[str, tuple[int, ...]]]


@dataclass(frozen=True)
class LayerSpec:
    """One transformer layer of a :class:`~fsdpsim.model.spec.ModelSpec` (exact integer counts)."""

    index: int
    """Position in the stack, 0-based."""
    mlp: MlpKind
    """``"dense"``: one MLP of ``ffn_size``; ``"moe"``: router, routed and shared experts."""
    attention: Literal["gqa", "mla"]
    """Projections: grouped-query (MHA/GQA/MQA) or multi-head latent attention."""
    mask: Mask
    """Which keys a query sees: all earlier ones, the last ``window`` or its own chunk."""
    window: int | None
    """Sliding window ``w`` or chunk size ``c`` [tokens]; None for full attention."""
    attention_params: int
    """Attention projections, their biases and norms (q/k or MLA latent), sinks."""
    mlp_params: int
    """The dense MLP, or router + all routed experts + shared experts."""
    norm_params: int
    """The two block norms (before attention, before the MLP)."""
    expert_params: int
    """The routed experts alone: what expert parallelism shards."""
    active_params: int
    """Parameters one token uses: all but the routed experts it is not sent to."""
    matmul_params: int
    """Weights one token multiplies (2 FLOP each forward): no norms, biases or sinks."""

    @property
    def params(self) -> int:
        """All parameters of the layer."""
        return self.attention_params + self.mlp_params + self.norm_params

    @property
    def dense_params(self) -> int:
        """Parameters other than routed experts (replicated or sharded like a dense model)."""
        return self.params - self.expert_params

    @property
    def kind(self) -> str:
        """Short description, e.g. ``"MoE, MLA, full"`` or ``"dense, GQA, sliding 128"``."""
        mask = self.mask if self.window is None else f"{self.mask} {self.window}"
        return f"{'MoE' if self.mlp == 'moe' else 'dense'}, {self.attention.upper()}, {mask}"


# ---------------------------------------------------------------------------- layer pattern
def mlp_kind(spec: ModelSpec, index: int) -> MlpKind:
    """``"moe"`` for a mixture-of-experts layer, ``"dense"`` otherwise."""
    return "moe" if spec.is_moe and index not in spec.dense_layers else "dense"


def mask_of(spec: ModelSpec, index: int) -> tuple[Mask, int | None]:
    """The attention mask of layer ``index``: ``attention_pattern`` repeated over the layers."""
    mask = spec.attention_pattern[index % len(spec.attention_pattern)]
    window = {"full": None, "sliding": spec.sliding_window,
              "chunked": spec.attention_chunk_size}[mask]
    return mask, window


# ---------------------------------------------------------------------------- counts
def one_mlp_params(spec: ModelSpec, hidden: int) -> int:
    """One dense MLP (or one expert) of hidden width ``hidden``: 2 or 3 matrices + biases."""
    d = spec.d_model
    weights = spec.mlp_matrices * d * hidden
    # gate/up biases are `hidden` wide, the down-projection bias is `d` wide.
    biases = ((spec.mlp_matrices - 1) * hidden + d) * spec.mlp_bias
    return weights + biases


def attention_matmul_params(spec: ModelSpec) -> int:
    """Projection weights of one attention layer (each used once per token)."""
    d, H = spec.d_model, spec.n_heads
    if spec.attention_kind == "mla":
        nope, rope, v = spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
        r_kv = spec.kv_lora_rank
        if spec.q_lora_rank is None:
            query = d * H * (nope + rope)                       # W_Q (DeepSeek-V2-Lite)
        else:
            query = d * spec.q_lora_rank + spec.q_lora_rank * H * (nope + rope)  # W_DQ, W_UQ
        key_value = d * (r_kv + rope) + r_kv * H * (nope + v)   # [W_DKV; W_KR], [W_UK; W_UV]
        return query + key_value + H * v * d                    # + W_O
    d, q, kv = spec.d_model, spec.q_dim, spec.kv_dim
    return d * q + 2 * d * kv + q * d  # Wq, Wk, Wv (GQA: kv <= q) and Wo


def attention_params(spec: ModelSpec) -> int:
    """All parameters of one attention layer: projections, biases, norms inside, sinks."""
    weights = attention_matmul_params(spec)
    if spec.attention_kind == "mla":
        # RMSNorms on the compressed query and key/value latents [1] Sec. 2.1.
        latent_norms = (spec.q_lora_rank or 0) + spec.kv_lora_rank
        return weights + latent_norms
    q, kv = spec.q_dim, spec.kv_dim
    biases = (q + 2 * kv) * spec.qkv_bias + spec.d_model * spec.attn_out_bias
    qk_norms = 2 * spec.head_size * spec.qk_norm    # one RMSNorm for q, one for k, per head
    sinks = spec.n_heads * spec.attention_sinks      # one learned logit per query head [4]
    return weights + biases + qk_norms + sinks


def router_params(spec: ModelSpec) -> int:
    """Router of one MoE layer: ``Linear(d, E)``, its bias, the selection-only score bias."""
    E = spec.n_experts
    return spec.d_model * E + E * spec.router_bias + E * spec.router_score_bias


def shared_mlp_params(spec: ModelSpec) -> int:
    """The always-used shared expert MLP of one MoE layer (0 without one)."""
    return one_mlp_params(spec, spec.shared_expert_ffn_size) if spec.shared_expert_ffn_size else 0


def mlp_params(spec: ModelSpec, kind: MlpKind, experts: int | None = None) -> int:
    """MLP of one layer; for MoE the router, ``experts`` routed experts (default: all) and the
    shared expert."""
    if kind == "dense":
        return one_mlp_params(spec, spec.ffn_size)
    experts = spec.n_experts if experts is None else experts
    return (router_params(spec) + experts * one_mlp_params(spec, spec.expert_size)
            + shared_mlp_params(spec))


def mlp_matmul_params(spec: ModelSpec, kind: MlpKind) -> dict[str, int]:
    """Weights one token multiplies in the MLP: ``{"router": d*E, "mlp": k experts + shared}``."""
    d, m = spec.d_model, spec.mlp_matrices
    if kind == "dense":
        return {"router": 0, "mlp": m * d * spec.ffn_size}
    routed = spec.experts_per_token * m * d * spec.expert_size
    shared = m * d * spec.shared_expert_ffn_size
    return {"router": d * spec.n_experts, "mlp": routed + shared}


def block_norm_params(spec: ModelSpec) -> int:
    """The two pre-norms of a block."""
    return 2 * spec.norm_params_per_norm


def _layer(spec: ModelSpec, index: int) -> LayerSpec:
    kind = mlp_kind(spec, index)
    mask, window = mask_of(spec, index)
    mlp_all = mlp_params(spec, kind)
    experts = spec.n_experts * one_mlp_params(spec, spec.expert_size) if kind == "moe" else 0
    idle = ((spec.n_experts - spec.experts_per_token) * one_mlp_params(spec, spec.expert_size)
            if kind == "moe" else 0)
    attention = attention_params(spec)
    norms = block_norm_params(spec)
    return LayerSpec(
        index=index, mlp=kind, attention=spec.attention_kind, mask=mask, window=window,
        attention_params=attention, mlp_params=mlp_all, norm_params=norms,
        expert_params=experts, active_params=attention + mlp_all + norms - idle,
        matmul_params=attention_matmul_params(spec) + sum(mlp_matmul_params(spec, kind).values()),
    )


@functools.lru_cache(maxsize=512)
def layer_specs(spec: ModelSpec) -> tuple[LayerSpec, ...]:
    """Every layer of ``spec``, in order (cached: specs are frozen and hashable)."""
    return tuple(_layer(spec, i) for i in range(spec.n_layers))


def mtp_module_params(spec: ModelSpec) -> int:
    """Unique parameters of one multi-token-prediction module (DeepSeek-V3 [1] Sec. 2.2).

    Two RMSNorms (of the previous depth's hidden state and of the next token's embedding), the
    projection ``M_k`` of their concatenation (``eh_proj``, 2d -> d), one transformer block like
    the main model's last layer, and the output head's RMSNorm. The embedding and the output
    head are shared with the main model (Eq. 21-23) and are not counted again.
    """
    d = spec.d_model
    last = layer_specs(spec)[-1]
    return 3 * spec.norm_params_per_norm + 2 * d * d + last.params


# ---------------------------------------------------------------------------- shapes
def _linear(name: str, n_in: int, n_out: int, bias: bool) -> Shapes:
    return [(f"{name}.weight", (n_out, n_in))] + ([(f"{name}.bias", (n_out,))] if bias else [])


def _norm(spec: ModelSpec, name: str, width: int | None = None) -> Shapes:
    width = spec.d_model if width is None else width
    has_bias = spec.norm == "layernorm" and spec.norm_bias
    return [(f"{name}.weight", (width,))] + ([(f"{name}.bias", (width,))] if has_bias else [])


def _mlp(spec: ModelSpec, prefix: str, hidden: int) -> Shapes:
    d = spec.d_model
    out: Shapes = []
    if spec.ffn_kind == "swiglu":
        out += _linear(f"{prefix}gate", d, hidden, spec.mlp_bias)
    out += _linear(f"{prefix}up", d, hidden, spec.mlp_bias)
    out += _linear(f"{prefix}down", hidden, d, spec.mlp_bias)
    return out


def _attention_shapes(spec: ModelSpec) -> Shapes:
    d, H = spec.d_model, spec.n_heads
    if spec.attention_kind == "mla":
        nope, rope, v, r_kv = (spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim,
                               spec.kv_lora_rank)
        if spec.q_lora_rank is None:
            out = _linear("attn.q", d, H * (nope + rope), False)
        else:
            out = (_linear("attn.q_a", d, spec.q_lora_rank, False)
                   + [("attn.q_a_norm.weight", (spec.q_lora_rank,))]
                   + _linear("attn.q_b", spec.q_lora_rank, H * (nope + rope), False))
        out += _linear("attn.kv_a", d, r_kv + rope, False) + [("attn.kv_a_norm.weight", (r_kv,))]
        out += _linear("attn.kv_b", r_kv, H * (nope + v), False)
        return out + _linear("attn.o", H * v, d, False)
    q, kv = spec.q_dim, spec.kv_dim
    out = _linear("attn.q", d, q, spec.qkv_bias) + _linear("attn.k", d, kv, spec.qkv_bias)
    out += _linear("attn.v", d, kv, spec.qkv_bias)
    if spec.qk_norm:
        out += [("attn.q_norm.weight", (spec.head_size,)),
                ("attn.k_norm.weight", (spec.head_size,))]
    out += _linear("attn.o", q, d, spec.attn_out_bias)
    return out + ([("attn.sinks", (H,))] if spec.attention_sinks else [])


def layer_parameter_shapes(spec: ModelSpec, index: int) -> Shapes:
    """Names and torch ``(out, in)`` shapes of layer ``index``'s parameters, relative to the
    block (the names of :class:`fsdpsim.measured.harness.reference.Block` for the features it
    has)."""
    d, E = spec.d_model, spec.n_experts
    block: Shapes = _norm(spec, "attn_norm") + _attention_shapes(spec) + _norm(spec, "mlp_norm")
    if mlp_kind(spec, index) == "dense":
        return block + _mlp(spec, "mlp.", spec.ffn_size)
    block += _linear("mlp.router", d, E, spec.router_bias)
    if spec.router_score_bias:
        block.append(("mlp.router.score_bias", (E,)))
    for e in range(E):
        block += _mlp(spec, f"mlp.experts.{e}.", spec.expert_size)
    if spec.shared_expert_ffn_size:
        block += _mlp(spec, "mlp.shared.", spec.shared_expert_ffn_size)
    return block


def root_parameter_shapes(spec: ModelSpec) -> Shapes:
    """Everything outside the blocks: token embedding, learned positions, final norm, untied
    LM head and its bias. Tied weights appear once (under ``tok_emb``)."""
    V, d = spec.vocab_size, spec.d_model
    root: Shapes = [("tok_emb.weight", (V, d))]
    if spec.position == "learned":
        root.append(("pos_emb.weight", (spec.max_seq_len, d)))
    if spec.final_norm:
        root += _norm(spec, "norm")
    if not spec.tied_embeddings:
        root.append(("lm_head.weight", (V, d)))
    if spec.lm_head_bias:
        root.append(("lm_head.bias", (V,)))
    return root


def mtp_parameter_shapes(spec: ModelSpec) -> Shapes:
    """One multi-token-prediction module's own parameters (:func:`mtp_module_params`)."""
    d = spec.d_model
    return (_norm(spec, "enorm") + _norm(spec, "hnorm") + _linear("eh_proj", 2 * d, d, False)
            + [(f"block.{n}", s) for n, s in layer_parameter_shapes(spec, spec.n_layers - 1)]
            + _norm(spec, "head_norm"))


# ---------------------------------------------------------------------------- summary
def pattern_summary(spec: ModelSpec) -> str:
    """The layer pattern in one line, e.g. ``"3 dense + 58 MoE layers, MLA"`` or
    ``"36 MoE layers; attention 18 sliding-window 128 + 18 full"``."""
    layers = layer_specs(spec)
    n_moe = sum(layer.mlp == "moe" for layer in layers)
    n_dense = len(layers) - n_moe
    if n_moe and n_dense:
        text = f"{n_dense} dense + {n_moe} MoE layers"
    elif n_moe:
        text = f"{n_moe} MoE layers"
    else:
        text = f"{n_dense} dense layers"
    if spec.is_moe:
        shared = " + shared" if spec.shared_expert_ffn_size else ""
        text += f" ({spec.n_experts} experts, top-{spec.experts_per_token}{shared})"
    text += ", MLA" if spec.attention_kind == "mla" else ""
    masks: dict[str, int] = {}
    for layer in layers:
        label = {"full": "full", "sliding": f"sliding-window {layer.window}",
                 "chunked": f"chunked {layer.window}"}[layer.mask]
        masks[label] = masks.get(label, 0) + 1
    if set(masks) != {"full"}:
        text += "; attention " + " + ".join(f"{n} {label}" for label, n in masks.items())
    if spec.mtp_layers:
        text += f"; {spec.mtp_layers} MTP module{'s' * (spec.mtp_layers > 1)}"
    return text
