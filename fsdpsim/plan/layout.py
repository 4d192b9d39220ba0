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

import numpy as np

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
    degrees, step = dict(mesh), _strides(mesh)
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


@functools.lru_cache(maxsize=16384)
def _group_layout(mesh: Mesh, domain: int) -> dict[str, int]:
    """Size and members per scale-up domain of every group in :data:`GROUPS`:
    ``{"tp_size": 8, "tp_per_node": 8, ...}`` [-]."""
    degrees = dict(mesh)
    out = {}
    for group, dims in GROUPS.items():
        out[f"{group}_size"] = prod(degrees[d] for d in dims)
        out[f"{group}_per_node"] = _members(mesh, dims, domain)
    return out


@functools.lru_cache(maxsize=16384)
def _pod_layout(mesh: Mesh, pod_gpus: int | None) -> dict[str, int]:
    """Members of each group inside one non-blocking pod of ``pod_gpus`` consecutive ranks
    (``{"shard_per_pod": ..., ...}``); a group's size when there are no pods (None) [-]. With a
    packed placement a job's ranks fill pods in order (the scheduler keeps jobs contiguous)."""
    degrees = dict(mesh)
    sizes = {g: prod(degrees[d] for d in dims) for g, dims in GROUPS.items()}
    if not pod_gpus:
        return {f"{g}_per_pod": n for g, n in sizes.items()}
    return {f"{g}_per_pod": _members(mesh, GROUPS[g], pod_gpus) for g in GROUPS}


#: The expert groups (Megatron-Core's expert mesh, :mod:`fsdpsim.plan.parallel`): for one pipeline
#: stage's ranks in rank order, expert tensor parallelism innermost (``etp`` consecutive), then
#: expert parallelism (``ep`` at stride etp), then the expert data-parallel group at stride
#: etp·ep; with HSDP its inner part is the expert shard group and the rest its replicas.
EXPERT_GROUPS = ("ep", "etp", "edp", "eshard", "ereplicate")


def _stage_ranks(mesh: Mesh, index: np.ndarray) -> np.ndarray:
    """Global ranks of the ``index``-th ranks (ascending order) of the first pipeline stage:
    the ranks whose pp coordinate is 0, which sorted are the mixed-radix numbers of the other
    mesh dimensions in mesh order (the last fastest)."""
    degrees, step = dict(mesh), _strides(mesh)
    rest = [name for name, _ in mesh if name != "pp"]
    out = np.zeros(index.shape, dtype=np.int64)
    left = index.astype(np.int64)
    for name in reversed(rest):
        left, digit = np.divmod(left, degrees[name])
        out += digit * step[name]
    return out


def _expert_members(mesh: Mesh, etp: int, ep: int, edp: int,
                    shard: int) -> dict[str, np.ndarray]:
    """The global ranks of each expert group that holds rank 0 (``shard``: the expert shard
    group, ``edp`` or one HSDP replica of it)."""
    index = {"ep": np.arange(0, etp * ep, etp), "etp": np.arange(etp),
             "edp": np.arange(0, etp * ep * edp, etp * ep),
             "eshard": np.arange(0, etp * ep * shard, etp * ep),
             "ereplicate": np.arange(0, etp * ep * edp, etp * ep * shard)}
    # one pass of the mixed-radix digits over every group's indices together
    ranks = _stage_ranks(mesh, np.concatenate(list(index.values())))
    out, start = {}, 0
    for name, idx in index.items():
        out[name], start = ranks[start:start + idx.size], start + idx.size
    return out


@functools.lru_cache(maxsize=16384)
def _expert_layout(mesh: Mesh, experts: tuple[int, int, int, int], domain: int,
                   pod_gpus: int | None = None) -> dict[str, int]:
    """Size, members per scale-up domain and members per pod of every expert group
    (:data:`EXPERT_GROUPS`): ``{"ep_size": 64, "ep_per_node": 64, "ep_per_pod": 64, ...}`` [-].

    ``edp`` holds the same experts (their gradients are reduced over it); ``eshard`` is the
    group the expert states are sharded over (``edp``, or one HSDP replica of it) and
    ``ereplicate`` its replicas (1 without HSDP)."""
    out = {}
    for name, members in _expert_members(mesh, *experts).items():
        out[f"{name}_size"] = int(members.size)
        out[f"{name}_per_node"] = int(np.count_nonzero(members < domain))
        out[f"{name}_per_pod"] = (int(np.count_nonzero(members < pod_gpus)) if pod_gpus
                                  else int(members.size))
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
    degrees = plan.degrees
    mesh = tuple((name, degrees[name]) for name in order)
    return (_group_layout(mesh, plan.gpus_per_node),
            _pod_layout(mesh, pod_gpus) if pod_gpus else None,
            _expert_layout(mesh, _experts(plan), plan.gpus_per_node, pod_gpus)
            if experts else None)


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
