"""The catalog entry of this machine, from a :class:`LocalMeasurement` (no torch needed).

:func:`catalog_toml` writes an ``[[accelerator]]`` ``local-cpu`` (one gloo rank with one
intra-op thread), a ``[[network]]`` ``local-loopback`` and a ``[[node]]`` ``local-node`` of
``ranks`` such accelerators, in the catalog's datasheet units, with a comment on where every
value comes from; :func:`out_of_range` lists the values that ``fsdpsim.hardware.catalog.SCHEMAS``
would refuse. The measurement itself is :mod:`fsdpsim.measured.harness.local_bench`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fsdpsim.util.units import GIB_BYTES

ACCELERATOR_ID = "local-cpu"
NETWORK_ID = "local-loopback"
NODE_ID = "local-node"


@dataclass(frozen=True)
class LocalMeasurement:
    """This host, measured (SI units; every rank-dependent value averaged over ranks)."""

    cpu_model: str
    """``model name`` from /proc/cpuinfo."""
    vendor: str
    date: str
    """ISO date of the measurement."""
    ranks: int
    """Processes measured at once (one intra-op thread each)."""
    torch_version: str
    fp32_peak_flops_per_s: float
    """Best measured fp32 matmul rate of one rank (1 thread) while every rank runs [FLOP/s]."""
    fp32_best_shape: tuple[int, int, int]
    bf16_peak_flops_per_s: float
    """Best measured bf16 matmul rate [FLOP/s]."""
    bf16_native: bool
    """The CPU has native bf16 dot products (only then is a bf16 peak written)."""
    gemm_shapes: tuple[tuple[int, int, int], ...]
    """(m, n, k) of the sweep."""
    gemm_fp32_s: tuple[float, ...]
    """Median time of each sweep GEMM [s]."""
    matmul_fraction: float
    """Fitted rate of large GEMMs / the best measured shape (the law is monotone in size; a
    CPU's best shape can be a mid-size one that fits its caches)."""
    matmul_half_k: float
    """Fitted GEMM tile half-length [-]."""
    matmul_half_flops: float
    """Fitted Hockney n_1/2 [FLOP]."""
    gemm_fit_rms_log_error: float
    """rms of log(predicted / measured) over the sweep [-]."""
    copy_bytes_per_s: float
    """Large ``copy_``: (read + write) bytes / s per rank [B/s]."""
    axpy_bytes_per_s: float
    """Large ``y += a·x``: (2 reads + 1 write) bytes / s per rank [B/s]."""
    memory_total_bytes: float
    """``MemTotal`` [B]."""
    resident_bytes: float
    """Resident memory of a rank after importing torch and joining the group [B]."""
    kernel_overhead_s: float
    """Time of one tiny in-place op [s]."""
    attention_fraction: float
    attention_half_kv: float
    gather_bytes: tuple[int, ...]
    """Message sizes of the collective sweep (full buffer) [B]."""
    all_gather_s: tuple[float, ...]
    """Median time per all-gather, slowest rank [s]."""
    reduce_scatter_s: tuple[float, ...]
    """Median time per reduce-scatter, slowest rank [s]."""
    link_busbw_bytes_per_s: float
    """All-gather bus bandwidth, alpha-beta fit [B/s]."""
    link_latency_s: float
    """All-gather latency per ring step, same fit [s]."""
    reduce_scatter_busbw_bytes_per_s: float
    reduce_scatter_latency_s: float
    matmul_alone_flops_per_s: float
    """256³ matmul rate with no collective in flight [FLOP/s]."""
    matmul_during_comm_flops_per_s: float
    """The same while this rank's gloo all-gathers are in flight [FLOP/s]."""
    elapsed_s: float
    """Wall time of the measurement, spawn included [s]."""
    notes: tuple[str, ...] = field(default=())

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return max(self.copy_bytes_per_s, self.axpy_bytes_per_s)

    @property
    def comm_compute_slowdown(self) -> float:
        """Compute slowdown while a collective is in flight [-]: rate alone / rate during − 1
        (at least 0). On a CPU it can exceed the GPU-sized catalog range: gloo's threads take
        the cores that the ranks compute on."""
        raw = self.matmul_alone_flops_per_s / self.matmul_during_comm_flops_per_s - 1.0
        return float(max(raw, 0.0))

    def summary_lines(self) -> list[str]:
        g = lambda v: f"{v / 1e9:.1f}"  # noqa: E731
        lines = [
            f"{self.cpu_model}, {self.ranks} ranks x 1 thread, torch {self.torch_version}, "
            f"measured in {self.elapsed_s:.1f} s",
            f"  matmul fp32  best {g(self.fp32_peak_flops_per_s)} GFLOP/s per rank at "
            f"{'x'.join(map(str, self.fp32_best_shape))}; fit fraction "
            f"{self.matmul_fraction:.3f}, half_k "
            f"{self.matmul_half_k:.1f}, half {self.matmul_half_flops / 1e9:.4g} GFLOP "
            f"(rms log error {self.gemm_fit_rms_log_error:.2f})",
            f"  matmul bf16  best {g(self.bf16_peak_flops_per_s)} GFLOP/s "
            f"({'native' if self.bf16_native else 'no native bf16: not written'})",
            f"  memory       copy {g(self.copy_bytes_per_s)} GB/s, axpy "
            f"{g(self.axpy_bytes_per_s)} GB/s per rank; RAM "
            f"{self.memory_total_bytes / GIB_BYTES:.1f} GiB",
            f"  gloo         all-gather busbw {g(self.link_busbw_bytes_per_s)} GB/s, latency "
            f"{self.link_latency_s * 1e6:.0f} us; reduce-scatter busbw "
            f"{g(self.reduce_scatter_busbw_bytes_per_s)} GB/s, latency "
            f"{self.reduce_scatter_latency_s * 1e6:.0f} us",
            f"  overheads    tiny op {self.kernel_overhead_s * 1e6:.2f} us; matmul under "
            f"all-gather {g(self.matmul_during_comm_flops_per_s)} vs alone "
            f"{g(self.matmul_alone_flops_per_s)} GFLOP/s "
            f"(slowdown {self.comm_compute_slowdown:.2f})",
            f"  attention    SDPA causal fraction {self.attention_fraction:.2f}, half_kv "
            f"{self.attention_half_kv:.0f}",
        ]
        return lines + [f"  note: {n}" for n in self.notes]


# ============================================================================ the catalog entry
def _num(value: float) -> str:
    """A TOML number with 4 significant digits (always a float: ``95.0``, ``3.52e-02``).

    A fit that ends on a lower bound of 0 returns a residue such as 5.8e-20; the catalog reader
    refuses nonzero values below :data:`fsdpsim.util.numbers.TINY`, so they are written as 0."""
    from fsdpsim.util.numbers import TINY

    text = f"{0.0 if abs(value) < TINY else value:.4g}"
    return text if any(c in text for c in ".en") else text + ".0"


def _str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # JSON string escapes are valid TOML


def catalog_entries(m: LocalMeasurement) -> dict[str, dict[str, Any]]:
    """The three entries as plain dicts in catalog units (keys as in ``catalog.SCHEMAS``)."""
    source = f"fsdpsim calibrate --local on {m.date}, {m.cpu_model}"
    peaks = {"fp32": m.fp32_peak_flops_per_s / 1e12}
    if m.bf16_native:
        peaks["bf16"] = m.bf16_peak_flops_per_s / 1e12
    busbw_gb = m.link_busbw_bytes_per_s / 1e9
    latency_us = m.link_latency_s * 1e6
    accelerator = {
        "id": ACCELERATOR_ID, "name": f"{m.cpu_model}, one rank of {m.ranks} (1 thread each)",
        "vendor": m.vendor,
        "memory_gib": m.memory_total_bytes / GIB_BYTES,
        "memory_usable_gib": m.memory_total_bytes / GIB_BYTES / m.ranks,
        "hbm_bandwidth_tb_per_s": m.bandwidth_bytes_per_s / 1e12,
        "runtime_reserved_gib": m.resident_bytes / GIB_BYTES,
        "allocator_fraction": 0.0,
        "source": source, "retrieved": m.date,
        "peak_dense_tflops": peaks,
        "intra_node_link": {"kind": "gloo-loopback", "gb_per_s_per_direction": busbw_gb,
                            "latency_us": latency_us, "topology": "switch", "source": source},
        "efficiency": {
            "matmul_fraction": m.matmul_fraction, "matmul_half_gflop": m.matmul_half_flops / 1e9,
            "matmul_half_k": m.matmul_half_k,
            "attention_fraction": m.attention_fraction,
            "attention_half_kv": m.attention_half_kv,
            "hbm_fraction": 1.0, "link_fraction": 1.0,
            "kernel_overhead_us": m.kernel_overhead_s * 1e6,
            "comm_compute_slowdown": m.comm_compute_slowdown, "source": source,
        },
    }
    network = {"id": NETWORK_ID, "name": "Loopback: one host, no network", "kind": "local",
               "gbit_per_s_per_nic": busbw_gb * 8.0, "latency_us": latency_us,
               "achievable_fraction": 1.0,
               "fraction_source": "measured gloo all-gather on this host (no inter-node traffic)",
               "source": source, "retrieved": m.date}
    node = {"id": NODE_ID, "name": f"This host as one node of {m.ranks} CPU ranks",
            "accelerator": ACCELERATOR_ID, "gpus_per_node": m.ranks, "nics_per_node": 1,
            "network": NETWORK_ID, "source": source, "retrieved": m.date}
    return {"accelerator": accelerator, "network": network, "node": node}


def out_of_range(entries: dict[str, dict[str, Any]]) -> list[str]:
    """Values that ``fsdpsim.hardware.catalog.SCHEMAS`` would refuse, one line each (empty:
    loads)."""
    from fsdpsim.hardware.catalog import SCHEMAS, Field

    problems = []

    def walk(data, schema, where):
        for key, value in data.items():
            spec = schema.get(key)
            if isinstance(spec, dict):
                walk(value, spec, f"{where}.{key}")
            elif isinstance(spec, Field) and spec.lo is not None and not isinstance(value, str):
                if not spec.lo <= value <= spec.hi:
                    problems.append(f"{where}.{key} = {value:.4g} is outside the catalog range "
                                    f"{spec.describe()}")

    for kind, data in entries.items():
        walk(data, SCHEMAS[kind], kind)
    return problems


def _comments(m: LocalMeasurement) -> dict[str, str]:
    bf16 = ("native avx512_bf16/amx_bf16: best measured bf16 matmul" if m.bf16_native else "")
    return {
        "memory_gib": "MemTotal of /proc/meminfo",
        "memory_usable_gib": f"shared by the {m.ranks} ranks of the node",
        "hbm_bandwidth_tb_per_s": (f"best of copy {m.copy_bytes_per_s / 1e9:.1f} and axpy "
                                   f"{m.axpy_bytes_per_s / 1e9:.1f} GB/s (read + write bytes), "
                                   "every rank at once"),
        "runtime_reserved_gib": "resident memory of a rank after importing torch",
        "allocator_fraction": "host malloc: not modelled",
        "fp32": ("best measured fp32 matmul, one thread, every rank at once, at "
                 + "x".join(map(str, m.fp32_best_shape))),
        "bf16": bf16,
        "gb_per_s_per_direction": "gloo all-gather busbw, alpha-beta fit over message sizes",
        "latency_us": "gloo all-gather latency per ring step (same fit)",
        "matmul_fraction": "fitted with the two below: large GEMMs / the best measured shape",
        "matmul_half_gflop": "fitted to the shape sweep (engine's gemm_time_s)",
        "matmul_half_k": f"fitted; rms log error {m.gemm_fit_rms_log_error:.2f}",
        "attention_fraction": "SDPA causal, fitted with attention_half_kv",
        "hbm_fraction": "1: relative to the measured bandwidth",
        "link_fraction": "1: relative to the measured busbw",
        "kernel_overhead_us": "one tiny in-place op in a loop",
        "comm_compute_slowdown": "matmul rate alone / while a gloo all-gather runs - 1",
    }


def _table(lines: list[str], prefix: str, data: dict[str, Any], comments: dict[str, str]) -> None:
    subtables = []
    for key, value in data.items():
        if isinstance(value, dict):
            subtables.append((key, value))
            continue
        if key == "retrieved":
            text = value  # a TOML local date
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        elif isinstance(value, float):
            text = _num(value)
        else:
            text = _str(value)
        note = comments.get(key, "")
        lines.append(f"{key} = {text}" + (f"  # {note}" if note else ""))
    for key, value in subtables:
        lines.append("")
        lines.append(f"[{prefix}.{key}]")
        _table(lines, f"{prefix}.{key}", value, comments)


def catalog_toml(m: LocalMeasurement) -> str:
    """The catalog file text: header with the raw measurements, then the three entries."""
    entries = catalog_entries(m)
    lines = [f"# Written by `fsdpsim calibrate --local` on {m.date} (torch {m.torch_version}).",
             f"# Host: {m.cpu_model}; {m.ranks} gloo ranks x 1 intra-op thread, measured at once.",
             "# One 'accelerator' is one such rank. Use: fsdpsim --catalog <this folder> predict",
             f"#   --cluster {NODE_ID} --num-gpus {m.ranks} --precision fp32 --eager-attention ...",
             "# Raw timings (median per value):"]
    lines += ["#   " + line.strip() for line in m.summary_lines()[1:]]
    for problem in out_of_range(entries):
        lines.append(f"# WARNING: {problem}")
    comments = _comments(m)
    for kind in ("accelerator", "network", "node"):
        lines += ["", f"[[{kind}]]"]
        _table(lines, kind, entries[kind], comments if kind == "accelerator" else {})
    return "\n".join(lines) + "\n"


