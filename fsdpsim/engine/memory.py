"""Engine stage 5 (memory): the per-GPU peak of every pipeline stage that can bind, through
:func:`fsdpsim.costs.memory.peak_memory_bytes`, and the ceilings it implies.

Without pipelining one stage holds everything. With ``pp > 1`` the first stage holds the
embedding, its layers and the most micro-batches in flight (the schedule's count,
:func:`fsdpsim.costs.schedule.in_flight_microbatches`); the last stage holds the final norm, the
LM head (a copy of a tied embedding), one micro-batch in flight under 1F1B and the logits. Both
are evaluated and the larger peak decides ``fits`` (``memory.stages`` in the report).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from fsdpsim.costs import ceilings as memory_ceilings
from fsdpsim.costs import comm, memory
from fsdpsim.costs.compute import (NUMBER_TYPES, all_of, any_of, as_values, broadcast_shape,
                                   minimum, where)
from fsdpsim.costs.memory_inputs import MemoryInputs
from fsdpsim.engine import groups
from fsdpsim.engine.distinct import RowsView
from fsdpsim.engine.inputs import Prepared

#: Optimizer-state bytes per parameter: two fp32 moments (AdamW) or one momentum (SGD).
OPTIMIZER_STATE_BYTES_PER_PARAM = {"adamw": 8.0, "sgd": 4.0}
#: Megatron keeps the fp32 master copy of its bf16 parameters with the optimizer state.
MEGATRON_MASTER_BYTES = 4.0


def state_bytes_per_param(compute_bytes, reduce_bytes, optimizer, megatron):
    """Bytes per parameter of the resident parameter copy, the gradient and the optimizer
    states of the training recipe: (p, g, K) of :func:`fsdpsim.costs.memory.model_state_bytes`.

    PyTorch recipe: fp32 parameters (the master copy) and gradients; Megatron's: bf16
    parameters, main gradients in the reduce dtype (fp32 by default, bf16 in NeMo's performance
    recipes: grad_reduce_in_fp32 = False), and the fp32 master copy with the optimizer
    (Megatron-LM distrib_optimizer.md: 2 + 4 + 12/N bytes per parameter). ``optimizer`` is the
    engine's code (0 AdamW, 1 SGD); ``megatron`` > 0 for Megatron's recipe. A checkpoint holds
    p + K of them (:func:`fsdpsim.costs.goodput.checkpoint_bytes`).
    """
    megatron = np.asarray(megatron) > 0
    param_bytes = where(megatron, compute_bytes, 4.0)
    grad_bytes = where(megatron, reduce_bytes, 4.0)
    optimizer_bytes = (where(np.asarray(optimizer) == 0,
                             OPTIMIZER_STATE_BYTES_PER_PARAM["adamw"],
                             OPTIMIZER_STATE_BYTES_PER_PARAM["sgd"])
                       + where(megatron, MEGATRON_MASTER_BYTES, 0.0))
    return param_bytes, grad_bytes, optimizer_bytes


def memory_config(g: Prepared, stage: str = "only",
                  shared: Mapping[str, object] | None = None) -> dict[str, object]:
    """Keyword arguments of :func:`memory.peak_memory_bytes` for the engine inputs ``g`` (as
    :func:`fsdpsim.engine.prepare` returns them) and a pipeline ``stage``: "only" (no
    pipelining: every layer and the whole root), "first", "mid" (the busiest middle stage,
    ``mid_stage``: no embedding, no head) or "last". ``shared``: the keywords
    every stage shares (:func:`shared_memory_config` of ``g``), when the caller has them.

    PyTorch FSDP recipe: fp32 sharded master parameters and gradients, AdamW's two fp32 moments
    (SGD: one momentum buffer), gathered parameters and computed gradients in the compute dtype,
    gradients reduced in ``reduce_bytes``. SHARD_GRAD_OP keeps every unit's gathered parameters
    from forward to the end of backward, which is "full" without resharding in memory terms
    (see :mod:`fsdpsim.costs.memory`). The root unit (embeddings, LM head) is not resharded
    after forward, so it stays gathered: ``resident_numel``. Parameter counts are one tensor-
    parallel rank's (:func:`fsdpsim.engine.build.model_inputs`).
    """
    config = dict(shared_memory_config(g) if shared is None else shared)
    if stage == "only":
        n_layers, vocab = g.n_layers, g.vocab_size
        n_params, padded = g.n_params_rank, g.n_params_padded
        unit, root = g.block_numel_padded, g.root_numel_padded
    else:
        from fsdpsim.costs import schedule

        first, mid = stage == "first", stage == "mid"
        n_layers = getattr(g, f"layers_{stage}")
        # Micro-batches in flight on the stage at its peak (the schedule's count; the first
        # stage holds the most, the last one under 1F1B, more when interleaved).
        index = 0.0 if first else g.mid_stage if mid else g.pp - 1.0
        config["saved_microbatches"] = schedule.in_flight_microbatches(
            g.pp_schedule, g.pp, g.vpp, g.grad_accum, index)
        # a middle stage holds neither the embedding nor the head and logits
        vocab = g.vocab_size if stage == "last" else 0.0
        root_rank = (g.embed_numel_rank if first else 0.0 if mid
                     else g.head_numel_rank)
        root = (g.embed_numel_padded if first else 0.0 if mid
                else g.head_numel_padded)
        unit = g.block_numel_padded
        n_params = n_layers * g.block_numel_rank + root_rank
        padded = n_layers * unit + root
    accumulate, stage_free = config.pop("_accumulate"), config.pop("_stage_free", None)
    config.update(n_params=n_params, unit_numel=unit, resident_numel=root,
                  padded_n_params=padded, n_layers=n_layers, vocab_size=vocab,
                  accumulated_grad_numel=(0.0 if accumulate is None
                                          else where(accumulate, padded, 0.0)))
    rl = np.asarray(g.recompute_layers)
    if any_of(rl >= 0):
        config["recomputed_layers"] = where(rl >= 0, rl, n_layers)
    if (any_of(g.moe_layers > 0) or any_of(g.mtp_layers > 0)):
        from fsdpsim.engine.moe import memory_update

        config = memory_update(g, config, stage, stage_free)
    if any_of(g.rc_mla_up_proj > 0) or any_of(g.rc_mlp > 0) or any_of(g.rc_moe_act > 0):
        from fsdpsim.engine.module_recompute import module_recompute_freed_bytes

        n_moe = g.moe_layers if stage == "only" else getattr(g, f"moe_layers_{stage}")
        mtp = g.mtp_layers if stage in ("only", "last") else 0.0
        config["moe_saved_bytes_per_token"] = (
            config.get("moe_saved_bytes_per_token", 0.0)
            - module_recompute_freed_bytes(g, n_layers, n_moe, mtp))
    return config


def shared_memory_config(g: Prepared) -> dict[str, object]:
    """The keywords of :func:`memory_config` that are the same on every pipeline stage (and
    ``_accumulate``: where the unsharded gradient accumulates, None for no row; ``_stage_free``:
    a table the stages fill with terms that do not depend on the stage, each computed once)."""
    strategy = as_values(g.strategy)
    mem_strategy = where(strategy == comm.GRAD_OP, comm.FULL, strategy)
    keep = as_values(g.keep_gathered) > 0
    reshard = where((strategy == comm.GRAD_OP) | keep, False, g.reshard > 0)
    sync_last = as_values(g.grad_sync_last) > 0
    accumulate = None
    if any_of(sync_last):
        sharded_grads = ((strategy == comm.FULL) | (strategy == comm.HYBRID)
                         | (strategy == comm.GRAD_OP))
        accumulate = sync_last & sharded_grads & (as_values(g.grad_accum) > 1)
    param_bytes, grad_bytes, optimizer_bytes = state_bytes_per_param(
        g.compute_bytes, g.reduce_bytes, g.optimizer, g.megatron)
    config = dict(
        shard_size=g.shard_size, replicate_size=g.replicate_size, strategy=mem_strategy,
        reshard_after_forward=reshard, micro_batch=g.micro_batch,
        seq_len=g.seq_len, d_model=g.d_model, q_dim=g.q_dim, kv_dim=g.kv_dim,
        ffn_size=g.ffn_size * g.active_experts, ffn_kind=(g.swiglu > 0).astype(int),
        n_heads=g.n_heads, recompute=as_values(g.recompute).astype(int),
        param_bytes=param_bytes, grad_bytes=grad_bytes,
        optimizer_bytes_per_param=optimizer_bytes,
        compute_param_bytes=g.compute_bytes, compute_grad_bytes=g.compute_bytes,
        reduce_grad_bytes=g.reduce_bytes, flash_attention=g.flash > 0,
        act_bytes=g.compute_bytes, fused_loss=g.fused_loss > 0,
        # Eager PyTorch SwiGLU saves silu(gate) as well (a compiled or fused kernel does not).
        fused_glu=g.fused_glu > 0, dropout=g.dropout > 0,
        linear_bias=g.linear_bias > 0,
        runtime_reserved_bytes=g.runtime_reserved_bytes,
        allocator_fraction=g.allocator_fraction, _accumulate=accumulate, _stage_free={},
        # Codes and degrees come checked from the plan and prepare(): no argument checks.
        check=False,
    )
    if any_of(g.tp > 1) or any_of(g.cp > 1):
        config.update(tp=g.tp, cp=g.cp, sequence_parallel=g.sequence_parallel > 0)
    return config


def stage_memory(g: Prepared, ceilings: bool,
                 stage: str = "only") -> dict[str, np.ndarray]:
    """Peak memory terms of one stage, whether it fits, and (``ceilings``) the largest
    micro-batch and sequence length that fit."""
    return _memory_of(g, memory_config(g, stage), ceilings)


def end_stages_memory(g: Prepared,
                      ceilings: bool) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """:func:`stage_memory` of the first and of the last pipeline stage, from one evaluation:
    the two stages' inputs stacked on a new leading axis (every term is computed entry by
    entry, so each stage's numbers are those of its own call)."""
    shared = shared_memory_config(g)
    configs = memory_config(g, "first", shared), memory_config(g, "last", shared)
    values = (g.memory_bytes, g.cp, *configs[0].values(), *configs[1].values())
    ndim = 0 if all(type(v) in _ONE_VALUE for v in values) else max(map(_ndim, values))
    if ndim == 0 or max(map(_rows, values)) >= SEPARATE_ROWS:
        # one configuration: two calls on numbers beat one on stacked arrays; a sweep's group:
        # each stage's arrays stay in cache (stacked, they are twice the size)
        return tuple(_memory_of(g, config, ceilings) for config in configs)
    both = {key: (a if a is configs[1][key] else _stack_pair(a, configs[1][key], ndim))
            for key, a in configs[0].items()}
    out = _memory_of(g, both, ceilings)
    return tuple({key: (v[i] if np.ndim(v) > ndim else v) for key, v in out.items()}
                 for i in (0, 1))


#: Types of one value (a configuration's keywords; None: a keyword not used).
_ONE_VALUE = NUMBER_TYPES | frozenset((bool, np.bool_, np.int64, type(None)))


#: From this many rows on, :func:`end_stages_memory` evaluates the two stages one after the
#: other (measured 10 % quicker on 42,358 rows of bench_sweep's hybrid Mixtral mix).
SEPARATE_ROWS = 4_096


def _rows(v) -> int:
    """Entries of a memory keyword (1 for one value)."""
    return v.size if type(v) is np.ndarray else 1


def _ndim(v) -> int:
    """``np.ndim(v)``, read off numpy values directly (this runs for every memory keyword)."""
    if type(v) in NUMBER_TYPES or type(v) is bool:
        return 0
    return v.ndim if isinstance(v, (np.ndarray, np.generic)) else np.ndim(v)


def _stack_pair(a, b, ndim) -> np.ndarray:
    """``a`` and ``b`` broadcast together (padded to ``ndim`` dimensions), stacked on a new
    leading axis, their dtype kept."""
    if not (_ndim(a) or _ndim(b)):  # two single values
        return np.array([a, b], dtype=np.result_type(a, b)).reshape((2,) + (1,) * ndim)
    shape = broadcast_shape(np.shape(a), np.shape(b))
    out = np.empty((2,) + (1,) * (ndim - len(shape)) + shape, dtype=np.result_type(a, b))
    out[0], out[1] = a, b
    return out


def _memory_of(g: Prepared, config: Mapping[str, object],
               ceilings: bool) -> dict[str, np.ndarray]:
    """:func:`stage_memory` for the keywords ``config`` of :func:`memory_config`."""
    capacity = g.memory_bytes
    inputs = MemoryInputs.of(**config)  # the typed inputs: a misspelt keyword fails here
    # With the ceilings, the peak and both solves share one evaluation of the memory model.
    out = (memory_ceilings.peak_and_ceilings_of(capacity, inputs) if ceilings
           else memory.binding_terms(*memory.memory_moments(inputs)))
    limits = {key: out.pop(key) for key in ("max_micro_batch", "max_seq_len") if key in out}
    shape = np.shape(out["peak_bytes"])
    out["capacity_bytes"] = (np.broadcast_to(capacity, shape).astype(float) if shape
                             else np.float64(capacity))  # one configuration: a number
    out["fits"] = memory_ceilings.fits(out["peak_bytes"], capacity)
    if ceilings:  # max_micro_batch at seq_len, max_seq_len at micro_batch
        out["max_micro_batch"] = limits["max_micro_batch"].astype(float)
        out["max_seq_len"] = limits["max_seq_len"].astype(float)
        if any_of(g.cp > 1):  # ring CP needs the sequence in 2·cp chunks (rows with cp > 1)
            multiple = where(g.cp > 1, 2.0 * g.cp, 1.0)
            out["max_seq_len"] = np.floor(out["max_seq_len"] / multiple) * multiple
    return out


def engine_memory(g: Prepared, ceilings: bool) -> dict[str, np.ndarray]:
    """Memory of the binding stage: the only one without pipelining, else the largest peak of
    the first and last stages (each kept as ``peak_bytes_first_stage`` /
    ``peak_bytes_last_stage``) and, where an uneven split gives a middle stage more layers
    than the first, of the busiest middle stage (``peak_bytes_mid_stage``: NaN on the other
    rows, as on the rows of a grid's groups without such a stage)."""
    if not any_of(g.pp > 1):
        out = stage_memory(g, ceilings)
        out["peak_bytes_first_stage"] = out["peak_bytes_last_stage"] = out["peak_bytes"]
        return out
    piped = g.pp > 1
    # The single stage only for rows without pipelining (a sweep may mix them in).
    only = None if all_of(piped) else stage_memory(g, ceilings)
    first, last = end_stages_memory(g, ceilings)
    use_first = first["peak_bytes"] >= last["peak_bytes"]

    def per_row(staged, key):
        return staged if only is None else where(piped, staged, only[key])

    out = {}
    for key in first:
        if key in ("max_micro_batch", "max_seq_len"):
            staged = minimum(first[key], last[key])
        else:
            staged = where(use_first, first[key], last[key])
        out[key] = per_row(staged, key)
    out["peak_bytes_first_stage"] = per_row(first["peak_bytes"], "peak_bytes")
    out["peak_bytes_last_stage"] = per_row(last["peak_bytes"], "peak_bytes")
    # An uneven split whose busiest middle stage holds more layers than the first: its
    # memory may bind too (with an even split it never exceeds the first stage's).
    heavier = piped & (g.layers_mid > g.layers_first)
    if any_of(heavier):
        mid = _on_rows(heavier, lambda rows: stage_memory(rows, ceilings, "mid"), g)
        binds = heavier & (mid["peak_bytes"] > out["peak_bytes"])
        for key in first:
            if key in ("max_micro_batch", "max_seq_len"):
                out[key] = where(heavier, minimum(out[key], mid[key]), out[key])
            else:
                out[key] = where(binds, mid[key], out[key])
        out["peak_bytes_mid_stage"] = where(heavier, mid["peak_bytes"], np.nan)
    return out


#: Where at most this share of a group's rows has a heavier middle stage, that stage's memory is
#: evaluated on those rows alone (:func:`_on_rows`).
SUBSET_SHARE = 0.75


def _on_rows(mask, evaluate, g: Prepared) -> dict[str, object]:
    """``evaluate(g)``, a stage's memory, where it is read only on the rows ``mask`` holds:
    evaluated on those rows alone where they are at most :data:`SUBSET_SHARE` of a long group
    (every term is computed row by row, so theirs are the same numbers), each output then on
    every row, :func:`fsdpsim.engine.groups.no_value` on the others, which the caller does
    not read."""
    if type(mask) is not np.ndarray or mask.ndim != 1 or mask.size < _SUBSET_MIN_ROWS:
        return evaluate(g)
    held = int(np.count_nonzero(mask))
    if held > SUBSET_SHARE * mask.size:
        return evaluate(g)
    rows = np.flatnonzero(mask)
    out = {}
    for key, value in evaluate(RowsView.of(g, rows, mask.size)).items():
        if type(value) is np.ndarray and value.shape == rows.shape:
            full = np.full(mask.size, groups.no_value(value.dtype), dtype=value.dtype)
            full[rows] = value
            value = full
        out[key] = value
    return out


#: Groups of fewer rows evaluate every stage on all of them (:func:`_on_rows`).
_SUBSET_MIN_ROWS = 4_096
