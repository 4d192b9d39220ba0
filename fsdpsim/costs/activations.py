"""Activation memory: what one transformer layer saves for backward, the recompute working set,
the LM-head inputs and the logits and loss temporaries (part of :mod:`fsdpsim.costs.memory`).

Pure and vectorised like the rest of :mod:`fsdpsim.costs`; categorical arguments
(``recompute``, ``ffn_kind``) are strings or arrays of strings. Checked against torch's saved
tensors and ``FSDPMemTracker`` in ``tests/test_torch_memory.py``.

References (numbered as in :mod:`fsdpsim.costs.memory`)
--------------------------------------------------------
[3] Korthikanti et al. 2023, arXiv 2205.05198: §4.1 Eq. 1, §4.2, §5, Table 2.
[4] Dao, "FlashAttention-2", arXiv 2307.08691, Alg. 1-2 (output and fp32 logsumexp saved).
[5] torchtitan ``torchtitan/distributed/activation_checkpoint.py`` (pytorch/torchtitan @b5bcd76c,
    2026-08): ``SelectiveAC._wrap_block`` (``_get_custom_policy``) and ``_get_default_save_ops``;
    its default ``ac_mode = "selective"``, ``selective_ac_option = "op"``. A policy of
    ``torch.utils.checkpoint.create_selective_checkpoint_contexts`` around each block: the
    outputs of ``aten.mm`` / ``aten.linear`` are saved except every second one (counted per block
    in call order), SDPA / flash attention and ``reduce_scatter_tensor`` / ``all_to_all``
    outputs are saved, everything else is recomputed; the checkpoint keeps the block input.
"""

from __future__ import annotations

import numpy as np

from fsdpsim.costs.args import check_at_least_one as _check_at_least_one
from fsdpsim.costs.args import choice_codes
from fsdpsim.costs.compute import as_array, as_values, maximum, where

#: Activation recomputation policies: [3] §5, and torchtitan's op-level selective
#: checkpointing ([5]; ``op-selective``).
RECOMPUTE = ("none", "selective", "full", "op-selective")
RC_NONE, RC_SELECTIVE, RC_FULL, RC_OP_SELECTIVE = range(4)
#: MLP kinds: GELU (two matrices) or a gated linear unit such as SwiGLU (three).
FFN_KINDS = ("gelu", "swiglu")

MASK_BYTES = 1.0      # a dropout mask is a bool tensor, 1 byte per element ([3] §4.1)
LSE_BYTES = 4.0       # FlashAttention's saved row logsumexp is fp32 ([4])
FP32_BYTES = 4.0


# -- activations ---------------------------------------------------------------------------------
def activation_bytes_per_layer(micro_batch, seq_len, d_model, q_dim, kv_dim, ffn_size, ffn_kind,
                               n_heads, recompute="none", *, flash_attention=True, act_bytes=2.0,
                               dropout=False, fused_glu=True, tp=1, cp=1,
                               sequence_parallel=True, linear_bias=False, check=True):
    """Bytes one transformer layer saves for backward on one GPU [B].

    Parameters
    ----------
    micro_batch : b, sequences per micro-batch [-]
    seq_len : s, tokens per sequence [-]
    d_model : h, hidden size [-]
    q_dim : q, query width (heads × head dim) [-]
    kv_dim : kv, key/value width (KV heads × head dim; = q for MHA) [-]
    ffn_size : f, MLP inner width [-]
    ffn_kind : "gelu" or "swiglu" (any gated unit) [-]
    n_heads : a, query heads [-]
    recompute : "none", "selective" (attention core recomputed), "full" (layer input kept) or
        "op-selective" (torchtitan's op-level policy, [5]; Notes) [-]
    flash_attention : True when the attention kernel does not materialise s × s scores [-]
    act_bytes : bytes per activation element (2 for bf16) [B]
    dropout : True when dropout is active (masks are saved) [-]
    fused_glu : for swiglu, True when the gate activation is fused (Megatron, compiled code:
        saves gate and up outputs); False for eager ``silu(w1 x) * w3 x``, which also saves the
        SiLU output [-]
    tp : tensor-parallel degree [-]
    cp : context-parallel degree (splits the sequence) [-]
    sequence_parallel : True when h-sized tensors are split over ``tp`` too [-]
    linear_bias : True when the layer's linear layers have biases (all of them: torch runs
        them as ``addmm``, which "op-selective" always saves) [-]
    check : False skips the argument checks: ``recompute`` and ``ffn_kind`` are then integer
        codes of :data:`RECOMPUTE` and :data:`FFN_KINDS` and ``tp``, ``cp`` at least 1 (the
        engine's inputs, checked when its plan was built) [-]

    Notes
    -----
    Per token, with e = ``act_bytes`` and the tensors each op saves (Korthikanti et al. [3]
    §4.1, written for general widths)::

        attention   e·h   LN1 input             MLP   e·h   LN2 input
                    e·h   QKV-projection input         e·h   up (and gate) input
                    e·(q + 2kv)   Q, K, V              e·2f  GELU input and output, or
                    e·q   output-projection input      e·3f  gate, up outputs and their product
                    1·h   output dropout mask          1·h   MLP dropout mask
                                                       (e·4f unfused SwiGLU: + SiLU output)

    so GELU, MHA, f = 4h, no dropout gives 2·(2h + 2q + 2kv) + 2·(2h + 2f) = 32·h bytes per
    token. The attention core adds per layer, with b·a·s² scores:

    * FlashAttention: the fp32 row logsumexp, 4·b·a·s ([4]); the dropout mask is regenerated.
    * otherwise: softmax output e·b·a·s², with dropout + mask 1·b·a·s² + dropout output e·b·a·s².

    With dropout, no flash and bf16 this is s·b·h·(34 + 5·a·s/h), [3] Eq. 1.

    Recomputation ([3] §5, Table 2): "selective" recomputes the attention core, dropping its
    terms (the s² ones, or the logsumexp with flash); "full" keeps only the layer input, e·h per
    token. "op-selective" keeps what torchtitan's op list saves ([5], op by op:
    :func:`op_selective_matmuls`): the layer input e·h (split with sequence parallelism), the
    saved matmuls' outputs (:func:`op_selective_matmul_bytes`: e·(q + kv + f)/t + e·h with
    SwiGLU), the attention kernel's output e·q/t and logsumexp (4·a/t per token with flash;
    without, both score matmuls' outputs, the s² scores included) and, with sequence
    parallelism over t > 1, the two reduce-scatter outputs 2·e·h/t; Llama 3 8B (h = q = 4096,
    kv = 1024, f = 14336, a = 32, bf16) saves 63,616 B per token and layer against 139,264 B
    for "selective" (fused SwiGLU). Parallelism ([3] §4.2, Table 2): Q, K, V, attention and
    f-sized terms, and the s² terms, are split over ``tp``; the h-sized ones only with
    ``sequence_parallel`` (giving sbh(10 + 24/t + 5as/(ht)) without it, sbh/t·(34 + 5as/h) with
    it); under op-selective a row-parallel matmul's output is a full-width partial sum.
    ``cp`` divides the tokens each rank holds, and its queries' rows of the score matrix.
    """
    rc = choice_codes(recompute, RECOMPUTE, "recompute") if check else as_values(recompute)
    saved = saved_bytes_by_policy(micro_batch, seq_len, d_model, q_dim, kv_dim, ffn_size,
                                  ffn_kind, n_heads, flash_attention=flash_attention,
                                  act_bytes=act_bytes, dropout=dropout, fused_glu=fused_glu, tp=tp,
                                  cp=cp, sequence_parallel=sequence_parallel,
                                  linear_bias=linear_bias, check=check)
    return select_policy(rc, saved)


def saved_bytes_by_policy(micro_batch, seq_len, d_model, q_dim, kv_dim, ffn_size, ffn_kind,
                          n_heads, *, flash_attention=True, act_bytes=2.0, dropout=False,
                          fused_glu=True, tp=1, cp=1, sequence_parallel=True, linear_bias=False,
                          check=True, op_selective=True):
    """Bytes one layer saves for backward under each policy of :data:`RECOMPUTE`, as a tuple
    ``(none, selective, full, op-selective)`` [B]: the terms of
    :func:`activation_bytes_per_layer` (its parameters and Notes), computed once for all four
    policies; ``op_selective`` False leaves the last out (None: no configuration uses it)."""
    glu = (choice_codes(ffn_kind, FFN_KINDS, "ffn_kind") if check else as_values(ffn_kind)) == 1
    b, s, h = as_array(micro_batch), as_array(seq_len), as_array(d_model)
    q, kv, f, a = as_array(q_dim), as_array(kv_dim), as_array(ffn_size), as_array(n_heads)
    e = as_array(act_bytes)
    t = _check_at_least_one("tp", tp) if check else as_array(tp)
    c = _check_at_least_one("cp", cp) if check else as_array(cp)
    drop = as_values(dropout, float)
    h_split = where(sequence_parallel, t, 1.0)   # divisor of the h-sized tensors

    tokens = b * s / c                              # tokens this rank holds
    h_terms = (4.0 * e * h                          # LN1 input, QKV input, LN2 input, MLP input
               + 2.0 * drop * MASK_BYTES * h) / h_split  # the two residual-branch dropout masks
    n_ffn = where(glu, where(fused_glu, 3.0, 4.0), 2.0)
    head_terms = (e * (q + 2.0 * kv)                # Q, K, V
                  + e * q                           # attention output = output-projection input
                  + e * n_ffn * f) / t              # activation inputs / outputs
    linear_bytes = tokens * (h_terms + head_terms)

    local_heads = a / t
    rows = b * local_heads * s / c                  # score rows (queries) on this rank
    core_flash = LSE_BYTES * rows
    core_plain = rows * s * (e                      # softmax output
                             + drop * (MASK_BYTES + e))  # attention-dropout mask and output
    core_bytes = where(flash_attention, core_flash, core_plain)

    layer_input_bytes = tokens * e * h / h_split
    if not op_selective:
        return linear_bytes + core_bytes, linear_bytes, layer_input_bytes, None
    # torchtitan's op list ([5]): the layer input, the saved matmuls' outputs, the attention
    # kernel's outputs (output + logsumexp with flash; both score matmuls' outputs without)
    op_core = where(flash_attention, core_flash + tokens * e * q / t,
                    rows * s * e + tokens * e * q / t)
    op_bytes = (layer_input_bytes
                + tokens * op_selective_matmul_bytes(h, q, kv, f, glu, linear_bias, e, t)
                + op_core + tokens * where((np.asarray(sequence_parallel) > 0) & (t > 1),
                                           2.0 * e * h / t, 0.0))
    return linear_bytes + core_bytes, linear_bytes, layer_input_bytes, op_bytes


def op_selective_matmuls(d_model, q_dim, kv_dim, ffn_size, glu):
    """One dense transformer block's weight matmuls in the order torchtitan's Llama block calls
    them, as (name, output width, reduction length, row-parallel) [-]: ``wq``, ``wk``, ``wv``,
    ``wo`` (``Attention.forward``), then ``w1``, ``w3``, ``w2`` of the SwiGLU FFN
    (``w2(silu(w1(x)) * w3(x))``) or ``up``, ``down`` of a GELU MLP. ``wo`` and ``w2``/``down``
    are row-parallel under tensor parallelism (their output a full-width partial sum per rank),
    the others column-parallel (their output split)."""
    h, q, kv, f = d_model, q_dim, kv_dim, ffn_size
    attention = [("wq", q, h, False), ("wk", kv, h, False), ("wv", kv, h, False),
                 ("wo", h, q, True)]
    mlp_glu = [("w1", f, h, False), ("w3", f, h, False), ("w2", h, f, True)]
    mlp_gelu = [("up", f, h, False), ("down", h, f, True)]
    return attention + (mlp_glu if glu else mlp_gelu)


def op_selective_split(glu: bool, linear_bias: bool = False):
    """The names of :func:`op_selective_matmuls` that torchtitan's policy saves, and those it
    recomputes ([5]): it counts the ``aten.mm`` calls of a block and recomputes every second
    one (the 2nd, 4th, ...), so a bias-free SwiGLU block saves ``wq``, ``wv``, ``w1``, ``w2``
    and reruns ``wk``, ``wo``, ``w3`` (GELU: saves ``wq``, ``wv``, ``up``; reruns ``wk``,
    ``wo``, ``down``). A linear layer with a bias runs as ``aten.addmm`` (torch's ``linear``
    on a flattened input), which is on the save list but not counted: every biased matmul is
    saved (a block with biases everywhere reruns no matmul)."""
    saved, again, count = [], [], 0
    for name, *_ in op_selective_matmuls(1, 1, 1, 1, glu):
        if linear_bias:
            saved.append(name)
            continue
        count += 1
        (saved if count % 2 else again).append(name)
    return saved, again


def op_selective_matmul_bytes(d_model, q_dim, kv_dim, ffn_size, glu, linear_bias=False,
                              act_bytes=2.0, tp=1):
    """Bytes per token of the matmul outputs torchtitan's op-level policy saves in one layer
    on one tensor-parallel rank ([5]; :func:`op_selective_split`) [B]: ``e·n/t`` for a
    column-parallel output of width n, ``e·h`` for a row-parallel one (a full-width partial
    sum, torchtitan's ``RowwiseParallel``: the reduction follows the matmul). Bias-free SwiGLU:
    ``e·(q + kv + f)/t + e·h``; GELU: ``e·(q + kv + f)/t``; biases everywhere: every output,
    ``e·(q + 2kv + f_up)/t + 2·e·h`` (f_up = 2f for SwiGLU)."""
    e, t = as_array(act_bytes), as_array(tp)
    h, q, kv, f = as_array(d_model), as_array(q_dim), as_array(kv_dim), as_array(ffn_size)
    out = 0.0
    for g_on in (True, False):
        for b_on in (True, False):
            saved = op_selective_split(g_on, b_on)[0]
            part = sum(e * n / (1.0 if row else t) for name, n, _, row in
                       op_selective_matmuls(h, q, kv, f, g_on) if name in saved)
            out = out + where((np.asarray(glu) > 0) == g_on,
                              where((np.asarray(linear_bias) > 0) == b_on, part, 0.0), 0.0)
    return out


def op_selective_recompute_flops(tokens, d_model, q_dim, kv_dim, ffn_size, linear_bias=False,
                                 tp=1):
    """Forward FLOPs one layer runs again in backward under torchtitan's op-level policy on one
    tensor-parallel rank [FLOP]: the matmuls it does not save ([5]; :func:`op_selective_split`),
    2·T·n·k each: ``2·T·(h·kv + q·h + h·f)/t`` without biases (``wk``, ``wo`` and ``w3``, or
    GELU's ``wk``, ``wo`` and ``down``: both have h·f weights), none with biases. The attention
    kernel is saved; the element-wise ops (norms, rotary, activation, residual adds) rerun
    without FLOPs counted."""
    t, h = as_array(tokens), as_array(d_model)
    q, kv, f = as_array(q_dim), as_array(kv_dim), as_array(ffn_size)
    return where(np.asarray(linear_bias) > 0, 0.0,
                 2.0 * t * (h * kv + q * h + h * f) / as_array(tp))


def select_policy(recompute_codes, saved):
    """The entry of :func:`saved_bytes_by_policy`'s ``(none, selective, full, op-selective)``
    that each integer recompute code picks [B] (an op-selective entry of None: no code picks
    it)."""
    none, selective, full, op_selective = saved
    if op_selective is None:
        op_selective = none
    return where(recompute_codes == RC_FULL, full,
                 where(recompute_codes == RC_SELECTIVE, selective,
                       where(recompute_codes == RC_OP_SELECTIVE, op_selective, none)))


def recompute_working_bytes(micro_batch, seq_len, d_model, q_dim, kv_dim, ffn_size, ffn_kind,
                            n_heads, recompute="none", *, saved_bytes=None, kept_bytes=None,
                            **options):
    """Extra bytes re-materialised while one layer runs its backward under recomputation [B].

    Parameters are those of :func:`activation_bytes_per_layer` (``options`` its keywords);
    ``saved_bytes`` and ``kept_bytes``, when given, are ``A(recompute)`` and
    ``A(recompute="none")`` already computed by the caller.

    Notes
    -----
    Before its backward a recomputed layer rebuilds what it did not keep:
    ``A(recompute="none") − A(recompute)``: the whole layer except its input for "full", the
    attention core for "selective", nothing for "none" ([3] §5); for "op-selective" the
    difference where positive (its saved ``w2`` output is a tensor "none" does not keep). Only
    one layer is rebuilt at a time. Activation gradients inside the layer are neglected.
    """
    shape = (micro_batch, seq_len, d_model, q_dim, kv_dim, ffn_size, ffn_kind, n_heads)
    if saved_bytes is None:
        saved_bytes = activation_bytes_per_layer(*shape, recompute, **options)
    if kept_bytes is None:
        none = "none" if options.get("check", True) else RC_NONE
        kept_bytes = activation_bytes_per_layer(*shape, none, **options)
    return maximum(kept_bytes - saved_bytes, 0.0)


def head_activation_bytes(micro_batch, seq_len, d_model, *, act_bytes=2.0, tp=1, cp=1,
                          sequence_parallel=True, check=True):
    """Activations saved outside the layers: the final norm's input and the LM head's input [B].

    ``2 · e · h`` per token (h-sized, split over ``tp`` with sequence parallelism), never
    recomputed (torchtitan and Megatron checkpoint the layers only). The embedding output is
    the first layer's input and is counted there. ``check=False`` skips the checks of ``tp`` and
    ``cp`` (as in :func:`activation_bytes_per_layer`).
    """
    t = _check_at_least_one("tp", tp) if check else as_array(tp)
    c = _check_at_least_one("cp", cp) if check else as_array(cp)
    h_split = where(sequence_parallel, t, 1.0)
    tokens = as_array(micro_batch) * as_array(seq_len) / c
    return tokens * 2.0 * as_array(act_bytes) * as_array(d_model) / h_split


def logits_bytes(micro_batch, seq_len, vocab_size, *, logits_dtype_bytes=2.0, loss_fp32=True,
                 tp=1, cp=1, fused=False, check=True):
    """Peak bytes of the LM-head output and the cross-entropy temporaries [B].

    Parameters
    ----------
    micro_batch : b [-]
    seq_len : s [-]
    vocab_size : V [-]
    logits_dtype_bytes : bytes per element of the LM-head output (2 for bf16) [B]
    loss_fp32 : True when the loss upcasts to fp32 (``F.cross_entropy`` under autocast) [-]
    tp : splits the vocabulary (vocab-parallel cross-entropy) [-]
    cp : splits the sequence [-]
    fused : a fused cross-entropy kernel (flash-attn ``CrossEntropyLoss``, Liger) that computes
        the loss row by row in fp32 registers and writes the gradient in place of the logits:
        only the logits themselves, x bytes per logit [-]
    check : False skips the checks of ``tp`` and ``cp`` (both at least 1) [-]

    Notes
    -----
    ``b·s·V/(tp·cp) · (x + 3·y)``, x = ``logits_dtype_bytes``, y = 4 with ``loss_fp32`` else x:
    14 bytes per logit for bf16 logits and an fp32 loss. Eager PyTorch computes cross-entropy
    as log-softmax then NLL. The forward holds the logits (x), their fp32 upcast (y) and the
    log-softmax output (y, saved for backward) = x + 2y; the upcast is freed after it. The
    backward of the log-softmax then holds the logits (still referenced by the training loop),
    the saved log-softmax output, the dense gradient from the NLL backward and the gradient it
    writes for the upcast logits: x + 3y, the larger of the two. Fused or chunked losses
    (e.g. Liger kernels) need far less.
    """
    x = as_array(logits_dtype_bytes)
    y = where(loss_fp32, FP32_BYTES, x)
    t = _check_at_least_one("tp", tp) if check else as_array(tp)
    c = _check_at_least_one("cp", cp) if check else as_array(cp)
    n_logits = as_array(micro_batch) * as_array(seq_len) * as_array(vocab_size) / (t * c)
    return n_logits * where(fused, x, x + 3.0 * y)
