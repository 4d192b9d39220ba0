"""Wall time of one in-process ``predict`` with its knobs given (issue 9: <= 2 ms).

Three configurations on H100: Llama-3-8B FSDP on 64 GPUs, GPT-3 175B in 3D (tp 8 x pp 8,
1F1B, ZeRO-1, 1,024 GPUs) and the same with the interleaved schedule (vpp 2). Each: 5 warm-up
calls, then the median of ``--repeat`` calls. The bottleneck and thresholds (the sensitivity
post-pass, run when a report asks for them) are not part of it.

Run: ``python benchmarks/bench_predict.py [--repeat 30]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fsdpsim.catalog import load_catalog  # noqa: E402
from fsdpsim.parallel import ParallelPlan, TrainingConfig  # noqa: E402
from fsdpsim.predict import predict  # noqa: E402
from fsdpsim.presets import get_model  # noqa: E402
from fsdpsim.system import resolve_system  # noqa: E402

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
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    system = resolve_system(load_catalog(use_env=False), gpu="h100")
    for name, (model, plan, training) in CASES.items():
        spec = get_model(model)
        for _ in range(5):
            predict(spec, system, plan, training)
        times = []
        for _ in range(max(1, args.repeat)):
            start = time.perf_counter()
            predict(spec, system, plan, training)
            times.append(time.perf_counter() - start)
        print(f"{name:40s} {1e3 * statistics.median(times):6.2f} ms median")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
