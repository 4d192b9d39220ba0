"""How far the hand-tuned parallel plans of published runs are from ``fsdpsim search``'s best.

The search is compared with the plans people tuned by hand, the
published hybrid/data-parallel runs ``fsdpsim validate`` models (``validation/data``, copied
from ``shared/validation`` with their sources):

* Megatron-LM PTD-P, Narayanan et al., SC21 (arXiv 2104.04473), Tables 1-2
  (``published_calibration.csv``, ``source_key`` = megatron_sc21);
* vTrain's Megatron-DeepSpeed GPT runs on A100 (Bang et al., MICRO 2024;
  ``vtrain_ground_truth_multi.csv``);
* the TP/PP/CP/EP runs of ``hybrid_calibration.csv`` (NeMo / Megatron-Bridge performance
  summaries, InternEvo, DLPerf, ...; V100 to GB300).

Each row is built exactly as ``validate`` builds it (:func:`fsdpsim.measured.validate.load_measurements`
for the table, :func:`fsdpsim.measured.rows.row_setup` for the model, system, plan and training
options; micro-batch, accumulation and recompute as the row states or as ``validate`` resolved
them), predicted with :func:`fsdpsim.drivers.predict.predict`, and searched with
:func:`fsdpsim.drivers.search.run.search` for the same model, GPUs, global batch (micro-batch × accumulation ×
data-parallel degree of the published plan), sequence, precision and framework profile
(``SearchSpace(framework=plan.framework)``), the memory budget being the GPU's memory. Both
numbers come from the one model, so ``published <= best`` must hold for every published plan in
the search space that fits; where it does not, :func:`outside_space` names the setting of the
published plan the space leaves out. A published plan far below the best (> 20 %) points at a
modelling error (or at a tuning the authors missed).

Usage: ``python tools/search_vs_published.py [--limit N] [--csv PATH] [--source TEXT]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fsdpsim.hardware.catalog import Catalog, load_catalog  # noqa: E402
from fsdpsim.util.errors import ConfigError  # noqa: E402
from fsdpsim.measured.rows import row_setup  # noqa: E402
from fsdpsim.measured.validate import load_measurements  # noqa: E402
from fsdpsim.plan.parallel import DEFAULT_MESH_ORDER, ParallelPlan, TrainingConfig  # noqa: E402
from fsdpsim.drivers.predict import predict  # noqa: E402
from fsdpsim.drivers.search.results import Choice, predict_choice  # noqa: E402
from fsdpsim.drivers.search.run import search  # noqa: E402
from fsdpsim.drivers.search.explain import plan_line  # noqa: E402
from fsdpsim.drivers.search.space import (MAX_END_SHIFT, MAX_VPP, MIN_TOKENS_PER_CP_RANK,  # noqa: E402
                                  SearchSpace, enumerate_plans, stage_splits)
from fsdpsim.hardware.system import domain_gpus  # noqa: E402

DATA = ROOT / "validation" / "data"
#: (file, source_key kept or None for every row): the published hand-tuned hybrid plans.
FILES = (("published_calibration.csv", "megatron_sc21"), ("vtrain_ground_truth_multi.csv", None),
         ("hybrid_calibration.csv", None))
#: The published plan counts as as good as the best when within this fraction of it [-].
NEAR_FRACTION = 0.05
#: A published plan this far below the best points at a modelling error [-].
FAR_FRACTION = 0.20


def published_rows(catalog: Catalog, files=FILES, data: Path = DATA) -> pd.DataFrame:
    """The rows ``validate`` models (no ``skip`` reason) of the published plans, with a
    ``file`` column."""
    parts = []
    for name, source in files:
        frame = load_measurements(data / name, catalog)
        frame = frame[frame["skip"] == ""]
        if source is not None:
            frame = frame[frame["source_key"] == source]
        parts.append(frame.assign(file=name))
    return pd.concat(parts, ignore_index=True)


def row_case(row: pd.Series, catalog: Catalog):
    """(spec, system, plan, training) of the published plan, as ``validate`` predicts it: the
    row's objects (:func:`fsdpsim.measured.rows.row_setup`) with its micro-batch and recompute,
    and the global batch micro-batch × accumulation × data-parallel degree."""
    spec, system, plan, options = row_setup(row, catalog)
    mb, ga = int(row["micro_batch"]), int(row["grad_accum"])
    training = TrainingConfig(micro_batch=mb, recompute=str(row["recompute"]),
                              global_batch=mb * ga * plan.dp, **options)
    return spec, system, plan, training


def _plan_key(spec, system, plan: ParallelPlan) -> tuple:
    """What the engine sees of a plan (the inputs ``search`` builds per plan): two plans with the
    same key are the same plan to the model (e.g. mesh orders with the same group layout)."""
    from fsdpsim.engine.build import plan_inputs, pod_inputs
    from fsdpsim.engine.build_framework import framework_inputs
    from fsdpsim.engine.build_moe import stage_inputs

    x = {**plan_inputs(plan, spec.n_layers), **pod_inputs(plan, system),
         **stage_inputs(spec, plan), **framework_inputs(spec, system, plan)}
    return tuple(sorted((k, tuple(np.ravel(np.asarray(v, dtype=float)).tolist()))
                        for k, v in x.items()))


def outside_space(spec, system, plan: ParallelPlan, training: TrainingConfig,
                  space: SearchSpace) -> str:
    """Why ``plan`` is not among the plans :func:`fsdpsim.drivers.search.space.enumerate_plans` yields
    ("" when an enumerated plan has the same engine inputs): the rule of
    :mod:`fsdpsim.drivers.search.space` it breaks, else "not enumerated"."""
    per_node = domain_gpus(system, plan.num_gpus)
    try:  # the whole space (a fixed degree would be kept even where a rule leaves it out)
        plans = [p for p in enumerate_plans(spec, plan.num_gpus, per_node, training.seq_len,
                                            training.global_batch, space)
                 if (p.tp, p.pp, p.cp, p.ep, p.sharding) == (plan.tp, plan.pp, plan.cp, plan.ep,
                                                             plan.sharding)]
    except ConfigError:
        plans = []
    key = _plan_key(spec, system, plan)
    reasons = []
    if plan.tp > (space.max_tp or per_node):
        reasons.append(f"tp {plan.tp} > the scale-up domain's {per_node} GPUs (max_tp)")
    if plan.cp > 1 and training.seq_len // plan.cp < MIN_TOKENS_PER_CP_RANK:
        reasons.append(f"cp {plan.cp}: {training.seq_len // plan.cp} tokens per rank < "
                       f"MIN_TOKENS_PER_CP_RANK {MIN_TOKENS_PER_CP_RANK}")
    if plan.vpp > MAX_VPP:
        reasons.append(f"vpp {plan.vpp} > MAX_VPP {MAX_VPP}")
    searched = space.values_of("tp_overlap", (True,))
    if plan.tp > 1 and plan.tp_overlap not in searched:
        reasons.append(f"tp_overlap {'on' if plan.tp_overlap else 'off'} (the space searches "
                       f"{' and '.join('on' if v else 'off' for v in searched)}: TP overlap "
                       "is never slower in the model where the framework runs it)")
    if plan.pp > 1 and plan.pp_schedule == "gpipe":
        reasons.append("pp_schedule gpipe (searched only when fixed)")
    split = (plan.pp_first_layers, plan.pp_last_layers)
    if plan.pp > 1 and split != (None, None) and split not in stage_splits(
            spec.n_layers, plan.pp, plan.vpp):
        reasons.append(f"stage split first/last {split[0]}/{split[1]} (only even, or ends "
                       f"1..{MAX_END_SHIFT} layers lighter)")
    if plan.ep > 1 and plan.etp not in (1, plan.tp):
        reasons.append(f"etp {plan.etp} not 1 or tp")
    if plan.grad_sync != "every" or plan.keep_gathered or not plan.reshard_after_forward:
        reasons.append("grad_sync/keep_gathered/reshard_after_forward not the default")
    if plan.mesh_order != DEFAULT_MESH_ORDER and not space.mesh_orders:
        reasons.append("mesh order not the default (mesh_orders off)")
    if any(_plan_key(spec, system, p) == key for p in plans):
        return ""
    return "; ".join(reasons) or "not enumerated (no rule of search_space names it)"


def _choice_of(plan: ParallelPlan, training: TrainingConfig, pred) -> Choice:
    """The published plan as a :class:`fsdpsim.drivers.search.results.Choice` (for its plan line)."""
    v = pred.values
    t = pred.training
    return Choice(plan=plan, micro_batch=int(t["micro_batch"]), grad_accum=int(t["grad_accum"]),
                  recompute=str(t["recompute"]), recompute_layers=training.recompute_layers,
                  tokens_per_s=float(v["tokens_per_s"]), peak_bytes=float(v["peak_bytes"]),
                  score=float(v["tokens_per_s"]))


def compare_row(row: pd.Series, catalog: Catalog, cache: dict | None = None) -> dict[str, Any]:
    """The published plan of one row against the search's best, as one record."""
    spec, system, plan, training = row_case(row, catalog)
    pub = predict(spec, system, plan, training)
    pub_tps = float(pub.values["tokens_per_s"])
    fits = bool(pub.values["fits"]) and bool(pub.values.get("pipeline_ok", True))
    space = SearchSpace(framework=plan.framework)
    free = replace(training, micro_batch=None, recompute=None, recompute_layers=None)
    key = _search_key(spec, system, plan, training)
    cache = {} if cache is None else cache
    t0 = time.perf_counter()
    cached = key in cache
    if not cached:
        try:
            result = search(spec, system, plan.num_gpus, free, space, top=1)
            best = result.top[0] if result.top else None
            best_tps = (float(predict_choice(spec, system, best, free).values["tokens_per_s"])
                        if best else float("nan"))
            cache[key] = (best, best_tps, result.plans, "" if best else "nothing fits")
        except ConfigError as exc:
            cache[key] = (None, float("nan"), 0, f"search: {exc}")
    best, best_tps, n_plans, error = cache[key]
    ratio = pub_tps / best_tps if best_tps == best_tps and best_tps > 0 else float("nan")
    rec = {"id": row["id"], "file": row["file"], "source": row.get("source_key") or "vtrain",
           "model": row["model"], "gpu": row["gpu"], "n_gpus": int(row["n_gpus"]),
           "global_batch": training.global_batch, "seq_len": training.seq_len,
           "framework": plan.framework, "published_plan": plan_line(_choice_of(plan, training, pub)),
           "published_fits": fits, "published_tokens_per_s": pub_tps,
           "best_tokens_per_s": best_tps, "ratio": ratio,
           "gap": 1.0 - ratio if ratio == ratio else float("nan"),
           "within_5pct": bool(ratio >= 1.0 - NEAR_FRACTION) if ratio == ratio else False,
           "best_plan": plan_line(best) if best else "", "plans": n_plans,
           "search_s": 0.0 if cached else time.perf_counter() - t0, "error": error,
           "outside_space": ""}
    if ratio == ratio and ratio > 1.0 + 1e-9:  # the search missed a faster plan: say why
        v = pub.values
        why = [f"published plan does not fit: peak {v['peak_bytes'] / 2**30:.0f} GiB > "
               f"{v['capacity_bytes'] / 2**30:.0f} GiB usable" if not v["fits"] else "",
               "its schedule cannot run" if not v.get("pipeline_ok", True) else "",
               outside_space(spec, system, plan, training, space)]
        rec["outside_space"] = "; ".join(w for w in why if w) or (
            "in the space and fits: micro-batch/recompute outside the space or a search defect")
    return rec


def _search_key(spec, system, plan: ParallelPlan, training: TrainingConfig):
    """Rows with the same key ask the search the same question (its micro-batch and recompute
    free): one search answers them all."""
    free = replace(training, micro_batch=None, recompute=None, recompute_layers=None)
    return (repr(spec), repr(system), plan.num_gpus, repr(free), plan.framework)


_WORKER: dict = {}


def _compare_group(rows: list[pd.Series]) -> list[dict[str, Any]]:
    """:func:`compare_row` of rows sharing one search (in a worker process)."""
    catalog = _WORKER.setdefault("catalog", load_catalog(use_env=False))
    cache: dict = {}
    return [compare_row(row, catalog, cache) for row in rows]


def compare(catalog: Catalog, rows: pd.DataFrame, jobs: int = 1, progress=None) -> pd.DataFrame:
    """:func:`compare_row` of every row, one search per distinct question, over ``jobs``
    processes (the largest GPU counts first); records in the rows' order."""
    groups: dict = {}
    for i, (_, row) in enumerate(rows.iterrows()):
        key = _search_key(*row_case(row, catalog))
        groups.setdefault(key, []).append((i, row))
    order = sorted(groups.values(), key=lambda g: -int(g[0][1]["n_gpus"]))
    out: dict[int, dict] = {}
    done = 0

    def collect(group, records):
        nonlocal done
        for (i, _), rec in zip(group, records):
            out[i] = rec
            done += 1
            if progress:
                progress(done, len(rows), rec)

    if jobs <= 1:
        _WORKER["catalog"] = catalog
        for group in order:
            collect(group, _compare_group([row for _, row in group]))
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs) as pool:
            futures = [(g, pool.submit(_compare_group, [row for _, row in g])) for g in order]
            for group, future in futures:
                collect(group, future.result())
    return pd.DataFrame([out[i] for i in range(len(rows))])


def summary_lines(frame: pd.DataFrame) -> list[str]:
    """How many rows, the fraction within 5 %, the median and largest gap, and the outliers."""
    ok = frame[frame["ratio"] == frame["ratio"]]
    gaps = ok["gap"].clip(lower=0.0)
    lines = [f"rows compared: {len(ok)} (of {len(frame)}; {len(frame) - len(ok)} without a "
             f"search result)"]
    if ok.empty:
        return lines
    lines += [
        f"published within {100 * NEAR_FRACTION:.0f} % of the best: {ok['within_5pct'].sum()} "
        f"({100 * ok['within_5pct'].mean():.1f} %)",
        f"gap (1 - published/best): median {100 * statistics.median(gaps):.1f} %, "
        f"max {100 * gaps.max():.1f} %",
        f"published plan does not fit by fsdpsim's memory model: "
        f"{int((~ok['published_fits']).sum())}"]
    slower = ok[ok["ratio"] > 1.0 + 1e-9]
    lines.append(f"search best slower than the published plan: {len(slower)}")
    for _, r in slower.iterrows():
        lines.append(f"  {r['id']}: published {r['published_plan']} "
                     f"{r['published_tokens_per_s']:.4g} tok/s > best {r['best_plan']} "
                     f"{r['best_tokens_per_s']:.4g}: {r['outside_space']}")
    far = ok[ok["gap"] > FAR_FRACTION].sort_values("gap", ascending=False)
    lines.append(f"published > {100 * FAR_FRACTION:.0f} % below the best: {len(far)}")
    for _, r in far.iterrows():
        lines.append(f"  {r['id']} ({r['model']}, {r['n_gpus']} x {r['gpu']}): gap "
                     f"{100 * r['gap']:.1f} %: published {r['published_plan']} -> best "
                     f"{r['best_plan']}")
    by = ok.groupby("source")["gap"].agg(["size", "median", "max"])
    lines.append("by source (rows, median gap, max gap):")
    lines += [f"  {name:<44} {int(s['size']):>4} {100 * s['median']:>6.1f} % "
              f"{100 * s['max']:>6.1f} %" for name, s in by.iterrows()]
    return lines


def table(frame: pd.DataFrame) -> str:
    view = frame[["id", "model", "n_gpus", "published_tokens_per_s", "best_tokens_per_s", "ratio",
                  "within_5pct", "best_plan"]].copy()
    for c in ("published_tokens_per_s", "best_tokens_per_s"):
        view[c] = view[c].round(0)
    view["ratio"] = view["ratio"].round(3)
    with pd.option_context("display.width", 250, "display.max_colwidth", 90):
        return view.to_string(index=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N rows")
    parser.add_argument("--source", default=None, help="only rows whose source contains this")
    parser.add_argument("--no-moe", action="store_true",
                        help="leave out mixture-of-experts rows (their searches take ~1 min each)")
    parser.add_argument("--csv", default=None, help="write every record to this CSV")
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    catalog = load_catalog(use_env=False)
    rows = published_rows(catalog)
    if args.source:
        src = rows["source_key"].fillna("vtrain").astype(str)
        rows = rows[src.str.contains(args.source, case=False, regex=False)]
    if args.no_moe:
        rows = rows[rows["ep"].fillna(1).astype(float) <= 1]
    if args.limit:
        rows = rows.head(args.limit)
    t0 = time.perf_counter()

    def progress(i, n, rec):
        if not args.quiet:
            print(f"[{i}/{n}] {rec['id']}: {rec['search_s']:.2f} s", file=sys.stderr)

    frame = compare(catalog, rows, args.jobs, progress)
    print(table(frame))
    print()
    print("\n".join(summary_lines(frame)))
    slow = frame.sort_values("search_s", ascending=False).head(3)
    print(f"elapsed {time.perf_counter() - t0:.0f} s; slowest searches: " + ", ".join(
        f"{r['id']} ({r['n_gpus']} GPUs) {r['search_s']:.1f} s" for _, r in slow.iterrows()))
    if args.csv:
        frame.to_csv(args.csv, index=False)
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
