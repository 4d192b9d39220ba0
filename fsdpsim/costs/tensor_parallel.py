"""Tensor and sequence parallelism: collectives per layer and per-rank shapes (context
parallelism's: :mod:`fsdpsim.costs.context_parallel`).

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
from collections import namedtuple

import numpy as np

from fsdpsim.costs.args import check_at_least_one
from fsdpsim.costs.compute import all_of, as_array
from fsdpsim.util.errors import ConfigError

#: Collective kinds of tensor parallelism and the passes they run in.
TP_KINDS = ("all_reduce", "all_gather", "reduce_scatter")
PHASES = ("forward", "backward")
#: Who issues the collectives (see the module table).
IMPLEMENTATIONS = ("megatron", "torch")


#: :func:`tp_layer_collectives`' table: ``{phase}_{kind}_{calls|bytes}`` [-], [B].
TpCollectives = namedtuple("TpCollectives", [f"{p}_{k}_{q}" for p in PHASES for k in TP_KINDS
                                             for q in ("calls", "bytes")])
#: :func:`tp_head_collectives`' table: :data:`TpCollectives`' and the forward all-reduce's parts.
TpHeadCollectives = namedtuple("TpHeadCollectives", TpCollectives._fields + tuple(
    f"forward_{part}_all_reduce_{q}" for part in ("embedding", "loss") for q in ("calls", "bytes")))
#: :func:`tp_grad_sync`'s all-reduces [-], [B].
GradSync = namedtuple("GradSync", "calls bytes")


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
    :data:`TpCollectives` of arrays ``{phase}_{kind}_{calls|bytes}``, phase in :data:`PHASES`,
    kind in :data:`TP_KINDS` [-] and [B].

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
    out = {}
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
    return TpCollectives(**out)


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
    :data:`TpHeadCollectives`: as :func:`tp_layer_collectives`, and the two parts of
    ``forward_all_reduce``, whose
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
    out = {}
    for key, (calls, nbytes) in terms.items():
        out[f"{key}_calls"] = _full(calls, shape)
        out[f"{key}_bytes"] = _full(nbytes, shape)
    return TpHeadCollectives(**out)


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
    :data:`GradSync`: ``calls`` and ``bytes`` [-], [B].
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
        return GradSync(calls=calls * 1.0, bytes=on * nbytes)
    reps = as_array(reductions_per_tensor)
    return GradSync(calls=on * reps * len(synced), bytes=on * reps * nbytes)
