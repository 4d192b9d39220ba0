"""The emitted torchtitan TOML and Megatron-LM arguments run the ranked plan: read back by each
framework's rules (fsdpsim.drivers.search.export_read), they give the same plan, micro-batch,
accumulation, every degree, schedule, ZeRO stage and expert TP; a plan a framework cannot run
is said so, with nothing else emitted."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fsdpsim.drivers.search.export import CANNOT, megatron_args, torchtitan_toml
from fsdpsim.drivers.search.export_read import read_megatron, read_torchtitan
from fsdpsim.drivers.search.objective import budget_system
from fsdpsim.drivers.search.results import Choice
from fsdpsim.drivers.search.run import search
from fsdpsim.drivers.search.space import SearchSpace
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.hardware.system import resolve_system
from fsdpsim.model.presets import get_model
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig


def _system(gpu):
    return resolve_system(load_catalog(()), gpu=gpu, cluster=None, gpus_per_node=None,
                          network=None, inter_node_gbps_per_gpu=None, power_cap_w=None,
                          placement="packed")


def _searched(model, gpu, n, top=30, framework="fsdp2", fix=None):
    training = TrainingConfig(seq_len=4096, global_batch=1024)
    space = SearchSpace(framework=framework, fixed=fix or {})
    found = search(get_model(model), budget_system(_system(gpu), None), n, training, space,
                   top=top)
    return found.top, training


def _check(choice, training, emit, read, **kw):
    text = emit(choice, training)
    p = choice.plan
    got = read(text, num_gpus=p.num_gpus, gpus_per_node=p.gpus_per_node,
               layers_per_stage=choice.layers_per_stage, framework=p.framework, **kw)
    if got is None:  # the framework cannot run it: said in comments only
        assert all(line.startswith("#") for line in text.splitlines()), text
        assert CANNOT in text
        return False
    assert got == choice.run_plan, (text, got, choice.run_plan)
    return True


CASES = [("llama3-70b", "h100", 64, "fsdp2"), ("llama3-8b", "h100", 16, "fsdp2"),
         ("qwen3-30b-a3b", "b200", 32, "fsdp2"), ("llama3-70b", "h100", 64, "megatron"),
         ("qwen3-30b-a3b", "b200", 32, "megatron")]


@pytest.mark.parametrize("model,gpu,n,framework", CASES)
def test_emitted_configs_run_the_ranked_plans(model, gpu, n, framework):
    top, training = _searched(model, gpu, n, framework=framework)
    runs = {"torchtitan": 0, "megatron": 0}
    for choice in top:
        runs["torchtitan"] += _check(choice, training, torchtitan_toml, read_torchtitan)
        runs["megatron"] += _check(choice, training, megatron_args, read_megatron)
    assert runs["megatron"] >= len(top) // 2  # most plans run on Megatron-LM
    assert runs["torchtitan"] > 0 or framework == "megatron" or model.startswith("qwen")


def _choice(plan, mb=2, accum=8, recompute="none", layers=None, per_stage=16):
    """A hand-made candidate: its middle stages hold ``per_stage`` layers, its end stages the
    plan's end counts where given."""
    n_layers = ((plan.pp_first_layers or per_stage) + (plan.pp_last_layers or per_stage)
                + (plan.pp - 2) * per_stage) if plan.pp > 1 else per_stage
    return Choice(plan=plan, micro_batch=mb, grad_accum=accum, recompute=recompute,
                  recompute_layers=layers, tokens_per_s=1.0, peak_bytes=1.0, score=1.0,
                  layers_per_stage=per_stage, n_layers=n_layers)


TRAINING = TrainingConfig(seq_len=4096, global_batch=None)
PLANS = [
    ParallelPlan(num_gpus=64, gpus_per_node=8, tp=8),
    ParallelPlan(num_gpus=64, gpus_per_node=8, sharding="hybrid", shard_group_size=4, tp=2,
                 pp=2, vpp=2, pp_first_layers=14, pp_last_layers=18),
    ParallelPlan(num_gpus=64, gpus_per_node=8, tp=4, pp=4, cp=2, tp_overlap=True),
    ParallelPlan(num_gpus=64, gpus_per_node=8, sharding="none", tp=2, pp=2,
                 pp_schedule="gpipe"),
    ParallelPlan(num_gpus=64, gpus_per_node=8, sharding="optimizer", tp=8, pp=2,
                 pp_schedule="zb-h1"),
    ParallelPlan(num_gpus=64, gpus_per_node=8, sharding="grad_op", tp=2, ep=8, etp=1,
                 ep_overlap=True),
    ParallelPlan(num_gpus=64, gpus_per_node=8, tp=2, ep=4, etp=1),
    ParallelPlan(num_gpus=32, gpus_per_node=8, tp=4, cp=2, cp_kind="all2all",
                 reshard_after_forward=False),
]


@pytest.mark.parametrize("plan", PLANS, ids=range(len(PLANS)))
@pytest.mark.parametrize("recompute,layers", [("none", None), ("full", None), ("full", 4),
                                              ("selective", None), ("selective", 4),
                                              ("op-selective", None), ("op-selective", 4)])
def test_hand_plans_round_trip_or_are_refused(plan, recompute, layers):
    choice = _choice(plan, recompute=recompute, layers=layers)
    training = replace(TRAINING, global_batch=choice.global_batch)
    _check(choice, training, torchtitan_toml, read_torchtitan)
    _check(choice, training, megatron_args, read_megatron)


def test_what_each_framework_cannot_run_is_said():
    zero1 = _choice(PLANS[4])
    toml = torchtitan_toml(zero1, replace(TRAINING, global_batch=zero1.global_batch))
    assert "ZeRO-1" in toml and "zb-h1" in toml and "[parallelism]" not in toml
    mega = megatron_args(zero1, replace(TRAINING, global_batch=zero1.global_batch))
    assert "zb-h1" in mega and "--tensor-model-parallel-size" not in mega


def test_torchtitan_local_batch_is_the_micro_batch():
    """torchtitan's accumulation is global / (local x dp): local_batch_size is the micro-batch
    without a pipeline, one pipeline step's micro-batches with one."""
    import tomllib

    plain = _choice(PLANS[0], mb=2, accum=8)
    cfg = tomllib.loads(torchtitan_toml(plain, TRAINING))
    assert cfg["training"]["local_batch_size"] == 2
    assert cfg["training"]["global_batch_size"] == 2 * 8 * 8


def test_megatron_states_expert_tp():
    """Megatron's --expert-tensor-parallel-size defaults to the TP degree: a plan with expert
    TP 1 under TP 2 says so."""
    mega = megatron_args(_choice(PLANS[6]), TRAINING)
    assert "--expert-tensor-parallel-size 1" in mega and "--expert-model-parallel-size 4" in mega
    no_ep = megatron_args(_choice(ParallelPlan(num_gpus=64, gpus_per_node=8, tp=2, etp=1)),
                          TRAINING)
    assert "--expert-tensor-parallel-size 1" in no_ep


def test_torchtitan_selective_is_its_op_policy():
    """torchtitan's selective_ac_option = "op" is op-selective, both ways; the attention-only
    selective (Megatron's) is not a torchtitan mode, and op-selective is not Megatron's."""
    op = _choice(PLANS[0], recompute="op-selective")
    training = replace(TRAINING, global_batch=op.global_batch)
    text = torchtitan_toml(op, training)
    assert 'mode = "selective"\nselective_ac_option = "op"' in text
    assert read_torchtitan(text, num_gpus=64, gpus_per_node=8,
                           layers_per_stage=16).recompute == "op-selective"
    sel = torchtitan_toml(_choice(PLANS[0], recompute="selective"), training)
    assert CANNOT in sel and "attention core" in sel and "[parallelism]" not in sel
    assert CANNOT in megatron_args(op, training)
