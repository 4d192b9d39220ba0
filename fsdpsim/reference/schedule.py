"""Overlap and order in time: compute slowed beside NCCL kernels, FSDP's prefetch
pipeline over identical units, and the pipeline-parallel schedules (GPipe, 1F1B, ZB-H1) run
action by action for their makespan."""

from __future__ import annotations

def slowed_s(compute_s, comm_s, sigma):
    """Compute beside NCCL kernels is slowed in proportion to the overlapped time:
    ``f · (1 + σ · min(1, c/f))`` (Rashidi et al. 2021 ISCA §2; fsdpsim.costs.overlap)."""
    return compute_s + sigma * min(comm_s, compute_s) if compute_s > 0 else 0.0


def pipelined_s(first_comm_s, comm_s, compute_s, n_units, last_comm_s, sigma):
    """FSDP's two-stream pipeline over n identical units (Zhao et al. 2023 §3.3): the first
    collective exposed, then n − 1 times the slower of (slowed compute, next collective), the
    last unit's compute, and its own trailing collective:
    ``c_first + (n − 1)·max(f', c) + f + c_last``."""
    return (first_comm_s + max(n_units - 1, 0) * max(slowed_s(compute_s, comm_s, sigma), comm_s)
            + compute_s + last_comm_s)


def schedule_orders(schedule, p, m):
    """Every stage's actions in order: forwards F, backwards B and, for ZB-H1, weight-gradient
    passes W. GPipe runs all forwards then all backwards (Huang et al. 2019); 1F1B runs
    min(p − j − 1, m) warm-up forwards on stage j, then alternates a forward and a backward,
    then drains (Narayanan et al. SC21 §2.2.1); ZB-H1 is 1F1B with each backward split into B
    and W, stage j's W running j backwards late and the owed ones at the end (Qi et al. 2024
    §2.1; torch 2.13 ``ScheduleZBVZeroBubble`` orders, fsdpsim.costs.schedule)."""
    if schedule == "gpipe":
        return [[("F", i) for i in range(m)] + [("B", i) for i in range(m)] for _ in range(p)]
    orders = []
    for j in range(p):
        warm = min(p - j - 1, m)
        order = [("F", i) for i in range(warm)]
        for i in range(m):
            if warm + i < m:
                order.append(("F", warm + i))
            order.append(("B", i))
            if schedule == "zb-h1" and i >= j:
                order.append(("W", i - j))
        if schedule == "zb-h1":
            order += [("W", i) for i in range(max(m - j, 0), m)]
        orders.append(order)
    return orders


def pipeline_makespan_s(schedule, fwd_s, bwd_s, wgrad_s, n_microbatches, p2p_s):
    """Makespan of one step's pipeline [s], by running the schedule (:func:`schedule_orders`):
    an action starts when its stage is free and its input has arrived: a forward after the
    previous stage's forward of the same micro-batch plus one transfer, a backward after the
    next stage's backward plus one transfer (the last stage's after its own forward), a W
    after its own B. ``fwd_s``, ``bwd_s``, ``wgrad_s``: per stage."""
    p = len(fwd_s)
    orders = schedule_orders(schedule, p, n_microbatches)
    took = {"F": fwd_s, "B": bwd_s, "W": wgrad_s}
    done, free, nxt = {}, [0.0] * p, [0] * p
    while any(nxt[j] < len(orders[j]) for j in range(p)):
        for j in range(p):
            while nxt[j] < len(orders[j]):
                kind, i = orders[j][nxt[j]]
                dep = ((kind, j - 1, i) if kind == "F" and j > 0 else
                       ("B", j + 1, i) if kind == "B" and j < p - 1 else None)
                if dep is not None and dep not in done:
                    break                                 # its input has not arrived yet
                ready = 0.0 if dep is None else done[dep] + p2p_s
                start = max(free[j], ready)
                free[j] = done[(kind, j, i)] = start + took[kind][j]
                nxt[j] += 1
    return max(free)

