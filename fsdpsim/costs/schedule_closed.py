"""Closed forms of the pipeline makespan, one per schedule (used by
:func:`fsdpsim.costs.schedule.pipeline_time_s`).

Model and method
----------------
Stage 0 (first) runs F0 = f + e_F forward and B0 = b + e_B backward per micro-batch (the
embedding extras), stage p − 1 (last) FL = f + l_F and BL = b + l_B (final norm, LM head,
loss), the p − 2 middle stages f and b; T_s = F_s + B_s, c is one point-to-point transfer.
Every stage runs its action list in order (:func:`fsdpsim.costs.schedule.stage_actions`), an
action starts when its stage is free and its input has arrived. That recurrence is a longest-
path (max-plus) computation on the DAG whose nodes are the actions, weighted by their times,
and whose edges are "next on the same stage" (weight 0) and "data to the adjacent virtual
stage" (weight c): the makespan is the weight of the heaviest path from the first forward to
the last action. A closed form is therefore a maximum over the
path families that can be critical; each candidate below is a real path, so every form is a
lower bound of the simulation and is exact when its family list is complete.

Path vocabulary (1F1B-like schedules). The *top* is stage 0's own sequence, the *bottom* the
last stage's; a *trip* leaves the top at a forward F(i), runs the forward chain down to the
last stage, runs the bottom from F(i) to B(j) (j ≥ i), and the backward chain back up to the
top's B(j). A zero-width trip costs, beyond its two top nodes,

    R = (p − 2)·x + T_L + 2·c,    x = f + b + 2·c                                  (1)

(x: one middle stage passed down and up). A *partial* trip turns at a middle stage d; it
replaces d top pairs by d·x. Every family's value is linear in its integer parameters (where
the trips start, how wide they are, how many), so its maximum lies at the ends of their
ranges; what is left is the short candidate lists below. They equal the event simulation to
1e-9 on thousands of random configurations (``tests/test_schedule.py``: p ≤ 16, m ≤ 64,
random stage times, extras and c, including zeros).

References: [1] Huang et al. 2019, "GPipe", arXiv 1811.06965; [2] Narayanan et al. 2021,
SC21, arXiv 2104.04473; [3] Qi et al. 2024, "Zero Bubble Pipeline Parallelism", arXiv
2401.10241.
"""

from __future__ import annotations

import numpy as np

from fsdpsim.costs.compute import any_of
from fsdpsim.costs.compute import where as compute_where

NEG = -np.inf


_FAST = frozenset((float, int, bool))


# The forms below run on numpy arrays (sweeps) and, for a few rows, on Python floats
# (pipeline_time_s): these pick the builtin for scalars, numpy otherwise; equal results.
def _where(cond, a, b):
    if type(cond) is bool and type(a) in _FAST and type(b) in _FAST:
        return a if cond else b
    return compute_where(cond, a, b)


def _minimum(a, b):
    if type(a) in _FAST and type(b) in _FAST:
        return a if a <= b else b
    return np.minimum(a, b)


def _maximum(a, b):
    if type(a) in _FAST and type(b) in _FAST:
        return a if a >= b else b
    return np.maximum(a, b)


def _max(*xs):
    if all(type(x) in _FAST for x in xs):
        return max(xs)
    if (all(type(x) is np.ndarray and x.dtype == np.float64 for x in xs)
            and len({x.shape for x in xs}) == 1):
        # one shape: maximum.reduce's values, pair by pair, without stacking the arrays
        out = np.maximum(xs[0], xs[1])
        for x in xs[2:]:
            np.maximum(out, x, out=out)
        return out
    return np.maximum.reduce(np.broadcast_arrays(*xs))


def _trips(m, p):
    """``((m − 1) // p + 1, (m − 1) % p)``: round trips of ``m`` micro-batches over ``p`` stages
    and the micro-batches left over. On float64 arrays of whole numbers (m ≥ 1, p ≥ 1, below
    2**52) from one division, ``floor((m − 1) / p)``, exact there (the quotient of two such
    integers rounds to within half an ulp, far less than 1/p from the next integer) and
    numpy's values bit for bit: its float floor_divide and remainder take 30x a division per
    element."""
    k = m - 1
    if _whole_arrays(k, p):
        q = np.floor(k / p)
        return q + 1, k - p * q
    return k // p + 1, k % p


def _whole_arrays(k, p) -> bool:
    """Whether ``k`` (≥ 0) and ``p`` (≥ 1) are float64 arrays or numbers of whole values below
    2**52, at least one an array (:func:`_trips`)."""
    if type(k) is not np.ndarray and type(p) is not np.ndarray:
        return False
    for v, low in ((k, 0.0), (p, 1.0)):
        v = np.asarray(v)
        if v.dtype != np.float64 or not bool(np.all((v >= low) & (v < 2.0 ** 52)
                                                    & (v == np.floor(v)))):
            return False
    return True


def gpipe_time_s(p, m, f, b, c, ef, eb, lf, lb):
    """GPipe makespan [s] (exact): ``ΣF + ΣB + 2(p−1)c + (m−1)(max F + max B)``.

    All forwards, then all backwards, in micro-batch order on every stage: each phase is a
    permutation flow shop with identical jobs: a path through its (micro-batch × stage)
    lattice visits every stage at least once and spends its m − 1 remaining steps on the
    slowest one, Σ_s F_s + (m − 1)·max_s F_s (with equal stages, [1]'s bubble
    (p − 1)/(m + p − 1)). A path crosses from the forward lattice to the backward one at
    some stage j (its last forward precedes its first backward); the value only grows with
    j, so it crosses at the last stage. ``b`` is the full backward. p = 1: both extras sit
    on the one stage and the form is m·(F + B).
    """
    one = p == 1
    max_f = f + _where(one, ef + lf, _maximum(ef, lf))
    max_b = b + _where(one, eb + lb, _maximum(eb, lb))
    step = (p * f + ef + lf) + (p * b + eb + lb) + 2.0 * (p - 1) * c + (m - 1) * (max_f + max_b)
    return _where(one, m * (f + b + (ef + eb + lf + lb)), step)


def one_f_one_b_time_s(p, m, f, b, c, ef, eb, lf, lb):
    """1F1B makespan [s] (exact; ``b`` is the full backward).

    With R and x from (1), base = F0 + B0 + R (one trip at micro-batch 0), m ≥ p:

    * A  ``m·T0``: stage 0 never waits.
    * D  ``base + (m−1)·T_L``: fill, then the last stage paces every micro-batch, then drain
      (equal stages, c = 0: (m + p − 1)(f + b), [2] §2.2.1).
    * B/E ``base + (m−1)·T0 − (p−1)·min(F0, B0)``: stage 0 waits once, for micro-batch 0's
      round trip (its p − 1 warm-up forwards hide in it) or for the last one's (its p − 1
      cool-down backwards do).
    * G  ``base + (p−1)·max(F0, B0) + (m−p)·T_L``: stage 0's warm-up (or cool-down), the
      rest paced by the last stage.
    * C  ``2R + (m−p+1)·T0`` (m > p): both waits.
    * cycling ``F0 + B0 + N·R + (N−1)·T0 + fill(r)`` with N = ⌊(m−1)/p⌋ + 1 trips, one every
      p micro-batches, and r = (m−1) mod p left over: fill = max(r·T0, r·T_L, T0 + (r−1)·x,
      T_L + (r−1)·x) (the leftover on the top, the bottom, or as one partial trip anchored at
      either end; only the bottom options when N = 1). With c > 0 this is the critical path
      of equal stages: (m + p − 1)(f + b) + 2c·(p − 1 + m − 1 − ⌈(m−1)/p⌉).

    m < p (stage s < p − m runs all forwards first): A, ``base + (m−1)·max(T_L, F0, B0)``,
    ``m·T0 + (p−m)·x`` (stage 0's forwards, a partial trip to the first 1F1B stage, its
    backwards) and ``base + T_L + (m−2)·x``.
    """
    F0, B0, FL, BL = f + ef, b + eb, f + lf, b + lb
    T0, TL = F0 + B0, FL + BL
    x = f + b + 2.0 * c
    R = (p - 2) * x + TL + 2.0 * c                              # (1)
    base = F0 + B0 + R
    A = m * T0
    short = m < p
    few = NEG  # no row with m < p (a grid's group): the selects below do not read it
    if any_of(short):
        few = _max(base + (m - 1) * _max(TL, F0, B0), A + (p - m) * x,
                   _where(m >= 2, base + TL + (m - 2) * x, NEG))
    n_trips, r = _trips(m, p)
    fill = _where(r == 0, 0.0, _where(
        n_trips == 1, _max(r * TL, TL + (r - 1) * x),
        _max(r * T0, r * TL, T0 + (r - 1) * x, TL + (r - 1) * x)))
    many = _max(base + (m - 1) * TL,                                            # D
                base + (m - 1) * T0 - (p - 1) * _minimum(F0, B0),             # B, E
                base + (p - 1) * _maximum(F0, B0) + (m - p) * TL,             # G
                _where(m > p, 2.0 * R + (m - p + 1) * T0, NEG),               # C
                F0 + B0 + n_trips * R + (n_trips - 1) * T0 + fill)              # cycling
    step = _maximum(A, _where(short, few, many))
    return _one_stage(p, m, f, b, ef + eb + lf + lb, step)


def _one_stage(p, m, f, b, extras, step):
    """``step`` where p > 1, and on one stage (p = 1) ``m·(f + b + extras)``; that product is
    computed only where some row has p = 1."""
    one = p == 1
    return _where(one, m * (f + b + extras) if any_of(one) else NEG, step)


def zb_h1_time_s(p, m, f, b, w, c, ef, eb, lf, lb):
    """ZB-H1 makespan [s] (exact; ``b`` the input-gradient pass B, ``w`` the weight pass W).

    The 1F1B families with three changes that follow from the order of [3] §2.1:

    * Stage 0 runs each W right after its B, so on the top a backward counts B0' = B0 + w,
      while the trips' backward chains (1) carry B only: W is off the inter-stage critical
      path, which is where ZB-H1 gains: equal stages, c = 0, w ≤ b: bubble (p−1)(f + b − w).
    * The last stage runs W(k − p + 1) after B(k): a bottom run gets one W per micro-batch
      (T_L = FL + BL + w), except the first p − 1 micro-batches of a run that starts at
      micro-batch 0 (D: ``(m−p)·w``; the cycling fill for N = 1 uses T_L without w). That
      deficit adds the family ``F0 + B0' + 2R + T0 + (m−1−p)·T_L`` (a round trip, then the
      bottom).
    * A path may end on any stage after its last B and the W's still owed there (stage s ≥ 1
      owes min(s, m) + [s ≤ m − 1] of them): families that end with the backward chain to
      stage 0 add ``max(0, max_s tail(s) − up0)`` with tail(s) = (p−1−s)(b + c) +
      n_W(s)·w for s ∈ {1, min(m, p) − 1, p − 1} and up0 = (p−2)·b + (p−1)·c + B0' (the
      ends of a linear family). With w > b this makes the bubble (p − 1)·f.

    m < p: the 1F1B list for m < p with these changes (the stage-0 path ``base + (m−1)·B0'``
    ends on the top and takes no end term).
    """
    F0, B0 = f + ef, b + eb + w                                 # stage 0: B then its W
    TLb = f + lf + b + lb
    TL = TLb + w
    T0 = F0 + B0
    x = f + b + 2.0 * c
    R = (p - 2) * x + TLb + 2.0 * c                             # (1), chains carry B only
    base = F0 + B0 + R
    up0 = (p - 2) * b + (p - 1) * c + B0

    def tail(s):
        n_w = _where(s <= m - 1, s + 1, m)
        return (p - 1 - s) * (b + c) + n_w * w

    s_mid = _maximum(1, _minimum(m, p) - 1)
    end = _maximum(0.0, _max(tail(1), tail(s_mid), tail(p - 1)) - up0)
    A = m * T0
    few = _max(base + (m - 1) * _maximum(TLb, F0) + end, base + (m - 1) * B0,
               A + (p - m) * x, _where(m >= 2, base + TLb + (m - 2) * x + end, NEG))
    n_trips, r = _trips(m, p)
    fill = _where(r == 0, 0.0, _where(
        n_trips == 1, _max(r * TLb, TLb + (r - 1) * x),
        _max(r * T0, r * TL, T0 + (r - 1) * x, TL + (r - 1) * x)))
    many = _max(base + (m - 1) * TLb + (m - p) * w + end,                      # D
                base + (m - 1) * T0 - (p - 1) * F0,                             # B
                base + (m - 1) * T0 - (p - 1) * B0 + end,                       # E
                base + (p - 1) * F0 + (m - p) * TL + end,                       # G
                _where(m > p, _max(2.0 * R + (m - p + 1) * T0,                # C
                                     F0 + B0 + 2.0 * R + T0 + (m - 1 - p) * TL) + end, NEG),
                F0 + B0 + n_trips * R + (n_trips - 1) * T0 + fill + end)        # cycling
    step = _maximum(A, _where(m < p, few, many))
    return _where(p == 1, m * (f + (b + w) + (ef + eb + lf + lb)), step)


def interleaved_time_s(p, v, m, f, b, c, ef, eb, lf, lb, stages=None):
    """Interleaved 1F1B makespan [s] (``b`` the full backward; m divisible by p).

    Exact for equal stages (no extras) with c ≤ min(f, b)/v:

        (m + (p − 1)/v)·(f + b) + 2·(p·v − 1)·c                                   (2)

    ([2] §2.2.2: the bubble (p − 1)(f + b) shrinks by v): the forward chain of micro-batch 0
    through all p·v virtual stages, the last stage's steady state from its first chunk-(v−1)
    forward to the last micro-batch's chunk-(v−1) backward, and that micro-batch's backward
    chain back through all virtual stages. Otherwise the maximum of these real paths, a lower
    bound whose error the tests bound:

    * (2) with the extras: ``+ e_F + e_B + m·(l_F + l_B)``;
    * stage 0 busy throughout, ``m·T0``;
    * stage 0 waiting for micro-batch 0's round trip through all virtual stages before its
      first backward, for the last micro-batch's after its last forward, or both;
    * one excursion from stage 0's forward k1 down to the last stage (same chunk), along it
      to its backward k2 and back up, for k1 ∈ {0, p − 1, m·v − 1} and k2 ∈ {0, p − 1,
      m·v − 1 − (v − 1)·p, m·v − 1} (the ends of the warm-up and of the steady state);
      and the hybrids of an excursion with (2): micro-batch 0's chain down, the last stage,
      up at k2; or down at k1, the last stage, the last micro-batch's chain.

    The remaining error comes from paths that switch between the first and the last stage
    several times, also through the wrap-around edges between chunks (stage p − 1's chunk c
    feeds stage 0's chunk c + 1); their breakpoints depend on v and were not worth more
    candidates. Stage sequences are summed in closed form (:class:`_Stage`).

    ``stages``: a dict in which rows of Python floats share those sums (they do not depend on
    ``c``: predict's configuration and its slower twin differ in ``c`` alone), kept by the
    caller for the rows of one call.
    """
    n = m * v
    fc, bc = f / v, b / v
    T0 = f + b + ef + eb
    key = None if stages is None else tuple(float(x).hex() for x in (p, v, m, f, b, ef, eb,
                                                                      lf, lb))
    pair = None if key is None else stages.get(key)
    if pair is None:
        pair = (_Stage(p, v, n, _minimum((v - 1) * p + 2 * (p - 1), n), fc, bc, ef, 0, eb,
                       v - 1),
                _Stage(p, v, n, _minimum((v - 1) * p, n), fc, bc, lf, v - 1, lb, 0))
        if key is not None:
            stages[key] = pair
    top, bottom = pair
    chain = (m + (p - 1) / v) * (f + b) + ef + eb + m * (lf + lb) + 2.0 * (p * v - 1) * c
    f_chain = p * f + ef + lf + (p * v - 1) * c                # micro-batch 0, all virtual stages
    b_chain = p * b + eb + lb + (p * v - 1) * c                # the last one, all virtual stages
    up_to_top = (p - 1) * bc + lb + (p - 1) * c                # last chunk, stages p−1 .. 1
    down_from_top = (p - 1) * fc + lf + (p - 1) * c
    first_b, last_f = top.pos_b(0), top.pos_f(n - 1)
    cands = [m * T0, chain,
             top.upto(last_f) + down_from_top + b_chain,                          # end wait
             f_chain + up_to_top + top.total - top.upto(first_b - 1),             # start wait
             _where(first_b < last_f, f_chain + up_to_top + top.segment(first_b, last_f)
                      + down_from_top + b_chain, NEG)]                            # both
    down = (p - 2) * fc + (p - 1) * c                           # middle stages, one chunk
    up = (p - 2) * bc + (p - 1) * c
    late = n - 1 - (v - 1) * p                 # the last stage's last steady backward
    first_last_chunk = bottom.pos_f((v - 1) * p)              # its first chunk-(v-1) forward
    ends = [_clip(k, 0, n - 1) for k in (0, p - 1, late, n - 1)]
    # The sums each excursion needs, once per k1 and per k2 (the same values, in the same
    # order of operations, as computing them inside the loops).
    at_k2 = [(bottom.pos_b(k2), top.upto(top.pos_b(k2) - 1)) for k2 in ends]
    at_k2 = [(jb, bottom.upto(jb), top_before) for jb, top_before in at_k2]
    for k1 in [_clip(k, 0, n - 1) for k in (0, p - 1, n - 1)]:
        jf = bottom.pos_f(k1)
        top_at, bottom_before = top.upto(top.pos_f(k1)), bottom.upto(jf - 1)
        for jb, bottom_to, top_before in at_k2:
            value = (top_at + down + (bottom_to - bottom_before) + up
                     + top.total - top_before)
            cands.append(_where(jb >= jf, value, NEG))
        # down from the top at k1, along the last stage, then the last micro-batch's chain
        jb = bottom.pos_b(late)
        cands.append(_where(jb >= jf, top_at + down
                              + bottom.segment(jf, jb - 1) + b_chain, NEG))
    for jb, bottom_to, top_before in at_k2:
        # micro-batch 0's chain down, along the last stage, up at k2, the top to the end
        cands.append(_where(jb >= first_last_chunk, f_chain + (bottom_to - bottom.upto(
            first_last_chunk)) + up + top.total - top_before, NEG))
    return _where(p == 1, m * (f + b + (ef + eb + lf + lb)), _max(*cands))


def _clip(x, lo, hi):
    """``np.clip`` without its per-call overhead (this module calls it thousands of times on
    small arrays); equal for finite inputs. ``_minimum(_maximum(x, lo), hi)``, with the two
    inlined for Python numbers (predict's rows)."""
    if type(x) in _FAST and type(lo) in _FAST and type(hi) in _FAST:
        x = x if x >= lo else lo
        return x if x <= hi else hi
    return np.minimum(np.maximum(x, lo), hi)


class _Stage:
    """Closed-form sums over one stage's interleaved sequence (arrays broadcast).

    The sequence is ``warmup`` forwards, then (forward, backward) pairs, then the remaining
    backwards; forward k runs chunk (k // p) % v, backward k chunk v − 1 − (k // p) % v.
    Forwards whose ``(k // p) % v == f_key`` cost ``f_extra`` more, backwards whose
    ``(k // p) % v == b_key`` ``b_extra`` more.
    """

    def __init__(self, p, v, n, warmup, fc, bc, f_extra, f_key, b_extra, b_key):
        self.p, self.v, self.n, self.w = p, v, n, warmup
        self.fc, self.bc = fc, bc
        self.f_extra, self.f_key, self.b_extra, self.b_key = f_extra, f_key, b_extra, b_key
        self._known = {}  # upto() of Python-number positions (a row evaluates ~17 of 30 calls)
        self._numbers = all(type(a) in _FAST for a in (p, v, n, warmup, fc, bc, f_extra, f_key,
                                                        b_extra, b_key))
        self.total = self.upto(2 * n - 1)

    def pos_f(self, k):
        """Position of forward k in the sequence."""
        return _where(k < self.w, k, 2 * k - self.w)

    def pos_b(self, k):
        """Position of backward k in the sequence."""
        return _where(k < self.n - self.w, self.w + 2 * k + 1, self.n + k)

    def _count(self, k, key):
        """How many of 0 .. k − 1 have (j // p) % v == key."""
        period = self.p * self.v
        return (k // period) * self.p + _clip(k % period - key * self.p, 0, self.p)

    def upto(self, pos):
        """Time of the sequence's positions 0 .. pos (pos = −1: nothing) [s]."""
        if type(pos) in _FAST:
            known = self._known.get(pos)
            if known is None:
                known = self._known[pos] = (self._upto_number(pos) if self._numbers
                                            else self._upto(pos))
            return known
        return self._upto(pos)

    def _upto_number(self, pos):
        """:meth:`_upto` on Python numbers (a row of predict): the same operations in the same
        order, with :func:`_clip`, :func:`_minimum` and :meth:`_count` written out."""
        p, w, n = self.p, self.w, self.n
        length = pos + 1
        steady = length - w
        steady = steady if steady >= 0 else 0
        most = 2 * (n - w)
        steady = steady if steady <= most else most
        n_f = (length if length <= w else w) + (steady + 1) // 2
        drain = length - w - 2 * (n - w)
        drain = drain if drain >= 0 else 0
        n_b = steady // 2 + (drain if drain <= w else w)
        period = p * self.v
        done_f = n_f % period - self.f_key * p
        done_f = done_f if done_f >= 0 else 0
        done_b = n_b % period - self.b_key * p
        done_b = done_b if done_b >= 0 else 0
        return (n_f * self.fc + n_b * self.bc
                + self.f_extra * ((n_f // period) * p + (done_f if done_f <= p else p))
                + self.b_extra * ((n_b // period) * p + (done_b if done_b <= p else p)))

    def _upto(self, pos):
        length = pos + 1
        steady = _clip(length - self.w, 0, 2 * (self.n - self.w))
        n_f = _minimum(length, self.w) + (steady + 1) // 2
        n_b = steady // 2 + _clip(length - self.w - 2 * (self.n - self.w), 0, self.w)
        return (n_f * self.fc + n_b * self.bc + self.f_extra * self._count(n_f, self.f_key)
                + self.b_extra * self._count(n_b, self.b_key))

    def segment(self, first, last):
        """Time of positions first .. last [s]."""
        return self.upto(last) - self.upto(first - 1)
