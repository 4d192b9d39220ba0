"""Bottleneck and thresholds from one computation (:mod:`fsdpsim.drivers.sensitivity`).

The reported bottleneck and every threshold come from the engine's own response to each
resource, so they cannot contradict each other: for a configuration that fits, the bottleneck is
the inter-node network exactly when the 95 % bandwidth threshold exceeds the bandwidth the
system has, exactly when the 95 % token threshold exceeds the plan's tokens per GPU per
micro-batch. A property test checks that rule on 12,000 random plans (data-parallel and hybrid,
bandwidths log-uniform over 3-3,200 Gb/s); regression tests pin the two contradictions the
engine's heuristic and closed forms produced in a 9,072-row sweep; definition tests evaluate the
engine at each threshold and one lattice step below it.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

from fsdpsim import engine

from fsdpsim.drivers import sensitivity
from fsdpsim.costs import comm
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import config_inputs, predict
from fsdpsim.model.presets import get_model
from fsdpsim.hardware.system import resolve_system
from fsdpsim.util.units import GBIT_PER_S_BYTES_PER_S

CAT = load_catalog((), use_env=False)
STEP = 2.0 ** (1.0 / sensitivity.STEPS)  # one lattice step
NETWORK = engine.BOTTLENECKS.index("inter_node_link")


def _predict(model, gpu, gbps, plan, training, catalog=CAT):
    return predict(get_model(model),
                   resolve_system(catalog, gpu=gpu, inter_node_gbps_per_gpu=gbps), plan, training)


#: H100's factors when the two regression cases below were found (an earlier fit): each case
#: sits at the edge of a 95 % threshold, so it is pinned
#: (that one set also in the 16-bit PyTorch table, ``[efficiency.bf16.pytorch]``).
H100_THEN = {"h100-sxm5-80gb": {"matmul_fraction": 0.790, "matmul_half_gflop": 3.91,
                                "fused_attention_fraction": 0.329,
                                "bf16.pytorch": {"matmul_fraction": 0.790,
                                                 "source": "pinned to the fit of then"}}}


@pytest.fixture(scope="module")
def then_catalog(tmp_path_factory):
    from conftest import overlay_catalog

    return overlay_catalog(tmp_path_factory.mktemp("h100_then"), H100_THEN)


def _consistent(bottleneck, fits, have, b_share, t0, t_share, b_hide, t_hide):
    """The consistency rule on arrays: for rows that fit, network-bound ⇔ B_share > B0 ⇔
    t_share > t0; for every row, B_hide > B0 ⇔ t_hide > t0. Returns the offending rows."""
    net = np.asarray(bottleneck) == NETWORK
    bad = fits & ((net != (b_share > have)) | (net != (t_share > t0)))
    return np.flatnonzero(bad | ((b_hide > have) != (t_hide > t0)))


# -- the two contradictions of the old computation ------------------------------------------------
def test_compute_bound_plan_whose_old_threshold_exceeded_its_bandwidth(then_catalog):
    """The sweep's first contradiction: the engine's heuristic said "compute" next to a
    closed-form bandwidth to hide communication of 112.8 Gb/s on a 100 Gb/s network (Llama 3
    70B, 32 H100, FSDP, micro-batch 4 x 2,048 tokens, full recompute). Solved on the engine's
    own collective times (NCCL protocol choice, latencies) the hide-communication bandwidth is
    88 Gb/s, and the network costs 4.9 % of throughput: compute-bound, with both 95 %
    thresholds just below what the plan has. (The old heuristic and closed forms were removed
    from the engine with this change; the values above are what they gave.)"""
    p = _predict("llama3-70b", "h100", 100, ParallelPlan(32, 8, "full"),
                 TrainingConfig(seq_len=2048, micro_batch=4, recompute="full"), then_catalog)
    old_need = 112.8  # Gb/s, the removed closed form's (docstring)
    d = p.to_dict()
    th, share = d["thresholds"], d["sensitivity"]["inter_node_throughput_share"]
    assert d["fits"] and d["bottleneck"] == "compute"
    assert 0.95 <= share < 0.96
    assert 90 < th["inter_node_gbps_per_gpu_at_share"] <= 100
    assert 4 * 2048 * 0.9 < th["critical_tokens_per_gpu_at_share"] <= 4 * 2048
    assert 80 < th["min_inter_node_gbps_per_gpu"] < 100 < old_need


def test_network_bound_plan_whose_old_threshold_was_below_its_bandwidth(then_catalog):
    """The sweep's second contradiction: "inter-node network" next to a closed-form 22.2 Gb/s
    needed to hide communication on a 25 Gb/s network (Llama 3 8B, 16 H100, HSDP, micro-batch
    8 x 2,048, full recompute). The network does cost more than 5 % of throughput (the exposed
    first all-gather and last reduce-scatter around the step), so the bottleneck stays the
    network and the 95 % threshold now says so; the hide-communication reading (per micro-batch,
    collectives against compute) is still below 25 Gb/s and is reported as that reading."""
    p = _predict("llama3-8b", "h100", 25, ParallelPlan(16, 8, "hybrid"),
                 TrainingConfig(seq_len=2048, micro_batch=8, recompute="full"), then_catalog)
    d = p.to_dict()
    th = d["thresholds"]
    assert d["fits"] and d["bottleneck"] == "inter_node_link"
    assert th["inter_node_gbps_per_gpu_at_share"] > 25
    assert th["critical_tokens_per_gpu_at_share"] is None or (
        th["critical_tokens_per_gpu_at_share"] > 8 * 2048)
    assert th["min_inter_node_gbps_per_gpu"] < 25  # hidden per micro-batch, exposed at the ends


# -- the thresholds are what they say -------------------------------------------------------------
CASES = [
    ("llama3-8b", "h100", 100, ParallelPlan(64, 8), TrainingConfig(seq_len=4096, micro_batch=2,
                                                                   recompute="none")),
    ("llama3-8b", "h100", 25, ParallelPlan(64, 8), TrainingConfig(seq_len=4096, micro_batch=8,
                                                                  recompute="full")),
    ("llama3-70b", "b200", 200, ParallelPlan(256, 8, "hybrid", shard_group_size=16),
     TrainingConfig(seq_len=4096, micro_batch=1, recompute="full", global_batch=256)),
    ("gpt3-175b", "h100", 400, ParallelPlan(1024, 8, "optimizer", tp=8, pp=8),
     TrainingConfig(seq_len=2048, micro_batch=1, recompute="selective", global_batch=1536)),
]


def _x(model, gpu, gbps, plan, training):
    spec = get_model(model)
    x = config_inputs(spec, resolve_system(CAT, gpu=gpu, inter_node_gbps_per_gpu=gbps), plan,
                      training)
    accum = training.grad_accum(plan.dp, training.micro_batch)
    x.update(micro_batch=float(training.micro_batch), grad_accum=float(accum),
             recompute=engine.RECOMPUTE_CODES[training.recompute], ceilings=0.0)
    return x


@pytest.mark.parametrize("case", CASES, ids=[c[0] + f"@{c[2]}" for c in CASES])
def test_thresholds_meet_their_definitions_on_the_engine(case):
    """Each threshold is the least lattice point (steps of 2^(1/1024)) at which its condition
    holds: evaluated there the condition holds, one step below it does not."""
    x = _x(*case)
    s = {k: float(v[0]) for k, v in sensitivity.analyse(x).items()}
    have, b0 = x["nic_share_bytes_per_s"], x["micro_batch"]
    tokens0 = b0 * x["seq_len"] / x.get("cp", 1.0)
    per_microbatch = x["strategy"] in (comm.FULL, comm.GRAD_OP, comm.HYBRID)

    def run(**over):
        return engine.evaluate({**x, **{k: np.asarray(v, dtype=float) for k, v in over.items()}})

    s_inf = run(nic_share_bytes_per_s=np.inf)["step_time_s"]
    checked = 0
    for key, name in (("inter_node_bytes_per_s_per_gpu_at_share", "bandwidth"),
                      ("min_inter_node_bytes_per_s_per_gpu", "bandwidth"),
                      ("critical_tokens_per_gpu_at_share", "tokens"),
                      ("critical_tokens_per_gpu", "tokens")):
        v = s[key]
        if v == 0 or not np.isfinite(v):
            continue
        at = np.array([v, v / STEP])
        o = (run(nic_share_bytes_per_s=at) if name == "bandwidth"
             else run(micro_batch=b0 * at / tokens0))
        if key.endswith("at_share"):
            reference = (np.broadcast_to(s_inf, 2) if name == "bandwidth"
                         else run(micro_batch=b0 * at / tokens0,
                                  nic_share_bytes_per_s=np.inf)["step_time_s"])
            ok = reference - sensitivity.SHARE * o["step_time_s"] >= 0
        else:
            dp_comm = per_microbatch * (o["all_gather_s"] + o["reduce_scatter_s"]
                                        + o["all_reduce_s"])
            ok = o["compute_s"] - o["optimizer_s"] - dp_comm >= 0
        assert ok[0] and not ok[1], (key, v)
        checked += 1
    assert checked >= 2
    # the bottleneck's test is the same evaluation as the threshold's side of the plan
    net = s["bottleneck"] == NETWORK
    assert net == (s["inter_node_bytes_per_s_per_gpu_at_share"] > have)
    assert net == (s["critical_tokens_per_gpu_at_share"] > tokens0)


def test_bottleneck_is_the_largest_gain_when_the_network_does_not_bind():
    """Below the network's 5 % the bottleneck is the resource whose 5 % speed-up gains most:
    a compute-bound FSDP step on 400 Gb/s, and the same model made HBM-bound by a GPU whose
    HBM bandwidth is cut to a tenth."""
    x = _x(*CASES[0][:2], 400, *CASES[0][3:])
    s = sensitivity.analyse(x)
    assert engine.BOTTLENECKS[int(s["bottleneck"][0])] == "compute"
    assert s["gain_compute"][0] == max(s[f"gain_{r}"][0] for r in sensitivity.RESOURCES)
    slow_hbm = sensitivity.analyse({**x, "hbm_bytes_per_s": x["hbm_bytes_per_s"] / 10})
    assert engine.BOTTLENECKS[int(slow_hbm["bottleneck"][0])] == "hbm_bandwidth"
    assert slow_hbm["gain_hbm_bandwidth"][0] > slow_hbm["gain_compute"][0]


def test_data_parallel_without_per_microbatch_collectives_needs_nothing_to_hide():
    """DDP and ZeRO-1 reduce once per step: the hide-communication readings are 0 (as the
    closed forms were), while the 95 % readings still see the once-per-step collectives."""
    for sharding in ("none", "optimizer"):
        s = sensitivity.analyse(_x("gpt3-1.3b", "h100", 25, ParallelPlan(64, 8, sharding),
                                   TrainingConfig(seq_len=2048, micro_batch=4, recompute="none")))
        assert s["min_inter_node_bytes_per_s_per_gpu"][0] == 0.0
        assert s["critical_tokens_per_gpu"][0] == 0.0
        assert s["inter_node_bytes_per_s_per_gpu_at_share"][0] > 0.0


def test_a_search_gives_the_same_lattice_point_alone_or_in_a_batch():
    """predict analyses one configuration (a dense first grid, wide rounds), a sweep thousands
    (a coarse grid, narrow rounds): the thresholds are lattice points, so both give the same
    numbers to the last digit."""
    xs = [_x(*c) for c in CASES] + [_x(*c[:2], 12.5, *c[3:]) for c in CASES]
    keys = set.intersection(*(set(x) for x in xs))
    batch = sensitivity.analyse({k: np.array([x[k] for x in xs]) for k in keys})
    for i, x in enumerate(xs):
        alone = sensitivity.analyse({k: x[k] for k in keys})
        for k in sensitivity.OUTPUTS:
            a, b = alone[k][0], batch[k][i]
            assert a == b or (np.isnan(a) and np.isnan(b)), (i, k)


# -- the property: no contradiction on 12,000 random plans ---------------------------------------
MODELS = ("gpt3-1.3b", "llama3-8b", "mistral-7b", "llama3-70b")
GPUS = ("h100", "a100", "b200")
LAYOUTS = ((1, 1, 1), (2, 1, 1), (8, 1, 1), (1, 4, 1), (4, 2, 1), (1, 1, 2), (2, 2, 2))
SHARDINGS = ("full", "grad_op", "optimizer", "none", "hybrid")


def random_plans(n: int, seed: int = 12) -> dict[str, np.ndarray]:
    """``n`` configurations: random model, GPU, GPU count (8-2,048), sharding, (tp, pp, cp)
    layout, sequence (1k-16k), micro-batch (1-16), recompute and accumulation, and an
    inter-node bandwidth log-uniform over 3-3,200 Gb/s per GPU. Inputs are built once per
    distinct (model, GPU, plan) by predict's own builder and gathered; every input an array."""
    rng = np.random.default_rng(seed)
    systems = {g: resolve_system(CAT, gpu=g) for g in GPUS}
    rows = []
    for model in MODELS:
        spec = get_model(model)
        for gpu in GPUS:
            for num_gpus in (8, 32, 128, 512, 2048):
                for layout in LAYOUTS:
                    for sharding in SHARDINGS:
                        tp, pp, cp = layout
                        try:
                            plan = ParallelPlan(num_gpus, 8, sharding, tp=tp, pp=pp, cp=cp)
                            x = config_inputs(spec, systems[gpu], plan,
                                              TrainingConfig(seq_len=16384))
                        except ConfigError:
                            continue
                        rows.append({k: float(v) for k, v in x.items()})
    keys = set.intersection(*(set(r) for r in rows))
    pick = rng.integers(0, len(rows), n)
    x = {k: np.array([r[k] for r in rows])[pick] for k in keys}
    x["seq_len"] = 2.0 ** rng.integers(10, 15, n)
    x["micro_batch"] = rng.integers(1, 17, n).astype(float)
    x["recompute"] = rng.integers(0, 3, n)
    x["grad_accum"] = x["pp"] * rng.integers(1, 5, n)  # whole rounds for any schedule
    x["nic_share_bytes_per_s"] = np.exp(rng.uniform(np.log(3.0), np.log(3200.0), n)) \
        * GBIT_PER_S_BYTES_PER_S
    for k in ("strategy", "optimizer", "pp_schedule"):
        x[k] = x[k].astype(int)
    return x


def test_variants_ordered_by_structure_give_the_same_numbers(monkeypatch):
    """The variants of a block are stacked ordered by the engine's structure (its groups read
    as runs of rows, not gathered) and put back in order: the same numbers to the last bit as
    stacked in request order, on plans that mix pipelined and unpipelined layouts."""
    x = random_plans(600, seed=5)
    assert len(np.unique(x["pp"] > 1)) == 2
    calls = []
    real = engine._evaluate_slices
    monkeypatch.setattr(engine, "_evaluate_slices",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    ordered = sensitivity.analyse(x)
    assert calls
    run = sensitivity._run
    monkeypatch.setattr(sensitivity, "_run", lambda x, requests, code=None: run(x, requests))
    calls.clear()
    in_order = sensitivity.analyse(x)
    assert not calls
    for k in sensitivity.OUTPUTS:
        assert ordered[k].tobytes() == in_order[k].tobytes(), k


def test_no_contradiction_between_bottleneck_and_thresholds_on_12000_random_plans():
    """The consistency rule holds on every row (12,000 random plans, about 3 s on the 2-core
    development machine); the gains are never negative (the engine is monotone in every
    resource), and the network share is a share."""
    x = random_plans(12_000)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from any search
        s = sensitivity.analyse(x)
    elapsed = time.perf_counter() - start
    fits = np.asarray(engine.evaluate({**x, "ceilings": 0.0})["fits"])
    tokens0 = x["micro_batch"] * x["seq_len"] / x["cp"]
    bad = _consistent(s["bottleneck"], fits, x["nic_share_bytes_per_s"],
                      s["inter_node_bytes_per_s_per_gpu_at_share"], tokens0,
                      s["critical_tokens_per_gpu_at_share"],
                      s["min_inter_node_bytes_per_s_per_gpu"], s["critical_tokens_per_gpu"])
    assert bad.size == 0, bad[:10]
    net = s["bottleneck"] == NETWORK
    assert 0.05 < net[fits].mean() < 0.95  # both sides of the rule are exercised
    assert np.all(s["inter_node_throughput_share"] <= 1.0 + 1e-12)
    for r in sensitivity.RESOURCES:
        assert np.all(s[f"gain_{r}"] >= -1e-12), r
    print(f"12,000 random plans analysed in {elapsed:.1f} s; network-bound "
          f"{100 * net[fits].mean():.0f} % of those that fit")


def test_sweep_columns_keep_the_rule_and_equal_predict(cat):
    """The sweep reports the post-pass too (its winners only): on a 192-point grid over
    bandwidth (12.5-1,600 Gb/s per GPU), GPU counts and models the rule holds on every row
    that fits, and a multi-point sweep's row equals predict's one-point answer to the digit."""
    from conftest import sweep

    frame = sweep(cat, model="llama3-8b,llama3-70b", gpu="h100,a100", num_gpus="16..512",
                  inter_node_gbps_per_gpu="12.5,25,50,100,200,400,800,1600", best=True)
    assert len(frame) == 192
    f = frame[frame["fits"].astype(bool)]
    codes = np.array([engine.BOTTLENECKS.index(str(b)) for b in f["bottleneck"]])
    tokens0 = (f["training.micro_batch"] * f["training.seq_len"] / f["plan.cp"]).to_numpy(float)

    def col(name):
        return f[name].to_numpy(dtype=float, na_value=np.nan)

    inf = lambda a: np.where(np.isnan(a), np.inf, a)  # noqa: E731 (null: beyond the range)
    bad = _consistent(codes, np.ones(len(f), dtype=bool), col("inter_node_gbps_per_gpu"),
                      inf(col("thresholds.inter_node_gbps_per_gpu_at_share")), tokens0,
                      inf(col("thresholds.critical_tokens_per_gpu_at_share")),
                      inf(col("thresholds.min_inter_node_gbps_per_gpu")),
                      inf(col("thresholds.critical_tokens_per_gpu")))
    assert bad.size == 0, f.iloc[bad[:5]][["model", "gpu", "plan.num_gpus", "bottleneck"]]
    assert {"compute", "inter_node_link"} <= set(f["bottleneck"].astype(str))
    row = f.iloc[len(f) // 2]
    p = _predict(row["model"], "h100" if "h100" in row["gpu"] else "a100",
                 float(row["inter_node_gbps_per_gpu"]),
                 ParallelPlan(int(row["plan.num_gpus"]), 8, row["plan.sharding"]),
                 TrainingConfig(seq_len=int(row["training.seq_len"]),
                                micro_batch=int(row["training.micro_batch"]),
                                global_batch=int(row["training.global_batch"]),
                                recompute=row["training.recompute"])).to_dict()
    assert p["bottleneck"] == row["bottleneck"]
    for key, value in p["thresholds"].items():
        assert (value is None and np.isnan(row[f"thresholds.{key}"])) or \
            value == row[f"thresholds.{key}"], key


def test_exposed_communication_that_bandwidth_cannot_buy_back_is_collective_latency():
    """Llama-3-8B FSDP over 4,096 H100 at micro-batch 1: NCCL's ring latency over 4,096 ranks
    leaves most of the step exposed, and 5 % more NIC or link bandwidth wins back almost none
    of it; neither "compute" nor "inter-node network" would be true."""
    from fsdpsim.hardware.catalog import load_catalog
    from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
    from fsdpsim.drivers.predict import predict as run
    from fsdpsim.model.presets import get_model
    from fsdpsim.hardware.system import resolve_system

    system = resolve_system(load_catalog(use_env=False), gpu="h100")
    p = run(get_model("llama3-8b"), system, ParallelPlan(4096, 8, "full"),
            TrainingConfig(seq_len=2048, micro_batch=1))
    assert p.exposed_comm_s > 0.5 * p.step_time_s
    assert p.bottleneck == "collective_latency"
    hsdp = run(get_model("llama3-8b"), system,
               ParallelPlan(4096, 8, "hybrid", shard_group_size=64),
               TrainingConfig(seq_len=2048, micro_batch=1))
    assert hsdp.bottleneck != "collective_latency"
