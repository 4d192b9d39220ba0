"""Pipeline-parallel schedules: the order of forward and backward actions on every stage.

Each schedule is an explicit, ordered list of actions per stage (:func:`stage_actions`), the
way Megatron-LM's ``schedules.py`` and ``torch.distributed.pipelining`` run them, so the bubble
is counted, not assumed: :func:`fsdpsim.costs.schedule_sim.simulate` plays the lists against
their data dependencies, and the vectorised closed forms the engine uses
(:func:`pipeline_time_s`, derived in :mod:`fsdpsim.costs.schedule_closed`) are tested equal to
that simulation. This module also counts what the orders imply without timing them: the
activations a stage holds at its peak (:func:`in_flight_microbatches`) and the point-to-point
sends and receives of every stage (:func:`p2p_per_stage`), both checked against torch 2.13 in
``tests/test_torch_pipeline.py``.

Schedules (p stages, m micro-batches per optimizer step, v model chunks per stage)
----------------------------------------------------------------------------------
============  ==================================================  =============================
name          order on stage s                                    source
============  ==================================================  =============================
gpipe         all m forwards, then all m backwards                [1]; torch ``ScheduleGPipe``
1f1b          min(p−s−1, m) warm-up forwards, then (F, B) pairs,  [2] §2.2; [3]; torch
              then the remaining backwards                        ``Schedule1F1B``
interleaved   1F1B over v chunks per stage: min((v−1)·p +         [2] §2.2.2; [3]; torch
              2·(p−s−1), m·v) warm-up forwards, chunks taken in   ``ScheduleInterleaved1F1B``
              groups of p micro-batches; needs m divisible by p
zb-h1         1F1B with each backward split into B (input         [4] §2.1; torch
              gradient) and W (weight gradient); stage s runs     ``ScheduleInterleavedZero
              each W s backwards late, so every stage holds at    Bubble`` with one chunk per
              most p micro-batches until their W                  stage
============  ==================================================  =============================

Textbook results, equal stages, no point-to-point time (``pipeline_time_s`` reproduces them
exactly): GPipe and 1F1B step = (m + p − 1)·(t_F + t_B), bubble fraction (p − 1)/(m + p − 1)
([2] §2.2.1); interleaved bubble (p − 1)·(t_F + t_B)/v ([2] §2.2.2); ZB-H1 bubble
(p − 1)·(t_F + t_B − t_W) for t_W ≤ t_B ([4] §2.1), (p − 1)·t_F otherwise.

References
----------
[1] Huang et al. 2019, "GPipe", NeurIPS, arXiv 1811.06965.
[2] Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM", SC21, arXiv 2104.04473.
[3] Megatron-LM ``megatron/core/pipeline_parallel/schedules.py``:
    ``forward_backward_pipelining_without_interleaving`` and ``..._with_interleaving``.
[4] Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR, arXiv 2401.10241.
[5] Korthikanti et al. 2023, "Reducing Activation Recomputation in Large Transformer Models",
    arXiv 2205.05198, §4.2.3 (interleaved schedules hold (1 + (p − 1)/(p·v)) × 1F1B's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from fsdpsim.costs import schedule_closed as closed
from fsdpsim.costs.args import choice_codes
from fsdpsim.costs.compute import (all_of, any_of, as_array, as_values, broadcast_shape, maximum,
                                   minimum, where)
from fsdpsim.util.errors import ConfigError, suggest

#: Pipeline schedules, in the order of their integer codes.
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")
SCHEDULE_CODES = {name: code for code, name in enumerate(SCHEDULES)}
GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1 = range(len(SCHEDULES))


class Action(NamedTuple):
    """One compute action of a pipeline stage."""

    kind: str
    """``"F"`` forward, ``"B"`` backward (zb-h1: its input-gradient part only), ``"W"`` the
    weight-gradient part of a backward (zb-h1 only)."""
    microbatch: int
    """Micro-batch index, 0 .. n_microbatches − 1."""
    chunk: int
    """Model chunk on this stage, 0 .. vpp − 1; stage s's chunk c is virtual stage c·pp + s."""


# ============================================================================ orders
def check_schedule(schedule, pp, n_microbatches, vpp=1) -> str:
    """Validate one schedule configuration and return the schedule's name.

    Raises :class:`ConfigError` naming the offending value and what is accepted.
    """
    if isinstance(schedule, (int, np.integer)) and not isinstance(schedule, bool):
        if not 0 <= schedule < len(SCHEDULES):
            raise ConfigError(f"pipeline schedule code {schedule} is out of range; accepted: "
                              f"0..{len(SCHEDULES) - 1} for {', '.join(SCHEDULES)}")
        schedule = SCHEDULES[schedule]
    if schedule not in SCHEDULES:
        raise ConfigError(f"pipeline schedule {schedule!r} is not accepted; accepted: "
                          f"{', '.join(SCHEDULES)}" + suggest(str(schedule), SCHEDULES))
    for name, value in (("pp", pp), ("n_microbatches", n_microbatches), ("vpp", vpp)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    if vpp > 1 and schedule != "interleaved":
        raise ConfigError(f"vpp({vpp}) > 1 needs the 'interleaved' schedule, got {schedule!r}")
    if schedule == "interleaved" and n_microbatches % pp:
        raise ConfigError(f"the 'interleaved' schedule needs n_microbatches divisible by pp, as "
                          f"Megatron-LM requires: n_microbatches({n_microbatches}) % pp({pp}) "
                          f"= {n_microbatches % pp}")
    return schedule


def stage_actions(schedule, pp: int, n_microbatches: int, vpp: int = 1) -> list[list[Action]]:
    """The ordered compute actions of every pipeline stage for one optimizer step.

    Parameters
    ----------
    schedule : one of :data:`SCHEDULES`, or its code
    pp : p, pipeline stages (devices) [-]
    n_microbatches : m, micro-batches per optimizer step [-]
    vpp : v, model chunks per stage; > 1 only for ``"interleaved"`` [-]

    Returns
    -------
    ``actions[s]``: the :class:`Action` list stage s runs, in order (see the module table).
    Every micro-batch has exactly one F and one B (and for zb-h1 one W) per chunk. The orders
    equal torch 2.13's executed orders action for action (``tests/test_torch_pipeline.py``).
    """
    schedule = check_schedule(schedule, pp, n_microbatches, vpp)
    p, m, v = int(pp), int(n_microbatches), int(vpp)
    if schedule == "gpipe":
        return [[Action("F", i, 0) for i in range(m)] + [Action("B", i, 0) for i in range(m)]
                for _ in range(p)]
    if schedule == "interleaved":
        return [_interleaved(p, s, m, v) for s in range(p)]
    return [_one_f_one_b(p, s, m, split_w=schedule == "zb-h1") for s in range(p)]


def _one_f_one_b(p: int, s: int, m: int, split_w: bool) -> list[Action]:
    """1F1B on stage s ([3] warm-up / steady / cool-down); with ``split_w``, ZB-H1 ([4] §2.1).

    ZB-H1 delays stage s's W passes by s backwards (torch: ``num_1f1b_microbatches = rank``):
    stage s has p − s − 1 warm-up forwards, so it holds p micro-batches until their W, like
    stage 0 in 1F1B; the s W's still owed run after the last backward and fill the cool-down.
    """
    warmup = min(p - s - 1, m)
    order = [Action("F", i, 0) for i in range(warmup)]
    for i in range(m):
        if warmup + i < m:                        # steady state: one forward, one backward
            order.append(Action("F", warmup + i, 0))
        order.append(Action("B", i, 0))
        if split_w and i >= s:                    # ZB-H1: W runs s backwards late
            order.append(Action("W", i - s, 0))
    if split_w:                                   # the W's still owed, at the end
        order += [Action("W", i, 0) for i in range(max(m - s, 0), m)]
    return order


def _interleaved(p: int, s: int, m: int, v: int) -> list[Action]:
    """Interleaved 1F1B on stage s with v chunks ([3] ``get_model_chunk_id``, m % p == 0).

    The k-th forward runs chunk ``(k // p) % v`` and the k-th backward chunk
    ``v − 1 − (k // p) % v``, both for micro-batch ``(k // (p·v))·p + k % p``.
    """
    total = m * v
    warmup = min((v - 1) * p + 2 * (p - s - 1), total)

    def microbatch(k: int) -> int:
        return (k // (p * v)) * p + k % p

    def forward(k: int) -> Action:
        return Action("F", microbatch(k), (k // p) % v)

    def backward(k: int) -> Action:
        return Action("B", microbatch(k), v - 1 - (k // p) % v)

    order = [forward(k) for k in range(warmup)]
    for k in range(total - warmup):               # steady state: F then B
        order += [forward(warmup + k), backward(k)]
    order += [backward(k) for k in range(total - warmup, total)]
    return order


# ============================================================================ counts
@dataclass(frozen=True)
class P2PCounts:
    """Point-to-point traffic of every stage in one optimizer step (arrays of length pp)."""

    send_calls: np.ndarray
    """Sends: activations to the next virtual stage, input gradients to the previous [-]."""
    recv_calls: np.ndarray
    """Receives, the mirror image of the sends [-]."""
    send_bytes: np.ndarray
    """Tensor bytes sent [bytes]."""
    recv_bytes: np.ndarray
    """Tensor bytes received [bytes]."""


def p2p_per_stage(pp: int, vpp: int, n_microbatches: int, activation_bytes) -> P2PCounts:
    """Point-to-point sends and receives per stage per optimizer step.

    Virtual stage j (chunk c of stage s, j = c·p + s) sends each micro-batch's output
    activation to j + 1 unless it is the last, and the gradient of its input to j − 1 unless it
    is the first; both tensors have the shape of one micro-batch's activation at a stage
    boundary. Per stage s of p ≥ 2:

        sends_s = recvs_s = m · (2·v − [s = 0] − [s = p − 1])

    The count does not depend on the schedule (GPipe, 1F1B, ZB-H1 and interleaved move the
    same tensors, in different orders; a W pass sends nothing). With p = 1 there is nothing
    to send. torch sends each tensor with its own ``isend``/``irecv``, even when it batches
    them (``batch_isend_irecv``); the counts equal the ``c10d::send``/``c10d::recv_`` calls of a
    torch 2.13 step after the first (the first also infers shapes and warms the
    communicators up).

    Parameters
    ----------
    pp, vpp, n_microbatches : p, v, m [-]
    activation_bytes : bytes of one micro-batch's boundary activation (b·s·h·bytes per
        element with the sequence and tensor sharding the plan applies) [bytes]
    """
    for name, value in (("pp", pp), ("vpp", vpp), ("n_microbatches", n_microbatches)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    p, v, m = int(pp), int(vpp), int(n_microbatches)
    stage = np.arange(p)
    if p == 1:
        calls = np.zeros(1)
    else:
        calls = m * (2.0 * v - (stage == 0) - (stage == p - 1))
    nbytes = calls * float(activation_bytes)
    return P2PCounts(send_calls=calls, recv_calls=calls.copy(), send_bytes=nbytes,
                     recv_bytes=nbytes.copy())


def in_flight_microbatches(schedule_code, pp, vpp, n_microbatches, stage=0):
    """Micro-batches whose activations a stage holds at its peak (by default the first, the
    most loaded one) [-].

    In units of one stage's full activations (an interleaved chunk counts 1 / v). A stage
    holds a micro-batch from the start of its forward to the end of its backward (B), under
    zb-h1 to the end of its weight-gradient pass (W); the peak comes just before the stage's
    first backward (zb-h1: its first W). For stage s (0-based):

    * gpipe: m (every forward runs before the first backward).
    * 1f1b: min(p − s, m): p − s − 1 warm-up forwards plus the first steady-state one; the
      first stage holds p ([2] §2.2.1), the last 1.
    * zb-h1: min(p, m) on every stage. Stage s runs 1F1B's p − s − 1 warm-up forwards and
      starts its W passes s backwards late, so p − s micro-batches wait for their B and s
      more for their W: "all pipeline stages have the same number of in-flight
      microbatches" ([4] §2.1), p, the first stage's 1F1B count. A micro-batch past its B
      keeps only what W reads (the linear layers' inputs and output gradients, M_W = 32·bsh
      against M_B = 34·bsh + 5·as²b, [4] Table 1); it is counted whole here, an upper bound
      by at most (M_B − M_W)/M_B of the s micro-batches awaiting W.
    * interleaved: min(w_s + 1, m·v) / v chunks with w_s = (v − 1)·p + 2·(p − s − 1) warm-up
      forwards. The first stage holds p + (p − 1)/v = p·(1 + (p − 1)/(p·v)) when m·v > w_0:
      more than 1F1B's p by (p − 1)/v, the factor of [5] §4.2.3 (and [2] §2.2.2); the last
      holds ((v − 1)·p + 1)/v, not 1.

    Vectorised: every argument may be an array; codes as in :data:`SCHEDULE_CODES` (or names).
    Equal to :func:`fsdpsim.costs.schedule_sim.simulate`'s ``peak_in_flight`` (zb-h1:
    ``peak_in_flight_until_w``; tested).
    """
    code = _codes(schedule_code)
    p, v, m, s = as_array(pp), as_array(vpp), as_array(n_microbatches), as_array(stage)
    warmup = minimum((v - 1.0) * p + 2.0 * (p - s - 1.0), m * v)
    interleaved = minimum(warmup + 1.0, m * v) / v
    one_f_one_b = where(code == ZB_H1, minimum(p, m), minimum(p - s, m))
    return where(code == GPIPE, m, where(code == INTERLEAVED, interleaved, one_f_one_b))


# ============================================================================ time
#: Up to this many configurations the closed forms run on Python floats, row by row (same
#: formulas; numpy's per-call overhead dominates small arrays).
SMALL = 8


def pipeline_time_s(schedule_code, pp, vpp, n_microbatches, stage_fwd_s, stage_bwd_s,
                    stage_wgrad_s=0.0, p2p_s=0.0, first_extra_fwd_s=0.0,
                    first_extra_bwd_s=0.0, last_extra_fwd_s=0.0, last_extra_bwd_s=0.0,
                    check=True):
    """Makespan of one optimizer step's pipeline (all micro-batches) and its bubble [s].

    Parameters
    ----------
    schedule_code : code (or name) of :data:`SCHEDULES`, scalar or array
    pp, vpp, n_microbatches : p, v, m (whole numbers ≥ 1; arrays allowed) [-]
    stage_fwd_s : f, one micro-batch's forward through one (uniform) stage's layers, all its
        chunks together (a chunk takes f / v) [s]
    stage_bwd_s : b, its backward [s]. zb-h1 runs b as the input-gradient pass B and
        ``stage_wgrad_s`` as the weight-gradient pass W; every other schedule runs one
        backward of b + w.
    stage_wgrad_s : w, the weight-gradient part of the backward (0 when b is the full one) [s]
    p2p_s : c, one activation or gradient send between adjacent stages [s]; asynchronous, it
        delays the receiver only
    first_extra_fwd_s, first_extra_bwd_s : the first stage's extra work per micro-batch
        (embedding), on its first chunk [s]
    last_extra_fwd_s, last_extra_bwd_s : the last stage's extra work per micro-batch (final
        norm, LM head and loss), on its last chunk [s]. zb-h1 puts both backward extras in B.
    check : False skips the checks below (the engine's inputs: integer codes, whole degrees,
        feasible schedules and non-negative times, checked with its plan)

    Returns
    -------
    (step_s, bubble_s) : the makespan, and ``step_s − m · (f + b + w + extras of the busiest
    stage)``, the time the busiest stage idles [s]. With p = 1 the step is exactly
    m · (f + b + w + all extras) and the bubble 0.

    Exact (equal to :func:`fsdpsim.costs.schedule_sim.simulate` to 1e-9) for gpipe, 1f1b and
    zb-h1 for any non-negative inputs. For interleaved exact with equal stages (no extras)
    and ``p2p_s ≤ min(f, b + w) / v``; otherwise a lower bound (the longest of several real
    paths of the schedule) that is at most 15 % short, 1.6 % on average, with extras up to a
    whole stage's compute each and p2p up to one chunk's pass (``tests/test_schedule.py``).
    Derivations in :mod:`fsdpsim.costs.schedule_closed`.

    Raises
    ------
    ConfigError
        For an unknown schedule, degrees below 1 or not whole, negative times, vpp > 1 with a
        schedule other than interleaved, or interleaved with m not divisible by p (mask such
        configurations out of a sweep first with :func:`schedule_feasible`).
    """
    names = ("stage_fwd_s", "stage_bwd_s", "stage_wgrad_s", "p2p_s", "first_extra_fwd_s",
             "first_extra_bwd_s", "last_extra_fwd_s", "last_extra_bwd_s")
    values = (stage_fwd_s, stage_bwd_s, stage_wgrad_s, p2p_s, first_extra_fwd_s,
              first_extra_bwd_s, last_extra_fwd_s, last_extra_bwd_s)
    if check:
        code = _codes(schedule_code)
        p, v, m = (_whole(name, x) for name, x in
                   (("pp", pp), ("vpp", vpp), ("n_microbatches", n_microbatches)))
        bad = ~schedule_feasible(code, p, v, m)
        if any_of(bad):
            cases = sorted({(SCHEDULES[int(k)], int(a), int(b), int(c)) for k, a, b, c in
                            zip(*(np.broadcast_to(x, bad.shape)[bad] for x in (code, p, v, m)))})
            raise ConfigError("pipeline configurations not accepted (interleaved needs "
                              "n_microbatches divisible by pp; vpp > 1 needs interleaved): "
                              + "; ".join(f"{s}: pp({a}) vpp({b}) n_microbatches({c})"
                                          for s, a, b, c in cases[:5]))
    else:
        code = as_values(schedule_code).astype(np.int64)
        p, v, m = (as_array(x).astype(np.int64) for x in (pp, vpp, n_microbatches))
    times = [as_array(x) for x in values]
    if check:
        for name, t in zip(names, times):
            if any_of(t < 0):
                raise ConfigError(f"{name} must be >= 0 seconds, got "
                                  f"{sorted(set(t[t < 0].ravel().tolist()))}")
    columns = (code, p, v, m, *times)
    shape = broadcast_shape(*(x.shape for x in columns))
    size = math.prod(shape)
    if size <= SMALL and all(x.size == 1 or x.shape == shape for x in columns):
        # A few rows (predict): Python floats skip numpy's overhead, row by row.
        rows = zip(*(x.ravel().tolist() if x.size > 1 else [x.item()] * size for x in columns))
        stages: dict = {}  # the interleaved stage sums rows share (predict's twin)
        step = np.array([_form_s(*row, stages=stages) for row in rows]).reshape(shape)
        f, b, w, ef, eb, lf, lb = times[0], times[1], times[2], *times[4:]
        full_b = b + w
    else:
        code, p, v, m, f, b, w, c, ef, eb, lf, lb = np.broadcast_arrays(*columns)
        full_b = b + w
        step = np.zeros(code.shape)
        with np.errstate(invalid="ignore", divide="ignore"):
            # Each schedule's form on its own entries only (the interleaved one is the
            # costliest).
            for k, form in enumerate(FORMS):
                on = code == k
                count = np.count_nonzero(on)
                if count == on.size:  # every entry this schedule: no masked copies
                    step = form(*_form_args(k, p, v, m, f, b, w, c, ef, eb, lf, lb))
                    break
                if count:
                    step[on] = form(*(x[on] for x in _form_args(k, p, v, m, f, b, w, c, ef,
                                                                eb, lf, lb)))
    busiest = f + full_b + where(p == 1, ef + eb + lf + lb, maximum(ef + eb, lf + lb))
    return step, step - m * busiest


FORMS = (closed.gpipe_time_s, closed.one_f_one_b_time_s, closed.interleaved_time_s,
         closed.zb_h1_time_s)


def _form_args(k, p, v, m, f, b, w, c, ef, eb, lf, lb):
    """The arguments of schedule ``k``'s closed form (:data:`FORMS`)."""
    if k == INTERLEAVED:
        return p, v, m, f, b + w, c, ef, eb, lf, lb
    if k == ZB_H1:
        return p, m, f, b, w, c, ef, eb, lf, lb
    return p, m, f, b + w, c, ef, eb, lf, lb


def _form_s(code, p, v, m, f, b, w, c, ef, eb, lf, lb, stages=None):
    """One row's makespan [s] on Python numbers (:func:`pipeline_time_s`); ``stages``: the
    interleaved form's stage sums shared by the rows of one call."""
    k = int(code)
    args = [float(x) for x in _form_args(k, p, v, m, f, b, w, c, ef, eb, lf, lb)]
    if k == INTERLEAVED and stages is not None:
        return FORMS[k](*args, stages=stages)
    return FORMS[k](*args)


def schedule_feasible(schedule_code, pp, vpp, n_microbatches):
    """Boolean mask of the configurations :func:`pipeline_time_s` accepts (vectorised):
    vpp = 1 unless interleaved, and n_microbatches divisible by pp for interleaved ([3])."""
    code = _codes(schedule_code)
    p, v, m = as_array(pp), as_array(vpp), as_array(n_microbatches)
    interleaved = code == INTERLEAVED
    shape = broadcast_shape(np.shape(interleaved), np.shape(m), np.shape(p), np.shape(v))
    if shape and not any_of(interleaved):  # np.where's result without the remainders
        return np.broadcast_to(v == 1, shape).copy()
    return np.where(interleaved, np.mod(m, p) == 0, v == 1)


def _codes(schedule_code) -> np.ndarray:
    """Integer schedule codes from names, integer codes or whole-number float codes (the
    engine's input bundle stores categorical columns as floats)."""
    if type(schedule_code) in _INTEGERS and 0 <= schedule_code < len(SCHEDULES):
        return np.int64(schedule_code)  # one configuration's code: no array to check
    arr = np.asarray(schedule_code)
    if arr.dtype.kind == "f" and all_of(arr == np.round(arr)):
        arr = arr.astype(np.int64)
    return choice_codes(arr, SCHEDULES, "pipeline schedule")


_INTEGERS = frozenset((int, np.int64))


def _whole(name: str, value) -> np.ndarray:
    """``value`` as an int64 array, or a ConfigError if any element is below 1 or not whole."""
    x = as_array(value)
    if any_of(x < 1) or any_of(x != np.round(x)):
        bad = sorted(set(x[(x < 1) | (x != np.round(x))].ravel().tolist()))
        raise ConfigError(f"{name} must be a whole number >= 1, got {bad}")
    return x.astype(np.int64)
