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


def group_coefficients(g: Mapping[str, np.ndarray], r: Mapping[str, np.ndarray]):
    """``{group: (s_per_byte, latency_s)}`` of a ring over each group of the plan."""
    ring = dict(link_bytes_per_s=r["link"], nic_share_bytes_per_s=r["nic"],
                link_latency_s=g["link_latency_s"], nic_latency_s=g["nic_latency_s"])
    return {name: comm.ring_coefficients(g[f"{name}_size"], g[f"{name}_per_node"], **ring)
            for name in ("shard", "replicate", "dp_world", "tp", "cp")}


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


def tensor_parallel(g, co, w, layer):
    """Tensor-parallel collectives of one layer and one micro-batch, and what of them is
    exposed [s].

    Per layer, forward and backward each: two all-reduces of the b·s/cp × h activations
    (Shoeybi et al. 2019 §3, Fig. 3: the f and g operators), or with sequence parallelism two
    all-gathers and two reduce-scatters of the same bytes (Korthikanti et al. 2022 §4.2.2):
    the same ring time, so ``4 · (M · s_per_byte + α)`` either way, M = tokens·h·bytes.
    Exposed by default; with ``tp_overlap`` (async TP / Megatron's TP comm overlap) it hides
    behind the GEMMs next to it and only the excess shows.
    """
    spb, lat = co["tp"]
    m_bytes = w["tokens"] * g["d_model"] * g["compute_bytes"]
    per_pass = m_bytes * spb + lat
    fwd_s = np.where(g["tp_size"] > 1, 4.0 * per_pass, 0.0)
    bwd_s = fwd_s
    overlap = g["tp_overlap"] > 0
    fwd_exposed = np.where(overlap, np.maximum(fwd_s - layer["gemm_fwd_s"], 0.0), fwd_s)
    bwd_exposed = np.where(overlap, np.maximum(bwd_s - layer["gemm_bwd_s"], 0.0), bwd_s)
    # Root: vocab-parallel embedding (all-reduce, or reduce-scatter with SP) and the LM head's
    # input gather (SP) / input-gradient all-reduce: two passes each way; the vocab-parallel
    # cross-entropy's three fp32 all-reduces of b·s/cp values (max, sum-exp, target logit).
    loss_s = 3.0 * 2.0 * (w["tokens"] * 4.0 * spb + lat)
    root_s = np.where(g["tp_size"] > 1, 4.0 * per_pass + loss_s, 0.0)
    return {"tp_layer_fwd_s": fwd_s, "tp_layer_bwd_s": bwd_s,
            "tp_layer_fwd_exposed_s": fwd_exposed, "tp_layer_bwd_exposed_s": bwd_exposed,
            "tp_root_s": root_s,
            "tp_layer_bytes": np.where(g["tp_size"] > 1, 8.0 * m_bytes, 0.0)}


def context_parallel(g, co, w, layer, r):
    """Context-parallel communication of one layer and one micro-batch [s].

    Ring (Liu et al. 2023, arXiv 2310.01889; Megatron/TE ``AttnFuncWithCPAndKVP2P``): the
    local K and V blocks travel cp−1 hops around the ring in forward, K, V and their gradients
    in backward: the volume of an all-gather of K,V (forward) and twice that (backward), each
    hop overlapped with the attention of the block before it, so only the excess over the
    attention compute is exposed. All-to-all (Ulysses, Jacobs et al. 2023 §3.1): q, k, v
    are exchanged before attention and the output after it (heads <-> sequence), the reverse
    in backward; not overlapped.
    """
    elem = g["compute_bytes"]
    cp = g["cp_size"]
    kv_local = 2.0 * w["tokens"] * w["kv"] * elem
    spb, lat = co["cp"]
    ring_fwd = cp * kv_local * spb + lat
    ring_bwd = 2.0 * ring_fwd
    a2a_spb, a2a_lat = comm.all_to_all_coefficients(
        cp, g["cp_per_node"], r["link"], r["nic"], g["link_latency_s"], g["nic_latency_s"])
    a2a_bytes = w["tokens"] * (2.0 * w["q"] + 2.0 * w["kv"]) * elem
    a2a = a2a_bytes * a2a_spb + 4.0 * a2a_lat
    all2all = g["cp_all2all"] > 0
    on = cp > 1
    fwd_s = np.where(on, np.where(all2all, a2a, ring_fwd), 0.0)
    bwd_s = np.where(on, np.where(all2all, a2a, ring_bwd), 0.0)
    fwd_exposed = np.where(all2all, fwd_s, np.maximum(fwd_s - layer["attn_fwd_s"], 0.0))
    bwd_exposed = np.where(all2all, bwd_s, np.maximum(bwd_s - layer["attn_bwd_s"], 0.0))
    byte_count = np.where(on, np.where(all2all, 2.0 * a2a_bytes * (cp - 1.0) / cp,
                                       3.0 * (cp - 1.0) * kv_local), 0.0)
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
