"""Real ``torch.distributed.pipelining`` steps on CPU (gloo): the executed order of every
stage's forward and backward actions and its point-to-point traffic, counted exactly.

The yardstick for :func:`fsdpsim.costs.schedule.stage_actions` and
:func:`fsdpsim.costs.schedule.p2p_per_stage`:

* :func:`run_pipeline_cases` (a worker for :func:`fsdpsim.measured.harness.fsdp_runs.launch`, one
  pipeline stage per rank, ``vpp`` chunks each) builds a small MLP of ``pp · vpp`` blocks (a
  ``Linear`` and a ``tanh``; block j is virtual stage j), wraps each chunk in a
  ``PipelineStage`` and runs one of torch's schedules (:data:`TORCH_SCHEDULES`) for a few
  full steps.
* The order is recorded by running, not read from a plan: every stage object's
  ``forward_one_chunk``, ``backward_one_chunk`` and ``backward_weight_one_chunk`` are wrapped
  to log (kind, micro-batch, stage index). torch's ``backward_one_chunk(full_backward=False)``
  is the input-gradient pass (its "I"), fsdpsim's B of zb-h1. Multi-stage schedules also
  expose the plan they run, ``schedule.pipeline_order``; it is returned too. (The single-stage
  ``Schedule1F1B`` also has a ``pipeline_order``, but in torch 2.13 it is wrong for the last
  rank, micro-batches 1..m instead of 0..m−1, while the executed order is right.)
* Point-to-point calls are counted with a ``TorchDispatchMode`` that sees every
  ``c10d::send`` and ``c10d::recv_`` (torch issues one per tensor, also inside
  ``batch_isend_irecv``), with the bytes of the tensors they carry, during the last step: the
  first step also infers shapes and warms the communicators up with extra messages.

torch is imported inside the functions: importing this module does not import torch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal

from fsdpsim.costs.schedule import SCHEDULES

#: fsdpsim schedule name -> torch 2.13 class in ``torch.distributed.pipelining.schedules``.
TORCH_SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
                   "interleaved": "ScheduleInterleaved1F1B",
                   "zb-h1": "ScheduleInterleavedZeroBubble"}
assert set(TORCH_SCHEDULES) == set(SCHEDULES)
#: Schedules torch builds from one stage per rank (the others take a list of stages).
SINGLE_STAGE = ("gpipe", "1f1b")
#: torch's action letters -> fsdpsim's (its input-gradient pass "I" is fsdpsim's B).
KIND = {"F": "F", "B": "B", "I": "B", "W": "W"}

Schedule = Literal["gpipe", "1f1b", "interleaved", "zb-h1"]


@dataclass(frozen=True)
class PipelineCase:
    """One torch pipeline schedule run inside :func:`run_pipeline_cases`."""

    name: str
    """Key of the result."""
    schedule: Schedule
    """fsdpsim's name; the torch class is ``TORCH_SCHEDULES[schedule]``."""
    n_microbatches: int
    """m, micro-batches per step [-]."""
    vpp: int = 1
    """Chunks (torch stages) per rank [-]."""
    width: int = 8
    """Features of every block; a boundary activation is ``rows × width`` fp32 [-]."""
    rows: int = 2
    """Rows (samples) per micro-batch [-]."""
    steps: int = 2
    """Full steps; the order and the traffic are recorded during the last one."""

    @property
    def activation_bytes(self) -> int:
        """Bytes of one micro-batch's activation at a stage boundary (fp32) [bytes]."""
        return self.rows * self.width * 4


@functools.cache
def _p2p_counter_class() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class P2PCounter(TorchDispatchMode):
        """Calls and tensor bytes of ``c10d::send`` and ``c10d::recv_`` run under it."""

        def __init__(self) -> None:
            super().__init__()
            self.counts = {"send_calls": 0, "recv_calls": 0, "send_bytes": 0,
                           "recv_bytes": 0}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            import torch

            kwargs = kwargs or {}
            if func.namespace == "c10d" and func._opname in ("send", "recv_"):
                kind = "send" if func._opname == "send" else "recv"
                self.counts[f"{kind}_calls"] += 1
                self.counts[f"{kind}_bytes"] += sum(
                    t.numel() * t.element_size() for t in tree_leaves(args[0])
                    if isinstance(t, torch.Tensor))
            return func(*args, **kwargs)

    return P2PCounter


def _log_actions(stage, log: list) -> None:
    """Wrap one stage's compute methods so that every call appends (kind, mb, stage)."""
    forward, backward = stage.forward_one_chunk, stage.backward_one_chunk
    weight = stage.backward_weight_one_chunk

    def forward_one_chunk(mb, *args, **kwargs):
        log.append(("F", mb, stage.stage_index))
        return forward(mb, *args, **kwargs)

    def backward_one_chunk(mb, *args, **kwargs):
        log.append(("B" if kwargs.get("full_backward", True) else "I", mb, stage.stage_index))
        return backward(mb, *args, **kwargs)

    def backward_weight_one_chunk(mb, *args, **kwargs):
        log.append(("W", mb, stage.stage_index))
        return weight(mb, *args, **kwargs)

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk
    stage.backward_weight_one_chunk = backward_weight_one_chunk


def run_pipeline_case(rank: int, world_size: int, case: PipelineCase) -> dict[str, Any]:
    """Run ``case`` on this rank (stage ``rank`` of ``world_size``, chunks rank, rank + pp,
    ...); return the executed order, the plan and the p2p counts of the last step.

    ``order`` is a list of (kind, microbatch, stage index) with fsdpsim's kinds;
    ``pipeline_order`` the compute actions of ``schedule.pipeline_order[rank]`` in the same
    form (None for single-stage schedules); ``p2p`` the :class:`P2PCounter` counts.
    """
    import torch
    import torch.distributed.pipelining.schedules as schedules
    from torch.distributed.pipelining import PipelineStage

    torch.manual_seed(0)                                     # same blocks on every rank
    n_virtual = world_size * case.vpp
    blocks = [torch.nn.Sequential(torch.nn.Linear(case.width, case.width), torch.nn.Tanh())
              for _ in range(n_virtual)]
    stages = [PipelineStage(blocks[j], j, n_virtual, torch.device("cpu"))
              for j in range(rank, n_virtual, world_size)]
    log: list = []
    for stage in stages:
        _log_actions(stage, log)

    def loss_fn(output, target):
        return ((output - target) ** 2).mean()

    cls = getattr(schedules, TORCH_SCHEDULES[case.schedule])
    schedule = (cls(stages[0], case.n_microbatches, loss_fn=loss_fn)
                if case.schedule in SINGLE_STAGE
                else cls(stages, case.n_microbatches, loss_fn=loss_fn))
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(case.n_microbatches * case.rows, case.width, generator=gen)
    target = torch.randn(case.n_microbatches * case.rows, case.width, generator=gen)
    has_first = any(s.is_first for s in stages)
    has_last = any(s.is_last for s in stages)
    counter = None
    for _ in range(case.steps):
        log.clear()
        counter = _p2p_counter_class()()
        with counter:
            args = (x,) if has_first else ()
            kwargs = {"target": target} if has_last else {}
            schedule.step(*args, **kwargs)
    plan = None
    if case.schedule not in SINGLE_STAGE:
        plan = [(KIND[a.computation_type.value], a.microbatch_index, a.stage_index)
                for a in schedule.pipeline_order[rank]
                if a is not None and a.computation_type.value in KIND]
    return {"order": [(KIND[k], mb, j) for k, mb, j in log], "pipeline_order": plan,
            "p2p": dict(counter.counts)}


def run_pipeline_cases(rank: int, world_size: int, cases) -> dict[str, Any]:
    """Worker for :func:`fsdpsim.measured.harness.fsdp_runs.launch`: each case in turn, by name."""
    import torch.distributed as dist

    out = {}
    for case in cases:
        out[case.name] = run_pipeline_case(rank, world_size, case)
        dist.barrier()
    return out
