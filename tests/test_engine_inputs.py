"""The engine's door: :func:`fsdpsim.engine.evaluate` and ``memory_breakdown`` take only the
names the typed bundle declares (:class:`fsdpsim.engine.inputs.EngineInputs`); a misspelt
name is a TypeError naming it and the closest known names, never an input silently left at
its default. Every key the builders emit is declared, for every kind of model and plan (the
sweep, search and measurement builders are held to it by their own tests, which evaluate
what they build)."""

from __future__ import annotations

import numpy as np
import pytest

from fsdpsim import engine
from fsdpsim.engine.build import config_inputs
from fsdpsim.engine.inputs import declared_names
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.hardware.system import resolve_system
from fsdpsim.model.presets import get_model
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig

CATALOG = load_catalog(use_env=False)
H100 = resolve_system(CATALOG, gpu="h100")
KNOBS = {"micro_batch": 1.0, "recompute": 2, "grad_accum": 4.0}

#: One configuration per kind of model and plan: (model, plan, training changes).
CASES = {
    "dense, FSDP": ("llama3-8b", ParallelPlan(64, 8, "full"), {}),
    "dense, hybrid 4D (HSDP, TP, interleaved PP, CP), Megatron, FP8": (
        "llama3-70b", ParallelPlan(512, 8, "hybrid", shard_group_size=4, tp=4, pp=4, vpp=2,
                                   cp=2, framework="megatron"),
        {"precision": "fp8", "global_batch": 256}),
    "dense, ZeRO-1 with DeepSpeed's per-parameter collectives": (
        "gpt3-1.3b", ParallelPlan(16, 8, "optimizer", framework="deepspeed-zero3"), {}),
    "q/k-norm": ("qwen3-8b", ParallelPlan(16, 8, "full", tp=2), {}),
    "MoE, expert parallelism": ("mixtral-8x7b", ParallelPlan(64, 8, "full", tp=2, ep=4), {}),
    "MoE with windowed attention": ("gpt-oss-20b", ParallelPlan(32, 8, "full", ep=8), {}),
    "MLA, MoE, MTP, pipelined": ("deepseek-v3", ParallelPlan(1024, 8, "full", pp=8, ep=32),
                                 {"global_batch": 1024}),
}


def _inputs(case: str) -> dict:
    model, plan, changes = CASES[case]
    training = TrainingConfig(**{"seq_len": 4096, **changes})
    return config_inputs(get_model(model), H100, plan, training)


@pytest.mark.parametrize("case", CASES)
def test_every_key_a_builder_emits_is_an_engine_input(case):
    x = _inputs(case)
    assert sorted(set(x) - engine.INPUT_NAMES) == []
    out = engine.evaluate({**x, **KNOBS})  # and the engine takes them
    assert np.all(np.asarray(out["step_time_s"]) > 0)


def test_the_names_are_the_declarations():
    """The accepted names are the typed bundle's: every optional input is declared there too
    (with its type and unit), so one declaration says what a name is."""
    assert set(engine.OPTIONAL_INPUTS) <= declared_names()
    assert engine.INPUT_NAMES == declared_names()
    assert set(KNOBS) <= declared_names()


def test_a_misspelt_input_is_an_error_naming_it_and_the_closest():
    x = {**_inputs("dense, FSDP"), **KNOBS}
    engine.evaluate(x)
    engine.memory_breakdown(x)
    bad = {**x, "micro_bach": 2.0}
    with pytest.raises(TypeError, match=r"not an engine input: 'micro_bach' \(closest: "
                                        r"'micro_batch'"):
        engine.evaluate(bad)
    with pytest.raises(TypeError, match="'micro_bach'"):
        engine.memory_breakdown(bad)


def test_every_unknown_name_is_named_on_every_path():
    """Two unknown names (one with no close match) in a grid of rows: both named, whether the
    rows are evaluated at once or in groups."""
    x = {**_inputs("dense, FSDP"), **KNOBS}
    for rows in (4, engine.GROUP_ROWS):
        bad = {**x, "micro_batch": np.arange(rows) % 4 + 1.0, "seq_lenn": 4096.0, "zzz": 1.0}
        with pytest.raises(TypeError) as info:
            engine.evaluate(bad)
        message = str(info.value)
        assert "'seq_lenn' (closest: 'seq_len'" in message and "'zzz'" in message
        assert "zzz' (closest" not in message


def test_tokens_per_rank_is_derived_once_and_read_by_every_stage():
    """b·s/cp, one rank's tokens of a micro-batch: prepare derives it; the layer widths, the TP
    collectives and MoE routing read that value (a changed value changes what they see)."""
    from fsdpsim import engine
    from fsdpsim.drivers.predict import config_inputs
    from fsdpsim.engine import layers, moe_parts
    from fsdpsim.hardware.catalog import load_catalog
    from fsdpsim.hardware.system import resolve_system
    from fsdpsim.model.presets import get_model
    from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig

    system = resolve_system(load_catalog(use_env=False), gpu="h100")
    plan = ParallelPlan(64, 8, "optimizer", tp=2, cp=4, framework="megatron")
    x = config_inputs(get_model("llama3-8b"), system, plan,
                      TrainingConfig(seq_len=8192, micro_batch=2, recompute="none"))
    g = engine.prepare({**x, "micro_batch": 2.0, "recompute": 0, "grad_accum": 1.0})
    assert g.tokens_per_rank == 2 * 8192 / 4
    assert layers.widths(g).tokens == g.tokens_per_rank
    assert moe_parts.moe_tokens(g) == g.tokens_per_rank / 2
    halved = g.replace(tokens_per_rank=g.tokens_per_rank / 2)
    assert layers.widths(halved).tokens == 2048


def test_a_misspelt_field_inside_the_engine_is_an_error_at_once(monkeypatch):
    """The stages read the prepared inputs as attributes of a read-only object whose fields
    are the declared names (:class:`fsdpsim.engine.inputs.Prepared`): a misspelt read, a
    field never set, a write and an undeclared field each raise an AttributeError naming the
    name, where a mapping's ``get`` would have carried on with a default."""
    from fsdpsim.engine import layers
    from fsdpsim.engine.inputs import FIELDS, Prepared

    x = {**_inputs("dense, FSDP"), **KNOBS}
    g = engine.prepare(x)
    assert isinstance(g, Prepared) and g.tp == 1.0 and g.tokens_per_rank == 4096.0
    with pytest.raises(AttributeError, match="'hbm_bytes_per_sec'"):
        g.hbm_bytes_per_sec
    with pytest.raises(AttributeError, match="'tp'"):
        g.tp = 2.0
    with pytest.raises(AttributeError, match="'tpp'.*closest: 'tp'"):
        Prepared.of({"tpp": 2.0})
    with pytest.raises(AttributeError, match="'seq_len'"):
        Prepared.of({"tp": 2.0}).seq_len  # declared, never set
    assert g.replace(tp=2.0).tp == 2.0 and g.tp == 1.0
    assert set(FIELDS) >= declared_names() and "tokens_per_rank" in FIELDS

    # the stages' results are declared too (fsdpsim.engine.results): a misspelt field of one
    # is an AttributeError naming it, read or written
    from fsdpsim.engine import stages

    layer = stages.layer_costs(g)
    assert layer.lt.block_fwd_s > 0 and not layer.has_moe
    with pytest.raises(AttributeError, match="'block_fwd'"):
        layer.lt.block_fwd
    with pytest.raises(AttributeError, match="'block_fwd'"):
        layer.lt.block_fwd = 1.0
    # and read-only once made: a declared field cannot be set or deleted either
    with pytest.raises(AttributeError, match="read-only.*'block_fwd_s'"):
        layer.lt.block_fwd_s = 1.0
    with pytest.raises(AttributeError, match="read-only.*'block_fwd_s'"):
        del layer.lt.block_fwd_s
    from fsdpsim.engine.results import replace

    changed = replace(layer.lt, block_fwd_s=1.0)
    assert changed.block_fwd_s == 1.0 and layer.lt.block_fwd_s != 1.0
    assert type(changed) is type(layer.lt) and changed.gemm_fwd_s == layer.lt.gemm_fwd_s

    # a stage that misreads a field stops the evaluation, naming it
    rates = layers.rates

    def misspelt(g):
        g.hbm_bytes_per_sec
        return rates(g)

    baseline = engine.evaluate(x)["step_time_s"]
    monkeypatch.setattr(layers, "rates", misspelt)
    with pytest.raises(AttributeError, match="hbm_bytes_per_sec"):
        engine.evaluate(x)
    monkeypatch.setattr(layers, "rates", rates)
    assert engine.evaluate(x)["step_time_s"] == baseline


def test_every_field_the_engine_reads_is_declared():
    """Each ``g.<name>`` in the engine's stages and in the NCCL model is a declared field
    (:data:`fsdpsim.engine.inputs.FIELDS`) or a method of the prepared inputs: a misspelt
    name fails here even on a branch no test evaluates. (The builder's own steps on its
    mapping, inside :func:`fsdpsim.engine.prepare.prepare`, are left out.)"""
    import inspect
    import re

    from fsdpsim.costs import nccl
    from fsdpsim.engine import (collectives, expert_comm, layers, memory, metrics, moe,
                                module_recompute, moe_parts, stages, step)
    from fsdpsim.engine.inputs import FIELDS

    builders = (moe.prepare_layers, moe.attention_pairs, nccl.collapse_constant_library)
    read = set()
    for module in (collectives, expert_comm, layers, memory, metrics, moe, module_recompute,
                   moe_parts, stages, step, nccl):
        source = inspect.getsource(module)
        for builder in builders:
            source = source.replace(inspect.getsource(builder), "")
        read |= set(re.findall(r"(?<![\w.])(?:g|g_e|g_m|self\._g)\.(\w+)", source))
    assert len(read) > 150
    assert sorted(read - set(FIELDS) - {"replace", "values"}) == []


def test_every_result_field_the_engine_reads_is_declared():
    """The engine names each kind of result one way (``lt`` a layer's times, ``tpc`` the
    tensor-parallel collectives, ``m`` stage 3's results, ...): each field read through such
    a name is a field of its class in :mod:`fsdpsim.engine.results`, on every branch."""
    import inspect
    import re

    from fsdpsim.engine import (collectives, expert_comm, layers, memory, metrics, moe,
                                module_recompute, moe_parts, stages, step)
    from fsdpsim.engine import results as res

    kinds = {"r": res.Rates, "w": res.Widths, "on": res.Switches, "lt": res.LayerTimes,
             "lt_d": res.LayerTimes, "layer": res.LayerTimes, "lt_m": res.MoeLayerTimes,
             "rt": res.RootTimes, "tpc": res.TensorParallelComm,
             "cpc": res.ContextParallelComm, "dpc": res.DataParallelComm,
             "dpc_e": res.DataParallelComm, "dpc_m": res.DataParallelComm,
             "whole": res.DataParallelComm, "ep": res.ExpertComm, "f": res.FsdpFlags,
             "ro": res.Routing, "mid": res.StagePhases, "ph": res.StagePhases,
             "only": res.StagePhases, "c": res.LayerCosts, "m": res.Communication,
             "st": res.StepTimes, "tt": res.Totals, "tb": res.TensorBytes,
             "kind": res.LayerKind, "co": res.NcclGroups, "co_e": res.NcclGroups}
    unknown, seen = [], 0
    for module in (collectives, expert_comm, layers, memory, metrics, moe, module_recompute,
                   moe_parts, stages, step):
        source = inspect.getsource(module)
        for name, kind in kinds.items():
            fields = set(res.fields(kind))
            read = set(re.findall(rf"(?<![\w.]){name}\.(\w+)", source))
            seen += len(read)
            unknown += [(module.__name__, name, field) for field in read - fields]
    assert seen > 150 and unknown == []


def test_the_stages_read_no_string_keyed_inputs():
    """Past :func:`fsdpsim.engine.prepare.prepare` the engine reads its inputs as attributes
    only: no module of the stages subscripts the prepared inputs with a name."""
    import re
    from pathlib import Path

    import fsdpsim.engine as package

    stages = ("collectives", "expert_comm", "layers", "memory", "metrics", "module_recompute",
              "moe_parts", "stages", "step")
    pattern = re.compile(r'\bg(_e|_m)?\[f?"')
    for name in stages:
        source = (Path(package.__file__).parent / f"{name}.py").read_text()
        assert not pattern.search(source), name
