"""What a search returns: each evaluated candidate as a :class:`Choice`, the
:class:`SearchResult`, and the choosers that turn the evaluated columns into the top plans, the
least-memory candidate and the faster candidates that cannot run; :func:`predict_choice`
reports a candidate in full."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from fsdpsim.drivers.search.columns import PlanColumns
from fsdpsim.engine import RECOMPUTE_CODES
from fsdpsim.hardware.spec import System
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import RECOMPUTES, ParallelPlan, TrainingConfig

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
    n_layers: int = 0
    """The model's layers, which the plan's pipeline split places [-]."""

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
                  score=float(score), layers_per_stage=L, n_layers=s.spec.n_layers)


def top_plans(s: PlanColumns, cand, gb: np.ndarray, top: int) -> list[Choice]:
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


def least_peak(s, gb, records, rc_name, rl, score) -> Choice | None:
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
    return _choice(s, gb, p, m, RECOMPUTE_CODES[rc_name], rl, tps, peak,
                   float(score(np.array([tps]))[0]))


def cut_off(s: PlanColumns, records, gb: np.ndarray, best: float, score, shown: int = 3):
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
        c = _choice(s, gb, p, m, RECOMPUTE_CODES[rc_name], rl, tps, peak, sc)
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
