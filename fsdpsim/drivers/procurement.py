"""What a training run costs: rent, energy and time to train, with failures and checkpoints.

One code path for ``predict`` and ``sweep``: :func:`run_columns` turns throughputs and GPU counts
(scalars for one prediction, arrays for a sweep's rows) into every cost, energy, time and
goodput column, through the formulas of :mod:`fsdpsim.costs.economics` (rent and energy per
token) and :mod:`fsdpsim.costs.goodput` (failures, checkpoints, restarts). Each number traces
back to those formulas, the prediction's throughput and one catalog value: the rent of the
accelerator or cloud node (:func:`resolve_price`, with its source and date) and its TDP.

Defaults, each with its source (all overridable, README "Cost, energy and time to train"):

* PUE :data:`DEFAULT_PUE`: the industry average of the Uptime Institute Global Data Center
  Survey 2024 (1.56; hyperscalers report 1.1, Google's fleet 1.09 in 2024);
* failures :data:`DEFAULT_GPU_MTBF_S`: Llama 3's pre-training, 419 unexpected interruptions in
  54 days on 16,384 H100 GPUs (arXiv 2407.21783 §3.3.4): one per 50,677 GPU-hours;
* checkpoint write bandwidth :data:`DEFAULT_STORAGE_BYTES_PER_S_PER_GPU`: the 2 TB/s that
  Llama 3's Tectonic storage sustains (§3.3.1) shared by its 16,384 GPUs, 122 MB/s per GPU;
* restart :data:`DEFAULT_RESTART_S`: 10 minutes, the stall of a fully synchronous job after a
  failure at O(100K) GPUs (Salpekar et al., arXiv 2602.00277, 2026).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from fsdpsim.hardware.spec import Price, System
from fsdpsim.util.numbers import (CHECKPOINT_GB_PER_S, DECIMAL, GPU_MTBF_HOURS,
                                  PRICE_USD_PER_GPU_HOUR, PUE, RESTART_MIN, TRAIN_TOKENS, Rule,
                                  read_number)
from fsdpsim.util.units import HOUR_S

#: Uptime Institute Global Data Center Survey 2024: average annual PUE 1.56 reported by
#: operators for their largest data centre (1.58 in 2023; flat at 1.55-1.59 since 2020).
DEFAULT_PUE = 1.56
#: Llama 3 (arXiv 2407.21783 §3.3.4): 419 unexpected interruptions in 54 days on 16,384 GPUs.
LLAMA3_GPUS, LLAMA3_DAYS, LLAMA3_INTERRUPTIONS = 16_384, 54, 419
DEFAULT_GPU_MTBF_S = LLAMA3_GPUS * LLAMA3_DAYS * 86_400.0 / LLAMA3_INTERRUPTIONS
#: Llama 3 §3.3.1: Tectonic sustains 2 TB/s (7 TB/s peak) for the 16,384-GPU job.
LLAMA3_STORAGE_BYTES_PER_S = 2e12
DEFAULT_STORAGE_BYTES_PER_S_PER_GPU = LLAMA3_STORAGE_BYTES_PER_S / LLAMA3_GPUS
#: Salpekar et al. 2026 (arXiv 2602.00277): 10 minutes of stall per failure, synchronous.
DEFAULT_RESTART_S = 600.0
J_PER_KWH = 3.6e6
#: A job whose expected wall time exceeds its failure-free time this many times makes no
#: progress worth reporting: goodput 0 and no expected time (the notes say why).
NO_PROGRESS_FACTOR = 1e6


@dataclass(frozen=True)
class RunAssumptions:
    """What a buyer sets about a training run, beyond the configuration itself."""

    tokens: float | None = None
    """Tokens to train; None: only the per-token and failure columns [-]."""
    pue: float = DEFAULT_PUE
    """Facility power usage effectiveness [-]."""
    gpu_mtbf_s: float = DEFAULT_GPU_MTBF_S
    """Mean time between job-stopping failures per GPU [s]."""
    checkpoint_bytes_per_s: float | None = None
    """Write bandwidth to storage for the whole job [B/s]; None: the per-GPU default × GPUs."""
    restart_s: float = DEFAULT_RESTART_S
    """Time from a failure until training runs again [s]."""


def read_run_options(options: Mapping[str, Any]) -> RunAssumptions:
    """:class:`RunAssumptions` from option names (``tokens``, ``pue``, ``gpu-mtbf-hours``,
    ``checkpoint-gb-per-s``, ``restart-min``; absent or None: the default), each read by the
    one number reader (:mod:`fsdpsim.util.numbers`)."""
    def get(name):
        value = options.get(name, options.get(name.replace("-", "_")))
        return None if value is None else value

    out: dict[str, Any] = {}
    if get("tokens") is not None:
        out["tokens"] = read_number(get("tokens"), "--tokens", TRAIN_TOKENS)
    if get("pue") is not None:
        out["pue"] = read_number(get("pue"), "--pue", PUE)
    if get("gpu-mtbf-hours") is not None:
        out["gpu_mtbf_s"] = HOUR_S * read_number(get("gpu-mtbf-hours"), "--gpu-mtbf-hours",
                                                 GPU_MTBF_HOURS)
    if get("checkpoint-gb-per-s") is not None:
        out["checkpoint_bytes_per_s"] = 1e9 * read_number(
            get("checkpoint-gb-per-s"), "--checkpoint-gb-per-s", CHECKPOINT_GB_PER_S)
    if get("restart-min") is not None:
        out["restart_s"] = 60.0 * read_number(get("restart-min"), "--restart-min", RESTART_MIN)
    return RunAssumptions(**out)


def read_price(value: Any, what: str = "--price") -> float:
    """A rent per GPU-hour as users write it: ``2.5``, ``$2.5``, ``2.5/h``, ``2.5/gpu-hour``."""
    text = str(value).strip().lower().lstrip("$")
    for suffix in ("/gpu-hour", "/hour", "/hr", "/h"):
        text = text.removesuffix(suffix)
    return read_number(text, what, PRICE_USD_PER_GPU_HOUR)


#: What ``--deadline-days`` and ``--budget-usd`` accept (a run's whole wall time, its rent).
DEADLINE_DAYS = Rule(0.001, 36_525, unit="days")
BUDGET_USD = Rule(1, 1e13, unit="USD", suffixes=DECIMAL)


def read_limits(deadline_days: Any = None, budget_usd: Any = None
                ) -> tuple[float | None, float | None]:
    """``--deadline-days`` (days) and ``--budget-usd`` (``12e6``, ``$12m``: m = million) read
    by the one number reader; None where not given."""
    days = None if deadline_days is None else read_number(deadline_days, "--deadline-days",
                                                          DEADLINE_DAYS)
    usd = None if budget_usd is None else read_number(
        str(budget_usd).strip().lstrip("$"), "--budget-usd", BUDGET_USD)
    return days, usd


def resolve_price(system: System, override_usd_per_gpu_hour: float | None = None
                  ) -> Price | None:
    """The rent per GPU-hour of a run: the user's (``--price``), else the catalog's (the
    cloud node's when one is named, else the accelerator's); None when neither is known."""
    if override_usd_per_gpu_hour is not None:
        return Price(float(override_usd_per_gpu_hour), "--price", "--price", "")
    return system.price


def checkpoint_bytes(n_params, compute_bytes, optimizer, megatron):
    """Bytes of one checkpoint of the model under the recipe's state bytes per parameter
    (:func:`fsdpsim.engine.memory.state_bytes_per_param`; engine codes for ``optimizer`` and
    ``megatron``) [B]."""
    from fsdpsim.costs import goodput
    from fsdpsim.engine.memory import state_bytes_per_param

    param_bytes, _, optimizer_bytes = state_bytes_per_param(compute_bytes, 0.0, optimizer,
                                                            megatron)
    return goodput.checkpoint_bytes(n_params, param_bytes, optimizer_bytes)


#: Longest expected run with failures that is still a number [s] (a million years).
MAX_WALL_S = 1e6 * 365.25 * 86_400.0


def run_columns(*, tokens_per_s, num_gpus, ok, price_usd_per_gpu_hour, tdp_w, power_cap_w,
                checkpoint_bytes_, run: RunAssumptions) -> dict[str, Any]:
    """Every cost, energy, time and failure column of predict's report and sweep's rows.

    Arrays broadcast (one prediction: scalars). NaN where ``ok`` is false (a configuration
    that does not fit, or cannot run) and where an input is unknown (no price, no TDP).

    Parameters
    ----------
    tokens_per_s : job throughput [token/s]
    num_gpus : GPUs in the job, N [-]
    ok : the configuration can run [bool]
    price_usd_per_gpu_hour : rent [USD per GPU-hour] (NaN: unknown)
    tdp_w : thermal design power of one GPU [W] (NaN: unknown)
    power_cap_w : board power limit [W] (inf: none)
    checkpoint_bytes_ : bytes of one checkpoint [B]
    run : the buyer's assumptions (tokens, PUE, failure rate, storage, restart)

    Notes
    -----
    Rent and energy per token are :mod:`fsdpsim.costs.economics` (board power = min(TDP,
    cap): an upper bound of what the GPUs draw; CPUs, NICs and switches not counted). With
    failures (:mod:`fsdpsim.costs.goodput`): the checkpoint interval is Daly's optimum, the
    expected wall time is failure-free time / goodput, and GPU-hours, rent and energy count
    that wall time (GPUs are rented and powered while restarting and redoing lost work).
    """
    import numpy as np  # (not at start-up: the grid and CLI modules import this one)

    from fsdpsim.costs import economics, goodput

    ok = np.asarray(ok, dtype=bool)
    tps = np.where(ok, np.asarray(tokens_per_s, dtype=float), np.nan)
    gpus = np.asarray(num_gpus, dtype=float)
    price_s = np.asarray(price_usd_per_gpu_hour, dtype=float) / HOUR_S
    tdp = np.asarray(tdp_w, dtype=float)
    board_w = np.minimum(tdp, np.asarray(power_cap_w, dtype=float))
    shape = np.broadcast(tps, gpus, price_s, board_w, np.asarray(checkpoint_bytes_)).shape

    def masked(x):
        return np.broadcast_to(np.where(ok, x, np.nan), shape).astype(float)

    out: dict[str, Any] = {
        "price_usd_per_gpu_hour": np.broadcast_to(price_s * HOUR_S, shape).astype(float),
        "tdp_w": np.broadcast_to(tdp, shape).astype(float),
        "board_power_w": np.broadcast_to(board_w, shape).astype(float),
        "pue": np.full(shape, float(run.pue)),
        "cost_usd_per_million_tokens": masked(
            1e6 * economics.cost_per_token_usd(price_s, gpus, tps)),
        "energy_kwh_per_million_tokens": masked(
            1e6 * economics.energy_per_token_j(board_w, gpus, tps, run.pue) / J_PER_KWH),
    }
    # -- failures: interval, goodput (no throughput needed) ----------------------------------
    storage = (DEFAULT_STORAGE_BYTES_PER_S_PER_GPU * gpus if run.checkpoint_bytes_per_s is None
               else np.asarray(run.checkpoint_bytes_per_s, dtype=float))
    mtbf = goodput.job_mtbf_s(run.gpu_mtbf_s, gpus)
    delta = goodput.checkpoint_write_s(checkpoint_bytes_, storage)
    tau = goodput.daly_interval_s(delta, mtbf)
    log_factor = goodput.log_wall_time_factor(tau, delta, run.restart_s, mtbf)
    progress = log_factor <= math.log(NO_PROGRESS_FACTOR)
    fraction = np.where(progress, np.exp(-np.minimum(log_factor, math.log(NO_PROGRESS_FACTOR))),
                        0.0)
    out.update({
        "failures.gpu_mtbf_s": masked(float(run.gpu_mtbf_s)),
        "failures.job_mtbf_s": masked(mtbf),
        "failures.restart_s": masked(float(run.restart_s)),
        "failures.checkpoint_bytes": masked(checkpoint_bytes_),
        "failures.checkpoint_bytes_per_s": masked(storage),
        "failures.checkpoint_write_s": masked(delta),
        "failures.checkpoint_interval_s": masked(tau),
        "failures.goodput": masked(fraction),
    })
    if run.tokens is None:
        return out
    # -- a whole run: failure-free, then with failures ---------------------------------------
    time_s = economics.time_to_train_s(run.tokens, tps)
    with np.errstate(over="ignore", divide="ignore"):
        wall_s = time_s / np.maximum(fraction, 1e-300)
    # A run that would take more than a million years with its failures does not finish: no
    # number (as a run that makes no progress), not an overflow.
    wall_s = np.where(progress & (wall_s <= MAX_WALL_S), wall_s, np.nan)
    out.update({
        "train_tokens": masked(float(run.tokens)),
        "train_time_s": masked(time_s),
        "train_gpu_hours": masked(gpus * time_s / HOUR_S),
        "train_cost_usd": masked(economics.training_cost_usd(run.tokens, price_s, gpus, tps)),
        "train_energy_kwh": masked(economics.training_energy_j(run.tokens, board_w, gpus, tps,
                                                               run.pue) / J_PER_KWH),
        "failures.train_time_s": masked(wall_s),
        "failures.train_gpu_hours": masked(gpus * wall_s / HOUR_S),
        "failures.train_cost_usd": masked(price_s * gpus * wall_s),
        "failures.train_energy_kwh": masked(board_w * gpus * wall_s * run.pue / J_PER_KWH),
        "failures.interruptions": masked(goodput.expected_interruptions(wall_s, mtbf)),
    })
    return out


def prediction_run(prediction, system: System, run: RunAssumptions,
                   price_override: float | None = None) -> dict[str, Any]:
    """The cost/energy/time/failure part of predict's report for one prediction: the columns
    of :func:`run_columns` (dotted names as nested objects), ``price_kind``, ``price_source``
    and ``price_retrieved``. Unknown or not applicable: None."""
    import numpy as np

    price = resolve_price(system, price_override)
    v, x = prediction.values, prediction.inputs
    cols = run_columns(
        tokens_per_s=v["tokens_per_s"], num_gpus=prediction.plan["num_gpus"],
        ok=bool(v["fits"]) and bool(v.get("pipeline_ok", True)),
        price_usd_per_gpu_hour=np.nan if price is None else price.usd_per_gpu_hour,
        tdp_w=np.nan if system.accelerator.tdp_w is None else system.accelerator.tdp_w,
        power_cap_w=np.inf if system.power_cap_w is None else system.power_cap_w,
        checkpoint_bytes_=checkpoint_bytes(x["n_params"], x["compute_bytes"], x["optimizer"],
                                           x["megatron"]),
        run=run)
    out: dict[str, Any] = {"price_kind": price.kind if price else None,
                           "price_source": price.source if price else None,
                           "price_retrieved": price.retrieved if price else None}
    for key, value in cols.items():
        number = float(np.asarray(value).reshape(-1)[0])
        node = out
        *parents, leaf = key.split(".")
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = number if math.isfinite(number) else None
    return out


def run_summary(run: Mapping[str, Any]) -> dict[str, Any]:
    """The cost, energy and time of one plan as every command reports them (compare's columns,
    search's plans): from :func:`prediction_run`'s dict, the failure-free run under predict's
    and sweep's names (``train_cost_usd``, ``train_energy_kwh``) and the whole run with failures
    (Daly's checkpoints, restarts: goodput) under ``failures.*`` as sweep names them. Days =
    seconds / 86,400. None where unknown (no price, no ``--tokens``, a plan that cannot run)."""
    f = run.get("failures") or {}

    def days(seconds):
        return None if seconds is None else seconds / 86_400.0

    return {
        "price_usd_per_gpu_hour": run.get("price_usd_per_gpu_hour"),
        "cost_usd_per_million_tokens": run.get("cost_usd_per_million_tokens"),
        "energy_kwh_per_million_tokens": run.get("energy_kwh_per_million_tokens"),
        "goodput": f.get("goodput"),
        "train_tokens": run.get("train_tokens"),
        "train_days": days(run.get("train_time_s")),
        "train_cost_usd": run.get("train_cost_usd"),
        "train_energy_kwh": run.get("train_energy_kwh"),
        "failures.train_days": days(f.get("train_time_s")),
        "failures.train_cost_usd": f.get("train_cost_usd"),
        "failures.train_energy_kwh": f.get("train_energy_kwh"),
    }


def within_limits(summary: Mapping[str, Any], deadline_days: float | None = None,
                  budget_usd: float | None = None) -> bool:
    """Whether a plan's whole run (:func:`run_summary`, with failures) ends within
    ``deadline_days`` and costs at most ``budget_usd`` (None: no limit); a plan without the
    number (no price, cannot run) is not within it."""
    for value, limit in ((summary.get("failures.train_days"), deadline_days),
                         (summary.get("failures.train_cost_usd"), budget_usd)):
        if limit is not None and (value is None or not math.isfinite(value) or value > limit):
            return False
    return True


def price_columns(prices: list[Price | None]) -> dict[str, list[Any]]:
    """``price_kind``, ``price_source``, ``price_retrieved`` for a list of prices (None:
    unknown), in the order given."""
    return {"price_kind": [p.kind if p else None for p in prices],
            "price_source": [p.source if p else None for p in prices],
            "price_retrieved": [p.retrieved if p else None for p in prices]}


__all__ = ["RunAssumptions", "read_run_options", "read_price", "resolve_price",
           "checkpoint_bytes", "run_columns", "prediction_run", "price_columns", "run_summary",
           "within_limits", "read_limits",
           "DEFAULT_PUE", "DEFAULT_GPU_MTBF_S", "DEFAULT_STORAGE_BYTES_PER_S_PER_GPU",
           "DEFAULT_RESTART_S"]
