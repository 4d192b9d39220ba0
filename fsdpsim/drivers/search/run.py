"""``fsdpsim search``: the fastest parallel plan that fits, by fsdpsim's own model, without
profiling.

Galvatron (Miao et al., VLDB 2023, §4–5; ``shared/reference/galvatron.md``) searches hybrid
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

The top plans are then predicted in full by :func:`fsdpsim.drivers.predict.predict` (the same numbers,
plus bottleneck, breakdown and range), and ``tests/test_search.py`` checks the optimum against
brute-force enumeration of every candidate under the same model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from fsdpsim import engine

from fsdpsim.plan import frameworks
from fsdpsim.util.errors import ConfigError
from fsdpsim.hardware.spec import System
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import RECOMPUTES, ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import divisors
from fsdpsim.drivers.search import bounds
from fsdpsim.engine.build import auto_recomputes, op_selective_refused
from fsdpsim.drivers.search.columns import PlanColumns
from fsdpsim.drivers.search.space import (SearchSpace, batch_of, check_size,
                                          enumerate_families)
from fsdpsim.util.units import GIB_BYTES

OBJECTIVES = ("throughput", "cost", "energy", "time-to-train")
_RC = engine.RECOMPUTE_CODES
#: Least (plan, micro-batch) rows a round of the recompute bisection takes (step 4).
ROUND_ROWS = 4096
@dataclass(frozen=True)
class Choice:
    """One evaluated candidate: a plan and its micro-batch and recompute."""

    plan: ParallelPlan
    micro_batch: int
    grad_accum: int
    recompute: str
    recompute_layers: int | None
    """Layers of each stage that recompute; None = all (or none for ``recompute="none"``)."""
    tokens_per_s: float
    peak_bytes: float
    score: float
    """The objective, larger is better (:func:`score_of`)."""
    layers_per_stage: int = 0
    """Layers of a (middle) pipeline stage: what ``recompute_layers`` counts of [-]."""

    @property
    def global_batch(self) -> int:
        """Sequences per step: micro-batch × accumulation × data-parallel degree [-]."""
        return self.micro_batch * self.grad_accum * self.plan.dp

    @property
    def run_plan(self):
        """The plan with this candidate's micro-batch, accumulation and recompute
        (:class:`fsdpsim.plan.spelling.RunPlan`: its one line)."""
        from fsdpsim.plan.spelling import RunPlan, canonical

        return RunPlan(canonical(self.plan), self.micro_batch, self.grad_accum, self.recompute,
                       None if self.recompute == "none" else self.recompute_layers)

    def training(self, base: TrainingConfig) -> TrainingConfig:
        """``base`` with this candidate's micro-batch, global batch and recompute (for
        :func:`predict_choice`)."""
        return replace(base, micro_batch=self.micro_batch, global_batch=self.global_batch,
                       recompute=self.recompute, recompute_layers=self.recompute_layers)


@dataclass(frozen=True)
class SearchResult:
    """What a search found and how much it looked at."""

    top: tuple[Choice, ...]
    """The best candidate of each of the best plans, best first."""
    cut_off: tuple[tuple[Choice, str], ...]
    """Faster candidates than the best that cannot run, with why (memory, schedule)."""
    plans: int
    """Plans in the space (after the constraints)."""
    plans_fitting: int
    """Plans with a micro-batch that fits the budget with full recompute."""
    candidates: int
    """(plan, micro-batch, recompute) candidates the engine evaluated, bounds included."""
    elapsed_s: float
    budget_bytes: float
    least_peak: Choice | None = None
    """The candidate with the smallest peak memory (when nothing fits: what it needs)."""
    stats: dict[str, float] = field(default_factory=dict)


#: The memory a searched plan may use by default, as a share of the GPU's: predict's own rule
#: (``auto`` prefers candidates below :data:`fsdpsim.engine.MEMORY_PRESSURE_FRACTION` of
#: memory and notes those above as near the limit, where allocator retries and fragmentation
#: slow or stop real runs) [-].
DEFAULT_MEMORY_BUDGET_FRACTION = engine.MEMORY_PRESSURE_FRACTION


def budget_system(system: System, budget_gib: float | None,
                  fraction: float = DEFAULT_MEMORY_BUDGET_FRACTION) -> System:
    """``system`` with each GPU's memory set to the budget: ``budget_gib``, or (None)
    ``fraction`` of the GPU's own; a budget above the GPU's memory is an error naming both."""
    have = system.accelerator.memory_bytes / GIB_BYTES
    if budget_gib is None:
        budget_gib = fraction * have
    if not 0 < budget_gib <= have + 1e-9:
        raise ConfigError(f"--memory-budget-gib {budget_gib:g} is not accepted; accepted: more "
                          f"than 0 and at most the {system.accelerator.name}'s {have:.1f} GiB")
    acc = replace(system.accelerator, memory_bytes=budget_gib * GIB_BYTES)
    return replace(system, accelerator=acc)


def score_of(objective: str, tokens_per_s, num_gpus: int, system: System, run=None,
             checkpoint_bytes: float = 0.0, price: float | None = None) -> np.ndarray:
    """The objective as a score, larger is better and increasing in throughput for a fixed GPU
    count (so the throughput bound of step 3 bounds every objective):

    - throughput: tokens/s;
    - cost: −USD per million tokens, the rent of the expected wall time with failures
      (:func:`fsdpsim.drivers.procurement.run_columns`: Daly's checkpoint interval);
    - energy: −kWh per million tokens, likewise;
    - time-to-train: −the expected wall time with failures (``--tokens``; without it, per token).
    """
    tps = np.asarray(tokens_per_s, dtype=float)
    if objective == "throughput":
        return tps
    from fsdpsim.drivers import procurement

    price = procurement.resolve_price(system, price)
    run = run or procurement.RunAssumptions()
    acc = system.accelerator
    cols = procurement.run_columns(
        tokens_per_s=np.maximum(tps, 1e-300), num_gpus=num_gpus, ok=True,
        price_usd_per_gpu_hour=np.nan if price is None else price.usd_per_gpu_hour,
        tdp_w=np.nan if acc.tdp_w is None else acc.tdp_w,
        power_cap_w=np.inf if system.power_cap_w is None else system.power_cap_w,
        checkpoint_bytes_=checkpoint_bytes, run=run)
    good = np.maximum(cols["failures.goodput"], 1e-300)
    if objective == "cost":
        value = cols["cost_usd_per_million_tokens"] / good
        if value.size and np.all(np.isnan(value)):
            raise ConfigError(f"--objective cost needs a price for {system.label}: give "
                              "--price USD per GPU-hour or a catalog price")
    elif objective == "energy":
        value = cols["energy_kwh_per_million_tokens"] / good
        if value.size and np.all(np.isnan(value)):
            raise ConfigError(f"--objective energy needs the board power of {system.label}")
    elif objective == "time-to-train":
        tokens = run.tokens or 1.0
        value = tokens / np.maximum(tps, 1e-300) / good
    else:
        raise ConfigError(f"--objective {objective!r} is not accepted; accepted: "
                          f"{', '.join(OBJECTIVES)}")
    return np.where(tps > 0, -value, -np.inf)


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
    from fsdpsim.hardware.system import domain_gpus

    t0 = time.perf_counter()
    if objective not in OBJECTIVES:
        raise ConfigError(f"--objective {objective!r} is not accepted; accepted: "
                          f"{', '.join(OBJECTIVES)}")
    training = frameworks.with_defaults(training, space.framework)
    gb = training.global_batch
    per_node = domain_gpus(system, num_gpus)
    if system.pod_gpus and space.pod_gpus != system.pod_gpus:
        space = replace(space, pod_gpus=system.pod_gpus)
    check_size(spec, num_gpus, per_node, training.seq_len, gb, space)
    families = list(enumerate_families(spec, num_gpus, per_node, training.seq_len, gb, space))
    if not families:
        from fsdpsim.drivers.search.explain import empty_space_message

        raise ConfigError(empty_space_message(spec, num_gpus, per_node, training, space))
    s = PlanColumns(spec, system, families, training)
    gb = np.broadcast_to(np.asarray(batch_of(gb, training.seq_len, s.dp), dtype=np.int64),
                         s.dp.shape)  # each plan's global batch [sequences]
    ckpt = _checkpoint_bytes(s)
    score = _scorer(objective, num_gpus, system, run, ckpt, price)
    stats: dict[str, float] = {"plans": len(s), "families": len(families),
                               "build_s": time.perf_counter() - t0}

    # ---- candidates: (plan, micro-batch) pairs ------------------------------------------------
    plan_idx, mb = _candidates(s, gb, space.get("micro_batch"))
    accum = gb[plan_idx] // s.dp[plan_idx] // mb
    evaluated = 0
    fixed_rc = space.get("recompute")
    fixed_rl = space.get("recompute_layers")
    if fixed_rl is not None and fixed_rc is None:
        fixed_rc = "full"  # a layer count alone means Megatron's full (block) recompute
    if fixed_rc == "op-selective" and op_selective_refused(spec):
        raise ConfigError(op_selective_refused(spec))
    selective = _selective_method(spec, space)
    found: list[tuple[np.ndarray, ...]] = []  # (plan, mb, rc code, rl, tps, peak, score)
    records: list[tuple] = []  # every evaluation, for the cut-off explanation

    def run_eval(rows, rc_name, rl, memory_only=False):
        """Evaluate candidate ``rows`` at one recompute setting; keep those that run, record all
        (``memory_only``: whether they fit, nothing kept)."""
        nonlocal evaluated
        evaluated += rows.size
        rl = np.broadcast_to(np.asarray(rl, dtype=float), rows.shape)
        out = s.evaluate(plan_idx[rows], mb[rows], accum[rows],
                         np.full(rows.size, float(_RC[rc_name])), rl, memory_only=memory_only)
        if memory_only:
            return out
        out["ok"] = out["fits"] & out["pipeline_ok"]
        ok = out["ok"]
        found.append((plan_idx[rows][ok], mb[rows][ok], np.full(ok.sum(), _RC[rc_name]),
                      rl[ok], out["tokens_per_s"][ok], out["peak_bytes"][ok],
                      score(out["tokens_per_s"][ok])))
        records.append((plan_idx[rows], mb[rows], rc_name, rl, out))
        return out

    def kth() -> float:
        """The score a candidate must reach to enter the top (−inf unpruned)."""
        if not prune or not found:
            return -np.inf
        return bounds.kth_best(np.concatenate([f[0] for f in found]),
                               np.concatenate([f[6] for f in found]), top)

    # ---- step 2: the memory bound. Each plan's micro-batches (consecutive, ascending) are
    # bisected at the least-memory setting (every layer recomputed in full, or the fixed one)
    # for the largest that fits: peak memory never falls as the micro-batch grows (1F1B holds
    # min(pp, m) micro-batches of mb sequences in flight, GPipe all m: mb·min(pp, m) and
    # mb·m never fall), so the larger ones cannot fit with any recompute. Pruned, the
    # engine's memory stage alone answers (its step and throughput are not needed) ---------
    low_rc = fixed_rc or "full"
    low_rl = -1.0 if fixed_rl is None else float(fixed_rl)
    starts = np.flatnonzero(np.r_[True, plan_idx[1:] != plan_idx[:-1]])
    counts = np.diff(np.r_[starts, plan_idx.size])
    lo, hi = np.full(starts.size, -1), counts.copy()  # index lo fits (-1: none), hi does not
    # A plan in another mesh order holds the same memory (the order places groups on the
    # tiers, it moves no bytes into memory; tests/test_search.py checks it): bisect one order.
    owner = _order_owner(s, plan_idx[starts])
    hi[owner != np.arange(starts.size)] = -1  # settled below from their owner
    first = True  # the largest micro-batch first: where it fits (most plans of small models),
    while np.any(hi - lo > 1):  # one evaluation settles the plan
        act = np.flatnonzero(hi - lo > 1)
        mid = hi[act] - 1 if first else (lo[act] + hi[act]) // 2
        first = False
        fit = run_eval(starts[act] + mid, low_rc, low_rl, memory_only=prune)["fits"]  # memory
        lo[act] = np.where(fit, mid, lo[act])             # alone: the schedule's rule is not
        hi[act] = np.where(fit, hi[act], mid)             # monotone in mb
    lo = lo[owner]
    within = np.arange(plan_idx.size) - np.repeat(starts, counts)
    candidates = np.flatnonzero(within <= np.repeat(lo, counts))
    plans_fit = int(np.count_nonzero(lo >= 0))

    def settle(rows):
        """Steps 3 and 4 on candidate ``rows``: each one's best recompute setting that fits."""
        if fixed_rc is not None:
            run_eval(rows, fixed_rc, low_rl)
            return
        # ---- step 3: no recompute, the fastest setting of each (plan, micro-batch) ---------
        none = run_eval(rows, "none", -1.0)
        bound = np.full(plan_idx.size, -np.inf)
        bound[rows] = score(none["tokens_per_s"])
        # a schedule that cannot run its micro-batches cannot with any recompute either
        rows = rows[~none["ok"] & none["pipeline_ok"] & (bound[rows] >= kth())]
        full = run_eval(rows, "full", -1.0)
        rows = rows[full["ok"]]
        partial = space.supports.get("partial_recompute", (True,))[0]
        sel = (run_eval(rows, selective, -1.0) if selective
               else {"ok": np.zeros(rows.size, bool)})
        # ---- step 4: the fewest recomputed layers that fit, best bound first, in rounds: each
        # round raises the K-th best, which prunes the rest of the queue (branch and bound;
        # selective only where all-selective fits: fewer layers hold more) -------------------
        L = s.layers_stage[plan_idx]
        # (op-selective covers every layer: torchtitan's "op" policy has no layer count);
        # "every-nth" (torchtitan's selective_ac_option = n: every n-th layer of a model
        # chunk): a count that divides the stage's layers, without virtual stages
        nth = partial == "every-nth"
        if nth:
            keep = s.column("vpp", plan_idx[rows]) == 1
            rows, sel = rows[keep], {"ok": sel["ok"][keep]}
        queue = [(method, rows[fits & (L[rows] > 1)]) for method, fits in
                 (("selective", sel["ok"] & (selective == "selective")),
                  ("full", np.ones(rows.size, bool))) if partial]
        queue = [(method, q[np.argsort(-bound[q], kind="stable")]) for method, q in queue]
        while any(q.size for _, q in queue):
            least = kth()
            queue = [(method, q[bound[q] >= least]) for method, q in queue]
            for i, (method, q) in enumerate(queue):
                if not q.size:
                    continue
                take = max(ROUND_ROWS, q.size // 8)
                _fewest_layers(run_eval, q[:take], method, L[q[:take]], divisors=nth)
                queue[i] = (method, q[take:])

    if not prune:
        settle(candidates)
    else:
        # ---- the throughput bound (bounds.py), best first: a candidate whose bound is below
        # the K-th best plan found so far cannot enter the top; rounds raise the K-th best ----
        # a pipeline schedule that cannot run the step's micro-batches never enters the top
        runs = bounds.schedule_runs(s, plan_idx[candidates], accum[candidates])
        stats["schedule_cannot_run"] = int(np.count_nonzero(~runs))
        candidates = candidates[runs]
        groups = bounds.bound_groups(s, bounds.compute_groups(s))
        upper, n_bound = bounds.throughput_bound(s, plan_idx[candidates], mb[candidates],
                                                 accum[candidates], groups)
        evaluated += n_bound
        upper = score(upper)
        _, skipped = bounds.best_first(candidates, upper, kth, settle)
        stats["bound_rows"] = n_bound
        stats["candidates_skipped"] = skipped
        if not found:  # nothing fits: the exhaustive search says what the least memory is
            return search(spec, system, num_gpus, training, space, objective=objective,
                          top=top, run=run, price=price, prune=False)
    least = _least_peak(s, gb, records, low_rc, low_rl, score)
    stats["evaluate_s"] = time.perf_counter() - t0 - stats["build_s"]

    cand = [np.concatenate(c) for c in zip(*found)] if found else [np.zeros(0)] * 7
    top_choices = _top_plans(s, cand, gb, top)
    best_score = top_choices[0].score if top_choices else -np.inf
    cut = _cut_off(s, records, gb, best_score, score) if top_choices else ()
    return SearchResult(top=tuple(top_choices), cut_off=tuple(cut), plans=len(s),
                        plans_fitting=int(plans_fit), candidates=int(evaluated),
                        elapsed_s=time.perf_counter() - t0,
                        budget_bytes=float(system.accelerator.memory_bytes),
                        least_peak=least, stats=stats)


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


def _scorer(objective, num_gpus, system, run, ckpt, price) -> Callable[[np.ndarray], np.ndarray]:
    """The objective as a function of tokens/s (:func:`score_of`); raises at once without a
    price."""
    if objective == "throughput":
        return lambda tps: np.asarray(tps, dtype=float)
    score_of(objective, np.ones(1), num_gpus, system, run, ckpt, price)  # raises without a price
    return lambda tps: score_of(objective, tps, num_gpus, system, run, ckpt, price)


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


def _choice(s: PlanColumns, gb: np.ndarray, plan: int, mb: int, rc_code: int, rl: float, tps: float,
            peak: float, score: float) -> Choice:
    """One candidate of the columns as a :class:`Choice` (its plan built and validated);
    ``gb``: each plan's global batch."""
    name = RECOMPUTES[int(rc_code)]
    L = int(s.layers_stage[plan])
    layers = None if rl < 0 or rl >= L or name == "none" else int(rl)
    return Choice(plan=s.plan(plan), micro_batch=int(mb),
                  grad_accum=int(gb[plan] // s.dp[plan] // mb), recompute=name,
                  recompute_layers=layers, tokens_per_s=float(tps), peak_bytes=float(peak),
                  score=float(score), layers_per_stage=L)


def _top_plans(s: PlanColumns, cand, gb: np.ndarray, top: int) -> list[Choice]:
    """Each plan's best candidate, the best ``top`` plans; ties: fewer recomputed layers, then
    smaller peak memory, then the enumeration order."""
    p, mb, rc, rl, tps, peak, score = cand
    if not p.size:
        return []
    rl_eff = np.where(rc == 0, 0, np.where(rl < 0, s.layers_stage[p.astype(np.int64)], rl))
    order = np.lexsort((mb, peak, rl_eff, rc, p, -score))
    out, seen = [], set()
    for i in order:
        if int(p[i]) in seen:
            continue
        seen.add(int(p[i]))
        out.append(_choice(s, gb, int(p[i]), mb[i], rc[i], rl[i], tps[i], peak[i], score[i]))
        if len(out) == top:
            break
    return out


def _least_peak(s, gb, records, rc_name, rl, score) -> Choice | None:
    """The candidate with the smallest peak memory among those evaluated at the least-memory
    setting (step 2; every plan's smallest micro-batch is among them when nothing fits) that
    its schedule can run."""
    best = None
    for p, m, name, rls, out in records:
        if name != rc_name or not p.size or not np.all(rls == rl):
            continue
        peak = np.where(out["pipeline_ok"], out["peak_bytes"], np.inf)
        i = int(np.argmin(peak))
        if np.isfinite(peak[i]) and (best is None or peak[i] < best[0]):
            best = (peak[i], int(p[i]), int(m[i]), out["tokens_per_s"][i])
    if best is None:
        return None
    peak, p, m, tps = best
    return _choice(s, gb, p, m, _RC[rc_name], rl, tps, peak, float(score(np.array([tps]))[0]))


def _cut_off(s: PlanColumns, records, gb: np.ndarray, best: float, score, shown: int = 3):
    """The fastest evaluated candidates that beat the best but cannot run, one per plan."""
    rows = []
    for p, m, rc_name, rl, out in records:
        bad = ~out["ok"]
        sc = score(out["tokens_per_s"])
        for i in np.flatnonzero(bad & (sc > best)):
            rows.append((float(sc[i]), int(p[i]), int(m[i]), rc_name, float(rl[i]),
                         float(out["tokens_per_s"][i]), float(out["peak_bytes"][i]),
                         bool(out["fits"][i])))
    rows.sort(key=lambda r: -r[0])
    out, seen = [], set()
    for sc, p, m, rc_name, rl, tps, peak, fits in rows:
        if p in seen:
            continue
        seen.add(p)
        c = _choice(s, gb, p, m, _RC[rc_name], rl, tps, peak, sc)
        why = ("memory" if not fits else "schedule")
        out.append((c, why))
        if len(out) == shown:
            break
    return out





def predict_choice(spec: ModelSpec, system: System, choice: Choice, training: TrainingConfig):
    """:func:`fsdpsim.drivers.predict.predict` of a searched candidate (its plan, micro-batch and
    recompute fixed): the full report of the same numbers the search ranked by."""
    from fsdpsim.drivers.predict import predict

    return predict(spec, system, choice.plan, choice.training(training))
__all__ = ["search", "SearchResult", "Choice", "OBJECTIVES", "budget_system", "score_of",
           "DEFAULT_MEMORY_BUDGET_FRACTION",
           "predict_choice"]
