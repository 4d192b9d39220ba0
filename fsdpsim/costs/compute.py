"""Compute: FLOPs of every matmul and the time the GPU needs for them and for memory-bound work.

All functions are pure and vectorised: arguments may be Python numbers or numpy arrays that
broadcast together; results are numpy arrays (0-d for scalar inputs).

FLOP conventions (stated once, used everywhere)
------------------------------------------------
* A matmul of an (m × k) by a (k × n) matrix costs 2·m·n·k FLOPs (one multiply and one add).
* Backward of a linear layer = 2 × its forward (input gradient + weight gradient).
* **Model FLOPs** (for MFU) follow PaLM (Chowdhery et al. 2022, App. B): every weight matmul,
  the LM head included, forward + backward = 6·N_mm·T, plus attention scores and values over
  the full s × s square, 12·L·s·q_dim per token. No recompute, no causal discount. This is what
  published MFU figures (MosaicML, Megatron) count and what ``torch.utils.flop_counter`` reports
  for a model with manual attention.
* **Hardware FLOPs** (for HFU) count attention the same way (the full square) and add what runs
  again: FlashAttention's backward costs 2.5 × its forward (it recomputes the scores; five
  matmuls against the forward's two), and activation checkpointing adds one more forward of each
  recomputed layer (Korthikanti et al. 2022, arXiv 2205.05198 §5). So HFU >= MFU.
* **Time** follows what the kernels do: causal FlashAttention computes only the lower triangle
  (half the square; Dao 2023, arXiv 2307.08691 §3.1).

Time model
----------
* A GEMM runs at ``min(compute roof, memory roof)`` (roofline, Williams et al. 2009), its
  compute rate scaled by a tile efficiency ``k / (k + k_half)`` in the reduction dimension and
  with a fixed per-kernel tail that sets the half-performance size ``n_1/2`` (Hockney 1988):
  ``t = max(F / (R·k/(k + k_half)), B / W) + n_half / R`` where R = dense peak × achievable
  matmul fraction and W = HBM bandwidth × achievable fraction (:func:`gemm_time_s`).
* Attention runs at ``peak × attention_fraction`` (a catalog value per GPU type and kernel).
* Element-wise work (norms, activations, residual adds, rotary, casts, loss, optimizer) is
  bandwidth bound: bytes / W.
* The host issues the work: every eager PyTorch op costs ``kernel_overhead_s`` of CPU time
  (Python, dispatcher, autograd, launch), and a layer takes at least ``n_ops ×
  kernel_overhead_s`` (:func:`host_ops_per_layer`; small models at small batch are host bound).
"""

from __future__ import annotations

import numpy as np

from fsdpsim.costs.arrays import (  # noqa: F401  (re-exported: the cost functions' helpers)
    NUMBER_TYPES,
    all_of,
    any_of,
    as_array,
    as_values,
    broadcast_shape,
    filled_ids,
    maximum,
    may_be_shared,
    minimum,
    one_flag,
    share_sides,
    where,
)

_FLOAT64 = np.dtype(np.float64)

#: Host-side operations per transformer layer in eager PyTorch: every aten op the dispatcher
#: runs (GEMMs, element-wise kernels, views, casts), (forward, backward). Counted with
#: TorchDispatchMode on fsdpsim.measured.harness.reference's block, torch 2.13
#: (tests/test_model_torch.py counts them again): a GPT block with LayerNorm, GELU, fused (SDPA)
#: attention and no linear biases is 41 forward, 79 backward; each switch adds its measured ops.
#: Rotary embeddings with precomputed frequencies (q and k: view, complex multiply, view back)
#: are an estimate: the reference computes its frequencies on every call.
HOST_OPS_BASE = (41, 79)
HOST_OPS_LINEAR_BIAS = (0, 18)
HOST_OPS_EAGER_ATTENTION = (20, 21)
HOST_OPS_SWIGLU = (5, 12)
HOST_OPS_RMSNORM = (12, 30)
HOST_OPS_ROTARY = (8, 16)
#: The MLP down projection's forward ops (t, mm, view), skipped by torch's early-stop recompute.
HOST_OPS_DOWN_PROJECTION = 3


# -- FLOPs ---------------------------------------------------------------------------------------
def layer_gemm_shapes(d_model, q_dim, kv_dim, ffn_size, swiglu, active_experts=1):
    """The (n, k) weight shapes of one layer's GEMMs, as a list of (n, k, multiplicity).

    Each entry is multiplied by m = tokens at call time. QKV is one fused GEMM of width
    q_dim + 2·kv_dim (GQA: Ainslie et al. 2023); the SwiGLU MLP has gate and up of width
    ffn_size (Shazeer 2020), the GELU MLP one up projection (Vaswani et al. 2017).
    ``active_experts`` repeats the MLP for mixture-of-experts top-k routing (Fedus et al. 2022).
    """
    d = as_array(d_model)
    up_width = where(swiglu, 2.0, 1.0) * as_array(ffn_size)
    return [
        (as_array(q_dim) + 2.0 * as_array(kv_dim), d, 1.0),   # fused QKV projection
        (d, as_array(q_dim), 1.0),                          # attention output projection
        (up_width, d, as_array(active_experts)),            # MLP up (and gate)
        (d, as_array(ffn_size), as_array(active_experts)),  # MLP down
    ]


def layer_matmul_flops_fwd(tokens, d_model, q_dim, kv_dim, ffn_size, swiglu, active_experts=1):
    """Forward FLOPs of one layer's weight matmuls [FLOP]: 2·T·Σ n·k.

    Parameters
    ----------
    tokens : tokens in the micro-batch, b·s [-]
    d_model, q_dim, kv_dim, ffn_size : layer widths [-]
    swiglu : True for a gated (3-matrix) MLP [-]
    """
    t = as_array(tokens)
    return sum(2.0 * t * n * k * mult for n, k, mult in
               layer_gemm_shapes(d_model, q_dim, kv_dim, ffn_size, swiglu, active_experts))


def attention_flops_fwd(micro_batch, seq_len, q_dim, causal=True):
    """Forward FLOPs of attention scores (Q·Kᵀ) and values (P·V) of one layer [FLOP].

    Two matmuls of 2·b·s²·q_dim each: 4·b·s²·q_dim over the full square (PaLM App. B:
    12·L·H·Q·T per token for forward+backward). A causal kernel skips the upper triangle:
    half of it (FlashAttention-2, Dao 2023 §3.1).
    """
    return attention_flops_fwd_of_queries(as_array(micro_batch) * as_array(seq_len), seq_len,
                                          q_dim, causal)


def attention_flops_fwd_of_queries(queries, keys, q_dim, causal=True):
    """Forward FLOPs of attention of ``queries`` query tokens, each against ``keys`` keys
    (one rank's share of the queries under context parallelism, the whole sequence's keys)
    [FLOP]: 4·queries·keys·q_dim over the full square (:func:`attention_flops_fwd`), half of
    it with a causal kernel (FlashAttention-2, Dao 2023 §3.1).
    """
    full = 4.0 * as_array(queries) * as_array(keys) * as_array(q_dim)
    return where(causal, 0.5, 1.0) * full


def lm_head_flops_fwd(tokens, d_model, vocab_size):
    """Forward FLOPs of the output projection to the vocabulary [FLOP]: 2·T·d·V."""
    return 2.0 * as_array(tokens) * as_array(d_model) * as_array(vocab_size)


def model_flops_per_token(matmul_params, n_layers, seq_len, q_dim):
    """PaLM model FLOPs per token for forward + backward [FLOP/token].

    6·N_mm + 12·L·s·q_dim (Chowdhery et al. 2022, App. B), where N_mm counts every weight used in
    a matmul (LM head included; embeddings lookups, norms and biases excluded).
    """
    return (6.0 * as_array(matmul_params)
            + 12.0 * as_array(n_layers) * as_array(seq_len) * as_array(q_dim))


# -- time ---------------------------------------------------------------------------------------
def gemm_time_s(m, n, k, matmul_flops_per_s, hbm_bytes_per_s, half_flops, half_k,
                elem_bytes=2.0):
    """Time of one (m × k)·(k × n) GEMM [s]: roofline, tile efficiency and Hockney tail.

    ``t = max(2mnk / (R · k/(k + k_half)), elem·(mk + kn + mn) / W) + n_half / R``

    * roofline: the GEMM is bound by compute or by its operand traffic (Williams et al. 2009);
    * tile efficiency: each output tile runs a main loop over the reduction dimension k plus a
      fixed prologue/epilogue worth ``k_half`` iterations, so the compute rate is
      ``R · k / (k + k_half)`` (Hockney 1988's r_inf, n_1/2 law applied to the tile loop; the
      reason small-width models run their GEMMs below peak);
    * Hockney tail: a fixed launch/wave-quantisation time ``n_half / R`` per kernel.

    R and W are achievable rates [FLOP/s, B/s]; ``half_flops`` [FLOP], ``half_k`` [-].
    """
    inv_r = 1.0 / as_array(matmul_flops_per_s)
    return _gemm_time_s(as_array(m), as_array(n), as_array(k), inv_r,
                        1.0 / as_array(hbm_bytes_per_s), as_array(half_flops) * inv_r,
                        as_array(half_k), elem_bytes)


def _gemm_time_s(m, n, k, inv_r, inv_w, tail_s, half_k, elem_bytes):
    """:func:`gemm_time_s` with the rate-only terms precomputed (1/R, 1/W, n_half/R).

    ``flops / (R · k/(k + k_half)) = 2mn·(k + k_half) / R`` (finite at k = inf).
    """
    compute_s = 2.0 * m * n * (k + half_k) * inv_r
    memory_s = elem_bytes * (m * k + k * n + m * n) * inv_w
    return np.maximum(compute_s, memory_s) + tail_s


def linear_time_s(tokens, n, k, matmul_flops_per_s, hbm_bytes_per_s, half_flops, half_k,
                  elem_bytes=2.0):
    """Forward and backward time of a linear layer y = x·Wᵀ, x: (T × k), W: (n × k) [s].

    Forward reduces over k; the input gradient dx = dy·W reduces over n; the weight gradient
    dW = dyᵀ·x reduces over the T tokens. Returns (forward, backward).
    """
    return _linear_time_s(as_array(tokens), as_array(n), as_array(k),
                          *_gemm_rates(matmul_flops_per_s, hbm_bytes_per_s, half_flops, half_k),
                          elem_bytes)


def _gemm_rates(matmul_flops_per_s, hbm_bytes_per_s, half_flops, half_k):
    """The rate-only terms of :func:`_gemm_time_s`: (1/R, 1/W, n_half/R, k_half)."""
    inv_r = 1.0 / as_array(matmul_flops_per_s)
    return (inv_r, 1.0 / as_array(hbm_bytes_per_s), as_array(half_flops) * inv_r,
            as_array(half_k))


def _linear_time_s(t, n, k, inv_r, inv_w, tail_s, half_k, elem_bytes):
    """:func:`linear_time_s` with the rate-only terms precomputed (:func:`_gemm_rates`).

    The three GEMMs (forward t·n·k, input gradient t·k·n, weight gradient n·k·t) read and write
    the same three matrices, so their operand traffic ``elem·(tk + kn + tn) / W`` is one term;
    each then takes :func:`_gemm_time_s`'s ``max(compute, traffic) + tail``."""
    tn, tk, nk = t * n, t * k, n * k
    memory_s = elem_bytes * (tk + nk + tn) * inv_w
    two_inv_r = 2.0 * inv_r
    fwd = _iadd(maximum(tn * (k + half_k) * two_inv_r, memory_s), tail_s)
    dgrad = maximum(tk * (n + half_k) * two_inv_r, memory_s)
    wgrad = maximum(nk * (t + half_k) * two_inv_r, memory_s)
    return fwd, _iadd(_iadd(dgrad, wgrad), 2.0 * tail_s)


def _iadd(a, b):
    """``a + b``, into ``a`` where it is a float64 array of the sum's shape (a temporary of the
    caller's: one allocation and one array's cache footprint less on a sweep's rows); the
    same values."""
    if (type(a) is np.ndarray and a.dtype is _FLOAT64 and a.ndim
            and broadcast_shape(a.shape, np.shape(b)) == a.shape):
        return np.add(a, b, out=a)
    return a + b


def layer_gemm_times_s(tokens, d_model, q_dim, kv_dim, ffn_size, swiglu, active_experts,
                       matmul_flops_per_s, hbm_bytes_per_s, half_flops, half_k, elem_bytes=2.0):
    """Forward and backward time of one layer's GEMMs [s] (see :func:`linear_time_s`)."""
    fwd, bwd, _ = layer_gemm_times_with_down_s(
        tokens, d_model, q_dim, kv_dim, ffn_size, swiglu, active_experts, matmul_flops_per_s,
        hbm_bytes_per_s, half_flops, half_k, elem_bytes)
    return fwd, bwd


def layer_gemm_times_with_down_s(tokens, d_model, q_dim, kv_dim, ffn_size, swiglu,
                                 active_experts, matmul_flops_per_s, hbm_bytes_per_s, half_flops,
                                 half_k, elem_bytes=2.0, attention=None):
    """:func:`layer_gemm_times_s` and, third, the forward time of the MLP down projections
    alone (every active expert's) [s] (what torch's non-reentrant checkpoint skips).

    ``attention``: the (forward, backward) sums of the first two shapes' times (the QKV and
    output projections, each of multiplicity 1) where the caller has computed them on the
    same inputs: the loop then starts from them (the same sums, bit for bit)."""
    rates = _gemm_rates(matmul_flops_per_s, hbm_bytes_per_s, half_flops, half_k)
    t = as_array(tokens)
    fwd = bwd = down = 0.0
    shapes = layer_gemm_shapes(d_model, q_dim, kv_dim, ffn_size, swiglu, active_experts)
    if attention is not None:
        (fwd, bwd), shapes = attention, shapes[2:]
    for n, k, mult in shapes:
        f, b = _linear_time_s(t, as_array(n), as_array(k), *rates, elem_bytes)
        fwd = fwd + mult * f
        bwd = bwd + mult * b
        down = mult * f  # the last shape is the MLP down projection
    return fwd, bwd, down


def layer_elementwise_bytes(tokens, d_model, q_dim, kv_dim, ffn_size, swiglu, rotary,
                            linear_bias=False, act_bytes=2.0):
    """HBM traffic of one layer's bandwidth-bound kernels, (forward, backward) [B].

    Each kernel reads its inputs and writes its outputs once (elements per token):

    * forward: 2 norms (read d, write d) = 4d; 2 residual adds (read 2d, write d) = 6d;
      activation GELU (read f, write f) = 2f or SwiGLU (read 2f, write f) = 3f;
      rotary on q and k (read, write) = 2(q + kv).
    * backward: each norm's input gradient (read dy, x; write dx) plus its weight/bias
      gradient reduction, which PyTorch's ``layer_norm_backward`` runs as a second kernel
      reading dy and x again = 5d each, 10d; the two residual branches' gradient sums (3d each,
      6d); GELU backward (read dy, x; write dx) 3f or SwiGLU (read dy, gate, up; write two
      grads) 5f; rotary 2(q + kv); with biases, ``grad_bias = dy.sum(0)`` reads every linear
      output gradient once: (q + 2kv) + d + f_up + d.

    Derived here from the kernel list of an eager PyTorch block; the same tensor accounting
    Korthikanti et al. 2022 §4.1 use for stored activations.
    """
    t = as_array(tokens) * act_bytes
    d, q, kv, f = as_array(d_model), as_array(q_dim), as_array(kv_dim), as_array(ffn_size)
    rope = where(rotary, 2.0 * (q + kv), 0.0)
    f_up = where(swiglu, 2.0, 1.0) * f
    bias_grads = where(linear_bias, (q + 2.0 * kv) + d + f_up + d, 0.0)
    fwd = t * (10.0 * d + where(swiglu, 3.0, 2.0) * f + rope)
    bwd = t * (16.0 * d + where(swiglu, 5.0, 3.0) * f + rope + bias_grads)
    return fwd, bwd


#: Bytes moved per logit by an unfused PyTorch cross-entropy on bf16 logits: the upcast to fp32
#: (read 2, write 4), log-softmax (read 4, write 4), its backward (read 4 + 4, write 4) and the
#: cast of the gradient back to bf16 (read 4, write 2) = 36 B; the GEMM writes the bf16 logits
#: (2 B) and reads the bf16 gradient (2 B) as part of its own traffic.
LOSS_BYTES_PER_LOGIT = 36.0
#: A fused cross-entropy kernel (flash-attn ``CrossEntropyLoss``, Liger) reads the bf16 logits
#: once and writes the gradient in their place: 4 B per logit.
FUSED_LOSS_BYTES_PER_LOGIT = 4.0

#: Bytes per local parameter of one AdamW step in fp32 with foreach kernels: read param, grad,
#: exp_avg, exp_avg_sq (16 B) and write param, exp_avg, exp_avg_sq (12 B) (Loshchilov & Hutter
#: 2019, Alg. 2; PyTorch ``torch.optim.AdamW(foreach=True)``). SGD with momentum: read param,
#: grad, buffer, write param, buffer = 20 B.
OPTIMIZER_BYTES_PER_PARAM = {"adamw": 28.0, "sgd": 20.0}


#: Speed of FP8 fused attention over the 16-bit kernel on the same GPU [-]: FlashAttention-3
#: reaches close to 1.2 PFLOP/s in FP8 against 740 TFLOP/s in FP16 on H100 (Shah et al. 2024,
#: arXiv 2407.08608, §4.1), 1.2 / 0.74; carried to Transformer Engine's cuDNN FP8 attention
#: (``fp8_dot_product_attention``) and to other parts with a 2x FP8 rate, unmeasured there.
FP8_ATTENTION_SPEEDUP = 1.2 / 0.74


#: Bytes per element of a dropout mask (a bool tensor; Korthikanti et al. 2022 §4.1).
DROPOUT_MASK_BYTES = 1.0


def dropout_bytes(elements, elem_bytes=2.0):
    """HBM bytes of one dropout pass over ``elements`` values, forward or backward [B].

    Forward reads the input and writes the output and a 1-byte mask; backward reads the output
    gradient and the mask and writes the input gradient: ``(2·e + 1)`` bytes per element either
    way (PyTorch ``native_dropout`` / Megatron's fused scale-mask-softmax-dropout keep the mask,
    Korthikanti et al. 2022 §4.1)."""
    return as_array(elements) * (2.0 * as_array(elem_bytes) + DROPOUT_MASK_BYTES)


def memory_bound_time_s(traffic_bytes, hbm_bytes_per_s):
    """Time of bandwidth-bound kernels [s]: bytes / achievable HBM bandwidth."""
    return as_array(traffic_bytes) / as_array(hbm_bytes_per_s)


def attention_time_s(flops, peak_flops_per_s, attention_fraction, kv_len=np.inf, half_k=0.0):
    """Time of the fused attention kernel [s].

    The kernel runs at ``peak · attention_fraction · n / (n + k_half)``: each query tile loops
    over the n key/value positions it attends to (n = s/2 on average with a causal mask,
    s without) and pays a fixed prologue/epilogue (loading Q, writing O and the logsumexp) per
    tile, the same tile law as :func:`gemm_time_s`. FlashAttention-2's measured rate falls
    from ~70 % of peak at 16k tokens to about half of that at 512 (Dao 2023, arXiv 2307.08691,
    Fig. 4-5).
    """
    n = as_array(kv_len)
    tile_eff = 1.0 / (1.0 + as_array(half_k) / n)  # n / (n + k_half), finite at n = inf
    return as_array(flops) / (as_array(peak_flops_per_s) * as_array(attention_fraction) * tile_eff)


def host_ops_per_layer(flash, rotary, swiglu, rmsnorm, linear_bias):
    """Eager PyTorch ops one transformer layer dispatches (forward, backward) [-].

    Counted, not estimated (see :data:`HOST_OPS_BASE`): the base GPT block plus the ops eager
    attention, SwiGLU, RMSNorm (composite) and linear biases add, and rotary embeddings
    (estimated). With :func:`launch_bound_s` this is the host-bound floor of a layer's time."""
    switches = ((~(as_array(flash) > 0), HOST_OPS_EAGER_ATTENTION), (rotary, HOST_OPS_ROTARY),
                (swiglu, HOST_OPS_SWIGLU), (rmsnorm, HOST_OPS_RMSNORM),
                (linear_bias, HOST_OPS_LINEAR_BIAS))
    fwd, bwd = float(HOST_OPS_BASE[0]), float(HOST_OPS_BASE[1])
    for on, (f, b) in switches:
        on = as_array(on) > 0
        if type(on) is np.bool_:  # one configuration: 1.0 or 0.0, not a boolean's slow product
            on = 1.0 if on else 0.0
        fwd, bwd = fwd + on * float(f), bwd + on * float(b)  # f or 0 ops where switched on
    return as_array(fwd), as_array(bwd)


#: Board power an idle-but-busy GPU draws regardless of clock (leakage, HBM, fans excluded),
#: as a fraction of TDP: an H100 SXM idles near 70 W of 700 W in nvidia-smi. An estimate.
STATIC_POWER_FRACTION = 0.10
#: Dynamic power P ∝ C·V²·f with the voltage tracking the clock along the DVFS curve (V ∝ f):
#: P_dyn ∝ f³ (CMOS dynamic power; Weste & Harris, "CMOS VLSI Design", 4th ed., §5.1).
DVFS_POWER_EXPONENT = 3.0


def power_capped_clock_ratio(power_cap_w, tdp_w, static_fraction=STATIC_POWER_FRACTION,
                             exponent=DVFS_POWER_EXPONENT):
    """Sustained compute clock under a board power cap, relative to the clock at TDP [-].

    Dense GEMMs draw the full TDP at the rated sustained clock; capped, the firmware lowers the
    clock until ``P_static + P_dyn(f) <= cap`` with ``P_dyn ∝ f^exponent``:
    ``f_cap / f_TDP = ((cap − P_static) / (TDP − P_static)) ** (1 / exponent)``, 1 at or above
    TDP. Tensor-core FLOP/s scale with the clock; HBM bandwidth, links and the host do not.
    Uncalibrated: no capped measurement is in fsdpsim's calibration data."""
    cap, tdp = as_array(power_cap_w), as_array(tdp_w)
    static = static_fraction * tdp
    ratio = (np.maximum(cap - static, 0.0) / (tdp - static)) ** (1.0 / exponent)
    return np.minimum(ratio, 1.0)


#: Bytes per element of an FP8 cast with its transposed copy: read 2 (bf16), write 1 + 1
#: (Transformer Engine's fused ``nvte_cast_transpose``: the GEMM operand and its transpose for
#: the weight-gradient GEMM).
FP8_CAST_TRANSPOSE_BYTES = 4.0
#: The same for block-scaled formats (OCP Microscaling spec v1.0: MXFP8 = 1-byte elements with
#: one E8M0 scale byte per 32; NVIDIA NVFP4 = 4-bit elements with one E4M3 scale byte per 16,
#: arXiv 2509.25149 §2): read 2 (bf16), write both layouts with their scales.
#: DeepSeek-V3's fine-grained FP8 (fp8-block; technical report arXiv 2412.19437 §3.3.1):
#: activations in 1×128 tiles, weights in 128×128 blocks, one FP32 scale each.
CAST_TRANSPOSE_BYTES = {"fp8": FP8_CAST_TRANSPOSE_BYTES,
                        "fp8-block": 2.0 + 2.0 * (1.0 + 4.0 / 128),
                        "mxfp8": 2.0 + 2.0 * (1.0 + 1.0 / 32),
                        "nvfp4": 2.0 + 2.0 * (0.5 + 1.0 / 16)}


def fp8_cast_bytes(tokens, d_model, q_dim, kv_dim, ffn_size, swiglu, layer_matmul_params):
    """HBM bytes of the FP8 casts one layer's GEMMs need per micro-batch, (forward, backward) [B].

    Forward: every GEMM input (QKV and up/gate projections read the normed hidden state, the
    output projection the attention output, the down projection the MLP activation) and the
    layer's weights are cast to FP8 with a transposed copy; backward: the gradient of every
    GEMM output (QKV, out-proj, up/gate, down) is cast the same way. Each element costs
    :data:`FP8_CAST_TRANSPOSE_BYTES` (Transformer Engine, C API ``cast_transpose``)."""
    t = as_array(tokens)
    gate = np.where(as_array(swiglu) > 0, 2.0, 1.0)
    inputs = 2.0 * as_array(d_model) + as_array(q_dim) + as_array(ffn_size)
    outputs = (as_array(q_dim) + 2.0 * as_array(kv_dim) + as_array(d_model)
               + gate * as_array(ffn_size) + as_array(d_model))
    fwd = FP8_CAST_TRANSPOSE_BYTES * (t * inputs + as_array(layer_matmul_params))
    bwd = FP8_CAST_TRANSPOSE_BYTES * t * outputs
    return fwd, bwd


def launch_bound_s(gpu_time_s, n_kernels, kernel_overhead_s):
    """A kernel sequence takes at least one launch interval per kernel [s].

    The CPU enqueues kernels asynchronously; when the GPU finishes them faster than the CPU can
    issue them, the stream is launch bound: ``max(Σ t_gpu, n · t_launch)``.
    """
    return maximum(as_array(gpu_time_s), as_array(n_kernels) * as_array(kernel_overhead_s))
