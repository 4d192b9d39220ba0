"""Cases, predictions and CSV rows of ``validation/gpu_check.py`` (real FSDP2 steps on CUDA GPUs
against fsdpsim), kept importable without the script: what a measured row holds, how fsdpsim
predicts it, and the bands a committed row must stay within (checked by
``tests/test_gpu_check.py``). The script adds the training, the process launch and the CLI.
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from fsdpsim.util.errors import ConfigError

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
    from fsdpsim.model.presets import get_model

    get_model(case.model)  # a clear error for an unknown preset
    return case


# ============================================================================ the prediction
def predict_case(case: Case, gpu: str, n_gpus: int, catalog=None) -> dict[str, float]:
    """fsdpsim's step time, throughput and memory for ``case`` on ``n_gpus`` GPUs of one node."""
    from fsdpsim.hardware.catalog import load_catalog
    from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
    from fsdpsim.drivers.predict import predict
    from fsdpsim.model.presets import get_model
    from fsdpsim.hardware.system import resolve_system
    from fsdpsim.util.units import GBIT_PER_S_BYTES_PER_S

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
            f"allocated {_gib(row['max_allocated_bytes'])} vs "
            f"{_gib(row['predicted_allocated_bytes'])}"
            f" GiB, reserved {_gib(row['max_reserved_bytes'])}"
            + (f"  [{row['skip']}]" if row.get("skip") else ""))


def _ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1e3:.1f} ms"


def _gib(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value / 2**30:.2f}"


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
