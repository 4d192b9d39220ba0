"""``fsdpsim plot KIND``: a figure of sweep rows, read from a file or swept from the options.

Parse, call, render: the rows come from :func:`fsdpsim.report.plots.data.read_rows` or from the
sweep (:func:`fsdpsim.cli.sweep.run`), the figure from :mod:`fsdpsim.report.plots.sweep`.
"""

from __future__ import annotations

from typing import Any

import click

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.cli.sweep import grid_options, merge_options, run
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.numbers import TOKENS_PER_GPU, Rule, option_type
from fsdpsim.util.output import echo
from fsdpsim.drivers.sweep.grid import build_grid

KINDS = {
    "throughput": "tokens/s per GPU (or MFU) against model size, a line per hardware option",
    "memory": "largest model (or longest sequence) that fits against GPU count, per GPU",
    "bandwidth": "MFU over inter-node bandwidth x tokens per GPU, hide-comm threshold, clusters",
    "pareto": "cost per million tokens against time to train, Pareto front",
    "breakdown": "stacked parts of the step time per configuration",
}
#: Plot options and the kinds they apply to.
_APPLIES = {"metric": "throughput", "by": "throughput", "ceiling": "memory",
            "tokens_per_gpu": "bandwidth", "mark_clusters": "bandwidth",
            "normalize": "breakdown", "per": "breakdown"}


def _check_kind(kind: str) -> str:
    name = kind.strip().lower()
    if name not in KINDS:
        raise ConfigError(f"unknown plot kind {kind!r}; accepted: {', '.join(KINDS)}")
    return name


def _figure(kind: str, rows, plot: dict[str, Any], catalog):
    from fsdpsim.report.plots import sweep as plots

    if kind == "throughput":
        return plots.throughput_vs_model_size(rows, metric=plot["metric"] or
                                              "tokens_per_s_per_gpu", by=plot["by"] or "system")
    if kind == "memory":
        return plots.memory_ceiling(rows, kind=(plot["ceiling"] or "model-size"))
    if kind == "bandwidth":
        clusters = plot["mark_clusters"]
        kwargs = {} if clusters is None else {
            "clusters": tuple(c.strip() for c in clusters.split(",") if c.strip())}
        return plots.bandwidth_map(rows, tokens_per_gpu=plot["tokens_per_gpu"],
                                   catalog=catalog, **kwargs)
    if kind == "pareto":
        return plots.procurement_pareto(rows)
    return plots.step_breakdown(rows, normalize=bool(plot["normalize"]),
                                per=plot["per"] or "token")


def register(cli: click.Group) -> None:
    @cli.command("plot")
    @click.argument("kind", metavar="KIND")
    @click.option("--input", "-i", "input_path", type=click.Path(dir_okay=False), default=None,
                  help="Rows of `fsdpsim sweep` (.csv, .json or .parquet) instead of sweeping.")
    @click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
                  help="Figure file: .png, .svg or .pdf.")
    @click.option("--dpi", type=option_type(Rule(50, 600, whole=True)), default=120,
                  show_default=True,
                  help="Resolution of a PNG.")
    @click.option("--metric", type=click.Choice(("tokens_per_s_per_gpu", "mfu")), default=None,
                  help="throughput: the y axis (default tokens_per_s_per_gpu).")
    @click.option("--by", default=None,
                  help="throughput: one line per value of this column (default system).")
    @click.option("--ceiling", type=click.Choice(("model-size", "seq-len")), default=None,
                  help="memory: largest model (default) or longest sequence.")
    @click.option("--tokens-per-gpu", type=option_type(TOKENS_PER_GPU), default=None,
                  help="bandwidth: tokens per GPU at which clusters are marked, k = 1,024 as "
                       "for sequence lengths (default: the best MFU at the highest bandwidth).")
    @click.option("--mark-clusters", default=None,
                  help="bandwidth: catalog nodes or clusters to mark (comma-separated; "
                       "'' for none).")
    @click.option("--normalize/--no-normalize", default=None,
                  help="breakdown: shares of the step time instead of times.")
    @click.option("--per", type=click.Choice(("token", "step")), default=None,
                  help="breakdown: GPU time per token (default: each part x GPUs / tokens "
                       "per step, so rows of other micro-batches or batches compare like for "
                       "like) or time per step.")
    @grid_options
    @click.pass_context
    def plot_cmd(ctx: click.Context, kind: str, input_path: str | None, output: str, dpi: int,
                 grid_file: str | None, **options: Any) -> None:
        """Draw a figure of sweep rows: KIND is throughput, memory, bandwidth, pareto or
        breakdown.

        The rows come from --input (a file written by `fsdpsim sweep`) or from a sweep of the
        grid options given here, over the figure's defaults
        (fsdpsim.report.plots.data.DEFAULT_OPTIONS). Examples:

        \b
          fsdpsim plot throughput --model-sizes 1b..1t --gpu a100,h100,b200 --num-gpus 512 -o t.png
          fsdpsim sweep --model llama3-70b --gpu h100 --num-gpus 64..1024 --tokens 1t \\
              --best --format csv -o rows.csv
          fsdpsim plot pareto --input rows.csv -o pareto.svg
        """
        from fsdpsim.report.plots import data as plot_data
        from fsdpsim.report.plots import sweep as plots

        kind = _check_kind(kind)
        plots.check_path(output)
        plot = {name: options.pop(name) for name in _APPLIES}
        for name, value in plot.items():
            if value is not None and _APPLIES[name] != kind:
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} applies to the {_APPLIES[name]} plot, not {kind}")
        cat = load_catalog(ctx.obj.get("catalog_dirs", ()))
        sweep = merge_options(grid_file, options)
        if input_path is not None:
            if sweep:
                raise ConfigError(f"give --input or sweep options, not both (got --input and "
                                  f"--{', --'.join(sorted(sweep))})")
            rows = plot_data.read_rows(input_path)
            source = f"{len(rows):,} rows of {input_path}"
        else:
            key = "memory-seq" if kind == "memory" and plot["ceiling"] == "seq-len" else kind
            rows = run(build_grid(cat, plot_data.merged_options(key, sweep)))
            source = f"a sweep of {len(rows):,} rows"
        fig = _figure(kind, rows, plot, cat)
        plots.save(fig, output, dpi=dpi)
        echo(f"fsdpsim plot: {kind} figure of {source} written to {output}")


__all__ = ["register", "KINDS"]
