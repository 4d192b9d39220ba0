"""Bounds that let :func:`fsdpsim.drivers.search.run.search` skip candidates without changing
what it finds (branch and bound; Land & Doig 1960, the pruning rule of Galvatron's search,
Miao et al., "Galvatron", VLDB 2023 §5).

**Throughput bound.** The engine's step (:func:`fsdpsim.engine.evaluate`, ``step_time_s``) is
the busiest stage's compute (``compute_s``: its layers' forward and backward over the step's
micro-batches, and the optimizer step) plus terms that cannot go negative: exposed data-,
tensor-, context-, expert- and pipeline-parallel communication, the pipeline bubble, the
post-step gather (``engine/step.py``: overlap adds ``max(·, 0)`` of what outlasts compute,
never subtracts). Recompute only adds time (``rc_share · recompute_s`` and the replayed
forward). So for a (plan, micro-batch) at any recompute setting::

    step_time_s >= compute_s(recompute none) - optimizer_s       (1)

and its throughput is at most ``tokens_per_step / (compute_s - optimizer_s)`` (tokens per step
are the global batch for every candidate); with (2) below, at most the tokens per step over
the larger of the two. ``tests/test_search.py`` checks (1) on every
candidate of a MoE and a hybrid dense space.

**Ideal-network bound.** Every communication time of the engine grows with bytes over a rate
plus latencies (``costs/comm.py``, ``costs/nccl.py``: NCCL's algorithm is the fastest of its
candidates; ``engine/expert_comm.py``), and the step composes them with sums and maxima
(overlap shows ``max(·, 0)`` of what outlasts compute; the schedule's makespan,
``costs/schedule.py``, grows with each stage's forward and backward). So the step on the same
plan with the network :data:`IDEAL_RATE_FACTOR` times faster and without latency
(:func:`ideal_network`) is no longer, and recompute only lengthens that one too::

    step_time_s >= step_time_s(ideal network, recompute none) - optimizer_s       (2)

(2) keeps the pipeline bubble and whatever compute the communication cannot shorten; it is
the tighter of the two wherever communication or the bubble shows (DeepSeek-V3 on 8,192 H100:
its exposed expert all-to-alls and interleaved bubbles). ``tests/test_search.py`` checks (2)
on every candidate of three spaces.

**Sharing the bound.** ``compute_s - optimizer_s`` is the same for plans that differ only in
settings that move communication or the optimizer's shard, never a layer's compute: the ZeRO
stage and shard group, the mesh order and where each group lies on the tiers (except the
expert-parallel group's GPUs per node: the MoE layer's dispatch kernels, ``engine/moe.py``),
the pipeline schedule and its virtual stages (not under Megatron's recipe with MoE layers:
the experts' host time shows once per model chunk, :func:`_vpp_computes`), and TP overlap
(:data:`NOT_COMPUTE`). The
bound is computed once per group of such plans and micro-batch by the engine itself (the
same ``compute_s`` the candidates get, so it cannot drift from the engine);
``tests/test_search.py`` checks that the value is the same across each group. On the ideal
network communication is (all but) free, so (2) is shared as well by plans that also have the
same pipeline schedule and virtual stages (:func:`bound_groups`; the bubble depends on them),
up to :data:`IDEAL_SLACK` for the bytes still sent at the ideal rates.

**Kth best.** The search keeps the best ``top`` *plans*, so a candidate is skipped only when
its bound is below the ``top``-th best plan found so far (:func:`kth_best`), not the
``top``-th best candidate (one plan's micro-batches would otherwise fill the list).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fsdpsim.costs import schedule

#: Plan inputs that change no layer's compute (``compute_s - optimizer_s``): group sizes and
#: their members per scale-up domain and per pod (suffixes), the ZeRO stage, the schedule and
#: its virtual stages, TP overlap; the expert group's members per node are not among them.
NOT_COMPUTE = {"suffixes": ("_size", "_per_node", "_per_pod", "_padded"),
               "keep": ("ep_per_node",),
               "columns": ("strategy", "pp_schedule", "vpp", "tp_overlap")}


def _ids(matrix: np.ndarray) -> np.ndarray:
    """Row ``i``'s number among the distinct rows of ``matrix``, column by column (a sort of
    one integer per row each time, not of whole rows) [-]."""
    ids = np.zeros(matrix.shape[0], dtype=np.int64)
    for column in matrix.T:
        code = np.unique(column, return_inverse=True)[1].ravel()
        ids = np.unique(ids * (int(code.max()) + 1) + code, return_inverse=True)[1].ravel()
    return ids


def _compute_columns(cols: dict, constant: dict, vpp_computes: bool = False) -> list[str]:
    """The columns of ``cols`` that can change a layer's compute (:data:`NOT_COMPUTE`);
    ``vpp_computes``: the virtual stages too (:func:`_vpp_computes`)."""
    skip = tuple(c for c in NOT_COMPUTE["columns"] if not (vpp_computes and c == "vpp"))
    return [k for k in cols if k not in constant and k not in skip
            and (k in NOT_COMPUTE["keep"] or not k.endswith(NOT_COMPUTE["suffixes"]))]


def _vpp_computes(s) -> bool:
    """Whether the virtual stages change the compute of the space's plans: under Megatron's
    recipe a MoE layer's expert host time shows once per chain of MoE layers, one model
    chunk's with interleaving (:func:`fsdpsim.engine.moe._host_bound_experts`)."""
    def value(key):
        for cols in (s.constant, s.base, s.model_cols):
            if key in cols:
                return np.asarray(cols[key])
        return np.zeros(1)

    return bool(np.any(value("megatron") > 0) and np.any(value("moe_layers") > 0))


def compute_groups(s) -> np.ndarray:
    """Each plan's group of :class:`~fsdpsim.drivers.search.columns.PlanColumns` ``s``: plans
    of one group have the same engine inputs but for :data:`NOT_COMPUTE` [-]."""
    vpp = _vpp_computes(s)
    fam_keys = _compute_columns(s.family_cols, s.constant, vpp)
    model_keys = _compute_columns(s.model_cols, s.constant, vpp)
    # the model row of a family's plans is the family's (it follows tp and the shard size)
    first = np.unique(s.family, return_index=True)[1]
    fam = np.column_stack([s.family_cols[k] for k in fam_keys]
                          + [s.model_cols[k][s.model_row[first]] for k in model_keys]
                          ) if fam_keys or model_keys else np.zeros((len(s.families), 0))
    # families of one mesh share their variants' tuple, and so their variant columns: the
    # variants of the first such family stand for the rest
    starts = np.r_[0, np.cumsum([len(f.variants) for f in s.families])]
    owner: dict[int, int] = {}
    canon = np.array([owner.setdefault(id(f.variants), i) for i, f in enumerate(s.families)])
    row = starts[canon[s.family]] + s.variant
    rows, inverse = np.unique(row, return_inverse=True)
    var_keys = _compute_columns(s.variant_cols, s.constant, vpp)
    var = np.column_stack([s.variant_cols[k][rows] for k in var_keys] or [np.zeros(rows.size)])
    var_id = _ids(var)[inverse.ravel()]
    fam_id = _ids(fam)
    return _ids(np.column_stack([fam_id[s.family], var_id]))


#: Factor on the network's rates in the ideal network of (2) [-].
IDEAL_RATE_FACTOR = 1e12
#: What the ideal network's communication (bytes at 1e12 times the rates) may still add to a
#: plan's bound over another's of its group, relative (measured: under 1e-11) [-].
IDEAL_SLACK = 1e-9


def _is_rate(key: str) -> bool:
    """A network rate among the engine's system inputs (link, NIC, NCCL channels, pinned bus
    bandwidths; not HBM's)."""
    return (key in ("link_bytes_per_s", "nic_share_bytes_per_s", "link_per_peer_bytes_per_s")
            or key.startswith("busbw_")
            or (key.startswith("nccl_") and key.endswith("_bytes_per_s")))


def _is_latency(key: str) -> bool:
    """A network latency among the engine's system inputs (per hop, per call) [s]."""
    return key in ("link_latency_s", "nic_latency_s") or (
        key.startswith("nccl_") and key.endswith("_s") and not key.endswith("_bytes_per_s"))


def ideal_network(base: dict) -> dict:
    """``base`` with the network :data:`IDEAL_RATE_FACTOR` times faster and without latency:
    the inputs of bound (2)."""
    return {k: (v * IDEAL_RATE_FACTOR if _is_rate(k) else 0.0 if _is_latency(k) else v)
            for k, v in base.items()}


def bound_groups(s, groups: np.ndarray) -> np.ndarray:
    """Each plan's group for bound (2): its :func:`compute_groups` group and its pipeline
    schedule and virtual stages (the bubble) [-]."""
    return _ids(np.column_stack([groups, s.column("pp_schedule"), s.column("vpp")]))


def throughput_bound(s, plan: np.ndarray, mb: np.ndarray, accum: np.ndarray,
                     groups: np.ndarray) -> tuple[np.ndarray, int]:
    """An upper bound on the tokens/s of every candidate (``plan``, ``mb``, ``accum``) at any
    recompute setting (the module docstring's (1) and (2); ``groups``: each plan's
    :func:`bound_groups` group), and the engine rows it took (one per group and micro-batch)
    [tokens/s, -]."""
    if not plan.size:
        return np.zeros(0), 0
    key = groups[plan] * (int(mb.max()) + 1) + mb
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    out = s.evaluate(plan[first], mb[first], accum[first], np.zeros(first.size),
                     np.full(first.size, -1.0), base=ideal_network(s.base),
                     keys=("compute_s", "optimizer_s", "step_time_s", "tokens_per_step"))
    least_s = (np.maximum(out["compute_s"], out["step_time_s"]) - out["optimizer_s"]) * (
        1.0 - IDEAL_SLACK)
    bound = out["tokens_per_step"] / least_s
    return bound[inverse.ravel()], int(first.size)


def schedule_runs(s, plan: np.ndarray, accum: np.ndarray) -> np.ndarray:
    """Whether each candidate's pipeline schedule can run its ``accum`` micro-batches: the
    engine's ``pipeline_ok`` (:func:`fsdpsim.costs.schedule.schedule_feasible` where
    ``pp > 1``), which no recompute setting changes [-]."""
    pp = s.column("pp", plan)
    feasible = schedule.schedule_feasible(s.column("pp_schedule", plan), pp,
                                          s.column("vpp", plan), accum)
    return (pp <= 1) | feasible


#: Candidates of the first round of :func:`best_first`: it sets the K-th best early; each
#: later round is 8 times larger (a round costs a dozen engine calls, which small spaces
#: notice; a larger one evaluates more candidates that a better K-th best would skip).
FIRST_ROUND_ROWS = 256


def best_first(rows: np.ndarray, upper: np.ndarray, kth: Callable[[], float],
               settle: Callable[[np.ndarray], None]) -> tuple[int, int]:
    """Settle candidate ``rows`` best ``upper`` bound first, in rounds, skipping those whose
    bound is below ``kth()`` (the K-th best plan found so far, which each round raises); the
    candidates settled and skipped [-]."""
    order = np.argsort(-upper, kind="stable")
    queue, upper = rows[order], upper[order]
    done, take, settled = 0, FIRST_ROUND_ROWS, 0
    while done < queue.size and upper[done] >= kth():
        least = kth()
        part = slice(done, done + take)
        chosen = queue[part][upper[part] >= least]
        settle(chosen)
        done, take, settled = min(done + take, queue.size), 8 * take, settled + chosen.size
    return settled, int(queue.size - settled)


def kth_best(plans: np.ndarray, scores: np.ndarray, k: int) -> float:
    """The ``k``-th best of each plan's best score (−inf with fewer than ``k`` plans)."""
    if plans.size < k:
        return -np.inf
    best = np.full(int(plans.max()) + 1, -np.inf)
    np.maximum.at(best, plans.astype(np.int64), scores)
    best = best[np.isfinite(best)]
    if best.size < k:
        return -np.inf
    return float(np.partition(best, best.size - k)[best.size - k])


__all__ = ["compute_groups", "bound_groups", "ideal_network", "throughput_bound", "schedule_runs",
           "best_first", "kth_best", "NOT_COMPUTE", "FIRST_ROUND_ROWS"]
