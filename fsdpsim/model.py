"""Decoder-only transformer specifications and their exact parameter counts.

A :class:`ModelSpec` describes the architecture only (sizes, which biases and norms exist, how
positions are encoded, dense or mixture-of-experts MLP); it knows nothing about parallelism or
hardware. Parameter counts are exact integers for the reference module in
:mod:`fsdpsim.validation.reference`, and the tests check them against real torch modules.

Counting, per layer of width ``d`` (``q`` = query width ``n_heads * head_size``, ``kv`` = key or
value width ``n_kv_heads * head_size``, ``f`` = MLP hidden width)::

    attention = d*q + 2*d*kv + q*d            [+ q + 2*kv if qkv_bias] [+ d if attn_out_bias]
    gelu MLP  = 2*d*f                          [+ f + d if mlp_bias]
    swiglu MLP= 3*d*f                          [+ 2*f + d if mlp_bias]
    MoE MLP   = d*E (router) + E * expert MLP
    norms     = 2 * d * (2 if LayerNorm with bias else 1)

With ``q = kv = d``, ``f = 4d``, GELU and every bias this is the familiar
``12*d**2 + 13*d`` per layer (Kaplan et al. 2020, Table 1; Narayanan et al. 2021, Eq. 2).

References
----------
[1] Kaplan et al., "Scaling Laws for Neural Language Models", arXiv:2001.08361 (2020), Table 1.
[2] Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM", SC21, arXiv:2104.04473, Section 5.1 (P = 12 l h^2 (1 + 13/12h + (V+s)/12lh)).
[3] Shazeer, "GLU Variants Improve Transformer", arXiv:2002.05202 (2020), Eq. 6 (FFN_SwiGLU).
[4] Touvron et al., "LLaMA: Open and Efficient Foundation Language Models", arXiv:2302.13971
    (2023), Section 2.2 (SwiGLU with hidden 2/3 * 4d, RMSNorm pre-normalisation, RoPE).
[5] Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
    Checkpoints", arXiv:2305.13245 (2023) (grouped-query attention; MQA = one KV head).
[6] Fedus et al., "Switch Transformers", arXiv:2101.03961 (2021); Jiang et al., "Mixtral of
    Experts", arXiv:2401.04088 (2024), Section 2.1 (top-k router over E expert MLPs).
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Literal

from fsdpsim.errors import ConfigError, suggest

FfnKind = Literal["gelu", "swiglu"]
Position = Literal["learned", "rotary", "alibi", "none"]
Norm = Literal["layernorm", "rmsnorm"]

FFN_KINDS: tuple[str, ...] = ("gelu", "swiglu")
POSITIONS: tuple[str, ...] = ("learned", "rotary", "alibi", "none")
NORMS: tuple[str, ...] = ("layernorm", "rmsnorm")

#: Keys of :meth:`ModelSpec.param_counts`, in display order.
COMPONENTS: tuple[str, ...] = (
    "embedding",
    "position_embedding",
    "attention",
    "mlp",
    "norms",
    "lm_head",
)

Shapes = list[tuple[str, tuple[int, ...]]]


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only, pre-norm transformer language model.

    Every field is keyword-only. Invalid values raise :class:`~fsdpsim.errors.ConfigError`
    naming the field, the model and what is accepted.
    """

    name: str
    """Identifier shown in reports (preset id or the source of an imported config)."""
    n_layers: int
    """Number of transformer blocks ``L``."""
    d_model: int
    """Residual stream width ``d`` (``hidden_size``)."""
    n_heads: int
    """Number of query heads."""
    n_kv_heads: int | None = None
    """Number of key/value heads; None means ``n_heads`` (multi-head attention). Fewer heads
    give grouped-query attention, one head gives multi-query attention [5]."""
    head_dim: int | None = None
    """Width of one attention head; None means ``d_model // n_heads``."""
    ffn_size: int
    """Hidden width of the dense MLP (``intermediate_size``); the expert width of a MoE MLP
    unless ``expert_ffn_size`` is given."""
    ffn_kind: FfnKind
    """``"gelu"``: two matrices up/down with any elementwise activation (GPT-2/3, MPT, NeoX).
    ``"swiglu"``: gated three matrices gate/up/down (Shazeer 2020 [3]; Llama [4])."""
    vocab_size: int
    """Rows of the token embedding (and of the LM head)."""
    tied_embeddings: bool
    """True when the LM head reuses the token-embedding matrix (counted once)."""
    position: Position
    """``"learned"`` adds a ``max_seq_len x d_model`` table; rotary, ALiBi and none have no
    parameters."""
    max_seq_len: int
    """Rows of the learned position table; recorded but irrelevant for other encodings."""
    norm: Norm
    """``"layernorm"`` (scale, optional bias) or ``"rmsnorm"`` (scale only)."""
    norm_bias: bool
    """LayerNorm has a bias vector; must be False for RMSNorm."""
    qkv_bias: bool
    """Query, key and value projections have biases (GPT-2/3, Qwen2)."""
    attn_out_bias: bool
    """The attention output projection has a bias."""
    mlp_bias: bool
    """The MLP (or every expert's) projections have biases."""
    lm_head_bias: bool = False
    """The LM head has a ``vocab_size`` bias (rare; kept even when the weight is tied)."""
    final_norm: bool = True
    """A norm after the last block, before the LM head."""
    n_experts: int = 0
    """Experts per MoE layer ``E``; 0 means a dense MLP. The router is
    ``Linear(d_model, n_experts, bias=False)`` [6]."""
    experts_per_token: int = 0
    """Experts each token is routed to (top-k); 0 for a dense model."""
    expert_ffn_size: int | None = None
    """Hidden width of one expert; None means ``ffn_size``. Only for MoE models."""

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        where = f"model {self.name!r}" if isinstance(self.name, str) else "model"
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError(f"model name {self.name!r} must be a non-empty string")
        for field in ("n_layers", "d_model", "n_heads", "ffn_size", "vocab_size", "max_seq_len"):
            self._check_int(field, where, minimum=1)
        for field in ("n_kv_heads", "head_dim", "expert_ffn_size"):
            if getattr(self, field) is not None:
                self._check_int(field, where, minimum=1)
        for field in ("n_experts", "experts_per_token"):
            self._check_int(field, where, minimum=0)
        for field in (
            "tied_embeddings", "norm_bias", "qkv_bias", "attn_out_bias", "mlp_bias",
            "lm_head_bias", "final_norm",
        ):
            if not isinstance(getattr(self, field), bool):
                raise ConfigError(
                    f"{field}={getattr(self, field)!r} in {where} must be True or False"
                )
        for field, accepted in (("ffn_kind", FFN_KINDS), ("position", POSITIONS),
                                ("norm", NORMS)):
            value = getattr(self, field)
            if value not in accepted:
                hint = suggest(value, accepted) if isinstance(value, str) else ""
                raise ConfigError(
                    f"{field}={value!r} in {where} is not one of: {', '.join(accepted)}{hint}"
                )

        kv = self.kv_heads
        if kv > self.n_heads or self.n_heads % kv != 0:
            raise ConfigError(
                f"n_heads({self.n_heads}) % n_kv_heads({kv}) != 0 in {where}: the number of "
                f"key/value heads must divide the number of query heads"
            )
        if self.head_dim is None and self.d_model % self.n_heads != 0:
            raise ConfigError(
                f"d_model({self.d_model}) % n_heads({self.n_heads}) != 0 in {where}: give "
                f"head_dim explicitly or choose n_heads dividing d_model"
            )
        if self.norm == "rmsnorm" and self.norm_bias:
            raise ConfigError(
                f"norm_bias=True with norm='rmsnorm' in {where}: RMSNorm has no bias; "
                f"use norm='layernorm' or norm_bias=False"
            )
        if self.n_experts == 0:
            if self.experts_per_token != 0 or self.expert_ffn_size is not None:
                raise ConfigError(
                    f"experts_per_token({self.experts_per_token}) / expert_ffn_size"
                    f"({self.expert_ffn_size}) set in {where} but n_experts is 0 (dense); "
                    f"set n_experts >= 1 or leave them at 0 / None"
                )
        elif not 1 <= self.experts_per_token <= self.n_experts:
            raise ConfigError(
                f"experts_per_token({self.experts_per_token}) in {where} must be between 1 "
                f"and n_experts({self.n_experts})"
            )

    def _check_int(self, field: str, where: str, *, minimum: int) -> None:
        value = getattr(self, field)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ConfigError(f"{field}={value!r} in {where} must be an integer >= {minimum}")
        if value < minimum:
            raise ConfigError(f"{field}={value} in {where} must be an integer >= {minimum}")
        object.__setattr__(self, field, int(value))  # numpy integers -> int

    # ------------------------------------------------------------------ derived sizes
    @property
    def kv_heads(self) -> int:
        """Key/value heads (``n_kv_heads``, defaulting to ``n_heads``)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_size(self) -> int:
        """Width of one head (``head_dim``, defaulting to ``d_model // n_heads``)."""
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    @property
    def q_dim(self) -> int:
        """Query (and attention output) width ``n_heads * head_size``."""
        return self.n_heads * self.head_size

    @property
    def kv_dim(self) -> int:
        """Key (= value) width ``kv_heads * head_size``."""
        return self.kv_heads * self.head_size

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts MLP."""
        return self.n_experts > 0

    @property
    def expert_size(self) -> int:
        """Hidden width of one expert (``expert_ffn_size`` or ``ffn_size``)."""
        return self.ffn_size if self.expert_ffn_size is None else self.expert_ffn_size

    @property
    def active_ffn_size(self) -> int:
        """MLP hidden width one token passes through: ``ffn_size``, or top-k x expert width."""
        return self.experts_per_token * self.expert_size if self.is_moe else self.ffn_size

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices per MLP (or expert): 2 for GELU, 3 for SwiGLU."""
        return 3 if self.ffn_kind == "swiglu" else 2

    @property
    def norm_params_per_norm(self) -> int:
        """Parameters of one norm layer: the scale, plus a bias for LayerNorm with bias."""
        return self.d_model * (2 if self.norm == "layernorm" and self.norm_bias else 1)

    # ------------------------------------------------------------------ per-layer counts
    def _attention_layer_params(self) -> int:
        d, q, kv = self.d_model, self.q_dim, self.kv_dim
        weights = d * q + 2 * d * kv + q * d  # Wq, Wk, Wv (GQA: kv <= q) and Wo
        biases = (q + 2 * kv) * self.qkv_bias + d * self.attn_out_bias
        return weights + biases

    def _one_mlp_params(self, hidden: int) -> int:
        """One dense MLP (or one expert) of hidden width ``hidden``."""
        d = self.d_model
        weights = self.mlp_matrices * d * hidden
        # gate/up biases are `hidden` wide, the down-projection bias is `d` wide.
        biases = ((self.mlp_matrices - 1) * hidden + d) * self.mlp_bias
        return weights + biases

    def _mlp_layer_params(self, experts: int | None = None) -> int:
        """MLP of one layer; for MoE the router plus ``experts`` experts (default: all)."""
        if not self.is_moe:
            return self._one_mlp_params(self.ffn_size)
        experts = self.n_experts if experts is None else experts
        router = self.d_model * self.n_experts
        return router + experts * self._one_mlp_params(self.expert_size)

    @property
    def block_params(self) -> int:
        """Parameters of one transformer block (attention, MLP with all experts, two norms)."""
        return (
            self._attention_layer_params()
            + self._mlp_layer_params()
            + 2 * self.norm_params_per_norm
        )

    # ------------------------------------------------------------------ model counts
    def param_counts(self) -> dict[str, int]:
        """Exact parameter counts by component (keys :data:`COMPONENTS`).

        ``embedding`` = V*d; ``position_embedding`` = max_seq_len*d for learned positions;
        ``attention``, ``mlp`` (router and all experts) and ``norms`` (block norms plus the
        final norm) summed over layers; ``lm_head`` = V*d when untied (0 when tied) plus a
        V-wide bias if any. Tied weights are counted once, as torch's ``parameters()`` does.
        """
        d, V, L = self.d_model, self.vocab_size, self.n_layers
        return {
            "embedding": V * d,
            "position_embedding": self.max_seq_len * d if self.position == "learned" else 0,
            "attention": L * self._attention_layer_params(),
            "mlp": L * self._mlp_layer_params(),
            "norms": (2 * L + self.final_norm) * self.norm_params_per_norm,
            "lm_head": (0 if self.tied_embeddings else V * d) + V * self.lm_head_bias,
        }

    @property
    def n_params(self) -> int:
        """Total parameters (sum of :meth:`param_counts`)."""
        return sum(self.param_counts().values())

    @property
    def active_params(self) -> int:
        """Parameters used per token: all of them for dense models; for MoE only the
        ``experts_per_token`` routed experts of each layer (the router is always used)."""
        idle_experts = self.n_experts - self.experts_per_token
        idle = self.n_layers * idle_experts * self._one_mlp_params(self.expert_size)
        return self.n_params - (idle if self.is_moe else 0)

    @property
    def matmul_params(self) -> int:
        """Weights multiplied per token: for FLOP counting (2 FLOP per weight forward).

        Counts every projection weight in attention, the active MLP weights (router and the
        ``experts_per_token`` routed experts for MoE) and the LM head (V*d, also when tied);
        excludes embedding lookups, norms and biases. Attention score/value products are not
        weights and are counted separately by the FLOP model (Kaplan et al. 2020 [1], Sec 2.1).
        """
        d, q, kv = self.d_model, self.q_dim, self.kv_dim
        attention = d * q + 2 * d * kv + q * d
        if self.is_moe:
            mlp = (
                d * self.n_experts
                + self.experts_per_token * self.mlp_matrices * d * self.expert_size
            )
        else:
            mlp = self.mlp_matrices * d * self.ffn_size
        return self.n_layers * (attention + mlp) + self.vocab_size * d

    # ------------------------------------------------------------------ shapes
    def unit_parameter_shapes(self) -> dict[str, Shapes]:
        """Parameter names and shapes of one block and of the root, as torch registers them.

        ``"block"``: one transformer block, names relative to the block, in the registration
        order of :class:`fsdpsim.validation.reference.Block`. ``"root"``: everything outside
        the blocks (token embedding, learned positions, final norm, untied LM head and its
        bias). Tied weights appear once (under ``tok_emb``). Weights use torch's
        ``(out_features, in_features)`` layout, which is what FSDP2 shards on dim 0.
        """
        d, q, kv, V = self.d_model, self.q_dim, self.kv_dim, self.vocab_size

        def linear(name: str, n_in: int, n_out: int, bias: bool) -> Shapes:
            return [(f"{name}.weight", (n_out, n_in))] + (
                [(f"{name}.bias", (n_out,))] if bias else []
            )

        def norm(name: str) -> Shapes:
            has_bias = self.norm == "layernorm" and self.norm_bias
            return [(f"{name}.weight", (d,))] + ([(f"{name}.bias", (d,))] if has_bias else [])

        def mlp(prefix: str, hidden: int) -> Shapes:
            out: Shapes = []
            if self.ffn_kind == "swiglu":
                out += linear(f"{prefix}gate", d, hidden, self.mlp_bias)
            out += linear(f"{prefix}up", d, hidden, self.mlp_bias)
            out += linear(f"{prefix}down", hidden, d, self.mlp_bias)
            return out

        block: Shapes = norm("attn_norm")
        block += linear("attn.q", d, q, self.qkv_bias)
        block += linear("attn.k", d, kv, self.qkv_bias)
        block += linear("attn.v", d, kv, self.qkv_bias)
        block += linear("attn.o", q, d, self.attn_out_bias)
        block += norm("mlp_norm")
        if self.is_moe:
            block += linear("mlp.router", d, self.n_experts, False)
            for e in range(self.n_experts):
                block += mlp(f"mlp.experts.{e}.", self.expert_size)
        else:
            block += mlp("mlp.", self.ffn_size)

        root: Shapes = [("tok_emb.weight", (V, d))]
        if self.position == "learned":
            root.append(("pos_emb.weight", (self.max_seq_len, d)))
        if self.final_norm:
            root += norm("norm")
        if not self.tied_embeddings:
            root.append(("lm_head.weight", (V, d)))
        if self.lm_head_bias:
            root.append(("lm_head.bias", (V,)))
        return {"block": block, "root": root}

    # ------------------------------------------------------------------ copies
    def with_seq_len(self, seq_len: int) -> ModelSpec:
        """A copy with ``max_seq_len = seq_len``.

        A learned position table grows with the training sequence length, so its parameter
        count does too (MosaicML's llm-foundry benchmark table counts it that way).
        """
        if isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral) or seq_len < 1:
            raise ConfigError(
                f"sequence length {seq_len!r} for model {self.name!r} must be an integer >= 1"
            )
        return dataclasses.replace(self, max_seq_len=int(seq_len))


#: Largest model read from a file (config.json, a measurement row): 10^15 parameters, about a
#: thousand times the largest trained, and an attention width (heads x head size) of 2^20.
#: Beyond them a "model" is a typo, and its FLOP counts lose all meaning.
MAX_PARAMS = 10**15
MAX_ATTENTION_WIDTH = 2**20


def check_plausible_size(spec: ModelSpec, where: str) -> ModelSpec:
    """``spec`` itself, or a :class:`ConfigError` naming ``where`` when it is implausibly big."""
    if spec.n_params > MAX_PARAMS:
        raise ConfigError(f"{where}: a model of {spec.n_params:.3g} parameters is not accepted; "
                          f"accepted: at most {MAX_PARAMS:.0e} parameters")
    if max(spec.q_dim, spec.kv_dim) > MAX_ATTENTION_WIDTH:
        raise ConfigError(f"{where}: an attention width (heads x head size) of "
                          f"{max(spec.q_dim, spec.kv_dim):,} is not accepted; accepted: at most "
                          f"{MAX_ATTENTION_WIDTH:,}")
    return spec
