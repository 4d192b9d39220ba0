"""Engine stage 6: metrics of a step: FLOPs, MFU/HFU, the binding resource and the
thresholds of the seed study (Wang et al. 2025, arXiv 2504.03655)."""

from __future__ import annotations

import numpy as np

from fsdpsim.costs import comm, compute

#: Exposed communication (or pipeline bubble) at or above this share of the step names it as
#: the bottleneck.
EXPOSED_COMM_BINDS = 0.1


def executed_flops_per_microbatch(g, recompute_fraction):
    """FLOPs one micro-batch executes over its whole model-parallel group [FLOP]: 3x the
    forward of every weight matmul (PaLM), the attention with FlashAttention's 2.5x backward,
    and the recomputed forward (torch's early-stop checkpoint skips the MLP down projection,
    Megatron's reentrant checkpoint does not) on the share of layers that recompute."""
    b, s, L = g["micro_batch"], g["seq_len"], g["n_layers"]
    tokens = b * s
    swiglu, flash = g["swiglu"] > 0, g["flash"] > 0
    recompute = np.asarray(g["recompute"])
    attn_flops_fwd = compute.attention_flops_fwd(b, s, g["q_dim"], causal=flash)
    layer_mm = compute.layer_matmul_flops_fwd(tokens, g["d_model"], g["q_dim"], g["kv_dim"],
                                              g["ffn_size"], swiglu, g["active_experts"])
    # torch's early-stop checkpoint skips the down projection; Megatron's recomputes it.
    down_fwd_flops = np.where(g["megatron"] > 0, 0.0,
                              2.0 * tokens * g["d_model"] * g["ffn_size"] * g["active_experts"])
    return (L * (3.0 * layer_mm + np.where(flash, 3.5, 3.0) * attn_flops_fwd)
            + 3.0 * compute.lm_head_flops_fwd(tokens, g["d_model"], g["vocab_size"])
            + L * np.where(recompute == 2, layer_mm - down_fwd_flops + attn_flops_fwd,
                           np.where(recompute == 1, attn_flops_fwd, 0.0)) * recompute_fraction)


def nic_bound(group, per_node, link_rate, nic_rate):
    """True where a ring over ``group`` GPUs is limited by the NICs rather than the link
    (the binding term of :func:`comm.ring_time_s`)."""
    g = np.minimum(per_node, group)
    intra = np.where(g > 1, link_rate, np.inf)
    return (group > g) & (g * nic_rate <= intra)


def bottleneck_code(g, r, f, *, exposed_s, step_s, bubble_s, gemm_total, attn_total, hbm_total,
                    all_gather_s, reduce_scatter_s, all_reduce_s, comm_s, model_parallel,
                    fits):
    """Which resource binds (index into ``fsdpsim.engine.BOTTLENECKS``).

    Time attributable to each resource over the step: the exposed communication is charged to
    the link whose bandwidth term is larger in the dominant collective. Communication binds once
    its exposed part is a sizeable share of the step (more bandwidth would then buy at least
    that much), a pipeline bubble likewise; otherwise the larger of compute and memory-bound
    work."""
    link_rate, nic_rate = r["link"], r["nic"]
    shard, repl = g["shard_size"], g["replicate_size"]
    ar_group = np.where(f["is_ddp"], g["dp_world_size"], repl)
    ar_per_node = np.where(f["is_ddp"], g["dp_world_per_node"], g["replicate_per_node"])
    nic_comm_s = (np.where(nic_bound(shard, g["shard_per_node"], link_rate, nic_rate),
                           all_gather_s + reduce_scatter_s, 0.0)
                  + np.where(nic_bound(ar_group, ar_per_node, link_rate, nic_rate),
                             all_reduce_s, 0.0))
    # Tensor/context/pipeline traffic: on the NICs when their groups leave the domain.
    tp_s, cp_s, pp_s, ep_s = model_parallel
    nic_comm_s = (nic_comm_s + np.where(g["tp_size"] > g["tp_per_node"], tp_s, 0.0)
                  + np.where(g["cp_size"] > g["cp_per_node"], cp_s, 0.0)
                  + np.where(g["pp_per_node"] > 1, 0.0, pp_s))
    if np.any(np.asarray(ep_s) > 0):  # expert all-to-alls leave the domain with the EP group
        nic_comm_s = nic_comm_s + np.where(g["ep_size"] > g["ep_per_node"], ep_s, 0.0)
    inter_share = np.where(comm_s > 0, nic_comm_s / np.where(comm_s > 0, comm_s, 1.0), 0.0)
    exposed_inter = exposed_s * inter_share
    exposed_intra = exposed_s - exposed_inter
    on_chip = np.where(gemm_total + attn_total >= hbm_total, 0, 1)
    link = np.where(exposed_inter >= exposed_intra, 3, 2)
    code = np.where(exposed_s >= EXPOSED_COMM_BINDS * step_s, link, on_chip)
    code = np.where((bubble_s >= EXPOSED_COMM_BINDS * step_s) & (bubble_s > exposed_s), 5, code)
    return np.where(fits, code, 4)


def min_nic_share_bytes_per_s(g, compute_mb_s, f, elem, L, link_rate, ag_share=1.0,
                              rs_share=1.0):
    """Smallest per-GPU NIC bandwidth (achievable) at which a micro-batch's FSDP collectives
    take no longer than its compute, solved in closed form: t_comm(B) = intra + latency + X / B.
    ``ag_share`` / ``rs_share``: the fraction of micro-batches that gather / reduce (1 by
    default; less with kept-gathered parameters or a last-micro-batch gradient sync).

    X sums the inter-node numerators of every collective
    (:func:`comm.ring_inter_node_seconds_per_byte_per_s`); returned as line rate (divided by the
    NIC fraction). 0 when no collective leaves a node; inf when the intra-node part alone
    exceeds the compute.
    """
    shard, shard_per_node = g["shard_size"], g["shard_per_node"]
    repl, repl_per_node = g["replicate_size"], g["replicate_per_node"]
    block_p = g["block_numel_padded"] * elem
    root_p = g["root_numel_padded"] * elem
    grads = rs_share * (L * g["block_numel_padded"] + g["root_numel_padded"]) * g["reduce_bytes"]
    gathered = ag_share * (L * f["ag_calls"] * block_p + root_p)
    # Inter-node numerators per byte (M = 1), once per group.
    x_shard = comm.ring_inter_node_seconds_per_byte_per_s(1.0, shard, shard_per_node)
    x_repl = comm.ring_inter_node_seconds_per_byte_per_s(1.0, repl, repl_per_node, passes=2.0)
    x = (np.where(f["fsdp_like"], x_shard * (gathered + grads), 0.0)
         + np.where(f["is_hybrid"], x_repl * grads / shard, 0.0))
    # The intra-node bandwidth floor: with infinite NIC bandwidth the ring runs at link speed.
    spb, lat = comm.ring_coefficients(shard, shard_per_node, link_rate, np.inf,
                                      g["link_latency_s"], g["nic_latency_s"])
    calls = ag_share * (L * f["ag_calls"] + 1.0) + rs_share * (L + 1.0)
    floor_s = np.where(f["fsdp_like"], (gathered + grads) * spb + calls * lat, 0.0)
    room = compute_mb_s - floor_s
    need = np.where(room > 0, x / np.where(room > 0, room, 1.0), np.inf)
    return np.where(x > 0, need / g["nic_fraction"], 0.0)
