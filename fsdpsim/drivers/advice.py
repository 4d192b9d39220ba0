"""Scale advice: a faster setting of the same job at this scale, with the number.

At scale the FSDP shard group's collectives cost more per byte (ring latency grows with the
ranks, the fabric loses bandwidth with the nodes: :mod:`fsdpsim.costs.nccl`), and production
keeps the shard group small: HSDP / MiCS / ZeRO++ hpZ shard within a node or a few and
replicate across (Zhao et al. 2023 §3.2.2; network_at_scale.md §4, §8.1). A larger micro-batch
amortises each gather over more tokens (the seed paper's critical tokens per GPU). This module
predicts those alternatives with the same :func:`fsdpsim.drivers.predict.predict` and names the best
one when it is faster by at least :data:`MIN_GAIN`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fsdpsim.util.errors import ConfigError
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig

#: Advice is given when an alternative is at least this much faster (below it, the difference
#: is inside the model's own uncertainty at scale).
MIN_GAIN = 0.03


def alternatives(plan: ParallelPlan, training: TrainingConfig) -> list[tuple[str, ParallelPlan,
                                                                             TrainingConfig]]:
    """``(words, plan, training)`` of the settings worth trying: HSDP with shard groups of one
    node, then doubling, for a fully sharded multi-node data-parallel plan; twice (four times)
    the micro-batch when the user fixed it and the per-GPU batch allows."""
    out = []
    data_parallel = plan.tp == plan.pp == plan.cp == 1
    if data_parallel and plan.sharding in ("full", "hybrid") and plan.num_gpus > plan.gpus_per_node:
        size = plan.gpus_per_node
        current = plan.shard_group
        while size < plan.num_gpus:
            if plan.num_gpus % size == 0 and size != current:
                try:  # (the expert mesh may not split into these replicas)
                    hsdp = dataclasses.replace(plan, sharding="hybrid", shard_group_size=size)
                except ConfigError:
                    size *= 2
                    continue
                out.append((f"HSDP with shard groups of {size:,} GPUs (--sharding hybrid "
                            f"--shard-group-size {size})", hsdp, training))
            size *= 2
    if training.micro_batch is not None:
        for factor in (2, 4):
            mb = training.micro_batch * factor
            out.append((f"micro-batch {mb} (--micro-batch {mb})", plan,
                        dataclasses.replace(training, micro_batch=mb)))
    return out


def scale_advice(spec: ModelSpec, system, plan: ParallelPlan, training: TrainingConfig,
                 prediction) -> list[dict[str, Any]]:
    """The alternatives (:func:`alternatives`) that fit and are faster than ``prediction`` by at
    least :data:`MIN_GAIN`, best first: ``{"setting", "tokens_per_s_per_gpu", "gain"}``."""
    from fsdpsim.drivers.predict import predict

    base = prediction.tokens_per_s_per_gpu
    found = []
    for words, alt_plan, alt_training in alternatives(plan, training):
        try:
            alt = predict(spec, system, alt_plan, alt_training)
        except ConfigError:  # not a valid setting for this job (batch does not split, ...)
            continue
        gain = alt.tokens_per_s_per_gpu / base - 1.0 if base > 0 else 0.0
        if alt.fits and gain >= MIN_GAIN:
            found.append({"setting": words, "tokens_per_s_per_gpu": alt.tokens_per_s_per_gpu,
                          "gain": gain})
    return sorted(found, key=lambda a: -a["gain"])


#: GPU counts the fit advice searches: the plan's, then doubling this many times.
FIT_DOUBLINGS = 4


#: Candidate plans (the search's upper-bound estimate, every count together) above which
#: :func:`hybrid_fit` gives no advice rather than keep ``predict`` waiting: about a second of
#: search on the development machine (Llama 3 70B on 1,024 GPUs estimates 434,000).
ADVICE_MAX_CANDIDATES = 1_000_000


def hybrid_fit(spec: ModelSpec, system, plan: ParallelPlan, training: TrainingConfig,
               global_batch: int) -> list[tuple[int, Any, bool]]:
    """For a plan that does not fit, what :func:`fsdpsim.drivers.search.run.search` (every
    hybrid plan of the same model, sequence and ``global_batch``) finds instead, as
    ``(num_gpus, choice, within the default budget)``: the best plan on the plan's own GPUs
    within the GPU's whole memory when none fits the default budget (a tight one), then the
    fewest GPUs, of the plan's count and its doublings (:data:`FIT_DOUBLINGS`), on which a plan
    fits the default budget. Empty when neither exists, or when the spaces are too large for
    advice (above :data:`ADVICE_MAX_CANDIDATES` by the search's own upper-bound estimate:
    ``fsdpsim search`` answers those on its own)."""
    from fsdpsim.drivers.search.objective import budget_system
    from fsdpsim.drivers.search.run import search
    from fsdpsim.drivers.search.space import SearchSpace, estimate_size

    training = dataclasses.replace(training, global_batch=global_batch, micro_batch=None,
                                   recompute=None, recompute_layers=None)
    # the default mesh order only: other orders move no bytes into memory (what fits is the
    # same) and cost the advice several times the search
    space = SearchSpace(framework=plan.framework, mesh_orders=False)
    full = system.accelerator.memory_bytes / 2**30

    def best(n: int, budget_gib: float | None):
        try:
            found = search(spec, budget_system(system, budget_gib), n, training, space, top=1)
        except ConfigError:  # no plan of this batch on n GPUs, or none fits
            return None
        return found.top[0] if found.top else None

    counts = [plan.num_gpus * 2 ** k for k in range(FIT_DOUBLINGS + 1)]
    if sum(estimate_size(spec, n, plan.gpus_per_node, training.seq_len, global_batch,
                         space)[1] for n in counts) > ADVICE_MAX_CANDIDATES:
        return []
    out: list[tuple[int, Any, bool]] = []
    for k, n in enumerate(counts):
        choice = best(n, None)
        if choice is not None:
            return out + [(n, choice, True)]
        if k == 0:
            tight = best(n, full)
            if tight is not None:
                out.append((n, tight, False))
    return out
