"""Engine stage 4: a pipeline stage's forward and backward per micro-batch with its FSDP/ZeRO
collectives overlapped (:mod:`fsdpsim.costs.overlap`), then the pipeline schedule
(:mod:`fsdpsim.costs.schedule`) and the optimizer step.

Without pipelining the step is the FSDP schedule of the seed model: the first micro-batch's
forward gathers every unit, later ones re-gather unless kept, every backward reduces unless the
gradient sync waits for the last micro-batch, and the last backward carries the once-per-step
collectives (DDP all-reduce, ZeRO-1 reduce-scatter). With ``pp > 1`` every stage runs that
per-micro-batch schedule on its own layers, and the pipeline schedule composes the stages.
"""

from __future__ import annotations

import numpy as np

from fsdpsim.costs import comm, compute, overlap
from fsdpsim.costs.compute import NUMBER_TYPES, any_of, as_values, maximum, where
from fsdpsim.engine.results import ForwardPhases, FsdpFlags, StagePhases


def pick(cond, a, b):
    """``where(cond, a, b)``, but where ``cond`` is one configuration's flag (one boolean) and
    picks a number, that number (a numpy float), not broadcast to the other side's rows
    (predict's configuration and its slower twin): its value on every row, as a single value
    of the engine's outputs serves every row."""
    if type(cond) in _FLAGS:
        side = a if cond else b
        if type(side) in NUMBER_TYPES:
            return np.float64(side)
    return where(cond, a, b)


_FLAGS = frozenset((bool, np.bool_))


def fsdp_flags(g):
    """Which collectives the data-parallel strategy issues, per unit (costs/comm.py table)."""
    strategy = as_values(g.strategy)
    keep = as_values(g.keep_gathered) > 0
    ag_calls, rs_calls, ar_calls = comm.fsdp_calls_per_microbatch(
        strategy, (as_values(g.reshard) > 0) & ~keep)
    fsdp_like = ag_calls > 0
    # Gradient sync on the last micro-batch only (FSDP1 no_sync, FSDP2
    # set_requires_gradient_sync(False)): the others reduce-scatter nothing.
    sync_last = (as_values(g.grad_sync_last) > 0) & (rs_calls > 0)
    k = g.grad_accum
    return FsdpFlags(keep=keep, ag_calls=ag_calls, rs_calls=rs_calls,
                     is_hybrid=strategy == comm.HYBRID, is_ddp=strategy == comm.NONE,
                     is_zero1=strategy == comm.OPTIMIZER, fsdp_like=fsdp_like,
                     sync_last=sync_last,
                     ag_steps=where(keep & fsdp_like, 1.0, k),  # micro-batches that all-gather
                     rs_steps=where(sync_last, 1.0, k))         # micro-batches that reduce


def forward_phases(g, f, t, n_units, block_fwd_s, root_fwd_s, root):
    """Forward of one stage and one micro-batch with its FSDP all-gathers [s]: ``fwd_s``
    (gathering) and ``fwd_kept_s`` (parameters kept gathered); arguments as for
    :func:`stage_phases`."""
    slowdown = g.comm_compute_slowdown
    fsdp_like = f.fsdp_like
    fwd_ag_s = pick(fsdp_like, t.ag_block_s, 0.0)
    fwd_first_s = pick(fsdp_like, root * t.ag_root_s + t.ag_block_s, 0.0)
    fwd_s = overlap.pipelined_phase_s(fwd_first_s, fwd_ag_s, block_fwd_s, n_units, 0.0,
                                      slowdown) + root_fwd_s
    # A framework that synchronises before every gather (deepspeed-zero3-2021) overlaps none:
    # each unit's gathers, then its compute.
    serial_ag = g.dp_gather_overlap <= 0
    if any_of(serial_ag):
        fwd_s = where(serial_ag, root * where(fsdp_like, t.ag_root_s, 0.0)
                      + n_units * (fwd_ag_s + block_fwd_s) + root_fwd_s, fwd_s)
    fwd_kept_s = n_units * block_fwd_s + root_fwd_s  # a later micro-batch on kept parameters
    return ForwardPhases(fwd_s=fwd_s, fwd_kept_s=fwd_kept_s)


def stage_phases(g, f, t, n_units, block_fwd_s, block_bwd_s, root_fwd_s, root_bwd_s, root):
    """Forward and backward of one stage and one micro-batch with its FSDP collectives [s]:
    ``fwd_s`` (gathering), ``fwd_kept_s`` (parameters kept gathered), ``bwd_mb_s`` (a
    micro-batch that is not the last) and ``bwd_last_s`` (the last, with the once-per-step
    collectives). ``root`` (0/1) says whether this stage holds the root unit."""
    slowdown = g.comm_compute_slowdown
    fsdp_like = f.fsdp_like
    serial_ag = g.dp_gather_overlap <= 0
    bwd_ag_s = pick(fsdp_like & (f.ag_calls > 1), t.ag_block_s, 0.0)
    mb_rs_s = pick(f.rs_calls > 0, t.rs_block_s, 0.0)
    mb_ar_s = pick(f.is_hybrid, t.hsdp_ar_block_s, 0.0)
    step_block_comm_s = where(f.is_ddp, t.ddp_ar_block_s,
                              where(f.is_zero1, t.zero1_rs_block_s, 0.0))
    step_root_comm_s = root * where(f.is_ddp, t.ddp_ar_root_s,
                                    where(f.is_zero1, t.zero1_rs_root_s, 0.0))
    root_tail_s = root * (pick(f.rs_calls > 0, t.rs_root_s, 0.0)
                          + pick(f.is_hybrid, t.hsdp_ar_root_s, 0.0))

    def backward_s(block_comm_s, root_comm_s):
        first = maximum(0.0, bwd_ag_s - root_bwd_s)
        head = overlap.slowed_compute_s(root_bwd_s, bwd_ag_s, slowdown)
        stage_comm = bwd_ag_s + block_comm_s
        out = head + overlap.pipelined_phase_s(first, stage_comm, block_bwd_s, n_units,
                                               block_comm_s, slowdown) + root_comm_s
        if any_of(serial_ag):
            # The device synchronisation before each gather also waits for the reduction
            # stream: a unit's gradient reduction cannot outlast the next unit's gather, so
            # gather, compute and reduction run one after another.
            serial = (n_units * (bwd_ag_s + block_bwd_s + block_comm_s) + root_bwd_s
                      + root_comm_s)
            out = where(serial_ag, serial, out)
        return out

    sync_last = f.sync_last
    bwd_mb_s = backward_s(where(sync_last, 0.0, mb_rs_s + mb_ar_s),
                          where(sync_last, 0.0, root_tail_s))
    bwd_last_s = backward_s(mb_rs_s + mb_ar_s + step_block_comm_s, root_tail_s + step_root_comm_s)
    # DDP whose gradient all-reduce runs after the whole backward (megatron-2021), ZeRO-1
    # whose reduce-scatter runs beside none of it (nanotron): the backward, then the calls.
    late = f.is_ddp & (g.ddp_overlap <= 0)
    late_zero1 = f.is_zero1 & (g.zero1_reduce_overlap <= 0)
    if any_of(late) or any_of(late_zero1):
        serial_s = backward_s(mb_rs_s + mb_ar_s, root_tail_s)
        bwd_last_s = where(late, serial_s + n_units * t.ddp_ar_block_s
                           + root * t.ddp_ar_root_s, bwd_last_s)
        bwd_last_s = where(late_zero1, serial_s + n_units * t.zero1_rs_block_s
                           + root * t.zero1_rs_root_s, bwd_last_s)
    forward = forward_phases(g, f, t, n_units, block_fwd_s, root_fwd_s, root)
    return StagePhases(forward.fwd_s, forward.fwd_kept_s, bwd_mb_s=bwd_mb_s,
                       bwd_last_s=bwd_last_s)


def optimizer_times(g, f, t, n_params_padded):
    """The optimizer step on the local shard, and ZeRO-1's parameter gather after it [s]."""
    # the optimizer updates the shard it owns: over the shard group (HSDP, InternEvo's zero1
    # groups; ZeRO-1's shard group is otherwise the whole data-parallel group)
    opt_shard = where(f.is_ddp, 1.0, where(f.is_hybrid | f.is_zero1, g.shard_size,
                                              g.dp_world_size))
    traffic = where(as_values(g.optimizer) == 0, compute.OPTIMIZER_BYTES_PER_PARAM["adamw"],
                    compute.OPTIMIZER_BYTES_PER_PARAM["sgd"])
    optimizer_s = compute.memory_bound_time_s(n_params_padded / opt_shard * traffic,
                                              g.hbm_bytes_per_s * g.hbm_fraction)
    return optimizer_s, where(f.is_zero1, t.zero1_ag_all_s, 0.0)


def data_parallel_step_s(g, f, ph, optimizer_s, post_step_s):
    """One step without pipelining: the FSDP schedule over k micro-batches [s]."""
    k = g.grad_accum
    return (ph.fwd_s + (k - 1.0) * where(f.keep & f.fsdp_like, ph.fwd_kept_s,
                                            ph.fwd_s)
            + (k - 1.0) * ph.bwd_mb_s + ph.bwd_last_s + optimizer_s + post_step_s)


def pipeline_step_s(g, f, mid, first_extra, last_extra, p2p_s, wgrad_s, optimizer_s,
                    post_step_s):
    """One step with pipelining [s], and its bubble [s].

    Each stage's per-micro-batch forward and backward (FSDP collectives included, averaged
    over the step's k micro-batches) feed the schedule's makespan
    (:func:`fsdpsim.costs.schedule.pipeline_time_s`); the first and last stages add the
    embedding and the LM head (and any layers they hold beyond the middle stages'); the last
    micro-batch's once-per-step collectives and the optimizer follow the flush."""
    from fsdpsim.costs import schedule

    k = g.grad_accum
    fwd_avg = (mid.fwd_s + (k - 1.0) * where(f.keep & f.fsdp_like, mid.fwd_kept_s,
                                                mid.fwd_s)) / k
    bwd_avg = mid.bwd_mb_s
    # Interleaving needs the micro-batches in whole rounds of pp (Megatron): other
    # configurations are evaluated as 1F1B and flagged (``pipeline_ok``) so a caller can
    # reject them (predict) or drop them from the candidates (auto knobs, sweep).
    ok = schedule.schedule_feasible(g.pp_schedule, g.pp, g.vpp, k)
    code = where(ok, g.pp_schedule, schedule.SCHEDULE_CODES["1f1b"])
    vpp = where(ok, g.vpp, 1.0)
    # Stages lighter than the middle ones (an uneven split) do not shorten the steady state:
    # their extra work is clamped at zero.
    extras = [maximum(e, 0.0) for e in (*first_extra, *last_extra)]
    makespan, bubble = schedule.pipeline_time_s(
        code, g.pp, vpp, k, fwd_avg, bwd_avg - wgrad_s, wgrad_s, p2p_s, *extras,
        check=False)
    tail = mid.bwd_last_s - mid.bwd_mb_s
    return makespan + tail + optimizer_s + post_step_s, bubble, ok
