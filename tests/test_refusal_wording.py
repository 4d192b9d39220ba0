"""A framework's refusals are worded once (fsdpsim.plan.frameworks): the torchtitan and
Megatron-LM emitters and predict's note say the same sentence for each fact, and no other module
words it again."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT, run
from fsdpsim.drivers.predict import plan_notes
from fsdpsim.drivers.search.export import CANNOT, megatron_args, torchtitan_toml
from fsdpsim.drivers.search.results import Choice
from fsdpsim.model.presets import get_model
from fsdpsim.plan import frameworks
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig

SPEC = get_model("llama3-70b")

#: (framework, plan settings, what the refusal names): one case per refusal the emitters make.
CASES = [
    ("fsdp2", {"sharding": "optimizer", "tp": 8}, "ZeRO-1"),
    ("fsdp2", {"sharding": "grad_op", "tp": 8}, "ZeRO-2"),
    ("fsdp2", {"tp": 8, "pp": 2, "pp_schedule": "zb-h1"}, "pipeline schedule zb-h1"),
    ("fsdp2", {"tp": 8, "sequence_parallel": False}, "TP without sequence parallelism"),
    ("fsdp2", {"tp": 4, "cp": 2, "cp_kind": "all2all"}, "all-to-all (Ulysses)"),
    ("fsdp2", {"tp": 2, "ep": 8, "etp": 2, "ep_overlap": True}, "expert all-to-alls"),
    ("fsdp2", {"tp": 8, "pp": 2, "mesh_order": ("pp", "dp_replicate", "dp_shard", "tp", "cp")},
     "mesh order"),
    ("fsdp2", {"sharding": "none", "tp": 8, "cp": 2}, "DDP with context parallelism"),
    ("megatron", {"tp": 8, "pp": 2, "pp_schedule": "gpipe"}, "pipeline schedule gpipe"),
    ("megatron", {"tp": 8, "pp": 2, "pp_schedule": "zb-h1"}, "pipeline schedule zb-h1"),
    ("megatron", {"tp": 8, "pp": 2, "mesh_order": ("pp", "dp_replicate", "dp_shard", "tp",
                                                   "cp")}, "mesh order"),
    ("megatron", {"tp": 8, "sequence_parallel": False, "tp_overlap": True},
     "TP overlap without sequence parallelism"),
]
EMITTERS = {"fsdp2": torchtitan_toml, "megatron": megatron_args}


def _plan(framework: str, settings: dict) -> ParallelPlan:
    return ParallelPlan(num_gpus=64, gpus_per_node=8, framework=framework, **settings)


def _unwrapped(text: str) -> str:
    """Comment lines joined back into sentences (the emitters wrap them at 100 columns)."""
    return " ".join(line.lstrip("#").strip() for line in text.splitlines())


@pytest.mark.parametrize("framework,settings,fact", CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_emitter_and_predict_say_the_same_refusal(framework, settings, fact):
    plan = _plan(framework, settings)
    reasons = frameworks.unsupported(framework, plan)
    assert any(r.startswith(fact) for r in reasons), reasons
    choice = Choice(plan=plan, micro_batch=1, grad_accum=8, recompute="none",
                    recompute_layers=None, tokens_per_s=1.0, peak_bytes=1.0, score=1.0,
                    layers_per_stage=SPEC.n_layers // plan.pp, n_layers=SPEC.n_layers)
    training = TrainingConfig(seq_len=4096, global_batch=choice.global_batch)
    emitted = EMITTERS[framework](choice, training)
    assert CANNOT in emitted.splitlines()[0]
    assert all(line.startswith("#") for line in emitted.splitlines())
    note = " ".join(plan_notes(SPEC, plan))
    for reason in reasons:
        assert reason in _unwrapped(emitted), (reason, emitted)
        assert reason in note, (reason, note)


def _string_constants(path: Path) -> list[str]:
    """Every string literal of a module, implicit concatenations joined (as ``ast`` reads
    them), f-strings' literal parts included."""
    return [node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_each_refusal_is_worded_in_one_module():
    """Each framework-specific reason (its first 20 characters) is a string of
    fsdpsim/plan/frameworks.py and of no other module."""
    modules = {path: _string_constants(path) for path in (ROOT / "fsdpsim").rglob("*.py")}
    for why in frameworks._WHY_NOT.values():
        mark = why[:20]
        holders = [p.relative_to(ROOT).as_posix() for p, strings in modules.items()
                   if any(mark in s for s in strings)]
        assert holders == ["fsdpsim/plan/frameworks.py"], (why, holders)


def test_cli_emit_and_predict_note_share_the_sentence(capsys):
    """Through the commands: ``search --emit megatron`` of a plan Megatron-LM cannot run says
    the reason ``predict --framework megatron`` notes for it; the emitter's exit is unchanged
    (comment lines on stdout, status 0)."""
    plan = _plan("megatron", {"tp": 8, "pp": 2, "pp_schedule": "gpipe"})
    (reason,) = frameworks.unsupported("megatron", plan)
    rc, out, _ = run(capsys, "search", "--model", "llama3-8b", "--num-gpus", "64",
                     "--framework", "megatron", "--fix", "tp=8,pp=2,pp_schedule=gpipe",
                     "--emit", "megatron")
    assert rc == 0 and CANNOT in out and reason in _unwrapped(out), out
    rc, out, _ = run(capsys, "predict", "--model", "llama3-8b", "--num-gpus", "64",
                     "--framework", "megatron", "--tp", "8", "--pp", "2",
                     "--pp-schedule", "gpipe")
    assert rc == 0 and reason in " ".join(out.split()), out
