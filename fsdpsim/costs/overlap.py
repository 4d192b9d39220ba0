"""Overlap: compose per-unit compute and communication into the time of a training step.

FSDP runs collectives on their own stream. In forward it prefetches the next unit's
all-gather while the current unit computes; in backward it issues the previous unit's
all-gather before the current unit's reduce-scatter (backward prefetch), so both hide behind
the current unit's backward (Zhao et al. 2023, arXiv 2304.11277 §3.3.1, §3.3.2). With
homogeneous units this is a two-stage pipeline: the first collective is exposed, then each
stage takes ``max(compute, comm)``, then the last compute (and, in backward, the last
reduce-scatter) is exposed:

    t_phase = c_first + (n − 1) · max(f', c) + f + c_last

Compute that runs while NCCL kernels share the SMs and HBM is slowed by a catalog factor σ in
proportion to the overlapped time: ``f' = f · (1 + σ · min(1, c / f))`` (measured 2-10 %
slowdowns of GEMMs under concurrent NCCL: Rashidi et al. 2021, "Enabling Compute-Communication
Overlap in Distributed Deep Learning Training Platforms", ISCA §2).

All functions are vectorised over numpy arrays.
"""

from __future__ import annotations

import numpy as np

from fsdpsim.costs.compute import as_array, maximum, minimum, where


def slowed_compute_s(compute_s, overlapped_comm_s, slowdown):
    """Compute time stretched by concurrent communication [s]: f · (1 + σ · min(1, c / f))."""
    f = as_array(compute_s)
    c = as_array(overlapped_comm_s)
    positive = f > 0
    # min(c, f) / f = min(1, c / f) for f > 0, without an overflow on a huge c / f.
    ratio = where(positive, minimum(c, f) / where(positive, f, 1.0), 0.0)
    return f * (1.0 + as_array(slowdown) * ratio)


def pipelined_phase_s(first_comm_s, stage_comm_s, stage_compute_s, n_stages, last_comm_s, slowdown):
    """Two-stream pipeline over ``n_stages`` identical units [s].

    ``c_first + (n − 1) · max(f', c) + f + c_last`` with ``f'`` from :func:`slowed_compute_s`:
    each of the first n − 1 computes runs beside the next unit's collective; the last one has
    nothing left to prefetch (its own collective, ``c_last``, runs after it), so it is not
    slowed.
    """
    n = as_array(n_stages)
    f_raw = as_array(stage_compute_s)
    f = slowed_compute_s(f_raw, stage_comm_s, slowdown)
    c = as_array(stage_comm_s)
    return (as_array(first_comm_s) + maximum(n - 1.0, 0.0) * maximum(f, c) + f_raw
            + as_array(last_comm_s))


def step_bounds_s(compute_s, comm_s):
    """(lower, upper) bounds of a step [s]: perfect overlap ``max`` and none at all ``sum``
    (the JAX scaling book, "How to think about TPUs/GPUs", roofline chapter)."""
    c, m = as_array(compute_s), as_array(comm_s)
    return np.maximum(c, m), c + m
