"""The distinct layers a process computed, looked up in later evaluations (fsdpsim.engine.memo):
the same numbers as computing them, bit for bit; a row is served only where every field the
stage read has its bits, and only in the form the stage gives the group."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from fsdpsim import engine
from fsdpsim.engine import distinct, groups, memo, stages
from fsdpsim.costs.compute import any_of
from fsdpsim.engine.inputs import Prepared
from fsdpsim.engine.results import Rates, Switches

from tests.test_engine_groups import _rows


@pytest.fixture
def fresh(monkeypatch):
    """Groups and distinct rows from a few hundred rows on; the fields read and the memo anew."""
    monkeypatch.setattr(groups, "MIN_GROUP_ROWS", 8)
    monkeypatch.setattr(engine, "GROUP_ROWS", 64)
    monkeypatch.setattr(distinct, "MIN_ROWS", 8)
    monkeypatch.setattr(distinct, "MAX_DISTINCT_SHARE", 1.0)
    monkeypatch.setattr(distinct, "_READS", {})
    monkeypatch.setattr(memo, "_TABLES", {})
    monkeypatch.setattr(memo, "_SEEN", {})


def _counted(monkeypatch):
    """The rows the layer stage is evaluated on, call by call."""
    rows = []
    real = stages.layer_costs

    @functools.wraps(real)
    def layer_costs(g):
        rows.append(int(np.size(g.seq_len)))
        return real(g)

    monkeypatch.setattr(stages, "layer_costs", layer_costs)
    return rows


def _same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for key, value in a.items():
        assert value.dtype == b[key].dtype, key
        assert value.tobytes() == b[key].tobytes(), key


def _block(n, seed, models=("mixtral-8x7b",), layouts=((1, 1, 1), (2, 2, 1), (4, 1, 2))):
    return {**_rows(n, seed=seed, models=models, layouts=layouts), "ceilings": 1.0}


def test_a_later_block_is_served_from_the_memo_with_the_numbers_of_computing_it(
        fresh, monkeypatch):
    """Two blocks of one grid (different rows, the same layers): the second computes no layer
    and gives every output the engine gives without the memo."""
    first, second = _block(600, seed=1), _block(600, seed=2)
    engine.evaluate(first)
    assert not memo._TABLES  # a key seen once: its rows not kept (a post-pass variant's)
    engine.evaluate(first)
    assert memo._TABLES  # seen again: kept
    rows = _counted(monkeypatch)
    served = engine.evaluate(second)
    assert rows == []  # every distinct layer held: none computed
    monkeypatch.setattr(memo, "MAX_ROWS", 0)
    _same(served, engine.evaluate(second))
    assert rows  # without the memo, computed


def test_new_layers_are_computed_and_the_held_ones_served(fresh, monkeypatch):
    """A block with some layers the memo lacks (sequence lengths the first had not) computes
    only those, and its numbers are the engine's without the memo."""
    first = _block(600, seed=1)
    second = _block(600, seed=2)
    second["seq_len"] = np.where(np.arange(600) % 3 == 0, 3072.0, second["seq_len"])
    engine.evaluate(first)
    engine.evaluate(first)
    rows = _counted(monkeypatch)
    served = engine.evaluate(second)
    new_only = list(rows)
    rows.clear()
    monkeypatch.setattr(memo, "MAX_ROWS", 0)
    _same(served, engine.evaluate(second))
    assert new_only and max(new_only) < max(rows)  # the new layers only, not every one


def test_a_field_of_one_value_that_differs_is_not_served(fresh, monkeypatch):
    """The same rows on a GPU of another peak (a field of one value in the group): its layers
    are computed, not served (the table's key holds the exact bits of such fields)."""
    block = _block(600, seed=1, models=("llama3-8b",))
    engine.evaluate(block)
    engine.evaluate(block)
    faster = {**block, "peak_flops_per_s": block["peak_flops_per_s"] * 1.25}
    rows = _counted(monkeypatch)
    served = engine.evaluate(faster)
    assert rows
    monkeypatch.setattr(memo, "MAX_ROWS", 0)
    _same(served, engine.evaluate(faster))


def test_rows_are_served_only_to_a_group_of_the_same_flags(fresh):
    """A stage whose form depends on a branch the group takes as a whole (here: some row with
    cp > 1, a field the stage itself does not read): rows computed in a group without it are
    not served to a group with it, though every field the stage read matches."""
    calls = []

    def stage(g):
        calls.append(np.size(g.tp))
        t = g.tp * g.seq_len
        return Rates(clocked_peak=t, matmul=t, hbm=t, link=t, nic=np.float64(1.0))

    def flags(g):
        return (bool(any_of(g.cp > 1)),)

    rng = np.random.default_rng(5)
    n = 400
    base = {"tp": rng.choice([1.0, 2.0, 4.0], n), "seq_len": rng.choice([1024.0, 2048.0], n),
            "pp": 1.0}
    without = Prepared.of({**base, "cp": np.where(np.arange(n) < 2, 1.0, 1.0)})
    distinct.evaluate(stage, without, n, flags=flags)
    distinct.evaluate(stage, without, n, flags=flags)  # seen twice: kept
    assert calls
    calls.clear()
    distinct.evaluate(stage, without, n, flags=flags)
    assert not calls  # the same group again: served
    with_cp = Prepared.of({**base, "cp": np.where(np.arange(n) < 2, 2.0, 1.0)})
    distinct.evaluate(stage, with_cp, n, flags=flags)
    assert calls  # another form: computed


def test_a_table_finds_rows_by_their_bits_not_their_hash():
    """Two rows of one hash whose fields differ: the table holds one, the other is a miss."""
    table = memo.Table(memo.flatten((np.zeros(1),), 1)[0])
    hashes = np.array([7], dtype=np.uint64)
    table.add(hashes, [np.array([1], dtype=np.uint64)], [np.array([2.5])])
    at = table.find(np.array([7, 7, 8], dtype=np.uint64),
                    [np.array([1, 2, 1], dtype=np.uint64)])
    assert at.tolist() == [0, -1, -1]


def test_flatten_keeps_numbers_flags_and_shared_arrays():
    shared = np.arange(3.0)
    result = Switches(flash=True, swiglu=np.float64(0.0), rotary=shared, dropout=shared,
                      eager=np.array([1, 0, 1]))
    skeleton, leaves = memo.flatten(result, 3)
    assert len(leaves) == 2  # the shared array once
    back = memo.unflatten(skeleton, leaves)
    assert back.rotary is back.dropout and back.flash is True
    assert type(back.swiglu) is np.float64
    # -0.0 is another number than 0.0; NaNs compare by their bits
    assert memo.flatten(Rates(0.0, 1.0, 1.0, 1.0, 1.0), 1)[0] != \
        memo.flatten(Rates(-0.0, 1.0, 1.0, 1.0, 1.0), 1)[0]
    assert memo.flatten((np.nan,), 1)[0] == memo.flatten((np.nan,), 1)[0]
    with pytest.raises(memo.NotKept):
        memo.flatten((np.zeros((3, 2)),), 3)


def test_conform_fills_numbers_into_arrays_and_refuses_other_forms():
    """Rows that evaluated to a number where the table has an array: the number on each row;
    another flag, another number or two values where the table shares one array: refused."""
    shared = np.arange(4.0)
    skeleton = memo.flatten(Switches(True, shared, shared, np.zeros(4), 1.0), 4)[0]
    leaves = memo.conform(skeleton, Switches(True, 2.0, 2.0, np.ones(2), 1.0), 2)
    assert [v.tolist() for v in leaves] == [[2.0, 2.0], [1.0, 1.0]]
    assert memo.conform(skeleton, Switches(False, 2.0, 2.0, np.ones(2), 1.0), 2) is None
    assert memo.conform(skeleton, Switches(True, 2.0, 2.0, np.ones(2), 0.5), 2) is None
    assert memo.conform(skeleton, Switches(True, 2.0, 3.0, np.ones(2), 1.0), 2) is None


def test_the_tables_keep_at_most_their_bytes(fresh, monkeypatch):
    """Past MAX_BYTES the other tables are dropped (a long study's memory stays bounded)."""
    monkeypatch.setattr(memo, "MAX_BYTES", 1)
    for _ in range(2):
        engine.evaluate(_block(600, seed=1))
        engine.evaluate({**_block(600, seed=1), "peak_flops_per_s": 1e15})
    assert sum(len(tables) for tables in memo._TABLES.values()) <= 1


def _keyed(n: int, distinct_rows: int, seed: int) -> Prepared:
    """``n`` rows of ``distinct_rows`` distinct (tp, seq_len) pairs."""
    rng = np.random.default_rng(seed)
    pick = rng.permutation(np.arange(n) % distinct_rows)
    return Prepared.of({"tp": 1.0 + (pick % 7), "seq_len": 1024.0 * (1 + pick // 7),
                        "cp": np.ones(n), "pp": 1.0})


def _layer_like(calls):
    def stage(g):
        calls.append(int(np.size(g.tp)))
        t = g.tp * g.seq_len
        return Rates(clocked_peak=t, matmul=2.0 * t, hbm=t + 1.0, link=t, nic=np.float64(1.0))
    return stage


def test_a_key_seen_before_looks_for_more_distinct_rows_then_serves_them(monkeypatch):
    """Rows 30 % distinct (above MAX_DISTINCT_SHARE, below MEMO_SHARE): the first group is
    computed whole, the second on its distinct rows, kept; the third looks every row up."""
    monkeypatch.setattr(distinct, "MIN_ROWS", 8)
    monkeypatch.setattr(distinct, "_READS", {})
    monkeypatch.setattr(memo, "_TABLES", {})
    monkeypatch.setattr(memo, "_SEEN", {})
    calls = []
    stage = _layer_like(calls)
    flags = lambda g: ()  # noqa: E731
    for seed, rows in ((1, 400), (2, 120), (3, None)):
        g = _keyed(400, 120, seed)
        calls.clear()
        got = distinct.evaluate(stage, g, 400, flags=flags)
        assert calls[-1:] == ([rows] if rows else []), seed
        want = stage(g)
        for field in Rates._fields:
            assert np.asarray(getattr(got, field)).tobytes() == \
                np.asarray(getattr(want, field)).tobytes()


def test_a_key_of_too_many_distinct_rows_is_refused(monkeypatch):
    """Rows 60 % distinct: looked for once more on the second group, then no more (a sample
    tells them at once, as for a key never seen)."""
    monkeypatch.setattr(distinct, "MIN_ROWS", 8)
    monkeypatch.setattr(distinct, "_READS", {})
    monkeypatch.setattr(memo, "_TABLES", {})
    monkeypatch.setattr(memo, "_SEEN", {})
    samples = []
    real = distinct._distinct
    monkeypatch.setattr(distinct, "_distinct",
                        lambda *a, **k: samples.append(k.get("sample", True)) or real(*a, **k))
    calls = []
    stage = _layer_like(calls)
    for seed in (1, 2, 3):
        calls.clear()
        samples.clear()
        distinct.evaluate(stage, _keyed(400, 240, seed), 400, flags=lambda g: ())
        assert calls[-1] == 400  # computed whole (after a first call that learns the fields)
        assert samples[-1] is (seed != 2)
    assert not memo._TABLES and False in memo._SEEN.values()
