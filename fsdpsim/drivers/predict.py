"""``predict``: one configuration in, one :class:`Prediction` out.

Objects (a :class:`~fsdpsim.model.spec.ModelSpec`, a resolved
:class:`~fsdpsim.hardware.spec.System`, a :class:`~fsdpsim.plan.parallel.ParallelPlan` and a
:class:`~fsdpsim.plan.parallel.TrainingConfig`) become the engine's inputs
(:mod:`fsdpsim.engine.build`); this module resolves the ``auto`` knobs by evaluating every candidate
in one vectorised call, wraps the chosen row into a frozen result with ``to_dict()``, and gives it
its 90 % range (:mod:`fsdpsim.drivers.interval`).
"""

from __future__ import annotations

import functools

from dataclasses import dataclass, field
from types import MappingProxyType
from collections.abc import Mapping
from typing import Any

import numpy as np

from fsdpsim import engine

from fsdpsim.plan import frameworks
from fsdpsim.plan import training as training_rules

from fsdpsim.drivers import sensitivity
from fsdpsim.hardware.efficiency import resolve as resolve_efficiency
from fsdpsim.util.errors import ConfigError
from fsdpsim.hardware.spec import System
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.knobs import PLAN_SWITCHES, kernel_fields, plan_field, plan_knobs
from fsdpsim.plan.known_gaps import known_gaps
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.engine.build import (  # noqa: F401 (re-exported)
    auto_recomputes, config_inputs, model_inputs, plan_inputs, pod_inputs, system_inputs,
    training_inputs)
from fsdpsim.drivers.interval import (  # noqa: F401 (re-exported)
    MEASURED_NODES, NEAR_LIMIT_RATIO_LOW, NEAR_LIMIT_SHARE, comm_uncertainty, faster_ratio,
    fit_span_notes, prediction_interval, slower_twin)
from fsdpsim.drivers.least_memory import what_would_fit
from fsdpsim.drivers.prediction_values import CeilingValues, OneValueInputs, row_of

#: Micro-batch sizes tried by ``auto`` when no global batch pins the per-GPU batch.
AUTO_MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MEMORY_KEYS = ("params_bytes", "grads_bytes", "optimizer_bytes", "unsharded_params_bytes",
               "unsharded_grads_bytes", "activations_bytes", "logits_bytes",
               "runtime_reserved_bytes", "fragmentation_bytes")
COMM_KEYS = ("all_gather_bytes", "reduce_scatter_bytes", "all_reduce_bytes", "all_gather_s",
             "reduce_scatter_s", "all_reduce_s")
MEMORY_PRESSURE_FRACTION = engine.MEMORY_PRESSURE_FRACTION
TIME_KEYS = ("compute_s", "gemm_s", "attention_s", "memory_bound_s", "recompute_s",
             "optimizer_s", "comm_s", "exposed_comm_s", "bubble_s", "step_lower_bound_s",
             "step_upper_bound_s", "moe_s")
#: Per-dimension communication of hybrid plans: bytes per GPU per step, seconds, and the
#: seconds not hidden behind compute (``comm.tp_bytes`` etc.; pipeline point-to-point
#: transfers are not overlapped).
MODEL_PARALLEL_COMM = {"tp": ("tp_bytes", "tp_s", "tp_exposed_s"),
                       "cp": ("cp_bytes", "cp_s", "cp_exposed_s"),
                       "pp": ("pp_bytes", "pp_s", "pp_s"),
                       "ep": ("ep_bytes", "ep_s", "ep_exposed_s")}


#: What MFU and HFU count (README glossary; fsdpsim.engine.metrics).
MFU_CONVENTION = ("model FLOPs (PaLM App. B: 6 x matmul weights per token + attention over "
                  "the full s x s square, no recompute) / (step time x GPUs x dense peak)")
HFU_CONVENTION = ("MFU's FLOPs plus what runs again (FlashAttention's backward recompute of "
                  "the scores, activation checkpointing), same full-square attention and peak; "
                  ">= MFU, equal without recompute")


@dataclass(frozen=True)
class Prediction:
    """The prediction for one configuration; ``to_dict()`` gives the JSON form."""

    values: Mapping[str, float]
    """Flat outputs of :func:`engine.evaluate` for the chosen row (SI units in names). Its
    ``bottleneck``, ``min_inter_node_bytes_per_s_per_gpu`` and ``critical_tokens_per_gpu`` are
    the engine's cheap heuristic and closed forms; the reported ones are in
    ``reported``."""
    inputs: Mapping[str, Any]
    model: str
    system: str
    plan: Mapping[str, Any]
    training: Mapping[str, Any]
    chosen: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    interval: Mapping[str, Any] = field(default_factory=dict)
    """90 % prediction interval of throughput and step time (see :func:`prediction_interval`)."""
    advice: tuple[Mapping[str, Any], ...] = ()
    """Faster settings of the same job at this scale
    (:func:`fsdpsim.drivers.advice.scale_advice`)."""
    fit_advice: tuple[Mapping[str, Any], ...] = ()
    """For a plan that does not fit: what the hybrid search finds instead (the plan's own GPUs,
    or the fewest that fit; :func:`fsdpsim.drivers.advice.hybrid_fit`)."""
    reported: Mapping[str, float] | None = None
    """Bottleneck, thresholds and sensitivities from the engine's own response to each
    resource (:func:`fsdpsim.drivers.sensitivity.analyse`, keys
    :data:`fsdpsim.drivers.sensitivity.OUTPUTS`): what ``to_dict`` and the CLI report. Computed
    on first use (:meth:`analysis`) from ``analysis_inputs``: the searches cost several engine
    calls, which a caller that wants the step time alone (``predict`` in a loop, ``validate``'s
    knob choice) does not pay."""
    analysis_inputs: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    """The chosen configuration's engine inputs (for :meth:`analysis`)."""

    def analysis(self) -> Mapping[str, float]:
        """:attr:`reported`, computed now if it was not yet."""
        reported = object.__getattribute__(self, "reported")
        if reported is None:
            reported = MappingProxyType(row_of(sensitivity.analyse(self.analysis_inputs), 0))
            object.__setattr__(self, "reported", reported)
        return reported

    def __getattr__(self, name: str) -> float:
        values = object.__getattribute__(self, "values")
        if name in sensitivity.OUTPUTS:  # the reported reading first
            return self.analysis()[name]
        if name in values:
            return values[name]
        raise AttributeError(name)

    @property
    def fits(self) -> bool:
        return bool(self.values["fits"])

    @property
    def bottleneck(self) -> str:
        return engine.BOTTLENECKS[int(self.analysis()["bottleneck"])]

    def utilisation(self) -> dict[str, Any]:
        """The peaks MFU and HFU are measured against and their conventions (README glossary;
        :mod:`fsdpsim.engine.metrics`)."""
        precision = self.training.get("precision", "bf16")
        native = float(self.inputs["peak_flops_per_s"])
        peak = float(self.inputs.get("mfu_peak_flops_per_s", native))
        from fsdpsim.plan.parallel import LOW_PRECISION

        basis = "bf16" if precision in LOW_PRECISION and peak != native else precision
        return {"peak_precision": basis, "peak_flops_per_s_per_gpu": peak,
                "native_precision": precision, "native_peak_flops_per_s_per_gpu": native,
                "mfu": MFU_CONVENTION, "hfu": HFU_CONVENTION}

    def to_dict(self) -> dict[str, Any]:
        v = self.values
        reported = sensitivity.report(self.analysis())
        return {
            "model": self.model,
            "system": self.system,
            "plan": dict(self.plan),
            "training": dict(self.training),
            "chosen": dict(self.chosen),
            "step_time_s": v["step_time_s"],
            "tokens_per_s": v["tokens_per_s"],
            "tokens_per_s_per_gpu": v["tokens_per_s_per_gpu"],
            "mfu": v["mfu"],
            "hfu": v["hfu"],
            "mfu_native": v["mfu_native"],
            "utilisation": self.utilisation(),
            "model_flops_per_step": v["model_flops_per_step"],
            "hardware_flops_per_step": v["hardware_flops_per_step"],
            "fits": self.fits,
            "bottleneck": self.bottleneck,
            "memory": {"peak_bytes": v["peak_bytes"], "capacity_bytes": v["capacity_bytes"],
                       **{k: v[k] for k in MEMORY_KEYS},
                       # per pipeline stage (both the one stage without pipelining)
                       "stages": {"first": v["peak_bytes_first_stage"],
                                  "last": v["peak_bytes_last_stage"],
                                  # an uneven split's busiest middle stage, when it holds
                                  # more layers than the first
                                  **({"middle": v["peak_bytes_mid_stage"]}
                                     if "peak_bytes_mid_stage" in v else {})}},
            # moe_s: the MoE MLPs (router, experts, their kernels) and the exposed all-to-alls
            "time": {**{k: v[k] for k in TIME_KEYS},
                     "moe_share": v["moe_s"] / v["step_time_s"] if v["step_time_s"] else 0.0},
            "comm": {**{k: v[k] for k in COMM_KEYS}, "exposed_s": v["exposed_comm_s"],
                     **{f"{dim}_{name}": v[key] for dim, keys in MODEL_PARALLEL_COMM.items()
                        for name, key in zip(("bytes", "s", "exposed_s"), keys)}},
            "interval": dict(self.interval),
            "thresholds": {**reported["thresholds"],
                           "max_micro_batch": int(v["max_micro_batch"]),
                           "max_seq_len": int(v["max_seq_len"])},
            "sensitivity": reported["sensitivity"],
            "notes": list(self.notes),
            "advice": [dict(a) for a in self.advice],
            "fit_advice": [dict(a) for a in self.fit_advice],
        }


def plan_notes(spec, plan: ParallelPlan) -> list[str]:
    """The choices the plan's defaults made that a user may want to see: an uneven pipeline
    split and its rule (:mod:`fsdpsim.plan.pipeline_split`), the expert tensor-parallel degree
    when it could not default to ``tp``."""
    return list(_plan_notes(spec, plan))


@functools.lru_cache(maxsize=256)  # specs and plans are frozen: the same pair, the same notes
def _plan_notes(spec, plan: ParallelPlan) -> tuple[str, ...]:
    """:func:`plan_notes`, remembered."""
    notes = []
    if plan.pp > 1:
        split = plan.layer_split(spec.n_layers)
        if not split.even:
            notes.append("pipeline split: " + split.words("override with --pp-layers"))
    cannot = frameworks.unsupported(plan.framework, plan)
    if cannot:
        notes.append(f"--framework {frameworks.canonical(plan.framework)} does not run this "
                     "plan as stated (predicted as stated): " + "; ".join(cannot))
    notes += known_gaps(plan.framework, plan)
    if plan.etp_defaulted:
        notes.append(f"expert tensor parallelism: etp 1 (etp = tp({plan.tp}) does not fit "
                     f"ep({plan.ep}) in a stage's ranks; Megatron-Bridge's MoE recipes use "
                     "etp 1; override with --etp)")
    return tuple(notes)


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order, in O(sqrt(n)) once per ``n`` (the search asks
    for the same few counts hundreds of thousands of times)."""
    return list(_divisors(n))


@functools.lru_cache(maxsize=4096)
def _divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


@functools.lru_cache(maxsize=4096)  # plans are frozen: one canonical plan per plan
def _canonical(plan: ParallelPlan) -> ParallelPlan:
    from fsdpsim.plan.spelling import canonical

    return canonical(plan)


@functools.lru_cache(maxsize=256)
def _plan_line(plan: ParallelPlan, micro_batch: int, grad_accum: int, recompute: str,
               recompute_layers: int | None) -> str:
    """The plan's one line (:func:`fsdpsim.plan.spelling.format_plan`)."""
    from fsdpsim.plan.spelling import RunPlan, format_plan

    return format_plan(RunPlan(_canonical(plan), micro_batch, grad_accum, recompute,
                               recompute_layers))


def plan_line(plan: ParallelPlan, grad_accum: int, micro_batch: int = 1,
              recompute: str = "none", recompute_layers: int | None = None) -> str:
    """The ``line`` of :func:`plan_summary` alone (what ``predict --plan`` reads)."""
    return _plan_line(plan, int(micro_batch), int(grad_accum), recompute,
                      None if recompute == "none" else recompute_layers)


#: The plan fields a knob states (:func:`fsdpsim.plan.knobs.plan_knobs`): each is in
#: :func:`plan_summary`'s object, as it is where the object does not write it in its own way.
_PLAN_FIELDS = tuple(k.key for k in plan_knobs() if k.field == f"plan.{k.key}")


def plan_summary(plan: ParallelPlan, grad_accum: int, micro_batch: int = 1,
                 recompute: str = "none", recompute_layers: int | None = None) -> dict[str, Any]:
    """The ``plan`` object of a report: every degree, the strategies, the switches
    (:data:`fsdpsim.plan.knobs.PLAN_SWITCHES`) and the plan's one line
    (:func:`fsdpsim.plan.spelling.format_plan`, what ``predict --plan`` reads)."""
    line = plan_line(plan, grad_accum, micro_batch, recompute, recompute_layers)
    out = {"num_gpus": plan.num_gpus, "gpus_per_node": plan.gpus_per_node,
           "sharding": plan.sharding, "zero": {"none": 0, "optimizer": 1, "grad_op": 2,
                                               "full": 3, "hybrid": 3}[plan.sharding],
           "dp": plan.dp, "dp_shard": plan.dp_shard, "dp_replicate": plan.dp_replicate,
           "tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "vpp": plan.vpp,
           "pp_schedule": plan.pp_schedule,
           **{name: getattr(plan, name) for name in PLAN_SWITCHES},
           "ep": plan.ep, "etp": plan.etp, "expert_dp": plan.expert_dp,
           "mesh_order": ",".join(plan.mesh_order),
           "pp_first_layers": plan.pp_first_layers, "pp_last_layers": plan.pp_last_layers,
           "pp_layers": None if plan.pp_layers is None else list(plan.pp_layers),
           "reshard_after_forward": plan.reshard_after_forward,
           "keep_gathered": plan.keep_gathered, "grad_sync": plan.grad_sync,
           "framework": plan.framework, "line": line}
    for key in _PLAN_FIELDS:
        if key not in out:
            out[key] = getattr(plan, key)
    return out


def check_recompute_layers(spec: ModelSpec, plan: ParallelPlan, layers: int | None,
                           total: int | None = None) -> None:
    """A clear error for a recomputed-layer count above the layers of a pipeline stage (the
    busiest middle rank's, what the engine and a plan line's ``K/L`` count), or for a stated
    total ``L`` that is not that stage's."""
    if layers is None and total is None:
        return
    stage = plan.stage_layers(spec.n_layers)[1]
    if total is not None and total != stage:
        raise ConfigError(f"--plan 'ckpt ... {layers}/{total}': a pipeline stage of "
                          f"{spec.name} under this plan has {stage} layers, not {total}; "
                          f"accepted: {layers}/{stage}, or {layers}")
    training_rules.check_recompute_layers(layers, stage, spec.name)


def predict(spec: ModelSpec, system: System, plan: ParallelPlan,
            training: TrainingConfig) -> Prediction:
    """Predict one training step; ``auto`` knobs pick the fastest setting that fits."""
    from fsdpsim.hardware.system import domain_gpus

    training = frameworks.with_defaults(training, plan.framework)
    training.check_model(is_moe=spec.is_moe)
    check_recompute_layers(spec, plan, training.recompute_layers)
    if plan.gpus_per_node not in (system.gpus_per_node, domain_gpus(system, plan.num_gpus)):
        raise ConfigError(f"plan gpus_per_node({plan.gpus_per_node}) != system "
                          f"gpus_per_node({system.gpus_per_node})")
    mb_flat, rc_flat, accum = _candidates(spec, plan, training)
    x = config_inputs(spec, system, plan, training)
    x.update({"micro_batch": mb_flat, "recompute": rc_flat, "grad_accum": accum})
    n = mb_flat.size
    i, why = _choose(x, n) if n > 1 else (0, "")
    # The chosen one in full, and its twin on a slower network and framework (the plan's
    # communication uncertainty, slower_twin) as the second row of the same call. The
    # reported bottleneck and thresholds (fsdpsim.drivers.sensitivity) follow when asked for.
    chosen_x = {**x, "micro_batch": mb_flat[i], "recompute": rc_flat[i], "grad_accum": accum[i]}
    # The memory ceilings (largest micro-batch and sequence that fit) are solved when first
    # read (CeilingValues): the other outputs are the same with or without them.
    low = slower_twin(chosen_x)
    out = engine.evaluate({**chosen_x, "ceilings": 0.0,
                           **{k: np.array([chosen_x.get(k, 1.0), low[k]], dtype=float)
                              for k in ("nic_fraction", "dp_comm_scale")}})
    row = CeilingValues(row_of(out, 0), chosen_x)
    per_gpu = np.asarray(out["tokens_per_s_per_gpu"], dtype=float).reshape(-1)
    uncertainty = comm_uncertainty(chosen_x)
    twin_ratios = (float(per_gpu[1] / per_gpu[0]) if per_gpu.size == 2 and per_gpu[0] > 0
                   else 1.0, float(faster_ratio(row, uncertainty)))
    if not row.get("pipeline_ok", True):  # raises, naming the schedule and the counts
        from fsdpsim.costs.schedule import check_schedule

        check_schedule(plan.pp_schedule, plan.pp, int(accum[i]), plan.vpp)
    micro_batch, grad_accum = int(mb_flat[i]), int(accum[i])
    rc_name = {v: k for k, v in engine.RECOMPUTE_CODES.items()}[int(rc_flat[i])]
    chosen: dict[str, str] = {"micro_batch": str(micro_batch), "recompute": rc_name,
                              "grad_accum": str(grad_accum)}
    auto = [name for name, given in (("micro_batch", training.micro_batch),
                                     ("recompute", training.recompute)) if given is None]
    if auto and n > 1:
        chosen["why"] = f"auto {', '.join(auto)}: {why}"
    stack_eff = resolve_efficiency(system.accelerator, training.precision,
                                   frameworks.profile(plan.framework).kernel_stack)
    return Prediction(
        values=row,
        inputs=OneValueInputs(x),
        model=spec.name, system=system.label,
        plan=plan_summary(plan, grad_accum, micro_batch, rc_name, training.recompute_layers),
        training=_training_report(training, micro_batch, grad_accum, rc_name, plan.dp),
        chosen=chosen, notes=tuple(_notes(spec, system, plan, training, row, stack_eff)),
        interval=prediction_interval(row, system, comm=twin_ratios, uncertainty=uncertainty,
                                     efficiency=stack_eff, plan=chosen_x),
        analysis_inputs=MappingProxyType(chosen_x),
    )


def _candidates(spec: ModelSpec, plan: ParallelPlan,
                training: TrainingConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (micro-batch, recompute) candidate, flat, with its gradient accumulation: the
    given knobs, else the divisors of the sequences per GPU (or :data:`AUTO_MICRO_BATCHES`
    without a global batch) and the framework's recompute settings
    (:func:`fsdpsim.engine.build.auto_recomputes`)."""
    dp = plan.dp
    if training.global_batch is not None and training.global_batch % dp:
        raise ConfigError(f"global_batch({training.global_batch}) is not divisible by the "
                          f"data-parallel degree ({dp}); use a multiple of {dp}")
    per_gpu = None if training.global_batch is None else training.global_batch // dp
    if training.micro_batch is not None:
        mbs = [training.micro_batch]
        training.grad_accum(dp, training.micro_batch)  # raises if it does not split
    elif per_gpu is not None:
        mbs = divisors(per_gpu)
    else:
        mbs = list(AUTO_MICRO_BATCHES)
    recomputes = ([training.recompute] if training.recompute
                  else list(auto_recomputes(plan.framework, spec)))
    mb_grid, rc_grid = np.meshgrid(np.array(mbs, dtype=float),
                                   np.array([engine.RECOMPUTE_CODES[r] for r in recomputes]),
                                   indexing="ij")
    mb_flat, rc_flat = mb_grid.ravel(), rc_grid.ravel()
    accum = (np.ones_like(mb_flat) if per_gpu is None else per_gpu / mb_flat)
    return mb_flat, rc_flat, accum


def _choose(x: dict[str, Any], n: int) -> tuple[int, str]:
    """The candidate ``auto`` picks of the ``n`` in ``x`` (ranked by
    :func:`fsdpsim.engine.choice_rank` without the ceiling solves: the fastest below the
    memory-pressure fraction, else the fastest that fits, else the least memory; ties to the
    first) and why, in words."""
    ranked = engine.evaluate({**x, "ceilings": 0.0})
    shape = np.shape(x["micro_batch"])
    fits = np.broadcast_to(ranked["fits"], shape)
    tier, key = (np.broadcast_to(a, shape) for a in engine.choice_rank(ranked))
    i = int(np.lexsort((np.arange(n), key, tier))[0])
    n_fit = int(fits.sum())
    roomy = int((tier == 0).sum())
    why = (f"fastest of {roomy} candidates that fit below "
           f"{100 * MEMORY_PRESSURE_FRACTION:.0f} % of memory (of {n})" if roomy
           else f"fastest of {n_fit} candidates that fit, all above "
                f"{100 * MEMORY_PRESSURE_FRACTION:.0f} % of memory (of {n})" if n_fit
           else f"none of {n} candidates fits; showing the smallest memory footprint")
    return i, why


def _notes(spec: ModelSpec, system: System, plan: ParallelPlan, training: TrainingConfig,
           row: Mapping[str, float], stack_eff) -> list[str]:
    """The prediction's notes: the system's, the plan's defaults (:func:`plan_notes`), the
    efficiency table's and its fit span's, then memory: near the limit, or what would fit."""
    notes = [system.extra.get("notes", "")] if system.extra.get("notes") else []
    notes += plan_notes(spec, plan)
    notes.extend(stack_eff.notes())
    notes.extend(fit_span_notes(plan.num_gpus, spec.n_params, stack_eff))
    if row["fits"] and row["peak_bytes"] > MEMORY_PRESSURE_FRACTION * row["capacity_bytes"]:
        share = 100 * row["peak_bytes"] / row["capacity_bytes"]
        notes.append(f"near the memory limit ({share:.0f} % of capacity): allocator retries "
                     "can slow real runs beyond this prediction")
    if not row["fits"]:
        over = row["peak_bytes"] - row["capacity_bytes"]
        if row["max_micro_batch"] >= 1:
            what = (f"largest micro-batch that fits: {int(row['max_micro_batch'])}; longest "
                    f"sequence at this micro-batch: {int(row['max_seq_len'])}")
        else:
            what = ("not even micro-batch 1 fits with this plan; "
                    + what_would_fit(spec, system, plan, training))
        notes.append(f"does not fit: needs {over / 2**30:.1f} GiB more than the "
                     f"{row['capacity_bytes'] / 2**30:.1f} GiB usable; {what}")
    return notes


def _training_report(training: TrainingConfig, micro_batch: int, grad_accum: int,
                     recompute: str, dp: int) -> dict[str, Any]:
    """The ``training`` object of a report: the chosen micro-batch, accumulation and
    recompute, the global batch they make, and the training's other settings."""
    return {"seq_len": training.seq_len, "micro_batch": micro_batch,
            "grad_accum": grad_accum, "global_batch": int(micro_batch * grad_accum * dp),
            "recompute": recompute, "precision": training.precision,
            "optimizer": training.optimizer,
            "reduce_dtype": training.reduce_dtype or "fp32",
            "flash_attention": training.flash_attention,
            "dropout": training.dropout, "recompute_layers": training.recompute_layers,
            "moe_capacity_factor": training.moe_capacity_factor,
            "moe_imbalance": training.moe_imbalance, **kernel_fields(training)}
