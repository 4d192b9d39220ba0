"""Event-driven simulation of a pipeline schedule: the yardstick for the closed forms.

:func:`simulate` plays the per-stage action lists of
:func:`fsdpsim.costs.schedule.stage_actions` against their data dependencies and returns the
makespan, every stage's busy and idle time and its activations in flight. It is plain Python
(one config at a time): the engine uses the vectorised closed forms of
:mod:`fsdpsim.costs.schedule`, and the tests check those against this.

Rules (the dependencies of Megatron-LM's and torch's schedules, with communication
idealised as asynchronous):

* Each stage runs its actions in list order, one at a time (one compute stream).
* Virtual stage j = chunk · p + stage. F(i, j) starts after F(i, j − 1) ends, plus ``p2p_s``
  when j − 1 lives on another device (the activation send). B(i, j) starts after B(i, j + 1)
  ends, plus ``p2p_s`` across devices (the gradient send); B(i, last) after F(i, last). W(i, j)
  after B(i, j). Sends are asynchronous: they delay the receiver, never the sender.
* An action starts when its stage is free and its input has arrived; nothing else waits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fsdpsim.costs.schedule import Action
from fsdpsim.util.errors import ConfigError


@dataclass(frozen=True)
class SimResult:
    """Outcome of :func:`simulate` (seconds; per-stage arrays of length pp)."""

    makespan_s: float
    """From the first forward's start to the last action's end [s]."""
    busy_s: np.ndarray
    """Compute time of each stage [s]."""
    idle_s: np.ndarray
    """``makespan_s − busy_s``: each stage's bubble over the whole step [s]."""
    peak_in_flight: np.ndarray
    """Most micro-batches whose forward is done and backward (B) is not, per stage, in units of
    one stage's full activations (an interleaved chunk counts 1 / vpp) [-]."""
    peak_in_flight_until_w: np.ndarray
    """As ``peak_in_flight`` but held until the W pass (zb-h1); equal to it without W's [-]."""
    start_s: dict
    """``start_s[(stage, action)]``: when each action started [s]."""
    end_s: dict
    """``end_s[(stage, action)]``: when each action ended [s]."""


def _per_chunk(name: str, value, pp: int, vpp: int) -> np.ndarray:
    """A time as a (pp, vpp) array of per-chunk seconds.

    A scalar or a length-pp sequence is a whole stage's time, split evenly over its chunks;
    a (pp, vpp) array is per chunk already.
    """
    x = np.asarray(value, dtype=float)
    if x.ndim == 0:
        return np.full((pp, vpp), float(x) / vpp)
    if x.shape == (pp,):
        return np.repeat(x[:, None] / vpp, vpp, axis=1)
    if x.shape == (pp, vpp):
        return x.copy()
    raise ConfigError(f"{name}: expected a scalar, {pp} per-stage values or a ({pp}, {vpp}) "
                      f"per-chunk array, got shape {x.shape}")


def simulate(actions: list[list[Action]], fwd_s, bwd_s, wgrad_s=0.0, p2p_s=0.0) -> SimResult:
    """Run a pipeline schedule's action lists against their dependencies.

    Parameters
    ----------
    actions : ``actions[s]`` = the ordered actions of stage s (:func:`stage_actions`)
    fwd_s : one micro-batch's forward time of a stage [s]: a scalar, a length-pp sequence
        (each stage's time; a chunk takes stage time / vpp) or a (pp, vpp) array per chunk
    bwd_s : backward time, same shapes [s]. With W actions in the lists it is the
        input-gradient part; without, B runs the full backward ``bwd_s + wgrad_s``.
    wgrad_s : weight-gradient time, same shapes [s] (the W actions' time)
    p2p_s : one activation or gradient send between adjacent devices [s]

    Returns
    -------
    :class:`SimResult`.

    Raises
    ------
    ConfigError
        When the lists deadlock (an action waits on one that its stage runs later) or a time
        array has the wrong shape.
    """
    pp = len(actions)
    vpp = 1 + max((a.chunk for acts in actions for a in acts), default=0)
    fwd = _per_chunk("fwd_s", fwd_s, pp, vpp)
    bwd = _per_chunk("bwd_s", bwd_s, pp, vpp)
    wgrad = _per_chunk("wgrad_s", wgrad_s, pp, vpp)
    has_w = any(a.kind == "W" for acts in actions for a in acts)
    duration = {"F": fwd, "B": bwd if has_w else bwd + wgrad, "W": wgrad}
    c = float(p2p_s)
    n_virtual = pp * vpp

    end: dict[tuple[str, int, int], float] = {}   # (kind, microbatch, virtual stage) -> end
    start_s: dict = {}
    end_s: dict = {}
    free = [0.0] * pp                              # when each stage's stream is free
    nxt = [0] * pp                                 # next action index per stage

    def ready(stage: int, a: Action) -> float | None:
        """Arrival time of the action's input, or None if not produced yet."""
        j = a.chunk * pp + stage
        if a.kind == "F":
            if j == 0:
                return 0.0
            key, hop = ("F", a.microbatch, j - 1), (j - 1) % pp != stage
        elif a.kind == "B":
            if j == n_virtual - 1:
                key, hop = ("F", a.microbatch, j), False
            else:
                key, hop = ("B", a.microbatch, j + 1), (j + 1) % pp != stage
        else:
            key, hop = ("B", a.microbatch, j), False
        if key not in end:
            return None
        return end[key] + (c if hop else 0.0)

    remaining = sum(len(acts) for acts in actions)
    while remaining:
        progressed = False
        for stage in range(pp):
            # Run every action of this stage whose input is there.
            while nxt[stage] < len(actions[stage]):
                a = actions[stage][nxt[stage]]
                t_in = ready(stage, a)
                if t_in is None:
                    break
                t0 = max(free[stage], t_in)
                t1 = t0 + duration[a.kind][stage, a.chunk]
                end[(a.kind, a.microbatch, a.chunk * pp + stage)] = t1
                start_s[(stage, a)], end_s[(stage, a)] = t0, t1
                free[stage] = t1
                nxt[stage] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {s: actions[s][nxt[s]] for s in range(pp) if nxt[s] < len(actions[s])}
            raise ConfigError(f"pipeline schedule deadlocks: stages wait on {stuck}")

    makespan = max(free)
    busy = np.array([sum(duration[a.kind][s, a.chunk] for a in actions[s]) for s in range(pp)])
    in_flight, until_w = [], []
    for s in range(pp):
        in_flight.append(_peak_held(actions[s], "B", vpp))
        until_w.append(_peak_held(actions[s], "W" if has_w else "B", vpp))
    return SimResult(makespan_s=makespan, busy_s=busy, idle_s=makespan - busy,
                     peak_in_flight=np.array(in_flight), peak_in_flight_until_w=np.array(until_w),
                     start_s=start_s, end_s=end_s)


def _peak_held(acts: list[Action], release: str, vpp: int) -> float:
    """Peak of (forwards done − ``release`` actions done) on one stage, each chunk 1 / vpp.

    A micro-batch's activations are allocated when its forward starts and freed when its
    ``release`` action ends, so the peak is reached during a forward (counted as held).
    """
    held = peak = 0
    for a in acts:
        if a.kind == "F":
            held += 1
            peak = max(peak, held)
        elif a.kind == release:
            held -= 1
    return peak / vpp
