"""``fsdpsim search``: the fastest parallel plan that fits, by fsdpsim's own model, without
profiling.

Galvatron (Miao et al., VLDB 2023, §4–5, arXiv 2211.13878) searches hybrid
plans with profiled costs, a decision-tree pruning and a dynamic program over layers under a
memory budget. fsdpsim's costs are closed-form, so whole families of plans are evaluated at
once with the one engine (:func:`fsdpsim.engine.evaluate`, the code ``predict`` and ``sweep``
run), and the search is exact over its space (:mod:`fsdpsim.drivers.search.space`):

1. **Plans**: every valid mesh, order, sharding, schedule and variant of the space, each turned
   into its engine inputs once (model inputs shared by every plan of the same TP degree and
   shard group).
2. **Memory lower bound** (sound): a plan evaluated at its smallest micro-batch with every layer
   recomputed in full holds the least memory any of its candidates can; if that does not fit
   the budget, none of its candidates does. Peak memory grows with the micro-batch and shrinks
   with the recomputed layers, so each (plan, micro-batch) first tries the same bound (the
   engine's memory stage alone, :func:`fsdpsim.engine.memory_breakdown`).
3. **Throughput upper bound** (sound, :mod:`fsdpsim.drivers.search.bounds`): before any
   candidate is evaluated in full, each (plan, micro-batch) gets a bound from the engine's
   own step on an ideal network (one engine row per group of plans with the same layer
   compute, pipeline schedule and virtual stages); they
   are evaluated best bound first, in rounds, and those whose bound is below the K-th best
   plan found so far are skipped. Then no recompute is the fastest setting of a (plan,
   micro-batch); where it fits, it is the candidate. Where it does not, the recompute settings
   between are searched only if that bound beats the K-th best found so far.
4. **Per-layer recompute** (the dynamic program's question "which layers to checkpoint",
   answered in closed form): layers are identical within a stage, so the choice reduces to how
   many of each stage's layers recompute (Megatron ``--recompute-num-layers``, the block method:
   the first K of each stage). Memory falls and time rises with K, so the best K is the smallest
   that fits: a vectorised bisection over K for every (plan, micro-batch, method) at once.

The top plans are then predicted in full by :func:`fsdpsim.drivers.predict.predict` (the same
numbers, plus bottleneck, breakdown and range), and ``tests/test_search.py`` checks the optimum
against brute-force enumeration of every candidate under the same model. The objectives and the
memory budget are :mod:`fsdpsim.drivers.search.objective`'s; what a search returns,
:mod:`fsdpsim.drivers.search.results`'.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from fsdpsim import engine

from fsdpsim.plan import frameworks
from fsdpsim.util.errors import ConfigError
from fsdpsim.hardware.spec import System
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import TrainingConfig
from fsdpsim.plan.training import check_recompute_layers, check_recompute_layers_beside
from fsdpsim.drivers.predict import divisors
from fsdpsim.drivers.search import bounds
from fsdpsim.engine.build import auto_recomputes, op_selective_refused
from fsdpsim.drivers.search.columns import PlanColumns
from fsdpsim.drivers.search.objective import OBJECTIVES, scorer
from fsdpsim.drivers.search.results import SearchResult, cut_off, least_peak, top_plans
from fsdpsim.drivers.search.space import (SearchSpace, batch_of, check_size,
                                          enumerate_families)

_RC = engine.RECOMPUTE_CODES
#: Least (plan, micro-batch) rows a round of the recompute bisection takes (step 4).
ROUND_ROWS = 4096


def search(spec: ModelSpec, system: System, num_gpus: int, training: TrainingConfig,
           space: SearchSpace = SearchSpace(), *, objective: str = "throughput", top: int = 5,
           run=None, price: float | None = None, prune: bool = True) -> SearchResult:
    """The best ``top`` plans of ``spec`` on ``num_gpus`` GPUs of ``system`` (its memory: the
    budget) for ``training``'s global batch and sequence length (None: each mesh trains the
    default batch adjusted to its data-parallel degree,
    :func:`fsdpsim.drivers.search.space.batch_of`, as predict does); see the module
    docstring for the algorithm. ``prune=False`` evaluates every (plan, micro-batch) that fits
    and every recompute setting step 4 reaches, with no bound (what the pruned search must
    equal; tests compare them). Raises :class:`ConfigError` when the space is empty."""
    t0 = time.perf_counter()
    if objective not in OBJECTIVES:
        raise ConfigError(f"--objective {objective!r} is not accepted; accepted: "
                          f"{', '.join(OBJECTIVES)}")
    training = frameworks.with_defaults(training, space.framework)
    training.check_model(is_moe=spec.is_moe)
    # ---- step 1: the plans, and every (plan, micro-batch) candidate ---------------------------
    s, space = _plans(spec, system, num_gpus, training, space)
    gb = np.broadcast_to(np.asarray(batch_of(training.global_batch, training.seq_len, s.dp),
                                    dtype=np.int64), s.dp.shape)  # each plan's global batch
    score = scorer(objective, num_gpus, system, run, _checkpoint_bytes(s), price)
    stats: dict[str, float] = {"plans": len(s), "families": len(s.families),
                               "build_s": time.perf_counter() - t0}
    plan_idx, mb = _candidates(s, gb, space.get("micro_batch"))
    fixed_rc = space.get("recompute")
    fixed_rl = space.get("recompute_layers")
    check_recompute_layers_beside(fixed_rl, None if fixed_rc is None else (fixed_rc,))
    if fixed_rl is not None:  # plans whose stage holds that many layers (predict's rule)
        holds = s.layers_stage[plan_idx] >= fixed_rl
        if not holds.any():
            check_recompute_layers(fixed_rl, int(s.layers_stage.max()), spec.name)
        plan_idx, mb = plan_idx[holds], mb[holds]
    ev = _Evaluations(s, plan_idx, mb, gb[plan_idx] // s.dp[plan_idx] // mb, score, top, prune)
    if fixed_rl is not None and fixed_rc is None:
        fixed_rc = "full"  # a layer count alone means Megatron's full (block) recompute
    if fixed_rc == "op-selective" and op_selective_refused(spec):
        raise ConfigError(op_selective_refused(spec))
    selective = _selective_method(spec, space)
    low_rc = fixed_rc or "full"
    low_rl = -1.0 if fixed_rl is None else float(fixed_rl)
    # ---- step 2: the memory bound -------------------------------------------------------------
    candidates, plans_fit = _memory_bound(ev, low_rc, low_rl)

    def settle(rows):  # ---- steps 3 and 4
        _settle(ev, rows, space, fixed_rc, low_rl, selective)
    if not prune:
        settle(candidates)
    else:  # ---- step 3's throughput bound, best first
        _best_first(ev, candidates, settle, stats)
        if not ev.found:  # nothing fits: the exhaustive search says what the least memory is
            return search(spec, system, num_gpus, training, space, objective=objective,
                          top=top, run=run, price=price, prune=False)
    least = least_peak(s, gb, ev.records, low_rc, low_rl, score)
    stats["evaluate_s"] = time.perf_counter() - t0 - stats["build_s"]
    cand = [np.concatenate(c) for c in zip(*ev.found)] if ev.found else [np.zeros(0)] * 7
    top_choices = top_plans(s, cand, gb, top)
    best_score = top_choices[0].score if top_choices else -np.inf
    cut = cut_off(s, ev.records, gb, best_score, score) if top_choices else ()
    return SearchResult(top=tuple(top_choices), cut_off=tuple(cut), plans=len(s),
                        plans_fitting=int(plans_fit), candidates=int(ev.count),
                        elapsed_s=time.perf_counter() - t0,
                        budget_bytes=float(system.accelerator.memory_bytes),
                        least_peak=least, stats=stats)


def _plans(spec: ModelSpec, system: System, num_gpus: int, training: TrainingConfig,
           space: SearchSpace) -> tuple[PlanColumns, SearchSpace]:
    """Step 1: every valid plan of the space, as engine inputs (the space with the system's
    non-blocking pod). Refuses a space too large to search, or an empty one, saying why."""
    from fsdpsim.hardware.system import domain_gpus

    gb = training.global_batch
    per_node = domain_gpus(system, num_gpus)
    if system.pod_gpus and space.pod_gpus != system.pod_gpus:
        space = replace(space, pod_gpus=system.pod_gpus)
    check_size(spec, num_gpus, per_node, training.seq_len, gb, space)
    families = list(enumerate_families(spec, num_gpus, per_node, training.seq_len, gb, space))
    if not families:
        from fsdpsim.drivers.search.explain import empty_space_message

        raise ConfigError(empty_space_message(spec, num_gpus, per_node, training, space))
    return PlanColumns(spec, system, families, training), space


class _Evaluations:
    """The engine evaluations of one search: the (plan, micro-batch) candidates, those that
    run (kept with their score, for the top and the K-th best), every evaluation (recorded for
    the cut-off explanation) and how many rows were evaluated."""

    def __init__(self, s: PlanColumns, plan_idx: np.ndarray, mb: np.ndarray, accum: np.ndarray,
                 score, top: int, prune: bool):
        self.s, self.plan_idx, self.mb, self.accum = s, plan_idx, mb, accum
        self.score, self.top, self.prune = score, top, prune
        self.found: list[tuple[np.ndarray, ...]] = []  # (plan, mb, rc code, rl, tps, peak, score)
        self.records: list[tuple] = []
        self.count = 0

    def run(self, rows, rc_name, rl, memory_only=False):
        """Evaluate candidate ``rows`` at one recompute setting; keep those that run, record all
        (``memory_only``: whether they fit, nothing kept)."""
        self.count += rows.size
        plan_idx, mb = self.plan_idx, self.mb
        rl = np.broadcast_to(np.asarray(rl, dtype=float), rows.shape)
        out = self.s.evaluate(plan_idx[rows], mb[rows], self.accum[rows],
                              np.full(rows.size, float(_RC[rc_name])), rl,
                              memory_only=memory_only)
        if memory_only:
            return out
        out["ok"] = out["fits"] & out["pipeline_ok"]
        ok = out["ok"]
        self.found.append((plan_idx[rows][ok], mb[rows][ok], np.full(ok.sum(), _RC[rc_name]),
                           rl[ok], out["tokens_per_s"][ok], out["peak_bytes"][ok],
                           self.score(out["tokens_per_s"][ok])))
        self.records.append((plan_idx[rows], mb[rows], rc_name, rl, out))
        return out

    def kth(self) -> float:
        """The score a candidate must reach to enter the top (−inf unpruned)."""
        if not self.prune or not self.found:
            return -np.inf
        return bounds.kth_best(np.concatenate([f[0] for f in self.found]),
                               np.concatenate([f[6] for f in self.found]), self.top)


def _memory_bound(ev: _Evaluations, low_rc: str, low_rl: float) -> tuple[np.ndarray, int]:
    """Step 2: the candidates that can fit, and how many plans have one. Each plan's
    micro-batches (consecutive, ascending) are bisected at the least-memory setting (every
    layer recomputed in full, or the fixed one) for the largest that fits: peak memory never
    falls as the micro-batch grows (1F1B holds min(pp, m) micro-batches of mb sequences in
    flight, GPipe all m: mb·min(pp, m) and mb·m never fall), so the larger ones cannot fit
    with any recompute. Pruned, the engine's memory stage alone answers (its step and
    throughput are not needed)."""
    plan_idx = ev.plan_idx
    starts = np.flatnonzero(np.r_[True, plan_idx[1:] != plan_idx[:-1]])
    counts = np.diff(np.r_[starts, plan_idx.size])
    lo, hi = np.full(starts.size, -1), counts.copy()  # index lo fits (-1: none), hi does not
    # A plan in another mesh order holds the same memory (the order places groups on the
    # tiers, it moves no bytes into memory; tests/test_search.py checks it): bisect one order.
    owner = _order_owner(ev.s, plan_idx[starts])
    hi[owner != np.arange(starts.size)] = -1  # settled below from their owner
    first = True  # the largest micro-batch first: where it fits (most plans of small models),
    while np.any(hi - lo > 1):  # one evaluation settles the plan
        act = np.flatnonzero(hi - lo > 1)
        mid = hi[act] - 1 if first else (lo[act] + hi[act]) // 2
        first = False
        fit = ev.run(starts[act] + mid, low_rc, low_rl, memory_only=ev.prune)["fits"]  # memory
        lo[act] = np.where(fit, mid, lo[act])             # alone: the schedule's rule is not
        hi[act] = np.where(fit, hi[act], mid)             # monotone in mb
    lo = lo[owner]
    within = np.arange(plan_idx.size) - np.repeat(starts, counts)
    return (np.flatnonzero(within <= np.repeat(lo, counts)), int(np.count_nonzero(lo >= 0)))


def _settle(ev: _Evaluations, rows: np.ndarray, space: SearchSpace, fixed_rc: str | None,
            low_rl: float, selective: str | None) -> None:
    """Steps 3 and 4 on candidate ``rows``: each one's best recompute setting that fits."""
    if fixed_rc is not None:
        ev.run(rows, fixed_rc, low_rl)
        return
    # ---- step 3: no recompute, the fastest setting of each (plan, micro-batch) -------------
    none = ev.run(rows, "none", -1.0)
    bound = np.full(ev.plan_idx.size, -np.inf)
    bound[rows] = ev.score(none["tokens_per_s"])
    # a schedule that cannot run its micro-batches cannot with any recompute either
    rows = rows[~none["ok"] & none["pipeline_ok"] & (bound[rows] >= ev.kth())]
    full = ev.run(rows, "full", -1.0)
    rows = rows[full["ok"]]
    partial = space.supports.get("partial_recompute", (True,))[0]
    sel = (ev.run(rows, selective, -1.0) if selective
           else {"ok": np.zeros(rows.size, bool)})
    # ---- step 4: the fewest recomputed layers that fit, best bound first, in rounds: each
    # round raises the K-th best, which prunes the rest of the queue (branch and bound;
    # selective only where all-selective fits: fewer layers hold more) -----------------------
    L = ev.s.layers_stage[ev.plan_idx]
    # (op-selective covers every layer: torchtitan's "op" policy has no layer count);
    # "every-nth" (torchtitan's selective_ac_option = n: every n-th layer of a model
    # chunk): a count that divides the stage's layers, without virtual stages
    nth = partial == "every-nth"
    if nth:
        keep = ev.s.column("vpp", ev.plan_idx[rows]) == 1
        rows, sel = rows[keep], {"ok": sel["ok"][keep]}
    queue = [(method, rows[fits & (L[rows] > 1)]) for method, fits in
             (("selective", sel["ok"] & (selective == "selective")),
              ("full", np.ones(rows.size, bool))) if partial]
    queue = [(method, q[np.argsort(-bound[q], kind="stable")]) for method, q in queue]
    while any(q.size for _, q in queue):
        least = ev.kth()
        queue = [(method, q[bound[q] >= least]) for method, q in queue]
        for i, (method, q) in enumerate(queue):
            if not q.size:
                continue
            take = max(ROUND_ROWS, q.size // 8)
            _fewest_layers(ev.run, q[:take], method, L[q[:take]], divisors=nth)
            queue[i] = (method, q[take:])


def _best_first(ev: _Evaluations, candidates: np.ndarray, settle, stats: dict) -> None:
    """The throughput bound (:mod:`fsdpsim.drivers.search.bounds`), best first: a candidate
    whose bound is below the K-th best plan found so far cannot enter the top; rounds raise
    the K-th best. A pipeline schedule that cannot run the step's micro-batches never enters
    the top."""
    s, plan_idx, mb, accum = ev.s, ev.plan_idx, ev.mb, ev.accum
    runs = bounds.schedule_runs(s, plan_idx[candidates], accum[candidates])
    stats["schedule_cannot_run"] = int(np.count_nonzero(~runs))
    candidates = candidates[runs]
    groups = bounds.bound_groups(s, bounds.compute_groups(s))
    upper, n_bound = bounds.throughput_bound(s, plan_idx[candidates], mb[candidates],
                                             accum[candidates], groups)
    ev.count += n_bound
    _, skipped = bounds.best_first(candidates, ev.score(upper), ev.kth, settle)
    stats["bound_rows"] = n_bound
    stats["candidates_skipped"] = skipped


def _candidates(s: PlanColumns, gb: np.ndarray, fixed_mb: int | None) -> tuple[np.ndarray, ...]:
    """Every (plan, micro-batch) pair: plan numbers (ascending) and micro-batches (each plan's
    divisors of its sequences per GPU, ascending; or the fixed one where it divides). ``gb``:
    each plan's global batch (one per data-parallel degree)."""
    dps, first, dp_of = np.unique(s.dp, return_index=True, return_inverse=True)
    per_gpu = (gb[first] // dps).tolist()  # the micro-batches of each dp, once
    options = [[m for m in ([fixed_mb] if fixed_mb is not None else divisors(n)) if n % m == 0]
               for n in per_gpu]
    counts = np.array([len(o) for o in options], dtype=np.int64)[dp_of.ravel()]
    table = np.zeros((len(options), max(1, max(len(o) for o in options))), dtype=np.int64)
    for i, o in enumerate(options):
        table[i, :len(o)] = o
    plan_idx = np.repeat(np.arange(len(s), dtype=np.int64), counts)
    within = np.arange(plan_idx.size) - np.repeat(np.cumsum(counts) - counts, counts)
    if not plan_idx.size:
        raise ConfigError(f"--fix micro_batch={fixed_mb} does not divide the sequences per GPU "
                          f"of any plan ({', '.join(map(str, sorted(set(per_gpu))))}); "
                          "accepted: a divisor of global_batch / dp")
    return plan_idx, table[dp_of.ravel()[plan_idx], within]


def _order_owner(s: PlanColumns, plans: np.ndarray) -> np.ndarray:
    """For each of ``plans`` (plan numbers, one entry per plan with candidates), the position in
    ``plans`` of the same plan in the first mesh order enumerated (itself if it is that one):
    the orders of one mesh are the families that share its variants' tuple
    (:func:`fsdpsim.drivers.search.space.enumerate_families` gives them one)."""
    first: dict[int, int] = {}
    canon = np.array([first.setdefault(id(f.variants), i) for i, f in enumerate(s.families)])
    starts = np.r_[0, np.cumsum([len(f.variants) for f in s.families])]
    same = starts[canon[s.family[plans]]] + s.variant[plans]  # plan number in the first order
    position = np.full(len(s), -1)
    position[plans] = np.arange(plans.size)
    owner = position[same]
    return np.where(owner >= 0, owner, np.arange(plans.size))


def _selective_method(spec: ModelSpec, space: SearchSpace) -> str | None:
    """The selective recompute ``auto`` tries between none and full: the framework's own
    (:func:`fsdpsim.engine.build.auto_recomputes`, as predict and sweep choose: Megatron's
    attention-core ``selective``, torchtitan's per-op ``op-selective`` where the model's
    layers allow it); None when the framework runs neither."""
    middle = [m for m in auto_recomputes(space.framework, spec) if m not in ("none", "full")]
    return middle[0] if middle else None


def _checkpoint_bytes(s: PlanColumns) -> float:
    """Bytes of one checkpoint of the model (parameters and optimizer states) for the goodput."""
    from fsdpsim.drivers import procurement

    b = s.base
    return float(procurement.checkpoint_bytes(s.model_cols["n_params"][0], b["compute_bytes"],
                                              b["optimizer"], b["megatron"]))


def _fewest_layers(run_eval, rows: np.ndarray, method: str, L: np.ndarray,
                   divisors: bool = False) -> None:
    """Smallest K in [1, L] per row whose candidate fits (K = L fits on every row given; K = 0
    is no recompute, which does not), by bisection over all rows at once; every K tried is
    recorded by ``run_eval``. ``divisors``: only the K that divide L (memory falls with K, so
    the bisection runs over each row's divisors in order)."""
    L = L.astype(np.int64)
    if divisors:  # row r's options: table[r, :count[r]], ascending, the last one L
        lists = {n: [d for d in range(1, n + 1) if n % d == 0] for n in np.unique(L).tolist()}
        count = np.array([len(lists[n]) for n in L.tolist()], dtype=np.int64)
        table = np.zeros((L.size, int(count.max(initial=1))), dtype=np.int64)
        for r, n in enumerate(L.tolist()):
            table[r, :len(lists[n])] = lists[n]
    else:  # every K: the option of index i is i + 1
        count = L
    lo, hi = np.full(rows.size, -1, dtype=np.int64), count - 1  # option indices: lo fails
    while np.any(hi - lo > 1):
        act = np.flatnonzero(hi - lo > 1)
        mid = (lo[act] + hi[act]) // 2
        k = table[act, mid] if divisors else mid + 1
        ok = run_eval(rows[act], method, k)["ok"]
        hi[act] = np.where(ok, mid, hi[act])
        lo[act] = np.where(ok, lo[act], mid)

