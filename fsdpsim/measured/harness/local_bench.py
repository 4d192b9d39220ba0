"""Measure this machine with torch micro-benchmarks and write it as a catalog entry.

``fsdpsim calibrate --local`` runs :func:`measure_local` and writes
:func:`~fsdpsim.measured.harness.local_entry.catalog_toml`: an ``[[accelerator]]`` (one gloo rank
with one intra-op thread, the way :func:`fsdpsim.measured.harness.fsdp_runs.launch` runs ranks), a
``[[network]]`` and a ``[[node]]`` of ``ranks`` such accelerators, so that ``fsdpsim --catalog DIR
predict --cluster local-node`` predicts FSDP steps on this host. Every value is measured, on all
ranks at once (they share the cores and the memory bus, as in a real run), and the fit is the
engine's own law:

* dense peak [FLOP/s] = the best measured matmul rate over a shape sweep (median of samples
  per shape). ``matmul_fraction``, ``matmul_half_k`` and ``matmul_half_gflop`` are fitted
  (``scipy.optimize.least_squares``, log residuals) to the whole sweep with
  :func:`fsdpsim.costs.compute.gemm_time_s`, the function the engine calls. The fraction is
  free (not 1 by construction) because the law is monotone in size while a CPU's best shape
  is often a mid-size one that fits its caches: with the fraction pinned at 1, the large
  GEMMs of a transformer were predicted up to 2x too fast.
* bf16 peak: measured the same way, and written only when the CPU has native bf16 dot
  products (``avx512_bf16`` or ``amx_bf16`` in ``/proc/cpuinfo``); elsewhere torch converts
  through fp32 and a "peak" would mislead.
* memory bandwidth [B/s] = the best of a large ``copy_`` (read + write) and axpy
  ``y += a·x`` (2 reads + 1 write) on arrays far larger than the caches; ``hbm_fraction`` = 1.
* link = the gloo all-gather between the ranks on this host: ``t(M) = (W−1)·(α + M/W/busbw)``
  fitted over message sizes (M = gathered output bytes; nccl-tests busbw convention, the
  engine's :func:`fsdpsim.costs.comm.ring_time_s`); ``link_fraction`` = 1. The reduce-scatter
  is measured too and reported (the engine has one link rate for both).
* ``kernel_overhead_us`` = the time of one tiny in-place op in a loop (dispatcher overhead).
* ``comm_compute_slowdown`` = matmul rate alone / matmul rate while an all-gather is in
  flight − 1 (gloo runs collectives on its own threads, on the same cores).
* attention: ``scaled_dot_product_attention`` (causal) at two lengths, fraction and half-rate
  key length fitted to :func:`fsdpsim.costs.compute.attention_time_s`.
* memory: ``MemTotal`` of ``/proc/meminfo`` (``memory_gib``); the ranks share it, so
  ``memory_usable_gib`` is that / ranks. ``runtime_reserved_gib`` = a rank's resident memory
  after importing torch and joining the group.

:func:`fsdp_step_times` (a :func:`launch` worker) times real FSDP2 training steps of the
reference model, for comparing with the prediction (``tests/test_local_step.py``).

torch is imported inside the functions: importing this module does not import torch.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fsdpsim.costs.compute import attention_time_s, gemm_time_s
from fsdpsim.model.spec import ModelSpec
from fsdpsim.measured.harness.local_entry import (  # noqa: F401  (re-exported)
    ACCELERATOR_ID,
    NETWORK_ID,
    NODE_ID,
    LocalMeasurement,
    catalog_entries,
    catalog_toml,
    out_of_range,
)

FP32_BYTES = 4.0
#: Native bf16 dot-product instructions (x86 flags in /proc/cpuinfo).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


# ============================================================================ settings
@dataclass(frozen=True)
class BenchConfig:
    """What :func:`measure_local` runs; :meth:`quick` is a reduced budget for tests."""

    ranks: int = 2
    """Processes (one intra-op thread each) measured at once; the node's ``gpus_per_node``."""
    sample_s: float = 0.03
    """Target duration of one timed sample [s]; each value is the median of ``samples``."""
    samples: int = 7
    copy_mib: int = 64
    """Size of each array in the bandwidth test [MiB] (far beyond the caches)."""
    gemm_cubes: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512, 1024)
    """Square GEMMs s × s × s (the small-size tail: Hockney n_1/2)."""
    gemm_k_sweep: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)
    """512 × 512 × k GEMMs (the tile law in the reduction length)."""
    gemm_model_dims: tuple[int, ...] = (256, 512)
    """Transformer GEMMs at 1,024 tokens for these widths d: QKV, out, MLP up, down, and the
    weight gradient of MLP up (k = tokens)."""
    gather_bytes: tuple[int, ...] = (4096, 65536, 524288, 4194304, 16777216)
    """All-gather output sizes [B] for the alpha-beta fit."""
    attention_lens: tuple[int, ...] = (256, 1024)

    @classmethod
    def quick(cls, ranks: int = 2) -> BenchConfig:
        return cls(ranks=ranks, sample_s=0.008, samples=3, copy_mib=32,
                   gemm_cubes=(16, 64, 128, 256, 512), gemm_k_sweep=(16, 64, 256, 1024),
                   gemm_model_dims=(256,), gather_bytes=(4096, 262144, 4194304, 16777216),
                   attention_lens=(256, 512))


def gemm_shapes(cfg: BenchConfig) -> list[tuple[int, int, int]]:
    """(m, n, k) of every GEMM in the sweep, in order, without repeats."""
    tokens = 1024
    shapes = [(s, s, s) for s in cfg.gemm_cubes] + [(512, 512, k) for k in cfg.gemm_k_sweep]
    for d in cfg.gemm_model_dims:
        shapes += [(tokens, 3 * d, d), (tokens, d, d), (tokens, 4 * d, d), (tokens, d, 4 * d),
                   (4 * d, d, tokens)]
    return list(dict.fromkeys(shapes))


# ============================================================================ host facts
def cpu_model() -> str:
    """``model name`` of the first processor in /proc/cpuinfo (else ``platform.processor``)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_vendor() -> str:
    text = cpu_model().lower()
    for key, name in (("amd", "AMD"), ("intel", "Intel"), ("arm", "Arm"), ("neoverse", "Arm")):
        if key in text:
            return name
    return "unknown"


def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _proc_kib_bytes(path: str, key: str) -> float | None:
    """The ``key:  N kB`` line of a /proc status file in bytes, or None when absent."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    return None


def memory_total_bytes() -> float:
    """Physical memory [B]: ``MemTotal`` of /proc/meminfo, else ``os.sysconf``."""
    total = _proc_kib_bytes("/proc/meminfo", "MemTotal")
    if total is not None:
        return total
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _resident_bytes() -> float:
    return _proc_kib_bytes("/proc/self/status", "VmRSS") or 0.0


# ============================================================================ the worker
def _median_time_s(fn, sample_s: float, samples: int) -> float:
    """Median seconds per call of ``fn`` over ``samples`` samples of about ``sample_s`` each."""
    fn()  # warm-up (allocations, kernel selection)
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    reps = max(1, min(10_000, int(sample_s / one)))
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        out.append((time.perf_counter() - t0) / reps)
    return statistics.median(out)


def _gemm_rates(shapes, dtype, cfg: BenchConfig) -> list[float]:
    import torch

    times = []
    for m, n, k in shapes:
        a = torch.randn(m, k, dtype=dtype)
        b = torch.randn(k, n, dtype=dtype)
        c = torch.empty(m, n, dtype=dtype)
        times.append(_median_time_s(lambda: torch.mm(a, b, out=c), cfg.sample_s, cfg.samples))
    return times


def _collective_times(op: str, sizes: Sequence[int], world: int, cfg: BenchConfig) -> list[float]:
    """Seconds per call of a gloo all-gather / reduce-scatter of ``sizes`` full-buffer bytes.

    The number of calls per sample depends on the size only, so every rank issues the same.
    """
    import torch
    import torch.distributed as dist

    out = []
    for size in sizes:
        full = torch.zeros(size // 4, dtype=torch.float32)
        shard = torch.zeros(size // 4 // world, dtype=torch.float32)
        if op == "all_gather":
            call = lambda: dist.all_gather_single(full, shard)  # noqa: E731
        else:
            call = lambda: dist.reduce_scatter_single(shard, full)  # noqa: E731
        reps = max(2, min(200, (16 << 20) // size))
        call()
        per_sample = []
        for _ in range(cfg.samples):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(reps):
                call()
            per_sample.append((time.perf_counter() - t0) / reps)
        out.append(statistics.median(per_sample))
    return out


def _overlap_rates(world: int, cfg: BenchConfig) -> tuple[float, float]:
    """Matmul FLOP/s alone, and while gloo all-gathers are in flight on this rank."""
    import torch
    import torch.distributed as dist

    s = 256
    a, b = torch.randn(s, s), torch.randn(s, s)
    c = torch.empty(s, s)
    flops = 2.0 * s**3
    alone = flops / _median_time_s(lambda: torch.mm(a, b, out=c), cfg.sample_s, cfg.samples)
    size = 16 << 20
    full = torch.zeros(size // 4)
    shard = torch.zeros(size // 4 // world)
    calls, busy_s = 0, 0.0
    dist.barrier()
    for _ in range(4 * cfg.samples):  # same count on every rank
        work = dist.all_gather_single(full, shard, async_op=True)
        t0 = time.perf_counter()
        while not work.is_completed():
            torch.mm(a, b, out=c)
            calls += 1
        busy_s += time.perf_counter() - t0
        work.wait()
    during = flops * calls / busy_s if calls else alone
    return alone, during


def bench_worker(rank: int, world_size: int, cfg: BenchConfig) -> dict[str, Any]:
    """:func:`launch` worker: every measurement on this rank, phases in lockstep."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    res: dict[str, Any] = {"resident_bytes": _resident_bytes()}
    dist.barrier()
    res["gemm_fp32_s"] = _gemm_rates(gemm_shapes(cfg), torch.float32, cfg)
    dist.barrier()
    res["gemm_bf16_s"] = _gemm_rates(gemm_shapes(cfg)[-6:], torch.bfloat16, cfg)
    dist.barrier()
    n = cfg.copy_mib * (1 << 20) // 4
    x, y = torch.ones(n), torch.zeros(n)
    res["copy_bytes_per_s"] = 2 * 4 * n / _median_time_s(lambda: y.copy_(x), cfg.sample_s,
                                                         cfg.samples)
    res["axpy_bytes_per_s"] = 3 * 4 * n / _median_time_s(lambda: y.add_(x, alpha=0.5),
                                                         cfg.sample_s, cfg.samples)
    del x, y
    tiny = torch.zeros(1)
    res["tiny_op_s"] = _median_time_s(lambda: tiny.add_(1.0), cfg.sample_s, cfg.samples)
    att = []
    for s in cfg.attention_lens:
        q, k, v = (torch.randn(1, 4, s, 64) for _ in range(3))
        att.append(_median_time_s(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                  cfg.sample_s, cfg.samples))
    res["attention_s"] = att
    dist.barrier()
    res["all_gather_s"] = _collective_times("all_gather", cfg.gather_bytes, world_size, cfg)
    res["reduce_scatter_s"] = _collective_times("reduce_scatter", cfg.gather_bytes, world_size,
                                                cfg)
    res["overlap_flops_per_s"] = _overlap_rates(world_size, cfg)
    return res


# ============================================================================ fits
def fit_gemm_law(shapes: Sequence[tuple[int, int, int]], times_s: Sequence[float],
                 peak_flops_per_s: float, bandwidth_bytes_per_s: float,
                 elem_bytes: float = FP32_BYTES) -> tuple[float, float, float, float]:
    """Fit :func:`gemm_time_s` to a shape sweep at a given peak and bandwidth.

    Free parameters: the matmul fraction (of ``peak_flops_per_s``, 0.05..1), ``half_k`` [-]
    and ``half_flops`` [FLOP]. Minimises the squared log error of predicted / measured time
    (every shape weighs the same, small or large). Returns (fraction, half_k, half_flops,
    rms log error).
    """
    from scipy.optimize import least_squares

    m, n, k = (np.array(v, dtype=float) for v in zip(*shapes))
    t = np.asarray(times_s, dtype=float)

    def resid(p):  # p = (fraction, half_k, half MFLOP)
        return np.log(gemm_time_s(m, n, k, p[0] * peak_flops_per_s, bandwidth_bytes_per_s,
                                  p[2] * 1e6, p[1], elem_bytes) / t)

    fit = least_squares(resid, x0=[0.8, 16.0, 1.0], bounds=([0.05, 0.0, 0.0], [1.0, 4096.0, 1e7]),
                        x_scale=[0.1, 16.0, 1.0])
    rms = float(np.sqrt(np.mean(fit.fun**2)))
    return float(fit.x[0]), float(fit.x[1]), float(fit.x[2] * 1e6), rms


def fit_alpha_beta(message_bytes: Sequence[float], times_s: Sequence[float],
                   world_size: int) -> tuple[float, float]:
    """Ring all-gather fit ``t = (W−1)·(α + M/W/busbw)`` → (busbw [B/s], α [s]).

    Weighted least squares on relative error (small messages set α, large ones busbw), with
    α ≥ 0 and busbw > 0 (:func:`fsdpsim.costs.comm.ring_time_s`'s form).
    """
    from scipy.optimize import least_squares

    size = np.asarray(message_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    steps = world_size - 1.0

    def resid(p):  # p = (alpha [us], seconds per GB of bus traffic)
        return (steps * (p[0] * 1e-6 + size / world_size * p[1] * 1e-9)) / t - 1.0

    guess_per_gb = float(t[-1] / (steps * size[-1] / world_size) * 1e9)
    fit = least_squares(resid, x0=[10.0, guess_per_gb], bounds=([0.0, 1e-6], [1e6, 1e6]))
    return 1e9 / fit.x[1], fit.x[0] * 1e-6


def fit_attention(seq_lens: Sequence[int], times_s: Sequence[float], heads_dim: int,
                  peak_flops_per_s: float) -> tuple[float, float]:
    """(fraction, half_kv) of :func:`attention_time_s` for causal SDPA (kv = s/2), batch 1."""
    from scipy.optimize import least_squares

    s = np.asarray(seq_lens, dtype=float)
    flops = 0.5 * 4.0 * s**2 * heads_dim
    t = np.asarray(times_s, dtype=float)

    def resid(p):
        return np.log(attention_time_s(flops, peak_flops_per_s, p[0], s / 2.0, p[1]) / t)

    fit = least_squares(resid, x0=[0.3, 16.0], bounds=([0.05, 0.0], [1.0, 65536.0]),
                        x_scale=[0.1, 16.0])
    return float(fit.x[0]), float(fit.x[1])


# ============================================================================ the result
def summarise(per_rank: Sequence[dict[str, Any]], cfg: BenchConfig, elapsed_s: float,
              torch_version: str, flags: frozenset[str] | None = None,
              date: _dt.date | None = None) -> LocalMeasurement:
    """Combine the ranks' raw timings (mean over ranks; collectives: the slowest rank) and fit."""
    def mean(key):
        return np.mean([np.asarray(r[key], dtype=float) for r in per_rank], axis=0)

    shapes = gemm_shapes(cfg)
    t32 = mean("gemm_fp32_s")
    flops = np.array([2.0 * m * n * k for m, n, k in shapes])
    rates = flops / t32
    best = int(np.argmax(rates))
    peak = float(rates[best])
    bw = float(max(mean("copy_bytes_per_s"), mean("axpy_bytes_per_s")))
    fraction, half_k, half_flops, rms = fit_gemm_law(shapes, t32, peak, bw)
    bf16_rates = flops[-6:] / mean("gemm_bf16_s")
    flags = cpu_flags() if flags is None else flags
    gather = [float(max(r["all_gather_s"][i] for r in per_rank))
              for i in range(len(cfg.gather_bytes))]
    scatter = [float(max(r["reduce_scatter_s"][i] for r in per_rank))
               for i in range(len(cfg.gather_bytes))]
    busbw, alpha = fit_alpha_beta(cfg.gather_bytes, gather, cfg.ranks)
    rs_busbw, rs_alpha = fit_alpha_beta(cfg.gather_bytes, scatter, cfg.ranks)
    att_fraction, att_half = fit_attention(cfg.attention_lens, mean("attention_s"), 4 * 64, peak)
    overlap = mean("overlap_flops_per_s")
    notes = []
    if rs_busbw < 0.8 * busbw:
        notes.append(f"gloo reduce-scatter is slower than all-gather ({rs_busbw / 1e9:.2f} vs "
                     f"{busbw / 1e9:.2f} GB/s busbw); the catalog has one link rate, the "
                     "all-gather's, so reduce-scatters are predicted too fast")
    return LocalMeasurement(
        cpu_model=cpu_model(), vendor=cpu_vendor(), date=(date or _dt.date.today()).isoformat(),
        ranks=cfg.ranks, torch_version=torch_version,
        fp32_peak_flops_per_s=peak, fp32_best_shape=shapes[best],
        bf16_peak_flops_per_s=float(bf16_rates.max()),
        bf16_native=bool(set(BF16_FLAGS) & set(flags)),
        gemm_shapes=tuple(shapes), gemm_fp32_s=tuple(float(v) for v in t32),
        matmul_fraction=fraction, matmul_half_k=half_k, matmul_half_flops=half_flops,
        gemm_fit_rms_log_error=rms,
        copy_bytes_per_s=float(mean("copy_bytes_per_s")),
        axpy_bytes_per_s=float(mean("axpy_bytes_per_s")),
        memory_total_bytes=memory_total_bytes(),
        resident_bytes=float(mean("resident_bytes")),
        kernel_overhead_s=float(mean("tiny_op_s")),
        attention_fraction=att_fraction, attention_half_kv=att_half,
        gather_bytes=tuple(cfg.gather_bytes), all_gather_s=tuple(gather),
        reduce_scatter_s=tuple(scatter),
        link_busbw_bytes_per_s=busbw, link_latency_s=alpha,
        reduce_scatter_busbw_bytes_per_s=rs_busbw, reduce_scatter_latency_s=rs_alpha,
        matmul_alone_flops_per_s=float(overlap[0]),
        matmul_during_comm_flops_per_s=float(overlap[1]),
        elapsed_s=elapsed_s, notes=tuple(notes),
    )


def measure_local(cfg: BenchConfig | None = None, *, timeout_s: float = 180.0) -> LocalMeasurement:
    """Run every micro-benchmark on ``cfg.ranks`` spawned gloo ranks and fit the laws.

    Raises :class:`~fsdpsim.measured.harness.fsdp_runs.RunError` when a rank fails or times out.
    """
    import torch

    from fsdpsim.measured.harness.fsdp_runs import launch

    cfg = cfg or BenchConfig()
    t0 = time.perf_counter()
    per_rank = launch(bench_worker, cfg.ranks, (cfg,), timeout_s=timeout_s)
    return summarise(per_rank, cfg, time.perf_counter() - t0, str(torch.__version__))


# ============================================================================ real FSDP steps
def fsdp_step_times(rank: int, world_size: int, spec: ModelSpec, micro_batch: int,
                    seq_len: int, steps: int) -> list[float]:
    """:func:`launch` worker: wall time of each FSDP2 training step on this rank [s].

    The reference model (fp32, manual attention) with ``fully_shard`` on every block and the
    root (torch defaults), AdamW; a step is forward, cross-entropy, backward, ``step`` and
    ``zero_grad``, timed from a barrier to ``loss.item()``.
    """
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from fsdpsim.measured.harness.fsdp_runs import RunCase, _wrap
    from fsdpsim.measured.harness.reference import build_reference_model

    torch.manual_seed(0)
    model = _wrap(build_reference_model(spec, attention="manual"), RunCase("step", spec),
                  world_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(1000 + rank)
    out = []
    for _ in range(steps):
        idx = torch.randint(0, spec.vocab_size, (micro_batch, seq_len), generator=gen)
        dist.barrier()
        t0 = time.perf_counter()
        logits = model(idx)
        loss = F.cross_entropy(logits.flatten(0, 1), idx.roll(-1, dims=1).flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        loss.item()
        out.append(time.perf_counter() - t0)
    return out


def measured_step_s(per_rank: Sequence[Sequence[float]], warmup: int) -> tuple[float, list[float]]:
    """Median over the steps after ``warmup`` of the slowest rank's time; and those times."""
    slowest = [max(ts) for ts in zip(*per_rank)][warmup:]
    if not slowest:
        raise ValueError(f"warmup({warmup}) leaves no timed step of {len(per_rank[0])}")
    return float(statistics.median(slowest)), slowest


__all__ = ["BenchConfig", "LocalMeasurement", "measure_local", "catalog_toml", "catalog_entries",
           "out_of_range", "fit_gemm_law", "fit_alpha_beta", "fit_attention", "fsdp_step_times",
           "measured_step_s"]
