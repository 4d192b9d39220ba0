"""Engine stage 2: the compute time of one transformer layer and of the root (embedding, LM
head, loss) for one micro-batch on one rank, with the rank's tensor-parallel widths and
context-parallel tokens. Every formula is in :mod:`fsdpsim.costs.compute`; this module only
composes them.
"""

from __future__ import annotations

from fsdpsim.costs import compute, pass_ratios
from fsdpsim.costs.compute import any_of, as_values, where
from fsdpsim.costs.pass_ratios import LOSS_BWD_SHARE, LOSS_FWD_SHARE
from fsdpsim.engine.inputs import Prepared
from fsdpsim.engine.results import LayerKind, LayerTimes, Rates, RootTimes, Switches, Widths


def rates(g: Prepared) -> Rates:
    """Achievable rates: catalog peaks x achievable fractions [FLOP/s, B/s].

    A power cap lowers the sustained clock (compute.power_capped_clock_ratio): the FLOP/s the
    kernels see drop with it, while MFU stays measured against the nominal peak."""
    clocked_peak = g.peak_flops_per_s * g.compute_clock_ratio
    return Rates(clocked_peak, clocked_peak * g.matmul_fraction,
                 g.hbm_bytes_per_s * g.hbm_fraction, g.link_bytes_per_s * g.link_fraction,
                 g.nic_share_bytes_per_s * g.nic_fraction)


def widths(g: Prepared) -> Widths:
    """One rank's share of the layer (Megatron column/row split, Shoeybi et al. 2019 §3): query,
    KV and MLP widths and heads divided by ``tp`` (whole KV heads on each rank: the plan's
    check refuses a ``tp`` that does not divide them), the vocabulary divided by ``tp``;
    h-sized element-wise work divided by ``tp`` with sequence parallelism (Korthikanti et al.
    2022 §4.2.2); tokens b·s/cp (context parallelism splits the sequence: ``tokens_per_rank``
    of :func:`fsdpsim.engine.prepare.prepare`). The inputs ``g`` hold the whole model's widths:
    this is the one place a layer's compute widths are split over ``tp`` (the parameter counts
    of one rank, for memory and data-parallel traffic, come split from
    :func:`fsdpsim.engine.build.model_inputs`)."""
    tp = g.tp
    return Widths(
        tokens=g.tokens_per_rank,
        q=g.q_dim / tp,
        kv=g.kv_dim / tp,
        ffn=g.ffn_size / tp,
        heads=g.n_heads / tp,
        vocab=g.vocab_size / tp,
        d_elementwise=where(g.sequence_parallel > 0, g.d_model / tp, g.d_model),
    )


def _op_selective_recompute_s(g, r, w, ew_fwd_s, ops_fwd):
    """torchtitan's op-level selective checkpoint of one dense layer rerun in backward [s]
    (:mod:`fsdpsim.costs.activations` [5]): the matmuls it does not save
    (:func:`~fsdpsim.costs.activations.op_selective_split`: ``wk``, ``wo``, then ``w3`` or
    GELU's ``down``; none when the linear layers have biases) and every element-wise kernel of
    the forward (norms, rotary, activation, residual adds: its wrapper runs with
    ``early_stop=False``); the saved matmuls and the attention kernel come from the cache
    without a launch (3 host ops a linear, as the down projection's, and one for the
    attention)."""
    from fsdpsim.costs.activations import op_selective_matmuls, op_selective_split

    swiglu, bias = g.swiglu > 0, g.linear_bias > 0
    gemm_s = cached = 0.0
    for glu in (True, False):
        shapes = {name: (n, k) for name, n, k, _ in op_selective_matmuls(
            g.d_model, w.q, w.kv, w.ffn, glu)}
        for biased in (True, False):
            saved, again = op_selective_split(glu, biased)
            part = sum(compute.linear_time_s(w.tokens, *shapes[name], r.matmul, r.hbm,
                                             g.matmul_half_flops, g.matmul_half_k,
                                             g.compute_bytes)[0] for name in again)
            on = (swiglu == glu) & (bias == biased)
            gemm_s = gemm_s + where(on, part, 0.0)
            cached = cached + where(on, len(saved) * compute.HOST_OPS_DOWN_PROJECTION + 1.0, 0.0)
    eager = where(g.cuda_graphs > 0, 0.0, 1.0)
    return compute.launch_bound_s(gemm_s + ew_fwd_s, ops_fwd - cached * eager,
                                  g.kernel_overhead_s)


def layer_times(g: Prepared, r: Rates, w: Widths, gemm=None, extra_ew=None, extra_ops=None,
                kind: LayerKind | None = None, attention_gemm=None,
                attention=None) -> LayerTimes:
    """Forward, backward and recompute time of one layer, one micro-batch, one rank [s]: its
    GEMMs, attention core (:func:`attention_times`) and element-wise kernels
    (:func:`elementwise_times`), each pass bounded below by the host's kernel launches
    (:func:`compute.launch_bound_s`, :func:`host_ops`), and what backward reruns
    (:func:`recompute_time_s`).

    ``gemm`` (forward, backward, down-projection forward) replaces the GEMM times of the
    uniform layer (:func:`fsdpsim.costs.compute.layer_gemm_times_with_down_s`) for layers whose
    GEMMs differ (multi-head latent attention, routed experts: :mod:`fsdpsim.engine.moe`);
    ``extra_ew`` (forward, backward) adds HBM bytes of kernels the uniform layer lacks,
    ``extra_ops`` (forward, backward) host ops it lacks (Megatron's per-expert work); ``kind``
    the inputs the layer reads as its own (None: the model's). ``attention_gemm`` (forward,
    backward): the uniform layer's QKV and output projection times where the caller has them
    (:func:`fsdpsim.engine.moe_parts.gqa_gemm_times`); ``attention`` (forward, backward time,
    forward FLOPs): :func:`attention_times` of the same ``g``, ``r`` and ``w`` (its widths but
    the MLP's), another kind of layer's."""
    on = switches(g)
    kind = LayerKind(g.active_experts, g.block_numel, g.rc_mlp) if kind is None else kind
    if gemm is None:
        gemm = compute.layer_gemm_times_with_down_s(
            w.tokens, g.d_model, w.q, w.kv, w.ffn, on.swiglu,
            kind.active_experts, r.matmul, r.hbm, g.matmul_half_flops,
            g.matmul_half_k, g.compute_bytes, attention_gemm)
    gemm_fwd_s, gemm_bwd_s, down_fwd_s = gemm
    attn_fwd_s, attn_bwd_s, attn_flops_fwd = (attention_times(g, r, w, on) if attention is None
                                              else attention)
    ew_fwd_s, ew_bwd_s = elementwise_times(g, r, w, on, kind, extra_ew)
    ops_fwd, ops_bwd = host_ops(g, on, extra_ops)
    block_fwd_s = compute.launch_bound_s(gemm_fwd_s + attn_fwd_s + ew_fwd_s, ops_fwd,
                                         g.kernel_overhead_s)
    recompute_s = recompute_time_s(g, r, w, on, kind, gemm_fwd_s + attn_fwd_s + ew_fwd_s,
                                   down_fwd_s, attn_fwd_s, ew_fwd_s, ops_fwd)
    block_bwd_s = compute.launch_bound_s(gemm_bwd_s + attn_bwd_s + ew_bwd_s, ops_bwd,
                                         g.kernel_overhead_s)
    return LayerTimes(gemm_fwd_s, gemm_bwd_s, attn_fwd_s, attn_bwd_s, ew_fwd_s, ew_bwd_s,
                      block_fwd_s, block_bwd_s, recompute_s, attn_flops_fwd)


def switches(g: Prepared) -> Switches:
    """The layer's kernel choices, read once for its parts: FlashAttention, SwiGLU, rotary
    embeddings, dropout, and ``eager`` (1 where the host launches every kernel, 0 where CUDA
    graphs replay the layer's)."""
    return Switches(flash=g.flash > 0, swiglu=g.swiglu > 0, rotary=g.rotary > 0,
                    dropout=g.dropout > 0, eager=where(g.cuda_graphs > 0, 0.0, 1.0))


def attention_times(g: Prepared, r: Rates,
                    w: Widths, on: Switches) -> tuple:
    """Forward and backward time of one layer's attention core on one rank [s], and its
    forward FLOPs [FLOP].

    The rank's heads over its b·s/cp queries (``w.tokens``), each against the whole
    sequence's s keys: a 1/cp share of the (causal) work either way (ring: load-balanced
    chunks against every KV block; all-to-all: heads/cp over the whole sequence,
    :func:`fsdpsim.costs.compute.attention_flops_fwd_of_queries`). Each ring step's kernel
    sees one KV block of s/cp keys (:func:`fsdpsim.costs.compute.attention_time_s`). Eager
    attention materialises the scores (3 passes over the queries x keys matrix); FlashAttention's
    backward recomputes them (:mod:`fsdpsim.costs.pass_ratios`, Dao 2023 §3.1); dropout on the
    probabilities of eager attention (:func:`fsdpsim.costs.compute.dropout_bytes`; Megatron
    GPT's default 0.1, fused into FlashAttention's kernel)."""
    s, cp, elem = g.seq_len, g.cp, g.compute_bytes
    flash = on.flash
    queries_keys = w.tokens * s  # query-key pairs of one head on this rank (full square)
    attn_flops_fwd = compute.attention_flops_fwd_of_queries(w.tokens, s, w.q, causal=flash)
    kv_len = where(flash, 0.5, 1.0) * s / where(g.cp_all2all > 0, 1.0, cp)
    # Eager attention materialises the scores: bandwidth bound on top of its matmuls.
    eager_scores_bytes = where(flash, 0.0, 3.0 * elem * w.heads * queries_keys)
    # FP8 training: attention in the 16-bit type unless fp8_attention (then at FP8's speed-up)
    peak_ratio = g.attention_peak_ratio
    if any_of(g.fp8_attention > 0):
        peak_ratio = where(g.fp8_attention > 0, g.fp8_attention_peak_ratio, peak_ratio)
    attn_peak = r.clocked_peak * peak_ratio
    # Megatron / NeMo run Transformer Engine's cuDNN fused attention, not PyTorch SDPA
    # (the framework profile's kernel stack ``te``; nanotron, torchtitan, DeepSpeed run FA2).
    attn_fraction = where(g.fused_attention > 0, g.fused_attention_fraction,
                          g.attention_fraction)
    attn_fwd_s = compute.attention_time_s(attn_flops_fwd, attn_peak,
                                          where(flash, attn_fraction, g.matmul_fraction),
                                          kv_len,
                                          where(flash, g.attention_half_kv, g.matmul_half_k))
    attn_fwd_s = attn_fwd_s + compute.memory_bound_time_s(eager_scores_bytes, r.hbm)
    ratio = g.attn_pair_ratio
    if any_of(ratio != 1.0):  # sliding-window / chunked layers: the query-key pairs they keep
        attn_fwd_s = attn_fwd_s * ratio
    # FlashAttention's backward recomputes the scores; eager's adds their traffic (below).
    attn_bwd_s = where(flash, pass_ratios.FLASH_ATTENTION_BWD_PER_FWD,
                       pass_ratios.EAGER_ATTENTION_BWD_PER_FWD) * attn_fwd_s
    # Dropout: per element it reads its input, writes its output and a 1-byte mask, and its
    # backward reads the gradient and the mask and writes a gradient.
    dropout = on.dropout
    if any_of(dropout):
        drop_attn_bytes = where(flash, 0.0, compute.dropout_bytes(
            w.heads * queries_keys, elem))
        drop_attn_s = where(dropout, compute.memory_bound_time_s(drop_attn_bytes, r.hbm),
                            0.0)
        attn_fwd_s, attn_bwd_s = attn_fwd_s + drop_attn_s, attn_bwd_s + drop_attn_s
    return attn_fwd_s, attn_bwd_s, attn_flops_fwd


def elementwise_times(g: Prepared, r: Rates, w: Widths, on: Switches, kind: LayerKind,
                      extra_ew=None) -> tuple:
    """Forward and backward time of one layer's element-wise kernels on one rank [s]:
    bandwidth bound (:func:`fsdpsim.costs.compute.memory_bound_time_s`) on their HBM bytes
    (:func:`fsdpsim.costs.compute.layer_elementwise_bytes`: norms, rotary, activation,
    residual adds, at every routed expert's width k·f_expert), FP8's casts of the GEMM
    operands (:func:`fsdpsim.costs.compute.fp8_cast_bytes`, scaled by a block-scaled format's
    bytes per element), the two residual-branch dropouts (h-sized, split with SP) and
    ``extra_ew`` (forward, backward bytes of kernels the uniform layer lacks)."""
    tokens, elem, swiglu = w.tokens, g.compute_bytes, on.swiglu
    routed_ffn = w.ffn * kind.active_experts
    ew_fwd_bytes, ew_bwd_bytes = compute.layer_elementwise_bytes(
        tokens, w.d_elementwise, w.q, w.kv, routed_ffn, swiglu, on.rotary,
        g.linear_bias > 0, elem)
    fp8 = g.fp8_gemm > 0
    if any_of(fp8):  # FP8 GEMM operands are cast (and transposed) first: extra HBM traffic
        cast_fwd_bytes, cast_bwd_bytes = compute.fp8_cast_bytes(
            tokens, g.d_model, w.q, w.kv, routed_ffn, swiglu,
            kind.block_numel / g.tp)
        scale = g.cast_scale  # block-scaled formats: their bytes per element over FP8's
        ew_fwd_bytes = ew_fwd_bytes + where(fp8, scale * cast_fwd_bytes, 0.0)
        ew_bwd_bytes = ew_bwd_bytes + where(fp8, scale * cast_bwd_bytes, 0.0)
    if extra_ew is not None:
        ew_fwd_bytes, ew_bwd_bytes = ew_fwd_bytes + extra_ew[0], ew_bwd_bytes + extra_ew[1]
    dropout = on.dropout
    if any_of(dropout):  # the two residual-branch dropouts (h-sized, split with SP)
        drop_h = where(dropout, compute.dropout_bytes(2.0 * tokens * w.d_elementwise, elem),
                       0.0)
        ew_fwd_bytes, ew_bwd_bytes = ew_fwd_bytes + drop_h, ew_bwd_bytes + drop_h
    return (compute.memory_bound_time_s(ew_fwd_bytes, r.hbm),
            compute.memory_bound_time_s(ew_bwd_bytes, r.hbm))


def host_ops(g: Prepared, on: Switches,
             extra_ops=None) -> tuple:
    """Host operations (kernel launches) of one layer's forward and backward [-]
    (:func:`fsdpsim.costs.compute.host_ops_per_layer`). CUDA graphs replay what they captured
    without the host: the layer's own ops under partial and full capture, the routed experts'
    steps (``extra_ops``, forward and backward) under full only."""
    ops_fwd, ops_bwd = compute.host_ops_per_layer(on.flash, on.rotary, on.swiglu,
                                                  g.rmsnorm, g.linear_bias)
    ops_fwd, ops_bwd = ops_fwd * on.eager, ops_bwd * on.eager
    if extra_ops is not None:
        eager_experts = where(g.cuda_graphs > 1, 0.0, 1.0)
        ops_fwd = ops_fwd + extra_ops[0] * eager_experts
        ops_bwd = ops_bwd + extra_ops[1] * eager_experts
    return ops_fwd, ops_bwd


def recompute_time_s(g: Prepared, r: Rates, w: Widths, on: Switches, kind: LayerKind,
                     forward_s, down_fwd_s, attn_fwd_s, ew_fwd_s, ops_fwd):
    """What backward reruns of one layer's forward (``forward_s``: its GEMMs, attention and
    element-wise time; ``ops_fwd`` its host ops) [s].

    Full = the block forward again up to the last tensor backward needs, host bound like the
    forward. torch's default non-reentrant checkpoint stops early
    (``set_checkpoint_early_stop``, torch.utils.checkpoint, torch >= 2.1; checked with
    FlopCounterMode in tests/test_torch_exact.py), so the MLP down projection, whose output
    nothing saves, is not recomputed (``down_fwd_s``, less its ops). Megatron's checkpoint
    (tensor_parallel.CheckpointFunction, reentrant: the saved inputs are run through the whole
    layer again) does not stop early. Selective = the attention core only (Korthikanti et al.
    2022 §5); torchtitan's op-level policy: :func:`_op_selective_recompute_s`; Megatron's
    ``recompute_modules`` "mlp" (dense layers only):
    :func:`fsdpsim.engine.module_recompute.mlp_recompute_s`."""
    recompute = as_values(g.recompute)
    eager = on.eager
    early_stop = g.megatron <= 0
    skipped_s = where(early_stop, down_fwd_s, 0.0)
    full_recompute_s = compute.launch_bound_s(
        forward_s - skipped_s,
        ops_fwd - where(early_stop, compute.HOST_OPS_DOWN_PROJECTION, 0.0) * eager,
        g.kernel_overhead_s)
    recompute_s = where(recompute == 2, full_recompute_s,
                        where(recompute == 1, attn_fwd_s, 0.0))
    if any_of(recompute == 3):  # torchtitan's op-level policy
        recompute_s = where(recompute == 3, _op_selective_recompute_s(g, r, w, ew_fwd_s, ops_fwd),
                            recompute_s)
    if any_of(kind.rc_mlp > 0):  # Megatron recompute_modules "mlp": dense layers only
        from fsdpsim.engine import module_recompute

        recompute_s = recompute_s + where(
            (kind.rc_mlp > 0) & (recompute != 2) & (kind.active_experts <= 1),
            module_recompute.mlp_recompute_s(g, r, w), 0.0)
    return recompute_s


def root_times(g: Prepared, r: Rates,
               w: Widths) -> RootTimes:
    """The root's compute for one micro-batch on one rank [s]: embedding lookup (first pipeline
    stage), final norm, LM head and loss (last stage); the vocabulary split over ``tp``
    (vocab-parallel embedding, column-parallel head, vocab-parallel cross-entropy). Under a
    low-precision recipe the head's GEMMs run at the 16-bit peak unless ``fp8_lm_head``
    (:func:`fsdpsim.engine.build.system_inputs`: ``lm_head_peak_ratio``)."""
    tokens = w.tokens
    elem = g.compute_bytes
    head_rate = r.matmul * where(g.fp8_lm_head > 0, 1.0, g.lm_head_peak_ratio)
    head_gemm_s, head_gemm_bwd_s = compute.linear_time_s(
        tokens, w.vocab, g.d_model, head_rate, r.hbm, g.matmul_half_flops,
        g.matmul_half_k, elem)
    loss_bytes_per_logit = where(g.fused_loss > 0, compute.FUSED_LOSS_BYTES_PER_LOGIT,
                                 compute.LOSS_BYTES_PER_LOGIT)
    loss_s = compute.memory_bound_time_s(tokens * w.vocab * loss_bytes_per_logit, r.hbm)
    embed_s = compute.memory_bound_time_s(2.0 * tokens * g.d_model * elem, r.hbm)
    # upcast + log-softmax in forward, the rest in backward (costs.pass_ratios)
    loss_fwd_s, loss_bwd_s = LOSS_FWD_SHARE * loss_s, LOSS_BWD_SHARE * loss_s
    head_fwd_s = head_gemm_s + loss_fwd_s
    head_bwd_s = head_gemm_bwd_s + loss_bwd_s
    return RootTimes(head_gemm_s=head_gemm_s, head_gemm_bwd_s=head_gemm_bwd_s, loss_s=loss_s,
                     embed_s=embed_s, embed_fwd_s=embed_s, embed_bwd_s=2.0 * embed_s,
                     head_fwd_s=head_fwd_s, head_bwd_s=head_bwd_s,
                     # pp = 1: one stage holds both ends
                     root_fwd_s=head_gemm_s + loss_fwd_s + embed_s,
                     root_bwd_s=head_gemm_bwd_s + loss_bwd_s + 2.0 * embed_s)
