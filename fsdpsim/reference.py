"""A scalar reference model of one training step: read this file first.

``predict(model, system, plan, training)`` returns step time, tokens/s per GPU, MFU, HFU and
the per-GPU peak memory of one configuration, with plain Python floats, one equation per line,
each with its source. It is written from the equations of ``docs/model.md`` and the docstrings
of :mod:`fsdpsim.costs`, not from the vectorised engine (:mod:`fsdpsim.engine`), which it does
not call; ``tests/test_reference.py`` requires both to agree to a relative 1e-9 on random
configurations, so the engine can be rewritten and optimised against it.

Scope (anything else raises :class:`~fsdpsim.util.errors.ConfigError`, never a silent number):

* dense decoder models with uniform full-attention layers (no MoE, MLA, MTP, QK-norm or
  sliding/chunked attention; :attr:`ModelSpec.engine_unsupported` empty);
* data parallelism: sharding ``full`` (ZeRO-3), ``grad_op`` (ZeRO-2), ``optimizer``
  (ZeRO-1), ``none`` (DDP) or ``hybrid`` (HSDP, any shard group size);
  ``reshard_after_forward``, ``keep_gathered`` and ``grad_sync`` (every / last micro-batch)
  either way;
* tensor parallelism inside one scale-up domain (``tp`` dividing ``gpus_per_node``; Megatron
  column/row split, sequence parallelism and TP overlap on or off);
* pipeline parallelism with the ``gpipe``, ``1f1b`` or ``zb-h1`` schedule (``vpp = 1``;
  given first/last stage layers, or the framework's default split,
  :func:`fsdpsim.plan.pipeline_split.default_split`: every middle stage is timed as the
  busiest one, whose memory is checked beside the ends'); context parallelism, ring or
  Ulysses; ``ep = 1``;
* frameworks ``fsdp2`` (PyTorch ``fully_shard``, the default; every parameter padded),
  ``fsdp1`` (one FlatParameter per unit, padded once), ``megatron``,
  ``deepspeed-zero3`` and ``nanotron`` (the last three Megatron's mixed-precision recipe and
  reentrant checkpoint; Megatron's distributed optimizer overlaps ZeRO-1's parameter gather
  with the next forward, not with pipelining; nanotron adds an fp32 gradient accumulation
  pass after each backward, reduces the gradients one call per 25 MiB DDP bucket and runs
  ZeRO-1's reduce-scatters after the backward, not beside it); all on the catalog's NCCL 2.30
  constants. GEMM and attention
  fractions are the catalog's for the GPU x precision class x the profile's kernel stack
  (:func:`fsdpsim.hardware.efficiency.resolve`; cuDNN fused attention on ``te`` only);
* every precision (16/32-bit, and FP8, FP8 block-scaled, MXFP8, NVFP4 with 16-bit weights,
  activations and attention unless ``fp8_attention`` / ``fp8_lm_head``, ``bf16_layers``
  blended); reduce dtype bf16, fp16 or fp32; AdamW or SGD;
  FlashAttention, fused loss and dropout on or off; recompute ``none``, ``selective``,
  ``full`` or ``op-selective`` (torchtitan's op-level policy: every second matmul's output,
  the attention kernel's and the reduce-scatters' kept, the rest rerun) on every layer or the
  first ``recompute_layers`` of each stage, and Megatron's
  per-module ``mlp`` recompute (``recompute_modules``); CUDA graphs on or off;
* micro-batch and recompute given (``predict``'s ``auto`` search is a driver concern);
* any scale-up link (NVSwitch, PCIe, switchless mesh), any catalog network and cluster
  (fabric decay, oversubscribed pods), power caps, fragmented placement and measured bus
  bandwidths (``--busbw-*-gbs``).

Not covered (refused): ``deepspeed-zero3-2021``, ``internevo``, ``megatron-2021``,
interleaved schedules, ``ep > 1``, TP across scale-up domains.

Symbols: b micro-batch, s sequence length, c the CP degree, T = b·s/c tokens of a micro-batch
on one rank, h = d_model, q and kv the query and key/value widths, f the MLP width, V the
vocabulary, L layers, k gradient-accumulation steps (micro-batches per step), N GPUs, t the
TP degree, S the FSDP shard group, e bytes per activation/parameter element in the compute
dtype, R = peak × achievable matmul fraction [FLOP/s], W = HBM bandwidth × achievable
fraction [B/s].

Where the engine counts something in a way that looks questionable, the reference does the
same (so the two agree) and says so in a comment: each pipeline end stage gathers the whole
root unit; an unpipelined root's fp32 accumulation pass (nanotron) counts its FSDP-padded
size; Megatron's ``mlp`` module recompute frees the MLP internals of every layer of a stage,
though it replays only the first ``recompute_layers``.
"""

from __future__ import annotations

import math

from fsdpsim.util.errors import ConfigError

#: Bytes per element of the 16- and 32-bit dtypes (compute, gathers, gradient reduction).
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0}
#: Low-precision GEMM formats: weights gathered and activations kept in 16 bits, only the
#: GEMM operands cast (Transformer Engine fp8_autocast; torchao float8 in torchtitan).
LOW_PRECISION = ("fp8", "fp8-block", "mxfp8", "nvfp4")
#: HBM bytes per element of a cast with its transposed copy: read 2 (bf16), write both
#: layouts with their scales (TE ``cast_transpose``; OCP MX v1.0; arXiv 2509.25149 §2;
#: DeepSeek-V3 arXiv 2412.19437 §3.3.1 for 1×128 / 128×128 FP32 scales).
CAST_BYTES = {"fp8": 4.0, "fp8-block": 2.0 + 2.0 * (1.0 + 4.0 / 128),
              "mxfp8": 2.0 + 2.0 * (1.0 + 1.0 / 32), "nvfp4": 2.0 + 2.0 * (0.5 + 1.0 / 16)}
#: FP8 attention over 16-bit on the same GPU: FlashAttention-3, 1.2 vs 0.74 PFLOP/s on H100
#: (Shah et al. 2024 §4.1).
FP8_ATTENTION_SPEEDUP = 1.2 / 0.74
#: NVFP4 keeps about 15 % of the linear layers in BF16 (arXiv 2509.25149 §4).
NVFP4_BF16_SHARE = 0.15
STRATEGIES = ("full", "grad_op", "optimizer", "none", "hybrid")
FRAMEWORKS = ("fsdp2", "fsdp1", "megatron", "deepspeed-zero3", "nanotron")
#: Eager PyTorch ops per layer (forward, backward): base GPT block and what each switch adds,
#: counted with TorchDispatchMode (fsdpsim.costs.compute.HOST_OPS_*, tests/test_model_torch.py).
OPS_BASE, OPS_EAGER_ATTN, OPS_ROTARY = (41, 79), (20, 21), (8, 16)
OPS_SWIGLU, OPS_RMSNORM, OPS_BIAS = (5, 12), (12, 30), (0, 18)
OPS_DOWN_PROJ = 3  # t, mm, view of the MLP down projection (skipped by early-stop recompute)
#: HBM bytes per logit of the cross-entropy: unfused (upcast, log-softmax, its backward, the
#: cast back: 36) or a fused kernel (4) (fsdpsim.costs.compute.LOSS_BYTES_PER_LOGIT).
LOSS_BYTES, FUSED_LOSS_BYTES = 36.0, 4.0
#: AdamW (foreach, fp32) moves 28 B per local parameter, SGD with momentum 20 B
#: (Loshchilov & Hutter 2019 Alg. 2; torch.optim foreach kernels).
OPTIMIZER_TRAFFIC_BYTES = {"adamw": 28.0, "sgd": 20.0}
#: Optimizer-state bytes per parameter: two fp32 moments (AdamW), one momentum (SGD).
OPTIMIZER_STATE_BYTES = {"adamw": 8.0, "sgd": 4.0}
NCCL_PROTOCOLS = ("ll", "ll128", "simple")
PAT_BASE_S, PAT_PER_RANK_S = 8.0e-6, 2.8e-6  # NCCL tuning.cc PAT latency


# ---------------------------------------------------------------- scope ---------------------
def check_scope(model, system, plan, training) -> None:
    """Raise ConfigError naming the first setting outside this reference's scope."""
    def refuse(what, accepted):
        raise ConfigError(f"fsdpsim.reference covers {accepted}; got {what}")
    if model.engine_unsupported or model.is_moe or model.attention_kind == "mla" \
            or model.mtp_layers or model.qk_norm or set(model.attention_pattern) != {"full"}:
        refuse(f"model {model.name!r} (MoE, MLA, MTP, QK-norm or windowed attention)",
               "dense uniform full-attention models")
    for name in ("ep", "vpp"):
        if getattr(plan, name) != 1:
            refuse(f"{name}={getattr(plan, name)}", f"{name}=1 only")
    if plan.pp > 1 and plan.pp_schedule not in ("gpipe", "1f1b", "zb-h1"):
        refuse(f"pp_schedule {plan.pp_schedule!r}", "pipeline schedules gpipe, 1f1b, zb-h1")
    if plan.gpus_per_node % plan.tp:
        refuse(f"tp={plan.tp} across scale-up domains of {plan.gpus_per_node}",
               "tp dividing gpus_per_node")
    if plan.sharding not in STRATEGIES:
        refuse(f"sharding {plan.sharding!r}", f"sharding {', '.join(STRATEGIES)}")
    from fsdpsim.plan.frameworks import canonical

    framework = canonical(plan.framework)
    if framework not in FRAMEWORKS:
        refuse(f"framework {plan.framework!r}", f"frameworks {', '.join(FRAMEWORKS)}")
    if framework == "megatron" and plan.pp > 1 and plan.sharding == "optimizer":
        refuse("megatron's overlapped parameter gather with pipelining", "pp = 1 with it")
    reduce_dtype = training.reduce_dtype or "fp32"
    if reduce_dtype not in DTYPE_BYTES:
        refuse(f"reduce_dtype {training.reduce_dtype!r}", "reduce dtype bf16, fp16 or fp32")
    from fsdpsim.hardware.system import domain_gpus

    if plan.gpus_per_node not in (system.gpus_per_node, domain_gpus(system, plan.num_gpus)):
        raise ConfigError(f"plan gpus_per_node({plan.gpus_per_node}) != system "
                          f"gpus_per_node({system.gpus_per_node})")
    if training.micro_batch is None or training.recompute is None:
        refuse("an auto micro-batch or recompute", "a given micro_batch and recompute")
    if training.recompute == "op-selective" and len(
            {model.qkv_bias, model.attn_out_bias, model.mlp_bias}) > 1:
        refuse(f"op-selective on {model.name!r} (biases on some linear layers only)",
               "op-selective with biases on every linear layer or none")
    # Dense models: Megatron's ``mlp`` module recompute; the MLA and expert modules have
    # nothing to act on.


# ---------------------------------------------------------------- compute -------------------
def linear_times_s(tokens, n, k, R, W, e, half_flops, half_k):
    """Forward and backward time of y = x·Wᵀ, x: (T × k), W: (n × k) [s].

    Each GEMM is a roofline (Williams et al. 2009) with a tile efficiency k/(k + k_half) in
    its reduction dimension and a Hockney tail n_half/R per kernel (fsdpsim.costs.compute
    ``gemm_time_s``): ``t = max(2·m·n·(k + k_half)/R, e·(mk + kn + mn)/W) + n_half/R``.
    Backward = input gradient (reduces over n) + weight gradient (reduces over T)."""
    traffic_s = e * (tokens * k + n * k + tokens * n) / W   # the three matrices, once
    tail_s = half_flops / R                                  # per-kernel Hockney tail
    fwd = max(2.0 * tokens * n * (k + half_k) / R, traffic_s) + tail_s
    dgrad = max(2.0 * tokens * k * (n + half_k) / R, traffic_s) + tail_s
    wgrad = max(2.0 * n * k * (tokens + half_k) / R, traffic_s) + tail_s
    return fwd, dgrad + wgrad


def layer_compute(m, x):
    """One transformer layer, one micro-batch, one GPU: GEMMs, attention, element-wise work,
    the host floor, and the recompute replay [s] (docs/model.md "Compute")."""
    # One TP rank's widths (Shoeybi et al. 2019 §3): heads, KV (at least one head: fewer KV
    # heads than ranks are replicated), MLP columns split over t; h-sized element-wise work
    # split too with sequence parallelism (Korthikanti et al. 2022 §4.2.2).
    t, e, b, s, T = x["tp"], x["e"], x["b"], x["s"], x["T"]
    h, q, f = m.d_model, m.q_dim / t, m.ffn_size / t
    kv = max(m.kv_dim / t, min(m.head_size, m.kv_dim))
    h_ew = h / t if x["sp"] else h
    swiglu, rotary, flash = m.ffn_kind == "swiglu", m.position == "rotary", x["flash"]
    gemm = lambda n, k: linear_times_s(T, n, k, x["R"], x["W"], e, x["half_flops"],  # noqa: E731
                                       x["half_k"])
    shapes = [(q + 2 * kv, h),                      # fused QKV projection (GQA)
              (h, q),                               # attention output projection
              ((2 if swiglu else 1) * f, h),        # MLP up (and gate: SwiGLU, Shazeer 2020)
              (h, f)]                               # MLP down
    times = [gemm(n, k) for n, k in shapes]
    gemm_fwd = sum(t[0] for t in times)
    gemm_bwd = sum(t[1] for t in times)
    down_fwd = times[-1][0]
    # Attention scores and values: 4·b·s²·q FLOPs forward over the full square; a causal flash
    # kernel computes half (Dao 2023 §3.1) at peak × attention_fraction × n/(n + n_half), n the
    # keys a query tile visits (s/2 causal). Eager attention runs as GEMMs over the full
    # square and reads/writes the s × s scores three times (bandwidth bound). Context
    # parallelism gives each rank 1/c of the (load-balanced causal) work; a ring step's kernel
    # sees one K, V block of s/c keys (Ulysses: the whole sequence for its heads).
    c = x["cp"]
    attn_flops = (0.5 if flash else 1.0) * 4.0 * b * s * s * q / c
    kv_len = (0.5 if flash else 1.0) * s / (1 if x["cp_all2all"] else c)
    half = x["attn_half_kv"] if flash else x["half_k"]
    # The te kernel stack (Megatron-Core) runs cuDNN's fused attention, the others FA2 / SDPA
    fraction = ((x["fused_attn_fraction"] if x["fused_attention"] else x["attn_fraction"])
                if flash else x["matmul_fraction"])
    attn_fwd = attn_flops / (x["peak"] * x["attention_ratio"] * fraction / (1.0 + half / kv_len))
    if not flash:
        attn_fwd += 3.0 * e * b * (m.n_heads / t) * s * s / c / x["W"]
    attn_bwd = (2.5 if flash else 2.0) * attn_fwd  # FlashAttention recomputes the scores
    # Dropout (fused into FlashAttention's kernel): each pass reads its input, writes its
    # output and a 1-byte mask, (2e + 1) bytes per element, on eager attention's probabilities
    # and on the two residual branches (Korthikanti et al. 2022 §4.1).
    drop_bytes = 2.0 * e + 1.0 if x["dropout"] else 0.0
    drop_attn = 0.0 if flash else drop_bytes * b * (m.n_heads / t) * s * s / c / x["W"]
    attn_fwd, attn_bwd = attn_fwd + drop_attn, attn_bwd + drop_attn
    # Element-wise kernels, bytes per token (fsdpsim.costs.compute.layer_elementwise_bytes):
    # forward 2 norms (4h) + 2 residual adds (6h) + activation (2f GELU, 3f SwiGLU) + rotary;
    # backward norms (10h) + residual grads (6h) + activation (3f / 5f) + rotary + bias grads.
    rope = 2.0 * (q + kv) if rotary else 0.0
    bias = m.mlp_bias or m.qkv_bias or m.attn_out_bias
    bias_grads = (q + 2 * kv) + h_ew + (2 if swiglu else 1) * f + h_ew if bias else 0.0
    drop_h = drop_bytes * 2.0 * T * h_ew
    # Low precision casts every GEMM input (h twice, q, f) and the layer's weights forward,
    # every GEMM output gradient backward, each with a transposed copy (TE cast_transpose).
    cast_fwd = cast_bwd = 0.0
    if x["low"]:
        gate = 2.0 if swiglu else 1.0
        cast_fwd = x["cast_scale"] * 4.0 * (T * (2.0 * h + q + f) + x["block_params"] / t)
        cast_bwd = x["cast_scale"] * 4.0 * T * (q + 2.0 * kv + h + gate * f + h)
    ew_fwd = (T * e * (10.0 * h_ew + (3.0 if swiglu else 2.0) * f + rope) + cast_fwd
              + drop_h) / x["W"]
    ew_bwd = (T * e * (16.0 * h_ew + (5.0 if swiglu else 3.0) * f + rope + bias_grads)
              + cast_bwd + drop_h) / x["W"]
    # Host floor: each eager op costs kernel_overhead_s of CPU time; a layer takes at least
    # n_ops × overhead (launch bound).
    switches = ((not flash, OPS_EAGER_ATTN), (rotary, OPS_ROTARY), (swiglu, OPS_SWIGLU),
                (m.norm == "rmsnorm", OPS_RMSNORM), (bias, OPS_BIAS))
    ops_fwd = OPS_BASE[0] + sum(o[0] for on, o in switches if on)
    ops_bwd = OPS_BASE[1] + sum(o[1] for on, o in switches if on)
    # CUDA graphs replay the captured layer without the host: no launch floor.
    ko = 0.0 if x["cuda_graphs"] else x["kernel_overhead_s"]
    block_fwd = max(gemm_fwd + attn_fwd + ew_fwd, ops_fwd * ko)
    block_bwd = max(gemm_bwd + attn_bwd + ew_bwd, ops_bwd * ko)
    # Recompute (Korthikanti et al. 2022 §5): full replays the forward, less the MLP down
    # projection torch's non-reentrant checkpoint never needs (early stop, torch >= 2.1;
    # Megatron's reentrant CheckpointFunction replays it too); selective replays the
    # attention core only.
    early_stop = 0.0 if x["megatron"] else 1.0
    # torchtitan's op-level selective checkpoint (torchtitan distributed/activation_checkpoint.py
    # SelectiveAC, early_stop=False): the matmuls called 2nd, 4th, 6th in the block (wk, wo,
    # then w3 of w2(silu(w1 x) * w3 x), or GELU's down) run again with every element-wise
    # kernel; the saved matmuls (3 host ops each) and the attention kernel (1) are not launched.
    # A biased linear runs as aten.addmm: saved, and not counted among the matmuls.
    again = [] if bias else [(kv, h), (h, q), (f, h) if swiglu else (h, f)]
    n_saved = (7 if swiglu else 6) - len(again)
    cached_ops = n_saved * OPS_DOWN_PROJ + 1
    op_selective = max(sum(gemm(n, k)[0] for n, k in again) + ew_fwd,
                       (ops_fwd - cached_ops) * ko)
    recompute = {"none": 0.0, "selective": attn_fwd,
                 "full": max(gemm_fwd + attn_fwd + ew_fwd - early_stop * down_fwd,
                             (ops_fwd - early_stop * OPS_DOWN_PROJ) * ko),
                 "op-selective": op_selective}[x["recompute"]]
    # Megatron's ``mlp`` module recompute (transformer_layer.py, CheckpointWithoutOutput around
    # the MLP; moot under full recompute): the MLP forward again in backward, its up (and
    # gate) and down GEMMs and the activation's traffic (SwiGLU reads 2f, writes f; GELU f, f).
    if x["rc_mlp"] and x["recompute"] != "full":
        recompute += times[2][0] + down_fwd + T * f * (3.0 if swiglu else 2.0) * e / x["W"]
    return {"gemm_fwd_s": gemm_fwd, "gemm_bwd_s": gemm_bwd, "attn_fwd_s": attn_fwd,
            "attn_bwd_s": attn_bwd, "ew_fwd_s": ew_fwd, "ew_bwd_s": ew_bwd,
            "block_fwd_s": block_fwd, "block_bwd_s": block_bwd, "recompute_s": recompute}


def root_compute(m, x):
    """Embedding lookup, LM head and loss for one micro-batch [s]: the head's GEMMs as a
    linear layer (T × h)·(h × V); the loss bandwidth bound (40 % of its bytes in forward:
    upcast and log-softmax, 14 of 36 B/logit); the embedding reads and writes T·h. With TP
    the (padded) vocabulary is split over the ranks (vocab-parallel head and loss)."""
    T, V, h, e, W = x["T"], x["vocab"] / x["tp"], m.d_model, x["e"], x["W"]
    R_head = x["R"] * x["lm_head_ratio"]          # 16-bit unless fp8_lm_head
    head_fwd, head_bwd = linear_times_s(T, V, h, R_head, W, e, x["half_flops"], x["half_k"])
    loss = T * V * (FUSED_LOSS_BYTES if x["fused_loss"] else LOSS_BYTES) / W
    embed = 2.0 * T * h * e / W
    return {"head_gemm_s": head_fwd, "head_gemm_bwd_s": head_bwd, "loss_s": loss,
            "embed_s": embed,
            "root_fwd_s": head_fwd + 0.4 * loss + embed,
            "root_bwd_s": head_bwd + 0.6 * loss + 2.0 * embed}   # embedding grad: scatter-add


# ---------------------------------------------------------------- NCCL ----------------------
def bus_bandwidth(x, n, per_node, per_pod=None):
    """Large-message bus bandwidth of a ring over n ranks, ``per_node`` of them per domain
    [B/s]: the scale-up link inside one domain; across domains the node's NIC share
    (``per_node`` × NIC share × fabric decay), capped by the link (fsdpsim.costs.comm), and
    for a group spanning the pods of an oversubscribed fabric (``per_pod`` < n members in
    one pod) the uplinks' share: each pod carries pod/per_pod such rings, each needing
    2·per_node NIC rates of uplink, against pod/oversubscription (fsdpsim.costs.nccl
    ``pod_factor``; Dubey et al. 2024 §3.3.1)."""
    g = min(per_node, n)
    link = x["link"]
    if x["mesh"]:
        # A switchless mesh (DGX-1 cube-mesh, MI300X Infinity Fabric): g of the D GPUs reach
        # only (g − 1)/(D − 1) of each GPU's links, never less than one peer link (NVIDIA
        # DGX-1 System Architecture whitepaper).
        domain = max(x["gpus_per_node"], 2)
        share = (min(g, domain) - 1) / (domain - 1)
        link = link * min(max(share, x["per_peer_link"] / x["link_raw"]), 1.0)
    if n <= g:
        return link
    nodes = math.ceil(n / max(g, 1))
    # Fabric decay with node count (NVIDIA/nccl#1229), per network class in the catalog.
    lost = x["decay"] * math.log2(max(nodes / x["decay_from"], 1.0))
    fabric = max(x["decay_floor"], 1.0 - lost) * x["placement_factor"]
    if per_pod is not None and per_pod < n:
        fabric *= min(1.0, per_pod / (2.0 * x["oversubscription"] * max(g, 1)))
    intra = link if g > 1 else math.inf
    return min(intra, g * x["nic"] * fabric)


def nccl_time_s(x, message_bytes, n, per_node, all_reduce=False, per_pod=None):
    """One NCCL collective on M bytes over n ranks: the least over NCCL's (algorithm,
    protocol) pairs of ``latency + M · share / bandwidth`` (NCCL src/graph/tuning.cc
    ``ncclTopoTuneModel``; constants from the catalog's library; fsdpsim.costs.nccl).

    A bus bandwidth the user measured (nccl-tests' busbw, ``--busbw-*-gbs``) replaces the
    modelled one for its kind and tier: all-reduce inside one domain or across domains,
    all-gather / reduce-scatter across domains. With both of the latter pinned, the ring
    collectives (priced alike) take the bandwidth at which an all-gather and a
    reduce-scatter of M bytes last as long as the two measured ones together:
    ``2 / (1/B_ag + 1/B_rs)``."""
    if n <= 1:
        return 0.0
    lib = x["nccl"]
    ppn = min(per_node, n)
    nodes = max(math.ceil(n / max(ppn, 1)), 1)
    multi = nodes > 1
    pins = x["busbw_pins"]
    if all_reduce:
        pin = pins.get("busbw_allreduce_inter_gbs" if multi else "busbw_allreduce_intra_gbs")
    else:
        ring = [pins[k] for k in ("busbw_allgather_inter_gbs", "busbw_reducescatter_inter_gbs")
                if k in pins]
        pin = len(ring) / sum(1.0 / v for v in ring) if ring and multi else None
    busbw = bus_bandwidth(x, n, per_node, per_pod) if pin is None else pin
    passes = 2.0 if all_reduce else 1.0
    steps = passes * (n - 1)                 # ring steps: n − 1, twice for all-reduce
    inter = passes * (nodes - 1)             # of which cross nodes
    share = steps / n                        # (n−1)/n of M per rank (nccl-tests busbw)
    ll_max = lib.ll_max_bytes_per_s[0 if nodes <= 1 else 1 if nodes <= 2 else 2]
    ll128_cap = ppn * lib.ll128_channel_bytes_per_s if multi else math.inf
    hop_kind = "nvlink" if x["nvlink"] else "pci"
    lat = lambda p, k: lib.latency_us[p][f"{k}_us"] * 1e-6  # noqa: E731
    best = math.inf
    for p in NCCL_PROTOCOLS:
        hop = lat(p, f"ring_{hop_kind}_hop")
        if p == "ll" and multi:
            hop *= lib.ll_multi_node_hop_factor
        overhead = lib.net_overhead_s * (3.0 if p == "simple" else 1.0)
        intra = max(hop, overhead if multi else 0.0)
        latency = lat(p, "ring_base") + (steps - inter) * intra + inter * lat(p, "ring_net_hop")
        bw = {"simple": busbw,
              "ll128": min(busbw * lib.ll128_bandwidth_fraction, ll128_cap),
              "ll": min(ll_max, busbw * lib.ll_bandwidth_fraction)}[p]
        best = min(best, message_bytes * share / bw + latency)
    if all_reduce and multi:  # tree: up and down a log2(nodes)-deep tree, 2·M/bw
        tree_cap = ppn * lib.tree_channel_bytes_per_s
        for p in NCCL_PROTOCOLS:
            latency = lat(p, "tree_base") + 2.0 * ((ppn - 1) * lat(p, f"tree_{hop_kind}_hop")
                                                   + math.log2(nodes) * lat(p, "tree_net_hop"))
            bw = {"simple": min(busbw * lib.tree_bandwidth_fraction, tree_cap),
                  "ll128": min(busbw * 120.0 / 128.0, ll128_cap),
                  "ll": min(ll_max, busbw / 3.8)}[p]
            best = min(best, message_bytes * 2.0 / bw + latency)
    elif not all_reduce and lib.pat and multi and ppn <= 1:  # PAT, one GPU per node
        latency = (PAT_BASE_S + math.log2(nodes) * lat("simple", "tree_net_hop") / 3.5
                   + PAT_PER_RANK_S * n)
        best = min(best, message_bytes * share / (0.75 * busbw) + latency)
    return best


def tensor_parallel_s(m, x, tp_per_node, tp_per_pod):
    """Tensor-parallel collectives per micro-batch over the TP group [s]: (layer forward,
    layer backward, root forward + backward), Megatron's operators (Shoeybi et al. 2019 §3
    f and g; Korthikanti et al. 2022 §4.2.2 with sequence parallelism), m = T·h·e bytes each:

    * layer, no SP: forward 2 all-reduces (after attention and MLP), backward 2 (fused QKV
      and gate/up input gradients); SP: forward 2 all-gathers + 2 reduce-scatters, backward 2
      reduce-scatters + 4 all-gathers (the block inputs gathered again for the weight grads);
    * root: the embedding (no SP: all-reduce; SP: reduce-scatter, and an all-gather back),
      the LM head (no SP: its input gradient all-reduced; SP: input all-gathered, gradient
      reduce-scattered and input re-gathered), and the vocab-parallel loss's three per-token
      fp32 all-reduces (max, target logit, sum-exp: 12 B per token in all).

    Calls of one kind and size in one pass are charged together; the no-SP forward root's
    all-reduces differ in size (one of m bytes, three of 4·T) and each is costed on its own,
    as NCCL picks an algorithm per call: t(m) + 3·t(4T)."""
    t, T = x["tp"], x["T"]
    msg = T * m.d_model * x["e"]
    loss_bytes = T * 12.0
    def ar(total, calls):
        return calls * nccl_time_s(x, total / calls, t, tp_per_node, True, tp_per_pod)

    def ring(total, calls):
        return calls * nccl_time_s(x, total / calls, t, tp_per_node, False, tp_per_pod)

    if x["sp"]:
        fwd = ring(2 * msg, 2) + ring(2 * msg, 2)                     # g, ḡ
        bwd = ring(2 * msg, 2) + ring(4 * msg, 4)                     # g', ḡ' + re-gather
        root = (ar(loss_bytes, 3) + ring(msg, 1) + ring(msg, 1)        # loss; embed RS; head AG
                + ring(2 * msg, 2) + ring(msg, 1))                    # bwd AG x2; head RS
    else:
        fwd, bwd = ar(2 * msg, 2), ar(2 * msg, 2)
        root = ar(msg, 1) + ar(loss_bytes, 3) + ar(msg, 1)            # embed; loss; head grad
    return fwd, bwd, root


def context_parallel_s(m, x, cp_per_node):
    """Context-parallel communication of one layer per micro-batch [s]: (forward, backward).

    Ring attention (Liu et al. 2023 §3; TransformerEngine ``AttnFuncWithCPAndKVP2P``): the
    rank's K and V block, kv = 2·T·kv_dim/t·e bytes, travels c − 1 hops forward; backward K, V
    and their gradients travel c − 1 hops each, packed into the same sends. Each hop is a
    send/recv to the ring neighbour over the link (inside a domain) or the NIC share.
    Ulysses (Jacobs et al. 2023 §3.1): q, k, v all-to-all before attention and the output
    after, the reverse in backward: 4 calls of T·(2q + 2kv)/t·e bytes in all, each rank
    sending (g − 1)/c of them over the link and (c − g)/c over its NIC at once."""
    c, t, T, e = x["cp"], x["tp"], x["T"], x["e"]
    inside = cp_per_node >= c
    if not x["cp_all2all"]:
        per_byte = 1.0 / (x["link"] if inside else x["nic"])
        latency = x["link_latency_s"] if inside else x["nic_latency_s"]
        kv = 2.0 * T * m.kv_dim / t * e
        hops = c - 1
        return hops * kv * per_byte + hops * latency, 2.0 * hops * kv * per_byte + hops * latency
    g = min(cp_per_node, c)
    per_byte = max((g - 1) / c / x["link"], (c - g) / c / x["nic"] if c > g else 0.0)
    latency = (c - 1) * (x["nic_latency_s"] if c > g else x["link_latency_s"])
    total = T * (2.0 * m.q_dim + 2.0 * m.kv_dim) / t * e
    one_pass = total * per_byte + 4.0 * latency
    return one_pass, one_pass


# ---------------------------------------------------------------- inputs --------------------
def members_per_domain(dims, domain_gpus):
    """Ranks of rank 0's group that sit in the first scale-up domain of ``domain_gpus``
    consecutive ranks; the group spans ``(degree, stride)`` dimensions of the row-major
    device mesh (fsdpsim.plan.layout)."""
    ranks = [0]
    for degree, stride in dims:
        ranks = [r + c * stride for r in ranks for c in range(degree)]
    return sum(r < domain_gpus for r in ranks)


def tp_local_shapes(shapes, tp, vocab_size, padded_vocab):
    """One TP rank's parameter shapes (Shoeybi et al. 2019 §3): column-parallel q, k, v,
    gate, up (weights and biases) split dim 0; row-parallel o and down weights split dim 1
    (their biases whole); the embedding and LM head split the padded vocabulary; norms and
    learned positions whole."""
    out = []
    for name, shape in shapes:
        if tp > 1 and name.startswith(("tok_emb", "lm_head")) and shape[0] == vocab_size:
            shape = (padded_vocab,) + tuple(shape[1:])
        leaf = name.split(".")[-2] if "." in name else name
        dim = (0 if leaf in ("q", "k", "v", "gate", "up", "tok_emb", "lm_head") else
               1 if leaf in ("o", "down") and name.endswith("weight") else None)
        if tp > 1 and dim is not None:
            if shape[dim] % tp:
                raise ConfigError(f"{name} {shape}: dim {dim} ({shape[dim]}) % tp({tp}) != 0; "
                                  "accepted: tp dividing it")
            shape = shape[:dim] + (shape[dim] // tp,) + shape[dim + 1:]
        out.append((name, shape))
    return out


def padded_numel(shapes, shard, flat=False):
    """Elements of one FSDP unit sharded ``shard`` ways: FSDP2 pads every parameter's dim 0
    to a multiple of the shard count (torch ``_fsdp_param.py``); FSDP1 (``flat``) flattens
    the unit into one FlatParameter and pads it once (torch ``_flat_param.py``)."""
    if flat:
        return float(math.ceil(sum(math.prod(sh) for _, sh in shapes) / shard) * shard)
    return float(sum(math.ceil((sh[0] if sh else 1) / shard) * shard
                     * math.prod(sh[1:]) for _, sh in shapes))


def gemm_peak_flops_per_s(acc, precision, bf16_layers, n_layers):
    """Dense peak of the linear layers' GEMMs [FLOP/s]: the catalog's peak for the format
    (fp8-block at FP8's; MXFP8 at FP8's on parts with microscaling tensor cores, those with
    an FP4 peak; NVFP4 at FP4's on NVIDIA), blended with the 16-bit peak for the share s of
    linear layers kept in BF16 (``bf16_layers`` / L; NVFP4's default 15 %):
    ``1 / ((1 − s)/P_format + s/P_bf16)`` (GEMM time of alike layers)."""
    peaks = acc.peak_flops_per_s
    sixteen = peaks.get("bf16") or peaks.get("fp16")
    if bf16_layers is not None and bf16_layers > n_layers:
        raise ConfigError(f"bf16_layers {bf16_layers} exceeds the model's {n_layers} layers; "
                          f"accepted: 0 to {n_layers}")
    if precision == "fp8-block":
        peak = acc.peak_for("fp8")
    elif precision == "mxfp8" and "mxfp8" not in peaks:
        if "fp4" not in peaks or "fp8" not in peaks:
            raise ConfigError(f"precision 'mxfp8' needs microscaling tensor cores; {acc.id} has: "
                              f"{', '.join(sorted(peaks))}")
        peak = peaks["fp8"]
    elif precision == "nvfp4":
        peak = peaks.get("nvfp4") or peaks.get("fp4")
        if peak is None or sixteen is None or acc.vendor.lower() != "nvidia":
            raise ConfigError(f"precision 'nvfp4' needs NVIDIA Blackwell FP4 tensor cores; "
                              f"{acc.id} has: {', '.join(sorted(peaks))}")
    else:
        peak = acc.peak_for(precision)
    share = ((NVFP4_BF16_SHARE if precision == "nvfp4" else 0.0) if bf16_layers is None
             else bf16_layers / n_layers)
    if share <= 0.0 or sixteen is None or precision not in LOW_PRECISION:
        return peak
    return 1.0 / ((1.0 - share) / peak + share / sixteen)


def _rates(model, system, plan, training):
    """The catalog's rates and constants this reference reads, in SI units."""
    from fsdpsim.hardware.system import FRAGMENTED_FACTOR
    from fsdpsim.plan.frameworks import PROFILES, canonical, profile

    from fsdpsim.hardware.efficiency import resolve

    acc, eff, link, net = system.accelerator, system.accelerator.efficiency, system.link, \
        system.network
    # The GEMM and attention fractions of this GPU x precision class x the profile's kernel
    # stack (the catalog's [efficiency.<class>.<stack>] table, else the nearest stack's, else
    # the fallback; outside Transformer Engine the fused-attention fraction is FlashAttention's).
    stack = profile(plan.framework).kernel_stack
    fractions = resolve(acc, training.precision, stack).values
    lib = system.collectives.get(profile(plan.framework).collectives)
    if lib is None:  # the built-in catalog's release of the default profile
        from fsdpsim.hardware.catalog import load_catalog
        lib = load_catalog(use_env=False).collectives(PROFILES["fsdp2"].collectives)
    precision, peaks = training.precision, acc.peak_flops_per_s
    sixteen = peaks.get("bf16") or peaks.get("fp16")
    low = precision in LOW_PRECISION and sixteen is not None
    gemm_peak = gemm_peak_flops_per_s(acc, precision, training.bf16_layers, model.n_layers)
    peak = gemm_peak * system.compute_clock_ratio   # a power cap lowers the clock
    # MFU against the 16-bit dense peak for low-precision training (as published tables
    # state it); attention and the LM head stay in 16 bits unless switched to FP8.
    fp8_attention = min(sixteen * FP8_ATTENTION_SPEEDUP, peaks.get("fp8", sixteen)) if low else 0
    return {
        "peak_nominal": sixteen if low else acc.peak_for(precision), "gemm_peak": gemm_peak,
        "peak": peak, "low": precision in LOW_PRECISION,
        "attention_ratio": ((fp8_attention if training.fp8_attention else sixteen) / gemm_peak
                            if low else 1.0),
        "lm_head_ratio": 1.0 if not low or training.fp8_lm_head else sixteen / gemm_peak,
        "cast_scale": CAST_BYTES.get(precision, 4.0) / CAST_BYTES["fp8"],
        "R": peak * fractions["matmul_fraction"],
        "matmul_fraction": fractions["matmul_fraction"],
        "half_flops": eff.matmul_half_flops, "half_k": eff.matmul_half_k,
        "attn_fraction": fractions["attention_fraction"], "attn_half_kv": eff.attention_half_kv,
        "fused_attn_fraction": fractions["fused_attention_fraction"],
        "fused_attention": stack == "te",
        "megatron": profile(plan.framework).recipe == "megatron",
        "param_gather_overlap": canonical(plan.framework) == "megatron",
        "W": acc.hbm_bandwidth_bytes_per_s * eff.hbm_fraction,
        "link": link.bandwidth_bytes_per_s * eff.link_fraction,
        "nic": system.inter_node_bandwidth_bytes_per_s_per_gpu * system.inter_node_fraction,
        "nvlink": link.topology != "pcie", "mesh": link.topology == "mesh",
        "link_latency_s": link.latency_s, "nic_latency_s": system.inter_node_latency_s,
        "link_raw": link.bandwidth_bytes_per_s, "gpus_per_node": plan.gpus_per_node,
        "per_peer_link": link.per_peer_bandwidth_bytes_per_s or link.bandwidth_bytes_per_s,
        "decay": net.scale_decay_per_doubling if net else 0.0,
        "decay_from": net.scale_decay_from_nodes if net else 4.0,
        "decay_floor": net.scale_decay_floor if net else 1.0,
        "placement_factor": FRAGMENTED_FACTOR if system.placement == "fragmented" else 1.0,
        "kernel_overhead_s": eff.kernel_overhead_s, "sigma": eff.comm_compute_slowdown,
        "nccl": lib, "memory_bytes": acc.memory_bytes,
        "busbw_pins": dict(system.measured_busbw),      # [B/s] by BUSBW_COLUMNS name
        # an fp32 gradient accumulation pass after each backward (nanotron), bytes/parameter
        "accum_pass_bytes": profile(plan.framework).grad_accum_pass_bytes,
        # DDP buckets of 16-bit gradients, one reduction call each; ZeRO-1's reduce-scatter
        # beside the backward or after it (nanotron)
        "bucket_bytes": profile(plan.framework).grad_bucket_bytes,
        "zero1_overlap": profile(plan.framework).zero1_reduce_overlap,
        "flat_parameter": profile(plan.framework).flat_parameter,   # FSDP1's padding
        "reserved_bytes": acc.runtime_reserved_bytes,
        "allocator_fraction": acc.allocator_fraction,
    }


# ---------------------------------------------------------------- overlap -------------------
def slowed_s(compute_s, comm_s, sigma):
    """Compute beside NCCL kernels is slowed in proportion to the overlapped time:
    ``f · (1 + σ · min(1, c/f))`` (Rashidi et al. 2021 ISCA §2; fsdpsim.costs.overlap)."""
    return compute_s + sigma * min(comm_s, compute_s) if compute_s > 0 else 0.0


def pipelined_s(first_comm_s, comm_s, compute_s, n_units, last_comm_s, sigma):
    """FSDP's two-stream pipeline over n identical units (Zhao et al. 2023 §3.3): the first
    collective exposed, then n − 1 times the slower of (slowed compute, next collective), the
    last unit's compute, and its own trailing collective:
    ``c_first + (n − 1)·max(f', c) + f + c_last``."""
    return (first_comm_s + max(n_units - 1, 0) * max(slowed_s(compute_s, comm_s, sigma), comm_s)
            + compute_s + last_comm_s)


def schedule_orders(schedule, p, m):
    """Every stage's actions in order: forwards F, backwards B and, for ZB-H1, weight-gradient
    passes W. GPipe runs all forwards then all backwards (Huang et al. 2019); 1F1B runs
    min(p − j − 1, m) warm-up forwards on stage j, then alternates a forward and a backward,
    then drains (Narayanan et al. SC21 §2.2.1); ZB-H1 is 1F1B with each backward split into B
    and W, stage j's W running j backwards late and the owed ones at the end (Qi et al. 2024
    §2.1; torch 2.13 ``ScheduleZBVZeroBubble`` orders, fsdpsim.costs.schedule)."""
    if schedule == "gpipe":
        return [[("F", i) for i in range(m)] + [("B", i) for i in range(m)] for _ in range(p)]
    orders = []
    for j in range(p):
        warm = min(p - j - 1, m)
        order = [("F", i) for i in range(warm)]
        for i in range(m):
            if warm + i < m:
                order.append(("F", warm + i))
            order.append(("B", i))
            if schedule == "zb-h1" and i >= j:
                order.append(("W", i - j))
        if schedule == "zb-h1":
            order += [("W", i) for i in range(max(m - j, 0), m)]
        orders.append(order)
    return orders


def pipeline_makespan_s(schedule, fwd_s, bwd_s, wgrad_s, n_microbatches, p2p_s):
    """Makespan of one step's pipeline [s], by running the schedule (:func:`schedule_orders`):
    an action starts when its stage is free and its input has arrived: a forward after the
    previous stage's forward of the same micro-batch plus one transfer, a backward after the
    next stage's backward plus one transfer (the last stage's after its own forward), a W
    after its own B. ``fwd_s``, ``bwd_s``, ``wgrad_s``: per stage."""
    p = len(fwd_s)
    orders = schedule_orders(schedule, p, n_microbatches)
    took = {"F": fwd_s, "B": bwd_s, "W": wgrad_s}
    done, free, nxt = {}, [0.0] * p, [0] * p
    while any(nxt[j] < len(orders[j]) for j in range(p)):
        for j in range(p):
            while nxt[j] < len(orders[j]):
                kind, i = orders[j][nxt[j]]
                dep = ((kind, j - 1, i) if kind == "F" and j > 0 else
                       ("B", j + 1, i) if kind == "B" and j < p - 1 else None)
                if dep is not None and dep not in done:
                    break                                 # its input has not arrived yet
                ready = 0.0 if dep is None else done[dep] + p2p_s
                start = max(free[j], ready)
                free[j] = done[(kind, j, i)] = start + took[kind][j]
                nxt[j] += 1
    return max(free)


# ---------------------------------------------------------------- memory --------------------
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


# ---------------------------------------------------------------- the step ------------------
def predict(model, system, plan, training) -> dict[str, float]:
    """One training step of one configuration (module docstring for the scope) [SI units].

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
    x = _rates(model, system, plan, training)
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
