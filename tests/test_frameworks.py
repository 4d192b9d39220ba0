"""Framework profiles: names, and what each changes in the engine."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conftest import run

from fsdpsim.plan import frameworks
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import predict
from fsdpsim.model.presets import get_model
from fsdpsim.hardware.system import resolve_system

CATALOG = load_catalog(use_env=False)
SELENE = resolve_system(CATALOG, cluster="dgx-a100-80gb")


def test_old_spellings_mean_the_new_profiles():
    assert ParallelPlan(8, 8, framework="torch").framework == "fsdp2"
    assert ParallelPlan(8, 8, framework="Megatron-Core").framework == "megatron"
    with pytest.raises(ConfigError, match="accepted: fsdp2, fsdp1"):
        ParallelPlan(8, 8, framework="jax")


def test_every_profile_names_a_catalog_library_and_a_source():
    for prof in frameworks.PROFILES.values():
        assert CATALOG.collectives(prof.collectives).library == "nccl"
        assert prof.source and prof.recipe in ("torch", "megatron")


def _gpt175(framework: str, gpus: int = 768, **plan):
    spec = get_model("gpt3-175b")
    return predict(spec, SELENE, ParallelPlan(gpus, 8, "full", framework=framework, **plan),
                   TrainingConfig(seq_len=2048, micro_batch=1, global_batch=1536,
                                  recompute="full", precision="fp16", reduce_dtype="fp16"))


def test_deepspeed_2021_runs_its_collectives_serially_and_per_parameter():
    """The 2021 profile cannot overlap: its step is at least compute plus every gather, and
    slower than the same plan under FSDP2 by more than the host work of its per-rank copies."""
    old, new = _gpt175("deepspeed-zero3-2021"), _gpt175("fsdp2")
    assert old.step_time_s >= old.compute_s + old.all_gather_s - 1e-9
    assert old.all_gather_s > new.all_gather_s
    assert old.tokens_per_s_per_gpu < 0.8 * new.tokens_per_s_per_gpu


def test_list_collectives_cost_grows_with_the_ranks():
    """One view and one copy per rank and call: the gather time per GPU grows with the group
    even though the bytes per GPU do not."""
    small, large = (_gpt175("deepspeed-zero3-2021", gpus=g) for g in (384, 1536))
    per_byte = [p.all_gather_s / p.all_gather_bytes for p in (small, large)]
    assert per_byte[1] > 1.5 * per_byte[0]


def test_megatron_2021_all_reduces_after_the_backward():
    spec = get_model("gpt3-1.3b")
    training = TrainingConfig(seq_len=2048, micro_batch=4, recompute="none")
    late, overlapped = (predict(spec, SELENE, ParallelPlan(64, 8, "none", framework=f), training)
                        for f in ("megatron-2021", "megatron"))
    assert late.step_time_s > overlapped.step_time_s
    assert late.step_time_s == pytest.approx(late.compute_s + late.all_reduce_s, rel=0.05)


def _internevo(gpus: int, zero1: int | None, framework: str = "internevo"):
    """InternLM-7B-sized (Llama 2 7B) on A100 nodes, InternEvo's throughput-table knobs."""
    plan = ParallelPlan(gpus, 8, "optimizer", framework=framework, shard_group_size=zero1)
    return predict(get_model("llama2-7b"), SELENE, plan,
                   TrainingConfig(seq_len=2048, micro_batch=2, global_batch=4 * 2 * gpus,
                                  recompute="none"))


def test_internevo_broadcasts_each_shard_from_its_owner_by_hand():
    """InternEvo's ZeRO-1 syncs parameters after the step by one broadcast per zero1 rank of
    the shard it owns, waited for before the next forward: ``z · t_bcast(P / z)`` over the
    group, exposed whole (no parameter-gather overlap), and its gradients are all-reduced in
    bf16, not reduce-scattered."""
    from fsdpsim.costs import nccl
    from fsdpsim.engine import layers
    from fsdpsim.engine.collectives import bus_bandwidth
    from fsdpsim.engine.inputs import Prepared

    for zero1, group in ((8, 8), (None, 1024)):
        p = _internevo(1024, zero1)
        g = Prepared.of({k: np.asarray(v, dtype=float) for k, v in p.inputs.items()
                         if np.asarray(v).dtype.kind in "fi"})
        per_node = min(8.0, group)
        bw = bus_bandwidth(g, layers.rates(g), float(group), per_node)
        cands = nccl.candidates(g, float(group), per_node, bw, True, False, broadcast=True)
        params_bytes = 2.0 * (float(g.n_layers) * float(g.block_numel_padded)
                              + float(g.root_numel_padded))
        by_hand = group * float(nccl.time_s(params_bytes / group, cands))
        assert p.all_gather_s == pytest.approx(by_hand, rel=1e-6)
        assert p.reduce_scatter_s == 0.0 and p.all_reduce_s > 0.0
        assert p.values["all_reduce_bytes"] == pytest.approx(params_bytes, rel=1e-6)
    # 1,024 broadcasts of 1,023 hops against 8 inside a node: seconds against milliseconds
    whole, grouped = _internevo(1024, None), _internevo(1024, 8)
    assert whole.all_gather_s > 20 * grouped.all_gather_s
    assert whole.step_time_s - grouped.step_time_s == pytest.approx(
        whole.all_gather_s - grouped.all_gather_s, rel=0.05)


def test_internevo_zero1_groups_shard_only_the_optimizer_states():
    """zero1=8 keeps the optimizer states of 8 ranks' shards (Ψ·12/8 bytes, Megatron's recipe
    as InternEvo's: fp32 master and two moments), not 1/1,024 of them; params and gradients
    stay whole on every rank."""
    whole, grouped = _internevo(1024, None), _internevo(1024, 8)
    # (each shard is padded to whole elements per rank: 1,024 shards pad ~1 % more)
    assert grouped.values["optimizer_bytes"] == pytest.approx(
        128 * whole.values["optimizer_bytes"], rel=0.02)
    psi = float(grouped.inputs["n_params_padded"])
    assert grouped.values["optimizer_bytes"] == pytest.approx(psi * 12.0 / 8.0, rel=1e-6)
    assert grouped.values["params_bytes"] == pytest.approx(whole.values["params_bytes"])


def test_zero1_groups_are_internevo_s_alone():
    """Grouped ZeRO-1 is modelled for InternEvo's collectives only; Megatron's partial
    distributed optimizer (per-instance reduce-scatter + all-reduce) is not: one clear line."""
    with pytest.raises(ConfigError, match="'optimizer' with framework 'internevo'"):
        ParallelPlan(1024, 8, "optimizer", framework="megatron", shard_group_size=8)
    plan = ParallelPlan.from_degrees(num_gpus=64, gpus_per_node=8, zero=1, dp_replicate=8,
                                     framework="internevo")
    assert (plan.sharding, plan.dp_shard, plan.dp_replicate) == ("optimizer", 8, 8)
    with pytest.raises(ConfigError, match="zero 1 with framework internevo"):
        ParallelPlan.from_degrees(num_gpus=64, gpus_per_node=8, zero=1, dp_replicate=8)


def test_search_under_internevo_weighs_its_zero1_groups():
    """``search --framework internevo`` enumerates the zero1 groups too (InternEvo's knob), and
    at 1,024 A100 a group smaller than the data-parallel group wins: the whole-group ZeRO-1
    pays 1,024 chained broadcasts a step. The plan line names the replicas and the group (as
    HSDP's ``hsdpRxS``)."""
    from fsdpsim.drivers.search.run import search
    from fsdpsim.drivers.search.explain import plan_line
    from fsdpsim.drivers.search.space import SearchSpace

    training = TrainingConfig(seq_len=2048, global_batch=8192, recompute="none")
    result = search(get_model("llama2-7b"), SELENE, 1024, training,
                    SearchSpace(framework="internevo", fixed={"tp": 1, "pp": 1, "cp": 1}))
    best = result.top[0]
    assert best.plan.sharding == "optimizer" and 1 < best.plan.dp_shard < 1024
    assert plan_line(best).startswith(f"zero1-{best.plan.dp_replicate}x{best.plan.dp_shard}")
    whole = _internevo(1024, None)
    assert best.tokens_per_s / 1024 > 1.2 * whole.tokens_per_s_per_gpu


def test_internevo_reduces_its_bf16_gradients_unless_told_otherwise():
    """InternEvo's gradients are its bf16 parameters' own, all-reduced in their dtype
    (``reduce_tensor`` keeps it): with no reduce dtype given they take 2 bytes a parameter, as
    the parameters do, and the report says bf16; an explicit one is kept; other frameworks
    keep the fp32 default."""
    spec, plan = get_model("llama2-7b"), ParallelPlan(64, 8, "optimizer", framework="internevo")
    base = TrainingConfig(seq_len=2048, micro_batch=2, global_batch=512, recompute="none")
    p = predict(spec, SELENE, plan, base)
    assert p.training["reduce_dtype"] == "bf16"
    assert p.values["grads_bytes"] == pytest.approx(p.values["params_bytes"])
    told = predict(spec, SELENE, plan, replace(base, reduce_dtype="fp32"))
    assert told.values["grads_bytes"] == pytest.approx(2 * p.values["grads_bytes"])
    megatron = predict(spec, SELENE, ParallelPlan(64, 8, "optimizer", framework="megatron"), base)
    assert megatron.training["reduce_dtype"] == "fp32"


def test_fsdp1_pads_each_unit_once_fsdp2_every_parameter():
    """gpt3-125m sharded 3,072 ways. A block holds 12·768² + 13·768 = 7,087,872 parameters.
    FSDP1's FlatParameter pads the flattened unit once (torch ``_flat_param.py``):
    ceil(7,087,872 / 3,072)·3,072 = 7,090,176. FSDP2 pads every parameter's dim 0 to 3,072
    rows: q, k, v, o and down weights to 3,072·768 (four) and 3,072·3,072 (down), the
    3,072-row up weight as it is, ten 768-long vectors and the up bias to 3,072 each:
    4·2,359,296 + 9,437,184 + 2,359,296 + 11·3,072 - 3,072 = 21,264,384."""
    from fsdpsim.engine.build import config_inputs

    model, system = get_model("gpt3-125m"), resolve_system(CATALOG, gpu="h100")
    training = TrainingConfig(seq_len=2048, micro_batch=1, recompute="full")
    numel = {}
    for name in ("fsdp1", "fsdp2"):
        plan = ParallelPlan(num_gpus=3072, gpus_per_node=8, framework=name)
        numel[name] = float(np.asarray(
            config_inputs(model, system, plan, training)["block_numel_padded"]))
    assert numel == {"fsdp1": 7_090_176.0, "fsdp2": 21_264_384.0}
    # a third of the blocks' gathered bytes (the ring's 3,071 hops of latency stay)
    values = {name: predict(model, system, ParallelPlan(num_gpus=3072, gpus_per_node=8,
                                                        framework=name), training).values
              for name in numel}
    assert values["fsdp1"]["all_gather_s"] < values["fsdp2"]["all_gather_s"]
    assert values["fsdp1"]["peak_bytes"] < values["fsdp2"]["peak_bytes"]


def test_predict_says_when_the_framework_does_not_run_the_plan(capsys):
    """The rules the search keeps to (supports and the cross-setting refusals) are predict's
    note on a plan the framework does not run, and absent on one it runs."""
    from fsdpsim.plan.frameworks import unsupported
    from fsdpsim.plan.parallel import ParallelPlan

    ddp_cp = ParallelPlan(num_gpus=64, gpus_per_node=8, sharding="none", tp=8, cp=2)
    assert any("DDP with context parallelism" in r for r in unsupported("fsdp2", ddp_cp))
    assert unsupported("megatron", ddp_cp) == []
    zb = ParallelPlan(num_gpus=64, gpus_per_node=8, tp=8, pp=2, pp_schedule="zb-h1")
    assert any("zb-h1" in r for r in unsupported("fsdp2", zb))
    assert any("zb-h1" in r for r in unsupported("megatron", zb))
    assert unsupported("fsdp1", zb) == []
    runs = ParallelPlan(num_gpus=64, gpus_per_node=8, tp=8, pp=2)
    assert unsupported("fsdp2", runs) == []
    rc, out, _ = run(capsys, "predict", "--model", "llama3-70b", "--num-gpus", "64", "--plan",
                     "ddp4 × cp2 × tp8(sp) · ckpt full · mb 1")
    assert rc == 0 and "--framework fsdp2 does not run this plan as stated" in out
    rc, out, _ = run(capsys, "predict", "--model", "llama3-70b", "--num-gpus", "64", "--tp", "8",
                     "--pp", "2")
    assert rc == 0 and "does not run this plan" not in out


@pytest.mark.parametrize("tp, pp, num_gpus, refused", [
    (8, 4, 256, True), (8, 1, 64, True), (1, 4, 32, True),  # DDP beside TP or a pipeline
    (1, 1, 64, False),   # DDP alone: the whole mesh
    (8, 4, 32, False),   # no data parallelism: no DDP applied
])
def test_torchtitan_runs_ddp_only_as_the_whole_mesh(tp, pp, num_gpus, refused):
    """torchtitan (e347b1e5e, models/llama3/infra/parallelize.py) raises "DDP has not supported
    > 1D parallelism" where the world is larger than the dp_replicate mesh; Megatron's DDP
    runs beside TP and PP."""
    plan = ParallelPlan(num_gpus=num_gpus, gpus_per_node=8, sharding="none", tp=tp, pp=pp)
    reasons = frameworks.unsupported("fsdp2", plan)
    assert any(r.startswith("DDP with TP or a pipeline") for r in reasons) == refused
    megatron = ParallelPlan(num_gpus=num_gpus, gpus_per_node=8, sharding="none", tp=tp, pp=pp,
                            framework="megatron")
    assert not any("DDP" in r for r in frameworks.unsupported("megatron", megatron))


def test_search_under_torchtitan_keeps_no_ddp_beside_model_parallelism():
    from fsdpsim.drivers.search.run import search
    from fsdpsim.hardware.system import resolve_system
    from fsdpsim.model.presets import get_model

    system = resolve_system(load_catalog(use_env=False), gpu="h100")
    result = search(get_model("llama3-70b"), system, 256, TrainingConfig(seq_len=4096),
                    top=50)
    plans = [c.plan for c in result.top]
    assert plans and not [p for p in plans if p.sharding == "none" and p.dp > 1
                          and (p.tp > 1 or p.pp > 1)]
