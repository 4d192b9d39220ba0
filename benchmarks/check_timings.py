"""Speed ceilings, checked on demand (not in the unit tests, whose timings flake on a loaded
machine): exit status 1 if one is exceeded.

* ``predict`` with its knobs given, in process, median wall time of 30 calls after 5 warm-up
  calls, below 10 ms for each case (the idle figure is about 1-2 ms:
  ``benchmarks/bench_predict.py``; the unit test ``tests/test_engine.py::
  test_predict_is_one_evaluation`` asserts it is one engine call).
* A 864-point ``sweep --best`` grid (9 model sizes x 3 GPUs x 8 GPU counts x 4 bandwidths) in
  below 30 s (the unit test ``tests/test_sweep.py::test_thousand_point_sweep`` checks its
  rows).

Run: ``python benchmarks/check_timings.py [--only predict|sweep]``; run it on a quiet machine
(the load average is printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fsdpsim.drivers import predict  # noqa: E402
from fsdpsim.hardware.catalog import load_catalog  # noqa: E402
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig  # noqa: E402
from fsdpsim.model.presets import get_model  # noqa: E402
from fsdpsim.hardware.system import resolve_system  # noqa: E402

#: Ceiling of one predict's median wall time [ms].
PREDICT_MS = 10.0
#: Ceiling of the 864-point sweep's wall time [s].
SWEEP_S = 30.0
PREDICT_CASES = {
    "llama3-8b FSDP on 64": ("llama3-8b", ParallelPlan(64, 8, "full"),
                             TrainingConfig(seq_len=8192, micro_batch=1, recompute="full")),
    "gpt3-175b 3D on 1,024": (
        "gpt3-175b", ParallelPlan(1024, 8, "optimizer", tp=8, pp=8, framework="megatron"),
        TrainingConfig(seq_len=2048, micro_batch=1, recompute="selective", global_batch=1536)),
}
SWEEP_GRID = {"model-sizes": "1b..500b", "gpu": "h100,b200,mi300x", "num-gpus": "8..1024",
              "inter-node-gbps-per-gpu": "50,100,200,400", "best": True}


def check_predict(catalog) -> list[str]:
    system = resolve_system(catalog, gpu="h100-sxm5-80gb")
    failed = []
    for name, (model, plan, training) in PREDICT_CASES.items():
        spec = get_model(model)
        for _ in range(5):
            predict.predict(spec, system, plan, training)
        times = []
        for _ in range(30):
            start = time.perf_counter()
            predict.predict(spec, system, plan, training)
            times.append(time.perf_counter() - start)
        median_ms = statistics.median(times) * 1e3
        ok = median_ms < PREDICT_MS
        print(f"predict {name}: median of 30 calls {median_ms:.2f} ms (ceiling "
              f"{PREDICT_MS:g} ms: {'ok' if ok else 'over'})")
        if not ok:
            failed.append(f"predict {name}")
    return failed


def check_sweep(catalog) -> list[str]:
    from fsdpsim.drivers.sweep.grid import build_grid
    from fsdpsim.drivers.sweep.run import run_sweep

    grid = build_grid(catalog, SWEEP_GRID)
    start = time.perf_counter()
    run_sweep(grid)
    elapsed = time.perf_counter() - start
    ok = elapsed < SWEEP_S
    print(f"sweep of {grid.n_points} points: {elapsed:.1f} s (ceiling {SWEEP_S:g} s: "
          f"{'ok' if ok else 'over'})")
    return [] if ok else ["sweep"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("predict", "sweep"), default=None)
    args = parser.parse_args(argv)
    if hasattr(os, "getloadavg"):
        print("load average: " + ", ".join(f"{v:.2f}" for v in os.getloadavg()))
    catalog = load_catalog(use_env=False)
    failed = []
    if args.only in (None, "predict"):
        failed += check_predict(catalog)
    if args.only in (None, "sweep"):
        failed += check_sweep(catalog)
    if failed:
        print("over the ceiling: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
