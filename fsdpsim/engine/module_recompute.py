"""Megatron-Core's per-module recompute (``recompute_modules`` with selective granularity,
megatron/core/transformer): what each module reruns in backward and what it stops saving.

* ``mla_up_proj`` (multi_latent_attention.py, ``CheckpointWithoutOutput`` around the query and
  key/value up projections): their GEMMs again; Q, K and V freed after the attention core.
* ``mlp`` (transformer_layer.py, dense layers only, not MoE layers): the MLP forward again;
  its internals freed.
* ``moe_act`` (moe/experts.py): the experts' activation again (its HBM traffic); its output
  freed.

None of them applies under full recompute, which reruns the whole layer and keeps only its
input. The times enter the layer kinds' ``recompute_s`` (:func:`fsdpsim.engine.moe.layer_kinds`),
the FLOPs the executed FLOPs (:func:`fsdpsim.engine.moe.layered_flops`), the bytes every
stage's memory keywords (:func:`fsdpsim.engine.memory.memory_config`).
"""

from __future__ import annotations

import numpy as np

from fsdpsim.costs import compute
from fsdpsim.costs.compute import any_of, maximum, where
from fsdpsim.engine import moe_parts


def mla_up_proj_fwd_s(g, w, rates, elem):
    """Forward time of MLA's query and key/value up projections on one TP rank [s]: what
    Megatron's ``mla_up_proj`` module recompute reruns in backward (with their layer norms and
    the rotary concatenation, element-wise and not counted)."""
    heads = w.heads  # the rank's heads (layers.widths)
    qr, qk, v = g.mla_q_rank, g.mla_qk_head, g.mla_v_head
    rope, kvr = g.mla_rope, g.mla_kv_rank
    has_qr = where(qr > 0, 1.0, 0.0)
    return moe_parts._gemms([(heads * qk, qr, has_qr), (heads * (qk - rope + v), kvr, 1.0)],
                            w.tokens, rates, elem)[0]


def mlp_recompute_s(g, r, w):
    """Megatron's ``mlp`` module recompute of one dense layer, one micro-batch [s]: its MLP
    forward again in backward (transformer_layer.py, CheckpointWithoutOutput around the MLP):
    the up (and gate) and down GEMMs and the activation's traffic (SwiGLU reads 2f and writes
    f elements per token, GELU reads and writes f)."""
    rates = moe_parts.gemm_rates(g, r)
    elem = g.compute_bytes
    gemm_s = moe_parts.mlp_gemm_times(g, w.tokens, w.ffn, rates, elem)[0]
    act_bytes = w.tokens * w.ffn * where(g.swiglu > 0, 3.0, 2.0) * elem
    return gemm_s + compute.memory_bound_time_s(act_bytes, r.hbm)


def moe_act_recompute_s(g, r, ro, elem):
    """Megatron's ``moe_act`` module recompute of one MoE layer, one micro-batch [s]: the
    experts' activation again on every routed row of the rank (SwiGLU reads 2f and writes f
    elements, GELU reads and writes f), HBM bound."""
    act_bytes = ro.rows * ro.ffn_local * where(g.swiglu > 0, 3.0, 2.0) * elem
    return compute.memory_bound_time_s(act_bytes, r.hbm)


def module_recompute_flops(g, tokens):
    """FLOPs of one micro-batch's per-module recompute (Megatron ``recompute_modules``) over
    the model [FLOP]: MLA's up projections in every MLA layer, the dense layers' MLP."""
    heads, qk, v = g.n_heads, g.mla_qk_head, g.mla_v_head
    mla_up = 2.0 * tokens * heads * (g.mla_q_rank * qk
                                     + g.mla_kv_rank * (qk - g.mla_rope + v))
    dense_mlp = 2.0 * tokens * where(g.swiglu > 0, 3.0, 2.0) * g.d_model * g.ffn_size
    n_dense = g.n_layers - g.moe_layers
    return (where((g.rc_mla_up_proj > 0) & (g.mla > 0), g.n_layers * mla_up, 0.0)
            + where(g.rc_mlp > 0, n_dense * dense_mlp, 0.0))


def module_recompute_freed_bytes(g, n_layers, n_moe, mtp):
    """Bytes per token of the micro-batch that per-module recompute stops saving on a stage
    with ``n_layers`` layers, ``n_moe`` of them MoE, and ``mtp`` MTP modules [B]: Q, K and V
    of every MLA layer (``mla_up_proj``; the attention core's widths as the activation model
    counts them, :func:`fsdpsim.costs.activations.saved_bytes_by_policy`), the dense layers'
    MLP internals (``mlp``) and the experts' activation output of every MoE layer
    (``moe_act``). Nothing under full recompute (a layer then keeps only its input)."""
    e = g.compute_bytes
    split = g.tp * g.cp  # a token's share on this rank
    freed = 0.0
    if any_of(g.rc_mla_up_proj > 0):
        qkv = e * (g.q_dim + 2.0 * g.kv_dim) / split
        freed = freed + where((g.rc_mla_up_proj > 0) & (g.mla > 0),
                              (n_layers + mtp) * qkv, 0.0)
    if any_of(g.rc_mlp > 0):
        n_ffn = where(g.swiglu > 0, where(g.fused_glu > 0, 3.0, 4.0), 2.0)
        dense = where(g.active_experts <= 1, n_layers - n_moe, 0.0)
        freed = freed + where(g.rc_mlp > 0, dense * e * n_ffn * g.ffn_size / split, 0.0)
    if any_of(g.rc_moe_act > 0) and any_of(g.moe_layers > 0):
        ro = moe_parts.routing(g)
        rows_per_token = ro.rows / maximum(ro.tokens, 1e-300) / split
        freed = freed + where(g.rc_moe_act > 0, (n_moe + mtp * g.mtp_moe)
                              * rows_per_token * ro.ffn_local * e, 0.0)
    return where(np.asarray(g.recompute) == 2, 0.0, freed)
