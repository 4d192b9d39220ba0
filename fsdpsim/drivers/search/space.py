"""The space ``fsdpsim search`` explores: every valid parallel plan of a model on a number of
GPUs, and the constraints a user puts on it.

A plan (:class:`fsdpsim.plan.parallel.ParallelPlan`) is a mesh ``pp × dp_replicate × dp_shard × cp ×
tp`` (× the expert mesh ``etp × ep × expert-dp`` of a mixture of experts), its order on the
network tiers, a ZeRO stage / FSDP sharding for the data dimension, a pipeline schedule with its
virtual stages and layer split, sequence parallelism, TP communication overlap and the context
parallel kind. Each plan is then tried with every micro-batch the global batch allows and every
recompute setting (:mod:`fsdpsim.drivers.search.run`).

What the space leaves out by rule (each rule says why; ``--fix`` overrides the degree ones):

- TP beyond one scale-up domain (``--max-tp``, default the domain's GPUs): TP's per-layer
  collectives on the scale-out network cost more than any other split (Narayanan et al. SC21
  §3.3, "tensor model parallelism ... within a multi-GPU server").
- Context parallelism below :data:`MIN_TOKENS_PER_CP_RANK` tokens per rank: attention chunks
  that small leave the ring's KV exchange unhidden (Llama 3 ran CP 16 on 131,072 tokens, 8,192
  per rank; Dubey et al. 2024 §3.3.2).
- More than :data:`MAX_VPP` virtual stages per rank (Megatron's tuned recipes use 2-8).
- TP without communication overlap: in fsdpsim's model overlap only hides TP communication
  behind the GEMMs beside it (never slower, the same memory; ``tests/test_search.py`` checks
  this dominance on sampled plans). ``--fix tp_overlap=false`` searches stacks without async TP.
- GPipe when 1F1B is in the space: the same bubble with all micro-batches' activations held
  (Narayanan et al. SC21 §2.2.1); it is searched with ``--fix pp_schedule=gpipe``.
- Uneven pipeline splits other than the end stages holding one to :data:`MAX_END_SHIFT` layers
  fewer than the middle ones (Megatron's ``--decoder-first/last-pipeline-num-layers``: the
  embedding and the loss make the end stages heavier).
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping

from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.frameworks import layout_refusals, profile, tp_refusals
from fsdpsim.plan.knobs import PLAN_SWITCHES, switch_value
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import (CP_KINDS, DEFAULT_MESH_ORDER, SHARDED, SHARDINGS,
                                   ParallelPlan)
from fsdpsim.drivers.predict import divisors
from fsdpsim.drivers.search.fix import FIXABLE, parse_fix  # noqa: F401

#: Context-parallel ranks keep at least this many tokens each (module docstring) [-].
MIN_TOKENS_PER_CP_RANK = 1024
#: Most virtual pipeline stages per rank searched [-].
MAX_VPP = 8
#: End stages may hold up to this many layers fewer than the middle ones [-].
MAX_END_SHIFT = 2

#: Most candidates (plan x micro-batch) a search takes, by :func:`estimate_size`'s upper bound
#: (which is 3-8x the count evaluated: 434,070 for the 110,232 of Llama 3 70B on 1,024 GPUs,
#: 7.3 M for the 2.2 M of DeepSeek-V3 on 256 GB200, about 10 s on one core). Beyond it a search
#: would run for minutes: it is refused with how to narrow the space.
MAX_CANDIDATES = 20_000_000

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
    """The framework profile every plan runs on (:mod:`fsdpsim.plan.frameworks`)."""
    pod_gpus: int | None = None
    """GPUs per non-blocking pod of the cluster (mesh orders that place a group differently
    on the pods are different plans); None = no pods."""

    def get(self, name: str, default=None):
        """The fixed value of ``name``, else ``default``."""
        return self.fixed.get(name, default)

    @property
    def orders_searched(self) -> bool:
        """Whether the mesh's other orders are searched: :attr:`mesh_orders`, where the
        framework can place its mesh dimensions in another order (torchtitan and Megatron-LM
        each build one order: their ``supports`` hold ``mesh_order`` ``default``)."""
        return self.mesh_orders and self.supports.get("mesh_order") != ("default",)

    @property
    def supports(self) -> dict[str, tuple]:
        """What the framework can run (:attr:`fsdpsim.plan.frameworks.Framework.supports`)."""
        return dict(profile(self.framework).supports)

    def values_of(self, name: str, values) -> list:
        """The values of setting ``name`` the search enumerates out of ``values``: the fixed
        one, or those the framework supports (:func:`_options`)."""
        return _options(self, name, values)


def _options(space: SearchSpace, name: str, values) -> list:
    """``values``, or just the fixed one (kept even when not among ``values``: the plan's own
    validation then says why it cannot be); a framework that runs only some values of a
    setting (:attr:`fsdpsim.plan.frameworks.Framework.supports`) keeps those of ``values``, or its
    own when none of ``values`` is one."""
    if name in space.fixed:
        return [space.fixed[name]]
    supported = space.supports.get(name)
    if supported is None:
        return list(values)
    return [v for v in values if v in supported] or list(supported)


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


@dataclass(frozen=True)
class Family:
    """Plans that share a mesh and its layout on the tiers (degrees, order, HSDP groups, expert
    mesh) and differ only in settings the layout does not see: the ZeRO stage among full,
    grad_op and optimizer, the pipeline schedule with its virtual stages and layer split, SP,
    TP overlap, the CP kind and EP overlap. The search builds a family's engine inputs once and
    its variants as columns (:mod:`fsdpsim.drivers.search.run`)."""

    base: ParallelPlan
    """The first variant, validated with the model."""
    variants: tuple[dict[str, Any], ...]
    """Each variant's values of :data:`VARIANT_FIELDS` (the base's own first)."""

    def plan(self, i: int) -> ParallelPlan:
        """Variant ``i`` as a validated plan."""
        return replace(self.base, **self.variants[i])

    def plans(self) -> Iterator[ParallelPlan]:
        """Every variant as a validated plan."""
        return (self.plan(i) for i in range(len(self.variants)))


#: The plan fields a family's variants differ in: every plan switch among them
#: (:data:`fsdpsim.plan.knobs.PLAN_SWITCHES`).
VARIANT_FIELDS = ("sharding", "vpp", "pp_schedule", "pp_first_layers", "pp_last_layers",
                  *PLAN_SWITCHES)
#: The plan switches the space searches over by what it knows of them (the framework's
#: refusals, the model's divisibility); any other takes its ``--fix`` value, else what predict
#: takes without it (:func:`fsdpsim.plan.knobs.switch_value`).
SEARCHED_SWITCHES = ("sequence_parallel", "tp_overlap", "cp_kind", "ep_overlap")


def enumerate_plans(spec: ModelSpec, num_gpus: int, gpus_per_node: int, seq_len: int,
                    global_batch: int | None, space: SearchSpace) -> Iterator[ParallelPlan]:
    """Every plan of the space that the model, the GPU count and the global batch allow (each
    passes :class:`ParallelPlan`'s and :meth:`ParallelPlan.check_model`'s checks; a global
    batch divisible by its data-parallel degree; ``global_batch`` None: each mesh trains
    :func:`batch_of` its degree, which it divides)."""
    for family in enumerate_families(spec, num_gpus, gpus_per_node, seq_len, global_batch,
                                     space):
        yield from family.plans()


def enumerate_families(spec: ModelSpec, num_gpus: int, gpus_per_node: int, seq_len: int,
                       global_batch: int | None, space: SearchSpace) -> Iterator[Family]:
    """The plans of :func:`enumerate_plans`, as :class:`Family` groups."""
    for tp, cp, pp, dp in meshes(spec, num_gpus, gpus_per_node, seq_len, global_batch, space):
        yield from _families_of_mesh(spec, num_gpus, gpus_per_node, seq_len, tp, cp, pp, dp,
                                     space)


def meshes(spec: ModelSpec, num_gpus: int, gpus_per_node: int, seq_len: int,
           global_batch: int | None, space: SearchSpace) -> Iterator[tuple[int, int, int, int]]:
    """The (tp, cp, pp, dp) meshes the space's degree rules allow, before their families."""
    max_tp = space.max_tp or gpus_per_node
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
                if global_batch is not None and global_batch % dp:
                    continue
                yield tp, cp, pp, dp


def batch_of(global_batch: int | None, seq_len: int, dp):
    """The global batch a mesh of data-parallel degree ``dp`` trains [sequences]: the given
    one, or (None) the default of every command adjusted to ``dp``
    (:func:`fsdpsim.plan.training.default_global_batch`, as predict adjusts it). ``dp`` may be
    a numpy array (one batch each)."""
    from fsdpsim.plan.training import default_global_batch

    if global_batch is not None:
        return global_batch
    return default_global_batch(seq_len, dp)


def check_size(spec: ModelSpec, num_gpus: int, gpus_per_node: int, seq_len: int,
               global_batch: int | None, space: SearchSpace) -> None:
    """Refuse, before any work, a space larger than :data:`MAX_CANDIDATES` (one line saying the
    estimate, the limit and how to narrow it)."""
    plans, candidates = estimate_size(spec, num_gpus, gpus_per_node, seq_len, global_batch,
                                      space)
    if candidates > MAX_CANDIDATES:
        free = [n for n in ("tp", "pp", "cp", "ep", "sharding", "micro_batch")
                if n not in space.fixed and (n != "ep" or spec.is_moe)]
        orders = ", --default-mesh-order" if space.orders_searched else ""
        raise ConfigError(
            f"search space of {spec.name} on {num_gpus:,} GPUs with "
            + ("the default global batch " if global_batch is None
               else f"global_batch({global_batch}) ") +
            f"is too large: up to {candidates:,} candidates ({plans:,} plans), more than the "
            f"{MAX_CANDIDATES:,} a search takes; narrow it with --fix (e.g. "
            + ", ".join(f"--fix {n}=..." for n in free[:3])
            + f"){orders}, --max-tp, --max-pp, or fewer GPUs")


def estimate_size(spec: ModelSpec, num_gpus: int, gpus_per_node: int, seq_len: int,
                  global_batch: int | None, space: SearchSpace) -> tuple[int, int]:
    """An upper bound on (plans, candidates) of the space, counted per mesh without building a
    plan: data-parallel layouts x expert meshes x pipeline variants x SP/overlap/CP kinds x
    mesh orders (every permutation of the non-unit outer dimensions, of which the search keeps
    the distinct layouts), and x the micro-batches (divisors of the sequences per rank) for the
    candidates. What :func:`fsdpsim.drivers.search.run.search` checks against its limit before it
    works."""
    fixed, moe = space.fixed, spec.is_moe
    shardings = _options(space, "sharding", SHARDINGS)
    zero = len([s for s in shardings if s in ("full", "grad_op", "optimizer")])
    plain = int("none" in shardings)
    grouped = int("hybrid" in shardings) + int(
        "optimizer" in shardings and profile(space.framework).zero1_groups)
    tp_variants = len(_options(space, "sequence_parallel", (True, False))) * len(
        _options(space, "tp_overlap", (True,)))
    pipes: dict[int, int] = {}
    plans = candidates = 0
    for tp, cp, pp, dp in meshes(spec, num_gpus, gpus_per_node, seq_len, global_batch, space):
        if pp not in pipes:
            pipes[pp] = len(_pipes(spec, pp, space))
        groups = [(zero + plain, 0)] + ([(grouped, 1)] * len(
            [g for g in divisors(dp) if 1 < g < dp]) if grouped else [])
        expert = 1
        if moe:
            expert = sum(len([d for d in divisors((tp * cp * dp) // etp)
                              if spec.n_experts % d == 0]) for etp in sorted({1, tp})) * 2
        outer = (pp > 1) + (cp > 1) + (dp > 1)
        variants = (pipes[pp] * (tp_variants if tp > 1 else 1) * (2 if cp > 1 else 1)
                    * expert)
        n = sum(count * variants * (math.factorial(outer + extra) if space.orders_searched
                                       else 1)
                for count, extra in groups)
        plans += n
        per_rank = batch_of(global_batch, seq_len, dp) // dp
        candidates += n * (1 if "micro_batch" in fixed else len(divisors(per_rank)))
    return plans, candidates


def _pipes(spec, pp: int, space: SearchSpace) -> list[tuple[int, str | None, tuple]]:
    """(vpp, schedule, (first, last)) options of a pipeline degree; each split valid and
    distinct: where the layers do not divide over ``pp × vpp``, the framework's own split
    ((None, None), as predict takes it: :mod:`fsdpsim.plan.pipeline_split`) first, then the
    end stages of :func:`stage_splits` that place the layers otherwise."""
    fixed = space.fixed
    if pp == 1:
        return [(1, None, (None, None))] if "vpp" not in fixed or fixed["vpp"] == 1 else []
    out = []
    for vpp in _options(space, "vpp", range(1, MAX_VPP + 1)):
        schedules = _options(space, "pp_schedule",
                             ["interleaved"] if vpp > 1 else ["1f1b", "zb-h1"])
        schedules = [s for s in schedules if (s == "interleaved") == (vpp > 1)]
        if "pp_first_layers" in fixed or "pp_last_layers" in fixed:
            splits = [(fixed.get("pp_first_layers"), fixed.get("pp_last_layers"))]
        else:
            splits = stage_splits(spec.n_layers, pp, vpp)
            if spec.n_layers % (pp * vpp):
                splits = [(None, None)] + splits
        placed = set()  # each placement of the layers once
        for first, last in splits:
            try:
                probe = ParallelPlan(num_gpus=pp, gpus_per_node=1, pp=pp, vpp=vpp,
                                     pp_first_layers=first, pp_last_layers=last,
                                     framework=space.framework)
                probe.stage_layers(spec.n_layers)
                counts = probe.layer_split(spec.n_layers).counts
            except ConfigError:
                continue
            if counts in placed:
                continue
            placed.add(counts)
            out += [(vpp, s, (first, last)) for s in schedules]
    return out


def _families_of_mesh(spec, num_gpus, gpus_per_node, seq_len, tp, cp, pp, dp,
                      space) -> Iterator[Family]:
    """The families of one (tp, cp, pp) mesh: data-parallel layouts (DDP, the ZeRO stages,
    each HSDP group), expert meshes and mesh orders; variants inside each."""
    fixed, moe = space.fixed, spec.is_moe
    gsync, keep = space.get("grad_sync", "every"), space.get("keep_gathered", False)
    groups: list[tuple[tuple[str, ...], int | None]] = []  # (shardings, HSDP group)
    zero = [s for s in _options(space, "sharding", SHARDINGS) if s in ("full", "grad_op",
                                                                       "optimizer")]
    if gsync != "every" or keep:
        zero = [s for s in zero if s in SHARDED]
    if zero and fixed.get("dp_shard", dp) == dp and fixed.get("dp_replicate", 1) == 1:
        groups.append((tuple(zero), None))
    if ("none" in _options(space, "sharding", SHARDINGS) and gsync == "every" and not keep
            and fixed.get("dp_shard", 1) == 1 and fixed.get("dp_replicate", dp) == dp):
        groups.append((("none",), None))
    # shard groups smaller than the data-parallel group: HSDP's, and ZeRO-1's under a framework
    # that has them (InternEvo's zero1)
    zero1_groups = "optimizer" in zero and profile(space.framework).zero1_groups
    hybrid = "hybrid" in _options(space, "sharding", SHARDINGS)
    if zero1_groups or hybrid:
        sizes = [g for g in ([fixed["dp_shard"]] if "dp_shard" in fixed
                             else [d for d in divisors(dp) if 1 < d < dp])
                 if dp % g == 0 and fixed.get("dp_replicate", dp // g) == dp // g]
        if zero1_groups:
            groups += [(("optimizer",), g) for g in sizes if 1 < g < dp]
        if hybrid:
            groups += [(("hybrid",), g) for g in sizes]
    pipes = _pipes(spec, pp, space)
    tp_variants = ([(sp, ov) for sp in _options(space, "sequence_parallel", (True, False))
                    for ov in _options(space, "tp_overlap", (True,))
                    if _runs(space, ("sequence_parallel", "tp_overlap"), tp_refusals(
                        space.framework, sequence_parallel=sp, tp_overlap=ov))]
                   if tp > 1 else [(False, False)])
    cp_kinds = [None]
    if cp > 1:
        cp_kinds = [k for k in _options(space, "cp_kind", CP_KINDS)
                    if (k == "ring" and seq_len % (2 * cp) == 0)
                    or (k == "all2all" and spec.n_heads % (tp * cp) == 0)]
    experts = [(1, None)] if fixed.get("ep", 1) == 1 and fixed.get("etp") in (None, tp) else []
    if moe:
        experts = [(ep, etp) for etp in _options(space, "etp", sorted({1, tp}))
                   for ep in _options(space, "ep", [d for d in divisors((tp * cp * dp) // etp)
                                                    if spec.n_experts % d == 0])]
    others = {name: switch_value(name, fixed.get(name), space.framework)
              for name in PLAN_SWITCHES if name not in SEARCHED_SWITCHES}
    seen_layouts: dict = {}
    made: dict[tuple, list[dict[str, Any]]] = {}  # the variant dicts of each (shardings, EP)
    for all_shardings, group in groups:
        for ep, etp in experts:
            # the data-parallel and expert layouts the framework runs (--fix keeps its own)
            shardings = tuple(sh for sh in all_shardings if _runs(
                space, ("sharding", "ep", "etp"), layout_refusals(
                    space.framework, sharding=sh, dp_shard=group or dp, cp=cp, tp=tp, ep=ep,
                    etp=tp if etp is None else etp, pp=pp, dp=dp)))
            if not shardings:
                continue
            ep_overlaps = tuple(_options(space, "ep_overlap", (False, True)) if ep > 1
                                else [False])
            if (shardings, ep_overlaps) not in made:
                made[shardings, ep_overlaps] = [
                    {"sharding": sh, "vpp": vpp, "pp_schedule": sched, "pp_first_layers": first,
                     "pp_last_layers": last, "sequence_parallel": sp, "tp_overlap": ov,
                     "cp_kind": kind or "ring", "ep_overlap": e_ov, **others}
                    for sh in shardings for vpp, sched, (first, last) in pipes
                    for sp, ov in tp_variants for kind in cp_kinds for e_ov in ep_overlaps]
            # a tuple of its own per expert mesh: its mesh orders share it (and only they)
            variants = tuple(made[shardings, ep_overlaps])
            if not variants:
                continue
            try:
                base = ParallelPlan(num_gpus=num_gpus, gpus_per_node=gpus_per_node,
                                    shard_group_size=group, tp=tp, pp=pp, cp=cp,
                                    framework=space.framework, ep=ep, etp=etp,
                                    grad_sync=gsync, keep_gathered=keep, **variants[0])
                base.check_model(n_layers=spec.n_layers, n_heads=spec.n_heads,
                                 n_kv_heads=spec.kv_heads, seq_len=seq_len,
                                 n_experts=spec.n_experts,
                                 expert_ffn_size=spec.expert_size if moe else 0)
            except ConfigError:
                continue
            yield Family(base, variants)
            if space.orders_searched:
                for plan in _other_orders(base, seen_layouts, space.pod_gpus):
                    yield Family(plan, variants)


def _runs(space: SearchSpace, settings: tuple[str, ...], refusals: list[str]) -> bool:
    """Whether the search keeps a combination the framework refuses for ``refusals``
    (:func:`fsdpsim.plan.frameworks.plan_refusals`): only where it refuses nothing, or the user
    fixed one of its ``settings`` (``--fix``: the plan then runs as asked, as
    :func:`_options` keeps a fixed value the framework does not support)."""
    return not refusals or any(name in space.fixed for name in settings)


def _other_orders(plan: ParallelPlan, seen: dict,
                  pod_gpus: int | None = None) -> Iterator[ParallelPlan]:
    """The plan with its non-unit, non-TP dimensions in the other orders outside TP (TP stays
    innermost, on adjacent ranks) that place some group differently on the tiers: orders with
    the same group, pod and expert layouts as an earlier one are the same plan to the model."""
    from fsdpsim.plan.layout import orders_layouts

    degrees = plan.degrees
    outer = [d for d in DEFAULT_MESH_ORDER if d != "tp" and degrees[d] > 1]
    if len(outer) < 2:
        return
    units = tuple(d for d in DEFAULT_MESH_ORDER if d != "tp" and degrees[d] == 1)
    key = (plan.tp, plan.cp, plan.pp, plan.ep, plan.etp, degrees["dp_shard"],
           degrees["dp_replicate"], plan.sharding == "hybrid")
    if key not in seen:  # the distinct layouts of this mesh, computed once
        layouts, orders = [], []  # the first permutation is the default order
        every = [units + perm + ("tp",) for perm in itertools.permutations(outer)]
        for order, layout in zip(every, orders_layouts(
                plan, every, pod_gpus, experts=plan.ep > 1 or plan.etp != plan.tp)):
            if layout not in layouts:
                layouts.append(layout)
                orders.append(order)
        seen[key] = orders[1:]
    for order in seen[key]:
        yield _reordered(plan, order)


def _reordered(plan: ParallelPlan, order: tuple[str, ...]) -> ParallelPlan:
    """``replace(plan, mesh_order=order)`` without its checks again: ``order`` is a permutation
    of the mesh (built so by :func:`_other_orders`), and every other check of
    ``ParallelPlan.__post_init__`` reads fields the plan already passed with; as ``replace``,
    ``etp`` is then given, so ``etp_defaulted`` is False (tests/test_search.py compares the
    two). The search builds thousands of these."""
    out = copy.copy(plan)
    object.__setattr__(out, "mesh_order", order)
    object.__setattr__(out, "etp_defaulted", False)
    return out


__all__ = ["SearchSpace", "Family", "VARIANT_FIELDS", "FIXABLE", "parse_fix", "enumerate_plans",
           "enumerate_families", "meshes", "batch_of", "estimate_size", "stage_splits",
           "MIN_TOKENS_PER_CP_RANK", "MAX_VPP", "MAX_END_SHIFT", "MAX_CANDIDATES",
           "check_size"]
