"""Fabric effects as data: decay with nodes, pods of an oversubscribed fabric,
and the job's placement."""

from __future__ import annotations

import dataclasses

import pytest

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.costs import nccl
from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.layout import pod_layout
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import predict
from fsdpsim.model.presets import get_model
from fsdpsim.hardware.system import FRAGMENTED_FACTOR, resolve_system

CATALOG = load_catalog(use_env=False)


def test_pod_factor():
    # a group inside one pod, or one so large that its few crossings fit the uplinks: nothing lost
    assert float(nccl.pod_factor(128, 128, 8, 7.0)) == 1.0
    assert float(nccl.pod_factor(16384, 3072, 8, 7.0)) == 1.0
    # 64 members per pod, 8 per node, 1:7 uplinks: 64 / (2 * 7 * 8) of the bandwidth is left
    assert float(nccl.pod_factor(4096, 64, 8, 7.0)) == pytest.approx(64 / 112)
    assert float(nccl.pod_factor(4096, 64, 8, 1.0)) == 1.0  # a non-blocking fabric


def test_llama3_layout_keeps_the_data_parallel_group_inside_a_pod():
    """TP 8 innermost, then CP 2, then DP 64: the DP group spans 1,024 consecutive GPUs, inside
    one 3,072-GPU pod; only the pipeline group (outermost) crosses pods."""
    plan = ParallelPlan(16384, 8, "optimizer", tp=8, cp=2, pp=16)
    pods = pod_layout(plan, 3072)
    assert pods["dp_world_per_pod"] == pods["shard_per_pod"] == 64 * 2  # dp x cp
    assert pods["pp_per_pod"] == 3  # 16 stages, 1,024 GPUs apart
    assert pod_layout(plan, None)["pp_per_pod"] == 16


def _step(placement: str, gpus: int = 256):
    system = resolve_system(CATALOG, cluster="llama3-roce", placement=placement)
    return predict(get_model("llama3-8b"), system, ParallelPlan(gpus, 8, "full"),
                   TrainingConfig(seq_len=2048, micro_batch=1))


def test_fragmented_placement_is_slower_and_less_certain():
    packed, fragmented = _step("packed"), _step("fragmented")
    assert fragmented.tokens_per_s_per_gpu < packed.tokens_per_s_per_gpu
    assert fragmented.interval["network_uncertainty"] > packed.interval["network_uncertainty"]
    assert "fragmented placement" in fragmented.system
    assert FRAGMENTED_FACTOR < 1


def test_placement_is_checked():
    with pytest.raises(ConfigError, match="accepted: packed, fragmented"):
        resolve_system(CATALOG, gpu="h100", placement="random")


def test_a_group_crossing_oversubscribed_pods_pays_for_it():
    """Same plan and hardware, with 1:7 uplinks above 3,072-GPU pods and above 64-GPU pods:
    the FSDP shard group (dp 64 x cp 8 = 512 members, one per node: TP innermost) has 8
    members in a 64-GPU pod; the 8 such groups of a pod need 2 x 8 NIC-rates of uplink and
    get 64 / 7 (pod_factor 8 / 14)."""
    spec = get_model("llama3-8b")
    training = TrainingConfig(seq_len=16384, micro_batch=1)
    plan = ParallelPlan(4096, 8, "full", tp=8, cp=8)
    base = resolve_system(CATALOG, cluster="llama3-ib")
    flat = predict(spec, base, plan, training)
    crossing = predict(spec, dataclasses.replace(base, pod_gpus=64), plan, training)
    assert crossing.step_time_s > flat.step_time_s
