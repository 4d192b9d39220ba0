"""Mixture of experts: routed tokens, expert-parallel all-to-all volumes, the busiest rank's
load, expert GEMMs on their real shapes, and the memory of experts and routed tokens.

Pure, vectorised functions (numbers or numpy arrays that broadcast; SI units in the names), as
the rest of :mod:`fsdpsim.costs`.

One MoE layer on one rank (``T`` tokens it holds: ``b·s/(cp·tp)``, Megatron runs MoE layers
sequence-parallel when tp > 1; top-``k`` of ``E`` routed experts of width ``f``; ``ep``
expert-parallel and ``etp`` expert-tensor-parallel ranks):

* **router**: logits ``T × E`` (a ``T × h × E`` GEMM), then top-k (Fedus et al. 2022 §2.1);
* **dispatch**: the ``T·k`` routed copies are permuted by expert and sent with one all-to-all
  over the EP group, ``T·k·h`` elements per rank (Lepikhin et al. 2021, GShard §2.3; Megatron-
  Core ``MoEAlltoAllTokenDispatcher.token_dispatch``); with etp > 1 the received rows are then
  all-gathered over the ETP group (``dispatch_postprocess``);
* **experts**: the rank's ``E/ep`` local experts run as one grouped GEMM, each on the rows
  routed to it, ``T·k·etp·ep/E`` on average (:func:`rows_per_expert`), at width ``f/etp``;
* **combine**: the reverse all-to-all (and reduce-scatter over ETP), then the probability-
  weighted sum; backward runs the same exchanges in reverse (dispatch's backward is a combine,
  DeepEP ``Buffer.dispatch``/``combine``).

Dropless routing waits for the busiest rank, ``λ`` times the mean (:func:`load_factor`); token
dropping with a capacity factor pads every expert to ``ceil(T·k/E · cf)`` rows (Megatron
``get_capacity`` with ``--moe-pad-expert-input-to-capacity``), so the pace is ``cf`` times the
mean and the all-to-alls carry the padding.

References
----------
[1] Lepikhin et al., "GShard", ICLR 2021, arXiv 2006.16668, §2.2-2.3 (expert capacity,
    all-to-all dispatch and combine).
[2] Fedus, Zoph, Shazeer, "Switch Transformers", JMLR 23 (2022), arXiv 2101.03961, §2.2
    (capacity = tokens per batch / experts × capacity factor).
[3] DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv 2412.19437, §3.3.2 (FP8 dispatch with
    1x128 block scales, BF16 combine), §3.2.2 (20 of 132 SMs for all-to-all).
[4] Raab & Steger, "'Balls into Bins' — A Simple and Tight Analysis", RANDOM 1998, LNCS 1518,
    Theorem 1: m balls in n bins, m >= n log n: the fullest bin holds
    m/n + sqrt(2 (m/n) ln n) (1 + o(1)) balls w.h.p.
[6] DeepSeek-AI, DeepEP (github deepseek-ai/DeepEP, README "normal kernels": internode
    dispatch sends each token once over RDMA to every node that holds one of its experts and
    forwards it over NVLink inside that node; combine reduces inside the node first); [3]
    §3.2.2 (node-limited routing, each token to at most M = 4 nodes); Megatron-Core
    ``--moe-router-num-groups`` / ``--moe-router-group-topk`` (group-limited top-k).
[5] Rajbhandari et al., "DeepSpeed-MoE", ICML 2022, arXiv 2201.05596, §5 (expert parameters
    over expert-parallel × expert-data-parallel groups); Megatron-Core "MoE parallel folding"
    (Liu et al. 2025, arXiv 2504.14960, §3).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from fsdpsim.costs import compute
from fsdpsim.costs.compute import any_of, as_array, maximum, where

#: FP8 dispatch: one fp32 scale per 1 x 128 block of a token's hidden vector [3] §3.3.2, on top
#: of one byte per element [B/element].
FP8_SCALE_BYTES_PER_ELEMENT = 4.0 / 128.0
#: Router logits and probabilities are kept in fp32 (Megatron ``--moe-router-dtype fp32``,
#: DeepSeek-V3's gating in fp32) [B].
ROUTER_BYTES = 4.0
#: Fraction by which compute slows while a flex (DeepEP/HybridEP) dispatch or combine runs beside
#: it: their kernels keep their SMs for the whole transfer (Megatron-Core ``moe_deepep_num_sms``
#: 20 of H100's 132 SMs, 15 %; Megatron-Bridge's ``moe_hybridep_num_sms = 32`` of B200's 148,
#: 22 %); NVIDIA, "Scalable Training of Mixture-of-Experts Models with Megatron Core" (arXiv
#: 2603.07685, 2026) §4.2.3: the 20-SM carve-out costs "roughly 20% GEMM efficiency" in the
#: 1F1B all-to-all overlap. NCCL's all-to-all keeps the catalog's ``comm_compute_slowdown``.
FLEX_DISPATCH_COMPUTE_SLOWDOWN = 0.20
#: Host time per local expert of Megatron's experts (``TEGroupedMLP``: two Transformer Engine
#: ``GroupedLinear`` modules, fc1 and fc2), in eager ops of the catalog's ``kernel_overhead_us``
#: (14.5 µs), (forward, backward) by low precision (True) or 16 bits (False).
#:
#: What the host does: TE 2.x (v2.12 ``pytorch/module/grouped_linear.py``) loops over the local
#: experts. Per projection and expert, forward: the input's and the weight's quantizer usage,
#: the expert's rows quantised (``tex.split_quantize``: a tensor and a kernel per split), the
#: cached weight copy looked up (``get_weight_workspace``), one cuBLAS GEMM
#: (``general_grouped_gemm`` -> ``multi_stream_cublas_gemm``: one per expert, round-robin over 4
#: streams), the saved input switched to its column-wise copy and saved; backward: the main
#: gradient looked up and attached, the gradient quantised, the input- and weight-gradient
#: GEMMs, the input freed, a dummy weight gradient for Megatron's DDP and DDP's per-parameter
#: hook. That is the work of one TE ``Linear`` call per expert and projection.
#:
#: How long: TE's own measurement of its CPU time per ``Linear`` call (TransformerEngine PR
#: #3523, GB200's Grace CPU, 2026-09, before / after that PR): MXFP8 114.5 / 103.6 µs forward,
#: 440.9 / 416.9 µs forward and backward; BF16 59.2 / 51.2 and 311.3 / 276.5 µs. The same call
#: costs Grace 2.75x an H100 DGX's Xeon 8480C (TE issues/2053: torch ``Linear`` 37.1 vs 13.5 µs
#: of CPU time per forward). On an x86 host the pre-PR call is then 41.6 µs forward and 118.7 µs
#: backward in MXFP8 (2.9 and 8.2 eager ops), 21.5 and 91.7 µs in BF16 (1.5 and 6.3): per
#: expert and its two projections 6 and 16 ops, 3 and 13. A single grouped kernel only with the
#: opt-in ``use_grouped_tensor`` path of v2.17, not modelled.
HOST_OPS_PER_EXPERT_FWD = {True: 6.0, False: 3.0}
HOST_OPS_PER_EXPERT_BWD = {True: 16.0, False: 13.0}


# -- tokens and load ------------------------------------------------------------------------------
def routed_rows_per_rank(tokens, top_k, etp=1.0):
    """Routed token copies one rank's experts process per MoE layer, on average [-]:
    ``T · k · etp`` (every rank sends its ``T·k`` copies to the experts' owners; with expert
    tensor parallelism each rank computes the rows of its whole ETP group, at width f/etp)."""
    return as_array(tokens) * as_array(top_k) * as_array(etp)


def rows_per_expert(tokens, top_k, etp, ep, n_experts):
    """Rows one expert's GEMMs see on average per MoE layer [-]: ``T·k·etp·ep / E`` (the rank's
    routed rows over its ``E/ep`` local experts). DeepSeek-V3 (k = 8, E = 256) at 4,096 tokens
    per rank: 128 rows without expert parallelism, 8,192 with ep = 64."""
    return routed_rows_per_rank(tokens, top_k, etp) * as_array(ep) / as_array(n_experts)


def default_imbalance(mean_rows_per_rank, ep):
    """The busiest EP rank's routed rows over the mean when routing is balanced and random [-]:
    ``1 + sqrt(2 · ln(ep) / m)`` for ``m`` rows per rank on average ([4] Theorem 1: the
    fullest of n bins after n·m balls). It is the floor a trained router with a balancing loss
    or bias reaches, 1 for ep = 1 (one rank runs every expert: its total does not vary);
    measured routing is worse (``moe_imbalance`` sets it)."""
    m = maximum(as_array(mean_rows_per_rank), 1.0)
    return 1.0 + np.sqrt(2.0 * np.log(maximum(as_array(ep), 1.0)) / m)


def load_factor(mean_rows_per_rank, ep, imbalance, capacity_factor):
    """Rows of the rank that sets the pace over the mean, ``λ`` [-].

    ``capacity_factor > 0``: every expert padded to its capacity, ``λ = cf`` ([1] §2.2, [2]
    §2.2); otherwise dropless: ``imbalance`` where given (> 0), else
    :func:`default_imbalance`. Dropless with a perfectly balanced router (imbalance 1) and
    capacity factor 1.0 are the same step."""
    cf, imb = as_array(capacity_factor), as_array(imbalance)
    dropless = where(imb > 0, imb, default_imbalance(mean_rows_per_rank, ep))
    return where(cf > 0, cf, dropless)


def sent_rows(tokens, top_k, n_experts, capacity_factor):
    """Rows one rank sends in a dispatch all-to-all per MoE layer [-]: its ``T·k`` routed
    copies (dropless), or ``E · ceil(T·k/E · cf)`` when every expert is padded to capacity
    (Megatron ``get_capacity``: ``capacity = ceil(num_tokens·k / E · cf)``)."""
    copies = as_array(tokens) * as_array(top_k)
    e, cf = np.maximum(as_array(n_experts), 1.0), as_array(capacity_factor)
    if not any_of(cf > 0):  # dropless on every row: no capacity to round to
        return copies
    return where(cf > 0, e * np.ceil(copies / e * where(cf > 0, cf, 1.0)), copies)


# -- communication --------------------------------------------------------------------------------
def node_dedup_factor(nodes, top_k, n_experts, groups=1.0, group_top_k=1.0):
    """Inter-node bytes of a node-deduplicating dispatch (DeepEP / HybridEP) over those of a
    plain all-to-all, for one token [-].

    A plain all-to-all sends each of a token's ``k`` routed copies to its expert's rank, so
    ``k·(n−1)/n`` copies cross the NICs on average over ``n`` nodes (experts on consecutive
    ranks, ``E/n`` a node; uniform routing: the force-balanced routing of benchmarks, or a
    balanced router). DeepEP sends one copy to each remote node that holds any of the token's
    experts and fans it out over NVLink there [6]: ``(n−1)·p`` copies, ``p`` the chance that a
    given node is hit. The ``k`` experts are distinct, so a node is missed with the
    hypergeometric chance ``C(E − E/n, k) / C(E, k)``; with group-limited routing whose ``G``
    groups fall on nodes whole (``G`` a multiple of ``n``) the token picks ``t = min(group_top_k,
    k)`` groups first, and the node is missed with ``C(G − G/n, t) / C(G, t)``. The factor is
    ``n·p/k`` (1 on one node): DeepSeek-V3 (k 8 of 256, 8 groups, 4 chosen) over 8 nodes 0.5,
    without the groups 0.66."""
    n = np.maximum(as_array(nodes), 1.0)
    k = np.maximum(as_array(top_k), 1.0)
    e = np.maximum(as_array(n_experts), 1.0)
    g, gt = as_array(groups), np.minimum(as_array(group_top_k), k)
    aligned = (g > 1.0) & (g >= n) & (np.mod(g, n) == 0) & (gt < g)
    total, draws = np.where(aligned, g, e), np.where(aligned, gt, k)
    per_node = total / n
    missed = np.ones(np.broadcast(n, k, e, g, gt).shape)
    for i in range(int(np.max(draws, initial=0.0))):
        left = total - i
        ratio = (total - per_node - i) / np.where(left > 0, left, 1.0)
        missed = missed * np.where(i < draws, np.clip(ratio, 0.0, 1.0), 1.0)
    return np.where(n > 1.0, np.minimum(n * (1.0 - missed) / k, 1.0), 1.0)


def all_to_all_bytes(tokens, top_k, d_model, n_experts, elem_bytes=2.0, fp8_dispatch=False,
                     capacity_factor=0.0):
    """Tensor bytes one rank passes to the expert-parallel all-to-alls of one MoE layer and one
    micro-batch (the ``all_to_all_single`` inputs), forward and backward [B].

    Four calls of ``rows · h`` elements each, ``rows`` from :func:`sent_rows`: forward dispatch
    and combine, backward the combine's gradient (sent like a dispatch) and the dispatch's
    gradient (like a combine). With ``fp8_dispatch`` the two dispatch-direction calls carry one
    byte per element plus a 1x128 block scale ([3] §3.3.2: the activations before the up-
    projections and the gradients before the down-projections in FP8, both combines in BF16).

    Returns :data:`AllToAllVolumes` ``forward_bytes``, ``backward_bytes``, ``dispatch_bytes``,
    ``combine_bytes`` (the
    last two per call: a dispatch-direction call and a combine-direction one; each pass makes
    one of each).
    """
    rows_h = sent_rows(tokens, top_k, n_experts, capacity_factor) * as_array(d_model)
    e = as_array(elem_bytes)
    dispatch = np.where(np.asarray(fp8_dispatch, dtype=bool),
                        1.0 + FP8_SCALE_BYTES_PER_ELEMENT, e) * rows_h
    combine = e * rows_h
    return AllToAllVolumes(forward_bytes=dispatch + combine, backward_bytes=dispatch + combine,
                           dispatch_bytes=dispatch, combine_bytes=combine)


#: :func:`all_to_all_bytes`' volumes [B].
AllToAllVolumes = namedtuple("AllToAllVolumes",
                             "forward_bytes backward_bytes dispatch_bytes combine_bytes")


def expert_host_ops(local_experts, low_precision):
    """Host work of one rank's experts in one micro-batch, (forward, backward), in eager ops of
    the catalog's host time per op ``t_op`` (:func:`fsdpsim.costs.compute.launch_bound_s`):
    ``local · ops`` with ``ops`` from :data:`HOST_OPS_PER_EXPERT_FWD` and
    :data:`HOST_OPS_PER_EXPERT_BWD` [-]; times ``t_op`` the host time [s].

    Where the GPU waits for it (:func:`fsdpsim.engine.moe.layer_kinds`): dropless MoE
    synchronises host and device at the dispatch (the expert splits must be on the host:
    Megatron's alltoall dispatcher ``_maybe_dtoh_and_synchronize``, DeepEP's CPU wait for
    ``num_recv_tokens_per_expert_list``, HybridEP's blocking ``num_permuted_tokens``), so the
    experts' forward starts with an empty queue and takes at least its host time; a backward
    pass starts empty too (after the pipeline's ``torch.cuda.synchronize`` of a non-interleaved
    schedule, ``batch_p2p_sync``, or the last forward's dispatch sync), so its first MoE layer's
    experts show their host time beyond their device time while the later ones hide behind
    the lead the host gains on the device-bound rest of each layer; and a layer never runs
    faster than the host issues all its ops."""
    low = np.asarray(low_precision, dtype=bool)
    local = as_array(local_experts)
    return (local * np.where(low, HOST_OPS_PER_EXPERT_FWD[True], HOST_OPS_PER_EXPERT_FWD[False]),
            local * np.where(low, HOST_OPS_PER_EXPERT_BWD[True], HOST_OPS_PER_EXPERT_BWD[False]))


def etp_gather_bytes(tokens, top_k, d_model, n_experts, etp, elem_bytes=2.0,
                     capacity_factor=0.0):
    """Tensor bytes of the expert-tensor-parallel collectives of one MoE layer and one micro-
    batch, per direction [B]: after the dispatch the received rows are all-gathered over the
    ``etp`` ranks (output ``etp · rows · h``) and before the combine reduce-scattered (input
    the same); backward the reverse (Megatron ``dispatch_postprocess`` /
    ``combine_preprocess``). 0 for etp = 1."""
    rows_h = sent_rows(tokens, top_k, n_experts, capacity_factor) * as_array(d_model)
    t = as_array(etp)
    return np.where(t > 1, 2.0 * t * rows_h * as_array(elem_bytes), 0.0)


# -- compute ---------------------------------------------------------------------------------------
def expert_gemm_times_s(rows_per_expert_, local_experts, d_model, ffn_local, swiglu,
                        matmul_flops_per_s, hbm_bytes_per_s, half_flops, half_k, elem_bytes=2.0):
    """Forward, backward and down-projection forward time of one rank's experts as grouped
    GEMMs [s].

    Each of the ``local_experts`` runs its up (and gate, fused: width 2f with SwiGLU) and down
    projection on its own rows, at :func:`fsdpsim.costs.compute.gemm_time_s`'s roofline and
    tile efficiency in its real shape (``m`` = rows per expert, often a few hundred: then the
    weights' traffic binds); a grouped GEMM is one kernel per projection and pass, so the
    Hockney tail is paid once per kernel, not per expert. Backward: input and weight
    gradients, as :func:`fsdpsim.costs.compute.linear_time_s`.
    """
    inv_r, inv_w, tail_s, half = compute._gemm_rates(matmul_flops_per_s, hbm_bytes_per_s,
                                                     half_flops, half_k)
    m, n_local = as_array(rows_per_expert_), as_array(local_experts)
    d, f = as_array(d_model), as_array(ffn_local)
    up_width = np.where(np.asarray(swiglu, dtype=bool), 2.0, 1.0) * f
    fwd = bwd = 0.0
    down = 0.0
    for n, k in ((up_width, d), (d, f)):
        f_one, b_one = compute._linear_time_s(m, n, k, inv_r, inv_w, 0.0, half, elem_bytes)
        fwd = fwd + n_local * f_one + tail_s
        bwd = bwd + n_local * b_one + 2.0 * tail_s
        down = n_local * f_one + tail_s  # the last shape is the down projection
    return fwd, bwd, down


def router_gemm_times_s(tokens, d_model, n_experts, matmul_flops_per_s, hbm_bytes_per_s,
                        half_flops, half_k, elem_bytes=2.0):
    """Forward and backward time of the router's ``T × h → E`` GEMM [s] (2·T·h·E FLOP
    forward, the weight read once; :func:`fsdpsim.costs.compute.linear_time_s`)."""
    return compute.linear_time_s(tokens, n_experts, d_model, matmul_flops_per_s,
                                 hbm_bytes_per_s, half_flops, half_k, elem_bytes)


def moe_elementwise_bytes(tokens, rows, d_model, ffn_local, n_experts, swiglu, elem_bytes=2.0):
    """HBM bytes of one MoE layer's bandwidth-bound kernels on one rank, (forward, backward) [B].

    Forward: the router's fp32 logits written, read by the softmax/sigmoid and top-k, and the
    probabilities written (3 passes of ``T·E``); permutation before the dispatch (read ``T·h``,
    write ``rows·h``), the expert activation on the routed rows (SwiGLU: read 2f, write f;
    GELU: read f, write f) and the un-permutation with the probability-weighted sum after the
    combine (read ``rows·h``, write ``T·h``). Backward: the gradients of the same kernels
    (activation: SwiGLU read dy, gate, up and write two gradients, 5f; GELU 3f; the two
    permutations again; the router's 3 passes). ``rows`` are the rank's routed rows
    (imbalance or padding included)."""
    t, r, d, f = as_array(tokens), as_array(rows), as_array(d_model), as_array(ffn_local)
    e = as_array(elem_bytes)
    glu = np.asarray(swiglu, dtype=bool)
    router = 3.0 * ROUTER_BYTES * t * as_array(n_experts)
    permute = e * (t * d + r * d)
    fwd = router + 2.0 * permute + e * r * f * np.where(glu, 3.0, 2.0)
    bwd = router + 2.0 * permute + e * r * f * np.where(glu, 5.0, 3.0)
    return fwd, bwd


def expert_fp8_cast_bytes(rows, d_model, ffn_local, local_experts, swiglu):
    """HBM bytes of the FP8 casts of one rank's expert GEMMs, (forward, backward) [B]: the
    inputs of the up and down projections and the local experts' weights forward, the output
    gradients backward, each at
    :data:`fsdpsim.costs.compute.FP8_CAST_TRANSPOSE_BYTES` (Transformer Engine)."""
    r, d, f = as_array(rows), as_array(d_model), as_array(ffn_local)
    gate = np.where(np.asarray(swiglu, dtype=bool), 2.0, 1.0)
    weights = as_array(local_experts) * (gate + 1.0) * d * f
    fwd = compute.FP8_CAST_TRANSPOSE_BYTES * (r * (d + f) + weights)
    bwd = compute.FP8_CAST_TRANSPOSE_BYTES * r * (gate * f + d)
    return fwd, bwd


# -- memory -------------------------------------------------------------------------------------
def routed_saved_bytes_per_row(d_model, ffn_local, swiglu, elem_bytes=2.0):
    """Bytes one routed row saves for backward in a MoE layer [B]: the expert input (for the
    up-projection's weight gradient), the up/gate outputs (SwiGLU 2f, GELU f: the activation's
    backward), the activation output (the down projection's weight gradient), the expert output
    (the probability-weighted sum's backward) and its fp32 probability."""
    d, f = as_array(d_model), as_array(ffn_local)
    up = np.where(np.asarray(swiglu, dtype=bool), 2.0, 1.0) * f
    return as_array(elem_bytes) * (2.0 * d + up + f) + ROUTER_BYTES


def a2a_buffer_bytes(rows, d_model, elem_bytes=2.0):
    """Transient buffers of one dispatch in flight on one rank [B]: the permuted send buffer
    and the receive buffer, ``2 · rows · h`` elements."""
    return 2.0 * as_array(rows) * as_array(d_model) * as_array(elem_bytes)
