"""Threads that evaluate at once (a Dask worker with several threads) get each evaluation's own
numbers: the engine's evaluations in one process take turns."""

from __future__ import annotations

import sys
import threading

import numpy as np

from fsdpsim import engine

from tests.test_engine_groups import _rows


def test_threads_evaluating_at_once_get_the_numbers_of_one_at_a_time():
    """Eight threads, four grids (dense, MoE, pipelined or not), 40 evaluations each, the
    interpreter switching threads every microsecond: without the engine's lock this raised
    "dictionary changed size during iteration" within a second."""
    layouts = ((1, 1, 1), (2, 2, 1), (1, 4, 1))
    grids = [{**_rows(300, models=(m,), layouts=layouts), "ceilings": 0.0}
             for m in ("llama3-8b", "mixtral-8x7b", "llama3-70b", "deepseek-v3")]
    want = [engine.evaluate(x) for x in grids]
    problems: list[str] = []

    def work(i: int) -> None:
        try:
            for _ in range(40):
                got = engine.evaluate(grids[i])
                problems.extend(f"grid {i}: {k}" for k, v in want[i].items()
                                if np.asarray(got[k]).tobytes() != np.asarray(v).tobytes())
        except Exception as error:  # noqa: BLE001 - the test reports what a thread raised
            problems.append(repr(error))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i % 4,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not problems, problems[:3]
