"""``fsdpsim compare`` and ``fsdpsim report``: parse, call, render. The rows come from
:func:`fsdpsim.drivers.compare.compare` (search or predict, then procurement); the HTML from
:mod:`fsdpsim.report.html`."""

from __future__ import annotations

from typing import Any

import click

from fsdpsim.report import render
from fsdpsim.cli.knobs import knob_options
from fsdpsim.cli.predict import kernel_options
from fsdpsim.cli.procurement import run_options
from fsdpsim.report.compare_table import compare_text, notes, report_data
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.output import cannot_write, check_output_path, echo

#: Width of the header and notes of the table view [characters].
def compare_options(f):
    """The options ``compare`` and ``report`` share."""
    opts = [
        click.option("--model", default="llama3-8b", show_default=True,
                     help="Preset ids, ladder ids or config.json paths (comma-separated)."),
        click.option("--gpu", default=None,
                     help="Accelerator ids or aliases, comma-separated: h100,h200,b200,mi300x."),
        click.option("--cluster", default=None,
                     help="Node or cluster ids, comma-separated (rows beside the --gpu ones)."),
        click.option("--num-gpus", default="64", show_default=True,
                     help="GPUs per row, or a list (64,512) or range (64..1024): a row each."),
        *knob_options("compare", "gpus_per_node", "network", "inter_node_gbps_per_gpu",
                      "power_cap_w", "placement", "seq_len", "global_batch", "precision",
                      "optimizer"),
        *kernel_options("compare"),
        *knob_options("compare", "framework"),
        click.option("--plan", "plan_kind", type=click.Choice(("search", "fsdp")),
                     default="search", show_default=True,
                     help="search: the best plan `fsdpsim search` finds per row; fsdp: the FSDP "
                          "plan `fsdpsim predict` picks (full sharding, fastest micro-batch and "
                          "recompute that fit)."),
        click.option("--objective", type=click.Choice(("throughput", "cost", "energy",
                                                       "time-to-train")),
                     default="throughput", show_default=True,
                     help="What the search ranks plans by (--plan search)."),
        *knob_options("compare", "price"),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return run_options(f)


def _items(text: str | None, what: str) -> list[str]:
    """The comma-separated items of an option, none if it is not given (an empty item is an
    error: :func:`fsdpsim.drivers.sweep.values.split_values`)."""
    from fsdpsim.drivers.sweep.values import split_values

    return [] if text is None else split_values(text, what)


def run_compare(ctx: click.Context, o: dict[str, Any]):
    """Resolve the options and compute the rows: (rows, training, run assumptions)."""
    from fsdpsim.drivers import procurement
    from fsdpsim.hardware.catalog import load_catalog
    from fsdpsim.cli.defaults import auto_int
    from fsdpsim.cli.predict import build_system, kernel_knobs, model_at
    from fsdpsim.drivers.compare import MAX_ROWS, Case, compare
    from fsdpsim.drivers.sweep.values import parse_counts, parse_prices, price_of
    from fsdpsim.plan.parallel import TrainingConfig
    from fsdpsim.drivers.search.space import SearchSpace

    hardware = [("gpu", g) for g in _items(o["gpu"], "--gpu")] + \
        [("cluster", c) for c in _items(o["cluster"], "--cluster")]
    if not hardware:
        raise ConfigError("give the hardware to compare: --gpu h100,h200,b200,mi300x and/or "
                          "--cluster ID,ID (fsdpsim catalog list)")
    counts = parse_counts(o["num_gpus"], "--num-gpus")
    models = _items(o["model"], "--model") or ["llama3-8b"]
    if len(hardware) * len(counts) * len(models) > MAX_ROWS:
        raise ConfigError(f"--gpu/--cluster x --num-gpus x --model make "
                          f"{len(hardware) * len(counts) * len(models)} rows; accepted: at most "
                          f"{MAX_ROWS}")
    seq = auto_int(o["seq_len"], "--seq-len") or 4096
    # no --global-batch: each row's plan trains the default batch moved to its dp
    batch = auto_int(o["global_batch"], "--global-batch") if o["global_batch"] else None
    training = TrainingConfig(seq_len=seq, global_batch=batch,
                              precision=o["precision"] or "bf16", optimizer=o["optimizer"],
                              **kernel_knobs(o))
    run = procurement.read_run_options(o)
    cat = load_catalog(ctx.obj.get("catalog_dirs", ()))
    prices = parse_prices(o["price"], cat) if o["price"] else {}
    specs = [model_at(name, seq) for name in models]
    training.check_model(is_moe=any(spec.is_moe for spec in specs))  # rows say it per model
    cases = []
    for name, spec in zip(models, specs):
        for kind, ident in hardware:
            for n in counts:
                system = build_system(ctx, **{**o, "gpu": None, "cluster": None, kind: ident,
                                              "num_gpus": n})
                own = (None if o["precision"] is not None
                       else system.accelerator.default_precision)
                cases.append(Case(spec, ident, system, n,
                                  price_of(prices, system.accelerator.id), kind=kind,
                                  model_id=name,
                                  precision=None if own == training.precision else own))
    space = SearchSpace(framework=o["framework"])
    rows = compare(cases, training, plan=o["plan_kind"], run=run, space=space,
                   objective=o["objective"])
    return rows, training, run


def register(cli: click.Group) -> None:
    @cli.command("compare")
    @compare_options
    @click.option("--format", "fmt", type=click.Choice(render.FORMATS), default="table",
                  show_default=True, help="Output format.")
    @click.pass_context
    def compare_cmd(ctx: click.Context, fmt: str, **o: Any) -> None:
        """Compare GPUs, nodes or clusters (and models) for one model at one global batch:
        throughput, MFU, memory, bottleneck, days, cost and energy to train --tokens, the best
        of each column marked.

        \b
          fsdpsim compare --model llama3-8b --gpu h100,h200,b200,mi300x --num-gpus 64 --tokens 1t
        """
        rows, training, run = run_compare(ctx, o)
        data = report_data(rows, training, run, o["plan_kind"], o,
                           ctx.obj.get("catalog_dirs", ()))
        if fmt == "json":
            echo(render.to_json({k: v for k, v in data.items() if k != "best_index"}))
        elif fmt == "csv":
            echo(render.csv_text(data["rows"]), nl=False)
        else:
            echo(compare_text(data, training, run))

    @cli.command("report")
    @compare_options
    @click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
                  help="HTML file to write.")
    @click.pass_context
    def report_cmd(ctx: click.Context, output: str, **o: Any) -> None:
        """Write one self-contained HTML report of a comparison (as `fsdpsim compare`): the
        table, throughput/cost/memory/bandwidth figures as inline SVG, and the assumptions and
        ranges, to read offline and forward."""
        from pathlib import Path

        from fsdpsim.report.html import report_html

        path = Path(output)
        if path.suffix.lower() not in (".html", ".htm"):
            raise ConfigError(f"--output {output!r}: give an .html file")
        check_output_path(output)
        rows, training, run = run_compare(ctx, o)
        data = report_data(rows, training, run, o["plan_kind"], o,
                           ctx.obj.get("catalog_dirs", ()))
        text = report_html(rows, data, training, run, notes(data["rows"], run, training))
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise cannot_write(output, exc) from None
        echo(f"fsdpsim report: {len(rows)} rows, {text.count('<svg')} figures written to "
             f"{output}")


__all__ = ["register", "run_compare"]
