"""A stage evaluated on a group's distinct rows (fsdpsim.engine.distinct) gives every row the
numbers of the stage evaluated on all rows, bit for bit, whatever fields it reads."""

from __future__ import annotations

import numpy as np
import pytest

from fsdpsim import engine
from fsdpsim.costs.compute import any_of
from fsdpsim.engine import distinct, groups, memo
from fsdpsim.engine.inputs import Prepared
from fsdpsim.engine.results import Rates

from tests.test_engine_groups import _rows


def test_distinct_rows_rebuild_every_column_bit_for_bit():
    rng = np.random.default_rng(2)
    a = rng.choice([0.0, -0.0, 1.5, np.nan], 3000)
    b = rng.choice([1.0, 2.0, 4.0], 3000)
    c = rng.integers(0, 3, 3000)  # integer codes
    first, inverse = distinct.distinct_rows([a, b, c], 3000)
    assert first.size == len({(x.tobytes(), y, z) for x, y, z in zip(a, b, c)})
    for column in (a, b, c):
        assert column[first][inverse].tobytes() == column.tobytes()


def test_rows_whose_hashes_collide_are_not_merged(monkeypatch):
    """Rows of other bits under one hash (here every row's) are told apart by the comparison
    of every column with its group's first row: no grouping at all."""
    monkeypatch.setattr(distinct, "_hash", lambda bits: np.zeros(bits[0].size, np.uint64))
    a = np.array([1.0, 2.0, 1.0, 2.0])
    assert distinct.distinct_rows([a, a * 3], 4) is None
    assert distinct.distinct_rows([np.ones(4), np.ones(4)], 4)[0].size == 1


#: Two rows of a layer's fields from a DeepSeek-V3 sweep (tp 1 and 2, 4k and 8k tokens, two
#: link speeds) that a multiplicative hash of the words (h = (h + word) * odd) gave one value:
#: their differences are multiples of large powers of two, which that hash cancels.
_COLLIDED = (
    (0x3FC7EF9DB22D0E56, 0x4000000000000000, 0x4000000000000000, 0x3FC7EF9DB22D0E56,
     0x42885FDC7AE00000, 0x425A3185C5000000, 0x3FE999999999999A, 0x3FE52617C1BDA512,
     0x41E8964020000000, 0x40E74876E8000000, 0x430C1ED51C538000, 0x0, 0x40C0000000000000,
     0x3FF0000000000000, 0x40C0000000000000, 0x4000000000000000, 0x40FF900000000000),
    (0x3FC7EF9DB22D0E56, 0x3FF0000000000000, 0x3FF0000000000000, 0x3FC7EF9DB22D0E56,
     0x42885FDC7AE00000, 0x425A3185C5000000, 0x3FE999999999999A, 0x3FE52617C1BDA512,
     0x41E8964020000000, 0x42274876E8000000, 0x430C1ED51C538000, 0x0, 0x40B0000000000000,
     0x0, 0x3FF0000000000000, 0x3FF0000000000000, 0x40FF900000000000))


def test_rows_whose_words_differ_by_powers_of_two_hash_apart():
    """The two rows that collided under a multiplicative hash hash apart, so a grid of them is
    grouped (not given up on after the comparison)."""
    columns = np.array(_COLLIDED, dtype=np.uint64).T
    h = distinct._hash(list(columns))
    assert h[0] != h[1]
    rows = [np.tile(c, 3000).view(np.float64) for c in columns]
    first, inverse = distinct.distinct_rows(rows, 6000)
    assert first.size == 2 and np.bincount(inverse).tolist() == [3000, 3000]


def test_too_many_distinct_rows_are_not_grouped():
    rows = np.arange(10_000, dtype=float)
    assert distinct.distinct_rows([rows], 10_000, most=2_000) is None
    assert distinct.distinct_rows([rows % 100], 10_000, most=2_000)[0].size == 100


@pytest.fixture
def learn_anew(monkeypatch):
    """Distinct rows from 8 rows on, every share; the fields read learnt from nothing."""
    monkeypatch.setattr(distinct, "MIN_ROWS", 8)
    monkeypatch.setattr(distinct, "MAX_DISTINCT_SHARE", 1.0)
    monkeypatch.setattr(distinct, "_READS", {})
    monkeypatch.setattr(memo, "_TABLES", {})


def _prepared(n, rng, tp_values):
    return Prepared.of({"tp": rng.choice(tp_values, n), "cp": rng.choice([1.0, 2.0, 4.0], n),
                        "seq_len": rng.choice([1024.0, 2048.0], n), "pp": 1.0})


def test_a_field_read_on_one_branch_joins_the_key_when_a_grid_takes_it(learn_anew):
    """The stage reads cp only where some row has tp > 2: learnt on a grid without such rows,
    the rows are first told apart by tp and seq_len; a grid with them reads cp, which varies,
    so the rows are told apart again with it, and every row gets its own numbers."""
    def stage(g):
        t = g.tp * g.seq_len
        if any_of(g.tp > 2):
            t = t + np.where(g.tp > 2, g.cp, 0.0)
        return Rates(clocked_peak=t, matmul=2.0 * t, hbm=np.float64(1.0), link=t, nic=t)

    rng = np.random.default_rng(4)
    for tp_values in ([1.0, 2.0], [1.0, 2.0, 4.0]):
        g = _prepared(600, rng, tp_values)
        got, want = distinct.evaluate(stage, g, 600), stage(g)
        for field in Rates._fields:
            assert np.asarray(getattr(got, field)).tobytes() == \
                np.asarray(getattr(want, field)).tobytes(), field
    assert distinct._READS[stage.__qualname__] >= {"tp", "cp", "seq_len"}


def test_grouped_evaluation_on_distinct_layers_equals_every_row_evaluated(learn_anew,
                                                                         monkeypatch):
    """The engine on groups whose layers repeat (20 plans x 2 sequence lengths x 4 micro-batches x
    3 recompute modes in 400 rows) computes each distinct layer once and gives the numbers of
    the engine computing every row's (bit for bit, every output)."""
    monkeypatch.setattr(groups, "MIN_GROUP_ROWS", 8)
    monkeypatch.setattr(engine, "GROUP_ROWS", 64)
    x = {**_rows(400), "ceilings": 1.0}
    calls = []
    real = distinct._distinct
    monkeypatch.setattr(distinct, "_distinct",
                        lambda *a, **k: (found := real(*a, **k)) is not None
                        and calls.append(found[0].size) or found)
    once = engine.evaluate(x)
    assert calls and max(calls) < 200  # the distinct rows, not every row, were evaluated
    monkeypatch.setattr(distinct, "MIN_ROWS", 10**9)
    every = engine.evaluate(x)
    assert set(once) == set(every)
    for key, value in once.items():
        assert value.dtype == every[key].dtype, key
        assert value.tobytes() == every[key].tobytes(), key


def test_spread_keeps_shared_arrays_shared_and_refuses_other_shapes():
    small = np.array([1.0, 2.0])
    inverse = np.array([0, 1, 1, 0])
    out = distinct.spread((small, small, 3.0, None), inverse, 2)
    assert out[0] is out[1] and out[0].tolist() == [1.0, 2.0, 2.0, 1.0]
    assert out[2:] == (3.0, None)
    with pytest.raises(distinct.NotSpreadable):
        distinct.spread(np.zeros((2, 3)), inverse, 2)
    with pytest.raises(distinct.NotSpreadable):
        distinct.spread({"a": small}, inverse, 2)


def test_a_plain_data_parallel_layer_is_evaluated_on_every_row(learn_anew, monkeypatch):
    """A dense model without tensor or context parallelism on any row: the layer is cheaper to
    compute on every row than to find its distinct ones, which are not looked for."""
    monkeypatch.setattr(groups, "MIN_GROUP_ROWS", 8)
    monkeypatch.setattr(engine, "GROUP_ROWS", 64)
    calls = []
    monkeypatch.setattr(distinct, "_distinct", lambda *a, **k: calls.append(1))
    engine.evaluate({**_rows(400, models=("llama3-8b",), layouts=((1, 1, 1), (1, 2, 1))),
                     "ceilings": 0.0})
    assert not calls
    engine.evaluate({**_rows(400, models=("llama3-8b",), layouts=((1, 1, 1), (2, 2, 1))),
                     "ceilings": 0.0})
    assert calls
