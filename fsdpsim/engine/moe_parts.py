"""Building blocks of a layer kind's times that the MoE layer model
(:mod:`fsdpsim.engine.moe`) and Megatron's per-module recompute
(:mod:`fsdpsim.engine.module_recompute`) both use: groups of GEMMs, the attention projections
(GQA or MLA), a dense MLP's GEMMs, and how a MoE layer's tokens are routed over its experts."""

from __future__ import annotations

import numpy as np

from fsdpsim.costs import compute
from fsdpsim.costs import moe as moe_costs
from fsdpsim.costs.arrays import broadcast_shape
from fsdpsim.costs.compute import all_of, any_of, maximum, where
from fsdpsim.engine.results import Routing


def _gemms(shapes, tokens, rates, elem):
    """Forward, backward and last-shape forward time of linear layers ``(n, k, mult)`` [s]."""
    fwd = bwd = last = 0.0
    for n, k, mult in shapes:
        f, b = compute._linear_time_s(tokens, compute.as_array(n), compute.as_array(k), *rates,
                                      elem)
        fwd, bwd, last = fwd + mult * f, bwd + mult * b, mult * f
    return fwd, bwd, last


def gemm_rates(g, r):
    """The rate-only terms of a GEMM's time on these rows
    (:func:`fsdpsim.costs.compute._gemm_rates`)."""
    return compute._gemm_rates(r.matmul, r.hbm, g.matmul_half_flops, g.matmul_half_k)


def gqa_gemm_times(g, w, rates, elem):
    """Forward and backward time of one layer's GQA projections on one TP rank [s]: the fused
    QKV projection and the output projection (the uniform layer's first two GEMMs,
    :func:`fsdpsim.costs.compute.layer_gemm_shapes`)."""
    d = g.d_model
    return _gemms([(w.q + 2.0 * w.kv, d, 1.0), (d, w.q, 1.0)], w.tokens, rates, elem)[:2]


def attention_gemm_times(g, w, rates, elem, gqa=None):
    """Forward and backward time of one layer's attention projections on one TP rank [s]:
    GQA's fused QKV and output projection, or MLA's (DeepSeek-V3 Eq. 1-11): the query down and
    up projections (a full query projection without ``q_lora_rank``), the joint key/value down
    projection with the rotary key, the key/value up projection and the output projection;
    the down projections are whole on every TP rank (Megatron-Core MLA), the rest split by
    heads. ``gqa``: :func:`gqa_gemm_times` where the caller has it."""
    d, t = g.d_model, w.tokens
    if not any_of(g.mla > 0):
        return gqa_gemm_times(g, w, rates, elem) if gqa is None else gqa
    heads = w.heads  # the rank's heads (layers.widths)
    qr, qk, v = g.mla_q_rank, g.mla_qk_head, g.mla_v_head
    rope, kvr = g.mla_rope, g.mla_kv_rank
    has_qr = (qr > 0).astype(float)
    mla = _gemms([(where(qr > 0, qr, heads * qk), d, 1.0), (heads * qk, qr, has_qr),
                  (kvr + rope, d, 1.0), (heads * (qk - rope + v), kvr, 1.0),
                  (d, heads * v, 1.0)], t, rates, elem)[:2]
    on = g.mla > 0
    if all_of(on):  # every row MLA: GQA's projections are no row's
        return mla
    if gqa is None:
        gqa = gqa_gemm_times(g, w, rates, elem)
    return where(on, mla[0], gqa[0]), where(on, mla[1], gqa[1])


def mlp_gemm_times(g, tokens, ffn_local, rates, elem):
    """Forward, backward and down-projection forward time of a dense MLP of local width
    ``ffn_local`` (up and gate fused: 2f with SwiGLU) [s]; 0 where the width is 0."""
    wide = ffn_local > 0
    if type(wide) is np.ndarray and not any_of(wide):  # no such MLP on any row (a grid's group)
        # the zeros the selects below give, of the times' shape, without computing the times
        zero = np.zeros(broadcast_shape(wide.shape, *map(np.shape, (
            tokens, g.swiglu, g.d_model, elem, *rates))))
        return zero, zero.copy(), zero.copy()
    up = where(g.swiglu > 0, 2.0, 1.0) * ffn_local
    times = _gemms([(up, g.d_model, 1.0), (g.d_model, ffn_local, 1.0)], tokens, rates, elem)
    return tuple(where(wide, x, 0.0) for x in times)


def moe_tokens(g):
    """Tokens a rank routes per MoE layer and micro-batch: ``b·s/(cp·tp)`` (Megatron runs MoE
    layers sequence-parallel when tp > 1) [-]."""
    return g.tokens_per_rank / g.tp


def routing(g):
    """Rows per rank (the busiest rank's, λ included), rows per local expert, local experts,
    the load factor λ and the local expert width, per MoE layer and micro-batch [-]."""
    t, k, etp, ep = moe_tokens(g), g.moe_top_k, g.etp, g.ep
    e = maximum(g.n_experts, 1.0)
    mean = moe_costs.routed_rows_per_rank(t, k, etp)
    cf = g.moe_capacity_factor
    lam = moe_costs.load_factor(mean, ep, g.moe_imbalance, cf)
    rows = where(cf > 0, moe_costs.sent_rows(t, k, e, cf) * etp, mean * lam)
    local = maximum(e / ep, 1.0)
    return Routing(tokens=t, rows=rows, rows_per_expert=rows / local, local=local,
                   load_factor=lam, ffn_local=g.expert_ffn / etp, mean_rows=mean)
