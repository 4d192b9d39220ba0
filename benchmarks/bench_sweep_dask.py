"""A sweep on a Dask cluster against the same sweep in one process: wall time, rows per second,
and rows per second per worker (what sizing a cluster for a big study needs).

The grid: Llama-style ladder models 1b..1t (1-2-5 steps), H100/B200/MI300X, 8..16,384 GPUs,
sequence 2k..16k, every free knob on auto (the sweep's default), repeated over inter-node
bandwidths to reach the requested size. Both runs write Parquet; the rows are checked equal.
The cluster is a ``LocalCluster`` of ``--workers`` single-threaded processes on this machine
(its start-up is timed apart); on a real cluster pass ``--scheduler tcp://HOST:8786``.

Run: ``python benchmarks/bench_sweep_dask.py [--workers 2] [--gbps 50,100,200,400]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd  # noqa: E402

from fsdpsim.drivers.sweep import distributed  # noqa: E402
from fsdpsim.drivers.sweep.grid import build_grid  # noqa: E402
from fsdpsim.drivers.sweep.run import estimated_candidates, run_sweep  # noqa: E402
from fsdpsim.hardware.catalog import load_catalog  # noqa: E402
from fsdpsim.util.output import write_parquet  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scheduler", default=None)
    ap.add_argument("--gbps", default="50,100,200,400")
    ap.add_argument("--chunk-points", type=int, default=None)
    a = ap.parse_args()
    grid = build_grid(load_catalog(()), {
        "model-sizes": ["1b..1t"], "gpu": ["h100,b200,mi300x"], "num-gpus": ["8..16384"],
        "seq-len": ["2k..16k"], "inter-node-gbps-per-gpu": [a.gbps]})
    print(f"grid: {grid.n_points:,} points, {estimated_candidates(grid):,} candidate "
          "configurations")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        single = run_sweep(grid)
        write_parquet(single, Path(tmp) / "single.parquet")
        t_single = time.perf_counter() - t0
        t0 = time.perf_counter()
        scheduler = a.scheduler or f"local:{a.workers}"
        with distributed.client_for(scheduler) as client:
            t_start = time.perf_counter() - t0
            workers = len(client.scheduler_info()["workers"])
            t1 = time.perf_counter()
            distributed.run_distributed(grid, client, str(Path(tmp) / "d.parquet"),
                                        chunk_points=a.chunk_points)
            t_dist = time.perf_counter() - t1
        same = pd.read_parquet(Path(tmp) / "single.parquet").equals(
            pd.read_parquet(Path(tmp) / "d.parquet"))
    n = grid.n_points
    print(f"one process : {t_single:7.2f} s  {n / t_single:9,.0f} rows/s")
    print(f"{workers} workers   : {t_dist:7.2f} s  {n / t_dist:9,.0f} rows/s "
          f"({n / t_dist / workers:,.0f} per worker; cluster start {t_start:.1f} s)")
    print(f"speed-up {t_single / t_dist:.2f}x; rows identical: {same}")


if __name__ == "__main__":
    main()
