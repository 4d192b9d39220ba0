"""fsdpsim's pipeline orders and point-to-point counts against torch 2.13's pipelining runtime.

Four spawned gloo ranks (one pipeline stage each) run a small MLP through
``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B`` (2 chunks per rank) and
``ScheduleInterleavedZeroBubble`` with one chunk per rank, which is ZB-H1 (Qi et al. 2024,
§2.1: 1F1B's warm-up, W passes delayed by the stage index; the same torch class with more
chunks is the interleaved ZB1P, which fsdpsim does not model). Each case runs two steps and is
recorded during the second (:mod:`fsdpsim.measured.harness.pipeline_runs`):

* the executed order of every rank's F, B (torch's input-gradient "I" for zb-h1) and W calls
  equals :func:`fsdpsim.costs.schedule.stage_actions`, action for action; for the multi-stage
  schedules so does the plan torch runs from (``schedule.pipeline_order``);
* the ``c10d::send`` / ``c10d::recv_`` calls and their tensor bytes on every rank equal
  :func:`fsdpsim.costs.schedule.p2p_per_stage` exactly.

One launch (about 15-25 s on two cores, hard limit 150 s so a hang fails instead of blocking).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fsdpsim.costs.schedule import Action, p2p_per_stage, stage_actions  # noqa: E402
from fsdpsim.measured.harness.fsdp_runs import launch  # noqa: E402
from fsdpsim.measured.harness.pipeline_runs import PipelineCase, run_pipeline_cases  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # spawned gloo ranks: 10-30 s each run

PP = 4
CASES = (
    PipelineCase("gpipe", "gpipe", n_microbatches=6),
    PipelineCase("1f1b", "1f1b", n_microbatches=6),
    PipelineCase("1f1b-m=p", "1f1b", n_microbatches=PP),
    PipelineCase("interleaved", "interleaved", n_microbatches=8, vpp=2),
    PipelineCase("zb-h1", "zb-h1", n_microbatches=6),
)


@pytest.fixture(scope="module")
def runs():
    """Every case's per-rank results, from one 4-rank launch."""
    return launch(run_pipeline_cases, PP, (CASES,), timeout_s=150.0)


def as_torch(actions: list[Action], stage: int) -> list[tuple[str, int, int]]:
    """fsdpsim's actions of one stage as (kind, microbatch, torch stage index)."""
    return [(a.kind, a.microbatch, a.chunk * PP + stage) for a in actions]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_executed_order_equals_stage_actions(runs, case):
    expected = stage_actions(case.schedule, PP, case.n_microbatches, case.vpp)
    for rank in range(PP):
        got = runs[rank][case.name]
        assert got["order"] == as_torch(expected[rank], rank), f"rank {rank}"
        if got["pipeline_order"] is not None:                 # multi-stage schedules
            assert got["pipeline_order"] == as_torch(expected[rank], rank), f"rank {rank}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_p2p_calls_and_bytes_equal_p2p_per_stage(runs, case):
    expected = p2p_per_stage(PP, case.vpp, case.n_microbatches, case.activation_bytes)
    got = {key: [runs[r][case.name]["p2p"][key] for r in range(PP)]
           for key in ("send_calls", "recv_calls", "send_bytes", "recv_bytes")}
    assert got["send_calls"] == expected.send_calls.tolist()
    assert got["recv_calls"] == expected.recv_calls.tolist()
    assert got["send_bytes"] == expected.send_bytes.tolist()
    assert got["recv_bytes"] == expected.recv_bytes.tolist()
