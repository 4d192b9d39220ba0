"""A sweep's input tables: the engine inputs of every distinct model x sequence, system x
precision and plan of a grid, built once (:mod:`fsdpsim.drivers.sweep.run` gathers each candidate's
row from them), and why a combination is invalid."""

from __future__ import annotations

from typing import Any

import numpy as np

from fsdpsim.util.errors import ConfigError
from fsdpsim.drivers.sweep.grid import LOW_PRECISION_KNOBS, Grid
from fsdpsim.plan.parallel import LOW_PRECISION
from fsdpsim.engine.build import (model_inputs, plan_inputs, pod_inputs, system_inputs,
                                  training_inputs)
from fsdpsim.engine.build_framework import (framework_constants, framework_model_inputs,
                                            framework_system_inputs)
from fsdpsim.plan import knobs
from fsdpsim.plan.frameworks import profile, with_defaults
from fsdpsim.plan.knobs import kernel_default, knob_default
from fsdpsim.engine.build_moe import stage_inputs, uniform_keys
from fsdpsim.plan.parallel import SHARDED, SHARDINGS, ParallelPlan, TrainingConfig
from fsdpsim.plan.training import check_recompute_layers
from fsdpsim.plan.frameworks import plan_defaults
from fsdpsim.drivers.predict import plan_summary
from fsdpsim.hardware.system import domain_gpus


class _Tables:
    """Inputs per distinct combination (model × sequence, system × precision, plan), once."""

    def __init__(self, grid: Grid):
        self.grid = grid
        self._model_specs(grid)
        self._systems(grid)
        self._plans(grid)
        # per system x precision (row h * len(precisions) + p), as self.system: a system's
        # precision is its GPU's own when --precision is not given (Grid.precision_at)
        self.trainings = [grid_training(grid, p) for p in grid.precision_names]
        self.training = _columns([{**training_inputs(tr), **framework_constants(grid.framework)}
                                  for tr in self.trainings])
        self.max_gpus = np.array([hw.max_gpus or np.inf for hw in grid.hardware], dtype=float)
        self._stages(grid)

    def _model_specs(self, grid: Grid) -> None:
        """The distinct model specs of the grid's models x sequence lengths (``spec_of``):
        learned position tables grow with the sequence, as `fsdpsim predict` does."""
        self.specs, spec_id = [], {}
        self.spec_of = np.zeros((len(grid.models), len(grid.seq_lens)), dtype=np.int64)
        for i, spec in enumerate(grid.models):
            for j, seq in enumerate(grid.seq_lens):
                s = (spec.with_seq_len(seq) if spec.position == "learned"
                     and seq > spec.max_seq_len else spec)
                key = (i, s.max_seq_len if s is not spec else -1)
                if key not in spec_id:
                    spec_id[key] = len(self.specs)
                    self.specs.append(s)
                self.spec_of[i, j] = spec_id[key]

    def _systems(self, grid: Grid) -> None:
        """System × precision: inputs, or why the GPU cannot run that precision."""
        nh, npr = len(grid.hardware), len(grid.precisions)
        self.system_reason = np.full((nh, npr), None, dtype=object)
        rows = []
        for h, hw in enumerate(grid.hardware):
            for p in range(npr):
                precision = grid.precision_at(h, p)
                try:
                    rows.append({**system_inputs(hw.system, precision,
                                                 _bf16_share(grid.framework, precision)),
                                 **framework_system_inputs(hw.system, grid.framework,
                                                           precision)})
                except ConfigError as exc:  # never evaluated: the point is invalid
                    some = next(iter(hw.system.accelerator.peak_flops_per_s))
                    rows.append({**system_inputs(hw.system, some),
                                 **framework_system_inputs(hw.system, grid.framework, some)})
                    self.system_reason[h, p] = str(exc)
        self.system = _columns(rows)

    def _plans(self, grid: Grid) -> None:
        """GPU count × system × layout × sharding: plan inputs (``plan``, with each plan's
        summary in ``plan_text``), or why the plan is invalid (``plan_reason``, None where it
        is valid)."""
        ng, nh, nl, ns = len(grid.num_gpus), len(grid.hardware), len(grid.layouts), len(SHARDINGS)
        self.plan_reason = np.full((ng, nh, nl, ns), None, dtype=object)
        rows, self.plan_text = [], []
        # the framework's reshard-after-forward of each layout, as predict's (torchtitan's
        # FSDP2: not under a pipeline; fsdpsim.plan.frameworks.plan_defaults)
        framework = getattr(grid, "framework", None) or "fsdp2"
        reshard = [plan_defaults(framework, tp=tp, pp=pp, cp=cp)[0]["reshard_after_forward"]
                   for tp, pp, cp in grid.layouts]
        for g, n in enumerate(grid.num_gpus):
            for h, hw in enumerate(grid.hardware):
                per_node = domain_gpus(hw.system, n)
                for l, layout in enumerate(grid.layouts):
                    hybrid = layout_options(grid, layout)
                    for code, sharding in enumerate(SHARDINGS):
                        # the accumulation knobs mean something for the sharded strategies only
                        accum = (dict(keep_gathered=grid.keep_gathered, grad_sync=grid.grad_sync,
                                      reshard_after_forward=reshard[l])
                                 if sharding in SHARDED else {})
                        if sharding == "hybrid" and grid.shard_group_size is not None:
                            accum["shard_group_size"] = grid.shard_group_size
                        try:
                            plan = ParallelPlan(num_gpus=n, gpus_per_node=per_node,
                                                sharding=sharding, **accum, **hybrid)
                            rows.append({**plan_inputs(plan), **pod_inputs(plan, hw.system)})
                            self.plan_text.append((plan_summary(plan, 1), plan))
                        except ConfigError as exc:  # never evaluated: the point is invalid
                            self.plan_reason[g, h, l, code] = str(exc)
                            rows.append(None)
                            self.plan_text.append((None, None))
        template = next((r for r in rows if r is not None), None)
        if template is None:  # no valid plan at all: placeholder rows, never evaluated
            probe = ParallelPlan(num_gpus=1, gpus_per_node=1)
            template = {**plan_inputs(probe), **pod_inputs(probe, grid.hardware[0].system)}
        self.plan_ok = np.equal(self.plan_reason, None)
        self.plan = _columns([r if r is not None else {k: 1.0 for k in template} for r in rows])
        self.plan_shape = (ng, nh, nl, ns)

    def _stages(self, grid: Grid) -> None:
        """Model-dependent checks of each layout (heads by TP, layers by PP x vpp, sequence by
        2 x CP): a reason per (spec, layout, sequence length) in ``model_reason``; and the
        layers (and MoE layers) of the first, busiest middle and last pipeline stage per
        (spec, layout) in ``stages``: the framework's split, even or not, as predict builds it
        (ParallelPlan.stage_layers, build_moe.stage_inputs)."""
        nl = len(grid.layouts)
        self.model_reason = np.full((len(self.specs), nl, len(grid.seq_lens)), None,
                                    dtype=object)
        self.stage_rows: dict[tuple[int, int], dict[str, float]] = {}
        for l, layout in enumerate(grid.layouts):
            tp, pp, cp = layout
            experts = grid.ep * (grid.etp or tp)  # a probe whose stage holds the expert mesh
            probe = ParallelPlan(num_gpus=tp * pp * cp * experts, gpus_per_node=1,
                                 **layout_options(grid, layout))
            for i, spec in enumerate(self.specs):
                try:
                    self.stage_rows[i, l] = stage_split_inputs(spec, probe)
                    check_recompute_layers(grid.recompute_layers,
                                           probe.stage_layers(spec.n_layers)[1], spec.name)
                except ConfigError as exc:  # every sequence length of the pair is invalid
                    self.model_reason[i, l, :] = str(exc)
                    continue
                try:  # the grid's expert settings need experts (TrainingConfig.check_model)
                    self.trainings[0].check_model(is_moe=spec.is_moe)
                except ConfigError as exc:
                    self.model_reason[i, l, :] = str(exc)
                    continue
                if layout == (1, 1, 1) and grid.ep == 1 and grid.etp in (None, 1):
                    continue
                for j, seq in enumerate(grid.seq_lens):
                    try:
                        probe.check_model(n_layers=spec.n_layers, n_heads=spec.n_heads,
                                          n_kv_heads=spec.kv_heads, seq_len=seq,
                                          n_experts=spec.n_experts,
                                          expert_ffn_size=spec.expert_size if spec.is_moe else 0)
                    except ConfigError as exc:
                        self.model_reason[i, l, j] = str(exc)
                        continue
        # one row per (spec, layout), spec-major (stage_index); placeholders where the layers
        # do not split (never evaluated)
        rows = [self.stage_rows.get((i, l)) for i in range(len(self.specs)) for l in range(nl)]
        template = next((r for r in rows if r is not None), {"layers_first": 1.0})
        self.stages = _columns(uniform_keys([r if r is not None else dict.fromkeys(template, 1.0)
                                             for r in rows]))

    def stage_index(self, spec, layout):
        """Row of the stage table for spec and layout codes."""
        return spec * len(self.grid.layouts) + layout

    def plan_index(self, g, h, layout, sharding):
        """Row of the plan table for GPU-count, system, layout and sharding codes."""
        return np.ravel_multi_index((g, h, layout, sharding), self.plan_shape)

    def model_columns(self, spec: np.ndarray, shard: np.ndarray, tp: np.ndarray):
        """Model inputs per distinct (spec, TP degree, shard size), and each row's index."""
        key = (spec.astype(np.int64) * 2**20 + tp.astype(np.int64)) * 2**32 + shard.astype(np.int64)
        uniq, inverse = np.unique(key, return_inverse=True)
        u_spec, u_tp = uniq // 2**52, (uniq // 2**32) % 2**20
        u_shard = (uniq % 2**32).astype(float)
        parts = []
        for s, t in sorted(set(zip(u_spec.tolist(), u_tp.tolist()))):
            shards = u_shard[(u_spec == s) & (u_tp == t)]
            x = {**model_inputs(self.specs[int(s)], shards, tp=int(t),
                                per_parameter=not profile(self.grid.framework).flat_parameter),
                 **framework_model_inputs(self.specs[int(s)], self.grid.framework)}
            parts.append({k: np.broadcast_to(np.asarray(v, dtype=float), shards.shape)
                          for k, v in x.items()})
        parts = [{k: np.broadcast_to(np.asarray(v, dtype=float), p["n_layers"].shape)
                  for k, v in p.items()} for p in uniform_keys(parts)]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}, inverse


def layout_options(grid: Grid, layout: tuple[int, int, int]) -> dict[str, Any]:
    """The ParallelPlan options of one (tp, pp, cp) layout of the grid: the grid's hybrid
    settings where they apply (vpp and the schedule with pp > 1; a flag switch, such as
    sequence parallelism or TP overlap, off where its dimension's degree is 1 in this layout;
    the switches of the grid-wide expert degree as given, checked by the plan)."""
    tp, pp, cp = layout
    degrees = {"tp": tp, "pp": pp, "cp": cp}
    switches = {name: (False if knobs.KNOBS[name].kind == "flag"
                       and degrees.get(knobs.KNOBS[name].dim) == 1 else value)
                for name, value in grid.switches.items()}
    return dict(tp=tp, pp=pp, cp=cp, vpp=grid.vpp if pp > 1 else 1, framework=grid.framework,
                ep=grid.ep, etp=grid.etp, pp_schedule=grid.pp_schedule if pp > 1 else None,
                **switches)


def grid_training(grid: Grid, precision: str) -> TrainingConfig:
    """The training options of the grid's points at ``precision`` (sequence, batch and
    recompute aside): the grid's knobs (those of :data:`~fsdpsim.drivers.sweep.grid.
    LOW_PRECISION_KNOBS` on a low-precision ``precision`` only), and for the kernel knobs the
    sweep does not take what predict takes without them (fused loss, BF16 layers:
    :func:`fsdpsim.plan.knobs.kernel_default`; the reduce dtype:
    :func:`~fsdpsim.plan.frameworks.with_defaults`)."""
    low = precision in LOW_PRECISION
    kernel = {name: kernel_default(name, grid.framework, precision)
              for name in knobs.KERNEL_KNOBS}
    kernel.update({name: value and low if name in LOW_PRECISION_KNOBS else value
                   for name, value in grid.kernel.items()})
    training = TrainingConfig(
        seq_len=1, precision=precision, optimizer=grid.optimizer,
        recompute_layers=grid.recompute_layers,
        moe_capacity_factor=grid.moe_capacity_factor, moe_imbalance=grid.moe_imbalance,
        **kernel)
    return with_defaults(training, grid.framework)


def _bf16_share(framework: str, precision: str) -> float | None:
    """The BF16 share of the linear layers of the framework's default ``bf16_layers``
    (:func:`fsdpsim.engine.peaks.bf16_linear_share`): none or zero layers, whatever the model."""
    layers = knob_default(framework, "bf16_layers", precision)
    if layers not in (None, 0):
        raise ConfigError(f"--framework {framework}: a default of {layers} BF16 layers depends "
                          "on the model; sweep takes none or 0")
    return None if layers is None else 0.0


def stage_split_inputs(spec, plan: ParallelPlan) -> dict[str, float]:
    """The inputs predict's builders give ``plan`` for the layers of ``spec`` on the first,
    busiest middle and last pipeline stage (:func:`~fsdpsim.engine.build.plan_inputs` with the
    layer count, :func:`~fsdpsim.engine.build_moe.stage_inputs`): the framework's split, even
    or not; a :class:`ConfigError` when the layers do not split."""
    x = plan_inputs(plan, spec.n_layers)
    return {**{k: float(x[k]) for k in ("layers_first", "layers_mid", "layers_last",
                                         "mid_stage")},
            **stage_inputs(spec, plan)}


def _columns(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}


def _gather(columns: dict[str, np.ndarray], index: np.ndarray, out: dict[str, Any]) -> None:
    """``out[k] = columns[k][index]``; a column with one value stays a scalar (cheaper)."""
    for k, values in columns.items():
        out[k] = values[0] if np.all(values == values[0]) else values[index]
