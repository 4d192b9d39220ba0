"""Engine stage helper: the expert-parallel communication of a MoE layer.

Per MoE layer and micro-batch the all-to-alls (dispatch and combine, forward and backward) on
the tier the EP group spans, with a flex (DeepEP/HybridEP) dispatcher's deduplication over
nodes and ranks and its measured link rate, the expert-tensor-parallel gathers, and what shows:
all of it, or with ``ep_overlap`` what outlasts the piece of the other micro-batch's layer each
all-to-all is paired with (:func:`paired_exposure_s`, slowed by the dispatcher's SM carve-out),
plus the warm-up and cool-down chunks Megatron's combined 1F1B cannot pair
(:func:`unpaired_overlap_s`). :func:`fsdpsim.engine.moe.layer_kinds` calls it with the MoE
layer's times.
"""

from __future__ import annotations

import numpy as np

from fsdpsim.costs import comm, nccl, overlap
from fsdpsim.costs import moe as moe_costs
from fsdpsim.costs.compute import any_of, maximum, minimum, where
from fsdpsim.engine import collectives
from fsdpsim.engine.results import ExpertComm


def a2a_coefficients(g, r):
    """``(s_per_byte, latency_s)`` of an all-to-all over the EP group: inside a scale-up domain
    on the link, else the NIC share at the fabric's decay with the nodes the group spans, the
    placement and the pod factor (:func:`fsdpsim.costs.comm.all_to_all_coefficients`).

    The flex dispatcher (DeepEP/HybridEP) sends a token once to each node that holds any of its
    experts over the NICs and once to each such rank over the link, where the receiver fans it
    out to its local experts (DeepEP ``get_dispatch_layout``: ``is_token_in_rank``; HybridEP's
    test counts the received rows, one per token and rank): fewer bytes on both tiers
    (:func:`fsdpsim.costs.moe.node_dedup_factor` over the nodes, and over the ranks), the link
    at its measured rate for those kernels (the catalog's ``ep_link_fraction``, not NCCL's
    ``link_fraction``)."""
    size, per_node = g.ep_size, g.ep_per_node
    gpn = minimum(per_node, size)
    nodes = np.ceil(size / maximum(gpn, 1.0))
    dedup = g.moe_node_dedup
    inter_scale, intra_scale, link = 1.0, 1.0, r.link
    if any_of(dedup > 0):
        flex = dedup > 0
        dedup_of = moe_costs.node_dedup_factor
        args = (g.moe_top_k, g.n_experts, g.moe_router_groups,
                g.moe_router_group_top_k)
        inter_scale = where(flex, dedup_of(nodes, *args), 1.0)
        intra_scale = where(flex, dedup_of(size, *args), 1.0)
        link = where(flex, g.link_bytes_per_s * g.ep_link_fraction, link)
    fabric = nccl.fabric_factor(nodes, g.nic_decay_per_doubling, g.nic_decay_from_nodes,
                                g.nic_decay_floor) * g.placement_factor
    per_pod = g.ep_per_pod
    if per_pod is not None and any_of(per_pod < size):
        fabric = fabric * nccl.pod_factor(size, per_pod, gpn, g.oversubscription)
    return comm.all_to_all_coefficients(size, per_node, link, r.nic * fabric,
                                        g.link_latency_s, g.nic_latency_s, inter_scale,
                                        intra_scale)


def expert_parallel(g, r, ro, lt_m):
    """Expert-parallel communication of one MoE layer and one micro-batch [s, B].

    All-to-alls (:func:`fsdpsim.costs.moe.all_to_all_bytes`) over the EP group, at the busiest
    rank's volume (λ times the mean; padded capacity carries its padding already); with etp > 1
    an all-gather after the dispatch and a reduce-scatter before the combine over the ETP group
    (NCCL's cost per call). Exposed unless ``ep_overlap``: then :func:`paired_exposure_s`."""
    elem, cf = g.compute_bytes, g.moe_capacity_factor
    a2a = moe_costs.all_to_all_bytes(ro.tokens, g.moe_top_k, g.d_model, g.n_experts,
                                      elem, g.moe_fp8_dispatch > 0, cf)
    spb, lat = a2a_coefficients(g, r)
    busiest = where(cf > 0, 1.0, ro.load_factor)
    on = g.ep_size > 1
    # one dispatch-direction call (forward dispatch, backward the combine's gradient) and one
    # combine-direction call (forward combine, backward the dispatch's gradient)
    dispatch_s = where(on, a2a.dispatch_bytes * spb * busiest + lat, 0.0)
    combine_s = where(on, a2a.combine_bytes * spb * busiest + lat, 0.0)
    fwd_bytes = where(on, a2a.forward_bytes, 0.0)
    bwd_bytes = where(on, a2a.backward_bytes, 0.0)
    if any_of(g.etp_size > 1):
        per_dir = moe_costs.etp_gather_bytes(ro.tokens, g.moe_top_k, g.d_model,
                                             g.n_experts, g.etp, elem, cf)
        cands = nccl.candidates(g, g.etp_size, g.etp_per_node,
                                collectives.bus_bandwidth(g, r, g.etp_size, g.etp_per_node),
                                g.link_nvlink > 0, all_reduce=False)
        # one gather beside each dispatch-direction call, one reduce-scatter beside each
        # combine-direction call
        etp_s = where(g.etp_size > 1, nccl.time_s(per_dir / 2.0 * busiest, cands, 1.0), 0.0)
        dispatch_s, combine_s = dispatch_s + etp_s, combine_s + etp_s
        fwd_bytes, bwd_bytes = fwd_bytes + per_dir, bwd_bytes + per_dir
    fwd_s = bwd_s = dispatch_s + combine_s
    fwd_paired, bwd_paired = paired_exposure_s(g, lt_m, dispatch_s, combine_s)
    overlapped = g.ep_overlap > 0
    return ExpertComm(fwd_s=fwd_s, bwd_s=bwd_s,
                      fwd_exposed_s=where(overlapped, fwd_paired, fwd_s),
                      bwd_exposed_s=where(overlapped, bwd_paired, bwd_s),
                      fwd_bytes=fwd_bytes, bytes=fwd_bytes + bwd_bytes)


def paired_exposure_s(g, lt_m, dispatch_s, combine_s):
    """What of one layer's all-to-alls shows when overlapped, forward and backward [s].

    Megatron's combined 1F1B runs one micro-batch's forward of a layer beside another's
    backward of the same kind of layer in three phases, the communication stream against the
    computation stream (Megatron-LM ``TransformerLayerSchedulePlan.run``, core 0.14 to main):

    =====================================  ==================================================
    communication                          computation
    =====================================  ==================================================
    backward combine (dispatch-direction)  forward attention (and what precedes the dispatch)
    forward dispatch, backward dispatch    backward and forward MLP (router, experts)
    forward combine                        backward attention
    =====================================  ==================================================

    Each phase takes ``max(f', c)`` with ``f'`` the computation slowed by the SMs the
    communication occupies (:func:`fsdpsim.costs.overlap.slowed_compute_s`: the flex
    dispatcher's carve-out :data:`fsdpsim.costs.moe.FLEX_DISPATCH_COMPUTE_SLOWDOWN`, NCCL's the
    catalog's ``comm_compute_slowdown``); what shows is ``max(f', c) − f`` summed over the
    phases, so a long all-to-all cannot hide behind a short partner even when the layer's
    computation as a whole outlasts its communication. The middle phase's exposure is split
    between the two passes by their communication."""
    slowdown = where(g.moe_node_dedup > 0, moe_costs.FLEX_DISPATCH_COMPUTE_SLOWDOWN,
                     g.comm_compute_slowdown)

    def shows(compute_s, comm_s):
        return maximum(overlap.slowed_compute_s(compute_s, comm_s, slowdown), comm_s) - compute_s

    mlp_fwd, mlp_bwd = lt_m.moe_mlp_fwd_s, lt_m.moe_mlp_bwd_s
    attn_fwd = maximum(lt_m.block_fwd_s - mlp_fwd, 0.0)
    attn_bwd = maximum(lt_m.block_bwd_s - mlp_bwd, 0.0)
    first = shows(attn_fwd, dispatch_s)  # the combine's gradient, sent like a dispatch
    middle = shows(mlp_fwd + mlp_bwd, dispatch_s + combine_s)
    last = shows(attn_bwd, combine_s)
    total = dispatch_s + combine_s
    fwd_share = where(total > 0, dispatch_s / where(total > 0, total, 1.0), 0.5)
    return last + middle * fwd_share, first + middle * (1.0 - fwd_share)


def unpaired_overlap_s(g, ep, layers_stage, phi):
    """The all-to-all time the overlap cannot hide in a step [s]: Megatron's combined 1F1B
    pairs one micro-batch's forward with another's backward only in the steady state; the
    first pipeline rank's warm-up forwards and its cool-down backwards run alone, their
    all-to-alls exposed. Warm-up model chunks: ``2(pp − 1) + (vpp − 1)·pp + 1`` interleaved
    (one more than without the overlap), ``pp`` without interleaving, 1 without pipelining
    (the first forward and the last backward), at most all of them (Megatron-LM
    ``schedules.get_pp_rank_microbatches``, ``combined_1f1b_schedule_for_no_pipelining``)."""
    pp, vpp = g.pp, g.vpp
    warmup = where(pp > 1, where(vpp > 1, 2.0 * (pp - 1.0) + (vpp - 1.0) * pp + 1.0, pp), 1.0)
    warmup = minimum(warmup, g.grad_accum * vpp)
    hidden = (ep.fwd_s - ep.fwd_exposed_s) + (ep.bwd_s - ep.bwd_exposed_s)
    return where(g.ep_overlap > 0, warmup * layers_stage * phi / vpp * hidden, 0.0)


NO_EXPERT_PARALLEL = ExpertComm(*[0.0] * 6)  # no MoE row: every term zero
