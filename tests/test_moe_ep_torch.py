"""Expert-parallel all-to-all bytes: a real 2- and 4-rank gloo run of a toy MoE layer
(:mod:`fsdpsim.measured.harness.ep_runs`) against the engine's ``comm.ep_bytes``, exactly.

Per rank and MoE layer the engine counts four all-to-alls of ``rows · h`` elements (forward
dispatch and combine, backward their reverses), ``rows = T·k`` dropless or ``E·ceil(T·k/E·cf)``
padded to capacity (:func:`fsdpsim.costs.moe.all_to_all_bytes`): the input tensors of the
``c10d.alltoall_base_`` calls torch issues. With force-balanced routing every rank sends and
receives ``T·k`` rows, so each rank's bytes are the engine's; with random routing the rows a
rank receives vary, and the bytes summed over the ranks are ``world ×`` the engine's.
"""

from __future__ import annotations

import pytest

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # spawned gloo ranks: 10-30 s each run
torch = pytest.importorskip("torch")

from fsdpsim.measured.harness.ep_runs import EpCase, run_all  # noqa: E402
from fsdpsim.measured.harness.fsdp_runs import launch  # noqa: E402

LAUNCH_TIMEOUT_S = 300.0
CASES = (EpCase("balanced"), EpCase("random", routing="random", seed=3),
         EpCase("capacity", routing="random", capacity_factor=1.25, seed=5),
         EpCase("capacity-1", routing="balanced", capacity_factor=1.0))


@pytest.fixture(scope="module")
def runs2():
    return launch(run_all, 2, (CASES,), timeout_s=LAUNCH_TIMEOUT_S)


@pytest.fixture(scope="module")
def runs4():
    return launch(run_all, 4, (CASES,), timeout_s=LAUNCH_TIMEOUT_S)


def toy_spec(case: EpCase) -> ModelSpec:
    """One MoE layer of ``case``'s sizes (the toy's experts are d x d; the all-to-all bytes do
    not depend on the expert width)."""
    return ModelSpec(name="toy-moe", n_layers=1, d_model=case.d_model, n_heads=2,
                     ffn_size=case.d_model, ffn_kind="gelu", vocab_size=64,
                     tied_embeddings=False, position="rotary", max_seq_len=case.tokens,
                     norm="rmsnorm", norm_bias=False, qkv_bias=False, attn_out_bias=False,
                     mlp_bias=False, n_experts=case.n_experts, experts_per_token=case.top_k)


def engine_ep_bytes(case: EpCase, world: int) -> float:
    """The engine's expert all-to-all bytes per GPU for one step of one micro-batch of
    ``case.tokens`` tokens in fp32 (the toy's dtype)."""
    from fsdpsim.drivers.predict import predict
    from fsdpsim.hardware.system import resolve_system

    system = resolve_system(load_catalog(), gpu="a100-sxm4-80gb", gpus_per_node=8)
    plan = ParallelPlan(num_gpus=world, gpus_per_node=8, ep=world)
    training = TrainingConfig(seq_len=case.tokens, micro_batch=1, recompute="none",
                              precision="fp32", moe_capacity_factor=case.capacity_factor)
    return predict(toy_spec(case), system, plan, training).to_dict()["comm"]["ep_bytes"]


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_all_to_all_bytes_equal_torch(request, world, case):
    runs = request.getfixturevalue(f"runs{world}")
    want = engine_ep_bytes(case, world)
    per_rank = [run[case.name]["comm"]["all_to_all"] for run in runs]
    assert all(c["calls"] == 4 for c in per_rank), per_rank  # dispatch, combine, x2 backward
    assert all(run[case.name]["element_bytes"] == 4 for run in runs)
    assert sum(c["bytes"] for c in per_rank) == world * want  # exactly
    balanced = case.routing == "balanced" or case.capacity_factor is not None
    if balanced:  # every rank sends and receives the same rows: each rank is the engine's
        assert all(c["bytes"] == want for c in per_rank), (want, per_rank)
    # nothing else is communicated: no metadata all-to-all, no other collective
    assert all(sum(run[case.name]["comm"][k]["calls"] for k in
                   ("all_gather", "reduce_scatter", "all_reduce", "other")) == 0 for run in runs)


def test_dropless_balanced_equals_capacity_factor_one_in_torch(runs2):
    """Force-balanced dropless routing and capacity factor 1.0 move the same bytes."""
    for run in runs2:
        assert (run["balanced"]["comm"]["all_to_all"]["bytes"]
                == run["capacity-1"]["comm"]["all_to_all"]["bytes"])
