"""``fsdpsim search`` against the hand-tuned plans of published runs.

By fsdpsim's own model the search's best must be at least as fast as every published plan in
its space that fits: a published plan that beats it is either outside the space (a rule of
:mod:`fsdpsim.drivers.search.space`, which :func:`outside_space` names) or a defect of the search. The
rows (``validation/data``, built exactly as ``fsdpsim validate`` builds them by
``tools/search_vs_published.py``) are a few small ones chosen for speed and spread: Megatron-LM
PTD-P (Narayanan et al., SC21), vTrain's Megatron-DeepSpeed (Bang et al., MICRO 2024), NeMo 24.07
(interleaved PP, CP; Megatron-Core), NeMo's long-sequence table (TP × CP), InternEvo (TP, ZeRO-1)
and DLPerf (V100 fp16, TP and PP). Two published plans lie outside the space (interleaving with
10 chunks per rank, TP 16 across nodes) and the search must still beat them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

from fsdpsim.plan.parallel import ParallelPlan
from fsdpsim.drivers.search.space import MAX_VPP, SearchSpace

TOOLS = Path(__file__).resolve().parents[1] / "tools"

#: Representative small rows: (id, what it covers).
ROWS = {
    "megatron-sc21-t1-01": "SC21, 32 A100, pure DP, full recompute",
    "vtrain-0013": "vTrain, 64 A100, PP 2, 1F1B",
    "nemo2407-006": "NeMo 24.07, 16 H100 fp8, PP 4 interleaved v=10 (> MAX_VPP)",
    "nemo2407-011": "NeMo 24.07, 8 H100 fp8, CP 2, ZeRO-1",
    "nemocp-022": "NeMo long sequence, 32 H100, TP 2 x CP 2",
    "internevo-017": "InternEvo, 8 A100, TP 2, ZeRO-1",
    "dlperf-013": "DLPerf, 16 V100 fp16, TP 16 (beyond a node: > max_tp)",
    "dlperf-029": "DLPerf, 32 V100 fp16, PP 4 x DP 8",
}


@pytest.fixture(scope="module")
def tool():
    return load_script(TOOLS / "search_vs_published.py", "search_vs_published")


@pytest.fixture(scope="module")
def rows(tool, cat):
    frame = tool.published_rows(cat)
    return frame[frame["id"].isin(ROWS)].set_index("id", drop=False)


def test_rows_are_modelled(rows):
    """Every chosen row is one ``validate`` models (no skip reason), so none is silently lost."""
    assert sorted(rows.index) == sorted(ROWS)


@pytest.mark.parametrize("row_id", list(ROWS))
def test_search_at_least_as_fast_as_published(tool, rows, cat, row_id):
    rec = tool.compare_row(rows.loc[row_id], cat)
    assert rec["error"] == "", rec["error"]
    assert rec["best_tokens_per_s"] >= rec["published_tokens_per_s"] * (1 - 1e-9), (
        f"{row_id} ({ROWS[row_id]}): published {rec['published_plan']} "
        f"{rec['published_tokens_per_s']:.6g} tok/s beats the search's best {rec['best_plan']} "
        f"{rec['best_tokens_per_s']:.6g}: {rec['outside_space']}")


def test_published_prediction_is_validates(tool, rows, cat):
    """The published plan is predicted with the numbers ``fsdpsim validate`` reports."""
    from fsdpsim.measured.validate import predict_measurements

    frame = rows.reset_index(drop=True)
    validated = predict_measurements(frame, cat).set_index("id")
    for row_id in ("nemo2407-006", "dlperf-029"):
        rec = tool.compare_row(rows.loc[row_id], cat)
        per_gpu = validated.loc[row_id, "predicted_tokens_per_s_per_gpu"]
        assert rec["published_tokens_per_s"] == pytest.approx(per_gpu * rec["n_gpus"],
                                                              rel=1e-9)


def test_outside_space_names_the_rule(tool, rows, cat):
    """A plan the space leaves out is named by its rule; the published plan is in the space."""
    from dataclasses import replace

    spec, system, plan, training = tool.row_case(rows.loc["vtrain-0013"], cat)
    space = SearchSpace(framework=plan.framework)
    assert tool.outside_space(spec, system, plan, training, space) == ""
    deep = spec.n_layers // plan.pp
    vpp = next(v for v in range(MAX_VPP + 1, deep + 1) if deep % v == 0)
    interleaved = replace(plan, vpp=vpp, pp_schedule="interleaved")
    assert f"vpp {vpp} > MAX_VPP" in tool.outside_space(spec, system, interleaved, training,
                                                        space)
    wide = ParallelPlan(num_gpus=plan.num_gpus, gpus_per_node=plan.gpus_per_node,
                        sharding="none", tp=16, framework=plan.framework)
    assert "tp 16 > the scale-up domain" in tool.outside_space(spec, system, wide, training,
                                                               space)


def test_outside_space_knows_which_frameworks_run_tp_overlap(tool, rows, cat):
    """InternEvo runs no async TP, so its TP-2 plan without overlap is in the space (the space
    searches what the framework runs); the same plan on a framework that overlaps is named."""
    from dataclasses import replace

    spec, system, plan, training = tool.row_case(rows.loc["internevo-017"], cat)
    assert plan.tp == 2 and not plan.tp_overlap
    space = SearchSpace(framework=plan.framework)
    assert space.values_of("tp_overlap", (True,)) == [False]
    assert "tp_overlap" not in tool.outside_space(spec, system, plan, training, space)
    megatron = replace(plan, framework="megatron", shard_group_size=None)
    assert "tp_overlap off (the space searches on" in tool.outside_space(
        spec, system, megatron, training, SearchSpace(framework="megatron"))
