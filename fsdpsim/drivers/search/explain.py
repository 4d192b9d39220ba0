"""Words for ``fsdpsim search``: a plan in one line, what the runner-up gives up, and clear
messages when constraints leave nothing (with the nearest setting that works)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.knobs import KNOBS, PLAN_SWITCHES
from fsdpsim.plan.parallel import DEFAULT_MESH_ORDER, ParallelPlan, TrainingConfig
from fsdpsim.drivers.search.space import (MAX_CANDIDATES, SearchSpace, enumerate_plans,
                                           estimate_size, meshes)
from fsdpsim.util.units import GIB_BYTES

_SHARDING_WORDS = {"full": "fsdp", "grad_op": "zero2", "optimizer": "zero1", "none": "ddp",
                   "hybrid": "hsdp"}


def plan_line(choice) -> str:
    """The candidate's plan in its one line (:func:`fsdpsim.plan.spelling.format_plan`: what
    ``predict --plan`` reads and every report prints)."""
    from fsdpsim.plan.spelling import format_plan

    return format_plan(choice.run_plan)


def ckpt_text(choice) -> str:
    """The candidate's recompute as the plan's line spells it
    (:func:`fsdpsim.plan.spelling.ckpt_text`: ``ckpt none``, ``ckpt full 12``, ...)."""
    from fsdpsim.plan.spelling import ckpt_text as spelled

    return spelled(choice.recompute, choice.recompute_layers)


def differences(best, other) -> str:
    """What ``other`` does differently from ``best``, in a few words."""
    a, b = best.plan, other.plan
    words = []
    for name in ("tp", "pp", "cp", "vpp", "ep"):
        if getattr(a, name) != getattr(b, name):
            words.append(f"{name} {getattr(b, name)}")
    if (a.sharding, a.dp_shard) != (b.sharding, b.dp_shard):
        words.append(_SHARDING_WORDS[b.sharding]
                     + (f" {b.dp_replicate}x{b.dp_shard}" if b.sharding == "hybrid" else ""))
    schedule = (("pp_schedule", "schedule"),) if a.vpp == b.vpp else ()  # vpp > 1: interleaved
    # a plan switch where its dimension's degree is > 1 (where it is 1 it means nothing)
    switches = tuple((k.name, k.label) for k in (KNOBS[name] for name in PLAN_SWITCHES)
                     if getattr(b, k.dim) > 1)
    for name, label in (*schedule, *switches, ("grad_sync", "grad sync"),
                        ("keep_gathered", "keep gathered"), ("mesh_order", "order")):
        if getattr(a, name) != getattr(b, name):
            value = getattr(b, name)
            if isinstance(value, tuple):
                value = ",".join(d for d in value if b.degrees[d] > 1)
            elif isinstance(value, bool):
                value = "on" if value else "off"
            words.append(f"{label} {value}")
    if (a.pp_first_layers, a.pp_last_layers) != (b.pp_first_layers, b.pp_last_layers):
        words.append("even split" if b.pp_first_layers is None
                     else f"ends {b.pp_first_layers}/{b.pp_last_layers}")
    if ckpt_text(best) != ckpt_text(other):
        words.append(ckpt_text(other))
    if best.micro_batch != other.micro_batch:
        words.append(f"mb {other.micro_batch}")
    return ", ".join(words) or "same plan"


def empty_space_message(spec: ModelSpec, num_gpus: int, per_node: int,
                        training: TrainingConfig, space: SearchSpace) -> str:
    """Why no plan exists, with the nearest setting that has one: each fixed setting is
    relaxed in turn; the values it could take are listed, nearest first."""
    gb = training.global_batch
    head = (f"no plan of {spec.name} on {num_gpus:,} GPUs with "
            + ("the default global batch" if gb is None else f"global_batch({gb})"))
    if space.fixed:
        head += " and " + ", ".join(f"{k}={v}" for k, v in space.fixed.items())
    # the batch first: with one every data-parallel degree divides (the GPU count), which
    # meshes would the constraints allow?
    if gb is None:  # each mesh's default batch divides by its degree: no batch to suggest
        dps = []
    elif estimate_size(spec, num_gpus, per_node, training.seq_len, num_gpus,
                       space)[1] <= MAX_CANDIDATES:
        dps = sorted({plan.dp for plan in enumerate_plans(spec, num_gpus, per_node,
                                                          training.seq_len, num_gpus, space)})
    else:  # too many plans to build: the meshes' degrees (each family's checks not applied),
        # less those that divide the batch (their meshes were tried and hold no plan)
        dps = sorted({dp for *_, dp in meshes(spec, num_gpus, per_node, training.seq_len,
                                              num_gpus, space) if gb % dp})
    if dps:
        multiples = {((gb + d - 1) // d) * d for d in dps} | {gb // d * d for d in dps}
        near = sorted((b for b in multiples if b > 0), key=lambda b: (abs(b - gb), b))[:3]
        return (f"{head}: the global batch must divide by the data-parallel degree of some "
                f"plan ({', '.join(map(str, dps[:8]))}{', ...' if len(dps) > 8 else ''}); "
                f"nearest feasible: --global-batch {', '.join(map(str, near))}")
    options = []  # each fixed setting relaxed in turn (the others kept): what it could be
    for name, value in space.fixed.items():
        others = replace(space, fixed={k: v for k, v in space.fixed.items() if k != name})
        if estimate_size(spec, num_gpus, per_node, training.seq_len, gb,
                         others)[1] > MAX_CANDIDATES:
            continue  # too many plans to list what this setting could be
        seen: set = set()
        for plan in enumerate_plans(spec, num_gpus, per_node, training.seq_len, gb, others):
            seen.add(_setting(plan, name))
            if len(seen) > 64:
                break
        seen.discard(None)
        if seen:
            options.append(", ".join(f"{name}={v}" for v in _nearest(value, seen))
                           + (" (with the other settings kept)" if len(space.fixed) > 1 else ""))
    if options:
        what = ", ".join(f"{k}={v}" for k, v in space.fixed.items())
        verb = "is not possible here" if len(space.fixed) == 1 else "are not possible together"
        return f"{head}: {what} {verb}; nearest feasible: " + "; or ".join(options)
    if space.max_tp and "tp" not in space.fixed:
        head += f" (--max-tp {space.max_tp})"
    return (f"{head}: the model's heads ({spec.n_heads}), layers ({spec.n_layers}) and "
            f"sequence ({training.seq_len}) allow no mesh of {num_gpus:,} GPUs with these "
            "constraints; accepted: fewer constraints, or a GPU count with more divisors (a "
            "power of two)")


def _setting(plan: ParallelPlan, name: str) -> Any:
    """The value of ``name`` a plan has (None for candidate settings: micro-batch, recompute)."""
    if name in ("micro_batch", "recompute", "recompute_layers"):
        return None  # candidate settings, not plan ones: checked after enumeration
    if name == "dp_shard":
        return plan.dp_shard
    if name == "dp_replicate":
        return plan.dp_replicate
    return getattr(plan, name, None)


def _nearest(value: Any, seen: set) -> list:
    """The feasible values nearest ``value`` (numbers by distance, choices all of them)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return sorted(seen, key=lambda v: (abs(v - value), v))[:3]
    return sorted(seen, key=str)[:4]


def no_fit_message(result, spec: ModelSpec, num_gpus: int, gpu_label: str,
                   gpu_memory_gib: float | None = None) -> str:
    """Nothing fits the budget: the least memory any plan needs, and what would do (a larger
    budget where the GPU has the memory: above the default budget, tight)."""
    budget = result.budget_bytes / GIB_BYTES
    least = result.least_peak
    if least is None:
        return f"no plan of {spec.name} on {num_gpus:,} GPUs can run its pipeline schedule"
    need = least.peak_bytes / GIB_BYTES
    raise_budget = (f"--memory-budget-gib {int(need) + 1} (tight: above the default budget)"
                    if gpu_memory_gib is not None and int(need) + 1 <= gpu_memory_gib else
                    f"--memory-budget-gib {int(need) + 1} on a GPU with that much memory")
    return (f"no plan of {spec.name} fits {budget:.1f} GiB per GPU on {num_gpus:,} {gpu_label}: "
            f"the least memory any plan needs is {need:.1f} GiB ({plan_line(least)}); nearest "
            f"feasible: {raise_budget}, or more GPUs")
