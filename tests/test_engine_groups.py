"""Grouped evaluation (fsdpsim.engine.groups): a large input evaluated by structure, with its
one-value columns passed as numbers, gives every row the numbers of the rows evaluated
together with masks (bit for bit) and of each row evaluated on its own."""

from __future__ import annotations

import numpy as np
import pytest

from fsdpsim import engine
from fsdpsim.drivers.predict import model_inputs, plan_inputs, system_inputs, training_inputs
from fsdpsim.engine import groups
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.hardware.system import resolve_system
from fsdpsim.model.presets import get_model
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig


def _rows(n: int, models=("llama3-8b", "mixtral-8x7b"),
          layouts=((1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 2, 2), (1, 4, 1)), seed: int = 3
          ) -> dict[str, np.ndarray]:
    """``n`` configurations mixing a dense and an MoE model, pipelined or not, tensor and
    context parallel or not, both shardings, every recompute mode, micro-batches 1-4 (drawn
    with ``seed``)."""
    system = resolve_system(load_catalog(use_env=False), gpu="h100")
    base = []
    for name in models:
        spec = get_model(name)
        for tp, pp, cp in layouts:
            for sharding in ("full", "optimizer"):
                plan = ParallelPlan(num_gpus=64, gpus_per_node=8, sharding=sharding, tp=tp,
                                    pp=pp, cp=cp)
                x = {**model_inputs(spec, plan.shard_group, tp=plan.tp),
                     **system_inputs(system, "bf16"), **plan_inputs(plan, spec.n_layers),
                     **training_inputs(TrainingConfig(seq_len=1))}
                base.append({k: float(v) for k, v in x.items()})
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(base), n)
    x = {k: np.array([r[k] for r in base])[pick] for k in base[0]}
    x["seq_len"] = rng.choice([1024.0, 4096.0], n)
    x["micro_batch"] = rng.integers(1, 5, n).astype(float)
    x["recompute"] = rng.integers(0, 3, n).astype(float)
    x["grad_accum"] = rng.integers(1, 4, n).astype(float)
    return x


@pytest.fixture
def small_groups(monkeypatch):
    """Grouping from 64 rows on, groups of 8 rows and more (the defaults need thousands)."""
    monkeypatch.setattr(groups, "MIN_GROUP_ROWS", 8)
    monkeypatch.setattr(engine, "GROUP_ROWS", 64)


@pytest.mark.parametrize("ceilings", [0.0, 1.0])
def test_grouped_rows_equal_masked_rows_bit_for_bit(small_groups, ceilings):
    x = {**_rows(160), "ceilings": ceilings}
    assert len(groups.split(x, 160)) >= 3  # several structures: the test exercises the split
    grouped, masked = engine.evaluate(x), engine._evaluate(x)
    assert set(grouped) == set(masked)
    for key, value in grouped.items():
        want = np.broadcast_to(masked[key], value.shape)
        assert value.dtype == want.dtype, key
        assert value.tobytes() == np.ascontiguousarray(want).tobytes(), key


def test_blocks_of_a_large_input_equal_masked_rows_bit_for_bit(small_groups, monkeypatch):
    """An input of several blocks (the last one too small to group) gives the masked numbers
    and dtypes in every row; the outputs of one dtype are rows of one array."""
    monkeypatch.setattr(engine, "BLOCK_ROWS", 96)
    x = {**_rows(200), "ceilings": 1.0}
    blocked, masked = engine.evaluate(x), engine._evaluate(x)
    assert set(blocked) == set(masked)
    for key, value in blocked.items():
        want = np.broadcast_to(masked[key], value.shape)
        assert value.dtype == want.dtype and value.shape == (200,), key
        assert value.tobytes() == np.ascontiguousarray(want).tobytes(), key
    assert blocked["fits"].dtype == bool
    one = blocked["step_time_s"].base
    assert one is not None and blocked["peak_bytes"].base is one


@pytest.mark.parametrize("rows, block", [(1, None), (40, None), (160, None), (200, 96)])
def test_times_without_the_memory_stage_are_the_same_numbers(small_groups, monkeypatch, rows,
                                                             block):
    """``evaluate(x, memory=False)`` (the sensitivity post-pass's variants) gives every output
    but the memory stage's, bit for bit those of the whole evaluation: one row, one group,
    several groups, several blocks."""
    if block is not None:
        monkeypatch.setattr(engine, "BLOCK_ROWS", block)
    x = {**_rows(rows), "ceilings": 0.0}
    if rows == 1:
        x = {k: (v[0] if np.ndim(v) else v) for k, v in x.items()}
    whole, times = engine.evaluate(x), engine.evaluate(x, memory=False)
    memory_keys = set(engine.memory_breakdown(x, ceilings=False))
    assert {"peak_bytes", "fits"} <= memory_keys
    assert set(times) == set(whole) - memory_keys
    for key, value in times.items():
        assert value.dtype == whole[key].dtype, key
        assert value.tobytes() == whole[key].tobytes(), key


@pytest.mark.parametrize("block", [None, 96])
def test_rows_ordered_by_structure_equal_masked_rows_bit_for_bit(small_groups, monkeypatch,
                                                                  block):
    """Rows that come ordered by structure (each group one run of rows) are evaluated from
    views and written into place (no gathers): the masked numbers and dtypes in every row, one
    block or several."""
    if block is not None:
        monkeypatch.setattr(engine, "BLOCK_ROWS", block)
    x = {**_rows(200), "ceilings": 1.0}
    order = np.argsort(groups.structure(x, 200), kind="stable")
    x = {k: (v[order] if np.ndim(v) else v) for k, v in x.items()}
    parts = groups.split(x, 200)
    assert len(parts) >= 3 and all(engine._contiguous(p) for p in parts)
    calls = []
    real = engine._evaluate_slices
    monkeypatch.setattr(engine, "_evaluate_slices",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    ordered, masked = engine.evaluate(x), engine._evaluate(x)
    assert calls  # the path without gathers ran
    assert set(ordered) == set(masked)
    for key, value in ordered.items():
        want = np.broadcast_to(masked[key], value.shape)
        assert value.dtype == want.dtype and value.shape == (200,), key
        assert value.tobytes() == np.ascontiguousarray(want).tobytes(), key


def test_grouped_rows_equal_each_row_alone(small_groups):
    x = {**_rows(96), "ceilings": 1.0}
    grouped = engine.evaluate(x)
    for i in range(0, 96, 7):
        alone = engine.evaluate({k: (v[i] if np.ndim(v) else v) for k, v in x.items()})
        for key in ("step_time_s", "tokens_per_s", "mfu", "peak_bytes", "max_seq_len",
                    "bubble_s", "ep_s", "comm_s"):
            np.testing.assert_allclose(grouped[key][i], alone[key], rtol=1e-12, err_msg=key)


def test_constants_turn_one_value_columns_into_that_value():
    x = {"a": np.full(5, 2.0), "b": np.array([1.0, 2.0, 1.0, 1.0, 1.0]),
         "c": np.full(5, np.nan), "d": np.array([0.0, -0.0, 0.0, 0.0, 0.0]), "e": 3.0,
         "f": np.full(5, 2, dtype=np.int64)}
    out = groups.constants(x)
    assert out["a"] == 2.0 and np.ndim(out["a"]) == 0
    assert out["b"] is x["b"] and out["d"] is x["d"]  # -0.0 is not 0.0 bit for bit
    assert np.isnan(out["c"]) and np.ndim(out["c"]) == 0
    assert out["e"] == 3.0 and out["f"] == 2 and out["f"].dtype == np.int64


def test_one_value_compares_every_entry_bit_for_bit():
    """An entry away from the probed ones (first, last, middle, quarter) that differs only in
    its bits (-0.0 beside 0.0, another NaN) or by one keeps the column an array."""
    for dtype, same, odd in ((float, 0.0, -0.0), (float, np.nan, -np.nan),
                             (float, 1.5, np.nextafter(1.5, 2.0)), (np.int64, 7, 8),
                             (bool, True, False)):
        column = np.full(9, same, dtype=dtype)
        assert np.ndim(groups.one_value(column)) == 0
        column[3] = odd
        assert groups.one_value(column) is column, (dtype, odd)


def test_twins_pairs_only_bit_identical_columns():
    """A column is paired with an earlier one only when every entry has the same bits: one
    entry 0.0 against -0.0 (equal as floats, not as bits), or the probes equal but one entry
    apart, keeps it a column of its own."""
    rng = np.random.default_rng(5)
    tp = rng.integers(1, 5, 1000).astype(float)
    zeros = np.zeros(1000)
    signed = zeros.copy()
    signed[7] = -0.0
    apart = tp.copy()
    apart[11] += 1.0
    twins = groups.Twins()
    assert twins.twin("tp", tp) is None
    assert twins.twin("tp_size", tp.copy()) == "tp"
    assert twins.twin("zeros", zeros) is None
    assert twins.twin("signed", signed) is None
    assert twins.twin("apart", apart) is None
    assert twins.twin("etp", tp.copy()) == "tp"
    assert twins.twin("signed_again", signed.copy()) == "signed"


def test_grouped_outputs_are_arrays_of_their_own(small_groups):
    """Outputs of equal values (tp_s and tp_exposed_s without TP overlap) are stored once
    and copied: no two outputs of a grouped evaluation share memory, and each is writeable."""
    x = {**_rows(160), "ceilings": 0.0}
    out = engine.evaluate(x)
    assert out["tp_exposed_s"].tobytes() == out["tp_s"].tobytes()
    arrays = list(out.values())
    for i, a in enumerate(arrays):
        assert a.flags.writeable
        for b in arrays[i + 1:]:
            assert not np.shares_memory(a, b)


def test_outputs_of_one_call_are_arrays_of_their_own():
    """Without grouping (one call on fewer rows than a group needs) no two outputs share
    memory either (tp_s and tp_exposed_s are one computation without TP overlap)."""
    x = {**_rows(160), "ceilings": 0.0}
    out = engine.evaluate(x)
    arrays = [v for v in out.values() if isinstance(v, np.ndarray)]
    for i, a in enumerate(arrays):
        for b in arrays[i + 1:]:
            assert not np.shares_memory(a, b)


@pytest.mark.parametrize("block, ordered", [(None, False), (96, False), (96, True)])
def test_an_output_some_groups_lack_is_nan_on_their_rows(small_groups, monkeypatch, block,
                                                         ordered):
    """Kimi K2's 61 layers on 4 stages give the middle stages more layers than the first: the
    pipelined rows have a middle stage's peak, the unpipelined ones none. Their rows hold NaN,
    as a masked evaluation gives them, not whatever memory the column was made in (here
    filled with a bit pattern beforehand): in a group that lacks it and (``ordered``: the
    unpipelined rows first) in a whole block that lacks it, before a block that has it."""
    if block is not None:
        monkeypatch.setattr(engine, "BLOCK_ROWS", block)
    x = {**_rows(200, models=("kimi-k2",), layouts=((1, 1, 1), (1, 4, 1))), "ceilings": 0.0}
    if ordered:
        order = np.argsort(x["pp"], kind="stable")
        x = {k: (v[order] if np.ndim(v) else v) for k, v in x.items()}
        assert (x["pp"][:block] == 1).all()

    class DirtyNumpy:  # numpy, but the engine's new columns hold bits already
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def empty(shape, dtype=float):
            arr = np.empty(shape, dtype)
            arr.view(np.uint8).fill(0x3F)
            return arr

    monkeypatch.setattr(engine, "np", DirtyNumpy())
    grouped, masked = engine.evaluate(x), engine._evaluate(x)
    middle = grouped["peak_bytes_mid_stage"]
    piped = x["pp"] > 1
    assert piped.any() and not piped.all()
    assert np.isnan(middle[~piped]).all() and (middle[piped] > 0).all()
    assert middle.tobytes() == masked["peak_bytes_mid_stage"].tobytes()


def test_blocks_grow_with_the_structures_an_input_mixes(monkeypatch):
    """Two structures keep blocks of BLOCK_ROWS; four (layered or not, pipelined or not) give
    blocks of twice that, so each group keeps about half a block; the numbers are the same."""
    monkeypatch.setattr(engine, "BLOCK_ROWS", 64)
    monkeypatch.setattr(groups, "MIN_GROUP_ROWS", 8)
    monkeypatch.setattr(engine, "GROUP_ROWS", 64)
    two = {**_rows(400, models=("llama3-8b",)), "ceilings": 0.0}
    four = {**_rows(400), "ceilings": 0.0}
    assert engine._block_rows(two, 400) == 64
    assert engine._block_rows(four, 400) == 128
    blocked = engine.evaluate(four)
    monkeypatch.setattr(engine, "_block_rows", lambda flat, n: 64)
    fixed = engine.evaluate(four)
    for key, value in blocked.items():
        assert value.tobytes() == fixed[key].tobytes(), key


@pytest.mark.parametrize("ceilings", [0.0, 1.0])
def test_a_middle_stage_evaluated_on_its_heavier_rows_alone_gives_the_same_numbers(
        small_groups, monkeypatch, ceilings):
    """Kimi K2 on 2 stages (31/30 layers: no heavier middle stage) and on 4 (15/16/15/15): the
    middle stage's memory is evaluated on the 4-stage rows alone, every output bit for bit what
    evaluating it on all rows gives."""
    from fsdpsim.engine import memory

    monkeypatch.setattr(memory, "_SUBSET_MIN_ROWS", 8)
    x = {**_rows(240, models=("kimi-k2",), layouts=((1, 2, 1), (1, 4, 1), (2, 2, 1))),
         "ceilings": ceilings}
    calls = []
    real = memory._on_rows
    monkeypatch.setattr(memory, "_on_rows", lambda mask, *a: calls.append(
        np.count_nonzero(mask) / mask.size) or real(mask, *a))
    subset = engine.evaluate(x)
    assert calls and 0 < min(calls) <= memory.SUBSET_SHARE
    monkeypatch.setattr(memory, "SUBSET_SHARE", -1.0)
    whole = engine.evaluate(x)
    for key, value in whole.items():
        assert value.dtype == subset[key].dtype, key
        assert value.tobytes() == subset[key].tobytes(), key
