"""Hybrid parallelism: the plan as a mesh, the layout on the tiers, and the physics of TP, SP,
CP and PP in the engine."""

from __future__ import annotations

import numpy as np
import pytest

from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.layout import group_layout
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import predict
from fsdpsim.model.presets import get_model
from fsdpsim.hardware.system import domain_gpus, resolve_system


def _predict(cat, model="llama3-8b", gpu="h100", num_gpus=16, seq_len=4096, mb=1, gb=None,
             recompute="full", network=None, **plan):
    system = resolve_system(cat, gpu=gpu, network=network)
    p = ParallelPlan(num_gpus=num_gpus, gpus_per_node=domain_gpus(system, num_gpus), **plan)
    training = TrainingConfig(seq_len=seq_len, micro_batch=mb, recompute=recompute,
                              global_batch=gb)
    return predict(get_model(model), system, p, training)


# -- the plan ---------------------------------------------------------------------------------
def test_degree_error_names_every_degree():
    with pytest.raises(ConfigError, match=r"tp\(8\) \* pp\(3\) \* cp\(1\) = 24 does not divide "
                                          r"num_gpus\(64\)"):
        ParallelPlan(num_gpus=64, gpus_per_node=8, tp=8, pp=3)
    with pytest.raises(ConfigError, match=r"dp_replicate\(3\) \* dp_shard\(4\) \* cp\(1\) \* "
                                          r"tp\(8\) \* pp\(2\) != num_gpus\(128\)"):
        ParallelPlan.from_degrees(num_gpus=128, gpus_per_node=8, zero=3, dp_shard=4,
                                  dp_replicate=3, tp=8, pp=2)


@pytest.mark.parametrize("kwargs,message", [
    (dict(tp=3, num_gpus=48), r"n_heads\(32\) is not divisible by tp\(3\)"),
    # 8 KV heads over 16 ranks: Megatron-Core, nanotron and torchtitan each split whole heads
    (dict(tp=16, num_gpus=64), r"n_kv_heads\(8\) is not divisible by tp\(16\)"),
    (dict(pp=4, pp_first_layers=7), r"n_layers\(32\) does not split over pp\(4\)"),
    (dict(pp=2, vpp=3, pp_first_layers=15), r"not divisible by vpp\(3\)"),
    (dict(cp=4, seq_len=4100), r"seq_len\(4100\) is not divisible by 2 \* cp\(4\) = 8"),
    (dict(cp=8, cp_kind="all2all", tp=8), r"n_heads\(32\) is not divisible by tp\(8\) \* cp\(8\)"),
])
def test_model_checks(cat, kwargs, message):
    seq = kwargs.pop("seq_len", 4096)
    n = kwargs.pop("num_gpus", 64)
    with pytest.raises(ConfigError, match=message):
        _predict(cat, num_gpus=n, seq_len=seq, **kwargs)


def test_zero_spelling_equals_sharding_spelling():
    a = ParallelPlan.from_degrees(num_gpus=64, gpus_per_node=8, zero=3, dp_shard=8,
                                  dp_replicate=2, tp=4)
    b = ParallelPlan(num_gpus=64, gpus_per_node=8, sharding="hybrid", shard_group_size=8, tp=4)
    assert a == b
    assert ParallelPlan.from_degrees(num_gpus=8, gpus_per_node=8, zero=1).sharding == "optimizer"


def test_layout_tp_innermost_stays_in_the_node():
    plan = ParallelPlan(num_gpus=16384, gpus_per_node=8, tp=8, cp=2, pp=16)
    lay = group_layout(plan)
    assert (lay["tp_size"], lay["tp_per_node"]) == (8, 8)
    assert (lay["cp_size"], lay["cp_per_node"]) == (2, 1)
    assert (lay["shard_size"], lay["shard_per_node"]) == (128, 1)
    swapped = ParallelPlan(num_gpus=64, gpus_per_node=8, tp=8,
                           mesh_order=("pp", "dp_replicate", "cp", "tp", "dp_shard"))
    assert group_layout(swapped)["tp_per_node"] == 1
    assert group_layout(swapped)["shard_per_node"] == 8


def test_rack_scale_domains_need_not_be_filled(cat):
    gb200 = resolve_system(cat, cluster="gb200-nvl72")
    assert domain_gpus(gb200, 32) == 32
    assert domain_gpus(gb200, 256) == 64
    assert domain_gpus(gb200, 144) == 72
    h100 = resolve_system(cat, gpu="h100")
    assert domain_gpus(h100, 64) == 8
    for n in (32, 256):
        p = _predict(cat, gpu="gb200", num_gpus=n, tp=4)
        assert p.tokens_per_s > 0 and p.fits


# -- physics ----------------------------------------------------------------------------------
def test_tp_one_equals_pure_fsdp(cat):
    a = _predict(cat, num_gpus=16)
    b = _predict(cat, num_gpus=16, tp=1, pp=1, cp=1, sequence_parallel=False)
    assert a.values == b.values


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_more_tp_never_raises_parameter_memory(cat, tp):
    base = _predict(cat, model="llama3-70b", num_gpus=64, tp=1, sharding="none")
    p = _predict(cat, model="llama3-70b", num_gpus=64, tp=tp, sharding="none")
    assert p.params_bytes <= base.params_bytes * 1.0000001
    assert p.params_bytes == pytest.approx(base.params_bytes / tp, rel=0.02)


def test_tp_over_nvlink_beats_tp_over_the_nic(cat):
    inner = _predict(cat, model="llama3-70b", num_gpus=64, tp=8)
    outer = _predict(cat, model="llama3-70b", num_gpus=64, tp=8,
                     mesh_order=("pp", "dp_replicate", "cp", "tp", "dp_shard"))
    assert inner.values["tp_s"] < outer.values["tp_s"]
    assert inner.tokens_per_s > outer.tokens_per_s


def test_a_plan_that_spans_a_tier_pays_that_tier(cat):
    """The same CP group inside a node and across nodes: only the latter depends on the NIC."""
    kw = dict(model="llama3-8b", num_gpus=16, cp=2, seq_len=32768, recompute="full")
    inside = [_predict(cat, network=n, **kw).values["cp_s"] for n in ("ib-hdr-200", "ib-ndr-400")]
    across = [_predict(cat, network=n, mesh_order=("cp", "pp", "dp_replicate", "dp_shard", "tp"),
                       **kw).values["cp_s"] for n in ("ib-hdr-200", "ib-ndr-400")]
    assert inside[0] == inside[1]
    assert across[0] > across[1] > inside[0]


def test_sequence_parallel_moves_what_tp_moves_and_saves_activations(cat):
    sp = _predict(cat, model="llama3-70b", num_gpus=64, tp=8, recompute="selective")
    no = _predict(cat, model="llama3-70b", num_gpus=64, tp=8, recompute="selective",
                  sequence_parallel=False)
    assert sp.activations_bytes < no.activations_bytes
    # Megatron re-gathers the saved shard in backward: SP moves 1.25x the bytes of TP alone.
    assert sp.values["tp_bytes"] > no.values["tp_bytes"]


def test_tp_overlap_hides_tp_behind_gemms(cat):
    a = _predict(cat, model="llama3-70b", num_gpus=64, tp=8)
    b = _predict(cat, model="llama3-70b", num_gpus=64, tp=8, tp_overlap=True)
    assert b.values["tp_exposed_s"] < a.values["tp_exposed_s"]
    assert b.step_time_s < a.step_time_s
    assert b.values["tp_s"] == a.values["tp_s"]


def test_cp_divides_activations_and_tokens(cat):
    a = _predict(cat, num_gpus=16, seq_len=32768, recompute="selective")
    b = _predict(cat, num_gpus=16, seq_len=32768, recompute="selective", cp=2)
    assert b.activations_bytes == pytest.approx(a.activations_bytes / 2, rel=0.01)
    assert b.values["tokens_per_step"] == a.values["tokens_per_step"] / 2  # dp halves
    ring = _predict(cat, num_gpus=16, seq_len=32768, cp=2).values
    ulysses = _predict(cat, num_gpus=16, seq_len=32768, cp=2, cp_kind="all2all").values
    assert ring["cp_exposed_s"] <= ring["cp_s"]
    assert ulysses["cp_exposed_s"] == ulysses["cp_s"] > 0


# -- pipelines --------------------------------------------------------------------------------
def _pp(cat, pp, gb=256, mb=1, **kw):
    kw.setdefault("sharding", "optimizer")
    return _predict(cat, model="llama3-70b", num_gpus=64, tp=8, pp=pp, mb=mb, gb=gb, **kw)


def test_pp_one_is_the_data_parallel_step(cat):
    assert _pp(cat, 1).values["bubble_s"] == 0.0


def test_bubble_shrinks_with_more_microbatches_and_with_interleaving(cat):
    few, many = _pp(cat, 4, gb=64), _pp(cat, 4, gb=512)
    assert few.values["bubble_s"] / few.step_time_s > many.values["bubble_s"] / many.step_time_s
    plain = _pp(cat, 4, gb=256)
    inter = _pp(cat, 4, gb=256, vpp=2)
    zb = _pp(cat, 4, gb=256, pp_schedule="zb-h1")
    assert inter.values["bubble_s"] < plain.values["bubble_s"]
    assert zb.values["bubble_s"] < plain.values["bubble_s"]
    # 1F1B with m micro-batches and p stages: bubble close to (p-1)/(m+p-1) of the step
    # (the embedding, head and p2p make it slightly larger).
    m, p = 256 // 2, 4  # dp = 64 / (tp 8 x pp 4) = 2
    share = plain.values["bubble_s"] / plain.step_time_s
    assert (p - 1) / (m + p - 1) * 0.8 <= share <= (p - 1) / (m + p - 1) * 1.6


def test_more_stages_less_parameter_memory_and_first_stage_binds(cat):
    one, four = _pp(cat, 1), _pp(cat, 4)
    assert four.params_bytes < one.params_bytes / 3
    st = four.to_dict()["memory"]["stages"]
    assert four.values["peak_bytes"] == max(st["first"], st["last"])
    # The first stage holds pp micro-batches in flight under 1F1B, the last one.
    assert st["first"] > st["last"] or four.logits_bytes > 0


def test_interleaving_needs_whole_rounds_of_microbatches(cat):
    with pytest.raises(ConfigError, match="divisible by pp"):
        _pp(cat, 4, gb=2 * 6, vpp=2)  # dp 2: 6 micro-batches, not whole rounds of 4


def test_uneven_stages(cat):
    even = _pp(cat, 4)
    uneven = _pp(cat, 4, pp_first_layers=18, pp_last_layers=18)
    assert uneven.to_dict()["plan"]["pp_first_layers"] == 18
    assert uneven.step_time_s != even.step_time_s
    with pytest.raises(ConfigError, match=r"does not split over pp\(4\)"):
        _pp(cat, 4, pp_first_layers=19)  # 61 layers left for 3 stages


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "zb-h1"])
def test_pipeline_step_within_bounds(cat, schedule):
    v = _pp(cat, 4, pp_schedule=schedule).values
    assert v["step_lower_bound_s"] <= v["step_time_s"] * (1 + 1e-12)
    assert v["step_time_s"] <= v["step_upper_bound_s"] * (1 + 1e-12)
    assert v["bubble_s"] > 0


def test_sweep_takes_pipeline_lists(cat):
    from fsdpsim.drivers.sweep.grid import build_grid
    from fsdpsim.drivers.sweep.run import run_sweep

    grid = build_grid(cat, {"model": "llama3-70b", "gpu": "h100", "num-gpus": "64",
                            "tp": "8", "pp": "1,2,4", "global-batch": "256",
                            "micro-batch": "1", "recompute": "full", "sharding": "optimizer"})
    frame = run_sweep(grid)
    assert list(frame["plan.pp"]) == [1, 2, 4]
    for _, row in frame.iterrows():
        p = _pp(cat, int(row["plan.pp"]))
        assert row["step_time_s"] == p.step_time_s
        assert row["time.bubble_s"] == p.values["bubble_s"]
