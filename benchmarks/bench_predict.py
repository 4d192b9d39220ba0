"""Wall time of one in-process ``predict`` with its knobs given (target: <= 2 ms).

Three configurations on H100: Llama-3-8B FSDP on 64 GPUs, GPT-3 175B in 3D (tp 8 x pp 8,
1F1B, ZeRO-1, 1,024 GPUs) and the same with the interleaved schedule (vpp 2). After 5 warm-up
calls each, ``--rounds`` rounds run ``--repeat`` calls of every case in turn; a case's time is
the median of a round's calls (CPU time of the process, as ``bench_sweep.py``). Reported: the
median over the rounds, and the best round. On a shared virtual machine the host's load
changes the speed of the same code by up to 2x for seconds at a time (CPU time included), so
the spread says how quiet the machine was. The bottleneck and thresholds (the sensitivity
post-pass, run when a report asks for them) are not part of it.

Run: ``python benchmarks/bench_predict.py [--rounds 10] [--repeat 20]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fsdpsim.hardware.catalog import load_catalog  # noqa: E402
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig  # noqa: E402
from fsdpsim.drivers.predict import predict  # noqa: E402
from fsdpsim.model.presets import get_model  # noqa: E402
from fsdpsim.hardware.system import resolve_system  # noqa: E402

CASES = {
    "llama3-8b FSDP, 64 H100": ("llama3-8b", ParallelPlan(64, 8, "full"),
                                TrainingConfig(seq_len=4096, micro_batch=2, recompute="none")),
    "gpt3-175b 3D 1F1B, 1,024 H100": (
        "gpt3-175b", ParallelPlan(1024, 8, "optimizer", tp=8, pp=8, framework="megatron"),
        TrainingConfig(seq_len=2048, micro_batch=1, global_batch=1024, recompute="full")),
    "gpt3-175b 3D interleaved, 1,024 H100": (
        "gpt3-175b", ParallelPlan(1024, 8, "optimizer", tp=8, pp=8, vpp=2, framework="megatron"),
        TrainingConfig(seq_len=2048, micro_batch=1, global_batch=1024, recompute="full")),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    system = resolve_system(load_catalog(use_env=False), gpu="h100")
    cases = {name: (get_model(model), plan, training)
             for name, (model, plan, training) in CASES.items()}
    for spec, plan, training in cases.values():
        for _ in range(5):
            predict(spec, system, plan, training)
    medians: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(max(1, args.rounds)):
        for name, (spec, plan, training) in cases.items():
            cpu = []
            for _ in range(max(1, args.repeat)):
                start = time.process_time()
                predict(spec, system, plan, training)
                cpu.append(time.process_time() - start)
            medians[name].append(statistics.median(cpu))
    for name, per_round in medians.items():
        print(f"{name:40s} {1e3 * statistics.median(per_round):6.2f} ms median, "
              f"{1e3 * min(per_round):.2f} ms best round (CPU time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
