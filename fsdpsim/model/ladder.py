"""A ladder of Llama-style models of any requested size, for ``fsdpsim sweep --model-sizes``.

Scaling rule (one shape family, so a sweep over sizes changes nothing but the size):

* **block**: Llama 3 (Llama Team 2024 [1], Table 3): RMSNorm pre-norm, rotary positions, no
  linear biases, untied embeddings, vocabulary 128,256;
* **heads** of 128 (``n_heads = d_model / 128``) [1];
* **GQA** with 8 key/value heads, as every Llama 3 size [1], [4]; so that 8 divides the head
  count, ``d_model`` is a multiple of 1,024 (below that, 256, 512 or 768 with one KV head per
  query head);
* **SwiGLU MLP** of width ``8/3 · d_model`` rounded up to a multiple of 256 — the Llama recipe
  (Touvron et al. 2023 [2], Sec. 2.2: hidden ``2/3 · 4d``; the reference code's
  ``multiple_of = 256``), without Llama 3's extra ``ffn_dim_multiplier``;
* **aspect ratio** ``d_model / n_layers`` = 128, the ratio of Llama 3 8B (4096/32) and 405B
  (16384/126) [1]. Kaplan et al. 2020 [3] (Sec. 3.1, Fig. 5) found the loss depends only
  weakly on the shape at fixed size over a wide range of aspect ratios, so the ratio is a free
  choice and fixing it keeps every size on one curve.

For a requested count N the generator tries every such ``d_model``, takes the
layer count that brings the exact parameter count closest to N, and keeps, among the shapes
within 2 % of N (10 % when none is), the one whose aspect ratio is closest to 128. The exact
count is then taken from :class:`~fsdpsim.model.spec.ModelSpec`. The embeddings (2 · 128,256 · d)
put a floor under the ladder: requests below about 100M parameters cannot be met.

References
----------
[1] Llama Team, "The Llama 3 Herd of Models", arXiv:2407.21783 (2024), Table 3.
[2] Touvron et al., "LLaMA: Open and Efficient Foundation Language Models", arXiv:2302.13971
    (2023), Sec. 2.2.
[3] Kaplan et al., "Scaling Laws for Neural Language Models", arXiv:2001.08361 (2020),
    Sec. 3.1 and Fig. 5.
[4] Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
    Checkpoints", arXiv:2305.13245 (2023).
"""

from __future__ import annotations

import math

import numpy as np

from fsdpsim.util.errors import ConfigError
from fsdpsim.model.spec import ModelSpec

HEAD_DIM = 128
KV_HEADS = 8
FFN_MULTIPLE = 256
VOCAB_SIZE = 128256
ASPECT_RATIO = 128.0
MAX_SEQ_LEN = 8192
#: Shapes within this relative error of the request are preferred; the looser one is a fallback.
TOLERANCE = 0.02
FALLBACK_TOLERANCE = 0.10
#: 256, 512, 768, then multiples of 1,024 (8 | n_heads) up to 131,072.
_D_MODELS = np.concatenate([HEAD_DIM * np.arange(2, 7, 2),
                            HEAD_DIM * KV_HEADS * np.arange(1, 129)]).astype(np.int64)


def ffn_size(d_model: int) -> int:
    """SwiGLU hidden width: ``8/3 · d_model`` rounded up to a multiple of 256 [2]."""
    return FFN_MULTIPLE * math.ceil(8 * d_model / 3 / FFN_MULTIPLE)


def _layer_and_fixed_params(d):
    """Per-layer and layer-independent parameter counts of the family, for arrays of d."""
    q = d
    kv = HEAD_DIM * np.minimum(KV_HEADS, d // HEAD_DIM)
    f = FFN_MULTIPLE * np.ceil(8 * d / 3 / FFN_MULTIPLE)
    per_layer = (d * q + 2 * d * kv + q * d  # Wq, Wk, Wv, Wo
                 + 3 * d * f                 # SwiGLU gate, up, down
                 + 2 * d)                    # two RMSNorm scales
    fixed = 2 * VOCAB_SIZE * d + d           # untied embedding and LM head, final norm
    return per_layer.astype(float), fixed.astype(float)


def ladder_model(n_params: float, name: str | None = None) -> ModelSpec:
    """The ladder model closest to ``n_params`` parameters (see the module docstring)."""
    if not n_params > 0 or not math.isfinite(n_params):
        raise ConfigError(f"model size {n_params!r} must be a positive number of parameters")
    per_layer, fixed = _layer_and_fixed_params(_D_MODELS)
    layers = np.maximum(np.round((n_params - fixed) / per_layer), 1.0)
    error = np.abs(layers * per_layer + fixed - n_params) / n_params
    misfit = np.abs(np.log(_D_MODELS / layers / ASPECT_RATIO))
    for tolerance in (TOLERANCE, FALLBACK_TOLERANCE):
        ok = error <= tolerance
        if ok.any():
            i = int(np.argmin(np.where(ok, misfit, np.inf)))
            break
    else:
        smallest = float(fixed[0] + per_layer[0])
        raise ConfigError(
            f"model size {format_size(n_params)} is outside the ladder: no Llama-style shape "
            f"(heads of {HEAD_DIM}, vocab {VOCAB_SIZE:,}) is within "
            f"{FALLBACK_TOLERANCE:.0%} of it; the smallest is about {format_size(smallest)}")
    d, n_layers = int(_D_MODELS[i]), int(layers[i])
    n_heads = d // HEAD_DIM
    return ModelSpec(
        name=name or f"ladder-{format_size(n_params)}", n_layers=n_layers, d_model=d,
        n_heads=n_heads, n_kv_heads=min(KV_HEADS, n_heads), ffn_size=ffn_size(d),
        ffn_kind="swiglu", vocab_size=VOCAB_SIZE, tied_embeddings=False, position="rotary",
        max_seq_len=MAX_SEQ_LEN, norm="rmsnorm", norm_bias=False, qkv_bias=False,
        attn_out_bias=False, mlp_bias=False,
    )


def format_size(n: float) -> str:
    """``7e9`` → ``"7b"``, ``1.5e12`` → ``"1.5t"``, ``350e6`` → ``"350m"``."""
    for suffix, scale in (("t", 1e12), ("b", 1e9), ("m", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.4g}{suffix}"
    return f"{n:.4g}"


def series_125(lo: float, hi: float) -> list[float]:
    """``lo``, every 1-2-5 step strictly between, and ``hi`` (``1b..1t`` → 1, 2, 5, 10, ... 1000 B).

    An empty range (``lo > hi``) is a :class:`ConfigError`.
    """
    if not 0 < lo <= hi:
        raise ConfigError(f"size range {format_size(lo)}..{format_size(hi)} is empty; give "
                          "the smaller size first, e.g. 1b..1t")
    values = [lo]
    decade = 10.0 ** math.floor(math.log10(lo))
    while decade <= hi:
        for mantissa in (1, 2, 5):
            v = mantissa * decade
            if lo * (1 + 1e-9) < v < hi * (1 - 1e-9):
                values.append(v)
        decade *= 10.0
    if hi != lo:
        values.append(hi)
    return values
