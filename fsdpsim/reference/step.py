"""One training step of one configuration (:func:`predict`): the groups on the scale-up
domains, the FSDP units, tensor, context and data-parallel collectives overlapped with the
layers' compute, the pipeline schedule, then the totals, MFU/HFU and the peak memory."""

from __future__ import annotations

import math

from fsdpsim.reference.communication import (context_parallel_s, nccl_time_s,
                                             tensor_parallel_s)
from fsdpsim.reference.inputs import members_per_domain, padded_numel, rates, tp_local_shapes
from fsdpsim.reference.layers import layer_compute, root_compute
from fsdpsim.reference.memory import peak_memory
from fsdpsim.reference.schedule import pipeline_makespan_s, pipelined_s, slowed_s
from fsdpsim.reference.scope import DTYPE_BYTES, LOW_PRECISION, check_scope
from fsdpsim.util.errors import ConfigError

#: AdamW (foreach, fp32) moves 28 B per local parameter, SGD with momentum 20 B
#: (Loshchilov & Hutter 2019 Alg. 2; torch.optim foreach kernels).
OPTIMIZER_TRAFFIC_BYTES = {"adamw": 28.0, "sgd": 20.0}


def predict(model, system, plan, training) -> dict[str, float]:
    """One training step of one configuration (:mod:`fsdpsim.reference` for the scope) [SI units].

    Returns step time, tokens/s per GPU, MFU, HFU, the peak memory per GPU and the main
    terms: compute, the FSDP/ZeRO/DDP collectives, exposed communication, optimizer."""
    check_scope(model, system, plan, training)
    plan.check_model(n_layers=model.n_layers, n_heads=model.n_heads, n_kv_heads=model.kv_heads,
                     seq_len=training.seq_len)
    m, L, N, t = model, model.n_layers, plan.num_gpus, plan.tp
    dp = plan.dp
    b, s = training.micro_batch, training.seq_len
    if training.global_batch is None:
        k = 1
    elif training.global_batch % (b * dp):
        raise ConfigError(f"global_batch({training.global_batch}) is not a multiple of "
                          f"micro_batch({b}) x dp({dp})")
    else:
        k = training.global_batch // (b * dp)             # gradient-accumulation steps
    x = rates(model, system, plan, training)
    # Groups: TP innermost (t consecutive ranks), then the FSDP/ZeRO shard group of S ranks
    # (all dp ranks but for HSDP; 1 for DDP), HSDP's R replicas of it; the data-parallel world
    # is replicas × shard.
    c, dp_shard, replicas = plan.cp, plan.dp_shard, plan.dp_replicate
    shard = plan.shard_group                              # dp_shard × cp (1 for DDP)
    D = plan.gpus_per_node
    tp_per_node = members_per_domain([(t, 1)], D)
    # ... and per non-blocking pod of an oversubscribed fabric (the group's size without)
    pod = system.pod_gpus

    def per_pod(dims):
        return members_per_domain(dims, pod) if pod else math.prod(d for d, _ in dims)
    cp_per_node = members_per_domain([(c, t)], D)
    outer = t * c * dp_shard                              # the replicas' stride
    shard_per_node = members_per_domain([(dp_shard, t * c), (c, t)], D)
    replica_per_node = members_per_domain([(replicas, outer)], D)
    world_per_node = members_per_domain([(replicas, outer), (dp_shard, t * c), (c, t)], D)
    world = replicas * dp_shard * c                       # the data-parallel world: dp × cp
    x["oversubscription"] = system.oversubscription
    tp_per_pod = per_pod([(t, 1)])
    shard_per_pod = per_pod([(dp_shard, t * c), (c, t)])
    replica_per_pod = per_pod([(replicas, outer)])
    world_per_pod = per_pod([(replicas, outer), (dp_shard, t * c), (c, t)])
    # Low-precision recipes keep 16-bit weights for the gathers and 16-bit activations.
    e = 2.0 if training.precision in LOW_PRECISION else DTYPE_BYTES[training.precision]
    # Megatron pads the vocabulary to a multiple of 128·t with TP (--make-vocab-size-divisible-
    # by, megatron/training/tokenizer _vocab_size_with_padding).
    vocab = m.vocab_size if t == 1 else math.ceil(m.vocab_size / (128 * t)) * 128 * t
    x.update(tp=t, sp=plan.sequence_parallel and t > 1, vocab=vocab,
             cp=c, cp_all2all=plan.cp_kind == "all2all",
             b=b, s=s, T=b * s / c, e=e, shard=shard, flash=training.flash_attention,
             fused_loss=training.fused_loss, recompute=training.recompute,
             dropout=training.dropout, recompute_layers=training.recompute_layers,
             cuda_graphs=training.cuda_graphs != "none",
             rc_mlp="mlp" in training.recompute_modules,
             block_params=float(sum(math.prod(sh) for _, sh in
                                    m.unit_parameter_shapes()["block"])),
             optimizer=training.optimizer,
             reduce_bytes=DTYPE_BYTES[training.reduce_dtype or "fp32"])
    layer = layer_compute(m, x)
    root = root_compute(m, x)

    # -- FSDP units: one per block and the root, one TP rank's, padded (per parameter or flat)
    shapes = {unit: tp_local_shapes(pairs, t, m.vocab_size, vocab)
              for unit, pairs in m.unit_parameter_shapes().items()}
    flat = x["flat_parameter"]
    block_numel = padded_numel(shapes["block"], shard, flat)
    root_numel = padded_numel(shapes["root"], shard, flat)
    params_padded = L * block_numel + root_numel
    params_rank = (float(m.n_params) if t == 1 else L * padded_numel(shapes["block"], 1)
                   + padded_numel(shapes["root"], 1))
    # Pipeline stages: the first holds the embeddings, the last the final norm and LM head (and
    # a copy of a tied embedding, Megatron); the layers split (first, middle, last).
    pp = plan.pp
    L_first, L_mid, L_last = plan.stage_layers(L)
    L_stage = L_mid if pp > 1 else L                      # layers of a (middle) stage
    if training.recompute_layers is not None and training.recompute_layers > L_stage:
        raise ConfigError(f"recompute_layers {training.recompute_layers} is above the "
                          f"{L_stage} layers of a pipeline stage; accepted: 0 to {L_stage}")
    embed = [(n, sh) for n, sh in shapes["root"] if n.startswith(("tok_emb", "pos_emb"))]
    head = [(n, sh) for n, sh in shapes["root"] if not n.startswith(("tok_emb", "pos_emb"))]
    head += [(n, sh) for n, sh in embed if m.tied_embeddings and n.startswith("tok_emb")]
    # nanotron accumulates each micro-batch's 16-bit gradients into fp32 buffers after its
    # backward (FP32GradientAccumulator: fp32_grad.add_(half_param.grad); read 2 B, read and
    # write 4 B per parameter of the rank), bandwidth bound on the compute stream. The engine
    # counts an unpipelined root at its FSDP-padded size; each pipeline end its own part.
    accum = x["accum_pass_bytes"] / x["W"]
    layer["block_bwd_s"] += accum * padded_numel(shapes["block"], 1)
    root["root_bwd_s"] += accum * root_numel
    embed_accum_s = accum * padded_numel(embed, 1)
    head_accum_s = accum * padded_numel(head, 1)

    # -- tensor parallelism: exposed unless overlapped with the GEMMs beside it -------------
    tp_fwd, tp_bwd, tp_root = (tensor_parallel_s(m, x, tp_per_node, tp_per_pod) if t > 1
                               else (0.0, 0.0, 0.0))
    overlap = plan.tp_overlap
    tp_fwd_exposed = max(tp_fwd - layer["gemm_fwd_s"], 0.0) if overlap else tp_fwd
    tp_bwd_exposed = max(tp_bwd - layer["gemm_bwd_s"], 0.0) if overlap else tp_bwd
    # Recompute runs on the first K layers of each stage (all by default): their share.
    K = training.recompute_layers
    rc_share = 1.0 if K is None else min(K, L_stage) / L_stage
    recompute_s = rc_share * layer["recompute_s"]
    replay = rc_share if training.recompute == "full" else 0.0  # full recompute replays them
    # torchtitan's op-level policy keeps the reduce-scatter outputs and reruns the all-gathers
    # (half the sequence-parallel TP collectives), all of them without sequence parallelism.
    tp_replay = ((0.5 if x["sp"] else 1.0) * rc_share if training.recompute == "op-selective"
                 else replay)
    # -- context parallelism: ring hops hide behind the attention they feed; Ulysses' do not
    cp_fwd, cp_bwd = context_parallel_s(m, x, cp_per_node) if c > 1 else (0.0, 0.0)
    ring_cp = not x["cp_all2all"]
    cp_fwd_exposed = max(cp_fwd - layer["attn_fwd_s"], 0.0) if ring_cp else cp_fwd
    cp_bwd_exposed = max(cp_bwd - layer["attn_bwd_s"], 0.0) if ring_cp else cp_bwd

    # -- collectives per unit (fsdpsim.costs.comm table): bytes are the whole buffer --------
    strategy = plan.sharding
    ring = lambda nbytes: nccl_time_s(x, nbytes, shard, shard_per_node, False,  # noqa: E731
                                      shard_per_pod)
    ag_block, ag_root = ring(block_numel * e), ring(root_numel * e)      # gathered params
    rs_block = ring(block_numel * x["reduce_bytes"])                     # grads, reduce dtype
    rs_root = ring(root_numel * x["reduce_bytes"])
    zero3 = strategy in ("full", "hybrid")
    gathers = strategy in ("full", "grad_op", "hybrid")  # parameters gathered per micro-batch
    # keep_gathered: gathered once in the first micro-batch's forward, kept all step.
    keep = plan.keep_gathered and gathers
    ag_calls = (2 if plan.reshard_after_forward and not keep else 1) if zero3 else int(gathers)
    ag_steps = 1 if keep else k                            # micro-batches that gather
    # grad_sync "last": only the last micro-batch reduces (FSDP2
    # set_requires_gradient_sync(False) on the others), the rest accumulate unsharded.
    sync_last = plan.grad_sync == "last" and gathers
    rs_steps = 1 if sync_last else k
    # ZeRO-1: gradients reduce-scattered and parameters gathered once a step; DDP: one
    # all-reduce of the gradients a step (Li et al. 2020 §3.2.4).
    zero1, ddp = strategy == "optimizer", strategy == "none"
    step_block = step_root = post_step = 0.0

    def buckets(numel):
        """DDP's gradient buckets of a unit: one closes at >= bucket_cap_mb MiB of 16-bit
        gradients (torch reducer.cpp compute_bucket_assignment_by_size); 1 without buckets."""
        cap = x["bucket_bytes"]
        return max(1.0, math.floor(numel * e / cap)) if cap > 0 else 1.0

    if zero1:  # (with pipelining, a stage's layers and the whole root, as the engine counts)
        step_block, step_root = (
            n * nccl_time_s(x, numel * x["reduce_bytes"] / n, shard, shard_per_node, False,
                            shard_per_pod)
            for numel, n in ((block_numel, buckets(block_numel)),
                             (root_numel, buckets(root_numel))))
        post_step = ring((L_stage * block_numel + root_numel) * e)
    if ddp:
        step_block, step_root = (
            n * nccl_time_s(x, numel * x["reduce_bytes"] / n, world, world_per_node, True,
                            world_per_pod)
            for numel, n in ((block_numel, buckets(block_numel)),
                             (root_numel, buckets(root_numel))))
    # HSDP: every micro-batch, each GPU's reduced gradient shard is all-reduced over the
    # replicas (Zhao et al. 2023 §3.2.2).
    hsdp_block = hsdp_root = 0.0
    if strategy == "hybrid":
        hsdp_block = nccl_time_s(x, block_numel * x["reduce_bytes"] / shard, replicas,
                                 replica_per_node, True, replica_per_pod)
        hsdp_root = nccl_time_s(x, root_numel * x["reduce_bytes"] / shard, replicas,
                                replica_per_node, True, replica_per_pod)

    # -- one micro-batch: forward and backward with the collectives overlapped --------------
    sigma = x["sigma"]
    fwd_ag = ag_block if gathers else 0.0
    bwd_ag = ag_block if ag_calls > 1 else 0.0            # ZeRO-3 re-gathers in backward
    mb_rs = (rs_block if gathers else 0.0) + hsdp_block
    root_rs = (rs_root if gathers else 0.0) + hsdp_root
    # A layer as FSDP sees it: its compute plus its exposed TP collectives (replayed with the
    # forward under full recompute); the root's TP collectives half in each pass.
    block_fwd = layer["block_fwd_s"] + tp_fwd_exposed + cp_fwd_exposed
    block_bwd = (layer["block_bwd_s"] + recompute_s            # the replay precedes backward
                 + tp_bwd_exposed + cp_bwd_exposed + replay * (tp_fwd_exposed + cp_fwd_exposed)
                 + (tp_replay * tp_fwd_exposed if training.recompute == "op-selective"
                    else 0.0))
    root_fwd = root["root_fwd_s"] + 0.5 * tp_root
    root_bwd = root["root_bwd_s"] + 0.5 * tp_root

    def phases(n_units, holds_root):
        """A stage's forward, a backward that is not the last, and the last backward (with
        the once-a-step collectives) for one micro-batch: FSDP's prefetch pipeline over the
        units, the root (if held) gathered first in forward and computed first in backward
        beside the first re-gather, the last unit's reduction and the root's after it."""
        r_fwd, r_bwd = (root_fwd, root_bwd) if holds_root else (0.0, 0.0)
        r_ag = ag_root if gathers and holds_root else 0.0
        fwd = pipelined_s(r_ag + fwd_ag, fwd_ag, block_fwd, n_units, 0.0, sigma) + r_fwd
        if keep:  # later micro-batches: the parameters are still there
            fwd = (fwd + (k - 1) * (n_units * block_fwd + r_fwd)) / k

        def backward(block_comm, root_comm):
            head = slowed_s(r_bwd, bwd_ag, sigma)
            first = max(0.0, bwd_ag - r_bwd)
            return (head + pipelined_s(first, bwd_ag + block_comm, block_bwd, n_units,
                                       block_comm, sigma) + root_comm * holds_root)
        bwd_mb = backward(0.0, 0.0) if sync_last else backward(mb_rs, root_rs)
        if zero1 and not x["zero1_overlap"]:  # the reduce-scatter after the backward
            return fwd, bwd_mb, (backward(mb_rs, root_rs) + n_units * step_block
                                 + step_root * holds_root)
        return fwd, bwd_mb, backward(mb_rs + step_block, root_rs + step_root)

    # Optimizer on the local shard (the first stage's, with pipelining): bandwidth bound.
    stage_params = (L_first * block_numel + padded_numel(embed, shard, flat) if pp > 1
                    else params_padded)
    optimizer_s = stage_params / shard * OPTIMIZER_TRAFFIC_BYTES[training.optimizer] / x["W"]
    embed_fwd, embed_bwd = root["embed_s"], 2.0 * root["embed_s"] + embed_accum_s
    head_fwd = root["head_gemm_s"] + 0.4 * root["loss_s"]
    head_bwd = root["head_gemm_bwd_s"] + 0.6 * root["loss_s"] + head_accum_s
    p2p_s = bubble_s = 0.0
    if pp == 1:
        fwd, bwd_mb, bwd_last = phases(L, True)  # fwd: the mean over the k micro-batches
        # Megatron's distributed optimizer gathers the updated parameters beside the next
        # step's forward (--overlap-param-gather): only what outlasts that forward shows.
        shown = max(post_step - fwd, 0.0) if x["param_gather_overlap"] else post_step
        step_s = k * fwd + (k - 1) * bwd_mb + bwd_last + optimizer_s + shown
    else:
        # One activation (or its gradient) per micro-batch crosses each stage boundary, over
        # the link when neighbouring stages share a domain, else the NIC (SC21 §3.2); SP sends
        # the 1/t shard.
        pp_per_node = members_per_domain([(pp, N // pp)], D)
        a_bytes = x["T"] * m.d_model * e / (t if x["sp"] else 1)
        p2p_s = (a_bytes / x["link"] + x["link_latency_s"] if pp_per_node > 1
                 else a_bytes / x["nic"] + x["nic_latency_s"])
        fwd, bwd_mb, bwd_last = phases(L_mid, False)   # a middle stage
        # Each end stage gathers the root unit once per micro-batch; the engine charges the
        # whole root's bytes at both ends (each holds only its part: an upper bound).
        r_ag = ag_root if gathers else 0.0
        extra_first = (max((L_first - L_mid) * block_fwd + embed_fwd + 0.5 * tp_root + r_ag, 0.0),
                       max((L_first - L_mid) * block_bwd + embed_bwd, 0.0))
        extra_last = (max((L_last - L_mid) * block_fwd + head_fwd + 0.5 * tp_root + r_ag, 0.0),
                      max((L_last - L_mid) * block_bwd + head_bwd + 0.5 * tp_root, 0.0))
        # ZB-H1 splits each backward into the input-gradient pass B and the weight-gradient
        # pass W: half of the GEMM backward FLOPs (the end stages' extras stay in B).
        wgrad = L_mid * 0.5 * layer["gemm_bwd_s"] if plan.pp_schedule == "zb-h1" else 0.0
        stage_fwd = [fwd] * pp
        stage_bwd = [bwd_mb - wgrad] * pp
        stage_fwd[0] += extra_first[0]
        stage_bwd[0] += extra_first[1]
        stage_fwd[-1] += extra_last[0]
        stage_bwd[-1] += extra_last[1]
        # after the flush: the last backward's once-a-step collectives, then the optimizer
        makespan = pipeline_makespan_s(plan.pp_schedule, stage_fwd, stage_bwd, [wgrad] * pp, k,
                                       p2p_s)
        step_s = makespan + (bwd_last - bwd_mb) + optimizer_s + post_step
        # the bubble: what the busiest stage idles
        bubble_s = makespan - k * (fwd + bwd_mb + max(sum(extra_first), sum(extra_last)))

    # -- totals --------------------------------------------------------------------------
    # per GPU: a (middle) stage's layers, plus the root, or with pipelining the busier end
    Ls = L_stage
    root_mb = root["root_fwd_s"] + root["root_bwd_s"]
    if pp > 1:
        raw = layer["block_fwd_s"] + layer["block_bwd_s"]
        root_mb = max((L_first - L_mid) * raw + embed_fwd + embed_bwd,
                      (L_last - L_mid) * raw + head_fwd + head_bwd)
    has_root = 1.0 if pp == 1 else 0.0
    compute_s = (k * (Ls * (layer["block_fwd_s"] + layer["block_bwd_s"] + recompute_s)
                      + root_mb) + optimizer_s)
    all_gather_s = (ag_steps * ((Ls * ag_block * ag_calls + ag_root) if gathers else 0.0)
                    + post_step)
    reduce_scatter_s = (rs_steps * ((Ls * rs_block + rs_root) if gathers else 0.0)
                        + ((Ls * step_block + step_root) if zero1 else 0.0))
    all_reduce_s = ((Ls * step_block + step_root) if ddp
                    else rs_steps * (Ls * hsdp_block + hsdp_root))
    tokens_per_step = b * s * k * dp
    # MFU: PaLM App. B model FLOPs, 6·N_mm + 12·L·s·q per token, against the dense peak.
    model_flops = (6.0 * m.matmul_params + 12.0 * L * s * m.q_dim) * tokens_per_step
    # HFU: 3× every weight matmul, attention over the full square with flash's 2.5× backward,
    # plus the recomputed forward (less the down projection under full recompute).
    T = b * s                                             # the whole micro-batch
    up = (2 if m.ffn_kind == "swiglu" else 1) * m.ffn_size
    layer_mm = 2.0 * T * ((m.q_dim + 2 * m.kv_dim) * m.d_model + m.d_model * m.q_dim
                          + up * m.d_model + m.d_model * m.ffn_size)
    attn_full = 4.0 * b * s * s * m.q_dim
    replayed = {"none": 0.0, "selective": attn_full,
                "full": layer_mm + attn_full                    # less the down projection
                - (0.0 if x["megatron"] else 2.0 * T * m.d_model * m.ffn_size),
                # op-selective: wk, wo and w3 (or GELU's down) again; biased: none (addmm)
                "op-selective": (0.0 if (m.mlp_bias or m.qkv_bias or m.attn_out_bias) else
                                 2.0 * T * m.d_model * (m.kv_dim + m.q_dim + m.ffn_size)),
                }[training.recompute]
    if x["rc_mlp"] and training.recompute != "full":   # the MLP's forward GEMMs again
        replayed += 2.0 * T * (up + m.ffn_size) * m.d_model
    hardware_flops = (L * (3.0 * layer_mm + (3.5 if x["flash"] else 3.0) * attn_full)
                      + 3.0 * 2.0 * T * m.d_model * vocab + L * replayed * rc_share) * k * dp
    peak_total = x["peak_nominal"] * N

    def stage_memory(*stage):
        return peak_memory(m, x, strategy, plan.reshard_after_forward and not keep, *stage,
                           accumulate=sync_last and k > 1)
    if pp == 1:
        peak_bytes = stage_memory(L, params_rank, params_padded, block_numel, root_numel,
                                  vocab, 1)
    else:
        # Micro-batches in flight at a stage's peak: GPipe all m; 1F1B min(p − j, m) on stage
        # j (the first min(p, m), the last 1); ZB-H1 min(p, m) on every stage: stage j's W
        # passes run j backwards late, so j more micro-batches wait for their W (Qi et al.
        # 2024 §2.1), counted whole (W keeps most of a micro-batch's activations, Table 1).
        block_rank = padded_numel(shapes["block"], 1)

        def flight(stage):
            return (k if plan.pp_schedule == "gpipe" else min(pp, k)
                    if plan.pp_schedule == "zb-h1" else min(pp - stage, k))
        ends = [(L_first, embed, 0.0, flight(0)), (L_last, head, vocab, flight(pp - 1))]
        # An uneven split whose busiest middle rank holds more layers than the first: that
        # rank (no embedding, no head) can bind too.
        if L_mid > L_first:
            ends.append((L_mid, [], 0.0, flight(plan.busiest_middle_rank(L))))
        peak_bytes = max(stage_memory(n, n * block_rank + padded_numel(part, 1),
                                      n * block_numel + padded_numel(part, shard, flat),
                                      block_numel, padded_numel(part, shard, flat), v, flight)
                         for n, part, v, flight in ends)
    return {
        "step_time_s": step_s,
        "tokens_per_s_per_gpu": tokens_per_step / step_s / N,
        "mfu": model_flops / (step_s * peak_total),
        "mfu_native": model_flops / (step_s * x["gemm_peak"] * N),
        "hfu": hardware_flops / (step_s * peak_total),
        "peak_memory_bytes": peak_bytes,
        "fits": peak_bytes <= x["memory_bytes"],
        "grad_accum": float(k),
        "compute_s": compute_s,
        "gemm_s": k * (Ls * (layer["gemm_fwd_s"] + layer["gemm_bwd_s"])
                       + has_root * (root["head_gemm_s"] + root["head_gemm_bwd_s"])),
        "attention_s": k * Ls * (layer["attn_fwd_s"] + layer["attn_bwd_s"]),
        "memory_bound_s": k * (Ls * (layer["ew_fwd_s"] + layer["ew_bwd_s"])
                               + has_root * (root["loss_s"] + 3.0 * root["embed_s"])) + optimizer_s,
        "recompute_s": k * Ls * recompute_s,
        "optimizer_s": optimizer_s,
        "all_gather_s": all_gather_s,
        "reduce_scatter_s": reduce_scatter_s,
        "all_reduce_s": all_reduce_s,
        "exposed_comm_s": max(step_s - compute_s - bubble_s, 0.0),
        "bubble_s": bubble_s,
        "pp_s": k * 2.0 * p2p_s,
        "cp_s": k * Ls * ((1.0 + replay) * cp_fwd + cp_bwd),
        "cp_exposed_s": k * Ls * ((1.0 + replay) * cp_fwd_exposed + cp_bwd_exposed),
        "tp_s": k * (Ls * ((1.0 + tp_replay) * tp_fwd + tp_bwd) + tp_root),
        "tp_exposed_s": k * (Ls * ((1.0 + tp_replay) * tp_fwd_exposed + tp_bwd_exposed)
                             + tp_root),
        "model_flops_per_step": model_flops,
        "hardware_flops_per_step": hardware_flops,
    }
