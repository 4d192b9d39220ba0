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


def _megatron_builds(args: str, n_layers: int) -> list[int] | None:
    """Layers of each model chunk (chunk v·pp + r on rank r) Megatron-LM builds from the
    arguments, by its rules (megatron/core/transformer/transformer_config.py checks,
    transformer_block.py get_num_layers_to_build), written out here as the test's oracle:
    None where Megatron-LM refuses them (a rank's layers not divisible by the virtual
    stages)."""
    words = args.split()

    def num(flag):
        return int(words[words.index(flag) + 1]) if flag in words else None

    pp = num("--pipeline-model-parallel-size")
    if "--pipeline-model-parallel-layout" in words:
        from fsdpsim.drivers.search.export_read import megatron_layout

        return megatron_layout(words[words.index("--pipeline-model-parallel-layout") + 1]
                               .strip("'"))
    vpp = num("--num-virtual-stages-per-pipeline-rank") or 1
    first, last = (num("--decoder-first-pipeline-num-layers"),
                   num("--decoder-last-pipeline-num-layers"))
    rest_ranks = pp - (first is not None) - (last is not None)
    rest = n_layers - (first or 0) - (last or 0)
    if rest_ranks and rest % rest_ranks:
        return None
    mid = rest // rest_ranks if rest_ranks else 0
    counts = [mid if first is None else first] + [mid] * (pp - 2) + [mid if last is None
                                                                    else last]
    if any(n % vpp for n in counts):
        return None
    return [counts[r] // vpp for v in range(vpp) for r in range(pp)]


@pytest.mark.parametrize("model,gpu,n,framework", [("llama3-70b", "h100", 256, "fsdp2"),
                                                   ("llama3-70b", "h100", 64, "megatron"),
                                                   ("llama3-8b", "h100", 64, "fsdp2")])
def test_megatron_builds_the_ranked_plans_split(model, gpu, n, framework):
    """Megatron-LM builds the plan's model chunks from the emitted arguments (its own
    divisibility rules, not fsdpsim's default split of the plan's framework)."""
    from fsdpsim.drivers.search.export import chunk_layers

    top, training = _searched(model, gpu, n, framework=framework, top=10)
    for choice in top:
        args = megatron_args(choice, training)
        if CANNOT in args or choice.plan.pp == 1:
            continue
        assert _megatron_builds(args, choice.n_layers) == list(chunk_layers(choice)), args


@pytest.mark.parametrize("framework,n_layers,pp,vpp,layout", [
    # torchtitan: L + 2 = 82 over 32 virtual stages, the first 18 one more, the embedding and
    # the head one layer each
    ("fsdp2", 80, 4, 8, "Et*2|(t*3|)*17,(t*2|)*13,tL"),
    # Megatron-Core --account-for-embedding/loss-in-pipeline-split: (30 + 2) / 8 = 4 a chunk,
    # the first and the last one fewer
    ("megatron", 30, 4, 2, "Et*3|(t*4|)*6,t*3L"),
])
def test_megatron_states_a_split_its_counts_cannot_reach(framework, n_layers, pp, vpp, layout):
    """A split whose chunks Megatron-LM's layer counts cannot reach is stated as its
    --pipeline-model-parallel-layout (and read back as the plan)."""
    plan = ParallelPlan(num_gpus=8 * pp, gpus_per_node=8, tp=8, pp=pp, vpp=vpp,
                        pp_schedule="interleaved", framework=framework)
    choice = Choice(plan=plan, micro_batch=1, grad_accum=pp, recompute="none",
                    recompute_layers=None, tokens_per_s=1.0, peak_bytes=1.0, score=1.0,
                    layers_per_stage=plan.stage_layers(n_layers)[1], n_layers=n_layers)
    training = replace(TRAINING, global_batch=choice.global_batch)
    args = megatron_args(choice, training)
    assert f"--pipeline-model-parallel-layout '{layout}'" in args
    assert "--num-virtual-stages-per-pipeline-rank" not in args
    _check(choice, training, megatron_args, read_megatron)


def test_megatron_refuses_a_block_recompute_its_chunks_cannot_hold():
    """--recompute-num-layers N recomputes the first N layers of each model chunk (all of a
    smaller one): K = 24 of a 20-21-layer stage over 8 chunks of 2-3 layers would recompute
    fewer than 24, so Megatron-LM is said not to run it; K = 16 (2 a chunk) it runs."""
    plan = ParallelPlan(num_gpus=32, gpus_per_node=8, tp=8, pp=4, vpp=8,
                        pp_schedule="interleaved")
    for k, runs in ((16, True), (24, False)):
        choice = Choice(plan=plan, micro_batch=1, grad_accum=4, recompute="full",
                        recompute_layers=k, tokens_per_s=1.0, peak_bytes=1.0, score=1.0,
                        layers_per_stage=plan.stage_layers(80)[1], n_layers=80)
        args = megatron_args(choice, replace(TRAINING, global_batch=choice.global_batch))
        assert (CANNOT not in args) == runs, args
        assert runs == (f"--recompute-num-layers {k // 8}" in args.splitlines())
