"""The least memory per GPU a model can take on a node shape (full sharding, micro-batch 1 and
full recompute, on every world size), and what ``predict`` says when not even micro-batch 1
of a plan fits."""

from __future__ import annotations

from typing import Any

import numpy as np

from fsdpsim import engine
from fsdpsim.costs.comm import STRATEGY_CODES
from fsdpsim.engine.build import model_inputs, system_inputs, training_inputs
from fsdpsim.hardware.spec import System
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan import frameworks
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig


def full_shard_peaks(spec: ModelSpec, system: System, plan: ParallelPlan,
                     training: TrainingConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Peak memory per GPU with full sharding, micro-batch 1 and full recompute on every world
    size a plan can have on this node shape: the divisors of ``gpus_per_node``, then whole
    nodes doubling up to :data:`fsdpsim.util.numbers.MAX_GPUS`, and the plan's own world.

    One vectorised memory evaluation (padding per world size). Returns (worlds, peak bytes,
    fits), worlds ascending. Memory per GPU does not fall for ever: FSDP2 pads every
    parameter's dim 0 to the shard count (FSDP1 each unit once), so past a few thousand GPUs
    the padded gathers grow (llama3-8b on H100: 11.4 GiB at 8,192 GPUs, 977 GiB at 4,194,304).
    """
    from fsdpsim.util.numbers import MAX_GPUS

    per_node = plan.gpus_per_node
    within = [d for d in range(1, per_node + 1) if per_node % d == 0]  # its divisors
    nodes = per_node * 2 ** np.arange(0, int(np.log2(MAX_GPUS // per_node)) + 1)
    worlds = np.unique(np.concatenate([within, nodes, [plan.num_gpus]])).astype(float)
    x: dict[str, Any] = {}
    x.update(model_inputs(spec, worlds,
                          per_parameter=not frameworks.profile(plan.framework).flat_parameter))
    x.update(system_inputs(system, training.precision))
    x.update({"num_gpus": worlds, "gpus_per_node": per_node,
              "strategy": STRATEGY_CODES["full"], "shard_size": worlds, "replicate_size": 1.0,
              "reshard": 1.0})
    x.update(training_inputs(training))
    x.update({"micro_batch": 1.0, "recompute": engine.RECOMPUTE_CODES["full"], "grad_accum": 1.0})
    out = engine.memory_breakdown(x, ceilings=False)
    peaks = np.broadcast_to(out["peak_bytes"], worlds.shape)
    return worlds, peaks, np.broadcast_to(out["fits"], worlds.shape)


def what_would_fit(spec: ModelSpec, system: System, plan: ParallelPlan,
                    training: TrainingConfig) -> str:
    """The advice when not even micro-batch 1 fits with the plan as given."""
    worlds, peaks, fits = full_shard_peaks(spec, system, plan, training)
    recipe = "with full sharding, micro-batch 1 and full recompute"
    least = int(np.argmin(peaks))
    padding = (f"past {int(worlds[least]):,} GPUs memory per GPU grows again, as FSDP2 pads "
               "every parameter to the shard count")
    if not fits.any():
        return (f"{recipe} it does not fit on 1 to {int(worlds[-1]):,} GPUs either: the least "
                f"memory per GPU is {peaks[least] / 2**30:.1f} GiB, on {int(worlds[least]):,} "
                f"GPUs; {padding}")
    smallest, largest = int(worlds[np.argmax(fits)]), int(worlds[fits][-1])
    here = bool(fits[worlds == plan.num_gpus][0])
    if here:
        return f"{recipe} it fits on these {plan.num_gpus:,} GPUs (and on as few as {smallest:,})"
    if plan.num_gpus > largest:
        return f"{recipe} it fits on {smallest:,} to {largest:,} GPUs; {padding}"
    return f"{recipe} it fits on {smallest:,} GPUs"
