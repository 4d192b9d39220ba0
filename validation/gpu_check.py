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
fsdpsim reference model (:func:`fsdpsim.validation.reference.build_reference_model`: fp32
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
import csv
import datetime as _dt
import math
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a source checkout
    sys.path.insert(0, str(ROOT))

from fsdpsim.errors import ConfigError  # noqa: E402

MEASUREMENTS_DIR = ROOT / "tests" / "measurements"
#: measured / predicted step time a committed row must stay within (uncalibrated Hopper: the
#: catalog's 5-95 % interval of 0.70..1.10 in throughput, widened for small models, whose
#: steps are launch and Python bound).
STEP_RATIO_BAND = (0.6, 1.6)
#: measured ``max_memory_allocated`` / predicted allocator-managed peak (fsdpsim's peak less
#: its runtime reserve and fragmentation allowance).
MEMORY_RATIO_BAND = (0.8, 1.25)

#: (model, micro-batch, recompute) run by default at sequence 2048.
DEFAULT_CASES = (("gpt3-125m", 8, "none"), ("gpt3-350m", 8, "none"), ("gpt3-1.3b", 4, "none"),
                 ("gpt3-1.3b", 4, "full"))
DEFAULT_SEQ_LEN = 2048

COLUMNS = (
    "id", "date", "gpu_name", "gpu", "n_gpus", "gpus_per_node", "inter_node_gbps_per_gpu",
    "model", "seq_len", "micro_batch", "grad_accum", "sharding", "recompute", "precision",
    "reduce_dtype", "attention", "steps", "measured_step_s", "predicted_step_s", "step_ratio",
    "measured_tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu", "tokens_per_s_per_gpu",
    "max_allocated_bytes", "max_reserved_bytes", "predicted_peak_bytes",
    "predicted_allocated_bytes", "memory_ratio", "target_share", "ballast_bytes",
    "num_alloc_retries", "torch_version", "cuda_version", "fsdpsim_version", "skip",
)

#: ``torch.cuda.get_device_name()`` patterns (lower-case, searched in order) → catalog id.
GPU_NAMES: tuple[tuple[str, str], ...] = (
    (r"gh200.*(144|hbm3e)", "gh200-144gb"),
    (r"gh200", "gh200-96gb"),
    (r"gb200", "gb200"),
    (r"b300", "b300"),
    (r"b200", "b200"),
    (r"h200 nvl", ""),  # no catalog entry (PCIe card, NVLink bridges): say so
    (r"h200", "h200-sxm-141gb"),
    (r"h100 nvl", ""),
    (r"h100.*pcie", "h100-pcie-80gb"),
    (r"h100", "h100-sxm5-80gb"),
    (r"a100.*sxm.*64", "a100-sxm4-64gb"),
    (r"a100.*sxm.*40", "a100-sxm4-40gb"),
    (r"a100.*sxm.*80", "a100-sxm4-80gb"),
    (r"a100.*pcie.*40|a100.*40.*pcie", "a100-pcie-40gb"),
    (r"a100.*pcie.*80|a100.*80.*pcie", "a100-pcie-80gb"),
    (r"l40s", "l40s"),
    (r"\bl4\b", "l4"),
    (r"v100.*sxm2.*32", "v100-sxm2-32gb"),
    (r"v100.*sxm2.*16", "v100-sxm2-16gb"),
    (r"mi355", "mi355x"),
    (r"mi325", "mi325x"),
    (r"mi300x", "mi300x"),
    (r"mi250", "mi250x"),
)


class GpuCheckError(ConfigError):
    """A problem the user can fix (no CUDA, unknown GPU, bad option); one line, exit 2."""


def catalog_id_for(device_name: str) -> str:
    """The fsdpsim catalog accelerator id of a ``torch.cuda.get_device_name()`` string."""
    key = re.sub(r"[\s_\-]+", " ", device_name.lower()).strip()
    for pattern, ident in GPU_NAMES:
        if re.search(pattern, key):
            if ident:
                return ident
            break
    raise GpuCheckError(f"GPU {device_name!r} has no fsdpsim catalog entry that gpu_check "
                        "knows; pass --gpu ID with the closest one (see `fsdpsim catalog list "
                        "--kind accelerator`)")


# ============================================================================ cases
@dataclass(frozen=True)
class Case:
    """One training setup; runs on ``n_gpus`` GPUs of one node."""

    model: str
    """fsdpsim preset id (GPT-3 family: learned positions, tied embeddings, GELU, biases)."""
    micro_batch: int
    recompute: str = "none"
    """``none`` or ``full`` (non-reentrant ``torch.utils.checkpoint`` around every block)."""
    seq_len: int = DEFAULT_SEQ_LEN
    target_share: float | None = None
    """Headroom sweep: occupy a ballast tensor first, so that fsdpsim's predicted peak is this
    share of what is left (``--headroom``); None = the whole GPU."""

    @property
    def label(self) -> str:
        share = f"@{self.target_share:g}" if self.target_share else ""
        return f"{self.model}:{self.micro_batch}:{self.recompute}{share}"


def ballast_bytes(case: Case, total_bytes: float, predicted_peak_bytes: float) -> int:
    """Bytes to occupy before training so that the predicted peak is ``case.target_share`` of
    the memory left: ``total − peak / share`` (0 without a target or when that is negative)."""
    if not case.target_share:
        return 0
    return max(0, int(total_bytes - predicted_peak_bytes / case.target_share))


def parse_case(text: str, seq_len: int = DEFAULT_SEQ_LEN) -> Case:
    """``MODEL:MICRO_BATCH[:RECOMPUTE]`` → :class:`Case`."""
    parts = text.split(":")
    try:
        case = Case(parts[0], int(parts[1]), parts[2] if len(parts) > 2 else "none", seq_len)
    except (IndexError, ValueError):
        raise GpuCheckError(f"--case {text!r}: write MODEL:MICRO_BATCH[:RECOMPUTE], e.g. "
                            "gpt3-1.3b:4:full") from None
    if len(parts) > 3 or case.recompute not in ("none", "full") or case.micro_batch < 1:
        raise GpuCheckError(f"--case {text!r}: micro-batch must be >= 1 and recompute none or "
                            "full")
    from fsdpsim.presets import get_model

    get_model(case.model)  # a clear error for an unknown preset
    return case


# ============================================================================ the prediction
def predict_case(case: Case, gpu: str, n_gpus: int, catalog=None) -> dict[str, float]:
    """fsdpsim's step time, throughput and memory for ``case`` on ``n_gpus`` GPUs of one node."""
    from fsdpsim.catalog import load_catalog
    from fsdpsim.parallel import ParallelPlan, TrainingConfig
    from fsdpsim.predict import predict
    from fsdpsim.presets import get_model
    from fsdpsim.system import resolve_system
    from fsdpsim.units import GBIT_PER_S_BYTES_PER_S

    cat = catalog or load_catalog(use_env=False)
    spec = get_model(case.model)
    if spec.position == "learned" and spec.max_seq_len < case.seq_len:
        spec = spec.with_seq_len(case.seq_len)
    system = resolve_system(cat, gpu=gpu, gpus_per_node=n_gpus)
    p = predict(spec, system, ParallelPlan(num_gpus=n_gpus, gpus_per_node=n_gpus),
                TrainingConfig(seq_len=case.seq_len, micro_batch=case.micro_batch,
                               recompute=case.recompute, precision="bf16", reduce_dtype="fp32",
                               flash_attention=True))
    mem = p.to_dict()["memory"]
    return {
        "predicted_step_s": p.step_time_s,
        "predicted_tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
        "predicted_peak_bytes": mem["peak_bytes"],
        "predicted_allocated_bytes": (mem["peak_bytes"] - mem["runtime_reserved_bytes"]
                                      - mem["fragmentation_bytes"]),
        "inter_node_gbps_per_gpu": (system.inter_node_bandwidth_bytes_per_s_per_gpu
                                    / GBIT_PER_S_BYTES_PER_S),
    }


def make_row(case: Case, gpu: str, gpu_name: str, n_gpus: int, measured: dict[str, Any],
             versions: dict[str, str], date: str, catalog=None) -> dict[str, Any]:
    """One CSV row: the measurement, fsdpsim's prediction and their ratios.

    ``measured`` has ``step_s`` (median), ``steps``, ``max_allocated_bytes``,
    ``max_reserved_bytes`` and optionally ``error`` (the run failed: the row is kept with a
    ``skip`` reason so ``fsdpsim validate`` passes over it).
    """
    pred = predict_case(case, gpu, n_gpus, catalog)
    tokens_per_gpu_step = case.micro_batch * case.seq_len
    error = measured.get("error", "")
    step_s = float("nan") if error else float(measured["step_s"])
    measured_tps = tokens_per_gpu_step / step_s if not error else float("nan")
    allocated = float(measured.get("max_allocated_bytes", float("nan")))
    share = f"-at{case.target_share:g}" if case.target_share else ""
    row = {
        "id": (f"{gpu}-x{n_gpus}-{case.model}-s{case.seq_len}-b{case.micro_batch}-"
               f"{case.recompute}{share}"),
        "date": date, "gpu_name": gpu_name, "gpu": gpu, "n_gpus": n_gpus,
        "gpus_per_node": n_gpus, "inter_node_gbps_per_gpu": pred["inter_node_gbps_per_gpu"],
        "model": case.model, "seq_len": case.seq_len, "micro_batch": case.micro_batch,
        "grad_accum": 1, "sharding": "full", "recompute": case.recompute, "precision": "bf16",
        "reduce_dtype": "fp32", "attention": "sdpa", "steps": measured.get("steps", 0),
        "measured_step_s": step_s, "predicted_step_s": pred["predicted_step_s"],
        "step_ratio": step_s / pred["predicted_step_s"],
        "measured_tokens_per_s_per_gpu": measured_tps,
        "predicted_tokens_per_s_per_gpu": pred["predicted_tokens_per_s_per_gpu"],
        "tokens_per_s_per_gpu": measured_tps,
        "max_allocated_bytes": allocated,
        "max_reserved_bytes": float(measured.get("max_reserved_bytes", float("nan"))),
        "predicted_peak_bytes": pred["predicted_peak_bytes"],
        "predicted_allocated_bytes": pred["predicted_allocated_bytes"],
        "memory_ratio": allocated / pred["predicted_allocated_bytes"],
        "target_share": case.target_share if case.target_share else float("nan"),
        "ballast_bytes": float(measured.get("ballast_bytes", 0)),
        "num_alloc_retries": float(measured.get("num_alloc_retries", float("nan"))),
        **versions, "skip": error,
    }
    return row


def check_row(row: dict[str, Any], catalog=None) -> list[str]:
    """Problems of one measured row against the *current* fsdpsim (empty: within the bands).

    The prediction is recomputed, not read from the row, so engine or catalog changes are
    checked against the measurement.
    """
    if str(row.get("skip") or "").strip():
        return []
    case = Case(str(row["model"]), int(row["micro_batch"]), str(row["recompute"]),
                int(row["seq_len"]))
    n_gpus = int(row["n_gpus"])
    pred = predict_case(case, str(row["gpu"]), n_gpus, catalog)
    problems = []
    step_ratio = float(row["measured_step_s"]) / pred["predicted_step_s"]
    # Headroom-sweep rows measure what fsdpsim does not model (allocator retries near the
    # limit): their step time is data for that model, not a check of this one.
    headroom_row = str(row.get("target_share", "")).strip() not in ("", "nan")
    if not headroom_row and not STEP_RATIO_BAND[0] <= step_ratio <= STEP_RATIO_BAND[1]:
        problems.append(f"{row['id']}: measured / predicted step time {step_ratio:.2f} is "
                        f"outside {STEP_RATIO_BAND[0]}..{STEP_RATIO_BAND[1]}")
    mem_ratio = float(row["max_allocated_bytes"]) / pred["predicted_allocated_bytes"]
    if not MEMORY_RATIO_BAND[0] <= mem_ratio <= MEMORY_RATIO_BAND[1]:
        problems.append(f"{row['id']}: max_memory_allocated / predicted {mem_ratio:.2f} is "
                        f"outside {MEMORY_RATIO_BAND[0]}..{MEMORY_RATIO_BAND[1]}")
    return problems


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return value


def write_csv(rows: Sequence[dict[str, Any]], path: str | os.PathLike) -> Path:
    """Write ``rows`` with the columns :data:`COLUMNS` (in order) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="raise")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row.get(k, "")) for k in COLUMNS})
    return path


def read_csv(path: str | os.PathLike) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def format_row(row: dict[str, Any]) -> str:
    return (f"{row['gpu']} x{row['n_gpus']} {row['model']:<10} s{row['seq_len']} "
            f"b{row['micro_batch']} {row['recompute']:<4}  step {_ms(row['measured_step_s'])} "
            f"measured vs {_ms(row['predicted_step_s'])} predicted (x{row['step_ratio']:.2f}); "
            f"allocated {_gib(row['max_allocated_bytes'])} vs {_gib(row['predicted_allocated_bytes'])}"
            f" GiB, reserved {_gib(row['max_reserved_bytes'])}"
            + (f"  [{row['skip']}]" if row.get("skip") else ""))


def _ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1e3:.1f} ms"


def _gib(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value / 2**30:.2f}"


# ============================================================================ the GPU runs
def _train_case(case: Case, rank: int, world: int, steps: int, warmup: int,
                device: str = "cuda", ballast: int = 0) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from fsdpsim.presets import get_model
    from fsdpsim.validation.fsdp_runs import _checkpointed_class
    from fsdpsim.validation.reference import build_reference_model

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


def parse_shares(text: str | None) -> list[float]:
    """``--headroom 0.85,0.9`` → [0.85, 0.9]; each in (0, 1]."""
    if not text:
        return []
    try:
        shares = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise GpuCheckError(f"--headroom {text!r}: write shares like 0.85,0.9,0.95") from None
    if not shares or any(not 0 < v <= 1 for v in shares):
        raise GpuCheckError(f"--headroom {text!r}: every share must be in (0, 1]")
    return shares


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
        from fsdpsim.catalog import load_catalog

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
