"""Memory ceilings: the largest micro-batch and sequence length whose peak fits, exactly.

Each moment of :func:`fsdpsim.costs.memory.peak_memory_bytes` is affine in the micro-batch and
a polynomial of degree at most 2 in the sequence length, so both ceilings are solved in closed
form per moment, checked against the peak itself, and the smaller of the two moments' answers
is taken (the peak is their maximum).

Both moments come from one pass (:func:`fsdpsim.costs.memory.memory_moments`), and the points
a solve needs are evaluated together, stacked along a leading axis: one evaluation gives the
samples that fix the polynomials (micro-batch 0 and 1; three sequence lengths). An estimate
whose polynomial clears the capacity on both sides by more than the rounding of the peak
(:data:`ROUNDING_BOUND`) is what the check would return; only where one does not, a second
evaluation checks the peak itself on either side of every estimate. :func:`peak_and_ceilings`
solves both unknowns of one configuration that way, its first evaluation also giving the
configuration's own peak (what the engine calls); :func:`max_micro_batch` and
:func:`max_seq_len` solve one each and equal it.
"""

from __future__ import annotations

from functools import reduce

import numpy as np

from fsdpsim.costs.args import check_at_least_one
from fsdpsim.costs.compute import all_of, any_of, as_array, broadcast_shape
from fsdpsim.costs.memory import binding_terms, memory_moments
from fsdpsim.costs.memory_inputs import MemoryInputs
from fsdpsim.util.errors import ConfigError

#: Which moments of the peak a ceiling binds on, by ``moment`` (0: loss backward, 1: block).
_BINDING_MOMENTS = {"peak": (0, 1), "loss": (0,), "block": (1,)}


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
    moment = config.pop("moment", "peak")
    return _solve(capacity_bytes, MemoryInputs.of(micro_batch=None, **config), moment,
                  micro_batch=True, seq_len=False)[0]


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
    moment = config.pop("moment", "peak")
    return _solve(capacity_bytes, MemoryInputs.of(seq_len=None, **config), moment,
                  micro_batch=False, seq_len=True, multiple_of=multiple_of,
                  upper_bound=upper_bound)[1]


def peak_and_ceilings(capacity_bytes, **config):
    """The peak of one configuration term by term and its two ceilings, in one dict [B, -].

    ``config`` holds every keyword of :func:`~fsdpsim.costs.memory.peak_memory_bytes`
    (``check=False`` skips its argument checks). Returns its :data:`PEAK_KEYS` terms plus
    ``max_micro_batch`` (:func:`max_micro_batch` at the configuration's ``seq_len``) and
    ``max_seq_len`` (:func:`max_seq_len` at its ``micro_batch``, ``multiple_of=1``), each equal
    to what those functions give, from one evaluation of both moments instead of a dozen (the
    configuration with the five sample points of the two solves), and a second one at the
    eight check points beside the estimates when rounding leaves one in doubt.
    """
    moment = config.pop("moment", "peak")
    return peak_and_ceilings_of(capacity_bytes, MemoryInputs.of(**config), moment)


def peak_and_ceilings_of(capacity_bytes, inputs: MemoryInputs, moment="peak"):
    """:func:`peak_and_ceilings` of typed inputs (what the engine builds once per stage)."""
    b_max, s_max, (at_loss, in_block) = _solve(capacity_bytes, inputs, moment, micro_batch=True,
                                               seq_len=True, point=True)
    out = binding_terms(at_loss, in_block, moment)
    out["max_micro_batch"], out["max_seq_len"] = b_max, s_max
    return out


def _solve(capacity_bytes, inputs, moment, *, micro_batch, seq_len, multiple_of=1,
           upper_bound=2**24, point=False):
    """The ceilings asked for (None for the other): samples, closed-form estimates per
    moment, checks where needed, and the smaller answer of the moments that bind. With
    ``point``, the configuration itself is evaluated with the samples and its two moments
    returned third."""
    cap = as_array(capacity_bytes)
    if not isinstance(moment, str) or moment not in _BINDING_MOMENTS:
        raise ConfigError(f"moment: unknown value {moment!r}; accepted: "
                          f"{', '.join(_BINDING_MOMENTS)}")
    binding = _BINDING_MOMENTS[moment]
    b, s = inputs.batch.micro_batch, inputs.batch.seq_len
    for name, value, needed in (("micro_batch", b, seq_len or point),
                                ("seq_len", s, micro_batch or point)):
        if needed and value is None:
            raise TypeError(f"missing keyword argument: {name!r}")
    ndim = max(_ndim(v) for v in inputs.values())

    def moments_at(b_points, s_points):
        """Both moments at the points (b_i, s_i), stacked along a leading axis of length K."""
        points = broadcast_shape(*{_shape(v) for v in (*b_points, *s_points)})
        return memory_moments(inputs.with_batch(_stack(b_points, points, ndim),
                                                _stack(s_points, points, ndim)))

    def peaks(moments):
        """The two moments' peaks, stacked: shape (2, K, ...) [B]."""
        a, b = (m["peak_bytes"] for m in moments)
        return _stack((a, b), broadcast_shape(np.shape(a), np.shape(b)), 0)

    def peaks_at(b_points, s_points):
        return peaks(moments_at(b_points, s_points))

    # 1. The samples that fix each moment's polynomial (and the configuration), together.
    b_points, s_points = ([b], [s]) if point else ([], [])
    if micro_batch:
        b_points += [0.0, 1.0]
        s_points += [s, s]
    if seq_len:
        step = check_at_least_one("multiple_of", multiple_of)
        hi_bound = np.floor(as_array(upper_bound) / step)
        scale = np.maximum(np.floor(hi_bound / 4.0), 1.0)
        b_points += [b, b, b]
        s_points += [0.0 * step, scale * step, 2.0 * scale * step]
    moments = moments_at(b_points, s_points)
    # The binding moments' peaks, on a leading axis: each estimate below solves them at once.
    samples = peaks(moments)[list(binding)]
    if cap.ndim > ndim:  # capacities with more dimensions than the configuration
        samples = samples.reshape(samples.shape[:2] + (1,) * (cap.ndim - ndim)
                                  + samples.shape[2:])
    first = int(point)
    b_est, b_ok = (_affine_estimate(samples[:, first], samples[:, first + 1], cap)
                   if micro_batch else (None, True))
    s_est, s_ok = (_quadratic_estimate(samples[:, -3], samples[:, -2], samples[:, -1], scale,
                                       cap, hi_bound) if seq_len else (None, True))

    b_max = s_max = None
    if all_of(b_ok) and all_of(s_ok):  # every estimate clears the capacity by more than
        if micro_batch:                # rounding on both sides: what the checks would give
            b_max = reduce(np.minimum, b_est.astype(np.int64))
        if seq_len:
            s_max = reduce(np.minimum, (s_est * step).astype(np.int64))
    else:  # 2. The peak beside each estimate, evaluated together: est and est + 1 per moment.
        b_points, s_points = [], []
        for est in b_est if micro_batch else ():
            b_points += [est, est + 1.0]
            s_points += [s, s]
        for est in s_est if seq_len else ():
            b_points += [b, b]
            s_points += [est * step, (est + 1.0) * step]
        checks = peaks_at(b_points, s_points)
        if micro_batch:
            b_max = reduce(np.minimum, [_affine_settle(b_est[i], checks[m, 2 * i],
                                                       checks[m, 2 * i + 1], cap)
                                        for i, m in enumerate(binding)])
        if seq_len:
            offset = 2 * len(binding) if micro_batch else 0
            answers = []
            for i, m in enumerate(binding):
                def peak_at(k, m=m):
                    return peaks_at([b], [k * step])[m, 0]

                beside = (checks[m, offset + 2 * i], checks[m, offset + 2 * i + 1])
                answers.append(_quadratic_settle(s_est[i], beside, peak_at, cap, hi_bound, step))
            s_max = reduce(np.minimum, answers)
    if not point:
        return b_max, s_max
    # The configuration's own terms: entry 0 of those that vary with the points.
    at_point = tuple({key: (v[0] if _ndim(v) > ndim else v) for key, v in terms.items()}
                     for terms in moments)
    return b_max, s_max, at_point


#: Bound on the relative rounding error of one evaluation of a moment's peak, and of the
#: polynomial fitted to its samples: the peak sums a few dozen products of positive terms,
#: ~1e-14 at most; this leaves a hundredfold margin. An estimate whose polynomial clears the
#: capacity by more than this on both sides is what the check against the peak would return.
ROUNDING_BOUND = 1e-12


def _shape(value):
    """``np.shape`` without converting numbers (and strings, None) to arrays first."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.shape
    return np.shape(value) if isinstance(value, (list, tuple)) else ()


def _ndim(value):
    """``np.ndim`` without converting numbers (and strings, None) to arrays first."""
    ndim = getattr(value, "ndim", None)
    return ndim if ndim is not None else len(_shape(value))


def _stack(values, shape, ndim):
    """``values`` broadcast to ``shape`` (padded with leading 1s to ``ndim`` dimensions) and
    stacked along a new leading axis."""
    shape = (1,) * (ndim - len(shape)) + shape
    out = np.empty((len(values),) + shape)
    for i, value in enumerate(values):
        out[i] = value
    return out


def _affine_estimate(p0, p1, cap):
    """``floor((C − P0)/(P1 − P0))`` of an affine peak sampled at 0 and 1, 0 when it does not
    grow [-], and where that needs no check: the line through the samples is below C − τ at
    the estimate (or it is 0) and above C + τ one further, τ bounding the rounding of the
    samples and of the peak itself (:data:`ROUNDING_BOUND`)."""
    slope = p1 - p0
    room = np.maximum(cap - p0, 0.0)
    est = np.floor(np.where(slope > 0, room / np.where(slope > 0, slope, 1.0), 0.0))

    def margin(x):
        return ROUNDING_BOUND * (cap + p0 + x * (p0 + p1))

    nxt = est + 1.0
    settled = (((est == 0) | (p0 + est * slope <= cap - margin(est)))
               & (p0 + nxt * slope >= cap + margin(nxt)))
    return est, settled


def _affine_settle(est, peak_est, peak_next, cap):
    """The estimate moved by one where rounding put it across the boundary, given the peak at
    ``est`` and ``est + 1``: one down if ``est`` does not fit, else one up if ``est + 1`` does."""
    down = (est > 0) & (peak_est > cap)
    est = np.where(down, est - 1.0, np.where(~down & (peak_next <= cap), est + 1.0, est))
    return est.astype(np.int64)


def _quadratic_estimate(p0, p1, p2, scale, cap, hi_bound):
    """The positive root of ``c0 + c1·k + c2·k² = C``, floored and clipped to [0, hi_bound],
    from samples at k = 0, scale, 2·scale [-], and where that needs no check (as in
    :func:`_affine_estimate`; τ also bounds the error of the fitted coefficients)."""
    shape = broadcast_shape(cap.shape, hi_bound.shape, np.shape(p0), np.shape(p2))
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

    def fitted(x):
        return p0 + (c1 + c2 * x) * x

    def margin(x):  # each sample's error ≤ τ·sample carries into c1 ~ 2·Σ/scale, c2 ~ Σ/scale²
        u = x / scale
        return ROUNDING_BOUND * (cap + p0 + (np.abs(c1) + np.abs(c2) * x) * x
                                 + (p0 + p1 + p2) * (2.0 + u) * u)

    nxt = est + 1.0
    settled = (((est == 0) | (fitted(est) <= cap - margin(est)))
               & ((est >= hi_bound) | (fitted(nxt) >= cap + margin(nxt))))
    return est, settled


def _quadratic_settle(est, first_checks, peak_at, cap, hi_bound, step):
    """The estimate moved one step at a time where rounding put it across the boundary (the
    peak at ``est`` and ``est + 1`` given for the first check), then the answer in units of
    ``step``; a bisection for entries three checks do not settle."""
    peak_est, peak_next = first_checks
    for i in range(3):  # check the boundary; step by one where rounding crossed it
        if i:
            peak_est, peak_next = peak_at(est), peak_at(est + 1.0)
        lo_ok = (est == 0) | (peak_est <= cap)
        hi_ok = (est >= hi_bound) | (peak_next > cap)
        if all_of(lo_ok & hi_ok):
            return (est * step).astype(np.int64)
        est = np.where(~lo_ok, est - 1.0, np.where(~hi_ok, est + 1.0, est))
    # Fallback: bisection (the invariant peak(hi) > cap; lo fits or lo == 0).
    shape = est.shape
    lo = np.zeros(shape)
    hi = np.broadcast_to(hi_bound, shape).copy()
    top_fits = peak_at(hi) <= cap
    while any_of(hi - lo > 1):
        mid = np.floor((lo + hi) / 2.0)
        ok = peak_at(mid) <= cap
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return (np.where(top_fits, hi, lo) * step).astype(np.int64)
