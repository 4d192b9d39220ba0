"""``fsdpsim validate`` and ``fsdpsim calibrate``: measured runs against the model."""

from __future__ import annotations

from pathlib import Path

import click

from fsdpsim.report import render
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.measured.stats import UNFIT_SUBSETS, fit_rows  # noqa: F401 (re-exported)
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.numbers import Rule, option_type
from fsdpsim.util.output import cannot_write, check_output_path, echo

#: Groupings printed by default (each only when it splits the rows into two or more groups).
DEFAULT_BY = ("framework", "subset", "generation")
BY_TITLES = {"framework": "by framework", "subset": "by subset",
             "source": "by source", "gpu": "by GPU",
             "generation": "by GPU generation x precision"}
NAME_WIDTH = 44
#: Where ``calibrate --local`` writes its catalog entry unless ``--output`` says.
LOCAL_DEFAULT_OUTPUT = "./fsdpsim-local/local.toml"


def note_unrecognised(frame) -> None:
    """One line on stderr naming the ``framework`` texts of a published-runs file that name no
    framework fsdpsim reads (:func:`fsdpsim.measured.published.conventions.unrecognised`) and
    how many rows each has: those rows are modelled with the default profile (fsdp2), which a
    misspelling should not hide. Nothing on stdout, the run goes on."""
    from fsdpsim.measured.published.conventions import FRAMEWORK_CONVENTIONS, unrecognised

    if "source_key" not in frame.columns or "framework" not in frame.columns:
        return  # the fsdpsim layout states its profile (column recipe)
    counts = frame["framework"].fillna("").astype(str).value_counts(sort=False)
    counts = counts[[unrecognised(text) for text in counts.index]]  # each text once
    if counts.empty:
        return
    known = ", ".join(c["name"] for _, c in FRAMEWORK_CONVENTIONS)
    named = "; ".join(f"{text!r} ({n} row{'s' * (n != 1)})" for text, n in counts.items())
    click.echo(f"fsdpsim: note: framework text not recognised, modelled as PyTorch FSDP2 "
               f"(profile fsdp2): {named}; recognised: {known}, or PyTorch FSDP/DDP",
               err=True)


def _summary_line(name: str, s: dict) -> str:
    line = (f"{name}: {s['rows']} rows, MAPE {100 * s['mape']:.1f} %, median "
            f"{100 * s['median_ape']:.1f} %, worst {100 * s['worst_ape']:.1f} %, "
            f"bias {100 * s['bias']:+.1f} %")
    if "coverage" in s:
        line += "\n" + coverage_line(s)
    return line


def coverage_line(s: dict) -> str:
    """The coverage summary line: how often the 90 % range holds the measured value, over all
    rows and over the out-of-sample ones (:mod:`fsdpsim.measured.ranges`), and its median
    relative width."""
    oos = (f"{100 * s['coverage_out_of_sample']:.0f} % of {s['rows_out_of_sample']} "
           "out-of-sample" if s["rows_out_of_sample"] else "none out-of-sample")
    return (f"90 % range holds the measurement for {100 * s['coverage']:.0f} % of rows, "
            f"{oos}; median width {100 * s['median_width']:.0f} %")


def _group_table(title: str, groups: dict[str, dict]) -> list[str]:
    """One grouping as lines of at most ~90 characters: a header, then a row per group."""
    ranged = any("coverage" in s for s in groups.values())
    lines = [f"{title:<{NAME_WIDTH + 2}} {'rows':>5} {'MAPE':>8} {'median':>8} {'worst':>8} "
             f"{'bias':>8}" + (f" {'in 90 %':>7}" if ranged else "")]
    for name, s in groups.items():
        short = name if len(name) <= NAME_WIDTH else name[:NAME_WIDTH - 1] + "…"
        lines.append(f"  {short:<{NAME_WIDTH}} {s['rows']:>5} {100 * s['mape']:>6.1f} % "
                     f"{100 * s['median_ape']:>6.1f} % {100 * s['worst_ape']:>6.1f} % "
                     f"{100 * s['bias']:>+6.1f} %"
                     + (f" {100 * s['coverage']:>5.0f} %" if "coverage" in s else ""))
    return lines


def _layout(row) -> str:
    """The plan of a row in a few characters: ``tp8 pp35 v3 dp9 zero1`` style."""
    parts = [f"{name}{int(row[name])}" for name in ("tp", "pp", "cp")
             if name in row and row[name] == row[name] and int(row[name]) > 1]
    vpp = row.get("vpp")
    if parts and vpp == vpp and vpp not in (None, "") and int(vpp) > 1:
        parts.append(f"v{int(vpp)}")
    model_parallel = 1
    for name in ("tp", "pp", "cp"):
        if name in row and row[name] == row[name]:
            model_parallel *= int(row[name])
    dp = int(row["n_gpus"]) // model_parallel
    zero = {"none": "ddp", "optimizer": "zero1", "grad_op": "zero2", "full": "zero3",
            "hybrid": "hsdp"}.get(str(row.get("sharding")), str(row.get("sharding")))
    return " ".join(parts + [f"dp{dp}", zero])


#: The per-row table's columns, most telling first (:func:`render.narrow_table` leaves columns
#: out from the right when the table is wider than the screen; ``--format csv`` keeps them all).
ROW_HEADERS = {"id": "id", "gpu": "gpu", "n_gpus": "gpus",
               "tokens_per_s_per_gpu": "measured", "predicted_tokens_per_s_per_gpu": "predicted",
               "error": "error", "range": "90 % range", "layout": "layout", "model": "model",
               "bottleneck": "bottleneck",
               "seq_len": "seq", "micro_batch": "mb", "grad_accum": "accum",
               "recompute": "recompute", "knobs": "knobs"}


def _rows_table(frame) -> str:
    """Every row: measured and predicted tokens/s per GPU, the error and the 90 % range ("*"
    where it misses the measurement), within 100 columns."""
    frame = frame.assign(layout=[_layout(row) for _, row in frame.iterrows()])
    if "inside" in frame.columns:  # the 90 % range, "*" where it misses the measurement
        frame = frame.assign(range=[f"{lo:,.0f} .. {hi:,.0f}{'' if ok else ' *'}" for lo, hi, ok in
                                    zip(frame["predicted_low"], frame["predicted_high"],
                                        frame["inside"])])
    columns = [c for c in ROW_HEADERS if c in frame.columns and c != "knobs"]
    if "knobs" in frame.columns and (frame["knobs"] != "").any():
        columns.append("knobs")
    view = frame[columns].copy()
    view["error"] = [f"{100 * e:+.1f} %" for e in view["error"]]
    for name in ("tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu"):
        view[name] = [f"{v:,.0f}" if v == v else "" for v in view[name]]
    if "bottleneck" in view.columns:
        view["bottleneck"] = [str(b).replace("_", " ") for b in view["bottleneck"]]
    rows = view.to_dict("records")
    return ("tokens/s per GPU, measured and predicted\n"
            + render.narrow_table(rows, ROW_HEADERS, cell=18))


def _skipped_lines(skipped, total: int) -> list[str]:
    """The skip reasons, most frequent first, wrapped to 100 characters."""
    import textwrap

    lines = [f"skipped {len(skipped)} of {total} rows:"]
    for reason, n in skipped["skip"].value_counts().items():
        lines += textwrap.wrap(f"{n:>4}  {reason}", 100, subsequent_indent=" " * 6)
    return lines


def rows_to_fit(every, framework: str, gpus, catalog, n_factors: int, source: str = ""):
    """The rows ``calibrate`` may fit (``--framework``, then :func:`fit_rows`; :func:`fit` keeps
    those on ``--gpu`` that are modelled, not skipped). Too few left: one error naming the
    filter that left them (an unknown framework with the file's frameworks; else each
    filter's count)."""
    from fsdpsim.measured.rows import on_gpus
    from fsdpsim.measured.stats import by_framework

    frame = by_framework(every, framework)
    names = (sorted({str(n) for n in every["framework"].fillna("")} - {""})
             if "framework" in every.columns else ["PyTorch FSDP"])
    if frame.empty:
        accepted = ", ".join(repr(n) for n in names)
        raise ConfigError(f"--framework {framework!r} matches no framework of "
                          f"{source or 'the file'}; accepted: part of one of {accepted}, or '' "
                          "for every row")
    fit = fit_rows(frame)
    ids = {catalog.accelerator(g).id for g in gpus}
    on_gpu = fit[on_gpus(fit, catalog, gpus)]
    usable = on_gpu[on_gpu["skip"] == ""]
    need = n_factors + 2
    if len(usable) < need:
        stages = [(f"{len(every)} row{'s' * (len(every) != 1)} in {source or 'the file'}",
                   len(every)),
                  (f"{len(frame)} with --framework {framework!r}", len(frame)),
                  (f"{len(fit)} of them fittable (no {'/'.join(UNFIT_SUBSETS)} subset, "
                   "block-scaled format or MoE model)", len(fit)),
                  (f"{len(on_gpu)} on --gpu {', '.join(sorted(ids))}", len(on_gpu)),
                  (f"{len(usable)} modelled (not skipped)", len(usable))]
        shown = []
        for text, count in stages:
            shown.append(text)
            if count == 0:  # the filter that left nothing
                break
        gpus_there = ", ".join(sorted({str(g) for g in fit["gpu"].dropna()})) or "none"
        raise ConfigError(f"too few rows to fit {n_factors} factors (need {need}): "
                          f"{'; '.join(shown)}; the fittable rows' GPUs: {gpus_there}")
    return fit


def register(cli: click.Group) -> None:
    """Add ``validate`` and ``calibrate`` to the command group."""
    cli.add_command(validate_cmd)
    cli.add_command(calibrate_cmd)


@click.command("validate")
@click.argument("measurements", type=click.Path(dir_okay=False))
@click.option("--gpu", "gpus", multiple=True, help="Only rows on these accelerators.")
@click.option("--framework", default=None,
              help="Only rows whose framework contains this text (e.g. fsdp, deepspeed).")
@click.option("--by", "by", multiple=True, type=click.Choice(tuple(BY_TITLES)),
              help="Summaries per group (repeatable): framework, subset, source, gpu, or "
                   "generation (GPU generation x precision, core rows only); default: "
                   "framework, subset and generation, each where it splits the rows.")
@click.option("--format", "fmt", type=click.Choice(render.FORMATS), default="table",
              show_default=True)
@click.pass_context
def validate_cmd(ctx: click.Context, measurements: str, gpus: tuple[str, ...],
                 framework: str | None, by: tuple[str, ...], fmt: str) -> None:
    """Predict every run of a measurements CSV and report the error of tokens/s per GPU."""
    from fsdpsim.measured.stats import summarise, summarise_by, summarise_groups
    from fsdpsim.measured.validate import predict_measurements

    cat = load_catalog(ctx.obj.get("catalog_dirs", ()))
    frame = _selected_rows(measurements, cat, gpus, framework)
    skipped = frame[frame["skip"] != ""]
    result = predict_measurements(frame, cat, intervals=True, measurements=measurements)
    if fmt == "csv":  # the rows only
        from fsdpsim.report.frame_csv import frame_csv

        echo(frame_csv(result), nl=False)
        return
    summary = summarise(result)
    groupings = {name: summarise_by(result, name) for name in (by or DEFAULT_BY)}
    if fmt == "json":
        echo(render.to_json({"summary": summary, "by_framework": summarise_groups(result),
                             "by": groupings,
                             "skipped": skipped[["id", "skip"]].to_dict("records"),
                             "rows": result.to_dict("records")}))
        return
    echo(_rows_table(result.sort_values("error")))
    echo("")
    if len(skipped):
        echo("\n".join(_skipped_lines(skipped, len(frame))))
    for name, found in groupings.items():
        if found and (by or len(found) > 1):
            core = "subset" in result.columns and (result["subset"] == "core").any()
            title = BY_TITLES[name] + (" (core rows)" if name == "generation" and core
                                       else "")
            echo("\n".join(_group_table(title, found)))
    echo(_summary_line("tokens/s per GPU", summary))


def _selected_rows(measurements: str, cat, gpus: tuple[str, ...], framework: str | None):
    """The rows of the measurements file ``validate`` predicts (``--framework``, ``--gpu``);
    none left is one error naming the filters and what the file has."""
    from fsdpsim.measured.rows import on_gpus
    from fsdpsim.measured.stats import by_framework
    from fsdpsim.measured.validate import load_measurements

    every = load_measurements(measurements, cat)
    note_unrecognised(every)
    frame = by_framework(every, framework)
    if gpus:
        frame = frame[on_gpus(frame, cat, gpus)]
    if frame.empty:
        names = (sorted({str(n) for n in every["framework"].fillna("")})
                 if "framework" in every else [])
        raise ConfigError(
            "no row of the file matches " + " and ".join(
                f"{flag} {value!r}" for flag, value in (("--framework", framework),
                                                        ("--gpu", ",".join(gpus)))
                if value) + "; the file has GPUs "
            + ", ".join(sorted({str(g) for g in every["gpu"].dropna()}))
            + (f" and frameworks {', '.join(repr(n) for n in names)}" if names else ""))
    return frame


@click.command("calibrate")
@click.option("--measurements", type=click.Path(dir_okay=False), default=None,
              help="Measured runs (fsdpsim schema or the published calibration CSV).")
@click.option("--gpu", "gpus", multiple=True,
              help="Accelerator(s) sharing one set of factors (repeatable).")
@click.option("--framework", default="fsdp", show_default=True,
              help="Fit only rows whose framework contains this text ('' for all rows).")
@click.option("--factor", "factors", multiple=True,
              help="Factors to fit (repeatable); default: the matmul, attention, HBM and "
                   "network ones.")
@click.option("--local", "local", is_flag=True, default=False,
              help="Measure this machine with torch micro-benchmarks (gloo ranks, about "
                   "30 s) and write a catalog entry for it (local-cpu, local-node) instead "
                   "of fitting measured runs.")
@click.option("--ranks", type=option_type(Rule(2, 64, whole=True)), default=None,
              help="With --local: processes measured at once, the node's GPUs per node "
                   "[default: 2].")
@click.option("--quick", is_flag=True, default=False,
              help="With --local: a reduced budget (about 15 s), noisier.")
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Write the catalog overlay here (a .toml inside a folder for --catalog); "
                   f"with --local the default is {LOCAL_DEFAULT_OUTPUT}.")
@click.option("--where", "where", default=None,
              help="Only rows matching this condition on the measurement columns (pandas "
                   "query syntax, e.g. 'n_gpus == 8 and pp == 1 and tp <= 2').")
@click.option("--loso", is_flag=True, default=False,
              help="Leave one source out: per source_key, fit without it and report its "
                   "error before/after; flags a fit that worsens the held-out source more "
                   "than it improves its own rows. Writes no overlay.")
@click.pass_context
def calibrate_cmd(ctx: click.Context, measurements: str | None, gpus: tuple[str, ...],
                  framework: str, factors: tuple[str, ...], local: bool,
                  ranks: int | None, quick: bool, output: str | None,
                  where: str | None, loso: bool) -> None:
    """Fit the physical efficiency factors of one GPU type to measured runs, or measure
    this machine (--local)."""
    if local:
        given = [name for name, value in (("--measurements", measurements), ("--gpu", gpus),
                                          ("--factor", factors), ("--where", where),
                                          ("--loso", loso)) if value]
        if given:
            them = "it" if len(given) == 1 else "them"
            raise ConfigError(f"calibrate --local measures this machine and takes no "
                              f"{', '.join(given)}; drop {them}, or drop --local to fit "
                              "measured runs")
        _calibrate_local(ranks or 2, quick, output or LOCAL_DEFAULT_OUTPUT)
        return
    check_output_path(output, make_parents=True)
    if ranks is not None or quick:
        raise ConfigError("--ranks and --quick only apply to calibrate --local")
    if not measurements or not gpus:
        missing = " and ".join(name for name, value in (("--measurements CSV", measurements),
                                                        ("--gpu ID", gpus)) if not value)
        raise ConfigError(f"calibrate needs {missing} (fit factors to measured runs), or "
                          "--local (measure this machine)")
    from fsdpsim.measured.calibrate import DEFAULT_FACTORS, fit
    from fsdpsim.measured.validate import load_measurements

    cat = load_catalog(ctx.obj.get("catalog_dirs", ()))
    every = load_measurements(measurements, cat)
    note_unrecognised(every)
    if where:
        every = rows_where(every, where)
    frame = rows_to_fit(every, framework, gpus, cat, len(factors or DEFAULT_FACTORS),
                        measurements)
    if loso:
        from fsdpsim.measured.loso import leave_one_source_out, report_lines

        if output:
            raise ConfigError("--loso reports and writes no overlay; drop --output")
        echo("\n".join(report_lines(leave_one_source_out(frame, cat, gpus,
                                                         factors or DEFAULT_FACTORS))))
        return
    result = fit(frame, cat, gpus, factors or DEFAULT_FACTORS)
    overlay = result.overlay_toml(Path(measurements).name)
    if output:  # written before anything is printed: a failure leaves stdout empty
        _write(output, overlay)
    echo("\n".join(_fit_lines(result, output, overlay)))


def _fit_lines(result, output: str | None, overlay: str) -> list[str]:
    """What ``calibrate`` prints of a fit: the error before and after (and cross-validated),
    the out-of-sample interval, each factor (flagged at its bound), the factors not fitted,
    then the overlay (or where it was written)."""
    from fsdpsim.measured.calibrate import FACTORS

    lines = [_summary_line("before", result.before), _summary_line("after ", result.after)]
    if result.cross_validated:
        lines.append(_summary_line("5-fold cross-validated", result.cross_validated))
    lo, hi = result.interval
    lines.append(f"  measured/predicted, 5-95 % out of sample: {lo:.3f} .. {hi:.3f}")
    for name, value in result.values.items():
        key, scale, (lo, hi) = FACTORS[name]
        at_bound = " (at its bound)" if min(value - lo, hi - value) <= 1e-6 * (hi - lo) else ""
        lines.append(f"  {key:<22} {value * scale:.4g}{at_bound}")
    lines += [f"  not fitted: {name}: {why}" for name, why in result.refused.items()]
    lines.append(f"wrote {output}; use it with --catalog {Path(output).parent}" if output
                 else "\n" + overlay)
    return lines


def rows_where(frame, condition: str):
    """The rows of ``frame`` for which ``condition`` (pandas ``DataFrame.query`` syntax on the
    measurement columns) holds; a condition pandas cannot evaluate, or one that keeps no row,
    is one clear error."""
    try:
        kept = frame.query(condition)
    except Exception as exc:  # pandas raises many types for a malformed expression
        raise ConfigError(f"--where {condition!r} cannot be evaluated on the measurement "
                          f"columns ({type(exc).__name__}: {str(exc).splitlines()[0][:120]}); "
                          "accepted: a condition such as 'n_gpus == 8 and tp <= 2'") from None
    if kept.empty:
        raise ConfigError(f"--where {condition!r} keeps none of the {len(frame)} rows")
    return kept


def _write(output: str, text: str) -> None:
    path = Path(output)
    if path.is_dir():
        raise ConfigError(f"--output {output!r} is a folder; give a file name such as "
                          f"{path / 'local.toml'}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise cannot_write(output, exc) from None


def _calibrate_local(ranks: int, quick: bool, output: str) -> None:
    """``calibrate --local``: measure, write the entry, check that the catalog loads it."""
    if not output.endswith(".toml"):
        raise ConfigError(f"--output {output!r} must end in .toml (catalog folders are read for "
                          "*.toml files)")
    check_output_path(output, make_parents=True)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ConfigError("calibrate --local needs torch: pip install 'fsdpsim[torch]'") from None
    from fsdpsim.measured.harness import local_bench
    from fsdpsim.measured.harness.fsdp_runs import RunError

    cfg = (local_bench.BenchConfig.quick(ranks) if quick else local_bench.BenchConfig(ranks=ranks))
    echo(f"measuring this machine on {ranks} gloo ranks"
         f"{' (quick budget)' if quick else ''} ...")
    try:
        result = local_bench.measure_local(cfg)
    except RunError as exc:
        last = [line for line in str(exc).strip().splitlines() if line.strip()][-1]
        raise ConfigError(f"calibrate --local: the benchmark ranks failed: "
                          f"{last.strip()}") from None
    for line in result.summary_lines():
        echo(line)
    _write(output, local_bench.catalog_toml(result))
    folder = Path(output).parent
    problems = local_bench.out_of_range(local_bench.catalog_entries(result))
    if problems:
        raise ConfigError(f"wrote {output}, but fsdpsim's catalog ranges refuse "
                          f"{len(problems)} measured value(s): {'; '.join(problems)}")
    try:
        load_catalog([folder], use_env=False)
    except ConfigError as exc:
        raise ConfigError(f"wrote {output}, but the catalog does not load it: {exc}") from None
    echo(f"wrote {output}; use it with: fsdpsim --catalog {folder} predict --cluster "
               f"{local_bench.NODE_ID} --num-gpus {ranks} --precision fp32 --eager-attention "
               "--model ...")
