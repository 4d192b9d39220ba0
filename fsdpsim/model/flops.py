"""Forward FLOPs per token, layer by layer, following each layer's real structure.

Pure, vectorised functions: ``seq_len`` (and the window sizes) may be numbers or numpy arrays
that broadcast; results are float arrays. A matmul of (m x k) by (k x n) is 2·m·n·k FLOPs, so a
weight used once per token costs 2 FLOPs per token forward (backward 2x that; see
:mod:`fsdpsim.costs.compute`). Not wired into the engine: these are the per-layer terms for it.

Per layer and token, forward:

* attention projections: ``2 * attention_matmul_params`` (MLA: the query down/up projections,
  the joint key/value down projection with the rotary key, the key/value up projection and the
  output projection; DeepSeek-V3 [1] Eq. 1-11, in the training form that materialises keys and
  values per head);
* attention scores and values: ``2 * H * (d_qk + d_v) * keys`` where ``keys`` is the mean number
  of keys a query attends to in a causal sequence of ``s`` tokens: ``(s+1)/2`` for full
  attention, ``mean_i min(i, w)`` for a sliding window of ``w`` tokens (Mistral, gpt-oss [3]),
  ``mean_i ((i-1) mod c) + 1`` for chunks of ``c`` tokens (Llama 4 [4]). These are the exact
  query-key pairs of Hugging Face's masks (``transformers/masking_utils.py``:
  ``kv_idx <= q_idx``, ``kv_idx > q_idx - sliding_window``, ``kv_idx // chunk == q_idx //
  chunk``), i.e. what a kernel that skips masked blocks perfectly executes. gpt-oss's sinks add
  one logit per query and head (no matmul; not counted);
* MLP: ``2 * m * d * f`` for a dense layer (``m`` = 3 for SwiGLU, 2 for GELU); a MoE layer
  multiplies only the ``k`` routed experts and the shared expert, ``2 * m * d * (k f_e + f_s)``
  (DeepSeekMoE [1] Eq. 12; Mixtral [2] Eq. 1; Qwen3 [5]; Llama 4 [4]);
* router: ``2 * d * E`` (the gating logits, computed for every expert).

References
----------
[1] DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437 (2024), Sec. 2.1, 2.2.
[2] Jiang et al., "Mixtral of Experts", arXiv:2401.04088 (2024), Sec. 2.1.
[3] OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", arXiv:2508.10925 (2025), Sec. 2.1
    (banded window of 128 tokens on alternate layers).
[4] Meta, Llama 4 model card (meta-llama/llama-models, models/llama4/MODEL_CARD.md); Hugging
    Face transformers ``models/llama4/modeling_llama4.py`` (commit 000c33f), chunked layers.
[5] Qwen Team, "Qwen3 Technical Report", arXiv:2505.09388 (2025), Sec. 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fsdpsim.model import layers as model_layers

if TYPE_CHECKING:
    from fsdpsim.model.spec import ModelSpec

#: Keys of :func:`layer_flops_per_token`, each [FLOP/token].
LAYER_FLOP_TERMS: tuple[str, ...] = ("attention_projection_flops", "attention_score_flops",
                                     "router_flops", "mlp_flops", "total_flops")


def full_causal_pairs(seq_len):
    """Query-key pairs of causal attention over ``s`` tokens [-]: ``s (s + 1) / 2``."""
    s = np.asarray(seq_len, dtype=float)
    return s * (s + 1.0) / 2.0


def sliding_window_pairs(seq_len, window):
    """Query-key pairs of causal attention where each query sees the last ``w`` tokens, itself
    included [-]: ``sum_{i=1..s} min(i, w) = m (m + 1) / 2 + (s - m) w`` with ``m = min(s, w)``.
    """
    s = np.asarray(seq_len, dtype=float)
    w = np.asarray(window, dtype=float)
    m = np.minimum(s, w)
    return m * (m + 1.0) / 2.0 + (s - m) * w


def chunked_causal_pairs(seq_len, chunk):
    """Query-key pairs of causal attention inside chunks of ``c`` tokens [-]:
    ``n c (c + 1) / 2 + r (r + 1) / 2`` for ``s = n c + r`` (``0 <= r < c``)."""
    s = np.asarray(seq_len, dtype=float)
    c = np.asarray(chunk, dtype=float)
    n = np.floor(s / c)
    r = s - n * c
    return n * c * (c + 1.0) / 2.0 + r * (r + 1.0) / 2.0


def keys_per_query(seq_len, mask: str, window=None):
    """Mean keys a query attends to over a causal sequence of ``seq_len`` tokens [-]."""
    pairs = {"full": lambda: full_causal_pairs(seq_len),
             "sliding": lambda: sliding_window_pairs(seq_len, window),
             "chunked": lambda: chunked_causal_pairs(seq_len, window)}[mask]()
    return pairs / np.asarray(seq_len, dtype=float)


def attention_score_flops_per_token(n_heads, qk_head_dim, v_head_dim, keys):
    """Scores ``Q Kᵀ`` and weighted values ``P V`` per query [FLOP/token]:
    ``2 H d_qk keys + 2 H d_v keys``."""
    return 2.0 * np.asarray(n_heads, dtype=float) * (
        np.asarray(qk_head_dim, dtype=float) + np.asarray(v_head_dim, dtype=float)) * keys


def _check_seq_len(seq_len):
    s = np.asarray(seq_len, dtype=float)
    if s.size and not (np.all(np.isfinite(s)) and np.all(s >= 1)):
        from fsdpsim.util.errors import ConfigError

        raise ConfigError(f"seq_len {seq_len!r} must be a number of tokens >= 1")
    return s


def layer_flops_per_token(spec: ModelSpec, seq_len) -> dict[str, np.ndarray]:
    """Forward FLOPs per token of every layer of ``spec`` [FLOP/token].

    Parameters
    ----------
    spec : the model
    seq_len : tokens per sequence (number or array) [tokens]

    Returns
    -------
    dict with the keys :data:`LAYER_FLOP_TERMS`, each an array of shape
    ``(n_layers,) + shape(seq_len)``: attention projections, attention scores and values (per
    the layer's mask), router, MLP (active experts only) and their total.
    """
    s = _check_seq_len(seq_len)
    rows = {key: [] for key in LAYER_FLOP_TERMS}
    projection = 2.0 * model_layers.attention_matmul_params(spec)
    for layer in spec.layers:
        mlp = model_layers.mlp_matmul_params(spec, layer.mlp)
        keys = keys_per_query(s, layer.mask, layer.window)
        scores = attention_score_flops_per_token(spec.n_heads, spec.head_size,
                                                 spec.value_head_size, keys)
        terms = {"attention_projection_flops": np.full(s.shape, projection),
                 "attention_score_flops": scores,
                 "router_flops": np.full(s.shape, 2.0 * mlp["router"]),
                 "mlp_flops": np.full(s.shape, 2.0 * mlp["mlp"])}
        terms["total_flops"] = sum(terms.values())
        for key, value in terms.items():
            rows[key].append(value)
    return {key: np.stack(values) for key, values in rows.items()}


def lm_head_flops_per_token(spec: ModelSpec) -> float:
    """Output projection to the vocabulary [FLOP/token]: ``2 d V``."""
    return 2.0 * spec.d_model * spec.vocab_size


def forward_flops_per_token(spec: ModelSpec, seq_len) -> np.ndarray:
    """Forward FLOPs per token of the main model: every layer plus the LM head [FLOP/token]."""
    layers = layer_flops_per_token(spec, seq_len)["total_flops"]
    return layers.sum(axis=0) + lm_head_flops_per_token(spec)


def mtp_forward_flops_per_token(spec: ModelSpec, seq_len) -> np.ndarray:
    """Forward FLOPs per token of the multi-token-prediction modules [FLOP/token].

    Each module (DeepSeek-V3 [1] Eq. 21-23) projects the concatenated normalised hidden state
    and next-token embedding (``2 * 2d * d``), runs one block like the main model's last layer
    (with its mask) and the shared output head (``2 d V``).
    """
    s = _check_seq_len(seq_len)
    last = layer_flops_per_token(spec, s)["total_flops"][-1]
    d = spec.d_model
    return spec.mtp_layers * (2.0 * 2 * d * d + last + lm_head_flops_per_token(spec))
