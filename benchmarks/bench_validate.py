"""Rows per second of ``fsdpsim validate`` on large measurement files (target: >= 5,000 rows/s).

The files are made from a calibration file (default ``validation/data/hopper_bf16_nanotron.csv``,
1,274 measured H100 runs) by repeating its rows to 10,000 and 100,000 rows: every copy gets
its own id and its measurement scaled by a random factor (log-normal, 3 %; the step time by
its inverse), as repeated runs of the same configurations are; ``--distinct`` of the copies
(default 5 %) also get their measured bus bandwidths scaled by a random factor, so they are
configurations of their own (rows the grid path cannot share). Each file is validated by the
CLI in a fresh process (``python -m fsdpsim.cli validate FILE --format csv``; wall time,
start-up included) with this tree and, with ``--before REV``, with the tree of git revision
REV (extracted with ``git archive``) in the same run, alternating; the two outputs must be
byte-identical. The per-row path costs minutes on 100,000 rows: ``--before-max-rows`` (default
10,000) limits the files REV is run on. Each line gives the wall time and the process's CPU time
(user + system, which a loaded machine inflates less than the wall time), the rows per second of
each, and the machine's 1-minute load average when the line was measured.

Run: ``python benchmarks/bench_validate.py [--before REV] [--rows 10000,100000]``
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ("tokens_per_s_per_gpu", "tokens_per_s_total", "tflops_per_gpu", "mfu_pct")
BUSBW = ("busbw_allreduce_intra_gbs", "busbw_allreduce_inter_gbs", "busbw_allgather_inter_gbs",
         "busbw_reducescatter_inter_gbs")


def make_file(source: Path, rows: int, distinct: float, seed: int, out: Path) -> None:
    """``rows`` copies of the source's rows (cyclically), perturbed as the module says."""
    raw = pd.read_csv(source, dtype={"id": str}, low_memory=False)
    rng = np.random.default_rng(seed)
    take = np.arange(rows) % len(raw)
    frame = raw.iloc[take].reset_index(drop=True)
    frame["id"] = [f"{i}-c{k}" for k, i in enumerate(frame["id"].astype(str))]
    factor = np.exp(rng.normal(0.0, 0.03, rows))
    for column in MEASUREMENTS:
        if column in frame.columns:
            frame[column] = pd.to_numeric(frame[column], errors="coerce") * factor
    if "step_time_s" in frame.columns:
        frame["step_time_s"] = pd.to_numeric(frame["step_time_s"], errors="coerce") / factor
    own = rng.random(rows) < distinct
    for column in BUSBW:
        if column in frame.columns:
            values = pd.to_numeric(frame[column], errors="coerce").to_numpy(copy=True)
            values[own] *= np.exp(rng.normal(0.0, 0.05, int(own.sum())))
            frame[column] = values
    frame.to_csv(out, index=False)


def _children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run(tree: Path, path: Path) -> tuple[float, float, bytes]:
    """Wall seconds, CPU seconds and standard output of ``validate --format csv`` run in
    ``tree``."""
    cpu, start = _children_cpu_s(), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fsdpsim.cli", "validate", str(path),
                           "--format", "csv"], cwd=tree, capture_output=True, check=False)
    seconds, cpu = time.perf_counter() - start, _children_cpu_s() - cpu
    if done.returncode:
        raise SystemExit(f"validate failed in {tree}: {done.stderr.decode()[-500:]}")
    return seconds, cpu, done.stdout


def _timing(rows: int, wall_s: float, cpu_s: float) -> str:
    return (f"{wall_s:6.1f} s = {rows / wall_s:6,.0f} rows/s (CPU {cpu_s:5.1f} s = "
            f"{rows / cpu_s:6,.0f} rows/s)")


def extract(rev: str, into: Path) -> Path:
    """The tree of git revision ``rev`` of this repository, extracted under ``into``."""
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT,
                             capture_output=True, check=True).stdout
    target = into / "before"
    target.mkdir()
    tar = into / "before.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(target, filter="data")
    # byte-compiled first, as this tree is: the timed runs do not compile REV's modules
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(target / "fsdpsim")],
                   check=True, capture_output=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(ROOT / "validation/data/hopper_bf16_nanotron.csv"))
    parser.add_argument("--rows", default="10000,100000",
                        help="Sizes of the files, comma-separated.")
    parser.add_argument("--distinct", type=float, default=0.05,
                        help="Share of copies that are configurations of their own.")
    parser.add_argument("--before", default=None,
                        help="A git revision whose tree is timed on the same files.")
    parser.add_argument("--before-max-rows", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.rows.split(",") if s]
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        before = extract(args.before, tmp_path) if args.before else None
        for rows in sizes:
            path = tmp_path / f"measurements_{rows}.csv"
            make_file(Path(args.source), rows, args.distinct, args.seed, path)
            after_s, after_cpu, after_out = run(ROOT, path)
            line = f"{rows:>7,} rows: after {_timing(rows, after_s, after_cpu)}"
            if before is not None and rows <= args.before_max_rows:
                before_s, before_cpu, before_out = run(before, path)
                same = "byte-identical" if before_out == after_out else "OUTPUTS DIFFER"
                line += (f"; before ({args.before}) {_timing(rows, before_s, before_cpu)}; "
                         f"x{before_s / after_s:.1f} wall, x{before_cpu / after_cpu:.1f} CPU; "
                         f"{same}")
            print(f"{line}; load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
