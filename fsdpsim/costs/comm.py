"""Communication: bytes of every FSDP/ZeRO/DDP collective and their time on a two-level network.

Collective volumes (per GPU, per step)
--------------------------------------
FSDP groups parameters into units (one per transformer block plus the root: embeddings, final
norm and LM head). Per unit and micro-batch (Zhao et al. 2023, PyTorch FSDP, arXiv 2304.11277
§3.2; Rajbhandari et al. 2020, ZeRO §7):

=============  ==========================  ===========================  =======================
strategy       all-gather (shard group)    reduce-scatter (shard grp)   all-reduce
=============  ==========================  ===========================  =======================
full (ZeRO-3)  forward, and backward when  every micro-batch            –
               resharded after forward
grad_op (Z-2)  forward                     every micro-batch            –
optimizer (Z1) once per step, after the    once per step (last micro-   –
               optimizer step               batch)
none (DDP)     –                           –                            full grads, once a step
hybrid (HSDP)  as full, within the shard   as full, within the group    the shard (unit / S)
               group of size S                                          across R replicas,
                                                                        every micro-batch
=============  ==========================  ===========================  =======================

The root unit is not resharded after forward by default (FSDP2 ``reshard_after_forward=None``,
and FSDP1 FULL_SHARD alike), so it is gathered once per micro-batch: AG calls = 2·U − 1 per
micro-batch with U units (verified against torch 2.13 in
``tests/data/reference/torch_validation_on_cpu.md`` §2).

Bytes are tensor bytes (AG: the gathered output; RS: the padded input; AR: the buffer), the
quantities torch's ``c10d`` ops see. FSDP2 pads every parameter's dim 0 to a multiple of the
shard-group size; FSDP1 pads each unit's flat parameter (:func:`padded_numel`).

Time (alpha-beta model of ring collectives on a two-level network)
------------------------------------------------------------------
A ring over a group of k GPUs moves (k−1)/k · M bytes over every ring edge for an all-gather
or reduce-scatter of an M-byte buffer, and twice that for an all-reduce (Patarasuk & Yuan 2009;
Thakur et al. 2005). Edges inside a node run on the scale-up link. NCCL builds one ring per
channel and spreads the channels over the node's NICs, forwarding inside the node over NVLink,
so the node-crossing edges of the g group members on a node share g NICs' worth of bandwidth:
the ring's bus bandwidth is ``min(link, g · nic_share)`` (nic_share = NICs per node × line rate
/ GPUs per node), each at its achievable fraction. This is the nccl-tests ``busbw``
(NVIDIA nccl-tests PERFORMANCE.md): 2 nodes of 8 A100 with 4 HDR NICs each measure 86 GB/s,
86 % of the node's 100 GB/s, far above one GPU's 12.5 GB/s share (hardware.md §6.2). How much
of the line rate a fabric sustains under many concurrent rings is the network's achievable
fraction (a catalog value, calibrated: congested RoCE fabrics sustain far less than
InfiniBand). Each of the k−1 ring steps pays a latency α, the inter-node one when the ring
leaves the node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fsdpsim.costs.compute import as_array, as_values, maximum, minimum, one_flag, where

STRATEGIES = ("full", "grad_op", "optimizer", "none", "hybrid")
STRATEGY_CODES = {name: i for i, name in enumerate(STRATEGIES)}
FULL, GRAD_OP, OPTIMIZER, NONE, HYBRID = range(5)


def padded_numel(shapes: Sequence[tuple[str, tuple[int, ...]]], shard_size,
                 per_parameter: bool = True):
    """Elements of one FSDP unit after padding for ``shard_size`` ranks [-].

    FSDP2 (``fully_shard``) shards every parameter on dim 0 and pads it to
    ``ceil(d0 / S) · S`` rows; FSDP1 flattens the unit and pads the flat parameter to a multiple
    of S (torch 2.13 ``_fsdp_param.py`` / ``_flat_param.py``; checked in
    torch_validation_on_cpu.md §2 rules 2-3). ``shapes`` is a list of (name, shape) pairs
    (:meth:`fsdpsim.model.spec.ModelSpec.unit_parameter_shapes`). Vectorised over ``shard_size``.
    """
    shapes = [shape for _, shape in shapes]
    s = as_array(shard_size)
    if per_parameter:
        if not shapes:
            return np.zeros_like(s)
        # One row per parameter (whole numbers: the sum over rows is exact in any order).
        column = (len(shapes),) + (1,) * s.ndim
        d0 = np.array([float(shape[0]) if len(shape) else 1.0 for shape in shapes])
        rest = np.array([float(math.prod(shape[1:])) if len(shape) > 1 else 1.0
                         for shape in shapes])
        return (np.ceil(d0.reshape(column) / s) * s * rest.reshape(column)).sum(axis=0)
    flat = float(sum(math.prod(shape) for shape in shapes))
    return np.ceil(flat / s) * s


def ring_coefficients(group_size, members_per_node, link_bytes_per_s, nic_share_bytes_per_s,
                      link_latency_s, nic_latency_s):
    """Per-byte and fixed time of one ring pass over a group: ``(s_per_byte, latency_s)``.

    ``t = passes · (M · s_per_byte + latency_s)`` for an M-byte buffer (:func:`ring_time_s`),
    with ``s_per_byte = (k−1)/k / busbw`` and ``latency_s = (k−1)·α``; both 0 for k ≤ 1.
    ``busbw = link`` inside a node and ``min(link, g · nic_share)`` across nodes (``link``
    drops out when g = 1); α is the NIC latency once the ring leaves the node. Computing the
    pair once per group lets every collective on that group cost one multiply-add.
    """
    k = as_array(group_size)
    g = minimum(as_array(members_per_node), k)
    multi_node = k > g
    link = as_array(link_bytes_per_s)
    intra_bw = where(g > 1, link, np.inf)
    busbw = where(multi_node, minimum(intra_bw, g * as_array(nic_share_bytes_per_s)), link)
    alpha = where(multi_node, as_array(nic_latency_s), as_array(link_latency_s))
    steps = maximum(k - 1.0, 0.0)
    return steps / maximum(k, 1.0) / busbw, steps * alpha


def ring_time_s(message_bytes, group_size, members_per_node, link_bytes_per_s,
                nic_share_bytes_per_s, link_latency_s, nic_latency_s, passes=1.0):
    """Time of a ring collective over ``group_size`` GPUs [s].

    Parameters
    ----------
    message_bytes : M, the full buffer (all-gather output, reduce-scatter input) [B]
    group_size : k, GPUs in the group [-]
    members_per_node : g, group members per node (k when the group fits in one node) [-]
    link_bytes_per_s : achievable scale-up bandwidth per GPU, one direction [B/s]
    nic_share_bytes_per_s : achievable NIC bandwidth per GPU, one direction [B/s]
    link_latency_s, nic_latency_s : per ring step [s]
    passes : 1 for all-gather and reduce-scatter, 2 for all-reduce [-]

    ``t = passes · (k−1) · (M / k / busbw + α)`` (:func:`ring_coefficients`).
    """
    per_byte, latency = ring_coefficients(group_size, members_per_node, link_bytes_per_s,
                                          nic_share_bytes_per_s, link_latency_s, nic_latency_s)
    return as_array(passes) * (as_array(message_bytes) * per_byte + latency)


def fsdp_calls_per_microbatch(strategy, reshard_after_forward):
    """Per-unit collective calls per micro-batch for block units: (all-gather, reduce-scatter,
    all-reduce), each an array; see the module table. Root units use ``reshard=False``.

    ``strategy`` is an integer code array (:data:`STRATEGY_CODES`).
    """
    st = as_values(strategy)
    reshard = as_values(reshard_after_forward, float)
    sharded_params = (st == FULL) | (st == HYBRID)
    ag = where(sharded_params, 1.0 + reshard, where(st == GRAD_OP, 1.0, 0.0))
    rs = where(sharded_params | (st == GRAD_OP), 1.0, 0.0)
    ar = where(st == HYBRID, 1.0, 0.0)
    return ag, rs, ar


def fsdp_calls_per_step(strategy):
    """Per-unit calls that happen once per optimizer step, not per micro-batch:
    (all-gather, reduce-scatter, all-reduce). ZeRO-1 reduce-scatters the accumulated gradient
    and all-gathers the updated parameters once; DDP all-reduces once (``no_sync`` for the
    other micro-batches; Li et al. 2020, PyTorch DDP, VLDB §3.2.4)."""
    st = as_values(strategy)
    zero1 = where(st == OPTIMIZER, 1.0, 0.0)
    ar = where(st == NONE, 1.0, 0.0)
    return zero1, zero1, ar


def all_to_all_coefficients(group_size, members_per_node, link_bytes_per_s,
                            nic_share_bytes_per_s, link_latency_s, nic_latency_s,
                            inter_scale=1.0, intra_scale=1.0):
    """Per-byte and fixed time of an all-to-all over a group: ``(s_per_byte, latency_s)``.

    Each of the k ranks sends 1/k of its M-byte buffer to every other rank (NCCL's all-to-all
    is k−1 concurrent send/recv pairs). Of its M bytes, (g−1)/k go to the g−1 peers in its
    scale-up domain over the link and (k−g)/k leave the domain over the GPU's NIC share, the
    two concurrently (different engines), so ``t = M · max((g−1)/k / link, (k−g)/k / nic)
    + (k−1)·α`` (Thakur et al. 2005 §4 pairwise exchange; DeepSpeed-Ulysses, Jacobs et al.
    2023, arXiv 2309.14509 §3.1 for the communication volume). α is the NIC latency once the
    group spans domains. ``M`` is the local buffer [B]. ``inter_scale`` scales the bytes that
    leave the domain (a node-deduplicating dispatch: :func:`fsdpsim.costs.moe.node_dedup_factor`),
    ``intra_scale`` those that stay in it (a rank-deduplicating one: the same function over the
    group's ranks).
    """
    k = as_array(group_size)
    g = minimum(as_array(members_per_node), k)
    kk = maximum(k, 1.0)
    intra = (g - 1.0) / kk
    if not (type(intra_scale) is float and intra_scale == 1.0):  # x · 1.0 is x
        intra = intra * as_array(intra_scale)
    intra = intra / as_array(link_bytes_per_s)
    spans = one_flag(k > g)
    if type(spans) is np.bool_ and not spans:  # inside one domain on every row
        inter = 0.0
    else:
        inter = where(spans, (k - g) / kk * as_array(inter_scale)
                      / as_array(nic_share_bytes_per_s), 0.0)
    alpha = where(spans, as_array(nic_latency_s), as_array(link_latency_s))
    return maximum(intra, inter), maximum(k - 1.0, 0.0) * alpha


def p2p_coefficients(same_domain, link_bytes_per_s, nic_share_bytes_per_s, link_latency_s,
                     nic_latency_s):
    """Per-byte and fixed time of one point-to-point transfer between pipeline neighbours:
    over the scale-up link when both stages share a domain, else over the sender's NIC share
    (``(s_per_byte, latency_s)``; Narayanan et al. SC21 §3.2: activations and their gradients
    cross stage boundaries once per micro-batch each way)."""
    same = as_values(same_domain, bool)
    spb = where(same, 1.0 / as_array(link_bytes_per_s), 1.0 / as_array(nic_share_bytes_per_s))
    return spb, where(same, as_array(link_latency_s), as_array(nic_latency_s))
