"""Tensor, sequence and context parallelism: collectives per layer and per-rank shapes.

Pure and vectorised like the rest of :mod:`fsdpsim.costs`: numeric arguments are numbers or
numpy arrays that broadcast. Counts are per transformer layer (or per model head) per
micro-batch on one rank; bytes are tensor bytes as torch's collectives see them (all-gather:
the gathered output; reduce-scatter: the input; all-reduce: the buffer; all-to-all and
send/recv: the input), not wire bytes (:func:`ring_wire_bytes`). ``tokens`` is ``b·s``, the
tokens of one micro-batch on the rank *before* the sequence-parallel or context-parallel
split. Checked call for call and byte for byte against torch 2.13 DTensor runs on gloo in
``tests/test_torch_tp.py`` (``fsdpsim.measured.harness.tp_runs``).

Megatron-LM and torch DTensor issue different collectives for the same plan:

=========================  ===================================  =================================
                           Megatron-LM / TransformerEngine      torch ``parallelize_module``
                                                                (torchtitan)
=========================  ===================================  =================================
input projections          fused QKV and fused gate/up GEMMs:   one ``ColwiseParallel`` per q, k,
                           one f-operator per block             v, gate, up; without SP each
                                                                ``from_local`` all-reduces its
                                                                own input gradient
                                                                (``column_linears``)
SP block input, backward   saved as the sequence shard and      autograd keeps the gathered
                           all-gathered again for the weight    input: no second all-gather
                           gradient (``regather_input``)
norm (and row-bias) grads  one coalesced all-reduce per step    FSDP2: one all-reduce per norm
under SP                   (``finalize_model_grads``)           tensor per micro-batch; no FSDP:
                                                                ``Partial`` grads all-reduced on
                                                                each use by the optimizer
vocab-parallel loss        3 fp32 all-reduces: max, target      3 all-reduces: max and sum-exp
                           logit, sum-exp                       in fp32, target logit in the
                                                                logits' dtype (``loss.py``)
ring attention (CP)        p2p K,V (cp−1 steps); backward K,V   K,V all-gathered once (default)
                           and dK,dV (cp−1 each)                or all-to-all (cp−1); dK,dV cp
                                                                hops in fp32
=========================  ===================================  =================================

References
----------
[1] Shoeybi et al., "Megatron-LM", arXiv 1909.08053 (2019), §3, Fig. 3 (f and g operators).
[2] Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
    arXiv 2205.05198 (2022), §4.2.2, Fig. 5 (g: all-gather / reduce-scatter), Table 2.
[3] Megatron-LM ``megatron/core/tensor_parallel/layers.py``
    (``LinearWithGradAccumulationAndAsyncCommunication``, ``VocabParallelEmbedding``),
    ``cross_entropy.py`` (``vocab_parallel_cross_entropy``), ``distributed/
    finalize_model_grads.py`` (``_allreduce_non_tensor_model_parallel_grads``).
[4] torch 2.13 ``torch/distributed/tensor/parallel/{style,loss}.py``;
    ``torch/distributed/tensor/experimental/_context_parallel/_attention.py``.
[5] Liu et al., "Ring Attention with Blockwise Transformers", arXiv 2310.01889 (2023), §3;
    TransformerEngine ``AttnFuncWithCPAndKVP2P`` (``context_parallel.py``).
[6] Jacobs et al., "DeepSpeed Ulysses", arXiv 2309.14509 (2023), §3.1-3.2.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from fsdpsim.costs.args import check_at_least_one
from fsdpsim.costs.compute import all_of, as_array
from fsdpsim.util.errors import ConfigError

#: Collective kinds of tensor parallelism and the passes they run in.
TP_KINDS = ("all_reduce", "all_gather", "reduce_scatter")
PHASES = ("forward", "backward")
#: Who issues the collectives (see the module table).
IMPLEMENTATIONS = ("megatron", "torch")
#: torch's ring-attention K,V rotation (``_RotateMethod``).
ROTATE_METHODS = ("all_gather", "all_to_all")


def _empty(shape) -> dict:
    zero = np.zeros(shape)
    return {f"{p}_{k}_{q}": zero for p in PHASES for k in TP_KINDS for q in ("calls", "bytes")}


def _full(value, shape) -> np.ndarray:
    """``value`` as a float array of ``shape`` (broadcast only where its shape differs; a float
    array of that shape as it is: the tables these build are read, never written)."""
    if not shape:  # one configuration: a number
        return value * 1.0
    if type(value) is np.ndarray and value.shape == shape and value.dtype == np.float64:
        return value
    return (value if np.shape(value) == shape else np.broadcast_to(value, shape)) * 1.0


def _masks(t, sequence_parallel, regather_input, loss_parallel=None):
    """Masks ``sp``, ``plain``, ``regather`` (and ``split_loss``, ``gathered_logits``) of TP
    degree ``t`` [-]: booleans for arrays; for one configuration 0.0 or 1.0 (numpy floats:
    the values of numpy's products with a boolean, at a fortieth of their cost)."""
    if type(t) is np.float64 and all(type(f) in _FLAG_TYPES for f in
                                     (sequence_parallel, regather_input, loss_parallel)):
        sharded = t > 1
        sp = sharded and bool(sequence_parallel)
        masks = [sp, sharded and not sp, bool(regather_input)]
        if loss_parallel is not None:
            masks += [sharded and bool(loss_parallel), sharded and not loss_parallel]
        return [_ONE if on else _ZERO for on in masks]
    sharded = t > 1
    sp = sharded & np.asarray(sequence_parallel, dtype=bool)
    out = [sp, sharded & ~sp, np.asarray(regather_input, dtype=bool)]
    if loss_parallel is not None:
        out += [sharded & np.asarray(loss_parallel, dtype=bool),
                sharded & ~np.asarray(loss_parallel, dtype=bool)]
    return out


def _broadcast_shape(*values) -> tuple:
    """``np.broadcast(*values).shape``; ``()`` without numpy's call where all are numbers."""
    if all(type(v) is np.float64 for v in values):
        return ()
    return np.broadcast(*values).shape


_ONE, _ZERO = np.float64(1.0), np.float64(0.0)
#: Flags :func:`_masks` reads as one value (None: a flag not asked for).
_FLAG_TYPES = frozenset((bool, np.bool_, int, float, np.float64, type(None)))


# -- tensor parallelism: one transformer layer ---------------------------------------------------
def tp_layer_collectives(tokens, d_model, act_bytes, tp, sequence_parallel, *,
                         column_linears=2, regather_input=True):
    """Collectives of one transformer layer under Megatron-style tensor parallelism.

    Parameters
    ----------
    tokens : b·s, tokens of the micro-batch on this rank before the sequence split [-]
    d_model : h, hidden size [-]
    act_bytes : bytes per activation element (2 for bf16) [B]
    tp : t, tensor-parallel degree [-]
    sequence_parallel : True for sequence parallelism (Korthikanti et al. [2]) [-]
    column_linears : without SP, the column-parallel linears that read a block input, summed
        over attention and MLP: each all-reduces its input gradient in backward. Megatron fuses
        QKV and gate/up: 2. torch ``ColwiseParallel`` on separate q, k, v, gate, up: 5 (4 for
        a GELU MLP) [-]
    regather_input : with SP, the backward all-gathers each block's sequence-sharded input
        again for the weight gradient (Megatron [3]; 2 more all-gathers per layer). False when
        autograd keeps the gathered input (torch DTensor) [-]

    Returns
    -------
    dict of arrays ``{phase}_{kind}_{calls|bytes}``, phase in :data:`PHASES`, kind in
    :data:`TP_KINDS` [-] and [B].

    Notes
    -----
    With m = tokens·h·e, the bytes of one ``[b, s, h]`` activation ([1] §3, Fig. 3; [2]
    §4.2.2, Fig. 5)::

        no SP   forward   2 all-reduce (g after attention and after the MLP)       2 m
                backward  column_linears all-reduce (f before attention, MLP)      c·m
        SP      forward   2 all-gather (g) + 2 reduce-scatter (ḡ)                  2 m + 2 m
                backward  2 reduce-scatter (g') + 2 all-gather (ḡ')                2 m + 2 m
                          + 2 all-gather of the block input if regather_input      2 m

    Each all-reduce of m bytes moves as much as one reduce-scatter plus one all-gather of m
    (ring: 2(t−1)/t·m), so SP costs no more bandwidth than TP ([2] §4.2.2), except for the
    re-gather. t = 1 gives zeros.
    """
    t = check_at_least_one("tp", tp)
    m = as_array(tokens) * as_array(d_model) * as_array(act_bytes)  # one [b·s, h] activation
    sp, plain, regather = _masks(t, sequence_parallel, regather_input)
    shape = _broadcast_shape(m, sp, as_array(column_linears), regather)
    out = _empty(shape)
    two_sp = 2.0 * sp
    counts = {
        "forward_all_reduce": 2.0 * plain,                     # g: attention out, MLP out
        "backward_all_reduce": as_array(column_linears) * plain,  # f': each input projection
        "forward_all_gather": two_sp,                          # g: block inputs gathered
        "forward_reduce_scatter": two_sp,                      # ḡ: block outputs scattered
        "backward_reduce_scatter": two_sp,                     # g': input gradients
        "backward_all_gather": (2.0 + 2.0 * regather) * sp,    # ḡ': output gradients (+ inputs)
    }
    volumes = {}  # kinds of equal counts share one table entry (a caller may cost it once)
    for key, calls in counts.items():
        out[f"{key}_calls"] = _full(calls, shape)
        if id(calls) not in volumes:
            volumes[id(calls)] = _full(calls * m, shape)
        out[f"{key}_bytes"] = volumes[id(calls)]
    return out


def tp_head_collectives(tokens, d_model, vocab_size, act_bytes, tp, sequence_parallel,
                        loss_parallel=True, *, regather_input=True, loss_bytes=4.0,
                        target_logit_bytes=4.0):
    """Collectives of the vocab-parallel embedding, LM head and loss, per micro-batch.

    Parameters
    ----------
    tokens, d_model, act_bytes, tp, sequence_parallel : as :func:`tp_layer_collectives`
    vocab_size : V [-]
    loss_parallel : True: the logits stay split over the vocabulary and the cross-entropy
        all-reduces three per-token scalars (Megatron ``vocab_parallel_cross_entropy``, torch
        ``loss_parallel``). False (torch only): the LM head all-gathers the logits [-]
    regather_input : with SP, the LM head's backward all-gathers its input again (Megatron) [-]
    loss_bytes : bytes of the per-token max and sum-exp all-reduces (fp32 in both) [B]
    target_logit_bytes : bytes of the per-token target-logit all-reduce: 4 in Megatron (it
        casts the logits to fp32), the logits' dtype in torch (2 for bf16 logits) [B]

    Returns
    -------
    dict as :func:`tp_layer_collectives`, and the two parts of ``forward_all_reduce``, whose
    sizes differ (an m-byte embedding all-reduce, three loss all-reduces of a few bytes per
    token; NCCL picks an algorithm for each call): ``forward_embedding_all_reduce_*`` and
    ``forward_loss_all_reduce_*`` (calls, bytes).

    Notes
    -----
    With m = tokens·h·e::

        embedding  rows split over V; each rank looks up its rows, zeros elsewhere
                   no SP: forward all-reduce m           SP: forward reduce-scatter m,
                                                              backward all-gather m
        LM head    column-parallel over V
                   no SP: backward all-reduce m (f')     SP: forward all-gather m, backward
                                                              reduce-scatter m (+ all-gather m)
        loss       loss_parallel: forward 3 all-reduces of tokens scalars: max (MAX), sum of
                   exp, target logit (SUM); no backward communication (the gradient is
                   softmax − one-hot on each rank's vocabulary slice) [3][4].
                   otherwise: forward all-gather of the logits, tokens·V·e.

    Megatron [3] reduces max, target logit, sum-exp, all fp32. torch [4] (``_log_softmax``,
    ``_nll_loss_forward``) reduces max and sum-exp in the fp32 computation dtype, then the
    target logit gathered from the log-softmax output, which is cast back to the logits'
    dtype. With SP both compute the loss on every token of the sequence (the LM head input was
    gathered).
    """
    t = check_at_least_one("tp", tp)
    n = as_array(tokens)
    m = n * as_array(d_model) * as_array(act_bytes)
    sp, plain, regather, split_loss, gathered_logits = _masks(t, sequence_parallel,
                                                              regather_input, loss_parallel)
    loss_scalars = n * (2.0 * as_array(loss_bytes) + as_array(target_logit_bytes))
    logits = n * as_array(vocab_size) * as_array(act_bytes)
    one_plain, one_sp = (1.0 * plain, plain * m), (1.0 * sp, sp * m)  # shared by two kinds
    terms = {  # key: (calls, bytes)
        "forward_all_reduce": (plain + 3.0 * split_loss,           # embedding; loss scalars
                               plain * m + split_loss * loss_scalars),
        "backward_all_reduce": one_plain,                          # LM-head input gradient
        "forward_reduce_scatter": one_sp,                          # embedding output
        "forward_all_gather": (sp + 1.0 * gathered_logits,         # LM-head input; logits
                               sp * m + gathered_logits * logits),
        "backward_all_gather": (sp * (1.0 + regather),             # embedding grad (+ input)
                                sp * (1.0 + regather) * m),
        "backward_reduce_scatter": one_sp,                         # LM-head input gradient
        # the forward all-reduces' two parts (not counted again in the totals above)
        "forward_embedding_all_reduce": one_plain,
        "forward_loss_all_reduce": (3.0 * split_loss, split_loss * loss_scalars),
    }
    shape = _broadcast_shape(*[x for pair in terms.values() for x in pair])
    out = _empty(shape)
    for key, (calls, nbytes) in terms.items():
        out[f"{key}_calls"] = _full(calls, shape)
        out[f"{key}_bytes"] = _full(nbytes, shape)
    return out


def ring_wire_bytes(all_reduce_bytes, all_gather_bytes, reduce_scatter_bytes, group_size):
    """Bytes one rank sends for these collectives as rings over ``group_size`` ranks [B].

    ``(k−1)/k · (2·AR + AG + RS)`` with AG the gathered output and RS the input (Thakur et al.
    2005; Patarasuk & Yuan 2009): an all-reduce is a reduce-scatter plus an all-gather.
    """
    k = check_at_least_one("group_size", group_size)
    return (k - 1.0) / k * (2.0 * as_array(all_reduce_bytes) + as_array(all_gather_bytes)
                            + as_array(reduce_scatter_bytes))


# -- per-rank shapes -----------------------------------------------------------------------------
#: (pattern on the parameter name, role). Column-parallel: split dim 0; row-parallel: dim 1;
#: vocab: dim 0; replicated: whole on every TP rank.
_ROLES = (
    (r"(^|\.)attn\.(q|k|v|q_b|kv_b)\.(weight|bias)$", "column"),  # MLA's up projections by head
    (r"(^|\.)attn\.sinks$", "column"),                              # one logit per head
    (r"(^|\.)mlp\.(experts\.\d+\.|shared\.)?(gate|up)\.(weight|bias)$", "column"),
    (r"(^|\.)(attn\.o|mlp\.(experts\.\d+\.|shared\.)?down)\.weight$", "row"),
    (r"(^|\.)(attn\.o|mlp\.(experts\.\d+\.|shared\.)?down)\.bias$", "row_bias"),
    (r"(^|\.)(tok_emb\.weight|lm_head\.weight|lm_head\.bias)$", "vocab"),
    (r"(^|\.)(attn_norm|mlp_norm|norm|attn\.(q_a_norm|kv_a_norm|q_norm|k_norm))\.(weight|bias)$",
     "norm"),
    (r"(^|\.)pos_emb\.weight$", "replicated"),
    # MLA's down projections stay whole on every TP rank (Megatron-Core MLA: linear_q_down_proj
    # and linear_kv_down_proj are not split)
    (r"(^|\.)attn\.(q_a|kv_a)\.weight$", "replicated"),
    (r"(^|\.)mlp\.router\.(weight|bias|score_bias)$", "router"),
)


@functools.lru_cache(maxsize=4096)  # a handful of names, looked up on every predict
def tp_role(name: str) -> str:
    """How tensor parallelism splits the parameter ``name`` of
    :meth:`fsdpsim.model.spec.ModelSpec.unit_parameter_shapes`: ``"column"`` (dim 0), ``"row"``
    (dim 1), ``"vocab"`` (dim 0), or replicated: ``"row_bias"``, ``"norm"``, ``"replicated"``
    (learned positions), ``"router"`` (MoE router, Megatron keeps it whole)."""
    for pattern, role in _ROLES:
        if re.search(pattern, name):
            return role
    raise ConfigError(f"parameter {name!r}: no tensor-parallel layout known; accepted names "
                      f"are those of ModelSpec.unit_parameter_shapes()")


def tp_local_shapes(shapes, tp: int):
    """Per-TP-rank shapes of ``(name, shape)`` pairs (or a dict of such lists) [-].

    Column-parallel weights and their biases (attention q, k, v; MLP gate, up; every expert's)
    split dim 0; row-parallel weights (attention o, MLP down) split dim 1 and keep their bias
    whole; the token embedding and the LM head (and its bias) split the vocabulary dim 0;
    norms, learned positions and the MoE router stay whole ([1] §3; torch ``ColwiseParallel``,
    ``RowwiseParallel``, ``SequenceParallel``). FSDP2 then shards these local tensors on dim 0
    over the data-parallel mesh (torchtitan 2-D), padding each to ``ceil(d0/dp)·dp`` rows.

    Raises
    ------
    ConfigError
        When a split dimension is not divisible by ``tp`` (naming the parameter and sizes).
    """
    if isinstance(shapes, dict):
        return {unit: tp_local_shapes(pairs, tp) for unit, pairs in shapes.items()}
    if isinstance(tp, bool) or int(tp) != tp or tp < 1:
        raise ConfigError(f"tp={tp!r} must be an integer >= 1")
    tp = int(tp)
    out = []
    for name, shape in shapes:
        shape = tuple(int(x) for x in shape)
        role = tp_role(name)
        dim = {"column": 0, "vocab": 0, "row": 1}.get(role)
        if dim is not None:
            if shape[dim] % tp:
                raise ConfigError(
                    f"{name} {shape}: dim {dim} ({shape[dim]}) % tp({tp}) != 0; "
                    f"{role}-parallel parameters need a size divisible by the TP degree")
            shape = shape[:dim] + (shape[dim] // tp,) + shape[dim + 1:]
        out.append((name, shape))
    return out


def tp_grad_sync(shapes, grad_bytes, tp, sequence_parallel, *, implementation="megatron",
                 reductions_per_tensor=1):
    """All-reduce over the TP group of the replicated parameters' gradients under SP.

    With sequence parallelism a norm sees only its sequence shard, so its weight gradient is a
    partial sum over the TP ranks; without SP every rank computes the same gradient and
    nothing is reduced.

    Parameters
    ----------
    shapes : (name, shape) pairs, the full (not TP-local) shapes [-]
    grad_bytes : bytes per gradient element (Megatron: 4, its fp32 main grads) [B]
    tp, sequence_parallel : as :func:`tp_layer_collectives`
    implementation : ``"megatron"``: one coalesced all-reduce per step of the norms, the
        row-parallel biases (added after the reduce-scatter, on the sequence shard) and the
        MoE router (``finalize_model_grads`` [3]). ``"torch"``: one all-reduce per norm tensor;
        row-parallel biases need none (their gradient is taken after the all-gather) [-]
    reductions_per_tensor : torch only: how often each norm gradient is reduced. 1 with
        FSDP2 (once per micro-batch, before its reduce-scatter); without FSDP the gradient
        stays ``Partial`` and is all-reduced on every use: 3 per step for AdamW
        (``foreach=False``: ``lerp_`` and ``addcmul_`` with the gradient twice) [-]

    Returns
    -------
    dict with ``calls`` and ``bytes`` [-], [B].
    """
    if implementation not in IMPLEMENTATIONS:
        raise ConfigError(f"implementation={implementation!r} is not one of: "
                          f"{', '.join(IMPLEMENTATIONS)}")
    roles = ("norm", "row_bias", "router") if implementation == "megatron" else ("norm",)
    synced = [int(np.prod(shape)) for name, shape in shapes if tp_role(name) in roles]
    on = (check_at_least_one("tp", tp) > 1) & np.asarray(sequence_parallel, dtype=bool)
    nbytes = float(sum(synced)) * as_array(grad_bytes)
    if implementation == "megatron":
        calls = on * float(len(synced) > 0)
        return {"calls": calls * 1.0, "bytes": on * nbytes}
    reps = as_array(reductions_per_tensor)
    return {"calls": on * reps * len(synced), "bytes": on * reps * nbytes}


# -- context parallelism -------------------------------------------------------------------------
def cp_ring_attention_bytes(tokens, kv_dim, act_bytes, cp, tp=1, *, implementation="megatron",
                            rotate="all_gather", grad_accum_bytes=4.0):
    """Ring-attention communication of one layer per micro-batch on one rank [B] and [-].

    Parameters
    ----------
    tokens : b·s before the CP split [-]
    kv_dim : width of K (= V) at the attention kernel: kv_heads·head_size (GQA kernels), or
        n_heads·head_size when K and V are repeated before it [-]
    act_bytes : bytes per K, V element [B]
    cp : context-parallel degree [-]
    tp : tensor-parallel degree (splits the heads) [-]
    implementation : ``"megatron"`` (TransformerEngine P2P) or ``"torch"`` [-]
    rotate : torch only: ``"all_gather"`` (default ``_RotateMethod``) or ``"all_to_all"`` [-]
    grad_accum_bytes : torch only: bytes of the rotated dK, dV (fp32, ``convert_to_f32``) [B]

    Returns
    -------
    dict with ``forward_calls``, ``forward_bytes``, ``backward_kv_calls``, ``backward_kv_bytes``,
    ``backward_dkv_calls``, ``backward_dkv_bytes``. Bytes: send/recv and all-to-all count the
    input, all-gather the gathered output.

    Notes
    -----
    Each rank holds tokens/cp tokens (chunks i and 2cp−1−i of the sequence, so every rank does
    1/cp of the causal work: :func:`cp_attention_flops_share`); its K, V block is
    ``kv = 2 · tokens/cp · kv_dim/tp · e`` bytes. The queries stay; the K, V blocks travel the
    ring ([5] §3)::

        megatron  forward   cp−1 send/recv of kv
                  backward  cp−1 of kv, cp−1 of dK,dV (dkv, same dtype); TE packs both into one
                            send per step: cp steps (step 0 kv only, the last dkv only)
        torch     forward   all_gather: 1 all-gather, output cp·kv; all_to_all: cp−1 × kv
                  backward  K, V as forward; dK, dV: cp all-to-all hops of the fp32
                            accumulator (each starts at its owner and returns to it)

    Hand-worked: b = 2, s = 16, 2 heads of 8 (kv_dim 16), fp32, cp = 2, tp = 1: kv = 2·16·16·4
    = 2048 B; torch forward all-gather 4096 B; backward all-gather 4096 B and 2 × 2048 B of
    dK, dV; Megatron 2048 B forward, 2048 + 2048 B backward.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ConfigError(f"implementation={implementation!r} is not one of: "
                          f"{', '.join(IMPLEMENTATIONS)}")
    if rotate not in ROTATE_METHODS:
        raise ConfigError(f"rotate={rotate!r} is not one of: {', '.join(ROTATE_METHODS)}")
    c = check_at_least_one("cp", cp)
    t = check_at_least_one("tp", tp)
    block = as_array(tokens) / c * as_array(kv_dim) / t       # K (= V) elements on this rank
    kv = 2.0 * block * as_array(act_bytes)                     # K and V
    hops = c - 1.0                                             # ring steps to see every block
    if implementation == "megatron":
        return {"forward_calls": hops, "forward_bytes": hops * kv,
                "backward_kv_calls": hops, "backward_kv_bytes": hops * kv,
                "backward_dkv_calls": hops, "backward_dkv_bytes": hops * kv}
    on = c > 1
    if rotate == "all_gather":
        kv_calls, kv_bytes = 1.0 * on, on * c * kv            # one gather of every block
    else:
        kv_calls, kv_bytes = hops, hops * kv
    dkv = 2.0 * block * as_array(grad_accum_bytes)
    return {"forward_calls": kv_calls, "forward_bytes": kv_bytes,
            "backward_kv_calls": kv_calls, "backward_kv_bytes": kv_bytes,
            "backward_dkv_calls": on * c, "backward_dkv_bytes": on * c * dkv}


def cp_all_to_all_bytes(tokens, q_dim, kv_dim, act_bytes, cp, tp=1):
    """DeepSpeed-Ulysses all-to-alls of one layer per micro-batch on one rank [B] and [-].

    Before attention Q, K and V are re-sharded from the sequence to the heads (3 all-to-alls),
    after it the output goes back (1); backward runs the reverse of each ([6] §3.1,
    ``DistributedAttention``). Input bytes per call: ``tokens/cp · width/tp · e``. Returns
    ``forward_calls``, ``forward_bytes``, ``backward_calls``, ``backward_bytes``; each rank
    sends (cp−1)/cp of them ([6] §3.2: 4·N·h/P per link for MHA). Needs the heads on a TP
    rank divisible by cp (:func:`check_context_parallel`).
    """
    c = check_at_least_one("cp", cp)
    t = check_at_least_one("tp", tp)
    per_token = (as_array(q_dim) + 2.0 * as_array(kv_dim)   # q, k, v in
                 + as_array(q_dim)) / t                      # attention output back
    nbytes = np.where(c > 1, as_array(tokens) / c * per_token * as_array(act_bytes), 0.0)
    calls = 4.0 * (c > 1)
    return {"forward_calls": calls, "forward_bytes": nbytes,
            "backward_calls": calls, "backward_bytes": nbytes}


def cp_attention_flops_share(cp, causal_skip=True):
    """Fraction of the unsharded attention-core FLOPs one CP rank executes [-].

    With load-balanced chunks (i and 2cp−1−i) every rank computes the same number of causal
    query-key pairs, 1/cp of them, which is the share for kernels that skip masked tiles
    (``causal_skip``). Counting every kernel call's full q × k square (``FlopCounterMode``,
    PaLM convention) a rank runs one causal call on its 2 chunks (4c² pairs, c = s/(2cp))
    and cp−1 unmasked calls of 2c², against s² unsharded: ``(cp+1)/(2·cp²)``.
    """
    c = check_at_least_one("cp", cp)
    return np.where(causal_skip, 1.0 / c, (c + 1.0) / (2.0 * c * c))


def cp_feasible(seq_len, n_heads, n_kv_heads, cp, tp=1, method="ring"):
    """Boolean mask of the (seq_len, heads, cp, tp) combinations a CP method accepts [-].

    ``"ring"`` (load-balanced): ``seq_len % (2·cp) == 0``. ``"ulysses"``: ``seq_len % cp == 0``
    and the query and KV heads on a TP rank divisible by cp.
    """
    s, c, t = as_array(seq_len), as_array(cp), as_array(tp)
    if method == "ring":
        return np.mod(s, 2.0 * c) == 0
    if method == "ulysses":
        q_local, kv_local = as_array(n_heads) / t, as_array(n_kv_heads) / t
        return ((np.mod(s, c) == 0) & (np.mod(q_local, c) == 0) & (np.mod(kv_local, c) == 0)
                & (np.mod(as_array(n_kv_heads), t) == 0))
    raise ConfigError(f"method={method!r} is not one of: ring, ulysses")


def check_context_parallel(seq_len, n_heads, n_kv_heads, cp, tp=1, method="ring") -> None:
    """Raise :class:`ConfigError` naming every degree when :func:`cp_feasible` is False."""
    if not all_of(cp_feasible(seq_len, n_heads, n_kv_heads, cp, tp, method)):
        need = ("seq_len divisible by 2*cp" if method == "ring" else
                "seq_len divisible by cp and n_heads/tp, n_kv_heads/tp divisible by cp")
        raise ConfigError(f"{method} context parallelism: seq_len({seq_len}), n_heads({n_heads}),"
                          f" n_kv_heads({n_kv_heads}), cp({cp}), tp({tp}): needs {need}")
