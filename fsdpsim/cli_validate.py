"""``fsdpsim validate`` and ``fsdpsim calibrate``: measured runs against the model."""

from __future__ import annotations

from pathlib import Path

import click

from fsdpsim import render
from fsdpsim.catalog import load_catalog
from fsdpsim.errors import ConfigError

ROW_COLUMNS = ("id", "model", "gpu", "n_gpus", "seq_len", "micro_batch", "grad_accum",
               "recompute", "tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu", "error",
               "bottleneck")


def _summary_line(name: str, s: dict) -> str:
    return (f"{name}: {s['rows']} rows, MAPE {100 * s['mape']:.1f} %, median "
            f"{100 * s['median_ape']:.1f} %, worst {100 * s['worst_ape']:.1f} %, "
            f"bias {100 * s['bias']:+.1f} %")


def _rows_table(frame) -> str:
    view = frame[[c for c in ROW_COLUMNS if c in frame.columns]].copy()
    view["error"] = [f"{100 * e:+.1f} %" for e in view["error"]]
    view["predicted_tokens_per_s_per_gpu"] = view["predicted_tokens_per_s_per_gpu"].round(0)
    return view.to_string(index=False)


def register(cli: click.Group) -> None:
    @cli.command("validate")
    @click.argument("measurements", type=click.Path(dir_okay=False))
    @click.option("--gpu", "gpus", multiple=True, help="Only rows on these accelerators.")
    @click.option("--format", "fmt", type=click.Choice(render.FORMATS), default="table",
                  show_default=True)
    @click.pass_context
    def validate_cmd(ctx: click.Context, measurements: str, gpus: tuple[str, ...],
                     fmt: str) -> None:
        """Predict every run of a measurements CSV and report the error of tokens/s per GPU."""
        from fsdpsim.measurements import load_measurements, predict_measurements, summarise

        cat = load_catalog(ctx.obj.get("catalog_dirs", ()))
        frame = load_measurements(measurements)
        if gpus:
            ids = {cat.accelerator(g).id for g in gpus}
            frame = frame[frame["gpu"].isin(ids)]
        skipped = frame[frame["skip"] != ""]
        result = predict_measurements(frame, cat)
        summary = summarise(result)
        if fmt == "json":
            click.echo(render.to_json({"summary": summary,
                                       "skipped": skipped[["id", "skip"]].to_dict("records"),
                                       "rows": result.to_dict("records")}))
            return
        if fmt == "csv":
            click.echo(result.to_csv(index=False), nl=False)
            return
        click.echo(_rows_table(result.sort_values("error")))
        click.echo("")
        if len(skipped):
            reasons = skipped["skip"].value_counts()
            click.echo("skipped: " + "; ".join(f"{n} rows: {r}" for r, n in reasons.items()))
        click.echo(_summary_line("tokens/s per GPU", summary))

    @cli.command("calibrate")
    @click.option("--measurements", required=True, type=click.Path(dir_okay=False),
                  help="Measured runs (fsdpsim schema or the published calibration CSV).")
    @click.option("--gpu", "gpus", multiple=True, required=True,
                  help="Accelerator(s) sharing one set of factors (repeatable).")
    @click.option("--factor", "factors", multiple=True,
                  help="Factors to fit (repeatable); default: the matmul, attention, HBM and "
                       "network ones.")
    @click.option("--output", type=click.Path(dir_okay=False), default=None,
                  help="Write the catalog overlay here (a .toml inside a folder for --catalog).")
    @click.pass_context
    def calibrate_cmd(ctx: click.Context, measurements: str, gpus: tuple[str, ...],
                      factors: tuple[str, ...], output: str | None) -> None:
        """Fit the physical efficiency factors of one GPU type to measured runs."""
        from fsdpsim.calibration import DEFAULT_FACTORS, FACTORS, fit
        from fsdpsim.measurements import load_measurements

        cat = load_catalog(ctx.obj.get("catalog_dirs", ()))
        frame = load_measurements(measurements)
        result = fit(frame, cat, gpus, factors or DEFAULT_FACTORS)
        click.echo(_summary_line("before", result.before))
        click.echo(_summary_line("after ", result.after))
        if result.cross_validated:
            click.echo(_summary_line("5-fold cross-validated", result.cross_validated))
        lo, hi = result.interval
        click.echo(f"  measured/predicted, 5-95 % out of sample: {lo:.3f} .. {hi:.3f}")
        for name, value in result.values.items():
            key, scale, (lo, hi) = FACTORS[name]
            at_bound = " (at its bound)" if min(value - lo, hi - value) <= 1e-6 * (hi - lo) else ""
            click.echo(f"  {key:<22} {value * scale:.4g}{at_bound}")
        for name, why in result.refused.items():
            click.echo(f"  not fitted: {name}: {why}")
        overlay = result.overlay_toml(Path(measurements).name)
        if output:
            Path(output).parent.mkdir(parents=True, exist_ok=True)
            try:
                Path(output).write_text(overlay)
            except OSError as exc:
                raise ConfigError(f"cannot write {output}: {exc.strerror}") from None
            click.echo(f"wrote {output}; use it with --catalog {Path(output).parent}")
        else:
            click.echo("\n" + overlay)
