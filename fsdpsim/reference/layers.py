"""Compute time of one transformer layer and of the root (embedding, LM head, loss) for one
micro-batch on one GPU [s]: GEMM rooflines, attention, element-wise traffic, the host launch
floor and the recompute replay."""

from __future__ import annotations

#: Eager PyTorch ops per layer (forward, backward): base GPT block and what each switch adds,
#: counted with TorchDispatchMode (fsdpsim.costs.compute.HOST_OPS_*, tests/test_model_torch.py).
OPS_BASE, OPS_EAGER_ATTN, OPS_ROTARY = (41, 79), (20, 21), (8, 16)
OPS_SWIGLU, OPS_RMSNORM, OPS_BIAS = (5, 12), (12, 30), (0, 18)
OPS_DOWN_PROJ = 3  # t, mm, view of the MLP down projection (skipped by early-stop recompute)
#: HBM bytes per logit of the cross-entropy: unfused (upcast, log-softmax, its backward, the
#: cast back: 36) or a fused kernel (4) (fsdpsim.costs.compute.LOSS_BYTES_PER_LOGIT).
LOSS_BYTES, FUSED_LOSS_BYTES = 36.0, 4.0


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
    # One TP rank's widths (Shoeybi et al. 2019 §3): heads, KV (whole heads: t divides
    # them), MLP columns split over t; h-sized element-wise work split too with sequence
    # parallelism (Korthikanti et al. 2022 §4.2.2).
    t, e, b, s, T = x["tp"], x["e"], x["b"], x["s"], x["T"]
    h, q, f, kv = m.d_model, m.q_dim / t, m.ffn_size / t, m.kv_dim / t
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

