"""Real FSDP2 training steps on this machine's CUDA GPUs against fsdpsim's prediction.

Run from the repository root on a machine with NVIDIA GPUs (no torchrun needed)::

    python validation/gpu_check.py                      # every default case, ~2 min on one H200
    python validation/gpu_check.py --case gpt3-1.3b:4:full --steps 20 --output my.csv
    python validation/gpu_check.py --case gpt3-1.3b:8 --headroom 0.85,0.9,0.95,0.98

``--headroom`` runs every case again with a ballast tensor allocated first, so that fsdpsim's
predicted peak is each given share of the memory left, and records ``num_alloc_retries``:
step time against memory headroom, the measurement an allocator-pressure model needs (the
MosaicML MPT-30B seq-8192 row is 34 % slower than predicted at a predicted 93 % of memory).

For each case (a GPT-3 preset, sequence 2048, a micro-batch, a recompute setting) it trains the
fsdpsim reference model (:func:`fsdpsim.measured.harness.reference.build_reference_model`: fp32
master weights, ``scaled_dot_product_attention`` — FlashAttention on bf16 —, FSDP2
``fully_shard`` per block and on the root with ``MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)``, AdamW, cross-entropy on fp32-upcast logits) on one GPU and, where the
machine has several, on all of them (one spawned process per GPU, NCCL). It records the median
step time over ``--steps`` steps after ``--warmup`` steps (slowest rank), the peak of
``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` and fsdpsim's prediction for the
same setup on the catalog GPU that ``torch.cuda.get_device_name()`` maps to
(:func:`catalog_id_for`; ``--gpu`` overrides), and writes one CSV row per run
(:data:`COLUMNS`; default ``tests/measurements/gpu_check-<gpu>-<date>.csv``). The CSV is also a
``fsdpsim validate`` measurements file (``tokens_per_s_per_gpu`` = the measured value).

Commit the CSV: ``tests/test_gpu_check.py`` compares every committed row with the current
fsdpsim (:func:`check_row`, bands :data:`STEP_RATIO_BAND` and :data:`MEMORY_RATIO_BAND`).
Without CUDA the script exits with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a source checkout
    sys.path.insert(0, str(ROOT))

from fsdpsim.util.errors import ConfigError  # noqa: E402

MEASUREMENTS_DIR = ROOT / "tests" / "measurements"
from fsdpsim.measured.harness.gpu_rows import (  # noqa: E402,F401  (the script's public names)
    ballast_bytes,
    Case,
    catalog_id_for,
    check_row,
    COLUMNS,
    DEFAULT_CASES,
    DEFAULT_SEQ_LEN,
    format_row,
    GPU_NAMES,
    GpuCheckError,
    make_row,
    MEMORY_RATIO_BAND,
    parse_case,
    parse_shares,
    predict_case,
    read_csv,
    STEP_RATIO_BAND,
    write_csv,
)

# ============================================================================ the GPU runs
def _train_case(case: Case, rank: int, world: int, steps: int, warmup: int,
                device: str = "cuda", ballast: int = 0) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from fsdpsim.model.presets import get_model
    from fsdpsim.measured.harness.fsdp_runs import _checkpointed_class
    from fsdpsim.measured.harness.reference import build_reference_model

    spec = get_model(case.model)
    if spec.position == "learned" and spec.max_seq_len < case.seq_len:
        spec = spec.with_seq_len(case.seq_len)
    torch.manual_seed(0)
    cuda = device == "cuda"
    # The headroom sweep's ballast, held for the whole run (outside the caching allocator's
    # reuse: one block that is never freed).
    held = torch.empty(ballast, dtype=torch.uint8, device=device) if ballast and cuda else None
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model = build_reference_model(spec, device=device, attention="sdpa")
    if case.recompute == "full":
        model.blocks = torch.nn.ModuleList(_checkpointed_class()(b) for b in model.blocks)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device=device).manual_seed(1000 + rank)
    times = []
    for _ in range(warmup + steps):
        idx = torch.randint(0, spec.vocab_size, (case.micro_batch, case.seq_len), device=device,
                            generator=gen)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        logits = model(idx)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), idx.roll(-1, dims=1).flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        times.append(time.perf_counter() - t0)
    nan = float("nan")  # no allocator statistics on the CPU (the script's own smoke test)
    out = {"times": times[warmup:],
           "max_allocated_bytes": (torch.cuda.max_memory_allocated() - ballast) if cuda else nan,
           "max_reserved_bytes": (torch.cuda.max_memory_reserved() - ballast) if cuda else nan,
           "num_alloc_retries": (torch.cuda.memory_stats().get("num_alloc_retries", 0)
                                 if cuda else nan)}
    del held
    return out


def _worker(rank: int, world: int, port: int, cases: Sequence[Case], steps: int, warmup: int,
            deadline: float, queue, device: str, ballasts: Sequence[int] = ()) -> None:
    import datetime
    import gc

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)  # ranks share the cores
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank) if cuda else None,
                            timeout=datetime.timedelta(seconds=600))
    try:
        for i, case in enumerate(cases):
            if time.time() > deadline:
                result = {"error": "skipped: time budget spent"}
            else:
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                try:
                    result = _train_case(case, rank, world, steps, warmup, device,
                                         ballasts[i] if ballasts else 0)
                except torch.cuda.OutOfMemoryError as exc:
                    result = {"error": f"out of memory: {str(exc).splitlines()[0][:120]}"}
            gathered = [None] * world
            dist.all_gather_object(gathered, result)
            if rank == 0:
                queue.put((case, gathered))
        # All ranks leave together: a rank tearing gloo down while a peer still talks to it
        # aborts ("terminate called without an active exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_on_gpus(cases: Sequence[Case], world: int, steps: int, warmup: int,
                deadline: float, device: str = "cuda",
                ballasts: Sequence[int] = ()) -> list[tuple[Case, dict[str, Any]]]:
    """Train every case on ``world`` GPUs (one spawned process each); per case the combined
    measurement: median over steps of the slowest rank, peaks of the busiest rank.

    ``device="cpu"`` runs the same code on gloo ranks (no memory statistics): the script's
    smoke test on machines without a GPU.
    """
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    procs = mp.spawn(_worker, args=(world, port, tuple(cases), steps, warmup, deadline, queue,
                                    device, tuple(ballasts)), nprocs=world, join=False)
    results = []
    while True:  # drain while the ranks run, so a full pipe never blocks rank 0
        while not queue.empty():
            results.append(queue.get())
        if procs.join(timeout=1.0):  # True once every rank exited; raises if one failed
            break
    while not queue.empty():
        results.append(queue.get())
    out = []
    for case, per_rank in results:
        errors = [r["error"] for r in per_rank if "error" in r]
        if errors:
            out.append((case, {"error": errors[0]}))
            continue
        slowest = [max(ts) for ts in zip(*(r["times"] for r in per_rank))]
        out.append((case, {"step_s": statistics.median(slowest), "steps": len(slowest),
                           "max_allocated_bytes": max(r["max_allocated_bytes"] for r in per_rank),
                           "max_reserved_bytes": max(r["max_reserved_bytes"] for r in per_rank),
                           "num_alloc_retries": max(r.get("num_alloc_retries", float("nan"))
                                                    for r in per_rank)}))
    return out


def require_cuda():
    """torch with a CUDA device, or a :class:`GpuCheckError` saying what is missing."""
    try:
        import torch
    except ImportError:
        raise GpuCheckError("needs torch: pip install 'fsdpsim[torch]' (a CUDA build)") from None
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        raise GpuCheckError(f"no CUDA device: torch {torch.__version__} reports "
                            "torch.cuda.is_available() == False; run this on a machine with an "
                            "NVIDIA GPU")
    return torch


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", default=None,
                        help="MODEL:MICRO_BATCH[:RECOMPUTE] (repeatable); default: "
                             + ", ".join(":".join(map(str, c)) for c in DEFAULT_CASES))
    parser.add_argument("--seq-len", type=int, default=DEFAULT_SEQ_LEN)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--gpu", default=None, help="catalog accelerator id (default: from "
                        "torch.cuda.get_device_name())")
    parser.add_argument("--max-gpus", type=int, default=8, help="most GPUs for the FSDP runs")
    parser.add_argument("--budget-s", type=float, default=270.0,
                        help="skip the cases left after this many seconds")
    parser.add_argument("--output", default=None, help="CSV path (default: "
                        "tests/measurements/gpu_check-<gpu>-<date>.csv)")
    parser.add_argument("--headroom", default=None,
                        help="also run every case with a ballast tensor so that fsdpsim's "
                             "predicted peak is each of these shares of the memory left, e.g. "
                             "0.85,0.9,0.95,0.98: step time and num_alloc_retries near the limit")
    args = parser.parse_args(argv)
    try:
        torch = require_cuda()
        from fsdpsim import __version__ as fsdpsim_version
        from fsdpsim.hardware.catalog import load_catalog

        cases = ([parse_case(c, args.seq_len) for c in args.case] if args.case else
                 [Case(m, b, r, args.seq_len) for m, b, r in DEFAULT_CASES])
        cases += [Case(c.model, c.micro_batch, c.recompute, c.seq_len, share)
                  for share in parse_shares(args.headroom) for c in list(cases)]
        if args.steps < 1 or args.warmup < 0:
            raise GpuCheckError(f"--steps({args.steps}) must be >= 1 and --warmup"
                                f"({args.warmup}) >= 0")
        catalog = load_catalog(use_env=False)
        gpu_name = torch.cuda.get_device_name(0)
        gpu = catalog.accelerator(args.gpu).id if args.gpu else catalog_id_for(gpu_name)
        catalog.accelerator(gpu)
        date = _dt.date.today().isoformat()
        versions = {"torch_version": torch.__version__, "cuda_version": torch.version.cuda or "",
                    "fsdpsim_version": fsdpsim_version}
        worlds = [1] + ([n] if (n := min(torch.cuda.device_count(), args.max_gpus)) > 1 else [])
        deadline = time.time() + args.budget_s
        rows = []
        total = torch.cuda.get_device_properties(0).total_memory
        for world in worlds:
            ballasts = [ballast_bytes(c, total, predict_case(c, gpu, world, catalog)
                                      ["predicted_peak_bytes"]) for c in cases]
            runs = run_on_gpus(cases, world, args.steps, args.warmup, deadline,
                               ballasts=ballasts)
            for (case, measured), ballast in zip(runs, ballasts):
                measured = {**measured, "ballast_bytes": ballast}
                row = make_row(case, gpu, gpu_name, world, measured, versions, date, catalog)
                print(format_row(row), flush=True)
                rows.append(row)
        path = write_csv(rows, args.output or MEASUREMENTS_DIR / f"gpu_check-{gpu}-{date}.csv")
        print(f"wrote {path}")
    except ConfigError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
