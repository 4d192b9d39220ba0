"""Engine inputs of a framework profile (:mod:`fsdpsim.plan.frameworks`): its recipe and code
paths, the collective library release its runs used, data-parallel collectives per unit and
its kernel stack's fractions; split by what each part depends on (system, model, profile
alone) so that ``sweep`` builds each once. :func:`fsdpsim.engine.build.config_inputs` adds
them to a configuration's inputs."""

from __future__ import annotations

import math
from typing import Any

from fsdpsim.hardware import efficiency
from fsdpsim.hardware.spec import System
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import ParallelPlan
from fsdpsim.util.memo import by_identity


def framework_inputs(spec: ModelSpec, system: System, plan: ParallelPlan,
                     precision: str | None = None) -> dict[str, Any]:
    """Engine inputs of the plan's framework profile (:mod:`fsdpsim.plan.frameworks`): its recipe,
    the collective library release its runs used (NCCL cost-model constants), the number of
    data-parallel collectives per unit (one, or one per gathered parameter), whether those
    collectives overlap compute, and (given the training ``precision``) the GEMM and attention
    fractions of its kernel stack for that precision (:func:`fsdpsim.hardware.efficiency.resolve`).
    The parts by what they depend on: :func:`framework_system_inputs`,
    :func:`framework_model_inputs`, :func:`framework_constants` (``sweep`` builds each once)."""
    return {**framework_system_inputs(system, plan.framework, precision),
            **framework_constants(plan.framework),
            **framework_model_inputs(spec, plan.framework)}


def framework_system_inputs(system: System, framework: str,
                            precision: str | None = None) -> dict[str, Any]:
    """The inputs of :func:`framework_inputs` that depend on the system: the kernel stack's
    fractions for ``precision`` (none without one) and the profile's collective library release
    where it is not the default profile's (:func:`fabric_inputs` gave that one); computed
    once per system object, framework and precision (a System is frozen; each caller gets a
    copy)."""
    return dict(by_identity(_FRAMEWORK_SYSTEM_INPUTS, system, (framework, precision),
                            lambda: _framework_system_inputs(system, framework, precision)))


#: (system, its inputs) by (id(system), framework, precision) (:func:`by_identity`).
_FRAMEWORK_SYSTEM_INPUTS: dict[tuple[int, str, str | None], tuple[System, dict[str, Any]]] = {}


def _framework_system_inputs(system: System, framework: str,
                             precision: str | None) -> dict[str, Any]:
    """:func:`framework_system_inputs`, computed."""
    from fsdpsim.plan import frameworks
    from fsdpsim.costs import nccl

    prof = frameworks.profile(framework)
    x: dict[str, Any] = {}
    if precision is not None:
        x.update(efficiency.resolve(system.accelerator, precision, prof.kernel_stack).values)
    lib = system.collectives.get(prof.collectives)
    if lib is not None and prof.collectives != frameworks.PROFILES["fsdp2"].collectives:
        x.update(nccl.library_inputs(lib))  # system_inputs gave the default profile's release
    return x


def framework_model_inputs(spec: ModelSpec, framework: str) -> dict[str, float]:
    """The inputs of :func:`framework_inputs` that depend on the model: data-parallel
    collectives per block and per root unit (one, or one per gathered parameter of a
    per-parameter profile, DeepSpeed's ``stage3_param_persistence_threshold``)."""
    from fsdpsim.plan import frameworks

    prof = frameworks.profile(framework)
    block_calls = root_calls = 1.0
    if prof.per_parameter:
        shapes = spec.unit_parameter_shapes()

        def gathered(unit):
            return max(1.0, float(sum(math.prod(sh) >= prof.persistence_numel
                                      for _, sh in shapes[unit])))
        block_calls, root_calls = gathered("block"), gathered("root")
    return {"dp_block_calls": block_calls, "dp_root_calls": root_calls}


def framework_constants(framework: str) -> dict[str, float]:
    """The inputs of :func:`framework_inputs` that only the profile sets (its code paths)."""
    from fsdpsim.plan import frameworks

    prof = frameworks.profile(framework)
    return {"megatron": float(prof.recipe == "megatron"),
            "framework_uncertainty": prof.uncertainty,
            "param_gather_overlap": float(prof.name == "megatron"),
            # cuDNN fused attention is Transformer Engine's (the te stack); every other
            # stack runs FlashAttention-2 / SDPA at the catalog's attention_fraction
            "fused_attention": float(prof.kernel_stack == "te"),
            "dp_gather_overlap": float(prof.gather_overlap),
            "dp_list_collectives": float(prof.list_collectives),
            "ddp_overlap": float(prof.grad_reduce_overlap),
            "zero1_reduce_overlap": float(prof.zero1_reduce_overlap),
            "grad_bucket_bytes": prof.grad_bucket_bytes,
            "param_broadcast": float(prof.param_broadcast),
            "grad_all_reduce": float(prof.grad_all_reduce),
            "grad_accum_pass_bytes": prof.grad_accum_pass_bytes}
