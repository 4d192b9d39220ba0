"""Cost, energy and time to train in words: predict's report section, the money, duration and
energy cells of every table, and the notes that say what the numbers assume.

No formulas here: every number comes from :func:`fsdpsim.drivers.procurement.run_columns`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from fsdpsim.drivers.procurement import DEFAULT_STORAGE_BYTES_PER_S_PER_GPU, RunAssumptions
from fsdpsim.report.render import key_values

DAY_S = 86_400.0


# -- human units (display only) --------------------------------------------------------------
def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and not math.isfinite(x))


def money(usd: float | None) -> str:
    if _missing(usd):
        return "-"
    if abs(usd) >= 1e6:
        return f"${usd / 1e6:,.2f}M"
    if abs(usd) >= 1e3:
        return f"${usd / 1e3:,.1f}k"
    return f"${usd:,.2f}" if abs(usd) >= 10 else f"${usd:.3f}"


def rate(usd: float) -> str:
    """A rent as listed: ``$6.155``, ``$8.60``."""
    return f"${usd:,.2f}" if round(usd, 2) == usd else f"${usd:,.4g}"


def count(n: float) -> str:
    """Tokens as people say them: ``15T``, ``300B``, ``2.5M``."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:,.4g}{suffix}"
    return f"{n:,.4g}"


def energy(kwh: float | None) -> str:
    if _missing(kwh):
        return "-"
    if abs(kwh) >= 1e6:
        return f"{kwh / 1e6:,.2f} GWh"
    return f"{kwh / 1e3:,.1f} MWh" if abs(kwh) >= 1e3 else f"{kwh:,.1f} kWh"


def short_source(text: str) -> str:
    """A price source for a table: all of it when short, else its first address (the full
    text is in the JSON/CSV)."""
    if len(text) <= 100:
        return text
    for word in text.replace(";", " ").split():
        if word.startswith("http") or "github.com/" in word:
            return word
    return text if len(text) <= 60 else text[:57] + "..."


def duration(seconds: float | None) -> str:
    if _missing(seconds):
        return "-"
    for unit, size in (("days", DAY_S), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.3g} s"


def size(n_bytes: float | None) -> str:
    if _missing(n_bytes):
        return "-"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.1f} {unit}"
    return f"{n_bytes:,.0f} B"


def price_text(d: Mapping[str, Any]) -> str:
    """The rent and where it comes from: ``$6.155 per GPU-hour, on-demand (URL, read DATE)``."""
    if d["price_kind"] is None:
        return "unknown: give --price USD_PER_GPU_HOUR (no rent in the catalog for this GPU)"
    if d["price_kind"] == "--price":
        return f"{rate(d['price_usd_per_gpu_hour'])} per GPU-hour (--price)"
    return (f"{rate(d['price_usd_per_gpu_hour'])} per GPU-hour, {d['price_kind']} "
            f"({short_source(d['price_source'])}, read {d['price_retrieved']}; price_source in "
            "the JSON)")


def run_table(d: Mapping[str, Any], run: RunAssumptions) -> str:
    """predict's section: rent, cost and energy per token, the run without and with failures,
    and the checkpoint plan. ``d`` is the report (``to_dict`` plus
    :func:`fsdpsim.drivers.procurement.prediction_run`)."""
    f = d["failures"]
    gpus = d["plan"]["num_gpus"]
    lines = [f"\ncost, energy and time to train ({count(run.tokens)} tokens)"
             if run.tokens is not None else
             "\ncost, energy and failures (--tokens N adds the time to train N tokens)"]
    rows = [("rent", price_text(d))]
    if _missing(d["cost_usd_per_million_tokens"]) and _missing(d["energy_kwh_per_million_tokens"]):
        rows.append(("per 1M tokens", "-: the configuration does not fit" if not d["fits"]
                     else "-"))
        lines.append(key_values(rows))
        return "\n".join(lines)
    rows.append(("per 1M tokens", f"{money(d['cost_usd_per_million_tokens'])}, "
                                  f"{d['energy_kwh_per_million_tokens']:,.3f} kWh (board power "
                                  f"{_watts(d)} x {gpus:,} GPUs x PUE {d['pue']:g})"
                 if not _missing(d["energy_kwh_per_million_tokens"]) else
                 f"{money(d['cost_usd_per_million_tokens'])}, energy unknown (no TDP)"))
    if run.tokens is not None:
        rows.append(("failure-free", _run_line(d["train_time_s"], d["train_gpu_hours"],
                                               d["train_cost_usd"], d["train_energy_kwh"])))
        rows.append(("with failures", (
            _run_line(f["train_time_s"], f["train_gpu_hours"], f["train_cost_usd"],
                      f["train_energy_kwh"]) + f"; goodput {100 * f['goodput']:.1f} %")
            if not _missing(f["train_time_s"]) else
            "no progress: the job fails more often than it can checkpoint and restart"))
        rows.append(("failures", f"{f['interruptions']:,.1f} expected, one every "
                                 f"{duration(f['job_mtbf_s'])} ({gpus:,} GPUs, one per "
                                 f"{f['gpu_mtbf_s'] / 3600:,.0f} GPU-hours)"
                     if not _missing(f["interruptions"]) else
                     f"one every {duration(f['job_mtbf_s'])}"))
    else:
        rows.append(("failures", f"one every {duration(f['job_mtbf_s'])} ({gpus:,} GPUs, one per "
                                 f"{f['gpu_mtbf_s'] / 3600:,.0f} GPU-hours); goodput "
                                 f"{100 * f['goodput']:.1f} %"))
    rows.append(("checkpoints", f"{size(f['checkpoint_bytes'])} every "
                                f"{duration(f['checkpoint_interval_s'])} (Daly 2006), written in "
                                f"{duration(f['checkpoint_write_s'])} at "
                                f"{size(f['checkpoint_bytes_per_s'])}/s; restart "
                                f"{duration(f['restart_s']) if f['restart_s'] else '0 s'}"))
    lines.append(key_values(rows))
    return "\n".join(lines)


def _run_line(time_s, gpu_hours, cost_usd, energy_kwh) -> str:
    days = "-" if _missing(time_s) else f"{time_s / DAY_S:,.1f} days"
    hours = "-" if _missing(gpu_hours) else f"{gpu_hours:,.0f} GPU-hours"
    return f"{days}, {hours}, {money(cost_usd)}, {energy(energy_kwh)}"


def _watts(d: Mapping[str, Any]) -> str:
    return "-" if _missing(d["board_power_w"]) else f"{d['board_power_w']:,.0f} W"


def assumption_notes(run: RunAssumptions) -> list[str]:
    """One line on what the cost, energy and failure numbers assume (sweep's notes)."""
    storage = ("%.3f GB/s per GPU (Llama 3: 2 TB/s for 16,384 GPUs)"
               % (DEFAULT_STORAGE_BYTES_PER_S_PER_GPU / 1e9) if run.checkpoint_bytes_per_s is None
               else f"{run.checkpoint_bytes_per_s / 1e9:,.4g} GB/s for the job")
    return [f"energy = board power (TDP, or the power cap) x GPUs x time x PUE {run.pue:g}: an "
            "upper bound of accelerator power (CPUs, NICs, switches not counted)",
            "cost = GPU-hours x rent per GPU-hour (--price, else the catalog: a cloud node's "
            "or the GPU's on-demand list rate, or an estimate; price_kind and price_source in "
            "the CSV/JSON)",
            f"failures: one per {run.gpu_mtbf_s / 3600:,.0f} GPU-hours, restart "
            f"{run.restart_s / 60:g} min, checkpoints of parameters and optimizer states at "
            f"{storage}, every Daly (2006) optimum interval; goodput = failure-free time / "
            "expected time"]


__all__ = ["run_table", "assumption_notes", "money", "energy", "duration",
           "short_source"]
