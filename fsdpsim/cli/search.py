"""``fsdpsim search``: the best parallel plans of a model on some GPUs, as a table, JSON or CSV,
with ``--explain`` and the chosen plan as torchtitan TOML or Megatron-LM arguments. Parse, call,
render: the search itself is :mod:`fsdpsim.drivers.search.run`."""

from __future__ import annotations

from typing import Any

import click

from fsdpsim.report import render
from fsdpsim.cli.knobs import knob_options
from fsdpsim.cli.predict import kernel_options
from fsdpsim.cli.procurement import run_options
from fsdpsim.plan.knobs import fixable
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.numbers import GPUS, Rule, option_type
from fsdpsim.util.output import echo

EMITS = ("table", "torchtitan", "megatron")


def search_options(f):
    """The options of ``fsdpsim search`` (and the run assumptions of predict/sweep)."""
    opts = [
        click.option("--model", default="llama3-8b", show_default=True,
                     help="Preset name, ladder id or Hugging Face config.json path."),
        click.option("--gpu", default=None, help="Accelerator id or alias (default h100)."),
        click.option("--cluster", default=None, help="Node or cluster id instead of --gpu."),
        click.option("--num-gpus", default="8", show_default=True,
                     help="GPUs, or a list (512,1024) or range (256..4096): the plans of each "
                          "count are ranked together."),
        *knob_options("search", "gpus_per_node", "network", "inter_node_gbps_per_gpu",
                      "power_cap_w", "placement", "seq_len", "global_batch", "precision",
                      "optimizer"),
        *kernel_options("search"),
        *knob_options("search", "framework"),
        click.option("--memory-budget-gib", type=option_type(Rule(0.01, 1e6)), default=None,
                     help="Memory per GPU a plan may use (default: 90 % of the GPU's, predict's "
                          "headroom rule)."),
        click.option("--objective", type=click.Choice(("throughput", "cost", "energy",
                                                       "time-to-train")),
                     default="throughput", show_default=True,
                     help="Rank by tokens/s, or per-token cost / energy / wall time with "
                          "failures (these differ across GPU counts)."),
        click.option("--max-tp", type=option_type(GPUS), default=None,
                     help="Largest TP degree (default: the GPUs of one NVLink domain)."),
        click.option("--max-pp", type=option_type(GPUS), default=None),
        click.option("--fix", "fix", multiple=True,
                     help="A setting every plan has, NAME=VALUE (repeatable or "
                          "comma-separated; a value as predict's option reads it: tp=8, "
                          "sharding=full, zero=1, recompute_layers=12). NAME: "
                          f"{', '.join(sorted(fixable()))}."),
        click.option("--mesh-orders/--default-mesh-order", default=True, show_default=True,
                     help="Also try the other orders of the mesh on the network tiers "
                          "(frameworks that place the mesh freely; torchtitan and Megatron-LM "
                          "build one order)."),
        click.option("--top", type=option_type(Rule(1, 1000, whole=True)), default=5,
                     show_default=True),
        click.option("--explain", is_flag=True, help="Why the best plan wins: its time "
                     "breakdown and the faster plans that do not fit."),
        click.option("--emit", type=click.Choice(EMITS), default="table", show_default=True,
                     help="Print the best plan as a torchtitan TOML fragment or Megatron-LM "
                          "arguments instead of the table."),
        *knob_options("search", "price"),
        click.option("--format", "fmt", type=click.Choice(render.FORMATS), default="table",
                     show_default=True, help="Output format of the ranking."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return run_options(f)


def limit_options(f):
    """``--deadline-days`` and ``--budget-usd``: keep the plans whose whole run (``--tokens``,
    with failures) ends in time / within the money (:func:`fsdpsim.drivers.procurement.
    within_limits`); the cheapest first under a deadline, the fastest under a budget."""
    opts = [
        click.option("--deadline-days", default=None, metavar="DAYS",
                     help="With --tokens: only plans that train them within DAYS (failures "
                          "included), the cheapest first (--objective sets another order)."),
        click.option("--budget-usd", default=None, metavar="USD",
                     help="With --tokens: only plans whose run costs at most USD (12e6, "
                          "$12m), the fastest first (--objective sets another order)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def limited_objective(ctx: click.Context, o: dict[str, Any]) -> tuple[float | None,
                                                                      float | None]:
    """The limits of :func:`limit_options` (read, and checked to come with ``--tokens``), and
    ``o["objective"]`` set to their order where ``--objective`` was not given: cost under a
    deadline, time-to-train under a budget."""
    from fsdpsim.drivers.procurement import read_limits

    days, usd = read_limits(o.get("deadline_days"), o.get("budget_usd"))
    if (days is not None or usd is not None) and o.get("tokens") is None:
        raise ConfigError("--deadline-days and --budget-usd need --tokens (the tokens to train, "
                          "e.g. --tokens 15t)")
    given = ctx.get_parameter_source("objective") not in (
        click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP)
    if not given and days is not None:
        o["objective"] = "cost"
    elif not given and usd is not None:
        o["objective"] = "time-to-train"
    return days, usd


def _counts(text: str) -> list[int]:
    """``--num-gpus``: a count, a list or a range."""
    from fsdpsim.drivers.sweep.values import parse_counts

    return parse_counts(text, "--num-gpus")


def check_counts(spec, systems: dict, training, space) -> None:
    """Refuse a ``--num-gpus`` list whose spaces together exceed the search's limit
    (:data:`fsdpsim.drivers.search.space.MAX_CANDIDATES`, by the same upper-bound estimate)."""
    from fsdpsim.drivers.search.space import MAX_CANDIDATES, estimate_size
    from fsdpsim.hardware.system import domain_gpus

    gb, seq = training.global_batch, training.seq_len
    sizes = {n: estimate_size(spec, n, domain_gpus(system, n), seq, gb, space)[1]
             for n, system in systems.items()}
    total = sum(sizes.values())
    if total > MAX_CANDIDATES:
        largest = sorted(sizes, key=sizes.get, reverse=True)[:3]
        raise ConfigError(
            f"--num-gpus {', '.join(f'{n:,}' for n in systems)}: up to {total:,} candidates "
            f"together, more than the {MAX_CANDIDATES:,} a search takes (the largest: "
            + ", ".join(f"{n:,} GPUs {sizes[n]:,}" for n in largest)
            + "); give fewer GPU counts, or narrow the space with --fix")


def run_search(ctx: click.Context, o: dict[str, Any]):
    """Resolve the options and search every GPU count within the memory budget
    (``--memory-budget-gib``, default :data:`~fsdpsim.drivers.search.objective.
    DEFAULT_MEMORY_BUDGET_FRACTION` of the GPU's): (spec, the system of each count with the
    GPU's own memory, training, results by count, the ranking)."""
    from fsdpsim.drivers import procurement
    from fsdpsim.cli.defaults import auto_int
    from fsdpsim.cli.predict import (build_system, kernel_knobs, model_at,
                                     precision_for)
    from fsdpsim.drivers.search.objective import budget_system
    from fsdpsim.drivers.search.run import search
    from fsdpsim.drivers.search.space import SearchSpace, parse_fix
    from fsdpsim.plan.parallel import TrainingConfig

    counts = _counts(o["num_gpus"])
    seq = auto_int(o["seq_len"], "--seq-len") or 4096
    spec = model_at(o["model"], seq)
    o = {**o, "precision": precision_for(o["precision"],
                                         build_system(ctx, **{**o, "num_gpus": counts[0]}))}
    # no --global-batch: each mesh trains the default batch adjusted to its data-parallel
    # degree (search.space.batch_of), as predict would run that plan
    batch = auto_int(o["global_batch"], "--global-batch") if o["global_batch"] else None
    training = TrainingConfig(seq_len=seq, global_batch=batch, precision=o["precision"],
                              optimizer=o["optimizer"], **kernel_knobs(o))
    space = SearchSpace(fixed=parse_fix(o["fix"]), max_tp=o["max_tp"], max_pp=o["max_pp"],
                        mesh_orders=o["mesh_orders"], framework=o["framework"])
    run = procurement.read_run_options(o)
    results, systems, budgets = [], {}, {}
    for n in counts:
        systems[n] = build_system(ctx, **{**o, "num_gpus": n})
    price = search_price(ctx, o, systems[counts[0]])
    for n in counts:
        budgets[n] = budget_system(systems[n], o["memory_budget_gib"])
    if len(counts) > 1:  # each count's space is bounded in search(); the list's sum here
        check_counts(spec, budgets, training, space)
    for n in counts:
        results.append((n, search(spec, budgets[n], n, training, space,
                                  objective=o["objective"], top=o["top"], run=run, price=price)))
    ranking = sorted(((c, n) for n, r in results for c in r.top), key=lambda cn: -cn[0].score)
    limited = o.get("deadline_days") is not None or o.get("budget_usd") is not None
    if not ranking:
        from fsdpsim.drivers.search.explain import no_fit_message

        n, r = min(results, key=lambda nr: (nr[1].least_peak.peak_bytes if nr[1].least_peak
                                             else float("inf")))
        raise ConfigError(no_fit_message(r, spec, n, systems[n].accelerator.name,
                                         systems[n].accelerator.memory_bytes / 2**30))
    return spec, systems, training, results, ranking if limited else ranking[:o["top"]]


def search_price(ctx: click.Context, o: dict[str, Any], system) -> float | None:
    """``--price`` for the searched GPU (the one reader of every command,
    :func:`fsdpsim.drivers.sweep.values.one_price`); None: the catalog's."""
    from fsdpsim.drivers.sweep.values import one_price
    from fsdpsim.hardware.catalog import load_catalog

    return one_price(o["price"], load_catalog(ctx.obj.get("catalog_dirs", ())),
                     system.accelerator.id)


def plan_run(prediction, system, o: dict[str, Any], price: float | None) -> dict[str, Any]:
    """The cost, energy and time of a ranked plan as compare reports them
    (:func:`fsdpsim.drivers.procurement.run_summary`), at ``price`` (:func:`search_price`)."""
    from fsdpsim.drivers import procurement

    return procurement.run_summary(procurement.prediction_run(
        prediction, system, procurement.read_run_options(o), price))


def within(spec, systems: dict, training, ranking: list, o: dict[str, Any], price: float | None,
           deadline_days: float | None, budget_usd: float | None) -> list:
    """The ranked (choice, GPUs) whose whole run meets the limits, best first, at most
    ``--top``; none: a one-line error naming the closest plan (the cheapest under a budget
    alone, else the fastest) and what can meet the limits (more GPUs shorten a run; they do
    not make it cheaper)."""
    from fsdpsim.drivers.procurement import within_limits
    from fsdpsim.drivers.search.explain import plan_line
    from fsdpsim.report.words import limit_words, tokens_words
    from fsdpsim.drivers.search.results import predict_choice

    cheapest = budget_usd is not None and deadline_days is None
    kept, closest = [], None
    for c, n in ranking:
        summary = plan_run(predict_choice(spec, systems[n], c, training), systems[n], o, price)
        if within_limits(summary, deadline_days, budget_usd):
            kept.append((c, n))
            if len(kept) == o["top"]:
                break
            continue
        days, usd = summary["failures.train_days"], summary["failures.train_cost_usd"]
        key = (usd if cheapest else days)
        key = float("inf") if key is None else key
        if closest is None or key < closest[0]:
            closest = (key, c, n, days, usd)
    if kept:
        return kept
    near = ""
    if closest is not None:
        _, c, n, days, usd = closest
        near = (f"; the {'cheapest' if cheapest else 'fastest'}, {plan_line(c)} on {n:,} GPUs, "
                + ("does not finish" if days is None else f"takes {days:,.1f} days")
                + ("" if usd is None else f" and ${usd / 1e6:,.2f}M")
                + " (failures included)")
    accepted = ", ".join(w for w in (
        None if deadline_days is None else "a later deadline",
        None if budget_usd is None else "a larger budget",
        None if deadline_days is None else "more GPUs (--num-gpus)",
        None if budget_usd is None else "other GPUs or GPU counts (--gpu, --num-gpus)") if w)
    raise ConfigError(f"no plan on {', '.join(f'{n:,}' for n in systems)} GPUs trains "
                      f"{tokens_words(procurement_tokens(o))} "
                      f"{limit_words(deadline_days, budget_usd)}{near}; accepted: {accepted}")


def procurement_tokens(o: dict[str, Any]) -> float:
    """``--tokens`` read as every command reads it [tokens]."""
    from fsdpsim.drivers.procurement import read_run_options

    return read_run_options(o).tokens


def register(cli: click.Group) -> None:
    """Add ``search`` to the command group."""
    @cli.command("search")
    @search_options
    @limit_options
    @click.pass_context
    def search_cmd(ctx: click.Context, fmt: str, **o: Any) -> None:
        """Find the fastest parallel plans that fit (mesh, sharding, pipeline schedule,
        micro-batch, recompute), without profiling; print them, or the best as a torchtitan or
        Megatron-LM configuration."""
        from fsdpsim.drivers.search.export import megatron_args, torchtitan_toml
        from fsdpsim.drivers.search.results import predict_choice
        from fsdpsim.drivers.search.explain import plan_line

        if o["gpu"] is None and o["cluster"] is None:
            o["gpu"] = "h100"
        limits = limited_objective(ctx, o)
        spec, systems, training, results, ranking = run_search(ctx, o)
        price = search_price(ctx, o, next(iter(systems.values())))
        if any(x is not None for x in limits):
            ranking = within(spec, systems, training, ranking, o, price, *limits)
        best = ranking[0][0]
        if o["emit"] == "torchtitan":
            echo(torchtitan_toml(best, training), nl=False)
            return
        if o["emit"] == "megatron":
            echo(megatron_args(best, training), nl=False)
            return
        rows = []
        for c, n in ranking:
            p = predict_choice(spec, systems[n], c, training)
            rows.append((c, p))
        from fsdpsim.report.search_table import report_dict, report_table

        report = report_dict(spec, systems[results[-1][0]], training, o, results, rows,
                             ctx.obj.get("catalog_dirs", ()),
                             runs=[plan_run(p, systems[n], o, price) for (c, n), (_, p)
                                   in zip(ranking, rows)], limits=limits)
        constrained = o["fix"] or o["max_tp"] or o["max_pp"] or not o["mesh_orders"]
        if o["explain"] and constrained:  # what the user's constraints cost
            free = {**o, "fix": (), "max_tp": None, "max_pp": None, "mesh_orders": True}
            other = run_search(ctx, free)[4][0]
            report["without_constraints"] = {
                "plan": plan_line(other[0]), "num_gpus": other[1],
                "tokens_per_s": other[0].tokens_per_s,
                "gain": other[0].score / best.score - 1.0 if best.score > 0 else
                best.score / other[0].score - 1.0}
        if fmt == "json":
            echo(render.to_json(report))
        elif fmt == "csv":
            echo(render.csv_text(report["plans"]), nl=False)
        else:
            echo(report_table(report, rows, explain=o["explain"]))


__all__ = ["register", "run_search"]
