"""A plain torch implementation of a :class:`~fsdpsim.model.spec.ModelSpec`.

The module is the yardstick for fsdpsim's analytical counts: its ``named_parameters()`` equal
:meth:`ModelSpec.unit_parameter_shapes` (one :class:`Block` per FSDP unit, then the root), its
parameter total equals :attr:`ModelSpec.n_params`, and with ``attention="manual"`` the
attention products are ordinary matmuls that ``torch.utils.flop_counter.FlopCounterMode``
counts. Position encodings without parameters (rotary, ALiBi) are computed in ``forward``.

Layout (pre-norm, as in GPT-2/3 and Llama)::

    x = tok_emb(idx) [+ pos_emb(positions)]
    for block in blocks:  x = x + attn(attn_norm(x));  x = x + mlp(mlp_norm(x))
    logits = lm_head(norm(x))            # lm_head.weight is tok_emb.weight when tied

References: Su et al., "RoFormer", arXiv:2104.09864 (2021) (rotary); Press et al., "Train
Short, Test Long", arXiv:2108.12409 (2022) (ALiBi slopes 2^(-8i/n)); Jiang et al.,
arXiv:2401.04088 (2024) (top-k routing with renormalised softmax weights).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from fsdpsim.util.errors import ConfigError, suggest
from fsdpsim.model.spec import ModelSpec

AttentionImpl = Literal["manual", "sdpa"]
ATTENTION_IMPLS: tuple[str, ...] = ("manual", "sdpa")


def _norm(spec: ModelSpec, factory: dict) -> nn.Module:
    if spec.norm == "rmsnorm":
        return nn.RMSNorm(spec.d_model, **factory)
    return nn.LayerNorm(spec.d_model, bias=spec.norm_bias, **factory)


def _apply_rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (i, i + half) of the last dim of ``x`` [B, H, T, hs] by position angles."""
    half = x.shape[-1] // 2
    if half == 0:
        return x
    steps = torch.arange(half, device=x.device, dtype=torch.float32)
    inv_freq = 10000.0 ** (-steps / half)
    positions = torch.arange(x.shape[-2], device=x.device, dtype=torch.float32)
    angles = positions[:, None] * inv_freq[None, :]  # broadcast multiply, not a matmul
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2, rest = x[..., :half], x[..., half : 2 * half], x[..., 2 * half :]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, rest], dim=-1)


def _alibi_bias(n_heads: int, seq_len: int, device: torch.device, dtype: torch.dtype):
    """[H, T, T] additive bias ``-slope_h * (i - j)`` with slopes ``2^(-8 (h+1) / H)``."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1, device=device) / n_heads)
    pos = torch.arange(seq_len, device=device)
    distance = (pos[:, None] - pos[None, :]).clamp(min=0)
    return (-slopes[:, None, None] * distance[None]).to(dtype)


class Attention(nn.Module):
    """Causal self-attention with separate q, k, v projections (GQA/MQA) and an output
    projection."""

    def __init__(self, spec: ModelSpec, attention: AttentionImpl, factory: dict) -> None:
        super().__init__()
        self.spec, self.impl = spec, attention
        d, q, kv = spec.d_model, spec.q_dim, spec.kv_dim
        self.q = nn.Linear(d, q, bias=spec.qkv_bias, **factory)
        self.k = nn.Linear(d, kv, bias=spec.qkv_bias, **factory)
        self.v = nn.Linear(d, kv, bias=spec.qkv_bias, **factory)
        self.o = nn.Linear(q, d, bias=spec.attn_out_bias, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.spec
        B, T, _ = x.shape
        q = self.q(x).view(B, T, s.n_heads, s.head_size).transpose(1, 2)
        k = self.k(x).view(B, T, s.kv_heads, s.head_size).transpose(1, 2)
        v = self.v(x).view(B, T, s.kv_heads, s.head_size).transpose(1, 2)
        if s.position == "rotary":
            q, k = _apply_rotary(q), _apply_rotary(k)
        if s.kv_heads < s.n_heads:  # each KV head serves n_heads / kv_heads query heads
            k = k.repeat_interleave(s.n_heads // s.kv_heads, dim=1)
            v = v.repeat_interleave(s.n_heads // s.kv_heads, dim=1)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        bias = None
        if s.position == "alibi":
            bias = _alibi_bias(s.n_heads, T, x.device, q.dtype)
        if self.impl == "manual":
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(s.head_size)
            if bias is not None:
                scores = scores + bias
            scores = scores.masked_fill(~causal, float("-inf"))
            y = scores.softmax(dim=-1) @ v
        else:
            if bias is None:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                mask = bias.masked_fill(~causal, float("-inf"))
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(y.transpose(1, 2).reshape(B, T, s.q_dim))


class MLP(nn.Module):
    """GELU MLP ``down(gelu(up x))`` or SwiGLU ``down(silu(gate x) * up x)`` (Shazeer 2020)."""

    def __init__(self, spec: ModelSpec, hidden: int, factory: dict) -> None:
        super().__init__()
        d, bias = spec.d_model, spec.mlp_bias
        self.gated = spec.ffn_kind == "swiglu"
        if self.gated:
            self.gate = nn.Linear(d, hidden, bias=bias, **factory)
        self.up = nn.Linear(d, hidden, bias=bias, **factory)
        self.down = nn.Linear(hidden, d, bias=bias, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x)))


class MoE(nn.Module):
    """Top-k mixture of expert MLPs with a bias-free linear router (Mixtral-style).

    Every expert is called, with the (possibly empty) set of tokens routed to it, so all
    parameters take part in every step.
    """

    def __init__(self, spec: ModelSpec, factory: dict) -> None:
        super().__init__()
        self.top_k = spec.experts_per_token
        self.router = nn.Linear(spec.d_model, spec.n_experts, bias=False, **factory)
        self.experts = nn.ModuleList(
            MLP(spec, spec.expert_size, factory) for _ in range(spec.n_experts)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        probs = self.router(flat).softmax(dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            y = expert(flat[token]) * weights[token, slot, None]
            out = out.index_add(0, token, y)
        return out.view_as(x)


class Block(nn.Module):
    """One pre-norm transformer block; the unit that FSDP wraps."""

    def __init__(self, spec: ModelSpec, attention: AttentionImpl, factory: dict) -> None:
        super().__init__()
        self.attn_norm = _norm(spec, factory)
        self.attn = Attention(spec, attention, factory)
        self.mlp_norm = _norm(spec, factory)
        self.mlp = MoE(spec, factory) if spec.is_moe else MLP(spec, spec.ffn_size, factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class ReferenceLM(nn.Module):
    """Token embedding, optional learned positions, ``blocks``, final norm, LM head."""

    def __init__(self, spec: ModelSpec, attention: AttentionImpl, factory: dict) -> None:
        super().__init__()
        self.spec = spec
        self.tok_emb = nn.Embedding(spec.vocab_size, spec.d_model, **factory)
        if spec.position == "learned":
            self.pos_emb = nn.Embedding(spec.max_seq_len, spec.d_model, **factory)
        self.blocks = nn.ModuleList(Block(spec, attention, factory) for _ in range(spec.n_layers))
        self.norm = _norm(spec, factory) if spec.final_norm else nn.Identity()
        self.lm_head = nn.Linear(spec.d_model, spec.vocab_size, bias=spec.lm_head_bias,
                                 **factory)
        if spec.tied_embeddings:
            self.lm_head.weight = self.tok_emb.weight  # one Parameter, listed once

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids ``[B, T]`` -> logits ``[B, T, vocab_size]``."""
        T = idx.shape[1]
        x = self.tok_emb(idx)
        if self.spec.position == "learned":
            if T > self.spec.max_seq_len:
                raise ValueError(
                    f"sequence length {T} exceeds the learned position table "
                    f"(max_seq_len={self.spec.max_seq_len}); use spec.with_seq_len({T})"
                )
            x = x + self.pos_emb(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))


def build_reference_model(
    spec: ModelSpec,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    attention: AttentionImpl = "manual",
) -> ReferenceLM:
    """Build the reference torch module for ``spec``.

    Parameters
    ----------
    spec
        The architecture.
    dtype, device
        Where and in which dtype parameters are created (``device="meta"`` allocates nothing).
    attention
        ``"manual"``: ``softmax(q k^T / sqrt(hs) + mask) v`` as explicit matmuls, visible to
        ``FlopCounterMode``; ``"sdpa"``: ``torch.nn.functional.scaled_dot_product_attention``.
    """
    from fsdpsim.model.checks import check_engine_supported

    check_engine_supported(spec)  # the block below is the engine's: no MLA, shared experts, ...
    if attention not in ATTENTION_IMPLS:
        raise ConfigError(
            f"attention={attention!r} is not one of: {', '.join(ATTENTION_IMPLS)}"
            f"{suggest(str(attention), ATTENTION_IMPLS)}"
        )
    return ReferenceLM(spec, attention, {"dtype": dtype, "device": device})
