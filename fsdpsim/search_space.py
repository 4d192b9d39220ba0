"""The space ``fsdpsim search`` explores: every valid parallel plan of a model on a number of
GPUs, and the constraints a user puts on it.

A plan (:class:`fsdpsim.parallel.ParallelPlan`) is a mesh ``pp × dp_replicate × dp_shard × cp ×
tp`` (× the expert mesh ``etp × ep × expert-dp`` of a mixture of experts), its order on the
network tiers, a ZeRO stage / FSDP sharding for the data dimension, a pipeline schedule with its
virtual stages and layer split, sequence parallelism, TP communication overlap and the context
parallel kind. Each plan is then tried with every micro-batch the global batch allows and every
recompute setting (:mod:`fsdpsim.search`).

What the space leaves out by rule (each rule says why; ``--fix`` overrides the degree ones):

- TP beyond one scale-up domain (``--max-tp``, default the domain's GPUs): TP's per-layer
  collectives on the scale-out network cost more than any other split (Narayanan et al. SC21
  §3.3, "tensor model parallelism ... within a multi-GPU server").
- Context parallelism below :data:`MIN_TOKENS_PER_CP_RANK` tokens per rank: attention chunks
  that small leave the ring's KV exchange unhidden (Llama 3 ran CP 16 on 131,072 tokens, 8,192
  per rank; Dubey et al. 2024 §3.3.2).
- More than :data:`MAX_VPP` virtual stages per rank (Megatron's tuned recipes use 2-8).
- GPipe when 1F1B is in the space: the same bubble with all micro-batches' activations held
  (Narayanan et al. SC21 §2.2.1); it is searched with ``--fix pp_schedule=gpipe``.
- Uneven pipeline splits other than the end stages holding one to :data:`MAX_END_SHIFT` layers
  fewer than the middle ones (Megatron's ``--decoder-first/last-pipeline-num-layers``: the
  embedding and the loss make the end stages heavier).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping

from fsdpsim.errors import ConfigError
from fsdpsim.model import ModelSpec
from fsdpsim.parallel import (CP_KINDS, DEFAULT_MESH_ORDER, GRAD_SYNCS, PP_SCHEDULES, RECOMPUTES,
                              SHARDED, SHARDINGS, ParallelPlan)

#: Context-parallel ranks keep at least this many tokens each (module docstring) [-].
MIN_TOKENS_PER_CP_RANK = 1024
#: Most virtual pipeline stages per rank searched [-].
MAX_VPP = 8
#: End stages may hold up to this many layers fewer than the middle ones [-].
MAX_END_SHIFT = 2

#: Degrees and choices ``--fix`` accepts, with the type of their value.
FIXABLE = {"tp": int, "pp": int, "cp": int, "vpp": int, "ep": int, "etp": int,
           "dp_shard": int, "dp_replicate": int, "sharding": str, "pp_schedule": str,
           "sequence_parallel": bool, "tp_overlap": bool, "cp_kind": str,
           "micro_batch": int, "recompute": str, "recompute_layers": int,
           "grad_sync": str, "keep_gathered": bool, "ep_overlap": bool, "zero": int,
           "pp_first_layers": int, "pp_last_layers": int}
_CHOICES = {"sharding": SHARDINGS, "pp_schedule": PP_SCHEDULES, "cp_kind": CP_KINDS,
            "recompute": RECOMPUTES, "grad_sync": GRAD_SYNCS}
_ALIASES = {"schedule": "pp_schedule", "sp": "sequence_parallel", "mb": "micro_batch",
            "micro-batch": "micro_batch", "pp-schedule": "pp_schedule"}
_ZERO = {0: "none", 1: "optimizer", 2: "grad_op", 3: "full"}


@dataclass(frozen=True)
class SearchSpace:
    """The user's constraints on the plans searched."""

    fixed: Mapping[str, Any] = field(default_factory=dict)
    """Settings every plan must have (``{"tp": 8, "sharding": "full"}``): :data:`FIXABLE`."""
    max_tp: int | None = None
    """Largest TP degree; None = the GPUs of one scale-up domain [-]."""
    max_pp: int | None = None
    """Largest pipeline degree; None = no limit but one layer per stage [-]."""
    mesh_orders: bool = True
    """Also try the orders of the non-TP mesh dimensions on the tiers (TP stays innermost)."""
    framework: str = "fsdp2"
    """The framework profile every plan runs on (:mod:`fsdpsim.frameworks`)."""

    def get(self, name: str, default=None):
        return self.fixed.get(name, default)


def parse_fix(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``["tp=8", "sharding=full"]`` → ``{"tp": 8, "sharding": "full"}``; one clear error per
    bad item naming what is accepted."""
    out: dict[str, Any] = {}
    accepted = ", ".join(sorted(FIXABLE))
    for item in items:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise ConfigError(f"--fix {part!r} is not NAME=VALUE; accepted names: {accepted}")
            name, value = (s.strip() for s in part.split("=", 1))
            name = _ALIASES.get(name, name).replace("-", "_")
            if name not in FIXABLE:
                raise ConfigError(f"--fix {name!r} is not accepted; accepted names: {accepted}")
            out[name] = _fix_value(name, value)
    if "zero" in out:
        if "sharding" in out and out["sharding"] != _ZERO[out["zero"]]:
            raise ConfigError(f"--fix zero={out['zero']} and sharding={out['sharding']} "
                              "contradict each other")
        out["sharding"] = _ZERO[out.pop("zero")]
    return out


def _fix_value(name: str, text: str) -> Any:
    kind = FIXABLE[name]
    if kind is bool:
        low = text.lower()
        if low in ("1", "true", "on", "yes"):
            return True
        if low in ("0", "false", "off", "no"):
            return False
        raise ConfigError(f"--fix {name}={text!r} is not accepted; accepted: true or false")
    if kind is int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        low = 0 if name in ("zero", "recompute_layers") else 1
        if value < low or (name == "zero" and value > 3):
            what = "0, 1, 2 or 3" if name == "zero" else f"a whole number >= {low}"
            raise ConfigError(f"--fix {name}={text!r} is not accepted; accepted: {what}")
        return value
    if text not in _CHOICES[name]:
        raise ConfigError(f"--fix {name}={text!r} is not accepted; accepted: "
                          f"{', '.join(_CHOICES[name])}")
    return text


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _options(space: SearchSpace, name: str, values) -> list:
    """``values``, or just the fixed one (kept even when not among ``values``: the plan's own
    validation then says why it cannot be)."""
    if name in space.fixed:
        return [space.fixed[name]]
    return list(values)


def stage_splits(n_layers: int, pp: int, vpp: int) -> list[tuple[int | None, int | None]]:
    """(pp_first_layers, pp_last_layers) options: the even split when it exists (None, None),
    and end stages with 1..:data:`MAX_END_SHIFT` layers fewer than the middle ones."""
    if pp == 1:
        return [(None, None)] if n_layers % vpp == 0 else []
    out = []
    if n_layers % (pp * vpp) == 0:
        out.append((None, None))
    if pp < 3:  # two stages: no middle stage to hold the layers the ends give up
        return out
    # first = mid - a, last = mid - b: L = pp * mid - a - b
    for a in range(MAX_END_SHIFT + 1):
        for b in range(MAX_END_SHIFT + 1):
            if (a, b) == (0, 0) or (n_layers + a + b) % pp:
                continue
            mid = (n_layers + a + b) // pp
            if mid % vpp or mid - max(a, b) < 1:
                continue
            out.append((mid - a, mid - b))
    return sorted(set(out), key=lambda s: (s != (None, None), s))


def enumerate_plans(spec: ModelSpec, num_gpus: int, gpus_per_node: int, seq_len: int,
                    global_batch: int, space: SearchSpace) -> Iterator[ParallelPlan]:
    """Every plan of the space that the model, the GPU count and the global batch allow (each
    passes :class:`ParallelPlan`'s and :meth:`ParallelPlan.check_model`'s checks; a global
    batch divisible by its data-parallel degree)."""
    fixed = space.fixed
    max_tp = space.max_tp or gpus_per_node
    moe = spec.is_moe
    for tp in _options(space, "tp", [d for d in divisors(num_gpus) if d <= max_tp]):
        if num_gpus % tp:
            continue
        cps = [d for d in divisors(num_gpus // tp)
               if d == 1 or seq_len // d >= MIN_TOKENS_PER_CP_RANK]
        for cp in _options(space, "cp", cps):
            if (num_gpus // tp) % cp:
                continue
            max_pp = min(space.max_pp or spec.n_layers, spec.n_layers)
            pps = [d for d in divisors(num_gpus // (tp * cp)) if d <= max_pp]
            for pp in _options(space, "pp", pps):
                if (num_gpus // (tp * cp)) % pp:
                    continue
                dp = num_gpus // (tp * cp * pp)
                if global_batch % dp:
                    continue
                yield from _plans_of_mesh(spec, num_gpus, gpus_per_node, seq_len, tp, cp, pp,
                                          dp, moe, space, fixed)


def _plans_of_mesh(spec, num_gpus, gpus_per_node, seq_len, tp, cp, pp, dp, moe, space,
                   fixed) -> Iterator[ParallelPlan]:
    """The plans of one (tp, cp, pp) mesh: schedules, splits, shardings, the TP/CP variants,
    expert meshes and mesh orders."""
    if pp == 1:
        pipes = [(1, None, (None, None))]
    else:
        pipes = []
        vpps = _options(space, "vpp", [1] + [v for v in range(2, MAX_VPP + 1)])
        for vpp in vpps:
            if "pp_schedule" in fixed:
                schedules = [fixed["pp_schedule"]]
            else:
                schedules = ["interleaved"] if vpp > 1 else ["1f1b", "zb-h1"]
            if "pp_first_layers" in fixed or "pp_last_layers" in fixed:
                splits = [(fixed.get("pp_first_layers"), fixed.get("pp_last_layers"))]
            else:
                splits = stage_splits(spec.n_layers, pp, vpp)
            pipes += [(vpp, s, split) for s in schedules for split in splits]
    shardings = []
    for sharding in _options(space, "sharding", SHARDINGS):
        if sharding == "hybrid":
            groups = ([fixed["dp_shard"]] if "dp_shard" in fixed
                      else [d for d in divisors(dp) if 1 < d < dp])
            shardings += [("hybrid", g) for g in groups]
        elif "dp_shard" in fixed and fixed["dp_shard"] != (1 if sharding == "none" else dp):
            continue
        else:
            shardings.append((sharding, None))
    if "dp_replicate" in fixed:
        shardings = [(s, g) for s, g in shardings
                     if (dp // g if s == "hybrid" else 1) == fixed["dp_replicate"]]
    tp_variants = ([(sp, ov) for sp in _options(space, "sequence_parallel", (True, False))
                    for ov in _options(space, "tp_overlap", (False, True))]
                   if tp > 1 else [(False, False)])
    cp_kinds = _options(space, "cp_kind", CP_KINDS) if cp > 1 else ["ring"]
    experts = [(1, None, False)]
    if moe:
        experts = []
        for etp in _options(space, "etp", sorted({1, tp})):
            room = (tp * cp * dp) // etp
            for ep in _options(space, "ep", [d for d in divisors(room) if spec.n_experts % d == 0]):
                for ov in (_options(space, "ep_overlap", (False, True)) if ep > 1 else [False]):
                    experts.append((ep, etp, ov))
    seen_layouts: dict = {}
    for vpp, schedule, (first, last) in pipes:
        for sharding, group in shardings:
            accum = [(space.get("grad_sync", "every"), space.get("keep_gathered", False))]
            for (sp, ov), kind, (ep, etp, ep_ov), (gsync, keep) in itertools.product(
                    tp_variants, cp_kinds, experts, accum):
                try:
                    plan = ParallelPlan(
                        num_gpus=num_gpus, gpus_per_node=gpus_per_node, sharding=sharding,
                        shard_group_size=group, tp=tp, pp=pp, cp=cp, vpp=vpp,
                        pp_schedule=schedule, sequence_parallel=sp, tp_overlap=ov,
                        cp_kind=kind, pp_first_layers=first, pp_last_layers=last,
                        framework=space.framework, ep=ep, etp=etp, ep_overlap=ep_ov,
                        grad_sync=gsync, keep_gathered=keep)
                    plan.check_model(n_layers=spec.n_layers, n_heads=spec.n_heads,
                                     n_kv_heads=spec.kv_heads, seq_len=seq_len,
                                     n_experts=spec.n_experts,
                                     expert_ffn_size=spec.expert_size if moe else 0)
                except ConfigError:
                    continue
                yield plan
                if space.mesh_orders:
                    yield from _other_orders(plan, seen_layouts)


def _other_orders(plan: ParallelPlan, seen: dict) -> Iterator[ParallelPlan]:
    """The plan with its non-unit, non-TP dimensions in the other orders outside TP (TP stays
    innermost, on adjacent ranks) that place some group differently on the tiers: orders with
    the same group, pod and expert layouts as an earlier one are the same plan to the model."""
    from fsdpsim.layout import expert_layout, group_layout

    degrees = plan.degrees
    outer = [d for d in DEFAULT_MESH_ORDER if d != "tp" and degrees[d] > 1]
    if len(outer) < 2:
        return
    units = tuple(d for d in DEFAULT_MESH_ORDER if d != "tp" and degrees[d] == 1)
    key = (plan.tp, plan.cp, plan.pp, plan.ep, plan.etp, degrees["dp_shard"],
           degrees["dp_replicate"], plan.sharding == "hybrid")
    if key not in seen:  # the distinct layouts of this mesh, computed once
        layouts, orders = [], []  # the first permutation is the default order
        for perm in itertools.permutations(outer):
            order = units + perm + ("tp",)
            probe = replace(plan, mesh_order=order)
            layout = (group_layout(probe), expert_layout(probe))
            if layout not in layouts:
                layouts.append(layout)
                orders.append(order)
        seen[key] = orders[1:]
    for order in seen[key]:
        yield replace(plan, mesh_order=order)


__all__ = ["SearchSpace", "FIXABLE", "parse_fix", "enumerate_plans", "stage_splits",
           "MIN_TOKENS_PER_CP_RANK", "MAX_VPP", "MAX_END_SHIFT"]
