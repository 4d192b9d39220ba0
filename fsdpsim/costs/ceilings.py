"""Memory ceilings: the largest micro-batch and sequence length whose peak fits, exactly.

Each moment of :func:`fsdpsim.costs.memory.peak_memory_bytes` is affine in the micro-batch and
a polynomial of degree at most 2 in the sequence length, so both ceilings are solved in closed
form per moment, checked against the peak itself, and the smaller of the two moments' answers
is taken (the peak is their maximum).
"""

from __future__ import annotations

import numpy as np

from fsdpsim.costs.compute import as_array


def fits(peak_bytes, capacity_bytes):
    """True where the peak fits in the GPU's memory: ``peak ≤ capacity`` [-]."""
    return as_array(peak_bytes) <= as_array(capacity_bytes)


def max_micro_batch(capacity_bytes, **config):
    """Largest integer micro-batch whose peak fits in ``capacity_bytes``; 0 when none does [-].

    Parameters
    ----------
    capacity_bytes : memory available to the process [B]
    **config : every keyword of :func:`~fsdpsim.costs.memory.peak_memory_bytes` but ``micro_batch``

    Notes
    -----
    The peak is affine in b (activations and logits scale with b, states and buffers do not):
    ``peak(b) = P0 + b·(P1 − P0)``, so ``b_max = floor((C − P0)/(P1 − P0))``. The estimate is
    then checked against the peak itself and moved by one where rounding put it across the
    boundary, so ``peak(b_max) ≤ C < peak(b_max + 1)`` holds exactly. Needs ``seq_len > 0``.
    """
    if "micro_batch" in config:
        raise TypeError("max_micro_batch solves for micro_batch; do not pass it")
    cap = as_array(capacity_bytes)

    if config.get("moment", "peak") == "peak":
        # The peak is the larger of two moments, each affine in b: solve each, keep the smaller.
        return np.minimum(max_micro_batch(capacity_bytes, moment="loss", **config),
                          max_micro_batch(capacity_bytes, moment="block", **config))

    from fsdpsim.costs.memory import peak_memory_bytes

    def peak_at(b):
        return peak_memory_bytes(micro_batch=b, **config)["peak_bytes"]

    p0, p1 = peak_at(0.0), peak_at(1.0)
    slope = p1 - p0
    room = np.maximum(cap - p0, 0.0)
    est = np.floor(np.where(slope > 0, room / np.where(slope > 0, slope, 1.0), 0.0))
    est = np.where((est > 0) & (peak_at(est) > cap), est - 1.0, est)
    est = np.where(peak_at(est + 1.0) <= cap, est + 1.0, est)
    return est.astype(np.int64)


def max_seq_len(capacity_bytes, *, multiple_of=1, upper_bound=2**24, **config):
    """Largest sequence length (a multiple of ``multiple_of``) whose peak fits; 0 if none [-].

    Parameters
    ----------
    capacity_bytes : memory available to the process [B]
    multiple_of : the answer is k·multiple_of for an integer k (e.g. 128 or the CP degree) [-]
    upper_bound : largest length searched; returned when even it fits [-]
    **config : every keyword of :func:`~fsdpsim.costs.memory.peak_memory_bytes` except ``seq_len``

    Notes
    -----
    Every term is a polynomial of degree at most 2 in s (linear with FlashAttention; the s²
    scores without it), so three evaluations give it exactly: ``peak(s) = c0 + c1·s + c2·s²``.
    The positive root of ``peak(s) = C`` is floored to a multiple of ``multiple_of`` and then
    checked against the peak itself, moving one step where rounding put it across the
    boundary: ``peak(s_max) ≤ C < peak(s_max + multiple_of)``. A vectorised bisection finishes
    the few entries the check does not settle (never in practice; it guards the algebra).
    """
    if "seq_len" in config:
        raise TypeError("max_seq_len solves for seq_len; do not pass it")
    cap = as_array(capacity_bytes)
    from fsdpsim.costs.memory import _check_at_least_one, peak_memory_bytes

    step = _check_at_least_one("multiple_of", multiple_of)

    if config.get("moment", "peak") == "peak":
        # Each moment is a polynomial of degree <= 2 in s: solve each, keep the smaller.
        both = dict(multiple_of=multiple_of, upper_bound=upper_bound)
        return np.minimum(max_seq_len(capacity_bytes, moment="loss", **both, **config),
                          max_seq_len(capacity_bytes, moment="block", **both, **config))

    def peak_at(k):
        return peak_memory_bytes(seq_len=k * step, **config)["peak_bytes"]

    hi_bound = np.floor(as_array(upper_bound) / step)
    scale = np.maximum(np.floor(hi_bound / 4.0), 1.0)
    p0, p1, p2 = peak_at(0.0), peak_at(scale), peak_at(2.0 * scale)
    shape = np.broadcast_shapes(cap.shape, hi_bound.shape, np.shape(p0), np.shape(p2))
    # peak(k) = c0 + c1·k + c2·k² from three samples at k = 0, scale, 2·scale.
    c2 = (p2 - 2.0 * p1 + p0) / (2.0 * scale**2)
    c1 = (p1 - p0) / scale - c2 * scale
    room = cap - p0
    disc = np.maximum(c1**2 + 4.0 * c2 * room, 0.0)
    root = np.where(np.abs(c2) > 1e-12 * np.maximum(np.abs(c1), 1e-30),
                    (-c1 + np.sqrt(disc)) / np.where(c2 != 0, 2.0 * c2, 1.0),
                    room / np.where(c1 > 0, c1, np.inf))
    est = np.clip(np.floor(np.where(room >= 0, root, 0.0)), 0.0, hi_bound)
    est = np.broadcast_to(est, shape).copy()
    for _ in range(3):  # check the boundary; step by one where rounding crossed it
        lo_ok = (est == 0) | (peak_at(est) <= cap)
        hi_ok = (est >= hi_bound) | (peak_at(est + 1.0) > cap)
        if np.all(lo_ok & hi_ok):
            return (est * step).astype(np.int64)
        est = np.where(~lo_ok, est - 1.0, np.where(~hi_ok, est + 1.0, est))
    # Fallback: bisection (the invariant peak(hi) > cap; lo fits or lo == 0).
    lo = np.zeros(shape)
    hi = np.broadcast_to(hi_bound, shape).copy()
    top_fits = peak_at(hi) <= cap
    while np.any(hi - lo > 1):
        mid = np.floor((lo + hi) / 2.0)
        ok = peak_at(mid) <= cap
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return (np.where(top_fits, hi, lo) * step).astype(np.int64)
