"""Where each mesh dimension's groups land on the network tiers.

A plan's mesh (:class:`fsdpsim.plan.parallel.ParallelPlan`) numbers the GPUs row-major in its
``mesh_order`` (outermost first), as ``torch.distributed.device_mesh.init_device_mesh`` and
Megatron's ``RankGenerator`` do: the innermost dimension's ranks are adjacent. The network has
two tiers: a scale-up domain of ``gpus_per_node`` consecutive ranks (NVLink: an 8-GPU node, or
the GPUs used in one NVL72 rack), then the scale-out network (each GPU's share of its node's
NICs). A group's collectives run on the scale-up link while all its members share a domain, and
cross the scale-out tier otherwise; how many members share each domain decides the ring's
bandwidth (:func:`fsdpsim.costs.comm.ring_coefficients`).

:func:`group_layout` gives, for every group a plan communicates in, its size and the members it
has in one scale-up domain; these are the ``*_size`` / ``*_per_node`` inputs of the engine.
"""

from __future__ import annotations

import functools
from math import prod


from fsdpsim.plan.parallel import ParallelPlan

#: The groups the engine communicates in, as sets of mesh dimensions.
GROUPS = {
    "tp": ("tp",),
    "cp": ("cp",),
    "pp": ("pp",),
    "shard": ("dp_shard", "cp"),          # FSDP / ZeRO shard group (dp_shard x cp)
    "replicate": ("dp_replicate",),       # HSDP replicas of a shard
    "dp_world": ("dp_replicate", "dp_shard", "cp"),  # DDP / ZeRO-1 gradient group
}


#: A mesh as the layout sees it: (dimension, degree) pairs, outermost first. Layouts are cached
#: on it, so plans that differ only in strategies share one computation (the plan search builds
#: thousands of such plans).
Mesh = tuple[tuple[str, int], ...]


def _mesh(plan: ParallelPlan) -> Mesh:
    degrees = plan.degrees
    return tuple((name, degrees[name]) for name in plan.mesh_order)


def strides(plan: ParallelPlan) -> dict[str, int]:
    """Rank distance between neighbours along each mesh dimension (row-major mesh)."""
    return _strides(_mesh(plan))


def _strides(mesh: Mesh) -> dict[str, int]:
    out, stride = {}, 1
    for name, degree in reversed(mesh):
        out[name] = stride
        stride *= degree
    return out


def members_per_domain(plan: ParallelPlan, dims: tuple[str, ...], domain_gpus: int) -> int:
    """Members of the group spanned by ``dims`` (the one holding rank 0) inside rank 0's
    scale-up domain of ``domain_gpus`` consecutive ranks [-]. Every group of an aligned mesh
    has the same count."""
    return _members(_mesh(plan), dims, domain_gpus)


def _members(mesh: Mesh, dims: tuple[str, ...], domain_gpus: int) -> int:
    """Ranks ``sum(c_d * stride_d) < domain_gpus`` of the group, counted in closed form: in a
    row-major mesh every dimension's stride exceeds the largest offset the group's inner
    dimensions reach, so each coordinate of the outermost dimension below ``domain // stride``
    holds the whole inner group, the next one part of it (recursing inwards), the rest none."""
    return _members_of(dict(mesh), _strides(mesh), dims, domain_gpus)


def _members_of(degrees: dict[str, int], step: dict[str, int], dims: tuple[str, ...],
                domain_gpus: int) -> int:
    """:func:`_members` with the mesh's degrees and strides given (read once per mesh)."""
    ordered = sorted((d for d in dims if degrees[d] > 1), key=lambda d: -step[d])
    inner = prod(degrees[d] for d in ordered)
    count, left = 0, domain_gpus
    for d in ordered:
        n, stride = degrees[d], step[d]
        inner //= n
        whole = min(n, left // stride)
        count += whole * inner
        if whole == n:
            return count
        left -= whole * stride
    return count + (1 if left > 0 else 0)


@functools.lru_cache(maxsize=65536)
def _group_layout(mesh: Mesh, domain: int) -> dict[str, int]:
    """Size and members per scale-up domain of every group in :data:`GROUPS`:
    ``{"tp_size": 8, "tp_per_node": 8, ...}`` [-]."""
    degrees, step = dict(mesh), _strides(mesh)
    out = {}
    for group, dims in GROUPS.items():
        out[f"{group}_size"] = prod(degrees[d] for d in dims)
        out[f"{group}_per_node"] = _members_of(degrees, step, dims, domain)
    return out


@functools.lru_cache(maxsize=65536)
def _pod_layout(mesh: Mesh, pod_gpus: int | None) -> dict[str, int]:
    """Members of each group inside one non-blocking pod of ``pod_gpus`` consecutive ranks
    (``{"shard_per_pod": ..., ...}``); a group's size when there are no pods (None) [-]. With a
    packed placement a job's ranks fill pods in order (the scheduler keeps jobs contiguous)."""
    degrees = dict(mesh)
    sizes = {g: prod(degrees[d] for d in dims) for g, dims in GROUPS.items()}
    if not pod_gpus:
        return {f"{g}_per_pod": n for g, n in sizes.items()}
    step = _strides(mesh)
    return {f"{g}_per_pod": _members_of(degrees, step, GROUPS[g], pod_gpus) for g in GROUPS}


#: The expert groups (Megatron-Core's expert mesh, :mod:`fsdpsim.plan.parallel`): for one pipeline
#: stage's ranks in rank order, expert tensor parallelism innermost (``etp`` consecutive), then
#: expert parallelism (``ep`` at stride etp), then the expert data-parallel group at stride
#: etp·ep; with HSDP its inner part is the expert shard group and the rest its replicas.
EXPERT_GROUPS = ("ep", "etp", "edp", "eshard", "ereplicate")


def _expert_counts(mesh: Mesh, etp: int, ep: int, edp: int,
                   shard: int) -> dict[str, tuple[int, int]]:
    """(stride, count) of each expert group that holds rank 0, as indices (from 0) into the
    first pipeline stage's ranks in ascending order (``shard``: the expert shard group, ``edp``
    or one HSDP replica of it)."""
    return {"ep": (etp, ep), "etp": (1, etp), "edp": (etp * ep, edp),
            "eshard": (etp * ep, shard), "ereplicate": (etp * ep * shard, edp // shard)}


@functools.lru_cache(maxsize=65536)
def _stage_below(mesh: Mesh, limit: int) -> int:
    """How many of the first pipeline stage's ranks lie below rank ``limit``: the stage's ranks
    are the group of its mesh dimensions (all but pp) holding rank 0 (:func:`_members`) [-]."""
    return _members(mesh, tuple(name for name, _ in mesh if name != "pp"), limit)


def _below(stride: int, count: int, k: int) -> int:
    """Members ``0, stride, ..., (count - 1)·stride`` (indices into the first pipeline stage's
    ranks, ascending) among the stage's first ``k`` ranks: the multiples of ``stride`` below
    ``k`` [-]. With ``k = _stage_below(mesh, limit)`` these are the members whose global rank
    is below ``limit`` (the stage's ranks ascend with their index)."""
    return min(count, -(-k // stride))


@functools.lru_cache(maxsize=65536)
def _expert_layout(mesh: Mesh, experts: tuple[int, int, int, int], domain: int,
                   pod_gpus: int | None = None) -> dict[str, int]:
    """Size, members per scale-up domain and members per pod of every expert group
    (:data:`EXPERT_GROUPS`): ``{"ep_size": 64, "ep_per_node": 64, "ep_per_pod": 64, ...}`` [-].

    ``edp`` holds the same experts (their gradients are reduced over it); ``eshard`` is the
    group the expert states are sharded over (``edp``, or one HSDP replica of it) and
    ``ereplicate`` its replicas (1 without HSDP). Counted in closed form (:func:`_below`);
    ``tests/test_moe_engine.py`` checks it against the groups' ranks enumerated."""
    in_domain = _stage_below(mesh, domain)
    in_pod = _stage_below(mesh, pod_gpus) if pod_gpus else None
    out = {}
    for name, (stride, count) in _expert_counts(mesh, *experts).items():
        out[f"{name}_size"] = count
        out[f"{name}_per_node"] = _below(stride, count, in_domain)
        out[f"{name}_per_pod"] = count if in_pod is None else _below(stride, count, in_pod)
    return out


# A layout depends on the mesh alone: computed once per (mesh, domain), and each caller gets its
# own copy (predict, the scale advice, sweep's tables and the search ask again and again).
def group_layout(plan: ParallelPlan, domain_gpus: int | None = None) -> dict[str, int]:
    """:func:`_group_layout` of the plan's mesh, cached."""
    domain = plan.gpus_per_node if domain_gpus is None else domain_gpus
    return dict(_group_layout(_mesh(plan), domain))


def pod_layout(plan: ParallelPlan, pod_gpus: int | None) -> dict[str, int]:
    """:func:`_pod_layout` of the plan's mesh, cached."""
    return dict(_pod_layout(_mesh(plan), pod_gpus))


def order_layouts(plan: ParallelPlan, order: tuple[str, ...], pod_gpus: int | None = None,
                  experts: bool = True) -> tuple:
    """The group, pod and (with ``experts``) expert layouts ``plan`` would have with its mesh in
    ``order``, without building that plan (the search compares the orders of every mesh):
    equal to :func:`group_layout`, :func:`pod_layout` and :func:`expert_layout` of
    ``replace(plan, mesh_order=order)``."""
    return orders_layouts(plan, (order,), pod_gpus, experts)[0]


def orders_layouts(plan: ParallelPlan, orders, pod_gpus: int | None = None,
                   experts: bool = True) -> list[tuple]:
    """:func:`order_layouts` of each of ``orders`` (the plan's degrees read once)."""
    degrees, domain = plan.degrees, plan.gpus_per_node
    expert = _experts(plan) if experts else None
    out = []
    for order in orders:
        mesh = tuple((name, degrees[name]) for name in order)
        out.append((_group_layout(mesh, domain),
                    _pod_layout(mesh, pod_gpus) if pod_gpus else None,
                    _expert_layout(mesh, expert, domain, pod_gpus) if experts else None))
    return out


def _experts(plan: ParallelPlan) -> tuple[int, int, int, int]:
    """(etp, ep, expert-dp, expert shard group) of a plan: what its expert layout depends on
    beside the mesh."""
    edp = plan.expert_dp
    return plan.etp, plan.ep, edp, plan.expert_shard_group if plan.sharding == "hybrid" else edp


def expert_layout(plan: ParallelPlan, domain_gpus: int | None = None,
                  pod_gpus: int | None = None) -> dict[str, int]:
    """:func:`_expert_layout` of the plan's mesh and expert degrees, cached."""
    domain = plan.gpus_per_node if domain_gpus is None else domain_gpus
    return dict(_expert_layout(_mesh(plan), _experts(plan), domain, pod_gpus))
