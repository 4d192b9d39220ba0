"""Torch re-implementations of the module structure of the mixture-of-experts and newer model
families, built straight from a ``config.json`` dict: the yardstick for fsdpsim's counts.

Each family follows the module list (names, shapes, which layers are dense or MoE, which use a
sliding or chunked mask) of its reference modelling code, independently of
:mod:`fsdpsim.model.hf_config`:

* ``mixtral``: transformers ``models/mixtral/modeling_mixtral.py`` (``block_sparse_moe.gate``,
  ``experts.N.w1/w2/w3``);
* ``qwen3`` / ``qwen3_moe``: ``models/qwen3{,_moe}/modeling_qwen3{,_moe}.py`` (``q_norm``,
  ``k_norm``; ``mlp.gate``, ``mlp.experts.N``; ``mlp_only_layers``, ``decoder_sparse_step``);
* ``deepseek_v3`` / ``kimi_k2``: deepseek-ai/DeepSeek-V3 ``modeling_deepseek.py`` (MLA
  ``q_a_proj``/``q_a_layernorm``/``q_b_proj``/``kv_a_proj_with_mqa``/``kv_a_layernorm``/
  ``kv_b_proj``/``o_proj``; ``mlp.gate`` with the ``e_score_correction_bias`` parameter for
  ``noaux_tc``; ``shared_experts``) and the MTP module of its ``README_WEIGHTS.md`` (``enorm``,
  ``hnorm``, ``eh_proj``, a decoder layer, ``shared_head.norm``; embedding and head shared);
* ``gpt_oss``: ``models/gpt_oss/modeling_gpt_oss.py`` (biased projections, ``sinks``,
  ``mlp.router`` with bias, fused ``experts.gate_up_proj``/``down_proj`` with biases);
* ``llama4``: ``models/llama4/modeling_llama4.py`` text model (``feed_forward.router``, fused
  ``experts``, ``shared_expert``; dense ``feed_forward`` of ``intermediate_size_mlp``).

The forward pass routes each token to its top-k experts only and computes attention as explicit
matmuls over the whole ``T x T`` square with the layer's boolean mask (causal, sliding window
``kv > q - w``, chunked ``kv // c == q // c``, as transformers' ``masking_utils``), so
``torch.utils.flop_counter.FlopCounterMode`` sees every weight matmul and
:meth:`HFStyleLM.layer_masks` gives the query-key pairs each layer really uses. Rotary
positions, the router's group limit and the activation's clamp have no parameters and no
matmul FLOPs and are left out.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

MOE_FAMILIES = ("mixtral", "qwen3", "qwen3_moe", "deepseek_v3", "kimi_k2", "gpt_oss", "llama4")


class RMSNorm(nn.Module):
    def __init__(self, width: int, factory: dict) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width, **factory))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class GatedMLP(nn.Module):
    """SwiGLU MLP ``down(silu(gate x) * up x)`` with the family's names for the three linears."""

    def __init__(self, d: int, f: int, factory: dict, names=("gate_proj", "up_proj", "down_proj"),
                 bias: bool = False) -> None:
        super().__init__()
        self.names = names
        setattr(self, names[0], nn.Linear(d, f, bias=bias, **factory))
        setattr(self, names[1], nn.Linear(d, f, bias=bias, **factory))
        setattr(self, names[2], nn.Linear(f, d, bias=bias, **factory))

    def forward(self, x):
        gate, up, down = (getattr(self, n) for n in self.names)
        return down(F.silu(gate(x)) * up(x))


class FusedExperts(nn.Module):
    """Experts stored as ``(E, d, 2f)`` and ``(E, f, d)`` tensors (gpt-oss, Llama 4)."""

    def __init__(self, E: int, d: int, f: int, factory: dict, bias: bool) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.randn(E, d, 2 * f, **factory) * d**-0.5)
        if bias:
            self.gate_up_proj_bias = nn.Parameter(torch.zeros(E, 2 * f, **factory))
        self.down_proj = nn.Parameter(torch.randn(E, f, d, **factory) * f**-0.5)
        if bias:
            self.down_proj_bias = nn.Parameter(torch.zeros(E, d, **factory))
        self.bias = bias

    def expert(self, e: int, x):
        h = x @ self.gate_up_proj[e] + (self.gate_up_proj_bias[e] if self.bias else 0)
        gate, up = h[..., ::2], h[..., 1::2]
        out = (F.silu(gate) * up) @ self.down_proj[e]
        return out + (self.down_proj_bias[e] if self.bias else 0)


class Router(nn.Module):
    """Gating weight ``(E, d)`` with an optional bias and DeepSeek's score-correction bias."""

    def __init__(self, E: int, d: int, factory: dict, bias: bool = False,
                 score_bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(E, d, **factory) * d**-0.5)
        if bias:
            self.bias = nn.Parameter(torch.zeros(E, **factory))
        if score_bias:
            self.e_score_correction_bias = nn.Parameter(torch.zeros(E, **factory))

    def forward(self, x):
        return F.linear(x, self.weight, getattr(self, "bias", None))


class MoE(nn.Module):
    """Router, routed experts (a ModuleList or fused tensors) and an optional shared MLP."""

    def __init__(self, *, E: int, k: int, router: nn.Module, experts: nn.Module,
                 sigmoid: bool, router_name: str, shared: nn.Module | None = None,
                 shared_name: str = "") -> None:
        super().__init__()
        self.k, self.sigmoid, self.router_name, self.shared_name = k, sigmoid, router_name, \
            shared_name
        setattr(self, router_name, router)
        self.experts = experts
        if shared is not None:
            setattr(self, shared_name, shared)

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        logits = getattr(self, self.router_name)(flat)
        scores = logits.sigmoid() if self.sigmoid else logits.softmax(dim=-1)
        bias = getattr(getattr(self, self.router_name), "e_score_correction_bias", None)
        chosen = (scores if bias is None else scores + bias).topk(self.k, dim=-1).indices
        weights = scores.gather(1, chosen)
        out = torch.zeros_like(flat)
        for e in range(len(self.experts) if isinstance(self.experts, nn.ModuleList)
                       else self.experts.gate_up_proj.shape[0]):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            run = (self.experts[e] if isinstance(self.experts, nn.ModuleList)
                   else lambda h, e=e: self.experts.expert(e, h))
            out = out.index_add(0, token, run(flat[token]) * weights[token, slot, None])
        if self.shared_name:
            out = out + getattr(self, self.shared_name)(flat)
        return out.view_as(x)


class Attention(nn.Module):
    """q/k/v/o projections (GQA), optional biases, per-head q/k RMSNorm and sink logits."""

    def __init__(self, c: dict, factory: dict, *, bias: bool, out_bias: bool, qk_norm: bool,
                 sinks: bool) -> None:
        super().__init__()
        d, H = c["hidden_size"], c["num_attention_heads"]
        self.H, self.kv = H, c.get("num_key_value_heads") or H
        self.hd = c.get("head_dim") or d // H
        self.q_proj = nn.Linear(d, H * self.hd, bias=bias, **factory)
        self.k_proj = nn.Linear(d, self.kv * self.hd, bias=bias, **factory)
        self.v_proj = nn.Linear(d, self.kv * self.hd, bias=bias, **factory)
        self.o_proj = nn.Linear(H * self.hd, d, bias=out_bias, **factory)
        if qk_norm:
            self.q_norm, self.k_norm = RMSNorm(self.hd, factory), RMSNorm(self.hd, factory)
        if sinks:
            self.sinks = nn.Parameter(torch.zeros(H, **factory))

    def forward(self, x, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.hd)
        k = self.k_proj(x).view(B, T, self.kv, self.hd)
        v = self.v_proj(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        k = k.repeat_interleave(self.H // self.kv, dim=1)
        v = v.repeat_interleave(self.H // self.kv, dim=1)
        sinks = getattr(self, "sinks", None)
        y = _attend(q, k, v, mask, sinks)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLAttention(nn.Module):
    """Multi-head latent attention, module names of DeepSeek's ``DeepseekV3Attention``."""

    def __init__(self, c: dict, factory: dict) -> None:
        super().__init__()
        d, H = c["hidden_size"], c["num_attention_heads"]
        self.H, self.nope, self.rope = H, c["qk_nope_head_dim"], c["qk_rope_head_dim"]
        self.v, self.r_kv, r_q = c["v_head_dim"], c["kv_lora_rank"], c["q_lora_rank"]
        qk = self.nope + self.rope
        if r_q is None:
            self.q_proj = nn.Linear(d, H * qk, bias=False, **factory)
        else:
            self.q_a_proj = nn.Linear(d, r_q, bias=False, **factory)
            self.q_a_layernorm = RMSNorm(r_q, factory)
            self.q_b_proj = nn.Linear(r_q, H * qk, bias=False, **factory)
        self.kv_a_proj_with_mqa = nn.Linear(d, self.r_kv + self.rope, bias=False, **factory)
        self.kv_a_layernorm = RMSNorm(self.r_kv, factory)
        self.kv_b_proj = nn.Linear(self.r_kv, H * (self.nope + self.v), bias=False, **factory)
        self.o_proj = nn.Linear(H * self.v, d, bias=False, **factory)

    def forward(self, x, mask):
        B, T, _ = x.shape
        q = (self.q_proj(x) if hasattr(self, "q_proj")
             else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))))
        q = q.view(B, T, self.H, -1).transpose(1, 2)
        latent, k_rot = self.kv_a_proj_with_mqa(x).split([self.r_kv, self.rope], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(B, T, self.H, -1).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.v], dim=-1)
        k_rot = k_rot.view(B, 1, T, self.rope).expand(B, self.H, T, self.rope)
        y = _attend(q, torch.cat([k_nope, k_rot], dim=-1), v, mask, None)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


def _attend(q, k, v, mask, sinks):
    """softmax(q kᵀ / sqrt(d) + mask [, sink]) v as explicit matmuls over the full square."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    if sinks is None:
        return scores.softmax(dim=-1) @ v
    B, H, T, _ = scores.shape
    column = sinks.view(1, H, 1, 1).expand(B, H, T, 1)
    return torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1] @ v


def layer_mask(kind: str, T: int, window: int | None) -> torch.Tensor:
    """[T, T] boolean mask of transformers' masking_utils for one layer type."""
    q = torch.arange(T)[:, None]
    kv = torch.arange(T)[None, :]
    mask = kv <= q
    if kind == "sliding_attention":
        mask &= kv > q - window
    elif kind == "chunked_attention":
        mask &= (kv // window) == (q // window)
    return mask


class DecoderLayer(nn.Module):
    def __init__(self, attn: nn.Module, mlp: nn.Module, mlp_name: str, d: int,
                 factory: dict) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(d, factory)
        self.self_attn = attn
        self.post_attention_layernorm = RMSNorm(d, factory)
        self.mlp_name = mlp_name
        setattr(self, mlp_name, mlp)

    def forward(self, x, mask):
        x = x + self.self_attn(self.input_layernorm(x), mask)
        return x + getattr(self, self.mlp_name)(self.post_attention_layernorm(x))


# ---------------------------------------------------------------------------- families
def _structure(c: dict) -> tuple[list[bool], list[str]]:
    """Per layer: is it MoE, and its transformers layer type (full/sliding/chunked)."""
    t, L = c["model_type"], c["num_hidden_layers"]
    full = ["full_attention"] * L
    if t == "mixtral":
        kind = "sliding_attention" if c.get("sliding_window") else "full_attention"
        return [True] * L, [kind] * L
    if t in ("qwen3", "qwen3_moe"):
        window = c.get("sliding_window") if c.get("use_sliding_window") else None
        types = c.get("layer_types") or [
            "sliding_attention" if window is not None and i >= c.get("max_window_layers", 28)
            else "full_attention" for i in range(L)]
        if t == "qwen3":
            return [False] * L, types
        step, only = c.get("decoder_sparse_step", 1), c.get("mlp_only_layers") or []
        return [i not in only and (i + 1) % step == 0 for i in range(L)], types
    if t in ("deepseek_v3", "kimi_k2"):
        k, freq = c["first_k_dense_replace"], c.get("moe_layer_freq", 1)
        return [i >= k and i % freq == 0 for i in range(L)], full
    if t == "gpt_oss":
        return [True] * L, c.get("layer_types") or [
            "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(L)]
    step = c.get("interleave_moe_layer_step", 1)                       # llama4 text
    moe = c.get("moe_layers") or list(range(step - 1, L, step))
    rope = c.get("no_rope_layers") or [int((i + 1) % c.get("no_rope_layer_interval", 4) != 0)
                                       for i in range(L)]
    types = c.get("layer_types") or ["chunked_attention" if rope[i] else "full_attention"
                                     for i in range(L)]
    return [i in moe for i in range(L)], types


def _window(c: dict, kind: str) -> int | None:
    if kind == "sliding_attention":
        return c.get("sliding_window") or (128 if c["model_type"] == "gpt_oss" else 4096)
    if kind == "chunked_attention":
        return c.get("attention_chunk_size", 8192)
    return None


def _layer(c: dict, moe: bool, factory: dict) -> DecoderLayer:
    t, d = c["model_type"], c["hidden_size"]
    if t in ("deepseek_v3", "kimi_k2"):
        attn = MLAttention(c, factory)
    else:
        bias = c.get("attention_bias", t == "gpt_oss")
        attn = Attention(c, factory, bias=bias, out_bias=bias, qk_norm=t.startswith("qwen3"),
                         sinks=t == "gpt_oss")
    if t == "mixtral":
        names = ("w1", "w3", "w2")
        experts = nn.ModuleList(GatedMLP(d, c["intermediate_size"], factory, names)
                                for _ in range(c["num_local_experts"]))
        mlp = MoE(E=c["num_local_experts"], k=c["num_experts_per_tok"],
                  router=nn.Linear(d, c["num_local_experts"], bias=False, **factory),
                  experts=experts, sigmoid=False, router_name="gate")
        return DecoderLayer(attn, mlp, "block_sparse_moe", d, factory)
    if t == "gpt_oss":
        E = c["num_local_experts"]
        mlp = MoE(E=E, k=c["num_experts_per_tok"], router=Router(E, d, factory, bias=True),
                  experts=FusedExperts(E, d, c["intermediate_size"], factory, bias=True),
                  sigmoid=False, router_name="router")
        return DecoderLayer(attn, mlp, "mlp", d, factory)
    if t == "llama4":
        if not moe:
            return DecoderLayer(attn, GatedMLP(d, c["intermediate_size_mlp"], factory),
                                "feed_forward", d, factory)
        E, f = c["num_local_experts"], c["intermediate_size"]
        mlp = MoE(E=E, k=c.get("num_experts_per_tok", 1),
                  router=nn.Linear(d, E, bias=False, **factory),
                  experts=FusedExperts(E, d, f, factory, bias=False),
                  shared=GatedMLP(d, f, factory), shared_name="shared_expert", sigmoid=True,
                  router_name="router")
        return DecoderLayer(attn, mlp, "feed_forward", d, factory)
    if not moe:
        return DecoderLayer(attn, GatedMLP(d, c["intermediate_size"], factory), "mlp", d,
                            factory)
    if t == "qwen3_moe":
        E = c.get("num_experts") or c["num_local_experts"]
        experts = nn.ModuleList(GatedMLP(d, c["moe_intermediate_size"], factory)
                                for _ in range(E))
        mlp = MoE(E=E, k=c["num_experts_per_tok"], router=nn.Linear(d, E, bias=False, **factory),
                  experts=experts, sigmoid=False, router_name="gate")
        return DecoderLayer(attn, mlp, "mlp", d, factory)
    E, f = c["n_routed_experts"], c["moe_intermediate_size"]              # deepseek_v3
    experts = nn.ModuleList(GatedMLP(d, f, factory) for _ in range(E))
    router = Router(E, d, factory, score_bias=c.get("topk_method", "noaux_tc") == "noaux_tc")
    mlp = MoE(E=E, k=c["num_experts_per_tok"], router=router, experts=experts,
              shared=GatedMLP(d, f * c["n_shared_experts"], factory),
              shared_name="shared_experts", sigmoid=True, router_name="gate")
    return DecoderLayer(attn, mlp, "mlp", d, factory)


class MTPModule(nn.Module):
    """DeepSeek-V3 multi-token prediction module (embedding and output head shared)."""

    def __init__(self, c: dict, factory: dict) -> None:
        super().__init__()
        d = c["hidden_size"]
        self.enorm, self.hnorm = RMSNorm(d, factory), RMSNorm(d, factory)
        self.eh_proj = nn.Linear(2 * d, d, bias=False, **factory)
        self.block = _layer(c, True, factory)
        self.shared_head_norm = RMSNorm(d, factory)


class HFStyleLM(nn.Module):
    """``model.embed_tokens``, ``model.layers``, ``model.norm``, ``lm_head`` (+ ``mtp``)."""

    def __init__(self, config: dict[str, Any], factory: dict) -> None:
        super().__init__()
        c = dict(config.get("text_config") or config) if config["model_type"] == "llama4" \
            else dict(config)
        c["model_type"] = config["model_type"]
        self.c = c
        d, V = c["hidden_size"], c["vocab_size"]
        self.moe, self.types = _structure(c)
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(V, d, **factory)
        self.model.layers = nn.ModuleList(_layer(c, m, factory) for m in self.moe)
        self.model.norm = RMSNorm(d, factory)
        self.lm_head = nn.Linear(d, V, bias=False, **factory)
        if c.get("tie_word_embeddings", config.get("tie_word_embeddings", False)):
            self.lm_head.weight = self.model.embed_tokens.weight
        self.mtp = nn.ModuleList(MTPModule(c, factory)
                                 for _ in range(c.get("num_nextn_predict_layers") or 0))

    def layer_masks(self, T: int) -> list[torch.Tensor]:
        """The [T, T] boolean mask each layer attends with."""
        return [layer_mask(kind, T, _window(self.c, kind)) for kind in self.types]

    def forward(self, idx):
        """Token ids [B, T] -> (logits, [MTP logits per module])."""
        T = idx.shape[1]
        masks = [m.to(idx.device) for m in self.layer_masks(T)]
        x = self.model.embed_tokens(idx)
        for layer, mask in zip(self.model.layers, masks):
            x = layer(x, mask)
        logits, mtp_logits, h = self.lm_head(self.model.norm(x)), [], x
        causal = layer_mask("full_attention", T, None).to(idx.device)
        for k, module in enumerate(self.mtp, start=1):
            nxt = torch.roll(idx, -k, dims=1)   # the token k ahead (wrapped at the end)
            e = module.enorm(self.model.embed_tokens(nxt))
            h = module.eh_proj(torch.cat([e, module.hnorm(h)], dim=-1))
            h = module.block(h, causal)
            mtp_logits.append(self.lm_head(module.shared_head_norm(h)))
        return logits, mtp_logits


def build_hf_style_model(config: dict[str, Any], *, dtype: torch.dtype = torch.float64,
                         device: torch.device | str | None = None) -> HFStyleLM:
    """The torch module of ``config`` (a parsed config.json of a :data:`MOE_FAMILIES` type)."""
    if config.get("model_type") not in MOE_FAMILIES:
        raise ValueError(f"model_type {config.get('model_type')!r} is not one of {MOE_FAMILIES}")
    return HFStyleLM(config, {"dtype": dtype, "device": device})
