"""The one spelling of a plan (fsdpsim.plan.spelling): parse(format(plan)) == plan for random
valid plans, and one-line errors for text it cannot read."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fsdpsim.plan.parallel import DEFAULT_MESH_ORDER, PP_SCHEDULES, ParallelPlan
from fsdpsim.plan.spelling import RunPlan, canonical, format_plan, parse_plan
from fsdpsim.util.errors import ConfigError

POW2 = st.sampled_from([1, 2, 4, 8])


@st.composite
def run_plans(draw):
    tp, pp, cp, dp = draw(POW2), draw(POW2), draw(POW2), draw(st.sampled_from([1, 2, 4, 8, 16]))
    num_gpus = tp * pp * cp * dp
    gpus_per_node = draw(st.sampled_from([4, 8]))
    sharding = draw(st.sampled_from(["full", "grad_op", "optimizer", "none", "hybrid"]))
    framework = draw(st.sampled_from(["fsdp2", "megatron", "internevo"]))
    vpp = draw(st.sampled_from([1, 2])) if pp > 1 else 1
    schedule = ("interleaved" if vpp > 1 else
                draw(st.sampled_from([s for s in PP_SCHEDULES if s != "interleaved"])))
    ep = draw(POW2)
    kw = dict(
        num_gpus=num_gpus, gpus_per_node=gpus_per_node, sharding=sharding, tp=tp, pp=pp, cp=cp,
        vpp=vpp, pp_schedule=schedule, framework=framework,
        shard_group_size=draw(st.sampled_from([None, 1, 2, 4])),
        sequence_parallel=draw(st.booleans()) if tp > 1 else None,
        tp_overlap=draw(st.booleans()) if tp > 1 else False,
        cp_kind=draw(st.sampled_from(["ring", "all2all"])),
        ep=ep, etp=draw(st.sampled_from([None, 1, 2])), ep_overlap=ep > 1 and draw(st.booleans()),
        pp_first_layers=draw(st.sampled_from([None, 3, 5])) if pp > 1 else None,
        pp_last_layers=draw(st.sampled_from([None, 4, 6])) if pp > 1 else None,
        grad_sync=draw(st.sampled_from(["every", "last"])),
        keep_gathered=draw(st.booleans()), reshard_after_forward=draw(st.booleans()),
        mesh_order=draw(st.permutations(DEFAULT_MESH_ORDER)))
    try:
        plan = canonical(ParallelPlan(**kw))
    except ConfigError:
        assume(False)
    recompute = draw(st.sampled_from(["none", "selective", "full"]))
    layers = None if recompute == "none" else draw(st.sampled_from([None, 1, 7]))
    return RunPlan(plan=plan, micro_batch=draw(st.sampled_from([1, 2, 3])),
                   grad_accum=draw(st.sampled_from([1, 2, 16])), recompute=recompute,
                   recompute_layers=layers)


@settings(max_examples=400, deadline=None)
@given(run_plans())
def test_parse_of_format_is_the_plan(run):
    text = format_plan(run)
    p = run.plan
    assert parse_plan(text, num_gpus=p.num_gpus, gpus_per_node=p.gpus_per_node,
                      framework=p.framework) == run
    # the informative "/L" a user may add to a partial recompute reads back the same
    assert parse_plan(re.sub(r"(ckpt \w+ \d+)", r"\1/40", text), num_gpus=p.num_gpus,
                      gpus_per_node=p.gpus_per_node, framework=p.framework) == run


def test_a_searched_spelling():
    run = parse_plan("zero1-4 × tp8(sp,overlap) × pp2(zb-h1, m=128) · ckpt full 12/40 · mb 1",
                     num_gpus=64, gpus_per_node=8)
    p = run.plan
    assert (p.sharding, p.dp, p.tp, p.pp, p.pp_schedule) == ("optimizer", 4, 8, 2, "zb-h1")
    assert p.sequence_parallel and p.tp_overlap
    assert (run.micro_batch, run.grad_accum, run.recompute, run.recompute_layers) == \
        (1, 128, "full", 12)
    assert run.global_batch == 512


@pytest.mark.parametrize("word, short", [("selective", "sel"), ("op-selective", "op"),
                                         ("full", "full"), ("none", "none")])
def test_ckpt_reads_the_recompute_options_words_too(word, short):
    """``ckpt selective`` is ``ckpt sel`` (the words of ``--recompute`` read as the short ones)."""
    def read(w):
        return parse_plan(f"fsdp8 · ckpt {w} · mb 1", num_gpus=8, gpus_per_node=8)

    assert read(word) == read(short)
    assert read(word).recompute == word


def test_a_plan_typed_without_the_symbols_reads_the_same():
    """' x ' or ' * ' for ' × ' and ' . ' for ' · ', as a keyboard types them."""
    def read(text):
        return parse_plan(text, num_gpus=64, gpus_per_node=8)

    line = "zero1-4 × tp8(sp) × pp2(1f1b, m=16) · ckpt full 12 · mb 1"
    assert read("zero1-4 x tp8(sp) * pp2(1f1b, m=16) . ckpt full 12 . mb 1") == read(line)
    assert read("hsdp2x4 x tp8 . ckpt none . mb 2") == read("hsdp2x4 × tp8 · ckpt none · mb 2")


def test_every_setting_is_in_the_line():
    plan = ParallelPlan(num_gpus=256, gpus_per_node=8, sharding="hybrid", shard_group_size=4,
                        tp=4, pp=4, cp=2, vpp=2, cp_kind="all2all", ep=8, etp=1,
                        ep_overlap=True, pp_first_layers=6, pp_last_layers=8, grad_sync="last",
                        keep_gathered=True, tp_overlap=True)
    line = format_plan(RunPlan(plan, 2, 32, "full", 3))
    assert line == ("hsdp2x4 × cp2(a2a) × tp4(sp,overlap) × pp4(interleaved, v=2, m=32, "
                    "first=6, last=8) × ep8(etp1,overlap) · ckpt full 3 · mb 2 · sync last · "
                    "keep gathered")


def test_a_stated_split_reads_back():
    """``--pp-layers`` (every stage's layers) is part of the plan's line: ``layers=A/B/...``."""
    plan = ParallelPlan(num_gpus=32, gpus_per_node=8, sharding="optimizer", pp=4,
                        pp_layers=(7, 9, 9, 7))
    run = RunPlan(plan, 4, 2, "none", None)
    line = format_plan(run)
    assert line == "zero1-8 × pp4(1f1b, m=2, layers=7/9/9/7) · ckpt none · mb 4"
    assert parse_plan(line, num_gpus=32, gpus_per_node=8) == RunPlan(canonical(plan), 4, 2,
                                                                     "none", None)


@pytest.mark.parametrize("text, says", [
    ("fsdp8 × pp4(1f1b, m=2, layers=7/9/x/7) · ckpt none · mb 1", "layers=7/9/x/7"),
    ("fsdp8 × tp4", "product is 16"),
    ("fsdp8 × pp2(1f1b) · ckpt none · mb 1", "micro-batches per step"),
    ("fsdp16 · mb 1", "needs 'ckpt"),
    ("fsdp16 × tq2 · ckpt none · mb 1", "'tq2'"),
    ("fsdp16 · ckpt none · mb 1 · turbo", "'turbo'"),
])
def test_unreadable_lines_are_one_line_errors(text, says):
    with pytest.raises(ConfigError) as err:
        parse_plan(text, num_gpus=16, gpus_per_node=8)
    assert says in str(err.value) and "\n" not in str(err.value)
