"""Decoder-only transformer specifications and their exact parameter counts.

A :class:`ModelSpec` describes the architecture only (sizes, which biases and norms exist, how
positions are encoded, dense or mixture-of-experts MLP); it knows nothing about parallelism or
hardware. Parameter counts are exact integers for the reference module in
:mod:`fsdpsim.measured.harness.reference` (the dense/MoE block the engine models) and for the module
lists of the newer families in :mod:`fsdpsim.measured.harness.hf_reference`; the tests check them
against real torch modules.

Counting, per layer of width ``d`` (``q`` = query width ``n_heads * head_size``, ``kv`` = key or
value width ``n_kv_heads * head_size``, ``f`` = MLP hidden width)::

    attention = d*q + 2*d*kv + q*d            [+ q + 2*kv if qkv_bias] [+ d if attn_out_bias]
    gelu MLP  = 2*d*f                          [+ f + d if mlp_bias]
    swiglu MLP= 3*d*f                          [+ 2*f + d if mlp_bias]
    MoE MLP   = d*E (router) + E * expert MLP  [+ shared expert MLP] [+ E router / score bias]
    norms     = 2 * d * (2 if LayerNorm with bias else 1)

plus q/k norms and attention sinks where present; multi-head latent attention [7] is counted
in :mod:`fsdpsim.model.layers`.

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
[7] DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437 (2024), Sec. 2.1 (MLA,
    DeepSeekMoE with shared experts and the auxiliary-loss-free score bias), Sec. 2.2 (MTP).
[8] Qwen Team, "Qwen3 Technical Report", arXiv:2505.09388 (2025), Sec. 2 (QK-Norm).
[9] OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", arXiv:2508.10925 (2025), Sec. 2.1
    (alternating banded-window and dense attention, attention sinks, biased router).
[10] Meta, Llama 4 model card (meta-llama/llama-models, models/llama4/MODEL_CARD.md):
    chunked attention on three of four layers, a shared expert, interleaved MoE layers.

Layers may differ (dense and MoE layers, full / sliding-window / chunked attention): the
per-layer view is :attr:`ModelSpec.layers` (:mod:`fsdpsim.model.layers`), and forward FLOPs per
token per layer are :meth:`ModelSpec.layer_flops_per_token` (:mod:`fsdpsim.model.flops`).
"""

from __future__ import annotations

import dataclasses
import numbers
import functools
from dataclasses import dataclass
from typing import Literal

from fsdpsim.model import checks as model_checks

from fsdpsim.model import flops as model_flops

from fsdpsim.model import layers as model_layers
from fsdpsim.util.errors import ConfigError
from fsdpsim.model.layers import LayerSpec

FfnKind = Literal["gelu", "swiglu"]
Position = Literal["learned", "rotary", "alibi", "none"]
Norm = Literal["layernorm", "rmsnorm"]
AttentionKind = Literal["gqa", "mla"]
AttentionMask = Literal["full", "sliding", "chunked"]


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

    Every field is keyword-only. Invalid values raise :class:`~fsdpsim.util.errors.ConfigError`
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
    dense_layers: tuple[int, ...] = ()
    """Indices (0-based, increasing) of the layers of a MoE model whose MLP is the dense
    ``ffn_size`` MLP: DeepSeek-V3's ``first_k_dense_replace`` (0, 1, 2) [7], Llama 4
    Maverick's even layers [10], Qwen3's ``mlp_only_layers``. Empty: every layer is MoE."""
    shared_expert_ffn_size: int = 0
    """Hidden width of the shared expert every token passes through besides its routed ones
    (DeepSeek-V3: ``n_shared_experts x moe_intermediate_size`` [7]; Llama 4: one expert of
    ``intermediate_size`` [10]); 0 for none."""
    router_bias: bool = False
    """The router ``Linear(d_model, n_experts)`` has a bias (gpt-oss [9])."""
    router_groups: int = 1
    """Group-limited routing: the experts form this many equal groups of consecutive indices
    and each token picks its top-k experts inside ``router_group_top_k`` of them (DeepSeek-V3
    ``n_group`` 8 / ``topk_group`` 4 [7], Megatron ``--moe-router-num-groups``); 1 = no
    groups."""
    router_group_top_k: int = 1
    """Groups each token may route to (``topk_group``); ``router_groups`` = 1 leaves it 1."""
    router_score_bias: bool = False
    """A per-expert bias added to the routing scores for expert selection only, adjusted
    outside gradient descent (DeepSeek-V3's auxiliary-loss-free balancing,
    ``e_score_correction_bias`` [7]); counted as a parameter: it is in the checkpoint and an
    ``nn.Parameter`` in DeepSeek's own modelling code."""
    attention_kind: AttentionKind = "gqa"
    """``"gqa"``: query, key, value and output projections (MHA, GQA, MQA).
    ``"mla"``: multi-head latent attention, low-rank compressed queries and keys/values [7]."""
    q_lora_rank: int | None = None
    """MLA: rank ``d_c'`` of the query compression (None: a full query projection)."""
    kv_lora_rank: int | None = None
    """MLA: width ``d_c`` of the compressed key/value latent."""
    qk_nope_head_dim: int | None = None
    """MLA: per-head query/key width without rotary positions (``d_h``)."""
    qk_rope_head_dim: int | None = None
    """MLA: width of the decoupled rotary query/key part (``d_h^R``; the key part is shared by
    all heads)."""
    v_head_dim: int | None = None
    """MLA: per-head value width."""
    qk_norm: bool = False
    """An RMSNorm of width ``head_size`` on every query head and one on every key head, each
    shared across heads (Qwen3 [8]). Llama 4's weightless L2 norm needs no field."""
    attention_sinks: bool = False
    """One learned logit per query head joins the softmax (gpt-oss [9])."""
    attention_pattern: tuple[AttentionMask, ...] = ("full",)
    """Attention mask per layer, repeated over the layers (layer ``i`` uses entry
    ``i % len``): ``"full"`` causal, ``"sliding"`` (each query sees the last
    ``sliding_window`` tokens), ``"chunked"`` (only its own chunk of ``attention_chunk_size``
    tokens). gpt-oss: ("sliding", "full"); Llama 4: 3 x "chunked" then "full"."""
    sliding_window: int | None = None
    """Tokens a query sees in a ``"sliding"`` layer, itself included [tokens]."""
    attention_chunk_size: int | None = None
    """Chunk length of a ``"chunked"`` layer [tokens]."""
    mtp_layers: int = 0
    """Multi-token-prediction modules trained beside the model (DeepSeek-V3's
    ``num_nextn_predict_layers`` [7]); not part of :attr:`n_params` (see :attr:`mtp_params`)."""

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        model_checks.check_fields(self)

    # ------------------------------------------------------------------ derived sizes
    @property
    def kv_heads(self) -> int:
        """Key/value heads (``n_kv_heads``, defaulting to ``n_heads``; MLA: ``n_heads``)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_size(self) -> int:
        """Width of one query/key head (``head_dim``, defaulting to ``d_model // n_heads``;
        MLA: ``qk_nope_head_dim + qk_rope_head_dim``)."""
        if self.attention_kind == "mla":
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    @property
    def value_head_size(self) -> int:
        """Width of one value head: ``head_size``, MLA's ``v_head_dim``."""
        return self.v_head_dim if self.attention_kind == "mla" else self.head_size

    @property
    def q_dim(self) -> int:
        """Query width ``n_heads * head_size`` (the attention output width unless MLA)."""
        return self.n_heads * self.head_size

    @property
    def kv_dim(self) -> int:
        """Key (= value, unless MLA) width ``kv_heads * head_size``."""
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
        """MLP hidden width one token passes through in a MoE layer (top-k x expert width plus
        the shared expert), or ``ffn_size`` for a dense model."""
        if not self.is_moe:
            return self.ffn_size
        return self.experts_per_token * self.expert_size + self.shared_expert_ffn_size

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices per MLP (or expert): 2 for GELU, 3 for SwiGLU."""
        return 3 if self.ffn_kind == "swiglu" else 2

    @property
    def norm_params_per_norm(self) -> int:
        """Parameters of one norm layer: the scale, plus a bias for LayerNorm with bias."""
        return self.d_model * (2 if self.norm == "layernorm" and self.norm_bias else 1)

    # ------------------------------------------------------------------ per-layer view
    @property
    def layers(self) -> tuple[LayerSpec, ...]:
        """Every layer: dense or MoE MLP, attention kind and mask, exact counts split into
        dense and expert parameters (:class:`fsdpsim.model.layers.LayerSpec`)."""
        return model_layers.layer_specs(self)

    @property
    def uniform_layers(self) -> bool:
        """True when every layer has the same parameters (masks may still differ)."""
        return not self.is_moe or not self.dense_layers

    @property
    def layer_pattern(self) -> str:
        """The layer pattern in one line, e.g. ``"3 dense + 58 MoE layers (256 experts, top-8 +
        shared), MLA; 1 MTP module"``."""
        return model_layers.pattern_summary(self)

    @property
    def block_params(self) -> int:
        """Parameters of one transformer block (attention, MLP with all experts, two norms).

        Raises
        ------
        ConfigError
            When the blocks differ (dense and MoE layers): use :attr:`layers`.
        """
        self._require_uniform("block_params")
        return self.layers[0].params

    def _require_uniform(self, what: str) -> None:
        if not self.uniform_layers:
            raise ConfigError(f"model {self.name!r} has {self.layer_pattern}: its blocks differ, "
                              f"so it has no single {what}; use the per-layer view (layers)")

    # ------------------------------------------------------------------ model counts
    def param_counts(self) -> dict[str, int]:
        """Exact parameter counts of the main model by component (keys :data:`COMPONENTS`).

        ``embedding`` = V*d; ``position_embedding`` = max_seq_len*d for learned positions;
        ``attention`` (projections, their biases, q/k or MLA latent norms, sinks), ``mlp``
        (dense MLPs; routers, all routed and shared experts) and ``norms`` (block norms plus
        the final norm) summed over layers; ``lm_head`` = V*d when untied (0 when tied) plus a
        V-wide bias if any. Tied weights are counted once, as torch's ``parameters()`` does.
        Multi-token-prediction modules are not included (:attr:`mtp_params`).
        """
        d, V = self.d_model, self.vocab_size
        layers = self.layers
        return {
            "embedding": V * d,
            "position_embedding": self.max_seq_len * d if self.position == "learned" else 0,
            "attention": sum(layer.attention_params for layer in layers),
            "mlp": sum(layer.mlp_params for layer in layers),
            "norms": (sum(layer.norm_params for layer in layers)
                      + self.final_norm * self.norm_params_per_norm),
            "lm_head": (0 if self.tied_embeddings else V * d) + V * self.lm_head_bias,
        }

    @property
    def n_params(self) -> int:
        """Total parameters of the main model (sum of :meth:`param_counts`; no MTP modules)."""
        return _n_params(self)

    @property
    def expert_params(self) -> int:
        """Parameters of all routed experts (what an expert-parallel group shards)."""
        return sum(layer.expert_params for layer in self.layers)

    @property
    def dense_params(self) -> int:
        """Every parameter that is not a routed expert: embeddings, attention, norms, routers,
        shared experts, dense MLPs, head (``n_params - expert_params``)."""
        return self.n_params - self.expert_params

    @property
    def active_params(self) -> int:
        """Parameters used per token: all of them for dense models; for MoE only the
        ``experts_per_token`` routed experts of each MoE layer (router and shared expert always
        used). The whole embedding table is included, as Mistral counts (Mixtral 12.9B)."""
        idle = sum(layer.params - layer.active_params for layer in self.layers)
        return self.n_params - idle

    @property
    def active_params_without_embedding(self) -> int:
        """:attr:`active_params` less an untied token-embedding table (a token reads one row
        of it): DeepSeek-V3's "36.6B activated (including 0.9B for the output head)" and
        gpt-oss's active counts use this convention."""
        return self.active_params - (0 if self.tied_embeddings else self.vocab_size * self.d_model)

    @property
    def mtp_params(self) -> int:
        """Unique parameters of the ``mtp_layers`` multi-token-prediction modules; embedding
        and output head are shared with the main model (:func:`model_layers.mtp_module_params`).
        Training with MTP holds ``n_params + mtp_params``; DeepSeek's released checkpoint also
        stores a copy of the embedding and head per module (685B on Hugging Face)."""
        return self.mtp_layers * model_layers.mtp_module_params(self)

    @property
    def matmul_params(self) -> int:
        """Weights multiplied per token: for FLOP counting (2 FLOP per weight forward).

        Counts every projection weight in attention (MLA: down and up projections), the
        active MLP weights (router, the ``experts_per_token`` routed experts and the shared
        expert for MoE layers) and the LM head (V*d, also when tied); excludes embedding
        lookups, norms, biases and sinks. Attention score/value products are not weights and
        are counted separately (:meth:`layer_flops_per_token`; Kaplan et al. 2020 [1], Sec 2.1).
        """
        return sum(layer.matmul_params for layer in self.layers) + self.vocab_size * self.d_model

    # ------------------------------------------------------------------ FLOPs
    def layer_flops_per_token(self, seq_len):
        """Forward FLOPs per token of each layer, for sequences of ``seq_len`` tokens.

        See :func:`fsdpsim.model.flops.layer_flops_per_token`: a dict of arrays of shape
        ``(n_layers,) + shape(seq_len)`` [FLOP/token].
        """
        return model_flops.layer_flops_per_token(self, seq_len)

    def forward_flops_per_token(self, seq_len):
        """Forward FLOPs per token of the whole model, LM head included [FLOP/token]
        (:func:`fsdpsim.model.flops.forward_flops_per_token`)."""
        return model_flops.forward_flops_per_token(self, seq_len)

    # ------------------------------------------------------------------ shapes
    def layer_parameter_shapes(self, index: int) -> Shapes:
        """Names and ``(out, in)`` shapes of layer ``index``'s parameters, relative to its
        block (:func:`fsdpsim.model.layers.layer_parameter_shapes`)."""
        if isinstance(index, bool) or not isinstance(index, numbers.Integral) or not (
                0 <= index < self.n_layers):
            raise ConfigError(f"layer index {index!r} of model {self.name!r} must be between 0 "
                              f"and {self.n_layers - 1}")
        return model_layers.layer_parameter_shapes(self, int(index))

    def unit_parameter_shapes(self) -> dict[str, Shapes]:
        """Parameter names and shapes of one block and of the root, as torch registers them.

        ``"block"``: one transformer block, names relative to the block, in the registration
        order of :class:`fsdpsim.measured.harness.reference.Block`. ``"root"``: everything outside
        the blocks (token embedding, learned positions, final norm, untied LM head and its
        bias). Tied weights appear once (under ``tok_emb``). Weights use torch's
        ``(out_features, in_features)`` layout, which is what FSDP2 shards on dim 0.

        Raises
        ------
        ConfigError
            When the blocks differ (dense and MoE layers): use :meth:`layer_parameter_shapes`.
        """
        self._require_uniform("block shape")
        return {"block": model_layers.layer_parameter_shapes(self, 0),
                "root": model_layers.root_parameter_shapes(self)}

    # ------------------------------------------------------------------ engine support
    @property
    def engine_unsupported(self) -> tuple[str, ...]:
        """Features the step-time engine does not model yet (empty when it models them all;
        :func:`fsdpsim.model.checks.engine_unsupported`)."""
        return model_checks.engine_unsupported(self)

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


@functools.lru_cache(maxsize=512)  # specs are frozen and hashable: the same spec, the same count
def _n_params(spec: ModelSpec) -> int:
    """:attr:`ModelSpec.n_params`, remembered (a sum over every layer)."""
    return sum(spec.param_counts().values())
