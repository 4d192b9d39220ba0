"""What a search ranks plans by and within what memory: the objectives (throughput, cost,
energy, time to train) as scores, larger is better, and the memory budget a searched plan
may use."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from fsdpsim import engine
from fsdpsim.hardware.spec import System
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.units import GIB_BYTES

OBJECTIVES = ("throughput", "cost", "energy", "time-to-train")

#: The memory a searched plan may use by default, as a share of the GPU's: predict's own rule
#: (``auto`` prefers candidates below :data:`fsdpsim.engine.MEMORY_PRESSURE_FRACTION` of
#: memory and notes those above as near the limit, where allocator retries and fragmentation
#: slow or stop real runs) [-].
DEFAULT_MEMORY_BUDGET_FRACTION = engine.MEMORY_PRESSURE_FRACTION


def budget_system(system: System, budget_gib: float | None,
                  fraction: float = DEFAULT_MEMORY_BUDGET_FRACTION) -> System:
    """``system`` with each GPU's memory set to the budget: ``budget_gib``, or (None)
    ``fraction`` of the GPU's own; a budget above the GPU's memory is an error naming both."""
    have = system.accelerator.memory_bytes / GIB_BYTES
    if budget_gib is None:
        budget_gib = fraction * have
    if not 0 < budget_gib <= have + 1e-9:
        raise ConfigError(f"--memory-budget-gib {budget_gib:g} is not accepted; accepted: more "
                          f"than 0 and at most the {system.accelerator.name}'s {have:.1f} GiB")
    acc = replace(system.accelerator, memory_bytes=budget_gib * GIB_BYTES)
    return replace(system, accelerator=acc)


def score_of(objective: str, tokens_per_s, num_gpus: int, system: System, run=None,
             checkpoint_bytes: float = 0.0, price: float | None = None) -> np.ndarray:
    """The objective as a score, larger is better and increasing in throughput for a fixed GPU
    count (so the throughput bound of step 3 bounds every objective):

    - throughput: tokens/s;
    - cost: −USD per million tokens, the rent of the expected wall time with failures
      (:func:`fsdpsim.drivers.procurement.run_columns`: Daly's checkpoint interval);
    - energy: −kWh per million tokens, likewise;
    - time-to-train: −the expected wall time with failures (``--tokens``; without it, per token).
    """
    tps = np.asarray(tokens_per_s, dtype=float)
    if objective == "throughput":
        return tps
    from fsdpsim.drivers import procurement

    price = procurement.resolve_price(system, price)
    run = run or procurement.RunAssumptions()
    acc = system.accelerator
    cols = procurement.run_columns(
        tokens_per_s=np.maximum(tps, 1e-300), num_gpus=num_gpus, ok=True,
        price_usd_per_gpu_hour=np.nan if price is None else price.usd_per_gpu_hour,
        tdp_w=np.nan if acc.tdp_w is None else acc.tdp_w,
        power_cap_w=np.inf if system.power_cap_w is None else system.power_cap_w,
        checkpoint_bytes_=checkpoint_bytes, run=run)
    good = np.maximum(cols["failures.goodput"], 1e-300)
    if objective == "cost":
        value = cols["cost_usd_per_million_tokens"] / good
        if value.size and np.all(np.isnan(value)):
            raise ConfigError(f"--objective cost needs a price for {system.label}: give "
                              "--price USD per GPU-hour or a catalog price")
    elif objective == "energy":
        value = cols["energy_kwh_per_million_tokens"] / good
        if value.size and np.all(np.isnan(value)):
            raise ConfigError(f"--objective energy needs the board power of {system.label}")
    elif objective == "time-to-train":
        tokens = run.tokens or 1.0
        value = tokens / np.maximum(tps, 1e-300) / good
    else:
        raise ConfigError(f"--objective {objective!r} is not accepted; accepted: "
                          f"{', '.join(OBJECTIVES)}")
    return np.where(tps > 0, -value, -np.inf)



def scorer(objective, num_gpus, system, run, ckpt, price) -> Callable[[np.ndarray], np.ndarray]:
    """The objective as a function of tokens/s (:func:`score_of`); raises at once without a
    price."""
    if objective == "throughput":
        return lambda tps: np.asarray(tps, dtype=float)
    score_of(objective, np.ones(1), num_gpus, system, run, ckpt, price)  # raises without a price
    return lambda tps: score_of(objective, tps, num_gpus, system, run, ckpt, price)

