"""One training step of one configuration (:func:`predict`), stage by stage: the step's inputs
and its groups on the scale-up domains, the FSDP units and pipeline stages, tensor and context
parallelism beside the layers' compute, the data-parallel collectives, one micro-batch's
forward and backward with them overlapped, the step (one stage, or the pipeline schedule),
then the totals and the metrics (the FLOPs in :mod:`.flops`, the peak memory in
:mod:`.memory`)."""

from __future__ import annotations

import math

from fsdpsim.reference.communication import (context_parallel_s, nccl_time_s,
                                             tensor_parallel_s)
from fsdpsim.reference.flops import step_flops
from fsdpsim.reference.inputs import members_per_domain, padded_numel, rates, tp_local_shapes
from fsdpsim.reference.layers import layer_compute, root_compute
from fsdpsim.reference.memory import step_peak_memory
from fsdpsim.reference.schedule import pipeline_makespan_s, pipelined_s, slowed_s
from fsdpsim.reference.scope import DTYPE_BYTES, LOW_PRECISION, check_scope
from fsdpsim.plan.training import check_recompute_layers as recompute_layers_rule
from fsdpsim.util.errors import ConfigError

#: AdamW (foreach, fp32) moves 28 B per local parameter, SGD with momentum 20 B
#: (Loshchilov & Hutter 2019 Alg. 2; torch.optim foreach kernels).
OPTIMIZER_TRAFFIC_BYTES = {"adamw": 28.0, "sgd": 20.0}


def predict(model, system, plan, training) -> dict[str, float]:
    """One training step of one configuration (:mod:`fsdpsim.reference` for the scope) [SI units].

    Returns step time, tokens/s per GPU, MFU, HFU, the peak memory per GPU and the main
    terms: compute, the FSDP/ZeRO/DDP collectives, exposed communication, optimizer. Each
    stage below is one function of this module, in the order they run."""
    check_scope(model, system, plan, training)
    plan.check_model(n_layers=model.n_layers, n_heads=model.n_heads, n_kv_heads=model.kv_heads,
                     seq_len=training.seq_len)
    # -- layout: micro-batches, groups on the scale-up domains, FSDP units, pipeline stages --
    k = accumulation_steps(plan, training)
    x = step_inputs(model, system, plan, training)
    groups = group_members(system, plan)
    units = fsdp_units(model, x, plan)
    check_recompute_layers(model, training, units)
    # -- layer times: one layer, the root (embedding, LM head, loss), the optimizer ---------
    layer, root = with_accumulation_pass(layer_compute(model, x), root_compute(model, x), x,
                                         units)
    ends = end_stages(x, root, units)
    optimizer_s = optimizer_time_s(x, plan, training, units)
    # -- communication: TP and CP per layer, the data-parallel collectives per unit ---------
    mp = model_parallel(model, x, plan, training, layer, groups, units["L_stage"])
    dp = data_parallel(x, plan, k, units, groups)
    # -- schedule: one micro-batch with its collectives overlapped, then the step -----------
    mb = micro_batch(x, layer, root, mp, dp)
    if plan.pp == 1:
        step = single_stage_step(x, k, units, mb, dp, optimizer_s)
    else:
        step = pipelined_step(model, x, plan, k, layer, units, mb, dp, ends, groups,
                              optimizer_s)
    terms = totals(plan, k, layer, root, units, mp, dp, ends, optimizer_s)
    model_flops, hardware_flops = step_flops(model, x, k, plan.dp, mp["rc_share"])
    # -- memory: the peak of the stage that binds -------------------------------------------
    peak_bytes = step_peak_memory(model, x, plan, k, units, keep=dp["keep"],
                                  accumulate=dp["sync_last"] and k > 1)
    # -- metrics: throughput, MFU and HFU against the peak of all N GPUs --------------------
    N, step_s, bubble_s = plan.num_gpus, step["step_s"], step["bubble_s"]
    tokens_per_step = training.micro_batch * training.seq_len * k * plan.dp
    peak_total = x["peak_nominal"] * N
    return {
        "step_time_s": step_s,
        "tokens_per_s_per_gpu": tokens_per_step / step_s / N,
        "mfu": model_flops / (step_s * peak_total),
        "mfu_native": model_flops / (step_s * x["gemm_peak"] * N),
        "hfu": hardware_flops / (step_s * peak_total),
        "peak_memory_bytes": peak_bytes,
        "fits": peak_bytes <= x["memory_bytes"],
        "grad_accum": float(k),
        **terms,
        "exposed_comm_s": max(step_s - terms["compute_s"] - bubble_s, 0.0),
        "bubble_s": bubble_s,
        "pp_s": k * 2.0 * step["p2p_s"],
        "model_flops_per_step": model_flops,
        "hardware_flops_per_step": hardware_flops,
    }


def accumulation_steps(plan, training):
    """Micro-batches per step (gradient-accumulation steps) k: the global batch over
    micro-batch × dp, 1 without a global batch."""
    b, dp = training.micro_batch, plan.dp
    if training.global_batch is None:
        return 1
    if training.global_batch % (b * dp):
        raise ConfigError(f"global_batch({training.global_batch}) is not a multiple of "
                          f"micro_batch({b}) x dp({dp})")
    return training.global_batch // (b * dp)


def step_inputs(m, system, plan, training):
    """The catalog's rates (:func:`~fsdpsim.reference.inputs.rates`) with the step's shapes,
    dtypes and options: the dict ``x`` the layers, collectives and memory read."""
    t, c, b, s = plan.tp, plan.cp, training.micro_batch, training.seq_len
    x = rates(m, system, plan, training)
    x["oversubscription"] = system.oversubscription
    # Low-precision recipes keep 16-bit weights for the gathers and 16-bit activations.
    e = 2.0 if training.precision in LOW_PRECISION else DTYPE_BYTES[training.precision]
    # Megatron pads the vocabulary to a multiple of 128·t with TP (--make-vocab-size-divisible-
    # by, megatron/training/tokenizer _vocab_size_with_padding).
    vocab = m.vocab_size if t == 1 else math.ceil(m.vocab_size / (128 * t)) * 128 * t
    x.update(tp=t, sp=plan.sequence_parallel and t > 1, vocab=vocab,
             cp=c, cp_all2all=plan.cp_kind == "all2all",
             b=b, s=s, T=b * s / c, e=e, shard=plan.shard_group,  # dp_shard × cp (1 for DDP)
             flash=training.flash_attention,
             fused_loss=training.fused_loss, recompute=training.recompute,
             dropout=training.dropout, recompute_layers=training.recompute_layers,
             cuda_graphs=training.cuda_graphs != "none",
             rc_mlp="mlp" in training.recompute_modules,
             block_params=float(sum(math.prod(sh) for _, sh in
                                    m.unit_parameter_shapes()["block"])),
             optimizer=training.optimizer,
             reduce_bytes=DTYPE_BYTES[training.reduce_dtype or "fp32"])
    return x


def group_members(system, plan):
    """Members of rank 0's groups in its scale-up domain (``*_per_node``) and in its
    non-blocking pod of an oversubscribed fabric (``*_per_pod``; the group's size without):
    TP innermost (t consecutive ranks), then CP, the FSDP/ZeRO shard group of S ranks (all dp
    ranks but for HSDP; 1 for DDP), HSDP's R replicas of it, the pipeline stages outermost.
    The data-parallel ``world`` is replicas × shard: dp × cp (fsdpsim.plan.layout)."""
    t, c, dp_shard, replicas, pp = plan.tp, plan.cp, plan.dp_shard, plan.dp_replicate, plan.pp
    D, pod = plan.gpus_per_node, system.pod_gpus

    def per_pod(dims):
        return members_per_domain(dims, pod) if pod else math.prod(d for d, _ in dims)
    outer = t * c * dp_shard                              # the replicas' stride
    tp, cp, replica = [(t, 1)], [(c, t)], [(replicas, outer)]
    shard = [(dp_shard, t * c), (c, t)]
    world = replica + shard
    return {"tp_per_node": members_per_domain(tp, D), "tp_per_pod": per_pod(tp),
            "cp_per_node": members_per_domain(cp, D),
            "shard_per_node": members_per_domain(shard, D), "shard_per_pod": per_pod(shard),
            "replica_per_node": members_per_domain(replica, D),
            "replica_per_pod": per_pod(replica),
            "world": replicas * dp_shard * c,
            "world_per_node": members_per_domain(world, D), "world_per_pod": per_pod(world),
            "pp_per_node": members_per_domain([(pp, plan.num_gpus // pp)], D)}


def fsdp_units(m, x, plan):
    """The FSDP units, one per block and the root, of one TP rank, padded per parameter or
    flat (:func:`~fsdpsim.reference.inputs.padded_numel`), and the pipeline stages: the first
    holds the embeddings, the last the final norm and LM head (and a copy of a tied embedding,
    Megatron); the layers split (first, middle, last), ``L_stage`` those of a (middle) stage."""
    L, t, shard, flat = m.n_layers, x["tp"], x["shard"], x["flat_parameter"]
    shapes = {unit: tp_local_shapes(pairs, t, m.vocab_size, x["vocab"])
              for unit, pairs in m.unit_parameter_shapes().items()}
    block_numel = padded_numel(shapes["block"], shard, flat)
    root_numel = padded_numel(shapes["root"], shard, flat)
    embed = [(n, sh) for n, sh in shapes["root"] if n.startswith(("tok_emb", "pos_emb"))]
    head = [(n, sh) for n, sh in shapes["root"] if not n.startswith(("tok_emb", "pos_emb"))]
    head += [(n, sh) for n, sh in embed if m.tied_embeddings and n.startswith("tok_emb")]
    block_rank = padded_numel(shapes["block"], 1)         # unpadded: one TP rank's
    L_first, L_mid, L_last = plan.stage_layers(L)
    return {"block_numel": block_numel, "root_numel": root_numel, "embed": embed, "head": head,
            "block_rank": block_rank, "params_padded": L * block_numel + root_numel,
            "params_rank": (float(m.n_params) if t == 1
                            else L * block_rank + padded_numel(shapes["root"], 1)),
            "L_first": L_first, "L_mid": L_mid, "L_last": L_last,
            "L_stage": L_mid if plan.pp > 1 else L}


def check_recompute_layers(m, training, units):
    """Megatron's --recompute-num-layers counts the layers of one pipeline stage (the busiest
    middle rank's): a count above them is refused by the rule predict and sweep apply
    (:func:`fsdpsim.plan.training.check_recompute_layers`)."""
    recompute_layers_rule(training.recompute_layers, units["L_mid"], m.name)


def with_accumulation_pass(layer, root, x, units):
    """The layer's and root's compute with nanotron's fp32 gradient accumulation after each
    micro-batch's backward (FP32GradientAccumulator: fp32_grad.add_(half_param.grad); read
    2 B, read and write 4 B per parameter of the rank), bandwidth bound on the compute
    stream. The engine counts an unpipelined root at its FSDP-padded size."""
    accum = x["accum_pass_bytes"] / x["W"]
    return (dict(layer, block_bwd_s=layer["block_bwd_s"] + accum * units["block_rank"]),
            dict(root, root_bwd_s=root["root_bwd_s"] + accum * units["root_numel"]))


def model_parallel(m, x, plan, training, layer, groups, L_stage):
    """Tensor and context parallelism per layer [s]: TP collectives exposed unless overlapped
    with the GEMMs beside them; ring CP hops hidden behind the attention they feed, Ulysses'
    not; and the share of them that recompute replays."""
    t, c = x["tp"], x["cp"]
    tp_fwd, tp_bwd, tp_root = (tensor_parallel_s(m, x, groups["tp_per_node"],
                                                 groups["tp_per_pod"]) if t > 1
                               else (0.0, 0.0, 0.0))
    overlap = plan.tp_overlap
    tp_fwd_exposed = max(tp_fwd - layer["gemm_fwd_s"], 0.0) if overlap else tp_fwd
    tp_bwd_exposed = max(tp_bwd - layer["gemm_bwd_s"], 0.0) if overlap else tp_bwd
    # Recompute runs on the first K layers of each stage (all by default): their share.
    K = training.recompute_layers
    rc_share = 1.0 if K is None else min(K, L_stage) / L_stage
    replay = rc_share if training.recompute == "full" else 0.0  # full recompute replays them
    # torchtitan's op-level policy keeps the reduce-scatter outputs and reruns the all-gathers
    # (half the sequence-parallel TP collectives), all of them without sequence parallelism.
    tp_replay = ((0.5 if x["sp"] else 1.0) * rc_share if training.recompute == "op-selective"
                 else replay)
    cp_fwd, cp_bwd = (context_parallel_s(m, x, groups["cp_per_node"]) if c > 1
                      else (0.0, 0.0))
    ring_cp = not x["cp_all2all"]
    return {"tp_fwd": tp_fwd, "tp_bwd": tp_bwd, "tp_root": tp_root,
            "tp_fwd_exposed": tp_fwd_exposed, "tp_bwd_exposed": tp_bwd_exposed,
            "rc_share": rc_share, "recompute_s": rc_share * layer["recompute_s"],
            "replay": replay, "tp_replay": tp_replay,
            "op_selective": training.recompute == "op-selective",
            "cp_fwd": cp_fwd, "cp_bwd": cp_bwd,
            "cp_fwd_exposed": max(cp_fwd - layer["attn_fwd_s"], 0.0) if ring_cp else cp_fwd,
            "cp_bwd_exposed": max(cp_bwd - layer["attn_bwd_s"], 0.0) if ring_cp else cp_bwd}


def data_parallel(x, plan, k, units, groups):
    """The data-parallel collectives per unit [s] (fsdpsim.costs.comm table: bytes are the
    whole buffer) and how often they run: parameters gathered in the compute dtype, gradients
    reduced in the reduce dtype, over the shard group; once a step for ZeRO-1 and DDP, one
    call per DDP bucket."""
    strategy, e, reduce_bytes = plan.sharding, x["e"], x["reduce_bytes"]
    block, root, shard = units["block_numel"], units["root_numel"], x["shard"]

    def ring(nbytes):
        return nccl_time_s(x, nbytes, shard, groups["shard_per_node"], False,
                           groups["shard_per_pod"])

    def all_reduce(nbytes, n, over):
        return nccl_time_s(x, nbytes, n, groups[f"{over}_per_node"], True,
                           groups[f"{over}_per_pod"])
    ag_block, ag_root = ring(block * e), ring(root * e)              # gathered params
    rs_block, rs_root = ring(block * reduce_bytes), ring(root * reduce_bytes)
    zero3 = strategy in ("full", "hybrid")
    gathers = strategy in ("full", "grad_op", "hybrid")  # parameters gathered per micro-batch
    # keep_gathered: gathered once in the first micro-batch's forward, kept all step.
    keep = plan.keep_gathered and gathers
    # grad_sync "last": only the last micro-batch reduces (FSDP2
    # set_requires_gradient_sync(False) on the others), the rest accumulate unsharded.
    sync_last = plan.grad_sync == "last" and gathers
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
        step_block, step_root = (n * ring(numel * reduce_bytes / n)
                                 for numel, n in ((block, buckets(block)), (root, buckets(root))))
        post_step = ring((units["L_stage"] * block + root) * e)
    if ddp:
        step_block, step_root = (n * all_reduce(numel * reduce_bytes / n, groups["world"], "world")
                                 for numel, n in ((block, buckets(block)), (root, buckets(root))))
    # HSDP: every micro-batch, each GPU's reduced gradient shard is all-reduced over the
    # replicas (Zhao et al. 2023 §3.2.2).
    hsdp_block = hsdp_root = 0.0
    if strategy == "hybrid":
        replicas = plan.dp_replicate
        hsdp_block = all_reduce(block * reduce_bytes / shard, replicas, "replica")
        hsdp_root = all_reduce(root * reduce_bytes / shard, replicas, "replica")
    return {"ag_block": ag_block, "ag_root": ag_root, "rs_block": rs_block, "rs_root": rs_root,
            "gathers": gathers, "keep": keep, "sync_last": sync_last,
            "ag_calls": ((2 if plan.reshard_after_forward and not keep else 1) if zero3
                         else int(gathers)),
            "ag_steps": 1 if keep else k,                # micro-batches that gather
            "rs_steps": 1 if sync_last else k,
            "zero1": zero1, "ddp": ddp, "step_block": step_block, "step_root": step_root,
            # nanotron: ZeRO-1's reduce-scatters after the backward, not beside it
            "zero1_after_backward": zero1 and not x["zero1_overlap"],
            "post_step": post_step, "hsdp_block": hsdp_block, "hsdp_root": hsdp_root}


def micro_batch(x, layer, root, mp, dp):
    """One micro-batch's units as FSDP sees them [s]: a layer's compute plus its exposed TP
    and CP collectives (the forward's replayed under full recompute, half the TP all-gathers
    under the op-level policy), the root's TP collectives half in each pass; and the
    collectives overlapped with them."""
    fwd_exposed = mp["tp_fwd_exposed"] + mp["cp_fwd_exposed"]
    return {
        "sigma": x["sigma"],
        "fwd_ag": dp["ag_block"] if dp["gathers"] else 0.0,
        "bwd_ag": dp["ag_block"] if dp["ag_calls"] > 1 else 0.0,  # ZeRO-3 re-gathers
        "mb_rs": (dp["rs_block"] if dp["gathers"] else 0.0) + dp["hsdp_block"],
        "root_rs": (dp["rs_root"] if dp["gathers"] else 0.0) + dp["hsdp_root"],
        "block_fwd": layer["block_fwd_s"] + mp["tp_fwd_exposed"] + mp["cp_fwd_exposed"],
        "block_bwd": (layer["block_bwd_s"] + mp["recompute_s"]  # the replay precedes backward
                      + mp["tp_bwd_exposed"] + mp["cp_bwd_exposed"] + mp["replay"] * fwd_exposed
                      + (mp["tp_replay"] * mp["tp_fwd_exposed"] if mp["op_selective"]
                         else 0.0)),
        "tp_root": mp["tp_root"],
        "root_fwd": root["root_fwd_s"] + 0.5 * mp["tp_root"],
        "root_bwd": root["root_bwd_s"] + 0.5 * mp["tp_root"]}


def phases(n_units, holds_root, k, mb, dp):
    """A stage's forward, a backward that is not the last, and the last backward (with the
    once-a-step collectives) for one micro-batch [s]: FSDP's prefetch pipeline over the units
    (:func:`~fsdpsim.reference.schedule.pipelined_s`), the root (if held) gathered first in
    forward and computed first in backward beside the first re-gather, the last unit's
    reduction and the root's after it (nanotron's ZeRO-1 reduce-scatters after the whole
    backward)."""
    sigma, fwd_ag, bwd_ag, block_bwd = mb["sigma"], mb["fwd_ag"], mb["bwd_ag"], mb["block_bwd"]
    r_fwd, r_bwd = (mb["root_fwd"], mb["root_bwd"]) if holds_root else (0.0, 0.0)
    r_ag = dp["ag_root"] if dp["gathers"] and holds_root else 0.0
    fwd = pipelined_s(r_ag + fwd_ag, fwd_ag, mb["block_fwd"], n_units, 0.0, sigma) + r_fwd
    if dp["keep"]:  # later micro-batches: the parameters are still there
        fwd = (fwd + (k - 1) * (n_units * mb["block_fwd"] + r_fwd)) / k

    def backward(block_comm, root_comm):
        head = slowed_s(r_bwd, bwd_ag, sigma)
        first = max(0.0, bwd_ag - r_bwd)
        return (head + pipelined_s(first, bwd_ag + block_comm, block_bwd, n_units,
                                   block_comm, sigma) + root_comm * holds_root)
    mb_rs, root_rs = mb["mb_rs"], mb["root_rs"]
    bwd_mb = backward(0.0, 0.0) if dp["sync_last"] else backward(mb_rs, root_rs)
    if dp["zero1_after_backward"]:
        return fwd, bwd_mb, (backward(mb_rs, root_rs) + n_units * dp["step_block"]
                             + dp["step_root"] * holds_root)
    return fwd, bwd_mb, backward(mb_rs + dp["step_block"], root_rs + dp["step_root"])


def end_stages(x, root, units):
    """Compute the pipeline's end stages add to their layers [s], split as the engine does
    (fsdpsim.engine.layers): the embedding on the first (its backward twice its forward), the
    LM head and the loss (40 % forward, 60 % backward) on the last, each backward with the
    fp32 accumulation pass over its own part (:func:`with_accumulation_pass`)."""
    accum = x["accum_pass_bytes"] / x["W"]
    return {"embed_fwd": root["embed_s"],
            "embed_bwd": 2.0 * root["embed_s"] + accum * padded_numel(units["embed"], 1),
            "head_fwd": root["head_gemm_s"] + 0.4 * root["loss_s"],
            "head_bwd": (root["head_gemm_bwd_s"] + 0.6 * root["loss_s"]
                         + accum * padded_numel(units["head"], 1))}


def optimizer_time_s(x, plan, training, units):
    """Optimizer step on the local shard (the first stage's, with pipelining) [s], bandwidth
    bound: parameters × :data:`OPTIMIZER_TRAFFIC_BYTES` / W."""
    stage_params = (units["L_first"] * units["block_numel"]
                    + padded_numel(units["embed"], x["shard"], x["flat_parameter"])
                    if plan.pp > 1 else units["params_padded"])
    return stage_params / x["shard"] * OPTIMIZER_TRAFFIC_BYTES[training.optimizer] / x["W"]


def single_stage_step(x, k, units, mb, dp, optimizer_s):
    """Step time without pipelining [s]: k forwards (their mean), k − 1 backwards, the last
    backward with the once-a-step collectives, the optimizer, and ZeRO-1's parameter gather.
    Megatron's distributed optimizer gathers the updated parameters beside the next step's
    forward (--overlap-param-gather): only what outlasts that forward shows."""
    fwd, bwd_mb, bwd_last = phases(units["L_stage"], True, k, mb, dp)
    post_step = dp["post_step"]
    shown = max(post_step - fwd, 0.0) if x["param_gather_overlap"] else post_step
    return {"step_s": k * fwd + (k - 1) * bwd_mb + bwd_last + optimizer_s + shown,
            "p2p_s": 0.0, "bubble_s": 0.0}


def pipelined_step(m, x, plan, k, layer, units, mb, dp, ends, groups, optimizer_s):
    """Step time with pipelining [s]: the schedule's makespan over the stages
    (:func:`~fsdpsim.reference.schedule.pipeline_makespan_s`; every stage timed as a middle
    one plus the end stages' extras), then the last backward's once-a-step collectives, the
    optimizer and ZeRO-1's gather after the flush; the bubble is what the busiest stage
    idles."""
    pp, t, e = plan.pp, x["tp"], x["e"]
    L_first, L_mid, L_last = units["L_first"], units["L_mid"], units["L_last"]
    block_fwd, block_bwd, tp_root = mb["block_fwd"], mb["block_bwd"], mb["tp_root"]
    # One activation (or its gradient) per micro-batch crosses each stage boundary, over the
    # link when neighbouring stages share a domain, else the NIC (SC21 §3.2); SP sends the
    # 1/t shard.
    a_bytes = x["T"] * m.d_model * e / (t if x["sp"] else 1)
    p2p_s = (a_bytes / x["link"] + x["link_latency_s"] if groups["pp_per_node"] > 1
             else a_bytes / x["nic"] + x["nic_latency_s"])
    fwd, bwd_mb, bwd_last = phases(L_mid, False, k, mb, dp)   # a middle stage
    # Each end stage gathers the root unit once per micro-batch; the engine charges the
    # whole root's bytes at both ends (each holds only its part: an upper bound).
    r_ag = dp["ag_root"] if dp["gathers"] else 0.0
    extra_first = (max((L_first - L_mid) * block_fwd + ends["embed_fwd"] + 0.5 * tp_root + r_ag,
                       0.0),
                   max((L_first - L_mid) * block_bwd + ends["embed_bwd"], 0.0))
    extra_last = (max((L_last - L_mid) * block_fwd + ends["head_fwd"] + 0.5 * tp_root + r_ag,
                      0.0),
                  max((L_last - L_mid) * block_bwd + ends["head_bwd"] + 0.5 * tp_root, 0.0))
    # ZB-H1 splits each backward into the input-gradient pass B and the weight-gradient
    # pass W: half of the GEMM backward FLOPs (the end stages' extras stay in B).
    wgrad = L_mid * 0.5 * layer["gemm_bwd_s"] if plan.pp_schedule == "zb-h1" else 0.0
    stage_fwd = [fwd] * pp
    stage_bwd = [bwd_mb - wgrad] * pp
    stage_fwd[0] += extra_first[0]
    stage_bwd[0] += extra_first[1]
    stage_fwd[-1] += extra_last[0]
    stage_bwd[-1] += extra_last[1]
    makespan = pipeline_makespan_s(plan.pp_schedule, stage_fwd, stage_bwd, [wgrad] * pp, k,
                                   p2p_s)
    return {"step_s": makespan + (bwd_last - bwd_mb) + optimizer_s + dp["post_step"],
            "p2p_s": p2p_s,
            "bubble_s": makespan - k * (fwd + bwd_mb + max(sum(extra_first), sum(extra_last)))}


def totals(plan, k, layer, root, units, mp, dp, ends, optimizer_s):
    """The step's time terms per GPU [s]: a (middle) stage's layers, plus the root, or with
    pipelining the busier end stage's extras, k micro-batches of each; the optimizer; the
    data-parallel collectives by kind; the TP and CP collectives, all and exposed."""
    L_first, L_mid, L_last = units["L_first"], units["L_mid"], units["L_last"]
    Ls, recompute_s, replay, tp_replay = units["L_stage"], mp["recompute_s"], mp["replay"], \
        mp["tp_replay"]
    root_mb = root["root_fwd_s"] + root["root_bwd_s"]
    if plan.pp > 1:
        raw = layer["block_fwd_s"] + layer["block_bwd_s"]
        root_mb = max((L_first - L_mid) * raw + ends["embed_fwd"] + ends["embed_bwd"],
                      (L_last - L_mid) * raw + ends["head_fwd"] + ends["head_bwd"])
    has_root = 1.0 if plan.pp == 1 else 0.0
    gathers = dp["gathers"]
    return {
        "compute_s": (k * (Ls * (layer["block_fwd_s"] + layer["block_bwd_s"] + recompute_s)
                           + root_mb) + optimizer_s),
        "gemm_s": k * (Ls * (layer["gemm_fwd_s"] + layer["gemm_bwd_s"])
                       + has_root * (root["head_gemm_s"] + root["head_gemm_bwd_s"])),
        "attention_s": k * Ls * (layer["attn_fwd_s"] + layer["attn_bwd_s"]),
        "memory_bound_s": k * (Ls * (layer["ew_fwd_s"] + layer["ew_bwd_s"])
                               + has_root * (root["loss_s"] + 3.0 * root["embed_s"])) + optimizer_s,
        "recompute_s": k * Ls * recompute_s,
        "optimizer_s": optimizer_s,
        "all_gather_s": (dp["ag_steps"] * ((Ls * dp["ag_block"] * dp["ag_calls"] + dp["ag_root"])
                                           if gathers else 0.0)
                         + dp["post_step"]),
        "reduce_scatter_s": (dp["rs_steps"] * ((Ls * dp["rs_block"] + dp["rs_root"]) if gathers
                                               else 0.0)
                             + ((Ls * dp["step_block"] + dp["step_root"]) if dp["zero1"]
                                else 0.0)),
        "all_reduce_s": ((Ls * dp["step_block"] + dp["step_root"]) if dp["ddp"]
                         else dp["rs_steps"] * (Ls * dp["hsdp_block"] + dp["hsdp_root"])),
        "cp_s": k * Ls * ((1.0 + replay) * mp["cp_fwd"] + mp["cp_bwd"]),
        "cp_exposed_s": k * Ls * ((1.0 + replay) * mp["cp_fwd_exposed"] + mp["cp_bwd_exposed"]),
        "tp_s": k * (Ls * ((1.0 + tp_replay) * mp["tp_fwd"] + mp["tp_bwd"]) + mp["tp_root"]),
        "tp_exposed_s": k * (Ls * ((1.0 + tp_replay) * mp["tp_fwd_exposed"]
                                   + mp["tp_bwd_exposed"]) + mp["tp_root"]),
    }
