"""The plans of one search as engine-input columns (:mod:`fsdpsim.drivers.search.run`): each
family's base plan through predict's own builders, its variants as the few columns they change, and
the evaluation of candidates in blocks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from fsdpsim import engine
from fsdpsim.costs.comm import STRATEGY_CODES
from fsdpsim.hardware.spec import System
from fsdpsim.engine.build import (model_inputs, plan_inputs, pod_inputs, system_inputs,
                                  training_inputs)
from fsdpsim.engine.build_framework import framework_inputs
from fsdpsim.engine.peaks import bf16_linear_share
from fsdpsim.model.spec import ModelSpec
from fsdpsim.engine.build_moe import stage_inputs, uniform_keys
from fsdpsim.plan.frameworks import profile
from fsdpsim.plan.parallel import PP_SCHEDULES, ParallelPlan, TrainingConfig
from fsdpsim.drivers.search.space import Family

#: Outputs a search reads of each candidate.
KEYS = ("tokens_per_s", "fits", "peak_bytes", "pipeline_ok", "step_time_s")
#: Candidates per engine call (the sweep's block size).
CHUNK = 65_536


def _variant_columns(spec: ModelSpec, family: Family,
                     split_cache: dict | None = None) -> dict[str, np.ndarray]:
    """The engine inputs a family's variants change, one row per variant: the ZeRO stage's
    strategy code, the schedule, virtual stages and layer split (with the MoE layers per
    stage), SP, TP/EP overlap and the CP kind: the values :func:`fsdpsim.engine.build.plan_inputs`
    and :func:`fsdpsim.engine.build_moe.stage_inputs` give the variant's plan. ``split_cache``
    keeps each layer split's columns for the next family of the same pipeline degree."""
    base, variants = family.base, family.variants
    cache = {} if split_cache is None else split_cache
    schedules = [v["pp_schedule"] or ("interleaved" if v["vpp"] > 1 else "1f1b")
                 for v in variants]
    codes = {name: i for i, name in enumerate(PP_SCHEDULES)}
    sp_default = float(base.tp > 1)
    cols = {"strategy": [STRATEGY_CODES[v["sharding"]] for v in variants],
            "vpp": [v["vpp"] for v in variants],
            "pp_schedule": [codes[x] for x in schedules],
            "sequence_parallel": [sp_default if v["sequence_parallel"] is None
                                  else float(v["sequence_parallel"]) for v in variants],
            "tp_overlap": [float(v["tp_overlap"]) for v in variants],
            "cp_all2all": [float(v["cp_kind"] == "all2all") for v in variants],
            "ep_overlap": [float(v["ep_overlap"]) for v in variants]}
    out = {k: np.array(v, dtype=float) for k, v in cols.items()}
    index: dict[tuple, int] = {}  # each split's first variant sets its schedule (as predict)
    rows = [index.setdefault((v["vpp"], v["pp_first_layers"], v["pp_last_layers"]), len(index))
            for v in variants]
    first_schedule = {}
    for key, sched in zip(((v["vpp"], v["pp_first_layers"], v["pp_last_layers"])
                           for v in variants), schedules):
        first_schedule.setdefault(key, sched)
    splits = []
    for key in index:
        vpp, first_layers, last_layers = key
        ck = (base.pp, base.framework, first_schedule[key], *key)
        if ck not in cache:
            probe = replace(base, vpp=vpp, pp_schedule=first_schedule[key],
                            pp_first_layers=first_layers, pp_last_layers=last_layers)
            first, mid, last = probe.stage_layers(spec.n_layers)
            cache[ck] = {"layers_first": first, "layers_mid": mid, "layers_last": last,
                         **stage_inputs(spec, probe)}
        splits.append(cache[ck])
    take = np.array(rows, dtype=np.int64)
    for k in splits[0]:
        out[k] = np.array([split[k] for split in splits], dtype=float)[take]
    return out


def _family_rows(spec: ModelSpec, system: System, families: list[Family]) -> list[dict]:
    """Each family's base-plan inputs: :func:`~fsdpsim.engine.build.plan_inputs`,
    ``pod_inputs`` and ``stage_inputs`` (predict's builders) of the first family of each mesh
    (the families that share its variants' tuple are its other mesh orders,
    :func:`fsdpsim.drivers.search.space.enumerate_families`); an other order takes that row
    with the members per scale-up domain and per pod of its own order
    (:func:`fsdpsim.plan.layout.order_layouts`): the order places the groups on the tiers and
    changes nothing else (tests/test_search.py checks every family against the builders)."""
    rows, first = [], {}
    for f in families:
        row = first.get(id(f.variants))
        if row is None:
            row = {**plan_inputs(f.base, spec.n_layers), **pod_inputs(f.base, system),
                   **stage_inputs(spec, f.base)}
            first[id(f.variants)] = row
        else:
            row = {**row, **_order_inputs(f.base, system.pod_gpus)}
        rows.append(row)
    return rows


def _order_inputs(plan: ParallelPlan, pod_gpus: int | None) -> dict[str, float]:
    """The inputs of ``plan`` that its mesh order decides: every group's members per scale-up
    domain (``plan_inputs``: ``group_layout``, the expert groups', one for a replicated
    model's shard group) and per pod (``pod_inputs``; without pods each is the group's size,
    which no order changes)."""
    from fsdpsim.plan.layout import order_layouts

    group, pod, expert = order_layouts(plan, plan.mesh_order, pod_gpus)
    ends = ("_per_node", "_per_pod") if pod is not None else ("_per_node",)
    out = {k: float(v) for k, v in group.items() if k.endswith("_per_node")}
    out.update((k, float(v)) for k, v in expert.items() if k.endswith(ends))
    if pod is not None:
        out.update((k, float(v)) for k, v in pod.items())
    if plan.sharding == "none":
        out["shard_per_node"] = 1.0
    return out


class PlanColumns:
    """The plans of one search as engine-input columns, and their candidates' evaluation.

    Each :class:`~fsdpsim.drivers.search.space.Family` contributes its base plan's inputs once
    (:func:`fsdpsim.engine.build.plan_inputs`, ``pod_inputs``, ``stage_inputs``: predict's builders)
    and its variants as the few columns they change (:func:`_variant_columns`; a test checks
    every column against ``plan_inputs`` of the variant's own plan)."""

    def __init__(self, spec: ModelSpec, system: System, families: list[Family],
                 training: TrainingConfig):
        self.spec, self.system, self.families, self.training = spec, system, families, training
        rows = _family_rows(spec, system, families)
        keys = list(rows[0])
        table = np.array([[r[k] for k in keys] for r in rows], dtype=float)
        base_cols = {k: table[:, j] for j, k in enumerate(keys)}
        sizes = np.array([len(f.variants) for f in families], dtype=np.int64)
        self.family = np.repeat(np.arange(len(families)), sizes)
        self.variant = np.arange(self.family.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        # families of one mesh and data-parallel layout hold the same variant dicts (their
        # expert meshes and orders): their columns are computed once, as one block
        blocks: dict[tuple, int] = {}
        parts, split_cache = [], {}
        for f in families:
            key = (id(f.variants[0]), len(f.variants), f.base.pp, f.base.tp > 1,
                   f.base.framework)
            if key not in blocks:
                blocks[key] = len(parts)
                parts.append(_variant_columns(spec, f, split_cache))
        block = np.array([blocks[(id(f.variants[0]), len(f.variants), f.base.pp,
                                  f.base.tp > 1, f.base.framework)] for f in families])
        block_start = np.r_[0, np.cumsum([len(q["vpp"]) for q in parts])][:-1]
        rows_of = block_start[block][self.family] + self.variant
        # per plan: the columns variants change; per family: the rest (gathered per chunk)
        self.variant_cols = {k: np.concatenate([q[k] for q in parts])[rows_of] for k in parts[0]}
        self.family_cols = {k: v for k, v in base_cols.items() if k not in self.variant_cols}
        self.base = {**system_inputs(system, training.precision,
                                     bf16_linear_share(spec, training)),
                     **training_inputs(training),
                     **framework_inputs(spec, system, families[0].base, training.precision)}
        # model inputs per distinct (tp, shard group): vectorised over the shard sizes, padded
        # per parameter (FSDP2) or once per unit (FSDP1's flat parameter)
        flat = profile(families[0].base.framework).flat_parameter
        tp = self.column("tp").astype(np.int64)
        shard = self.column("shard_size").astype(np.int64)
        key = tp * 2**32 + shard
        uniq, self.model_row = np.unique(key, return_inverse=True)
        parts = []
        for t in np.unique(uniq // 2**32):
            shards = (uniq[uniq // 2**32 == t] % 2**32).astype(float)
            x = model_inputs(spec, shards, per_parameter=not flat, tp=int(t))
            parts.append({k: np.broadcast_to(np.asarray(v, dtype=float), shards.shape)
                          for k, v in x.items()})
        parts = [{k: np.broadcast_to(np.asarray(v, dtype=float), p["n_layers"].shape)
                  for k, v in p.items()} for p in uniform_keys(parts)]
        self.model_cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        self.model_row = self.model_row.ravel()
        # a column with one value over the whole space goes to the engine as that value
        self.constant = {k: v[0] for cols in (self.model_cols, self.family_cols,
                                              self.variant_cols)
                         for k, v in cols.items() if np.all(v == v[0])}
        self.dp = self.column("dp").astype(np.int64)
        self.layers_stage = np.where(self.column("pp") > 1, self.column("layers_mid"),
                                     spec.n_layers).astype(np.int64)

    def __len__(self) -> int:
        return int(self.family.size)

    def column(self, key: str, rows: np.ndarray | None = None) -> np.ndarray:
        """Plan input ``key`` of every plan (or of ``rows``)."""
        if key in self.variant_cols:
            v = self.variant_cols[key]
            return v if rows is None else v[rows]
        fam = self.family if rows is None else self.family[rows]
        return self.family_cols[key][fam]

    def plan(self, i: int) -> ParallelPlan:
        """Plan ``i`` (a family's variant), validated."""
        return self.families[int(self.family[i])].plan(int(self.variant[i]))

    def evaluate(self, plan: np.ndarray, mb: np.ndarray, accum: np.ndarray, rc: np.ndarray,
                 rl: np.ndarray, keys=KEYS, memory_only: bool = False,
                 base: dict | None = None) -> dict[str, np.ndarray]:
        """Engine outputs ``keys`` of candidates (plan index, micro-batch, grad-accum,
        recompute code, recompute layers (−1 = all)), without the memory ceilings;
        ``memory_only``: ``fits`` and ``peak_bytes`` alone, from the engine's memory stage
        (:func:`fsdpsim.engine.memory_breakdown`, the values :func:`fsdpsim.engine.evaluate`
        reports); ``base``: other system, training and framework inputs than the search's
        (the bounds' ideal network)."""
        if memory_only:
            keys = ("fits", "peak_bytes")
        n = plan.size
        out = {k: np.empty(n, dtype=bool if k in ("fits", "pipeline_ok") else float)
               for k in keys}
        for start in range(0, n, CHUNK):
            s = slice(start, min(start + CHUNK, n))
            p = plan[s]
            x: dict[str, Any] = {**(self.base if base is None else base), **self.constant}
            model, fam = self.model_row[p], self.family[p]
            for cols, rows in ((self.model_cols, model), (self.family_cols, fam),
                               (self.variant_cols, p)):
                for k, v in cols.items():
                    if k not in self.constant:
                        x[k] = v[rows]
            x.update(micro_batch=mb[s].astype(float), grad_accum=accum[s].astype(float),
                     recompute=rc[s].astype(float), recompute_layers=rl[s].astype(float),
                     ceilings=0.0)
            y = engine.memory_breakdown(x, ceilings=False) if memory_only else engine.evaluate(x)
            for k in keys:
                out[k][s] = np.broadcast_to(y.get(k, True), p.shape)
        return out
