"""Wall time of ``fsdpsim search`` as a user runs it (a fresh CLI process: start-up, the search
and the top plans' full predictions), and what the bounds save: the pruned search against the
unpruned one (``search(..., prune=False)``) in one process.

Cases (bf16, fsdp2, every plan of the default space with its mesh orders, throughput, top 5;
seq 4,096; the CLI's default global batch, about 4 M tokens: 1,024 sequences):

- DeepSeek-V3 on 256 GB200 (NVL72 racks, 64 GPUs used each), target 5 s;
- DeepSeek-V3 on 8,192 H100, target 5 s;
- Llama 3 70B on 1,024 H100, target 1 s;
- GPT 1T (Narayanan et al. SC21) on 16,384 H100, target 2 s.

Wall: the median of ``--repeat`` fresh processes (``python -m fsdpsim.cli search ...``); the
exit status is 1 when a case misses its target. Pruned/unpruned: CPU seconds of ``search()``
with and without pruning, back to back in this process, and the candidates each evaluated
(``--no-ratio`` skips it: the unpruned DeepSeek-V3 searches take tens of seconds).
Timings on a shared machine are noisy: report them with the load (printed).

Run: ``python benchmarks/bench_search.py [--repeat 3] [--no-ratio]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdpsim.hardware.catalog import load_catalog  # noqa: E402
from fsdpsim.hardware.system import resolve_system  # noqa: E402
from fsdpsim.model.presets import get_model  # noqa: E402
from fsdpsim.plan.parallel import TrainingConfig  # noqa: E402
from fsdpsim.drivers.search.objective import budget_system  # noqa: E402
from fsdpsim.drivers.search.run import search  # noqa: E402

#: name: (model, GPU, GPUs, global batch, target wall seconds)
CASES = {
    "DeepSeek-V3 on 256 GB200": ("deepseek-v3", "gb200", 256, 1024, 5.0),
    "DeepSeek-V3 on 8,192 H100": ("deepseek-v3", "h100", 8192, 1024, 5.0),
    "Llama 3 70B on 1,024 H100": ("llama3-70b", "h100", 1024, 1024, 1.0),
    "GPT 1T on 16,384 H100": ("gpt-1t", "h100", 16384, 1024, 2.0),
}


def cli_wall_s(model: str, gpu: str, n: int, gb: int) -> float:
    """Wall seconds of one ``fsdpsim search`` in a fresh process (output discarded)."""
    cmd = [sys.executable, "-m", "fsdpsim.cli", "search", "--model", model, "--gpu", gpu,
           "--num-gpus", str(n), "--seq-len", "4096", "--global-batch", str(gb)]
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def pruned_vs_unpruned(model: str, gpu: str, n: int, gb: int) -> tuple[float, float, int, int]:
    """CPU seconds and candidates of the pruned and the unpruned search, back to back."""
    system = budget_system(resolve_system(load_catalog(use_env=False), gpu=gpu), None)
    spec, training = get_model(model), TrainingConfig(seq_len=4096, global_batch=gb)
    out = []
    for prune in (True, False):
        start = time.process_time()
        result = search(spec, system, n, training, prune=prune)
        out.append((time.process_time() - start, result))
    (t_p, r_p), (t_u, r_u) = out
    assert [c.tokens_per_s for c in r_p.top] == [c.tokens_per_s for c in r_u.top]
    return t_p, t_u, r_p.candidates, r_u.candidates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-ratio", action="store_true")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'case':27s} {'wall s':>6s} {'target':>6s}  {'pruned s':>8s} {'unpruned s':>10s} "
          f"{'ratio':>5s} {'cand. pruned':>12s} {'unpruned':>10s}")
    failed = 0
    for name, (model, gpu, n, gb, target_s) in CASES.items():
        wall = statistics.median(cli_wall_s(model, gpu, n, gb) for _ in range(args.repeat))
        failed += wall > target_s
        line = f"{name:27s} {wall:6.2f} {target_s:6.1f}"
        if not args.no_ratio:
            t_p, t_u, c_p, c_u = pruned_vs_unpruned(model, gpu, n, gb)
            line += f"  {t_p:8.2f} {t_u:10.2f} {t_u / t_p:5.1f} {c_p:12,d} {c_u:10,d}"
        print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
