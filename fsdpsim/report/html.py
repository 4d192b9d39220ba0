"""``fsdpsim report``: one self-contained HTML file of a comparison, to read offline and forward.

Everything is inside the file: the figures as inline SVG (matplotlib's SVG writer, text as
``<text>`` so no glyph definitions clash between figures), a small stylesheet, no script, no
external address in any ``src`` or ``href``. The content is that of ``fsdpsim compare`` (the
table, the plans, the notes) plus the figures of :mod:`fsdpsim.report.plots.compare` (throughput,
cost, memory) and :mod:`fsdpsim.report.plots.sweep` (where the step goes, the cost/time Pareto
front, the bandwidth map of each GPU type), the assumptions (rent with source and date, PUE,
failures, checkpoints) and each row's 90 % prediction range.
"""

from __future__ import annotations

import datetime as _dt
import html
from typing import Any, Callable, Sequence

from fsdpsim.report.words import RANGE_CALIBRATED_WORDS
from fsdpsim.util.errors import ConfigError

#: Bandwidth maps drawn (one per GPU type of the comparison, in row order).
MAX_BANDWIDTH_MAPS = 4
#: Every other bandwidth of the default map: half the points, the same range.
_MAP_STRIDE = 2

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1100px; color: #222; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; } td.text, th.text { text-align: left; }
td.best { font-weight: bold; background: #e8f5e9; }
figure { margin: 1.5em 0; } figcaption { font-size: 0.9em; color: #555; }
figure svg { max-width: 100%; height: auto; }
.muted { color: #666; font-size: 0.9em; }
"""


def svg_text(fig) -> str:
    """A matplotlib figure as an ``<svg>`` element (no XML prolog), text as text."""
    import io

    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _table(rows: Sequence[dict[str, Any]], best: Callable[[int, str], bool] = lambda i, c: False,
           text_columns: Sequence[str] = ()) -> str:
    """An HTML table of ``rows`` (dicts of display strings); cells where ``best(row, column)``
    are marked."""
    if not rows:
        return "<p>(no rows)</p>"
    columns = list(dict.fromkeys(c for r in rows for c in r))

    def cls(c, extra=""):
        names = " ".join(n for n in ("text" if c in text_columns else "", extra) if n)
        return f' class="{names}"' if names else ""

    head = "".join(f"<th{cls(c)}>{html.escape(c)}</th>" for c in columns)
    body = []
    for i, r in enumerate(rows):
        cells = "".join(f"<td{cls(c, 'best' if best(i, c) else '')}>"
                        f"{html.escape(str(r.get(c, '')))}</td>" for c in columns)
        body.append(f"<tr>{cells}</tr>")
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(body) + \
        "\n</tbody>\n</table>"


def _figures(rows, data, training, run) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(id, caption, svg) of each figure, and a line for each figure that could not be drawn
    (no price, nothing fits)."""
    from fsdpsim.report.plots import data as plot_data
    from fsdpsim.report.plots import sweep as plots
    from fsdpsim.report.plots import compare as plots_compare
    from fsdpsim.drivers.compare import sweep_frame

    frame = sweep_frame(rows)
    out, missing = [], []

    def add(ident: str, caption: str, make: Callable[[], Any]) -> None:
        try:
            fig = make()
        except ConfigError as exc:
            missing.append(f"{caption}: not drawn ({exc})")
            return
        out.append((ident, caption, svg_text(fig)))

    tokens = run.tokens
    add("throughput", "Throughput per GPU of each row's plan, with the 90 % prediction range "
        "and the MFU.", lambda: plots_compare.throughput_bars(frame))
    add("cost", ("Cost and wall time to train the token budget, failures included."
                 if tokens is not None else "Cost and energy per million tokens."),
        lambda: plots_compare.cost_bars(frame, tokens))
    add("memory", "Peak memory per GPU of each row's plan against the GPU's capacity.",
        lambda: plots_compare.memory_bars(frame))
    add("breakdown", "Where the time of a training step goes, per row: GPU time per token "
        "(each part of the step × GPUs / tokens per step; the bars sum to 1 / tokens per "
        "second per GPU).",
        lambda: plots.step_breakdown(frame))
    if tokens is not None and len(frame) > 1:
        add("pareto", "Cost per million tokens against time to train: the Pareto front (no "
            "other row is both faster and cheaper).",
            lambda: plots.procurement_pareto(frame, tokens=tokens))
    seen: dict[str, Any] = {}
    for row in rows:
        gpu = row.case.system.accelerator.id
        if row.prediction is None or gpu in seen or len(seen) >= MAX_BANDWIDTH_MAPS:
            continue
        seen[gpu] = row
        try:
            caption, map_rows = _bandwidth_map(row, training, plot_data)
        except ConfigError as exc:
            missing.append(f"Network map of {gpu}: not drawn ({exc})")
            continue
        add(f"bandwidth-{gpu}", caption, lambda rows=map_rows: plots.bandwidth_map(rows))
    return out, missing


def _bandwidth_map(row, training, plot_data) -> tuple[str, Any]:
    """(caption, sweep rows) of one row's bandwidth map: the row's own mesh at every micro-batch and
    bandwidth (with the framework's pipeline split where the row states its own: the sweep
    takes no stated split), or the FSDP plan where the sweep cannot evaluate that mesh, said
    in the caption."""
    import re

    spec, n, system = row.case.spec, row.case.num_gpus, row.case.system
    plan, run_training = row.prediction.plan, row.prediction.training

    def rows(plan_options):
        return plot_data.bandwidth_map_rows(
            spec.name, system.accelerator.id, num_gpus=n, gpus_per_node=system.gpus_per_node,
            seq_len=training.seq_len, precision=run_training["precision"],
            bandwidths_gbps=plot_data.MAP_BANDWIDTHS_GBPS[::_MAP_STRIDE],
            plan_options=plan_options)

    mesh = re.sub(r", m=\d+", "", plan["line"].split(" · ")[0])
    frame = rows(plot_data.plan_sweep_options(plan, run_training))
    stated = any(plan.get(k) is not None
                 for k in ("pp_first_layers", "pp_last_layers", "pp_layers"))
    what = (f"the row's mesh ({mesh}; global batch {int(run_training['global_batch']):,}"
            + ("; the framework's layer split, not the stated one" if stated else "") + ")")
    if not frame["mfu"].notna().any():
        frame = rows(None)
        what = f"FSDP (the sweep behind this map cannot evaluate the row's mesh {mesh})"
    caption = (f"Network: MFU of {spec.name} on {n:,} {system.accelerator.id} with {what}, seq "
               f"{training.seq_len:,}, over inter-node bandwidth per GPU and tokens per GPU per "
               "micro-batch; the dashed line is the bandwidth that hides the data-parallel "
               "collectives.")
    return caption, frame


def _assumptions(data: dict[str, Any], run) -> str:
    from fsdpsim.report.procurement import duration, rate

    values = data["rows"]
    prices = {}
    for v in values:
        if "plan" not in v:
            continue
        prices.setdefault(v["hardware"], {
            "hardware": v["hardware"],
            "rent per GPU-hour": "-" if v["price_usd_per_gpu_hour"] is None
            else rate(v["price_usd_per_gpu_hour"]),
            "kind": v["price_kind"] or "unknown (give --price)",
            "source": v["price_source"] or "", "retrieved": v["price_retrieved"] or "",
            "board power W": "-" if v["board_power_w"] is None else f"{v['board_power_w']:,.0f}"})
    storage = ("0.122 GB/s per GPU (Llama 3: 2 TB/s for 16,384 GPUs)"
               if run.checkpoint_bytes_per_s is None
               else f"{run.checkpoint_bytes_per_s / 1e9:,.4g} GB/s for the job")
    general = [{"assumption": "PUE", "value": f"{run.pue:g}",
                "source": "Uptime Institute Global Data Center Survey 2024 (1.56) unless --pue"},
               {"assumption": "failures", "value": f"one per {run.gpu_mtbf_s / 3600:,.0f} "
                "GPU-hours", "source": "Llama 3: 419 interruptions in 54 days on 16,384 H100 "
                "(arXiv 2407.21783 §3.3.4) unless --gpu-mtbf-hours"},
               {"assumption": "restart", "value": duration(run.restart_s),
                "source": "arXiv 2602.00277 unless --restart-min"},
               {"assumption": "checkpoint write", "value": storage,
                "source": "Daly (2006) optimum interval; --checkpoint-gb-per-s"},
               {"assumption": "tokens to train", "value": "-" if run.tokens is None
                else f"{run.tokens:,.0f}", "source": "--tokens"}]
    ranges = [{"hardware": v["hardware"], "GPUs": f"{v['num_gpus']:,}",
               "tok/s/GPU": f"{v['tokens_per_s_per_gpu']:,.0f}",
               "90 % range": f"{v['tokens_per_s_per_gpu_low']:,.0f} .. "
                             f"{v['tokens_per_s_per_gpu_high']:,.0f}",
               "range calibrated": RANGE_CALIBRATED_WORDS[bool(v["calibrated"])]}
              for v in values if "plan" in v]
    text = ("source", "kind", "retrieved", "hardware", "assumption", "value")
    return "\n".join([
        "<h3>Rent and power</h3>", _table(list(prices.values()), text_columns=text),
        "<h3>Facility, failures, checkpoints</h3>", _table(general, text_columns=text),
        "<h3>Prediction ranges</h3>",
        "<p>fsdpsim's 90 % prediction interval of throughput per GPU (from its validation "
        "against published measurements; wider where the efficiency table the plan uses has no "
        "cross-validated range of its own).</p>",
        _table(ranges, text_columns=("hardware", "range calibrated"))])


def report_html(rows, data: dict[str, Any], training, run, notes: Sequence[str]) -> str:
    """The whole report as one HTML document (``data``: :func:`fsdpsim.cli.compare.report_data`
    of ``rows``)."""
    from fsdpsim import __version__
    from fsdpsim.report.compare_table import header, plan_rows, table_rows

    values, best = data["rows"], data["best_index"]
    table = table_rows(values, best, run.tokens)
    figures, missing = _figures(rows, data, training, run)
    title = header(values, training, run, data["query"]["plan"])
    parts = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>{html.escape(title.split(';')[0])}</title>", f"<style>{_STYLE}</style>",
        "</head>", "<body>",
        f"<h1>{html.escape(title.split(';')[0])}</h1>",
        f"<p>{html.escape('; '.join(title.split('; ')[1:]))}.</p>",
        f'<p class="muted">fsdpsim {html.escape(__version__)}, '
        f"{_dt.date.today().isoformat()}: an analytical model, not a measurement; see the "
        "ranges and assumptions below.</p>",
        '<h2 id="comparison">Comparison</h2>',
        _table([{k: v.rstrip("*") for k, v in r.items()} for r in table],
               best=lambda i, c: table[i].get(c, "").endswith("*"),
               text_columns=("model", "hardware", "bottleneck", "note")),
        '<p class="muted">Highlighted: the best value of each column among the rows that fit. '
        "mem GiB = peak / capacity per GPU.</p>",
        '<h2 id="plans">Plans and batch</h2>',
        _table(plan_rows(values), text_columns=("model", "hardware", "plan", "recompute")),
        '<p class="muted">Each row\'s plan, and the fsdpsim predict command that reproduces '
        "its numbers:</p>",
        _table([{"hardware": v["hardware"], "GPUs": f"{v['num_gpus']:,}", "plan": v["plan"],
                 "predict command": v.get("predict_command", "")}
                for v in values if "plan" in v],
               text_columns=("hardware", "plan", "predict command")),
        '<h2 id="figures">Figures</h2>',
    ]
    for ident, caption, svg in figures:
        parts.append(f'<figure id="fig-{html.escape(ident)}">\n{svg}\n'
                     f"<figcaption>{html.escape(caption)}</figcaption>\n</figure>")
    if missing:
        parts.append("<ul>" + "".join(f"<li>{html.escape(m)}</li>" for m in missing) + "</ul>")
    parts += ['<h2 id="assumptions">Assumptions and ranges</h2>', _assumptions(data, run),
              '<h2 id="notes">Notes</h2>',
              "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>",
              "</body>", "</html>"]
    return "\n".join(parts) + "\n"


__all__ = ["report_html", "svg_text", "MAX_BANDWIDTH_MAPS"]
