"""``fsdpsim search``: the optimum equals brute-force enumeration under the same model; the
space holds what it should; constraints and impossible inputs give one clear line."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from fsdpsim import engine
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.cli import cli
from fsdpsim.util.errors import ConfigError
from fsdpsim.engine.build import config_inputs
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.model.presets import get_model
from fsdpsim.drivers.search.objective import budget_system
from fsdpsim.drivers.search.run import _selective_method, search
from fsdpsim.drivers.search.explain import plan_line
from fsdpsim.drivers.search.space import SearchSpace, divisors, enumerate_plans, parse_fix, stage_splits
from fsdpsim.hardware.system import resolve_system


def _system(gpu="h100", budget_gib=None):
    s = resolve_system(load_catalog(()), gpu=gpu, cluster=None, gpus_per_node=None,
                       network=None, inter_node_gbps_per_gpu=None, power_cap_w=None,
                       placement="packed")
    return budget_system(s, budget_gib)


def brute_force(spec, system, n, training, space):
    """Every (plan, micro-batch, recompute, recomputed layers) candidate, each plan's inputs
    from predict's own builder (config_inputs), evaluated by the engine: the best score of
    each plan that has a candidate that fits and runs."""
    best = {}
    per_node = min(system.gpus_per_node, n)
    for plan in enumerate_plans(spec, n, per_node, training.seq_len, training.global_batch,
                                space):
        x = config_inputs(spec, system, plan, training)
        per_gpu = training.global_batch // plan.dp
        L = plan.stage_layers(spec.n_layers)[1] if plan.pp > 1 else spec.n_layers
        rows = []
        sel = _selective_method(spec, space)  # attention-core, or torchtitan's per-op policy
        # the recomputed layer counts the framework can state: any (Megatron), those dividing
        # the stage's layers without virtual stages (torchtitan's every n-th layer), or none
        partial = space.supports.get("partial_recompute", (True,))[0]
        counts = {True: range(1, L), False: range(0),
                  "every-nth": [k for k in range(1, L) if L % k == 0 and plan.vpp == 1]}[partial]
        for mb in divisors(per_gpu):
            rows.append((mb, "none", -1))
            for rc in ("selective", "full"):
                if rc != "selective" or sel == "selective":
                    rows += [(mb, rc, k) for k in counts] + [(mb, rc, -1)]
            if sel == "op-selective":
                rows.append((mb, "op-selective", -1))
        mb = np.array([r[0] for r in rows], dtype=float)
        out = engine.evaluate({**x, "micro_batch": mb, "grad_accum": per_gpu / mb,
                               "recompute": np.array([engine.RECOMPUTE_CODES[r[1]]
                                                      for r in rows], dtype=float),
                               "recompute_layers": np.array([r[2] for r in rows], dtype=float),
                               "ceilings": 0.0})
        ok = np.broadcast_to(out["fits"] & out["pipeline_ok"], mb.shape)
        if ok.any():
            best[plan] = float(np.broadcast_to(out["tokens_per_s"], mb.shape)[ok].max())
    return best


CASES = [  # model, gpus, global batch, seq, budget GiB, fixed
    ("gpt3-125m", 8, 32, 2048, None, {}),
    pytest.param("gpt3-350m", 16, 64, 2048, 3.0, {},  # tight: partial recompute, pipelines pay
                 marks=pytest.mark.slow),
    pytest.param("llama3-8b", 16, 32, 4096, 40.0, {"cp": 1}, marks=pytest.mark.slow),
    ("gpt3-1.3b", 8, 16, 2048, 8.0, {"pp": 2}),
    ("mixtral-8x7b", 16, 32, 4096, None, {"pp": 1, "cp": 1}),
]


@pytest.mark.parametrize("model,n,gb,seq,budget,fixed", CASES)
def test_search_optimum_equals_brute_force(model, n, gb, seq, budget, fixed):
    spec = get_model(model)
    system = _system(budget_gib=budget)
    training = TrainingConfig(seq_len=seq, global_batch=gb)
    space = SearchSpace(fixed=fixed)
    result = search(spec, system, n, training, space, top=3)
    truth = brute_force(spec, system, n, training, space)
    ranked = sorted(truth.values(), reverse=True)
    assert result.top, "brute force found plans but the search none" if truth else "empty"
    assert result.top[0].tokens_per_s == pytest.approx(ranked[0], rel=1e-9)
    got = [c.tokens_per_s for c in result.top]
    assert got == pytest.approx(ranked[:len(got)], rel=1e-9)
    # each listed plan's candidate is its own best one
    for c in result.top:
        assert c.tokens_per_s == pytest.approx(truth[c.plan], rel=1e-9)


def test_tight_budget_finds_partial_recompute_and_predict_agrees():
    """A budget between no recompute and full recompute: the best plan recomputes some of its
    layers, and predict, given that plan, gives the same throughput and a peak in budget."""
    from fsdpsim.drivers.search.results import predict_choice

    spec, system = get_model("gpt3-350m"), _system(budget_gib=3.0)
    training = TrainingConfig(seq_len=2048, global_batch=64)
    result = search(spec, system, 16, training, SearchSpace(framework="nanotron"), top=10)
    partial = [c for c in result.top if c.recompute_layers is not None]
    assert partial, [plan_line(c) for c in result.top]
    for c in result.top:
        p = predict_choice(spec, system, c, training)
        assert p.values["tokens_per_s"] == pytest.approx(c.tokens_per_s, rel=1e-9)
        assert p.values["peak_bytes"] <= 3.0 * 2**30
    c = partial[0]
    assert 0 < c.recompute_layers < c.layers_per_stage
    assert re.search(rf"ckpt \w+ {c.recompute_layers} · ", plan_line(c)), plan_line(c)


def test_space_holds_hybrid_dimensions():
    spec = get_model("llama3-70b")
    plans = list(enumerate_plans(spec, 64, 8, 8192, 64, SearchSpace(framework="megatron")))
    seen = {name: {getattr(p, name) for p in plans}
            for name in ("tp", "pp", "cp", "vpp", "sharding", "pp_schedule", "cp_kind",
                         "sequence_parallel", "tp_overlap")}
    assert seen["tp"] == {1, 2, 4, 8}
    assert {1, 2, 4, 8} <= seen["pp"] and {1, 2, 4, 8} <= seen["cp"]
    assert {"full", "grad_op", "optimizer", "none", "hybrid"} == seen["sharding"]
    # Megatron-LM's schedules and rank order (its profile's supports)
    assert seen["pp_schedule"] == {"1f1b", "interleaved"}
    assert seen["cp_kind"] == {"ring", "all2all"} and seen["tp_overlap"] == {False, True}
    assert {p.mesh_order for p in plans} == {plans[0].mesh_order}
    # TP overlap only with sequence parallelism (--tp-comm-overlap needs it)
    assert not any(p.tp_overlap and not p.sequence_parallel for p in plans)
    assert any(p.pp_first_layers is not None for p in plans)  # uneven end stages
    # every plan is valid and distinct
    assert len(set(plans)) == len(plans)
    assert all(p.tp * p.pp * p.cp * p.dp == 64 and 64 % p.dp == 0 for p in plans)


def test_space_keeps_to_what_the_framework_runs():
    """Under torchtitan's FSDP2 (the default) the space holds only plans torchtitan runs: its
    schedules, TP with SP, ring CP, no DDP with CP, one mesh order; a framework that places
    its mesh freely (FSDP1 with a user's device mesh) also gets the other orders and
    zero-bubble schedules; ``--fix`` keeps what it fixes."""
    spec = get_model("llama3-70b")
    plans = list(enumerate_plans(spec, 64, 8, 8192, 64, SearchSpace()))
    assert plans
    assert {p.pp_schedule for p in plans if p.pp > 1} <= {"gpipe", "1f1b", "interleaved"}
    assert all(p.sequence_parallel for p in plans if p.tp > 1)
    assert {p.cp_kind for p in plans if p.cp > 1} == {"ring"}
    assert not any(p.sharding == "none" and p.cp > 1 for p in plans)
    assert not any(p.sharding in ("full", "hybrid") and p.dp_shard * p.cp == 1 for p in plans)
    assert len({p.mesh_order for p in plans}) == 1
    free = list(enumerate_plans(spec, 64, 8, 8192, 64, SearchSpace(framework="fsdp1")))
    assert len({p.mesh_order for p in free}) > 1 and "zb-h1" in {p.pp_schedule for p in free}
    fixed = list(enumerate_plans(spec, 64, 8, 8192, 64,
                                 SearchSpace(fixed={"sharding": "none", "cp": 2, "tp": 8})))
    assert fixed and all(p.sharding == "none" and p.cp == 2 for p in fixed)


def test_every_ranked_plan_under_fsdp2_emits_for_torchtitan():
    """The default framework's ranked plans are ones torchtitan runs: its emitter writes each
    (no "cannot run this plan"), partial recompute included (every n-th layer)."""
    from fsdpsim.drivers.search.export import CANNOT, torchtitan_toml

    for model, n, gb, budget in (("gpt3-350m", 16, 64, 3.0), ("llama3-8b", 64, 128, 30.0)):
        spec, system = get_model(model), _system(budget_gib=budget)
        training = TrainingConfig(seq_len=2048, global_batch=gb)
        result = search(spec, system, n, training, top=10)
        assert result.top
        for c in result.top:
            assert CANNOT not in torchtitan_toml(c, training), plan_line(c)
            if c.recompute_layers is not None:
                assert c.layers_per_stage % c.recompute_layers == 0 and c.plan.vpp == 1


def test_moe_space_has_expert_parallelism():
    plans = list(enumerate_plans(get_model("mixtral-8x7b"), 16, 8, 4096, 32,
                                 SearchSpace(fixed={"pp": 1, "cp": 1})))
    assert {1, 2, 4, 8} <= {p.ep for p in plans}
    assert {1} < {p.etp for p in plans} | {1}


def test_stage_splits_sum_to_the_model():
    for n_layers, pp in ((126, 16), (80, 4), (61, 8), (32, 2)):
        for first, last in stage_splits(n_layers, pp, 1):
            plan = ParallelPlan(num_gpus=pp, gpus_per_node=8, pp=pp, pp_first_layers=first,
                                pp_last_layers=last)
            f, mid, la = plan.stage_layers(n_layers)
            assert f + la + (pp - 2) * mid == n_layers


def test_fixed_settings_are_respected():
    spec = get_model("llama3-8b")
    training = TrainingConfig(seq_len=4096, global_batch=64)
    space = SearchSpace(fixed=parse_fix(["tp=4,pp=2", "sharding=full", "micro_batch=1"]))
    result = search(spec, _system(), 16, training, space, top=3)
    for c in result.top:
        assert (c.plan.tp, c.plan.pp, c.plan.sharding, c.micro_batch) == (4, 2, "full", 1)


def test_bad_constraints_name_the_nearest_feasible_setting():
    spec = get_model("llama3-8b")
    training = TrainingConfig(seq_len=4096, global_batch=64)
    with pytest.raises(ConfigError, match=r"tp=3 is not possible.*nearest feasible: tp=2, tp=4"):
        search(spec, _system(), 16, training, SearchSpace(fixed={"tp": 3}))
    with pytest.raises(ConfigError, match=r"pp=5 .*nearest feasible: pp=4"):
        search(spec, _system(), 16, training, SearchSpace(fixed={"pp": 5}))
    with pytest.raises(ConfigError, match=r"pp=8, cp=4 are not possible together; nearest "
                                          r"feasible: pp=4, pp=2, pp=1 .*; or cp=2, cp=1"):
        search(spec, _system(), 16, training, SearchSpace(fixed={"pp": 8, "cp": 4}))
    # 32 layers over 2 x 3 virtual stages: the framework's uneven split, as predict takes it
    assert search(spec, _system(), 16, training, SearchSpace(fixed={"pp": 2, "vpp": 3})).top
    with pytest.raises(ConfigError, match=r"global batch.*nearest feasible: --global-batch"):
        search(spec, _system(), 16, TrainingConfig(seq_len=4096, global_batch=7),
               SearchSpace(fixed={"tp": 1, "pp": 1, "cp": 1}))
    with pytest.raises(ConfigError, match=r"ep=4 is not possible here; nearest feasible: ep=1"):
        search(spec, _system(), 16, training, SearchSpace(fixed={"ep": 4}))  # a dense model
    with pytest.raises(ConfigError, match="not accepted"):
        parse_fix(["bogus=1"])
    with pytest.raises(ConfigError, match="not accepted"):
        parse_fix(["sharding=zero7"])


def test_impossible_budget_says_what_it_needs(capsys):
    from fsdpsim.cli import main

    code = main(["search", "--model", "llama3-70b", "--num-gpus", "8", "--global-batch", "8",
                 "--memory-budget-gib", "20"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("fsdpsim: error:")
    assert "the least memory any plan needs is" in err
    assert "nearest feasible: --memory-budget-gib" in err
    assert main(["search", "--memory-budget-gib", "500"]) == 2
    assert "at most the" in capsys.readouterr().err
    assert main(["search", "--fix", "tp=3"]) == 2
    assert "nearest feasible: tp=2, tp=4" in capsys.readouterr().err


def test_cli_table_json_and_emits():
    runner = CliRunner()
    args = ["search", "--model", "gpt3-350m", "--num-gpus", "16", "--global-batch", "64",
            "--seq-len", "2048", "--memory-budget-gib", "3", "--top", "3"]
    res = runner.invoke(cli, args + ["--explain"])
    assert res.exit_code == 0, res.output
    assert "why #1 wins" in res.output
    assert "[parallelism]" in res.output or "torchtitan cannot run this plan" in res.output
    roomy = runner.invoke(cli, ["search", "--model", "llama3-70b", "--num-gpus", "64",
                                "--top", "2"]).output
    assert "(tight)" not in roomy and "budget 72.0 GiB/GPU (default: 90 % of 80 GiB)" in roomy
    tight = runner.invoke(cli, ["search", "--model", "llama3-70b", "--num-gpus", "64",
                                "--top", "2", "--memory-budget-gib", "80",
                                "--fix", "zero=1"]).output
    assert "GiB (tight)" in tight and "above 90 % of the GPU's memory" in tight  # as predict
    assert max(len(line) for line in tight.splitlines() + roomy.splitlines()) <= 100
    data = json.loads(runner.invoke(cli, args + ["--format", "json"]).output)
    assert len(data["plans"]) == 3 and data["plans"][0]["rank"] == 1
    assert data["plans"][0]["tokens_per_s"] >= data["plans"][1]["tokens_per_s"]
    # a plan torchtitan runs (it has no ZeRO-1/2, its mesh order is fixed)
    fsdp = args + ["--fix", "sharding=full,recompute=full", "--default-mesh-order"]
    data = json.loads(runner.invoke(cli, fsdp + ["--format", "json"]).output)
    toml = runner.invoke(cli, fsdp + ["--emit", "torchtitan"]).output
    import tomllib

    parsed = tomllib.loads(toml)
    best = data["plans"][0]
    assert parsed["parallelism"]["tensor_parallel_degree"] == best["tp"]
    assert parsed["parallelism"]["pipeline_parallel_degree"] == best["pp"]
    assert parsed["training"]["global_batch_size"] == 64
    mega = runner.invoke(cli, fsdp + ["--emit", "megatron"]).output
    assert f"--tensor-model-parallel-size {best['tp']}" in mega
    assert f"--micro-batch-size {best['micro_batch']}" in mega


def test_cost_objective_over_gpu_counts():
    """Throughput prefers more GPUs; cost per token need not: each count is searched and the
    ranking uses the objective (rent with failures, Daly's interval)."""
    runner = CliRunner()
    base = ["search", "--model", "gpt3-350m", "--num-gpus", "8,64", "--global-batch", "64",
            "--seq-len", "2048", "--format", "json", "--top", "20"]
    fast = json.loads(runner.invoke(cli, base).output)
    cheap = json.loads(runner.invoke(cli, base + ["--objective", "cost", "--price",
                                                  "2"]).output)
    assert fast["plans"][0]["num_gpus"] == 64
    assert cheap["plans"][0]["num_gpus"] == 8


@pytest.mark.parametrize("model,n,seq", [("llama3-70b", 64, 8192), ("mixtral-8x7b", 32, 4096)])
def test_variant_columns_equal_plan_inputs(model, n, seq):
    """The search builds a family's variants as columns; each row must equal predict's own
    builders (plan_inputs, pod_inputs, stage_inputs) for that variant's plan."""
    from fsdpsim.engine.build import plan_inputs, pod_inputs
    from fsdpsim.engine.build_moe import stage_inputs
    from fsdpsim.drivers.search.columns import PlanColumns
    from fsdpsim.drivers.search.space import enumerate_families

    spec, system = get_model(model), _system()
    training = TrainingConfig(seq_len=seq, global_batch=2 * n)
    families = list(enumerate_families(spec, n, 8, seq, 2 * n,
                                       SearchSpace(framework="megatron")))
    s = PlanColumns(spec, system, families, training)
    rng = np.random.default_rng(0)
    for i in rng.choice(len(s), size=min(300, len(s)), replace=False):
        plan = s.plan(i)
        want = {**plan_inputs(plan, spec.n_layers), **pod_inputs(plan, system),
                **stage_inputs(spec, plan)}
        got = {k: float(s.column(k, np.array([i]))[0]) for k in want}
        assert got == pytest.approx({k: float(v) for k, v in want.items()}), plan_line(
            type("C", (), {"plan": plan, "grad_accum": 1, "recompute": "none",
                           "micro_batch": 1, "recompute_layers": None})())


def test_tp_overlap_dominates_in_the_model():
    """The space keeps TP overlap on (search_space docstring): in the model, turning it off is
    never faster and never saves memory. Checked on sampled plans and candidates."""
    spec, system = get_model("llama3-8b"), _system()
    training = TrainingConfig(seq_len=4096, global_batch=64)
    plans = [p for p in enumerate_plans(spec, 32, 8, 4096, 64, SearchSpace(mesh_orders=False))
             if p.tp > 1]
    rng = np.random.default_rng(1)
    for i in rng.choice(len(plans), size=40, replace=False):
        on, off = plans[i], replace(plans[i], tp_overlap=False)
        mb = np.array([1.0, 2.0])
        cand = {"micro_batch": mb, "grad_accum": 64 / on.dp / mb, "ceilings": 0.0,
                "recompute": np.array([0.0, 2.0])}
        a = engine.evaluate({**config_inputs(spec, system, on, training), **cand})
        b = engine.evaluate({**config_inputs(spec, system, off, training), **cand})
        assert np.all(b["tokens_per_s"] <= a["tokens_per_s"] * (1 + 1e-12))
        assert np.all(b["peak_bytes"] >= a["peak_bytes"] * (1 - 1e-12))


def test_members_per_domain_closed_form_equals_enumeration():
    """layout._members counts a group's ranks in a scale-up domain in closed form; equal to
    listing the ranks, on random meshes, orders, groups and domain sizes."""
    from fsdpsim.plan.layout import _members, _strides

    rng = np.random.default_rng(2)
    names = ["pp", "dp_replicate", "dp_shard", "cp", "tp"]
    for _ in range(3000):
        degrees = rng.choice([1, 2, 3, 4, 8, 16], size=5)
        order = rng.permutation(names)
        mesh = tuple((str(n), int(degrees[names.index(n)])) for n in order)
        dims = tuple(str(d) for d in rng.choice(names, size=rng.integers(0, 5), replace=False))
        domain = int(rng.choice([1, 2, 4, 6, 8, 16, 64, 72, 256, 1000]))
        step, deg = _strides(mesh), dict(mesh)
        ranks = np.zeros(1, dtype=np.int64)
        for d in dims:
            ranks = (ranks[:, None] + step[d] * np.arange(deg[d])[None, :]).ravel()
        assert _members(mesh, dims, domain) == int(np.count_nonzero(ranks < domain))


def test_explain_says_what_the_constraints_cost():
    runner = CliRunner()
    res = runner.invoke(cli, ["search", "--model", "gpt3-350m", "--num-gpus", "16",
                              "--global-batch", "64", "--seq-len", "2048", "--fix", "tp=4",
                              "--explain"])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("without the constraints"))
    assert "(tp=4)" in line and "%" in line


def test_framework_profiles_limit_the_space():
    """A framework searches only what it can run: Megatron-LM v2.x (2021) has DDP data
    parallelism without sequence parallelism, CP or TP overlap; DeepSpeed's 2021 ZeRO-3 is
    stage 3 without pipelines. --fix overrides."""
    spec = get_model("gpt3-1.3b")
    old = list(enumerate_plans(spec, 16, 8, 2048, 64, SearchSpace(framework="megatron-2021")))
    assert old and {p.sharding for p in old} == {"none"}
    assert not any(p.sequence_parallel or p.tp_overlap or p.cp > 1 for p in old)
    assert {p.pp_schedule for p in old if p.pp > 1} <= {"1f1b", "interleaved"}
    ds = list(enumerate_plans(spec, 16, 8, 2048, 64,
                              SearchSpace(framework="deepspeed-zero3-2021")))
    assert {p.sharding for p in ds} == {"full"} and {p.pp for p in ds} == {1}
    fixed = list(enumerate_plans(spec, 16, 8, 2048, 64,
                                 SearchSpace(framework="megatron-2021",
                                             fixed={"sharding": "optimizer"})))
    assert {p.sharding for p in fixed} == {"optimizer"}
    # no selective or partial recompute before Megatron-LM v3: a tight budget gets all layers
    result = search(get_model("gpt3-350m"), _system(budget_gib=3.0), 16,
                    TrainingConfig(seq_len=2048, global_batch=64),
                    SearchSpace(framework="megatron-2021"), top=5)
    assert result.top and all(c.recompute in ("none", "full") and c.recompute_layers is None
                              for c in result.top)


def test_order_layouts_equal_the_reordered_plan():
    """layout.order_layouts (the search's cheap comparison of mesh orders) equals the layouts of
    the plan rebuilt with that order."""
    import itertools

    from fsdpsim.plan.layout import expert_layout, group_layout, order_layouts, pod_layout

    plan = ParallelPlan(num_gpus=256, gpus_per_node=8, sharding="hybrid", shard_group_size=4,
                        tp=2, pp=4, cp=2, ep=4, etp=1)
    dims = ("pp", "dp_replicate", "dp_shard", "cp")
    for perm in itertools.permutations(dims):
        order = perm + ("tp",)
        other = replace(plan, mesh_order=order)
        assert order_layouts(plan, order, 64) == (group_layout(other), pod_layout(other, 64),
                                                  expert_layout(other, pod_gpus=64))


@pytest.mark.parametrize("model,n", [("llama3-70b", 256), ("mixtral-8x7b", 64)])
def test_memory_does_not_depend_on_the_mesh_order(model, n):
    """The search bisects the micro-batch memory bound for one order of each mesh and reuses it
    for the others: sound only while peak memory is independent of the mesh order (orders place
    groups on the tiers; they move no bytes into memory)."""
    from fsdpsim.plan.parallel import DEFAULT_MESH_ORDER
    from fsdpsim.drivers.search.columns import PlanColumns
    from fsdpsim.drivers.search.space import enumerate_families

    spec, system = get_model(model), _system()
    training = TrainingConfig(seq_len=4096, global_batch=2 * n)
    # a framework whose mesh dimensions may take any order (FSDP1 on a user's device mesh)
    families = list(enumerate_families(spec, n, 8, 4096, 2 * n, SearchSpace(framework="fsdp1")))
    s = PlanColumns(spec, system, families, training)
    groups: dict = {}
    for i, f in enumerate(families):
        groups.setdefault(replace(f.base, mesh_order=DEFAULT_MESH_ORDER), []).append(i)
    multi = [g for g in groups.values() if len(g) > 1][:60]
    assert multi
    rows = np.array([int(np.flatnonzero(s.family == fi)[0]) for g in multi for fi in g])
    for rc in (0.0, 2.0):
        out = s.evaluate(rows, np.ones(rows.size), 2 * n / s.dp[rows], np.full(rows.size, rc),
                         np.full(rows.size, -1.0))
        k = 0
        for g in multi:
            peaks = out["peak_bytes"][k:k + len(g)]
            k += len(g)
            assert np.all(peaks == peaks[0])


def test_energy_and_time_to_train_objectives():
    """Energy per token with failures favours the GPU count that runs most efficiently; the
    expected wall time of a token budget favours the fastest job. Both rank candidates by the
    procurement columns (run_columns) and list the same numbers predict reports."""
    runner = CliRunner()
    base = ["search", "--model", "gpt3-350m", "--num-gpus", "8,64", "--global-batch", "64",
            "--seq-len", "2048", "--format", "json", "--top", "20"]
    energy = json.loads(runner.invoke(cli, base + ["--objective", "energy"]).output)
    wall = json.loads(runner.invoke(cli, base + ["--objective", "time-to-train",
                                                 "--tokens", "1t"]).output)
    per_gpu: dict = {}
    for p in energy["plans"]:
        per_gpu[p["num_gpus"]] = max(per_gpu.get(p["num_gpus"], 0.0), p["tokens_per_s_per_gpu"])
    assert energy["plans"][0]["num_gpus"] == max(per_gpu, key=per_gpu.get)
    assert wall["plans"][0]["num_gpus"] == 64
    assert wall["query"]["objective"] == "time-to-train"


@pytest.mark.parametrize("precision", ["fp8", "fp8-block", "mxfp8", "nvfp4"])
def test_emits_name_every_precision(precision):
    """--emit works for every low-precision format (on a GPU that has it)."""
    runner = CliRunner()
    args = ["search", "--model", "gpt3-350m", "--gpu", "b200", "--num-gpus", "8",
            "--global-batch", "32", "--seq-len", "2048", "--precision", precision,
            "--fix", "sharding=full", "--default-mesh-order"]
    toml = runner.invoke(cli, args + ["--emit", "torchtitan"])
    assert toml.exit_code == 0, toml.output
    import tomllib

    assert tomllib.loads(toml.output)["training"]["mixed_precision_param"] == "bfloat16"
    mega = runner.invoke(cli, args + ["--emit", "megatron"])
    assert mega.exit_code == 0 and "--bf16" in mega.output


def test_default_budget_keeps_headroom():
    """By default no searched plan uses more than 90 % of the GPU's memory (predict's rule);
    --memory-budget-gib changes the budget, and plans above 90 % are flagged."""
    runner = CliRunner()
    args = ["search", "--model", "llama3-70b", "--gpu", "h100", "--num-gpus", "64", "--top",
            "5", "--format", "json"]
    data = json.loads(runner.invoke(cli, args).output)
    assert data["query"]["memory_budget_gib"] == pytest.approx(72.0)
    assert all(p["peak_gib"] <= 0.9 * 80 + 1e-9 for p in data["plans"])
    assert not any(p["above_default_budget"] for p in data["plans"])
    full = json.loads(runner.invoke(cli, args + ["--memory-budget-gib", "80", "--fix",
                                                 "zero=1"]).output)
    assert full["plans"][0]["peak_gib"] > 72 and full["plans"][0]["above_default_budget"]


PRUNE_CASES = [  # model, gpu, gpus, global batch, seq, budget GiB, fixed (and framework)
    # MoE (MLA, dense layers, MTP) as Megatron runs it
    ("deepseek-v3", "gb200", 128, 256, 4096, None, {"cp": 1, "tp": 1, "framework": "megatron"}),
    ("llama3-8b", "h100", 64, 128, 4096, 24.0, {}),  # hybrid dense, partial recompute
    # MoE over InfiniBand: exposed expert all-to-alls, interleaved pipelines
    ("deepseek-v3", "h100", 512, 256, 4096, None, {"cp": 1}),
]


@pytest.mark.parametrize("model,gpu,n,gb,seq,budget,fixed", PRUNE_CASES)
def test_pruned_search_equals_unpruned(model, gpu, n, gb, seq, budget, fixed):
    """The throughput bound skips candidates (fsdpsim.drivers.search.bounds) without changing
    the result: the same plans with the same candidates, scores and order as the search that
    evaluates every (plan, micro-batch) that fits."""
    spec, system = get_model(model), _system(gpu, budget)
    training = TrainingConfig(seq_len=seq, global_batch=gb)
    fixed = dict(fixed)
    space = SearchSpace(fixed=fixed, framework=fixed.pop("framework", "fsdp2"))
    pruned = search(spec, system, n, training, space, top=5)
    full = search(spec, system, n, training, space, top=5, prune=False)
    assert pruned.top and pruned.stats["candidates_skipped"] > 0
    assert pruned.candidates < full.candidates
    assert [(c.plan, c.micro_batch, c.recompute, c.recompute_layers, c.tokens_per_s, c.score)
            for c in pruned.top] == [
        (c.plan, c.micro_batch, c.recompute, c.recompute_layers, c.tokens_per_s, c.score)
        for c in full.top]
    assert (pruned.plans, pruned.plans_fitting) == (full.plans, full.plans_fitting)


@pytest.mark.parametrize("model,gpu,n,gb,seq,budget,fixed", PRUNE_CASES)
def test_throughput_bound_is_sound_and_shared(model, gpu, n, gb, seq, budget, fixed):
    """The bounds' premises on every (plan, micro-batch) of the space, at no, selective and
    full recompute: the step is at least (1) the compute without the optimizer at no
    recompute and (2) the step without the optimizer at no recompute on the ideal network;
    (1) is the same across each group of plans (compute_groups) and (2) across each group
    of bound_groups, up to IDEAL_SLACK."""
    from fsdpsim.drivers.search.bounds import (IDEAL_SLACK, bound_groups, compute_groups,
                                               ideal_network)
    from fsdpsim.drivers.search.columns import PlanColumns
    from fsdpsim.drivers.search.space import enumerate_families

    spec, system = get_model(model), _system(gpu, budget)
    training = TrainingConfig(seq_len=seq, global_batch=gb)
    from fsdpsim.hardware.system import domain_gpus

    fixed = dict(fixed)
    space = SearchSpace(fixed=fixed, framework=fixed.pop("framework", "fsdp2"),
                        pod_gpus=system.pod_gpus)
    per_node = domain_gpus(system, n)
    families = list(enumerate_families(spec, n, per_node, seq, gb, space))
    s = PlanColumns(spec, system, families, training)
    plan = np.repeat(np.arange(len(s)), [len(divisors(gb // d)) for d in s.dp.tolist()])
    mb = np.concatenate([divisors(gb // d) for d in s.dp.tolist()])
    accum = gb // s.dp[plan] // mb
    keys = ("step_time_s", "compute_s", "optimizer_s")
    rl = np.full(plan.size, -1.0)
    none = s.evaluate(plan, mb, accum, np.zeros(plan.size), rl, keys=keys)
    compute = none["compute_s"] - none["optimizer_s"]
    ideal = s.evaluate(plan, mb, accum, np.zeros(plan.size), rl, keys=keys,
                       base=ideal_network(s.base))
    least = ideal["step_time_s"] - ideal["optimizer_s"]
    assert np.mean(least > compute * (1 + 1e-3)) > 0.5  # (2) is the tighter one
    for rc in (0.0, 1.0, 2.0):
        out = s.evaluate(plan, mb, accum, np.full(plan.size, rc), rl, keys=keys)
        assert np.all(out["step_time_s"] >= compute * (1 - 1e-12))
        assert np.all(out["step_time_s"] >= least * (1 - 1e-12))

    def shared(groups, value, rel):
        key = groups[plan] * (mb.max() + 1) + mb
        order = np.lexsort((value, key))
        first = np.r_[True, key[order][1:] != key[order][:-1]]
        low = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
        assert value[order] == pytest.approx(value[order][low], rel=rel)

    groups = compute_groups(s)
    assert groups.max() + 1 < len(s)  # the groups share something
    shared(groups, compute, 1e-12)
    finer = bound_groups(s, groups)
    assert finer.max() + 1 < len(s)
    shared(finer, least, IDEAL_SLACK)


@pytest.mark.parametrize("model,n", [("llama3-70b", 256), ("mixtral-8x7b", 64)])
def test_reordered_plans_equal_replace(model, n):
    """The search's other mesh orders skip ParallelPlan's checks: each one equals the plan
    ``replace`` builds and validates, field by field (``etp_defaulted`` included)."""
    from dataclasses import fields

    from fsdpsim.drivers.search.space import enumerate_families

    spec = get_model(model)
    families = list(enumerate_families(spec, n, 8, 4096, 256, SearchSpace(framework="fsdp1")))
    reordered = 0
    for f in families:
        if f.base.mesh_order == ParallelPlan(num_gpus=8, gpus_per_node=8).mesh_order:
            continue
        reordered += 1
        base = next(g.base for g in families if g.variants is f.variants)
        built = replace(base, mesh_order=f.base.mesh_order)
        assert all(getattr(f.base, x.name) == getattr(built, x.name) for x in fields(built))
    assert reordered > 0


@pytest.mark.parametrize("model,n,pod", [("llama3-70b", 256, None), ("mixtral-8x7b", 64, None),
                                         ("mixtral-8x7b", 128, 32)])
def test_family_rows_equal_plan_inputs(model, n, pod):
    """Every family's base row (an other mesh order takes its first order's row with its own
    layouts) equals predict's builders for its plan, with and without pods."""
    from fsdpsim.engine.build import plan_inputs, pod_inputs
    from fsdpsim.engine.build_moe import stage_inputs
    from fsdpsim.drivers.search.columns import _family_rows
    from fsdpsim.drivers.search.space import enumerate_families

    spec, system = get_model(model), replace(_system(), pod_gpus=pod)
    families = list(enumerate_families(spec, n, 8, 4096, 256,
                                       SearchSpace(pod_gpus=pod, framework="fsdp1")))
    rows = _family_rows(spec, system, families)
    assert len({f.base.mesh_order for f in families}) > 1
    for f, row in zip(families, rows):
        want = {**plan_inputs(f.base, spec.n_layers), **pod_inputs(f.base, system),
                **stage_inputs(spec, f.base)}
        assert {k: float(v) for k, v in row.items()} == {k: float(v) for k, v in want.items()}


def test_fsdp2_searches_what_torchtitan_runs():
    """Under --framework fsdp2 the search keeps to torchtitan's data parallelism (FSDP2, HSDP,
    DDP: no ZeRO-1/2) and recompute (none, full, per-op selective; not Megatron's attention-
    core selective) unless --fix names another; under megatron both are ranked."""
    spec, system = get_model("llama3-8b"), _system(budget_gib=40.0)
    fixed = {"cp": 1, "pp": 1}
    for flash in (True, False):  # eager attention: the attention core's activations matter
        training = TrainingConfig(seq_len=4096, global_batch=32, flash_attention=flash)
        titan = search(spec, system, 16, training, SearchSpace(fixed=fixed, framework="fsdp2"),
                       top=30).top
        assert titan and {c.plan.sharding for c in titan} <= {"full", "hybrid", "none"}
        assert "selective" not in {c.recompute for c in titan}
        mega = search(spec, system, 16, training,
                      SearchSpace(fixed=fixed, framework="megatron"), top=30).top
        assert {"optimizer", "grad_op"} <= {c.plan.sharding for c in mega}
        assert "op-selective" not in {c.recompute for c in mega}
        if flash:
            assert "op-selective" in {c.recompute for c in titan}
        else:
            assert "selective" in {c.recompute for c in mega}
    own = SearchSpace(framework="fsdp2", fixed={**fixed, "sharding": "optimizer",
                                                "recompute": "selective"})
    top = search(spec, system, 16, training, own, top=5).top
    assert top and {(c.plan.sharding, c.recompute) for c in top} == {("optimizer", "selective")}
    # the per-op policy where fsdpsim models it for the model's layers; else none or full
    assert _selective_method(spec, SearchSpace(framework="megatron")) == "selective"
    assert _selective_method(get_model("mixtral-8x7b"), SearchSpace(framework="fsdp2")) is None
