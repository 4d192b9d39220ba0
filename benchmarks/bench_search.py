"""Wall time of ``fsdpsim search`` in one process (targets: a 70B model on 1,024 GPUs under
1 s; a 1T model on 16,384 GPUs under 5 s), and the plans and candidates it evaluates per second.

Cases on H100 (80 GiB, 8 per node, 400G InfiniBand), bf16, fsdp2, every plan of the default
space (mesh orders included), throughput objective, top 5:

- llama3-70b, 1,024 GPUs, seq 4,096, global batch 1,024 sequences (4.2 M tokens);
- gpt-1t (Narayanan et al. SC21's 1T model), 16,384 GPUs, seq 4,096, global batch 4,096.

Each: one cold search (the first in the process: the mesh layouts are not cached yet), then the
median of ``--repeat`` warm ones; the exit status is 1 when either misses the target. The table reports the wall time of ``search()`` alone (the CLI adds ~0.3 s of imports
and the top plans' full predictions).

Run: ``python benchmarks/bench_search.py [--repeat 3]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fsdpsim.hardware.catalog import load_catalog  # noqa: E402
from fsdpsim.plan.parallel import TrainingConfig  # noqa: E402
from fsdpsim.model.presets import get_model  # noqa: E402
from fsdpsim.drivers.search.run import search  # noqa: E402
from fsdpsim.drivers.search.explain import plan_line  # noqa: E402
from fsdpsim.hardware.system import resolve_system  # noqa: E402

#: name: (model, GPUs, sequence, global batch, target seconds)
CASES = {
    "llama3-70b on 1,024 H100": ("llama3-70b", 1024, 4096, 1024, 1.0),
    "gpt-1t on 16,384 H100": ("gpt-1t", 16384, 4096, 4096, 5.0),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    system = resolve_system(load_catalog(use_env=False), gpu="h100")
    print(f"{'case':28s} {'cold s':>6s} {'median s':>8s} {'target':>6s} {'plans':>8s} {'candidates':>10s} "
          f"{'plans/s':>8s} {'cand./s':>8s}  best plan")
    failed = 0
    for name, (model, n, seq, gb, target_s) in CASES.items():
        spec = get_model(model)
        training = TrainingConfig(seq_len=seq, global_batch=gb)
        start = time.perf_counter()
        result = search(spec, system, n, training)  # cold: layouts not yet cached
        cold = time.perf_counter() - start
        times = []
        for _ in range(max(1, args.repeat)):
            start = time.perf_counter()
            result = search(spec, system, n, training)
            times.append(time.perf_counter() - start)
        t = statistics.median(times)
        failed += max(t, cold) > target_s
        print(f"{name:28s} {cold:6.2f} {t:8.2f} {target_s:6.1f} {result.plans:8,d} {result.candidates:10,d} "
              f"{result.plans / t:8,.0f} {result.candidates / t:8,.0f}  "
              f"{plan_line(result.top[0])}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
