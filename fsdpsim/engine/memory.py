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

from fsdpsim.costs import comm, memory

#: Optimizer-state bytes per parameter: two fp32 moments (AdamW) or one momentum (SGD).
OPTIMIZER_STATE_BYTES_PER_PARAM = {"adamw": 8.0, "sgd": 4.0}


def memory_config(g: Mapping[str, np.ndarray], stage: str = "only") -> dict[str, object]:
    """Keyword arguments of :func:`memory.peak_memory_bytes` for the engine inputs ``g`` (as
    :func:`fsdpsim.engine.prepare` returns them) and a pipeline ``stage``: "only" (no
    pipelining: every layer and the whole root), "first" or "last".

    PyTorch FSDP recipe: fp32 sharded master parameters and gradients, AdamW's two fp32 moments
    (SGD: one momentum buffer), gathered parameters and computed gradients in the compute dtype,
    gradients reduced in ``reduce_bytes``. SHARD_GRAD_OP keeps every unit's gathered parameters
    from forward to the end of backward, which is "full" without resharding in memory terms
    (see :mod:`fsdpsim.costs.memory`). The root unit (embeddings, LM head) is not resharded
    after forward, so it stays gathered: ``resident_numel``. Parameter counts are one tensor-
    parallel rank's (:func:`fsdpsim.predict.model_inputs`).
    """
    strategy = np.asarray(g["strategy"])
    mem_strategy = np.where(strategy == comm.GRAD_OP, comm.FULL, strategy)
    keep = np.asarray(g["keep_gathered"]) > 0
    reshard = np.where((strategy == comm.GRAD_OP) | keep, False, g["reshard"] > 0)
    sharded_grads = (strategy == comm.FULL) | (strategy == comm.HYBRID) | (strategy == comm.GRAD_OP)
    if stage == "only":
        n_layers, in_flight, vocab = g["n_layers"], 1.0, g["vocab_size"]
        n_params, padded = g["n_params_rank"], g["n_params_padded"]
        unit, root = g["block_numel_padded"], g["root_numel_padded"]
    else:
        from fsdpsim.costs import schedule

        first = stage == "first"
        n_layers = g["layers_first"] if first else g["layers_last"]
        in_flight = (schedule.in_flight_microbatches(g["pp_schedule"], g["pp"], g["vpp"],
                                                     g["grad_accum"]) if first
                     else np.where(np.asarray(g["pp_schedule"]) == 0, g["grad_accum"], 1.0))
        vocab = 0.0 if first else g["vocab_size"]
        root_rank = g["embed_numel_rank"] if first else g["head_numel_rank"]
        root = g["embed_numel_padded"] if first else g["head_numel_padded"]
        unit = g["block_numel_padded"]
        n_params = n_layers * g["block_numel_rank"] + root_rank
        padded = n_layers * unit + root
    accumulated = np.where((np.asarray(g["grad_sync_last"]) > 0) & sharded_grads
                           & (np.asarray(g.get("grad_accum", 1.0)) > 1), padded, 0.0)
    rl = np.asarray(g["recompute_layers"])
    config = dict(
        n_params=n_params, unit_numel=unit,
        resident_numel=root, padded_n_params=padded,
        shard_size=g["shard_size"], replicate_size=g["replicate_size"], strategy=mem_strategy,
        reshard_after_forward=reshard, n_layers=n_layers, micro_batch=g["micro_batch"],
        seq_len=g["seq_len"], d_model=g["d_model"], q_dim=g["q_dim"], kv_dim=g["kv_dim"],
        ffn_size=g["ffn_size"] * g["active_experts"], ffn_kind=(g["swiglu"] > 0).astype(int),
        n_heads=g["n_heads"],
        vocab_size=vocab, recompute=np.asarray(g["recompute"]).astype(int),
        param_bytes=4.0, grad_bytes=4.0,
        optimizer_bytes_per_param=np.where(np.asarray(g["optimizer"]) == 0,
                                           OPTIMIZER_STATE_BYTES_PER_PARAM["adamw"],
                                           OPTIMIZER_STATE_BYTES_PER_PARAM["sgd"]),
        compute_param_bytes=g["compute_bytes"], compute_grad_bytes=g["compute_bytes"],
        reduce_grad_bytes=g["reduce_bytes"], flash_attention=g["flash"] > 0,
        act_bytes=g["compute_bytes"], fused_loss=g["fused_loss"] > 0,
        # Eager PyTorch SwiGLU saves silu(gate) as well (a compiled or fused kernel does not).
        fused_glu=g["fused_glu"] > 0,
        runtime_reserved_bytes=g["runtime_reserved_bytes"],
        allocator_fraction=g["allocator_fraction"], accumulated_grad_numel=accumulated,
    )
    if np.any(g["tp"] > 1) or np.any(g["cp"] > 1):
        config.update(tp=g["tp"], cp=g["cp"], sequence_parallel=g["sequence_parallel"] > 0)
    if stage != "only":
        config["saved_microbatches"] = in_flight
    if np.any(rl >= 0):
        config["recomputed_layers"] = np.where(rl >= 0, rl, n_layers)
    return config


def stage_memory(g: Mapping[str, np.ndarray], ceilings: bool,
                 stage: str = "only") -> dict[str, np.ndarray]:
    """Peak memory terms of one stage, whether it fits, and (``ceilings``) the largest
    micro-batch and sequence length that fit."""
    config = memory_config(g, stage)
    out = memory.peak_memory_bytes(**config)
    capacity = g["memory_bytes"]
    out["capacity_bytes"] = np.broadcast_to(capacity, np.shape(out["peak_bytes"])).astype(float)
    out["fits"] = memory.fits(out["peak_bytes"], capacity)
    if ceilings:
        no_mb = {k: v for k, v in config.items() if k != "micro_batch"}
        no_s = {k: v for k, v in config.items() if k != "seq_len"}
        multiple = 2.0 * g["cp"] if np.any(g["cp"] > 1) else 1
        out["max_micro_batch"] = memory.max_micro_batch(capacity, **no_mb).astype(float)
        out["max_seq_len"] = memory.max_seq_len(capacity, **no_s).astype(float)
        if np.any(g["cp"] > 1):  # ring CP needs the sequence in 2·cp chunks
            out["max_seq_len"] = np.floor(out["max_seq_len"] / multiple) * multiple
    return out


def engine_memory(g: Mapping[str, np.ndarray], ceilings: bool) -> dict[str, np.ndarray]:
    """Memory of the binding stage: the only one without pipelining, else the larger peak of
    the first and last stages (each kept as ``peak_bytes_first_stage`` /
    ``peak_bytes_last_stage``)."""
    if not np.any(g["pp"] > 1):
        out = stage_memory(g, ceilings)
        out["peak_bytes_first_stage"] = out["peak_bytes_last_stage"] = out["peak_bytes"]
        return out
    only = stage_memory(g, ceilings)
    first = stage_memory(g, ceilings, "first")
    last = stage_memory(g, ceilings, "last")
    piped = g["pp"] > 1
    use_first = first["peak_bytes"] >= last["peak_bytes"]
    out = {}
    for key in first:
        if key in ("max_micro_batch", "max_seq_len"):
            staged = np.minimum(first[key], last[key])
        else:
            staged = np.where(use_first, first[key], last[key])
        out[key] = np.where(piped, staged, only[key])
    out["peak_bytes_first_stage"] = np.where(piped, first["peak_bytes"], only["peak_bytes"])
    out["peak_bytes_last_stage"] = np.where(piped, last["peak_bytes"], only["peak_bytes"])
    return out
