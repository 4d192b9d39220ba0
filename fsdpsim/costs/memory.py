"""Memory: bytes per GPU of FSDP / ZeRO training, term by term, and the ceilings they imply.

All functions are pure and vectorised: numeric arguments may be Python numbers or numpy arrays
that broadcast together; categorical arguments (``strategy``, ``recompute``, ``ffn_kind``) are
strings or numpy arrays of strings (``strategy`` also takes the integer codes of
:data:`STRATEGIES`, the order :mod:`fsdpsim.costs.comm` uses). Results are numpy arrays (0-d for
scalar inputs). The activation terms (saved tensors per layer, recompute working set, LM-head
inputs, logits and loss) live in :mod:`fsdpsim.costs.activations` and are re-exported here.

When the peak happens
---------------------
Two moments compete, and the peak is the larger (checked against torch's ``FSDPMemTracker``
under ``FakeTensorMode`` in ``tests/test_torch_memory.py``):

* **the loss backward** — every saved activation is alive, only the root unit is gathered (a
  block's pre-backward all-gather starts after the LM head's backward), and the logits and the
  cross-entropy temporaries are at their largest;
* **the first block's backward** — the root and two blocks are gathered, one unit's gradient
  buffers exist, one layer is re-materialised under recompute, and of the loss only the logits
  the training loop still references remain.

Model states are counted in both (sharded gradients exist from the first step on with gradient
accumulation or ``zero_grad(set_to_none=False)``; with ``set_to_none=True`` they are absent at
the loss backward, so the figure is then a slight upper bound). The breakdown reported is that of
the binding moment.

Terms (the keys of :func:`peak_memory_bytes`)
---------------------------------------------
=========================  =============================================================
``params_bytes``           resident parameter copy; sharded for full/hybrid
``grads_bytes``            gradients; sharded for grad_op/full/hybrid (allocated all step:
                           gradient accumulation or ``zero_grad(set_to_none=False)``)
``optimizer_bytes``        optimizer states; sharded except for none (DDP)
``unsharded_params_bytes`` compute-dtype parameters beyond the resident copy: the
                           all-gathered units in flight (FSDP), or every unit when they are
                           not resharded after forward, or a cast of all parameters
``unsharded_grads_bytes``  one unit's unsharded gradient and its reduce-dtype cast (plus, when
                           the gradient sync waits for the last micro-batch, every
                           accumulated unsharded gradient)
``activations_bytes``      saved activations of all layers, the recompute working set of one
                           layer, and the inputs of the final norm and LM head
``logits_bytes``           LM-head output and cross-entropy temporaries
``runtime_reserved_bytes`` CUDA context, NCCL and cuBLAS workspaces (an input)
``fragmentation_bytes``    ``allocator_fraction`` × every allocator-managed term above
``peak_bytes``             the sum
=========================  =============================================================

Byte recipes
------------
* PyTorch FSDP with ``MixedPrecision(param_dtype=bf16, reduce_dtype=fp32)`` and AdamW (the
  defaults): the sharded fp32 parameter is the master copy (``param_bytes=4``), sharded fp32
  gradients (4), two fp32 moments (``optimizer_bytes_per_param=8``; SGD with momentum 4, plain
  SGD 0); all-gathered parameters and the computed gradients are bf16 (2), reduced in fp32 (4)
  (Zhao et al. 2023, arXiv 2304.11277 §4.4).
* ZeRO paper / DeepSpeed mixed precision: fp16 parameters and gradients (2, 2) and K = 12 bytes
  of optimizer state (fp32 master, momentum, variance) (Rajbhandari et al. 2020, §3.1).

``strategy="grad_op"`` is ZeRO-2 as the ZeRO paper counts it: the parameter copy
(``param_bytes``) is replicated. PyTorch's SHARD_GRAD_OP (and FSDP2
``reshard_after_forward=False``) instead keeps an fp32 shard and, from forward to the end of
backward, the bf16 unsharded parameters of every unit: at the peak that is
``strategy="full", reshard_after_forward=False`` with the PyTorch recipe, or ``"grad_op"`` with
``param_bytes=2`` and the fp32 master counted in ``optimizer_bytes_per_param=12``.

Other parallel degrees
----------------------
``n_params``, ``unit_numel`` and ``n_layers`` are what one rank holds before FSDP sharding:
divide by the tensor and pipeline degrees before calling. Activations and logits take ``tp``
(heads, FFN columns and vocabulary split; the h-sized tensors too with sequence parallelism)
and ``cp`` (context parallelism splits the sequence). ``saved_microbatches`` is the number of
micro-batches whose activations a pipeline stage holds at once (1 without pipelining).

References
----------
[1] Rajbhandari, Rasley, Ruwase, He, "ZeRO: Memory Optimizations Toward Training Trillion
    Parameter Models", SC 2020, arXiv 1910.02054: §3.1 (2Ψ + 2Ψ + KΨ, K = 12), §5 and Fig. 1.
[2] Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel", PVLDB
    16(12) 2023, arXiv 2304.11277: §3.2.1 (peak O(Σψ_i/F + max ψ_i)), §3.4 (rate limiter: at
    most two in-flight all-gathers), §4.4 (K_full·Σψ_i/F + K_low·max ψ_i).
[3] Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
    MLSys 2023, arXiv 2205.05198: §4.1 Eq. 1 (sbh(34 + 5as/h)), §4.2, §5, Table 2.
[4] Dao, "FlashAttention-2", arXiv 2307.08691, Alg. 1-2: only the output and the fp32
    row logsumexp are saved for backward.
"""

from __future__ import annotations

import numpy as np

from fsdpsim.costs.activations import (  # noqa: F401  (re-exported: part of the memory model)
    FFN_KINDS,
    RC_OP_SELECTIVE,
    RECOMPUTE,
    activation_bytes_per_layer,
    head_activation_bytes,
    logits_bytes,
    recompute_working_bytes,
    saved_bytes_by_policy,
    select_policy,
)
from fsdpsim.costs.arrays import NUMBER_TYPES, read_only
from fsdpsim.costs.args import check_at_least_one as _check_at_least_one
from fsdpsim.costs.args import choice_codes
from fsdpsim.costs.compute import (all_of, any_of, as_array, as_values, broadcast_shape, minimum,
                                   where)
from fsdpsim.costs.memory_inputs import MemoryInputs

#: Sharding strategies; a string or its index in this tuple (the codes of costs/comm.py).
STRATEGIES = ("full", "grad_op", "optimizer", "none", "hybrid")
FULL, GRAD_OP, OPTIMIZER, NONE, HYBRID = range(5)
# -- model states --------------------------------------------------------------------------------
def model_state_bytes(n_params, shard_size, replicate_size, strategy, *, param_bytes=4.0,
                      grad_bytes=4.0, optimizer_bytes_per_param=8.0, padded_n_params=None,
                      check=True):
    """Parameters, gradients and optimizer states resident on one GPU [B].

    Parameters
    ----------
    n_params : Ψ, parameters of one model replica on this rank (after TP/PP) [-]
    shard_size : N_d, GPUs the states are sharded over (the FSDP shard group) [-]
    replicate_size : replicas of the shard group (HYBRID_SHARD); per-GPU memory does not depend
        on it, it is validated so that callers can pass the whole mesh [-]
    strategy : "full" (ZeRO-3 / FULL_SHARD), "grad_op" (ZeRO-2), "optimizer" (ZeRO-1),
        "none" (DDP / NO_SHARD) or "hybrid" (HYBRID_SHARD: full within the shard group) [-]
    param_bytes : bytes per element of the resident parameter copy [B]
    grad_bytes : bytes per element of the resident gradient [B]
    optimizer_bytes_per_param : K, optimizer-state bytes per parameter [B]
    padded_n_params : Ψ rounded up by FSDP's padding for this ``shard_size`` (default Ψ) [-]
    check : False skips the argument checks: ``strategy`` is then an integer code of
        :data:`STRATEGIES` and the group sizes are at least 1 (the engine's inputs) [-]

    Returns
    -------
    dict of ``params_bytes``, ``grads_bytes``, ``optimizer_bytes`` [B]

    Notes
    -----
    With the sharded count Ψ_s = padded / N_d ([1] §5, Fig. 1):

    ==========  ==========  ==========  ==========
    strategy    params      grads       optimizer
    ==========  ==========  ==========  ==========
    none        p·Ψ         g·Ψ         K·Ψ
    optimizer   p·Ψ         g·Ψ         K·Ψ_s
    grad_op     p·Ψ         g·Ψ_s       K·Ψ_s
    full/hybrid p·Ψ_s       g·Ψ_s       K·Ψ_s
    ==========  ==========  ==========  ==========

    With p = g = 2, K = 12 this is the ZeRO paper's (2 + 2 + K)·Ψ accounting ([1] §3.1); with
    p = g = 4, K = 8 it is PyTorch FSDP's fp32 sharded master parameters and gradients with
    AdamW ([2] §3.2.1, §4.4).
    """
    st = choice_codes(strategy, STRATEGIES, "strategy") if check else as_values(strategy)
    n = as_array(n_params)
    padded = n if padded_n_params is None else as_array(padded_n_params)
    n_shard = padded / (_check_at_least_one("shard_size", shard_size) if check
                        else as_array(shard_size))
    if check:
        _check_at_least_one("replicate_size", replicate_size)

    params_sharded = (st == FULL) | (st == HYBRID)
    grads_sharded = params_sharded | (st == GRAD_OP)
    optimizer_sharded = st != NONE
    return {
        "params_bytes": as_array(param_bytes) * where(params_sharded, n_shard, n),
        "grads_bytes": as_array(grad_bytes) * where(grads_sharded, n_shard, n),
        "optimizer_bytes": as_array(optimizer_bytes_per_param) * where(optimizer_sharded,
                                                                           n_shard, n),
    }


# -- FSDP transient buffers ----------------------------------------------------------------------
def fsdp_buffer_bytes(unit_numel, n_params, shard_size, strategy, *, param_bytes=4.0,
                      compute_param_bytes=2.0, reduce_grad_bytes=4.0, compute_grad_bytes=2.0,
                      prefetch_units=2, reshard_after_forward=True, resident_numel=0.0,
                      check=True):
    """Unsharded parameter and gradient buffers alive at the start of backward [B].

    Parameters
    ----------
    unit_numel : ψ_max, elements of the largest FSDP unit, padded (``costs.comm.padded_numel``) [-]
    n_params : Ψ, parameters of the model replica on this rank [-]
    shard_size : F, GPUs the parameters are sharded over [-]
    strategy : as in :func:`model_state_bytes` [-]
    param_bytes : bytes per element of the resident parameter copy [B]
    compute_param_bytes : K_low, bytes per element of the parameters used in matmuls [B]
    reduce_grad_bytes : bytes per element of the gradient in the reduction collective [B]
    compute_grad_bytes : bytes per element of the gradient autograd produces [B]
    prefetch_units : units whose gathered parameters coexist (the unit computing and the one
        prefetched; the rate limiter allows two in-flight all-gathers, [2] §3.4) [-]
    reshard_after_forward : False keeps every unit's gathered parameters from forward through
        backward (FSDP2 ``reshard_after_forward=False``, FSDP1 SHARD_GRAD_OP) [-]
    resident_numel : elements of units never resharded after forward, e.g. a root unit that
        holds the embedding and LM head [-]
    check : False skips the argument checks (as in :func:`model_state_bytes`) [-]

    Returns
    -------
    dict of ``unsharded_params_bytes``, ``unsharded_grads_bytes`` [B]

    Notes
    -----
    Parameters, for full/hybrid ([2] §4.4: peak = K_full·Σψ_i/F + K_low·max ψ_i, here with
    ``prefetch_units`` units in flight)::

        K_low · min(prefetch_units·ψ_max + resident_numel, Ψ)     resharded after forward
        K_low · Ψ                                                  not resharded

    and zero when F = 1 and K_low equals ``param_bytes`` (the shard is the whole parameter;
    FSDP1 turns into NO_SHARD). For none/optimizer/grad_op the full parameters are resident
    already (:func:`model_state_bytes`); only when the compute dtype differs does a cast of every
    parameter stay alive until backward (autocast's weight cache, FSDP NO_SHARD's low-precision
    copy): ``K_low · Ψ``, else 0.

    Gradients, every strategy: the unit being reduced holds its unsharded gradient in the
    compute dtype plus a cast to the reduce dtype when they differ,
    ``ψ_max · (g_c + g_r·[g_r ≠ g_c])``. The reduce-scatter output (ψ_max/F) is neglected.
    """
    return _fsdp_buffers(unit_numel, n_params, shard_size, strategy, param_bytes,
                         compute_param_bytes, reduce_grad_bytes, compute_grad_bytes,
                         (prefetch_units,), reshard_after_forward, resident_numel, check)[0]


def _fsdp_buffers(unit_numel, n_params, shard_size, strategy, param_bytes, compute_param_bytes,
                  reduce_grad_bytes, compute_grad_bytes, prefetch_counts, reshard_after_forward,
                  resident_numel, check):
    """:func:`fsdp_buffer_bytes` for each prefetch count of ``prefetch_counts`` (the terms that
    do not depend on it computed once): a list of dicts, one per count [B]."""
    st = choice_codes(strategy, STRATEGIES, "strategy") if check else as_values(strategy)
    unit = as_array(unit_numel)
    n = as_array(n_params)
    f = _check_at_least_one("shard_size", shard_size) if check else as_array(shard_size)
    k_low = as_array(compute_param_bytes)
    g_c = as_array(compute_grad_bytes)
    g_r = as_array(reduce_grad_bytes)

    params_sharded = (st == FULL) | (st == HYBRID)
    # A separate compute copy exists when it is gathered from shards or cast to another dtype.
    separate_copy = (k_low != as_array(param_bytes)) | (params_sharded & (f > 1))
    resharded = params_sharded & as_values(reshard_after_forward, bool)
    grads_bytes = unit * (g_c + where(g_r != g_c, g_r, 0.0))
    out = []
    for prefetch_units in prefetch_counts:
        in_flight_numel = minimum(as_array(prefetch_units) * unit + as_array(resident_numel), n)
        gathered_numel = where(resharded, in_flight_numel, n)
        out.append({"unsharded_params_bytes": where(separate_copy, k_low * gathered_numel, 0.0),
                    "unsharded_grads_bytes": grads_bytes})
    return out


# -- the peak -------------------------------------------------------------------------------------
PEAK_KEYS = ("params_bytes", "grads_bytes", "optimizer_bytes", "unsharded_params_bytes",
             "unsharded_grads_bytes", "activations_bytes", "logits_bytes",
             "runtime_reserved_bytes", "fragmentation_bytes", "peak_bytes")


def peak_memory_bytes(*, moment="peak", **config):
    """Peak memory of one GPU at the start of backward, term by term [B].

    The keywords (and their defaults) are the fields of
    :class:`~fsdpsim.costs.memory_inputs.MemoryInputs`'s concerns, listed here; a misspelt one
    is a TypeError.

    Parameters
    ----------
    n_params, shard_size, replicate_size, strategy, padded_n_params, param_bytes, grad_bytes,
    optimizer_bytes_per_param :
        model states, see :func:`model_state_bytes`
    unit_numel, compute_param_bytes, compute_grad_bytes, reduce_grad_bytes, prefetch_units,
    reshard_after_forward, resident_numel :
        FSDP buffers, see :func:`fsdp_buffer_bytes`
    n_layers : transformer layers on this rank [-]
    micro_batch, seq_len, d_model, q_dim, kv_dim, ffn_size, ffn_kind, n_heads, recompute,
    flash_attention, act_bytes, dropout, fused_glu, tp, cp, sequence_parallel, linear_bias :
        activations, see :func:`activation_bytes_per_layer`
    vocab_size, logits_dtype_bytes, loss_fp32, fused_loss :
        see :func:`logits_bytes` (``fused_loss`` is its ``fused``)
    saved_microbatches : micro-batches whose activations are alive at once (pipelining) [-]
    recomputed_layers : layers that apply ``recompute``; the others keep everything
        (``recompute="none"``): Megatron's ``--recompute-num-layers`` with the block method.
        None = all ``n_layers`` [-]
    runtime_reserved_bytes : memory outside the caching allocator: CUDA context, NCCL and
        cuBLAS workspaces [B]
    allocator_fraction : fragmentation of the caching allocator as a fraction of the bytes it
        hands out [-]
    accumulated_grad_numel : elements whose unsharded gradient accumulates across micro-batches
        when the gradient sync waits for the last one (FSDP1 ``no_sync``, FSDP2
        ``set_requires_gradient_sync(False)``), kept in the reduce dtype (FSDP2 upcasts it:
        ``FSDPParam.to_accumulated_grad_if_needed``); 0 when gradients are reduce-scattered
        every micro-batch [-]
    moment : "peak" (the larger of the two moments), "loss" or "block" (one of them) [-]
    check : False skips the argument checks: ``strategy``, ``recompute`` and ``ffn_kind`` are
        then integer codes (:data:`STRATEGIES`, :data:`RECOMPUTE`, :data:`FFN_KINDS`) and the
        group sizes and degrees at least 1 (the engine's inputs, checked with its plan) [-]

    Returns
    -------
    dict of arrays broadcast to one shape, keys :data:`PEAK_KEYS` [B]: the terms of the
    binding moment

    Notes
    -----
    With S = saved_microbatches · n_layers · A(recompute) (A from
    :func:`activation_bytes_per_layer`), W from :func:`recompute_working_bytes` (one layer
    re-materialised during its backward) and H from :func:`head_activation_bytes`:

    * loss backward: states + the gathered root + S + H + :func:`logits_bytes`;
    * first block backward: states + :func:`fsdp_buffer_bytes` + S + W + the logits the loop
      holds (``logits_dtype_bytes`` per logit).

    Each is ``allocated · (1 + allocator_fraction) + runtime_reserved_bytes``; the peak is the
    larger (module docstring).
    """
    return binding_terms(*memory_moments(MemoryInputs.of(**config)), moment=moment)


def binding_terms(at_loss, in_block, moment="peak"):
    """The terms of the moment that binds, broadcast to one shape [B]: the result of
    :func:`peak_memory_bytes` from the two moments of :func:`memory_moments`. ``moment``:
    "peak" (the larger ``peak_bytes``, entry by entry), "loss" or "block"."""
    peak_a, peak_b = at_loss["peak_bytes"], in_block["peak_bytes"]
    if isinstance(moment, str) and moment == "peak":
        use_a = peak_a >= peak_b
    else:
        use_a = where(moment == "loss", True, where(moment == "block", False,
                                                            peak_a >= peak_b))
    # Each moment's peak sums all its terms, so its shape is theirs broadcast together.
    if type(use_a) is np.bool_ and type(peak_a) in NUMBER_TYPES and type(peak_b) in NUMBER_TYPES:
        shape = ()  # one configuration
    else:
        shape = broadcast_shape(*{v.shape if isinstance(v, (np.ndarray, np.generic))
                                  else np.shape(v) for v in (use_a, peak_a, peak_b)})
    everywhere_a = all_of(use_a)
    if everywhere_a or not any_of(use_a):  # one moment binds everywhere: no selection
        terms = at_loss if everywhere_a else in_block
        return {key: read_only(terms[key], shape) for key in PEAK_KEYS}
    return {key: read_only(where(use_a, at_loss[key], in_block[key]), shape)
            for key in PEAK_KEYS}


def memory_moments(inputs: MemoryInputs):
    """Both moments of :func:`peak_memory_bytes` in one pass, term by term [B].

    ``inputs``: every input by concern (:class:`~fsdpsim.costs.memory_inputs.MemoryInputs`;
    the fields are the keywords documented in :func:`peak_memory_bytes`). Returns
    ``(at_loss, in_block)``: for the loss backward and the first block's backward, a dict with
    the keys :data:`PEAK_KEYS` each (not broadcast to one shape); each moment's ``peak_bytes``
    is ``allocated · (1 + allocator_fraction) + runtime_reserved_bytes``. The ceilings
    (:mod:`fsdpsim.costs.ceilings`) solve each moment for one unknown.

    Moment A, the loss backward: the states (:func:`_states_bytes`), only the root unit
    gathered (a block's pre-backward all-gather starts after the LM head's backward), no unit
    gradient yet, every saved activation and the head's inputs (:func:`_activation_terms`),
    the cross-entropy temporaries at their largest (:func:`_logit_terms`). Moment B, the first
    block's backward: the states, the root and two blocks gathered and one unit's gradient
    buffers (:func:`fsdp_buffer_bytes`), the saved activations and one layer re-materialised;
    of the loss only the logits the training loop still references (their gradient is written
    in place or freed). With the gradient sync on the last micro-batch, the accumulated
    unsharded gradients join both.
    """
    strategy, shard_size, recompute, ffn_kind, tp, cp = _checked(inputs)
    states = _states_bytes(inputs.states, strategy, shard_size)
    u = inputs.units
    # The first block's backward: prefetch_units units in flight; the loss backward: the root.
    buffers, root_only = _fsdp_buffers(
        u.unit_numel, inputs.states.n_params, shard_size, strategy, inputs.states.param_bytes,
        u.compute_param_bytes, u.reduce_grad_bytes, u.compute_grad_bytes,
        (u.prefetch_units, 0), u.reshard_after_forward, u.resident_numel, False)
    saved_all, working, head = _activation_terms(inputs.batch, inputs.activations, recompute,
                                                 ffn_kind, tp, cp)
    loss_logits, held_logits = _logit_terms(inputs.batch, inputs.logits, tp, cp)
    accumulated = as_array(u.accumulated_grad_numel) * as_array(u.reduce_grad_bytes)
    buffers = {**buffers, "unsharded_grads_bytes": buffers["unsharded_grads_bytes"] + accumulated}
    at_loss = {**states, "unsharded_params_bytes": root_only["unsharded_params_bytes"],
               "unsharded_grads_bytes": 0.0 * root_only["unsharded_grads_bytes"] + accumulated,
               "activations_bytes": saved_all + head, "logits_bytes": loss_logits}
    in_block = {**states, **buffers, "activations_bytes": saved_all + working,
                "logits_bytes": held_logits}
    reserved, fraction = (as_array(inputs.runtime_reserved_bytes),
                          as_array(inputs.allocator_fraction))
    for terms in (at_loss, in_block):
        allocated = sum(terms.values())
        terms["runtime_reserved_bytes"] = reserved
        terms["fragmentation_bytes"] = fraction * allocated
        terms["peak_bytes"] = allocated * (1.0 + fraction) + reserved
    return at_loss, in_block


def _checked(inputs: MemoryInputs) -> tuple:
    """The inputs the terms share: ``strategy``, ``recompute`` and ``ffn_kind`` as codes,
    ``shard_size``, ``tp`` and ``cp`` as arrays, each checked once here when ``inputs.check``
    (the engine's come checked with its plan)."""
    st, act = inputs.states, inputs.activations
    if not inputs.check:
        return (st.strategy, st.shard_size, as_values(act.recompute), act.ffn_kind,
                as_array(act.tp), as_array(act.cp))
    strategy = choice_codes(st.strategy, STRATEGIES, "strategy")
    shard_size = _check_at_least_one("shard_size", st.shard_size)
    _check_at_least_one("replicate_size", st.replicate_size)
    recompute = choice_codes(act.recompute, RECOMPUTE, "recompute")
    ffn_kind = choice_codes(act.ffn_kind, FFN_KINDS, "ffn_kind")
    tp, cp = _check_at_least_one("tp", act.tp), _check_at_least_one("cp", act.cp)
    return strategy, shard_size, as_values(recompute), ffn_kind, tp, cp


def _states_bytes(st, strategy, shard_size) -> dict:
    """Parameters, gradients and optimizer states of the rank [B] (:func:`model_state_bytes`,
    ZeRO paper [1] §5 Fig. 1), the routed experts' with the same byte recipe but sharded over
    ``expert_shard_size`` GPUs, the expert data-parallel group (:mod:`fsdpsim.costs.moe`)."""
    states = model_state_bytes(st.n_params, shard_size, st.replicate_size, strategy,
                               param_bytes=st.param_bytes, grad_bytes=st.grad_bytes,
                               optimizer_bytes_per_param=st.optimizer_bytes_per_param,
                               padded_n_params=st.padded_n_params, check=False)
    if any_of(as_array(st.expert_n_params) > 0):
        experts = model_state_bytes(st.expert_n_params, st.expert_shard_size, 1.0, strategy,
                                    param_bytes=st.param_bytes, grad_bytes=st.grad_bytes,
                                    optimizer_bytes_per_param=st.optimizer_bytes_per_param,
                                    check=False)
        states = {key: states[key] + experts[key] for key in states}
    return states


def _activation_terms(batch, act, recompute, ffn_kind, tp, cp) -> tuple:
    """Saved activations of the stage S, the recompute working set W and the LM head's inputs
    H [B] (Korthikanti et al. [3] §4-5; :func:`saved_bytes_by_policy`,
    :func:`recompute_working_bytes`, :func:`head_activation_bytes`).

    S = saved_microbatches · n_layers · A(recompute); with ``recomputed_layers`` K, K layers
    recompute and the other n - K keep every activation (A("none")). A stage without layers
    (a pipeline end with only the embedding or the head) rebuilds none. The routed experts'
    activations (``moe_saved_bytes_per_token``, summed over the stage's MoE layers) are saved
    like the others; one MoE layer's routed rows and a dispatch in flight
    (``moe_working_bytes_per_token``) join W. Both are linear in b·s, so the ceilings stay
    exact."""
    b, s = batch.micro_batch, batch.seq_len
    layer_shape = (b, s, act.d_model, act.q_dim, act.kv_dim, act.ffn_size, ffn_kind,
                   act.n_heads)
    # What a layer saves under each recompute policy, computed once: A(recompute) and A("none").
    by_policy = saved_bytes_by_policy(*layer_shape, flash_attention=act.flash_attention,
                                      act_bytes=act.act_bytes, dropout=act.dropout,
                                      fused_glu=act.fused_glu, tp=tp, cp=cp,
                                      sequence_parallel=act.sequence_parallel,
                                      linear_bias=act.linear_bias, check=False,
                                      op_selective=any_of(recompute == RC_OP_SELECTIVE))
    saved_per_layer = select_policy(recompute, by_policy)
    kept_per_layer = by_policy[0]
    working = recompute_working_bytes(*layer_shape, recompute, saved_bytes=saved_per_layer,
                                      kept_bytes=kept_per_layer)
    head = head_activation_bytes(b, s, act.d_model, act_bytes=act.act_bytes, tp=tp, cp=cp,
                                 sequence_parallel=act.sequence_parallel, check=False)
    n_layers, in_flight = as_array(act.n_layers), as_array(act.saved_microbatches)
    if act.recomputed_layers is None:
        saved_all = in_flight * n_layers * saved_per_layer
        working = where(n_layers > 0, working, 0.0)
    else:
        k = minimum(as_array(act.recomputed_layers), n_layers)
        saved_all = in_flight * (k * saved_per_layer + (n_layers - k) * kept_per_layer)
        working = where(k > 0, working, 0.0)
    moe_saved = as_array(act.moe_saved_bytes_per_token)
    moe_working = as_array(act.moe_working_bytes_per_token)
    if any_of(moe_saved != 0) or any_of(moe_working > 0):
        routed_tokens = as_array(b) * as_array(s)
        saved_all = saved_all + in_flight * routed_tokens * moe_saved
        working = working + routed_tokens * moe_working
    return saved_all, working, head


def _logit_terms(batch, lg, tp, cp) -> tuple:
    """The logits and the cross-entropy's temporaries at the loss backward
    (:func:`logits_bytes`), and the logits alone, which the training loop still references in
    the first block's backward (``logits_dtype_bytes`` per logit, the vocabulary split over
    ``tp`` and the sequence over ``cp``) [B]."""
    b, s = batch.micro_batch, batch.seq_len
    at_loss = logits_bytes(b, s, lg.vocab_size, logits_dtype_bytes=lg.logits_dtype_bytes,
                           loss_fp32=lg.loss_fp32, tp=tp, cp=cp, fused=lg.fused_loss,
                           check=False)
    held = (as_array(lg.logits_dtype_bytes) * as_array(b) * as_array(s)
            * as_array(lg.vocab_size) / (tp * cp))
    return at_loss, held
