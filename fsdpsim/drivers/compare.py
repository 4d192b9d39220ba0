"""``fsdpsim compare``: several GPUs, nodes or clusters (and models) side by side, like for like.

Every row trains the same model at the same global batch and sequence length (by default about
4M tokens per step, :func:`fsdpsim.drivers.sweep.grid.default_global_batch`) on one hardware choice
and GPU count, with the plan :func:`fsdpsim.drivers.search.run.search` finds best for that hardware
(``plan = "search"``) or the FSDP plan :func:`fsdpsim.drivers.predict.predict` picks (``plan =
"fsdp"``: full sharding, the fastest micro-batch and recompute that fit). Throughput, MFU, memory
and bottleneck are predict's numbers; cost, energy and time to train (with failures) those of
:func:`fsdpsim.drivers.procurement.prediction_run`. Nothing here computes a cost: rows are gathered,
flattened and ranked per column (:data:`BEST`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from fsdpsim.util.errors import ConfigError
from fsdpsim.hardware.spec import System
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.procurement import RunAssumptions, prediction_run, run_summary
from fsdpsim.drivers.search.objective import DEFAULT_MEMORY_BUDGET_FRACTION
from fsdpsim.drivers.search.space import SearchSpace

PLANS = ("search", "fsdp")
#: Columns ranked across rows: the better direction of each ("max" or "min"). Only rows that
#: fit and run take part.
BEST: dict[str, str] = {
    "tokens_per_s": "max", "tokens_per_s_per_gpu": "max", "mfu": "max", "mfu_native": "max",
    "memory_share": "min", "cost_usd_per_million_tokens": "min",
    "energy_kwh_per_million_tokens": "min", "failures.train_days": "min",
    "failures.train_cost_usd": "min", "failures.train_energy_kwh": "min",
}
#: At most this many rows (hardware × GPU counts × models) in one comparison.
MAX_ROWS = 64


@dataclass(frozen=True)
class Case:
    """One row to compute: a model on ``num_gpus`` GPUs of one hardware choice."""

    spec: ModelSpec
    hardware: str
    """The GPU, node or cluster id as the user gave it (the row's name)."""
    system: System
    num_gpus: int
    price_usd_per_gpu_hour: float | None = None
    """The user's rent for this GPU (``--price``); None: the catalog's."""
    kind: str = "gpu"
    """Whether ``hardware`` names a GPU (``gpu``) or a node or cluster (``cluster``)."""
    model_id: str | None = None
    """The model as the user named it (preset, ladder id or config.json path); None: the
    spec's name."""
    precision: str | None = None
    """This row's precision where it is not the shared training's (``--precision`` not given:
    the GPU's own default, fp16 on a V100); None: the training's."""


@dataclass(frozen=True)
class Row:
    """One computed row: the case, its prediction and run columns, or why there are none."""

    case: Case
    prediction: Any | None
    """:class:`fsdpsim.drivers.predict.Prediction` of the chosen plan; None when no plan exists."""
    run: Mapping[str, Any] | None
    """:func:`fsdpsim.drivers.procurement.prediction_run` of the prediction."""
    reason: str | None = None
    """Why the row has no prediction (no valid plan of this batch on these GPUs)."""

    @property
    def fits(self) -> bool:
        return self.prediction is not None and self.prediction.fits


def compare(cases: Sequence[Case], training: TrainingConfig, *, plan: str = "search",
            run: RunAssumptions = RunAssumptions(), space: SearchSpace = SearchSpace(),
            objective: str = "throughput") -> list[Row]:
    """One :class:`Row` per case, in order: the ``plan`` ("search" or "fsdp") of each case at
    ``training``'s global batch and sequence length (None: each row's plan trains the default
    batch moved to a multiple of its data-parallel degree,
    :func:`fsdpsim.plan.training.default_global_batch`, as predict and search do)."""
    if plan not in PLANS:
        raise ConfigError(f"--plan {plan!r} is not accepted; accepted: {', '.join(PLANS)}")
    if len(cases) > MAX_ROWS:
        raise ConfigError(f"the comparison has {len(cases)} rows (hardware x GPU counts x "
                          f"models); accepted: at most {MAX_ROWS}")
    return [_row(c, training, plan, run, space, objective) for c in cases]


def _row(case: Case, training: TrainingConfig, plan: str, run: RunAssumptions,
         space: SearchSpace, objective: str) -> Row:
    from fsdpsim.drivers.predict import predict
    from fsdpsim.drivers.search.objective import budget_system
    from fsdpsim.drivers.search.results import predict_choice
    from fsdpsim.drivers.search.run import search
    from fsdpsim.hardware.system import domain_gpus
    from fsdpsim.plan.frameworks import plan_defaults
    from fsdpsim.plan.training import default_global_batch

    spec, system, n = case.spec, case.system, case.num_gpus
    if case.precision is not None:
        training = replace(training, precision=case.precision)
    try:
        if plan == "search":
            # within the default memory budget (a share of the GPU's memory: predict's rule)
            found = search(spec, budget_system(system, None), n, training, space,
                           objective=objective, top=1,
                           run=run, price=case.price_usd_per_gpu_hour)
            choice = found.top[0] if found.top else found.least_peak
            if choice is None:
                return Row(case, None, None, "no plan of the search space can run")
            p = predict_choice(spec, system, choice, training)
        else:
            chosen, _ = plan_defaults(space.framework)  # predict's defaults of the framework
            fsdp = ParallelPlan(num_gpus=n, gpus_per_node=domain_gpus(system, n),
                                framework=space.framework, sharding=chosen["sharding"],
                                reshard_after_forward=chosen["reshard_after_forward"])
            if training.global_batch is None:
                training = replace(training, global_batch=default_global_batch(
                    training.seq_len, fsdp.dp))
            p = predict(spec, system, fsdp, training)
    except ConfigError as exc:  # no plan of this batch on these GPUs: a row that says so
        return Row(case, None, None, str(exc))
    return Row(case, p, prediction_run(p, system, run, case.price_usd_per_gpu_hour))


def _hardware_id(case: Case) -> str:
    """The row's hardware as every command names it: a GPU's catalog id (``h100`` is
    ``h100-sxm5-80gb`` in predict, sweep and search too), a node or cluster id as given."""
    return case.system.accelerator.id if case.kind == "gpu" else case.hardware


def _number(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def row_values(row: Row) -> dict[str, Any]:
    """A row as flat values in SI units (``_s``, ``_bytes``; days and kWh where named): what
    the table, the CSV/JSON and the report show. Cost, energy and time to train include
    failures (goodput); the failure-free numbers are beside them."""
    c = row.case
    out: dict[str, Any] = {"model": c.spec.name, "hardware": _hardware_id(c),
                           "accelerator": c.system.accelerator.id, "system": c.system.label,
                           "num_gpus": c.num_gpus}
    p = row.prediction
    if p is None:
        return {**out, "fits": False, "reason": row.reason}
    d, r = p.to_dict(), row.run
    tr, m = d["training"], d["memory"]
    out.update({
        "plan": d["plan"]["line"], "sharding": d["plan"]["sharding"],
        "micro_batch": tr["micro_batch"], "grad_accum": tr["grad_accum"],
        "recompute": tr["recompute"], "global_batch": tr["global_batch"],
        "seq_len": tr["seq_len"], "tokens_per_step": tr["global_batch"] * tr["seq_len"],
        "precision": tr["precision"],
        "tokens_per_s": d["tokens_per_s"], "tokens_per_s_per_gpu": d["tokens_per_s_per_gpu"],
        "tokens_per_s_per_gpu_low": d["interval"]["tokens_per_s_per_gpu_low"],
        "tokens_per_s_per_gpu_high": d["interval"]["tokens_per_s_per_gpu_high"],
        "calibrated": d["interval"]["calibrated"],
        "mfu": d["mfu"], "hfu": d["hfu"], "step_time_s": d["step_time_s"],
        "mfu_native": d["mfu_native"], "peak_precision": d["utilisation"]["native_precision"],
        "fits": d["fits"], "peak_bytes": m["peak_bytes"], "capacity_bytes": m["capacity_bytes"],
        "memory_share": m["peak_bytes"] / m["capacity_bytes"],
        "above_default_budget": bool(m["peak_bytes"] > DEFAULT_MEMORY_BUDGET_FRACTION
                                     * m["capacity_bytes"]),
        "bottleneck": d["bottleneck"],
        "price_usd_per_gpu_hour": _number(r["price_usd_per_gpu_hour"]),
        "price_kind": r["price_kind"], "price_source": r["price_source"],
        "price_retrieved": r["price_retrieved"],
        "board_power_w": _number(r["board_power_w"]), "pue": r["pue"],
        **run_summary(r),
        "price_usd_per_gpu_hour": _number(r["price_usd_per_gpu_hour"]),  # its place above
        "reason": None if d["fits"] else "does not fit in memory",
    })
    return out


def best_rows(values: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """For each column of :data:`BEST`, the indices of the rows with the best value (ties
    all), among rows that fit and have the value; columns no row has are left out."""
    out: dict[str, list[int]] = {}
    for column, direction in BEST.items():
        have = [(i, v[column]) for i, v in enumerate(values)
                if v.get("fits") and isinstance(v.get(column), (int, float))
                and math.isfinite(v[column])]
        if not have:
            continue
        pick = max if direction == "max" else min
        best = pick(x for _, x in have)
        out[column] = [i for i, x in have if math.isclose(x, best, rel_tol=1e-9)]
    return out


def sweep_frame(rows: Sequence[Row]):
    """The rows that have a prediction as sweep-style columns (predict's report flattened
    with dots, plus ``gpu``, ``cluster``, ``system``, ``network``): what the figures of
    :mod:`fsdpsim.report.plots.sweep` read."""
    import pandas as pd

    from fsdpsim.util.text import flatten

    records = []
    for row in rows:
        if row.prediction is None:
            continue
        c = row.case
        flat = flatten({**row.prediction.to_dict(), **row.run})
        flat.update({"model": c.spec.name, "n_params": c.spec.n_params,
                     "gpu": c.system.accelerator.id,
                     "cluster": c.hardware if c.kind == "cluster" else "",
                     "system": c.system.label, "network": c.system.extra.get("network", ""),
                     "hardware": _hardware_id(c),
                     "infeasible": None if row.fits else "does not fit"})
        records.append(flat)
    return pd.DataFrame.from_records(records)


__all__ = ["Case", "Row", "compare", "row_values", "best_rows", "sweep_frame", "PLANS", "BEST"]
