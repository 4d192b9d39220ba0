"""Engine stage 3: the time of every collective a micro-batch or a step issues, per group.

Each group of the plan (:mod:`fsdpsim.layout`: tensor, context, pipeline, FSDP shard, HSDP
replica and data-parallel world) gets one ring (seconds per byte, latency) pair on the tier it
spans (:func:`fsdpsim.costs.comm.ring_coefficients`); every collective is then a multiply-add.
Formulas: data-parallel collectives :mod:`fsdpsim.costs.comm`; tensor- and context-parallel
volumes Shoeybi et al. 2019 §3, Korthikanti et al. 2022 §4.2.2, Liu et al. 2023 (ring
attention), Jacobs et al. 2023 (Ulysses); pipeline point-to-point Narayanan et al. SC21 §3.2.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from fsdpsim.costs import comm
from fsdpsim.costs import tensor_parallel as tensor_parallel_costs


def group_coefficients(g: Mapping[str, np.ndarray], r: Mapping[str, np.ndarray],
                       tp: bool = True):
    """``{group: (s_per_byte, latency_s)}`` of a ring over each group of the plan (the TP
    group's only when ``tp``: some row has tp > 1)."""
    ring = dict(link_bytes_per_s=r["link"], nic_share_bytes_per_s=r["nic"],
                link_latency_s=g["link_latency_s"], nic_latency_s=g["nic_latency_s"])
    groups = ("shard", "replicate", "dp_world") + (("tp",) if tp else ())
    return {name: comm.ring_coefficients(g[f"{name}_size"], g[f"{name}_per_node"], **ring)
            for name in groups}


#: The tensor- and context-parallel terms of plans without those dimensions (all zero).
NO_TENSOR_PARALLEL = {k: 0.0 for k in ("tp_layer_fwd_s", "tp_layer_bwd_s",
                                       "tp_layer_fwd_exposed_s", "tp_layer_bwd_exposed_s",
                                       "tp_root_s", "tp_layer_bytes", "tp_root_bytes")}
NO_CONTEXT_PARALLEL = {k: 0.0 for k in ("cp_layer_fwd_s", "cp_layer_bwd_s",
                                        "cp_layer_fwd_exposed_s", "cp_layer_bwd_exposed_s",
                                        "cp_layer_bytes")}


def data_parallel(g, co, n_units):
    """FSDP / ZeRO / DDP / HSDP collectives of one stage holding ``n_units`` block units, and
    the root unit [s]: one call of each kind, per unit (module table of costs/comm.py)."""
    elem = g["compute_bytes"]
    shard = g["shard_size"]
    shard_spb, shard_lat = co["shard"]
    repl_spb, repl_lat = co["replicate"]
    world_spb, world_lat = co["dp_world"]
    block_param_bytes = g["block_numel_padded"] * elem
    root_param_bytes = g["root_numel_padded"] * elem
    block_grad_bytes = g["block_numel_padded"] * g["reduce_bytes"]
    root_grad_bytes = g["root_numel_padded"] * g["reduce_bytes"]
    t = {
        "ag_block_s": block_param_bytes * shard_spb + shard_lat,
        "ag_root_s": root_param_bytes * shard_spb + shard_lat,
        "rs_block_s": block_grad_bytes * shard_spb + shard_lat,
        "rs_root_s": root_grad_bytes * shard_spb + shard_lat,
        # HSDP: all-reduce (two passes) of each shard across replicas; DDP: of the whole unit.
        "hsdp_ar_block_s": 2.0 * (block_grad_bytes / shard * repl_spb + repl_lat),
        "hsdp_ar_root_s": 2.0 * (root_grad_bytes / shard * repl_spb + repl_lat),
        "ddp_ar_block_s": 2.0 * (block_grad_bytes * world_spb + world_lat),
        "ddp_ar_root_s": 2.0 * (root_grad_bytes * world_spb + world_lat),
        "zero1_rs_block_s": block_grad_bytes * world_spb + world_lat,
        "zero1_rs_root_s": root_grad_bytes * world_spb + world_lat,
        "zero1_ag_all_s": ((n_units * g["block_numel_padded"] + g["root_numel_padded"]) * elem
                           * world_spb + world_lat),
    }
    return t


def _ring_time_s(c, prefix, spb, lat):
    """Seconds of the all-reduces (two ring passes), all-gathers and reduce-scatters (one pass
    each) counted in ``c`` under ``prefix`` (``forward`` / ``backward``)."""
    return (2.0 * (c[f"{prefix}_all_reduce_bytes"] * spb + c[f"{prefix}_all_reduce_calls"] * lat)
            + c[f"{prefix}_all_gather_bytes"] * spb + c[f"{prefix}_all_gather_calls"] * lat
            + c[f"{prefix}_reduce_scatter_bytes"] * spb
            + c[f"{prefix}_reduce_scatter_calls"] * lat)


def _bytes(c):
    return sum(c[f"{d}_{kind}_bytes"] for d in ("forward", "backward")
               for kind in ("all_reduce", "all_gather", "reduce_scatter"))


def tensor_parallel(g, co, w, layer):
    """Tensor-parallel collectives of one layer and of the root, one micro-batch, and what of
    them is exposed [s].

    Volumes from :func:`fsdpsim.costs.tensor_parallel.tp_layer_collectives` (Megatron: two
    all-reduces forward and two backward per layer, Shoeybi et al. 2019 §3; with sequence
    parallelism all-gathers and reduce-scatters of the same bytes plus the backward re-gather
    of the saved shard, Korthikanti et al. 2022 §4.2.2), checked call for call against torch
    DTensor on gloo. Each runs as a ring on the TP group's tier (all-reduce: two passes).
    Exposed by default; with ``tp_overlap`` (async TP / Megatron's TP comm overlap) it hides
    behind the GEMMs next to it and only the excess shows.
    """
    spb, lat = co["tp"]
    on = g["tp_size"] > 1
    sp = g["sequence_parallel"] > 0
    layer_c = tensor_parallel_costs.tp_layer_collectives(
        g["micro_batch"] * g["seq_len"] / g["cp"], g["d_model"], g["compute_bytes"], g["tp"], sp)
    root_c = tensor_parallel_costs.tp_head_collectives(
        g["micro_batch"] * g["seq_len"] / g["cp"], g["d_model"], g["vocab_size"],
        g["compute_bytes"], g["tp"], sp)
    fwd_s = np.where(on, _ring_time_s(layer_c, "forward", spb, lat), 0.0)
    bwd_s = np.where(on, _ring_time_s(layer_c, "backward", spb, lat), 0.0)
    overlap = g["tp_overlap"] > 0
    fwd_exposed = np.where(overlap, np.maximum(fwd_s - layer["gemm_fwd_s"], 0.0), fwd_s)
    bwd_exposed = np.where(overlap, np.maximum(bwd_s - layer["gemm_bwd_s"], 0.0), bwd_s)
    root_s = np.where(on, _ring_time_s(root_c, "forward", spb, lat)
                      + _ring_time_s(root_c, "backward", spb, lat), 0.0)
    return {"tp_layer_fwd_s": fwd_s, "tp_layer_bwd_s": bwd_s,
            "tp_layer_fwd_exposed_s": fwd_exposed, "tp_layer_bwd_exposed_s": bwd_exposed,
            "tp_root_s": root_s, "tp_layer_bytes": np.where(on, _bytes(layer_c), 0.0),
            "tp_root_bytes": np.where(on, _bytes(root_c), 0.0)}


def context_parallel(g, co, w, layer, r):
    """Context-parallel communication of one layer and one micro-batch [s].

    Ring (Liu et al. 2023, arXiv 2310.01889; Megatron/TE ``AttnFuncWithCPAndKVP2P``): the
    local K and V blocks travel cp−1 hops around the ring in forward, K, V and their gradients
    in backward (:func:`fsdpsim.costs.tensor_parallel.cp_ring_attention_bytes`); each hop is a
    send/recv between ring neighbours (over the link inside a scale-up domain, else the NIC)
    and overlaps the attention of the block before it, so only the excess over the attention
    compute is exposed. All-to-all (Ulysses, Jacobs et al. 2023 §3.1,
    :func:`~fsdpsim.costs.tensor_parallel.cp_all_to_all_bytes`): q, k, v are exchanged before
    attention and the output after it, the reverse in backward; not overlapped.
    """
    elem = g["compute_bytes"]
    cp = g["cp_size"]
    tokens = g["micro_batch"] * g["seq_len"]
    ring = tensor_parallel_costs.cp_ring_attention_bytes(tokens, g["kv_dim"], elem, g["cp"],
                                                         g["tp"])
    spb, lat = comm.p2p_coefficients(g["cp_per_node"] >= cp, r["link"], r["nic"],
                                     g["link_latency_s"], g["nic_latency_s"])
    ring_fwd = ring["forward_bytes"] * spb + ring["forward_calls"] * lat
    ring_bwd = (ring["backward_kv_bytes"] + ring["backward_dkv_bytes"]) * spb \
        + ring["backward_kv_calls"] * lat
    a2a = tensor_parallel_costs.cp_all_to_all_bytes(tokens, g["q_dim"], g["kv_dim"], elem,
                                                    g["cp"], g["tp"])
    a2a_spb, a2a_lat = comm.all_to_all_coefficients(
        cp, g["cp_per_node"], r["link"], r["nic"], g["link_latency_s"], g["nic_latency_s"])
    a2a_fwd = a2a["forward_bytes"] * a2a_spb + a2a["forward_calls"] * a2a_lat
    a2a_bwd = a2a["backward_bytes"] * a2a_spb + a2a["backward_calls"] * a2a_lat
    all2all = g["cp_all2all"] > 0
    on = cp > 1
    fwd_s = np.where(on, np.where(all2all, a2a_fwd, ring_fwd), 0.0)
    bwd_s = np.where(on, np.where(all2all, a2a_bwd, ring_bwd), 0.0)
    fwd_exposed = np.where(all2all, fwd_s, np.maximum(fwd_s - layer["attn_fwd_s"], 0.0))
    bwd_exposed = np.where(all2all, bwd_s, np.maximum(bwd_s - layer["attn_bwd_s"], 0.0))
    byte_count = np.where(on, np.where(all2all, a2a["forward_bytes"] + a2a["backward_bytes"],
                                       ring["forward_bytes"] + ring["backward_kv_bytes"]
                                       + ring["backward_dkv_bytes"]), 0.0)
    return {"cp_layer_fwd_s": fwd_s, "cp_layer_bwd_s": bwd_s,
            "cp_layer_fwd_exposed_s": fwd_exposed, "cp_layer_bwd_exposed_s": bwd_exposed,
            "cp_layer_bytes": byte_count}


def pipeline_p2p(g, w, r):
    """Seconds of one stage-boundary transfer (an activation forward, or its gradient
    backward) for one micro-batch: b·s/cp × h in the compute dtype, divided over the TP group
    with sequence parallelism (Megatron sends the SP-split tensor; without SP each TP rank
    sends the whole tensor to its peer). On the link when neighbouring stages share a scale-up
    domain, else over the NIC share."""
    split = np.where(g["sequence_parallel"] > 0, g["tp"], 1.0)
    a_bytes = w["tokens"] * g["d_model"] * g["compute_bytes"] / split
    spb, lat = comm.p2p_coefficients(g["pp_per_node"] > 1, r["link"], r["nic"],
                                     g["link_latency_s"], g["nic_latency_s"])
    on = g["pp_size"] > 1
    return np.where(on, a_bytes * spb + lat, 0.0), np.where(on, a_bytes, 0.0)
