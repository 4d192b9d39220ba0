"""Framework profiles (issue 12 §3): names, and what each changes in the engine."""

from __future__ import annotations

import pytest

from fsdpsim import frameworks
from fsdpsim.catalog import load_catalog
from fsdpsim.errors import ConfigError
from fsdpsim.parallel import ParallelPlan, TrainingConfig
from fsdpsim.predict import predict
from fsdpsim.presets import get_model
from fsdpsim.system import resolve_system

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
