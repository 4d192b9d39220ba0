"""The one vectorised evaluation that ``predict``, ``sweep`` and ``search`` share.

:func:`evaluate` takes a flat mapping of named numeric inputs (numbers or numpy arrays that
broadcast together; names carry units) and returns a flat mapping of named outputs. It calls
the pure cost functions in :mod:`fsdpsim.costs` and nothing else: every number in a report
traces back to one formula there and one catalog value here.

Categorical inputs are integer codes so a grid can mix them: ``strategy`` (see
:data:`fsdpsim.costs.comm.STRATEGY_CODES`), ``recompute`` (0 none, 1 selective, 2 full),
``optimizer`` (0 adamw, 1 sgd), and 0/1 flags ``swiglu``, ``rotary``, ``reshard``, ``flash``.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from fsdpsim.costs import comm, compute, memory, overlap
from fsdpsim.costs.compute import as_array

RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}
OPTIMIZER_CODES = {"adamw": 0, "sgd": 1}
OPTIMIZER_STATE_BYTES_PER_PARAM = {"adamw": 8.0, "sgd": 4.0}  # two fp32 moments / one momentum
CATEGORICAL = ("strategy", "recompute", "optimizer")
BOTTLENECKS = ("compute", "hbm_bandwidth", "intra_node_link", "inter_node_link", "memory_capacity")


def _optimizer_traffic_bytes_per_param(code):
    return np.where(np.asarray(code) == 0, compute.OPTIMIZER_BYTES_PER_PARAM["adamw"],
                    compute.OPTIMIZER_BYTES_PER_PARAM["sgd"])


#: Above this share of capacity PyTorch's caching allocator starts to free and retry
#: (``num_alloc_retries``), which slows steps in a way fsdpsim does not model: reports flag it
#: and ``auto`` knobs prefer candidates below it.
MEMORY_PRESSURE_FRACTION = 0.9


def choice_rank(out: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """How ``auto`` knobs rank candidates (predict and sweep alike): ``(tier, key)``, smaller
    first. Tier 0 fits with headroom (peak ≤ :data:`MEMORY_PRESSURE_FRACTION` of capacity),
    tier 1 fits only tightly, tier 2 does not fit; within a fitting tier the fastest
    (``key = -tokens/s``), otherwise the smallest peak memory."""
    peak, cap = np.asarray(out["peak_bytes"]), np.asarray(out["capacity_bytes"])
    fits = np.asarray(out["fits"], dtype=bool)
    tier = np.where(fits, np.where(peak <= MEMORY_PRESSURE_FRACTION * cap, 0, 1), 2)
    key = np.where(fits, -np.asarray(out["tokens_per_s"]), peak)
    return tier, key


#: Exposed communication at or above this share of the step names a link as the bottleneck.
EXPOSED_COMM_BINDS = 0.1

#: Rows per internal block: a large grid is evaluated in blocks so that the ~1,500 temporaries
#: of one evaluation stay in cache (measured 1.3-1.6x faster than one call on 10^6 rows).
BLOCK_ROWS = 65_536


def evaluate(x: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Predict one step for every configuration in ``x`` (broadcast); see :func:`_evaluate`.

    Inputs with more than :data:`BLOCK_ROWS` configurations are evaluated block by block and
    concatenated; results are identical to one call.
    """
    shape = np.broadcast_shapes(*(np.shape(v) for v in x.values()))
    n = int(np.prod(shape)) if shape else 1
    if n <= BLOCK_ROWS:
        return _evaluate(x)
    flat = {k: (np.broadcast_to(np.asarray(v), shape).reshape(-1) if np.ndim(v) else v)
            for k, v in x.items()}
    parts = []
    for start in range(0, n, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, n)
        out = _evaluate({k: (v[start:stop] if np.ndim(v) else v) for k, v in flat.items()})
        parts.append({k: np.broadcast_to(v, (stop - start,)) for k, v in out.items()})
    return {k: np.concatenate([p[k] for p in parts]).reshape(shape) for k in parts[0]}


def _evaluate(x: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Predict one step for every configuration in ``x`` (broadcast).

    Required keys (units in names): model ``n_layers, d_model, n_heads, q_dim, kv_dim,
    ffn_size, swiglu, rotary, vocab_size, n_params, matmul_params, active_experts,
    block_numel, block_numel_padded, root_numel_padded, n_params_padded``; hardware
    ``peak_flops_per_s, matmul_fraction, matmul_half_flops, matmul_half_k, attention_fraction, attention_half_kv,
    hbm_bytes_per_s, hbm_fraction, link_bytes_per_s, link_fraction, link_latency_s,
    nic_share_bytes_per_s, nic_fraction, nic_latency_s, kernel_overhead_s,
    comm_compute_slowdown, memory_bytes, runtime_reserved_bytes, allocator_fraction``; plan
    ``num_gpus, gpus_per_node, strategy, shard_size, replicate_size, reshard``; training
    ``seq_len, micro_batch, grad_accum, recompute, compute_bytes, reduce_bytes, optimizer,
    flash``.
    """
    g = prepare(x)
    L = g["n_layers"]
    b, s = g["micro_batch"], g["seq_len"]
    tokens = b * s
    swiglu = g["swiglu"] > 0
    rotary = g["rotary"] > 0
    flash = g["flash"] > 0
    recompute = np.asarray(g["recompute"])
    strategy = np.asarray(g["strategy"])
    elem = g["compute_bytes"]

    # ---- achievable rates (catalog peaks x achievable fractions) ------------------------------
    # A power cap lowers the sustained clock (compute.power_capped_clock_ratio): the FLOP/s the
    # kernels see drop with it, while MFU stays measured against the nominal peak.
    clocked_peak = g["peak_flops_per_s"] * g["compute_clock_ratio"]
    matmul_rate = clocked_peak * g["matmul_fraction"]
    hbm_rate = g["hbm_bytes_per_s"] * g["hbm_fraction"]
    link_rate = g["link_bytes_per_s"] * g["link_fraction"]
    nic_rate = g["nic_share_bytes_per_s"] * g["nic_fraction"]

    # ---- compute time of one transformer block, one micro-batch -------------------------------
    gemm_fwd_s, gemm_bwd_s = compute.layer_gemm_times_s(
        tokens, g["d_model"], g["q_dim"], g["kv_dim"], g["ffn_size"], swiglu, g["active_experts"],
        matmul_rate, hbm_rate, g["matmul_half_flops"], g["matmul_half_k"], elem)
    attn_flops_fwd = compute.attention_flops_fwd(b, s, g["q_dim"], causal=flash)
    # Eager attention materialises the s x s scores: bandwidth bound on top of its matmuls.
    eager_scores_bytes = np.where(flash, 0.0, 3.0 * elem * b * g["n_heads"] * s * s)
    attn_peak = clocked_peak * g["attention_peak_ratio"]  # FP8 training: attention in 16-bit
    attn_fwd_s = compute.attention_time_s(attn_flops_fwd, attn_peak,
                                          np.where(flash, g["attention_fraction"], g["matmul_fraction"]),
                                          np.where(flash, 0.5, 1.0) * s,
                                          np.where(flash, g["attention_half_kv"], g["matmul_half_k"]))
    attn_fwd_s = attn_fwd_s + compute.memory_bound_time_s(eager_scores_bytes, hbm_rate)
    # FlashAttention backward: 2.5x forward FLOPs (recomputes scores); eager: 2x plus score traffic.
    attn_bwd_s = np.where(flash, 2.5, 2.0) * attn_fwd_s
    # Element-wise work and activations see every routed expert's width (k · f_expert).
    routed_ffn = g["ffn_size"] * g["active_experts"]
    ew_fwd_bytes, ew_bwd_bytes = compute.layer_elementwise_bytes(
        tokens, g["d_model"], g["q_dim"], g["kv_dim"], routed_ffn, swiglu, rotary,
        g["linear_bias"] > 0, elem)
    fp8 = g["fp8_gemm"] > 0
    if np.any(fp8):  # FP8 GEMM operands are cast (and transposed) first: extra HBM traffic
        cast_fwd_bytes, cast_bwd_bytes = compute.fp8_cast_bytes(
            tokens, g["d_model"], g["q_dim"], g["kv_dim"], routed_ffn, swiglu, g["block_numel"])
        ew_fwd_bytes = ew_fwd_bytes + np.where(fp8, cast_fwd_bytes, 0.0)
        ew_bwd_bytes = ew_bwd_bytes + np.where(fp8, cast_bwd_bytes, 0.0)
    ew_fwd_s = compute.memory_bound_time_s(ew_fwd_bytes, hbm_rate)
    ew_bwd_s = compute.memory_bound_time_s(ew_bwd_bytes, hbm_rate)

    ops_fwd, ops_bwd = compute.host_ops_per_layer(flash, rotary, swiglu, g["rmsnorm"],
                                                  g["linear_bias"])
    block_fwd_s = compute.launch_bound_s(gemm_fwd_s + attn_fwd_s + ew_fwd_s, ops_fwd,
                                         g["kernel_overhead_s"])
    # Recompute in backward: full = the block forward again up to the last tensor backward
    # needs. torch's default non-reentrant checkpoint stops early (``set_checkpoint_early_stop``,
    # torch.utils.checkpoint, torch >= 2.1; checked with FlopCounterMode in
    # tests/test_torch_exact.py), so the MLP down projection, whose output nothing saves, is not
    # recomputed. Selective = the attention core only (Korthikanti et al. 2022 §5).
    down_fwd_s = g["active_experts"] * compute.linear_time_s(
        tokens, g["d_model"], g["ffn_size"], matmul_rate, hbm_rate, g["matmul_half_flops"],
        g["matmul_half_k"], elem)[0]
    down_fwd_flops = 2.0 * tokens * g["d_model"] * g["ffn_size"] * g["active_experts"]
    # The recomputed forward is host bound like the forward, less the down projection's ops.
    full_recompute_s = compute.launch_bound_s(gemm_fwd_s + attn_fwd_s + ew_fwd_s - down_fwd_s,
                                              ops_fwd - compute.HOST_OPS_DOWN_PROJECTION,
                                              g["kernel_overhead_s"])
    recompute_s = np.where(recompute == 2, full_recompute_s,
                           np.where(recompute == 1, attn_fwd_s, 0.0))
    block_bwd_s = compute.launch_bound_s(gemm_bwd_s + attn_bwd_s + ew_bwd_s, ops_bwd,
                                         g["kernel_overhead_s"]) + recompute_s

    # ---- root unit: embedding, final norm, LM head, loss ---------------------------------------
    head_gemm_s, head_gemm_bwd_s = compute.linear_time_s(
        tokens, g["vocab_size"], g["d_model"], matmul_rate, hbm_rate, g["matmul_half_flops"],
        g["matmul_half_k"], elem)
    fused_loss = g["fused_loss"] > 0
    loss_bytes_per_logit = np.where(fused_loss, compute.FUSED_LOSS_BYTES_PER_LOGIT,
                                    compute.LOSS_BYTES_PER_LOGIT)
    loss_s = compute.memory_bound_time_s(tokens * g["vocab_size"] * loss_bytes_per_logit, hbm_rate)
    embed_s = compute.memory_bound_time_s(2.0 * tokens * g["d_model"] * elem, hbm_rate)
    head_fwd_s = head_gemm_s + 0.4 * loss_s + embed_s  # upcast + log-softmax: 14 of 36 B/logit
    head_bwd_s = head_gemm_bwd_s + 0.6 * loss_s + 2.0 * embed_s

    # ---- collectives: one call of each kind, per unit ------------------------------------------
    shard, repl = g["shard_size"], g["replicate_size"]
    per_node = g["gpus_per_node"]
    shard_per_node = np.minimum(shard, per_node)
    repl_per_node = np.maximum(1.0, per_node / shard)  # replicas of a shard that share a node
    repl_per_node = np.minimum(repl_per_node, repl)
    ring = dict(link_bytes_per_s=link_rate, nic_share_bytes_per_s=nic_rate,
                link_latency_s=g["link_latency_s"], nic_latency_s=g["nic_latency_s"])
    block_param_bytes = g["block_numel_padded"] * elem
    root_param_bytes = g["root_numel_padded"] * elem
    block_grad_bytes = g["block_numel_padded"] * g["reduce_bytes"]
    root_grad_bytes = g["root_numel_padded"] * g["reduce_bytes"]
    # DDP and ZeRO-1 reduce over the whole data-parallel group (shard_size is 1 for DDP).
    world_dp = shard * repl
    dp_per_node = np.minimum(world_dp, per_node)
    # One (seconds per byte, latency) pair per group; every collective is then a multiply-add.
    shard_spb, shard_lat = comm.ring_coefficients(shard, shard_per_node, **ring)
    repl_spb, repl_lat = comm.ring_coefficients(repl, repl_per_node, **ring)
    world_spb, world_lat = comm.ring_coefficients(world_dp, dp_per_node, **ring)
    ag_block_s = block_param_bytes * shard_spb + shard_lat
    ag_root_s = root_param_bytes * shard_spb + shard_lat
    rs_block_s = block_grad_bytes * shard_spb + shard_lat
    rs_root_s = root_grad_bytes * shard_spb + shard_lat
    # HSDP: all-reduce (two passes) of each shard across replicas; DDP: of the whole unit.
    hsdp_ar_block_s = 2.0 * (block_grad_bytes / shard * repl_spb + repl_lat)
    hsdp_ar_root_s = 2.0 * (root_grad_bytes / shard * repl_spb + repl_lat)
    ddp_ar_block_s = 2.0 * (block_grad_bytes * world_spb + world_lat)
    ddp_ar_root_s = 2.0 * (root_grad_bytes * world_spb + world_lat)
    zero1_rs_block_s = block_grad_bytes * world_spb + world_lat
    zero1_rs_root_s = root_grad_bytes * world_spb + world_lat
    zero1_ag_all_s = ((L * g["block_numel_padded"] + g["root_numel_padded"]) * elem * world_spb
                      + world_lat)

    # Kept gathered (FSDP2 reshard_after_forward=False and set_reshard_after_backward(False)
    # until the last micro-batch): each unit is gathered once per step, never re-gathered.
    keep = np.asarray(g["keep_gathered"]) > 0
    ag_calls, rs_calls, ar_calls = comm.fsdp_calls_per_microbatch(
        strategy, (np.asarray(g["reshard"]) > 0) & ~keep)
    is_hybrid = strategy == comm.HYBRID
    is_ddp = strategy == comm.NONE
    is_zero1 = strategy == comm.OPTIMIZER
    fsdp_like = ag_calls > 0
    # Gradient sync on the last micro-batch only (FSDP1 no_sync, FSDP2
    # set_requires_gradient_sync(False)): the others reduce-scatter nothing.
    sync_last = (np.asarray(g["grad_sync_last"]) > 0) & (rs_calls > 0)
    k = g["grad_accum"]
    ag_steps = np.where(keep & fsdp_like, 1.0, k)           # micro-batches that all-gather
    rs_steps = np.where(sync_last, 1.0, k)                  # micro-batches that reduce

    # ---- forward: root gather, then the block pipeline -----------------------------------------
    fwd_ag_s = np.where(fsdp_like, ag_block_s, 0.0)
    fwd_first_s = np.where(fsdp_like, ag_root_s + ag_block_s, 0.0)
    fwd_s = overlap.pipelined_phase_s(fwd_first_s, fwd_ag_s, block_fwd_s, L, 0.0,
                                      g["comm_compute_slowdown"]) + head_fwd_s
    fwd_kept_s = L * block_fwd_s + head_fwd_s  # a later micro-batch on kept parameters

    # ---- backward: per-micro-batch collectives, plus once-per-step ones on the last ------------
    bwd_ag_s = np.where(fsdp_like & (ag_calls > 1), ag_block_s, 0.0)
    mb_rs_s = np.where(rs_calls > 0, rs_block_s, 0.0)
    mb_ar_s = np.where(is_hybrid, hsdp_ar_block_s, 0.0)
    step_block_comm_s = np.where(is_ddp, ddp_ar_block_s, np.where(is_zero1, zero1_rs_block_s, 0.0))
    step_root_comm_s = np.where(is_ddp, ddp_ar_root_s, np.where(is_zero1, zero1_rs_root_s, 0.0))
    root_tail_s = np.where(rs_calls > 0, rs_root_s, 0.0) + np.where(is_hybrid, hsdp_ar_root_s, 0.0)

    def backward_s(block_comm_s, root_comm_s):
        first = np.maximum(0.0, bwd_ag_s - head_bwd_s)
        head = overlap.slowed_compute_s(head_bwd_s, bwd_ag_s, g["comm_compute_slowdown"])
        stage_comm = bwd_ag_s + block_comm_s
        return head + overlap.pipelined_phase_s(first, stage_comm, block_bwd_s, L, block_comm_s,
                                                g["comm_compute_slowdown"]) + root_comm_s

    bwd_mb_s = backward_s(np.where(sync_last, 0.0, mb_rs_s + mb_ar_s),
                          np.where(sync_last, 0.0, root_tail_s))
    bwd_last_s = backward_s(mb_rs_s + mb_ar_s + step_block_comm_s, root_tail_s + step_root_comm_s)

    # ---- optimizer step on the local shard, and ZeRO-1's parameter gather after it ------------
    opt_shard = np.where(is_ddp, 1.0, np.where(is_hybrid, shard, world_dp))
    optimizer_s = compute.memory_bound_time_s(
        g["n_params_padded"] / opt_shard * _optimizer_traffic_bytes_per_param(g["optimizer"]),
        hbm_rate)
    post_step_s = np.where(is_zero1, zero1_ag_all_s, 0.0)

    step_s = (fwd_s + (k - 1.0) * np.where(keep & fsdp_like, fwd_kept_s, fwd_s)
              + (k - 1.0) * bwd_mb_s + bwd_last_s + optimizer_s + post_step_s)

    # ---- totals, bounds ---------------------------------------------------------------------
    compute_mb_s = L * (block_fwd_s + block_bwd_s) + head_fwd_s + head_bwd_s
    compute_s = k * compute_mb_s + optimizer_s
    ag_per_mb_s = np.where(fsdp_like, L * ag_block_s * ag_calls + ag_root_s, 0.0)
    all_gather_s = ag_steps * ag_per_mb_s + post_step_s
    rs_per_mb_s = np.where(rs_calls > 0, L * rs_block_s + rs_root_s, 0.0)
    reduce_scatter_s = rs_steps * rs_per_mb_s + np.where(is_zero1, L * zero1_rs_block_s + zero1_rs_root_s, 0.0)
    all_reduce_s = (rs_steps * np.where(is_hybrid, L * hsdp_ar_block_s + hsdp_ar_root_s, 0.0)
                    + np.where(is_ddp, L * ddp_ar_block_s + ddp_ar_root_s, 0.0))
    comm_s = all_gather_s + reduce_scatter_s + all_reduce_s
    exposed_s = np.maximum(step_s - compute_s, 0.0)
    lower_s, upper_s = overlap.step_bounds_s(compute_s, comm_s)

    # Tensor bytes per GPU per step (the quantities torch's c10d ops see).
    units_ag = L * ag_calls * g["block_numel_padded"] + np.where(fsdp_like, g["root_numel_padded"], 0.0)
    all_params_padded = L * g["block_numel_padded"] + g["root_numel_padded"]
    all_gather_bytes = (ag_steps * units_ag + np.where(is_zero1, all_params_padded, 0.0)) * elem
    reduce_scatter_bytes = (rs_steps * np.where(rs_calls > 0, all_params_padded, 0.0)
                            + np.where(is_zero1, all_params_padded, 0.0)) * g["reduce_bytes"]
    all_reduce_bytes = (rs_steps * np.where(is_hybrid, all_params_padded / shard, 0.0)
                        + np.where(is_ddp, all_params_padded, 0.0)) * g["reduce_bytes"]

    # ---- memory ------------------------------------------------------------------------------
    mem = _memory(g, ceilings=bool(np.all(g["ceilings"] > 0)))

    # ---- throughput and utilisation ----------------------------------------------------------
    gpus = g["num_gpus"]
    tokens_per_step = tokens * k * world_dp
    model_flops = compute.model_flops_per_token(g["matmul_params"], L, s, g["q_dim"]) * tokens_per_step
    executed_mb_flops = (
        L * (3.0 * compute.layer_matmul_flops_fwd(tokens, g["d_model"], g["q_dim"], g["kv_dim"],
                                                  g["ffn_size"], swiglu, g["active_experts"])
             + np.where(flash, 3.5, 3.0) * attn_flops_fwd)
        + 3.0 * compute.lm_head_flops_fwd(tokens, g["d_model"], g["vocab_size"])
        + L * np.where(recompute == 2,
                       compute.layer_matmul_flops_fwd(tokens, g["d_model"], g["q_dim"], g["kv_dim"],
                                                      g["ffn_size"], swiglu, g["active_experts"])
                       - down_fwd_flops + attn_flops_fwd,
                       np.where(recompute == 1, attn_flops_fwd, 0.0)))
    hardware_flops = executed_mb_flops * k * world_dp
    peak_total = g["peak_flops_per_s"] * gpus
    mfu = model_flops / (step_s * peak_total)
    hfu = hardware_flops / (step_s * peak_total)

    # ---- which resource binds ----------------------------------------------------------------
    # Time attributable to each resource over the step (the exposed communication is charged
    # to the link whose bandwidth term is larger in the dominant collective).
    gemm_total = k * (L * (gemm_fwd_s + gemm_bwd_s) + head_gemm_s + head_gemm_bwd_s)
    attn_total = k * L * (attn_fwd_s + attn_bwd_s)
    hbm_total = k * (L * (ew_fwd_s + ew_bwd_s) + loss_s + 3.0 * embed_s) + optimizer_s
    # Share of the communication time whose ring is bound by the NICs: the shard-group
    # collectives (all-gather, reduce-scatter) and the replica / DDP all-reduces separately.
    ar_group = np.where(is_ddp, world_dp, repl)
    ar_per_node = np.where(is_ddp, dp_per_node, repl_per_node)
    nic_comm_s = (np.where(_nic_bound(shard, shard_per_node, link_rate, nic_rate),
                           all_gather_s + reduce_scatter_s, 0.0)
                  + np.where(_nic_bound(ar_group, ar_per_node, link_rate, nic_rate),
                             all_reduce_s, 0.0))
    inter_share = np.where(comm_s > 0, nic_comm_s / np.where(comm_s > 0, comm_s, 1.0), 0.0)
    exposed_inter = exposed_s * inter_share
    exposed_intra = exposed_s - exposed_inter
    # Communication binds once its exposed part is a sizeable share of the step (more bandwidth
    # would then buy at least that much); otherwise the larger of compute and memory-bound work.
    on_chip = np.where(gemm_total + attn_total >= hbm_total, 0, 1)
    link = np.where(exposed_inter >= exposed_intra, 3, 2)
    bottleneck = np.where(exposed_s >= EXPOSED_COMM_BINDS * step_s, link, on_chip)
    bottleneck = np.where(mem["fits"], bottleneck, 4)

    # ---- thresholds (Wang et al. 2025, arXiv 2504.03655; derivation in the docs) --------------
    # Per micro-batch on average over the step (kept-gathered units and a last-micro-batch
    # gradient sync spread one step's collectives over its k micro-batches).
    ag_share, rs_share = ag_steps / k, rs_steps / k
    comm_mb_s = np.where(fsdp_like, ag_share * ag_per_mb_s + rs_share * rs_per_mb_s, 0.0) + \
        np.where(is_hybrid, rs_share * (L * hsdp_ar_block_s + hsdp_ar_root_s), 0.0)
    # Tokens per GPU per micro-batch at which block compute equals block communication, with
    # compute linear in tokens at this operating point.
    critical_tokens = tokens * comm_mb_s / compute_mb_s
    min_nic = _min_nic_share_bytes_per_s(g, compute_mb_s, ag_calls, fsdp_like, is_hybrid, elem,
                                         shard, shard_per_node, repl, repl_per_node, L, link_rate,
                                         ag_share, rs_share)

    out = {
        "step_time_s": step_s,
        "tokens_per_step": tokens_per_step,
        "tokens_per_s": tokens_per_step / step_s,
        "tokens_per_s_per_gpu": tokens_per_step / step_s / gpus,
        "mfu": mfu,
        "hfu": hfu,
        "model_flops_per_step": model_flops,
        "hardware_flops_per_step": hardware_flops,
        "compute_s": compute_s,
        "gemm_s": gemm_total,
        "attention_s": attn_total,
        "memory_bound_s": hbm_total,
        "recompute_s": k * L * recompute_s,
        "optimizer_s": optimizer_s,
        "comm_s": comm_s,
        "exposed_comm_s": exposed_s,
        "step_lower_bound_s": lower_s,
        "step_upper_bound_s": upper_s,
        "all_gather_s": all_gather_s,
        "reduce_scatter_s": reduce_scatter_s,
        "all_reduce_s": all_reduce_s,
        "all_gather_bytes": all_gather_bytes,
        "reduce_scatter_bytes": reduce_scatter_bytes,
        "all_reduce_bytes": all_reduce_bytes,
        "bottleneck": bottleneck,
        "critical_tokens_per_gpu": critical_tokens,
        "min_inter_node_bytes_per_s_per_gpu": min_nic,
    }
    out.update(mem)
    return out


#: Inputs that may be left out, and their values then: no fused loss or GLU kernel, no linear
#: biases, memory ceilings solved.
OPTIONAL_INPUTS = {"fused_loss": 0.0, "fused_glu": 0.0, "linear_bias": 0.0, "rmsnorm": 0.0,
                   "compute_clock_ratio": 1.0, "attention_peak_ratio": 1.0, "fp8_gemm": 0.0,
                   "keep_gathered": 0.0, "grad_sync_last": 0.0,
                   "ceilings": 1.0}


def prepare(x: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Inputs as arrays: categorical codes as integers, everything else as floats; optional
    inputs (:data:`OPTIONAL_INPUTS`) filled in."""
    return {k: (np.asarray(v).astype(np.int64) if k in CATEGORICAL else as_array(v))
            for k, v in {**OPTIONAL_INPUTS, **x}.items()}


def _nic_bound(group, per_node, link_rate, nic_rate):
    """True where a ring over ``group`` GPUs is limited by the NICs rather than the link
    (the binding term of :func:`comm.ring_time_s`)."""
    g = np.minimum(per_node, group)
    intra = np.where(g > 1, link_rate, np.inf)
    return (group > g) & (g * nic_rate <= intra)


def _min_nic_share_bytes_per_s(g, compute_mb_s, ag_calls, fsdp_like, is_hybrid, elem, shard,
                               shard_per_node, repl, repl_per_node, L, link_rate,
                               ag_share=1.0, rs_share=1.0):
    """Smallest per-GPU NIC bandwidth (achievable) at which a micro-batch's collectives take no
    longer than its compute, solved in closed form: t_comm(B) = intra + latency + X / B.
    ``ag_share`` / ``rs_share``: the fraction of micro-batches that gather / reduce (1 by
    default; less with kept-gathered parameters or a last-micro-batch gradient sync).

    X sums the inter-node numerators of every collective (:func:`comm.ring_inter_node_seconds_per_byte_per_s`);
    returned as line rate (divided by the NIC fraction). 0 when no collective leaves a node;
    inf when the intra-node part alone exceeds the compute.
    """
    block_p = g["block_numel_padded"] * elem
    root_p = g["root_numel_padded"] * elem
    grads = rs_share * (L * g["block_numel_padded"] + g["root_numel_padded"]) * g["reduce_bytes"]
    gathered = ag_share * (L * ag_calls * block_p + root_p)
    # Inter-node numerators per byte (M = 1), once per group.
    x_shard = comm.ring_inter_node_seconds_per_byte_per_s(1.0, shard, shard_per_node)
    x_repl = comm.ring_inter_node_seconds_per_byte_per_s(1.0, repl, repl_per_node, passes=2.0)
    x = (np.where(fsdp_like, x_shard * (gathered + grads), 0.0)
         + np.where(is_hybrid, x_repl * grads / shard, 0.0))
    # The intra-node bandwidth floor: with infinite NIC bandwidth the ring runs at link speed.
    spb, lat = comm.ring_coefficients(shard, shard_per_node, link_rate, np.inf,
                                      g["link_latency_s"], g["nic_latency_s"])
    calls = ag_share * (L * ag_calls + 1.0) + rs_share * (L + 1.0)  # all-gathers, reduce-scatters
    floor_s = np.where(fsdp_like, (gathered + grads) * spb + calls * lat, 0.0)
    room = compute_mb_s - floor_s
    need = np.where(room > 0, x / np.where(room > 0, room, 1.0), np.inf)
    return np.where(x > 0, need / g["nic_fraction"], 0.0)


def memory_config(g: Mapping[str, np.ndarray]) -> dict[str, object]:
    """Keyword arguments of :func:`memory.peak_memory_bytes` for the engine inputs ``g`` (as
    :func:`prepare` returns them: optional inputs filled in).

    PyTorch FSDP recipe: fp32 sharded master parameters and gradients, AdamW's two fp32 moments
    (SGD: one momentum buffer), gathered parameters and computed gradients in the compute dtype,
    gradients reduced in ``reduce_bytes``. SHARD_GRAD_OP keeps every unit's gathered parameters
    from forward to the end of backward, which is "full" without resharding in memory terms
    (see :mod:`fsdpsim.costs.memory`). The root unit (embeddings, LM head) is not resharded
    after forward, so it stays gathered: ``resident_numel``.
    """
    strategy = np.asarray(g["strategy"])
    mem_strategy = np.where(strategy == comm.GRAD_OP, comm.FULL, strategy)
    keep = np.asarray(g["keep_gathered"]) > 0
    reshard = np.where((strategy == comm.GRAD_OP) | keep, False, g["reshard"] > 0)
    sharded_grads = (strategy == comm.FULL) | (strategy == comm.HYBRID) | (strategy == comm.GRAD_OP)
    accumulated = np.where((np.asarray(g["grad_sync_last"]) > 0) & sharded_grads
                           & (np.asarray(g.get("grad_accum", 1.0)) > 1), g["n_params_padded"], 0.0)
    return dict(
        n_params=g["n_params"], unit_numel=g["block_numel_padded"],
        resident_numel=g["root_numel_padded"], padded_n_params=g["n_params_padded"],
        shard_size=g["shard_size"], replicate_size=g["replicate_size"], strategy=mem_strategy,
        reshard_after_forward=reshard, n_layers=g["n_layers"], micro_batch=g["micro_batch"],
        seq_len=g["seq_len"], d_model=g["d_model"], q_dim=g["q_dim"], kv_dim=g["kv_dim"],
        ffn_size=g["ffn_size"] * g["active_experts"], ffn_kind=(g["swiglu"] > 0).astype(int),
        n_heads=g["n_heads"],
        vocab_size=g["vocab_size"], recompute=np.asarray(g["recompute"]).astype(int),
        param_bytes=4.0, grad_bytes=4.0,
        optimizer_bytes_per_param=np.where(np.asarray(g["optimizer"]) == 0,
                                           OPTIMIZER_STATE_BYTES_PER_PARAM["adamw"],
                                           OPTIMIZER_STATE_BYTES_PER_PARAM["sgd"]),
        compute_param_bytes=g["compute_bytes"], compute_grad_bytes=g["compute_bytes"],
        reduce_grad_bytes=g["reduce_bytes"], flash_attention=g["flash"] > 0,
        act_bytes=g["compute_bytes"], fused_loss=g["fused_loss"] > 0,
        # Eager PyTorch SwiGLU saves silu(gate) as well (a compiled or fused kernel does not).
        fused_glu=g["fused_glu"] > 0,
        runtime_reserved_bytes=g["runtime_reserved_bytes"],
        allocator_fraction=g["allocator_fraction"], accumulated_grad_numel=accumulated,
    )


def memory_breakdown(x: Mapping[str, object], ceilings: bool = True) -> dict[str, np.ndarray]:
    """Per-GPU memory of every configuration in ``x`` (see :mod:`fsdpsim.costs.memory`), whether
    it fits, and (``ceilings``) the largest micro-batch and sequence length that fit."""
    return _memory(prepare(x), ceilings)


def _memory(g: Mapping[str, np.ndarray], ceilings: bool) -> dict[str, np.ndarray]:
    """:func:`memory_breakdown` of inputs already passed through :func:`prepare`."""
    config = memory_config(g)
    out = memory.peak_memory_bytes(**config)
    capacity = g["memory_bytes"]
    out["capacity_bytes"] = np.broadcast_to(capacity, np.shape(out["peak_bytes"])).astype(float)
    out["fits"] = memory.fits(out["peak_bytes"], capacity)
    if ceilings:
        no_mb = {k: v for k, v in config.items() if k != "micro_batch"}
        no_s = {k: v for k, v in config.items() if k != "seq_len"}
        out["max_micro_batch"] = memory.max_micro_batch(capacity, **no_mb).astype(float)
        out["max_seq_len"] = memory.max_seq_len(capacity, **no_s).astype(float)
    return out
