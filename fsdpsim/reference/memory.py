"""Per-GPU peak memory [B] of one pipeline stage: model states, gathered parameters,
saved activations by recompute mode, and the loss's logits, at the two moments that can
bind; of the step: the stage that binds."""

from __future__ import annotations

from fsdpsim.reference.inputs import padded_numel

#: Optimizer-state bytes per parameter: two fp32 moments (AdamW), one momentum (SGD).
OPTIMIZER_STATE_BYTES = {"adamw": 8.0, "sgd": 4.0}


def peak_memory(m, x, strategy, reshard, n_layers, psi, psi_padded, block_numel, root_numel,
                vocab, in_flight, accumulate=False):
    """Per-GPU peak memory of one pipeline stage [B]: the larger of two moments
    (fsdpsim.costs.memory): the loss backward (states, the gathered root, every saved
    activation, logits and cross-entropy temporaries) and the first block's backward (states,
    the root and two blocks gathered, one unit's gradient, one layer re-materialised, the
    logits the loop holds). Each is ``allocated · (1 + allocator_fraction) + runtime
    reserved``. The stage holds ``n_layers`` layers, ``psi`` parameters of one TP rank
    (``psi_padded`` with FSDP2's padding), its part of the root (``root_numel``), the
    logits of ``vocab`` (0 on a first pipeline stage) and ``in_flight`` micro-batches' saved
    activations; with ``accumulate`` (gradient sync on the last micro-batch only) every
    unsharded gradient accumulates in the reduce dtype (FSDP2 to_accumulated_grad_if_needed)."""
    b, s, T, e, N, t = x["b"], x["s"], x["T"], x["e"], x["shard"], x["tp"]
    h, q, kv, a, V = m.d_model, m.q_dim, m.kv_dim, m.n_heads, vocab
    h_split = t if x["sp"] else 1                       # SP splits the h-sized tensors too
    psi_shard = psi_padded / N                          # Ψ_s: one GPU's shard
    # Model states (ZeRO paper §5 Fig. 1 table). PyTorch recipe: fp32 master parameters and
    # gradients, fp32 optimizer state (Zhao et al. 2023 §4.4); Megatron's: parameters in the
    # compute dtype, gradients in the reduce dtype, the fp32 master copy with the optimizer
    # state (Megatron-LM distrib_optimizer.md). SHARD_GRAD_OP holds a parameter shard and the
    # gathered units: "full" without resharding in memory.
    param_bytes = e if x["megatron"] else 4.0
    grad_bytes = x["reduce_bytes"] if x["megatron"] else 4.0
    optimizer_bytes = OPTIMIZER_STATE_BYTES[x["optimizer"]] + (4.0 if x["megatron"] else 0.0)
    params_sharded = strategy in ("full", "grad_op", "hybrid")
    grads_sharded = params_sharded
    states = (param_bytes * (psi_shard if params_sharded else psi)
              + grad_bytes * (psi_shard if grads_sharded else psi)
              + optimizer_bytes * (psi_shard if strategy != "none" else psi))
    # Gathered parameters in the compute dtype: two units in flight plus the never-resharded
    # root (Zhao et al. 2023 §3.4 rate limiter), or all of them when not resharded; a separate
    # copy exists only if gathered from shards or cast to another dtype.
    separate = e != param_bytes or (params_sharded and N > 1)
    resharded = params_sharded and reshard and strategy != "grad_op"
    gathered_block = min(2.0 * block_numel + root_numel, psi) if resharded else psi
    gathered_loss = min(root_numel, psi) if resharded else psi
    unit_grad = block_numel * (e + (x["reduce_bytes"] if x["reduce_bytes"] != e else 0.0))
    accumulated = psi_padded * x["reduce_bytes"] if accumulate else 0.0
    # Saved activations per layer, per token (Korthikanti et al. 2022 §4.1, general widths):
    # 4 h-sized inputs (LN1, QKV, LN2, MLP up), Q, K, V, the attention output, and the MLP's
    # activation tensors (GELU 2f; eager SwiGLU 4f: gate, up, SiLU and product); TP splits
    # all but the h-sized ones, which SP splits too (Korthikanti et al. 2022 Table 2); with
    # dropout the two residual masks (1 B each) and, eager, the attention mask and output.
    drop = 1.0 if x["dropout"] else 0.0
    n_ffn = 4.0 if m.ffn_kind == "swiglu" else 2.0
    linear = T * ((4.0 * e * h + 2.0 * drop * h) / h_split
                  + (e * (q + 2 * kv) + e * q + e * n_ffn * m.ffn_size) / t)
    rows = b * (a / t) * s / x["cp"]                   # score rows (queries) on this rank
    core = 4.0 * rows if x["flash"] else rows * s * (e + drop * (1.0 + e))  # LSE, or scores
    kept = linear + core
    # torchtitan's op-level policy keeps the block input, the outputs of the 1st, 3rd, 5th
    # (and 7th) matmul of the block (wq, wv, w1 and the row-parallel w2's full-width partial
    # sum; GELU: wq, wv, up), the attention kernel's output and logsumexp (eager: both score
    # matmuls' outputs) and, with sequence parallelism, the two reduce-scatters' outputs.
    # A biased linear runs as aten.addmm: on the list, never counted: all outputs kept.
    glu = m.ffn_kind == "swiglu"
    biased = m.mlp_bias or m.qkv_bias or m.attn_out_bias
    up = (2 if glu else 1) * m.ffn_size
    kept_mm = (e * (q + 2 * kv + up) / t + 2.0 * e * h if biased       # every output
               else e * (q + kv + m.ffn_size) / t + (e * h if glu else 0.0))
    op_core = (4.0 * rows if x["flash"] else rows * s * e) + T * e * q / t
    op_selective = (T * e * h / h_split + T * kept_mm
                    + op_core + (T * 2.0 * e * h / t if x["sp"] and t > 1 else 0.0))
    saved = {"none": kept, "selective": linear, "full": T * e * h / h_split,
             "op-selective": op_selective}[x["recompute"]]
    # Megatron's ``mlp`` module recompute frees the MLP internals (e·n_ffn·f/t per token) of
    # every layer of the stage, as the engine counts it (the replay runs on the first K only).
    freed = (n_layers * T * e * n_ffn * m.ffn_size / t
             if x["rc_mlp"] and x["recompute"] != "full" else 0.0)
    working = max(kept - saved, 0.0)                     # one layer rebuilt in its backward
    head = 2.0 * T * e * h / h_split                     # final-norm and LM-head inputs
    # Logits (bf16) and the cross-entropy's three fp32 temporaries, the vocabulary split by TP.
    logits = T * V / t * (2.0 if x["fused_loss"] else 2.0 + 3.0 * 4.0)
    held_logits = 2.0 * T * V / t
    # Only the first K layers recompute (Megatron --recompute-num-layers); the rest keep all.
    K = n_layers if x["recompute_layers"] is None else min(x["recompute_layers"], n_layers)
    activations = in_flight * (K * saved + (n_layers - K) * kept - freed)
    working = working if K > 0 else 0.0
    at_loss = (states + (e * gathered_loss if separate else 0.0) + accumulated
               + activations + head + logits)
    in_block = (states + (e * gathered_block if separate else 0.0) + unit_grad + accumulated
                + activations + working + held_logits)
    frac, reserved = x["allocator_fraction"], x["reserved_bytes"]
    return max(at_loss * (1.0 + frac) + reserved, in_block * (1.0 + frac) + reserved)



def step_peak_memory(m, x, plan, k, units, keep, accumulate):
    """Per-GPU peak memory of the step [B]: :func:`peak_memory` of the one stage, or with
    pipelining the largest of the first stage (the embeddings), the last (the head and its
    logits) and, on an uneven split whose busiest middle rank holds more layers than the
    first, that rank (no embedding, no head). Micro-batches in flight at a stage's peak:
    GPipe all k; 1F1B min(p − j, k) on stage j (the first min(p, k), the last 1); ZB-H1
    min(p, k) on every stage: stage j's W passes run j backwards late, so j more
    micro-batches wait for their W (Qi et al. 2024 §2.1), counted whole (W keeps most of a
    micro-batch's activations, Table 1). Parameters gathered again in backward unless kept
    (``keep``); gradients accumulated unsharded with ``accumulate``."""
    strategy, reshard = plan.sharding, plan.reshard_after_forward and not keep
    block_numel, root_numel = units["block_numel"], units["root_numel"]
    if plan.pp == 1:
        return peak_memory(m, x, strategy, reshard, m.n_layers, units["params_rank"],
                           units["params_padded"], block_numel, root_numel, x["vocab"], 1,
                           accumulate=accumulate)
    pp, shard, flat = plan.pp, x["shard"], x["flat_parameter"]

    def flight(stage):
        return (k if plan.pp_schedule == "gpipe" else min(pp, k)
                if plan.pp_schedule == "zb-h1" else min(pp - stage, k))
    ends = [(units["L_first"], units["embed"], 0.0, flight(0)),
            (units["L_last"], units["head"], x["vocab"], flight(pp - 1))]
    if units["L_mid"] > units["L_first"]:
        ends.append((units["L_mid"], [], 0.0, flight(plan.busiest_middle_rank(m.n_layers))))

    def stage(n_layers, part, vocab, in_flight):
        part_numel = padded_numel(part, shard, flat)       # its part of the root unit
        psi = n_layers * units["block_rank"] + padded_numel(part, 1)
        return peak_memory(m, x, strategy, reshard, n_layers, psi,
                           n_layers * block_numel + part_numel, block_numel, part_numel, vocab,
                           in_flight, accumulate=accumulate)
    return max(stage(*end) for end in ends)
