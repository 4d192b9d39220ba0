"""``fsdpsim sweep``: parse the grid, run :func:`fsdpsim.drivers.sweep.run.run_sweep`, write the
rows."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from contextlib import contextmanager
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import click

from fsdpsim.report import render
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.cli.knobs import knob_options
from fsdpsim.plan.knobs import KNOBS, PLAN_SWITCHES, SWEEP_KERNEL_KNOBS
from fsdpsim.cli.procurement import run_options
from fsdpsim.util.errors import ConfigError
from fsdpsim.drivers.sweep.grid import Grid, build_grid, describe, read_grid_file
from fsdpsim.util.output import (ROWS_PER_CHUNK, cannot_write, check_output_path, echo, is_stdout,
                                 write_chunks, write_parquet)
from fsdpsim.report.sweep_table import notes, records, table_text
from fsdpsim.report.frame_csv import frame_csv
from fsdpsim.report.frame_json import frame_json

if TYPE_CHECKING:  # pandas is imported where rows are made, not at start-up
    import pandas as pd

FORMATS = ("table", "csv", "json", "parquet")
#: Show a progress bar on stderr from this many candidate configurations (about a second).
PROGRESS_MIN_CANDIDATES = 500_000

_LIST = "comma-separated, repeatable"


def grid_options(f):
    """The grid options of ``fsdpsim sweep`` (everything but ``--format`` and ``--output``);
    ``fsdpsim plot`` takes the same ones."""
    k = lambda *names: knob_options("sweep", *names)  # noqa: E731
    opts = [
        click.option("--grid", "grid_file", type=click.Path(dir_okay=False), default=None,
                     help="TOML grid file; keys are these option names (the command line "
                          "wins where both give a value)."),
        click.option("--model", multiple=True, help=f"Preset ids or config.json paths ({_LIST})."),
        click.option("--model-sizes", multiple=True,
                     help="Llama-style ladder models of these sizes: 7b,70b or a 1-2-5 range "
                          "1b..1t (fsdpsim.model.ladder)."),
        click.option("--gpu", multiple=True, help=f"Accelerator ids or aliases ({_LIST}); "
                     "default h100."),
        click.option("--cluster", multiple=True, help=f"Node or cluster ids ({_LIST})."),
        *k("gpus_per_node", "network", "inter_node_gbps_per_gpu", "power_cap_w", "placement"),
        click.option("--num-gpus", multiple=True,
                     help="GPU counts: 8,64 or 8..4096 (powers of two between); default 8."),
        *k("seq_len", "micro_batch", "global_batch", "sharding", "zero", "recompute",
           "precision", "optimizer", "framework", "grad_sync", "shard_group_size",
           "keep_params_gathered"),
        click.option("--best/--no-best", default=None,
                     help="Leave every knob not given free (sharding, micro-batch, recompute) "
                          "and keep, per point, the fastest setting that fits, at a fixed "
                          "global batch (--global-batch, else about 4M tokens)."),
        click.option("--free-batch/--fixed-batch", default=None,
                     help="Let each row run one micro-batch per GPU (its global batch then "
                          "differs between rows) instead of the default global batch."),
        *k("price"),
        click.option("--ceilings/--no-ceilings", default=None,
                     help="Solve the largest micro-batch and sequence that fit for every row "
                          "(default on; off is about 3x faster on grids without free knobs)."),
        *k("tp", "pp", "cp", "vpp", "pp_schedule",
           *(name for name in PLAN_SWITCHES if "sweep" in KNOBS[name].commands),
           "recompute_layers", "ep", "etp", "moe_capacity_factor", "moe_imbalance",
           *SWEEP_KERNEL_KNOBS),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return run_options(f)


def sweep_options(f):
    """:func:`grid_options` plus ``--format`` and ``--output``."""
    f = click.option("--output", "-o", type=click.Path(allow_dash=True),
                     default=None, help="Write to FILE instead of stdout (- is stdout).")(f)
    f = click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                     help="Output format (parquet needs pyarrow); default: the one --output's "
                          "name ends in (.csv, .json, .parquet), else table.")(f)
    f = click.option("--scheduler", default=None, metavar="ADDRESS",
                     help="Evaluate on the workers of a Dask cluster (tcp://HOST:8786, or "
                          "local / local:N for N worker processes here) and write one Parquet "
                          "partition per chunk into the folder --output DIR.parquet; needs "
                          "pip install 'fsdpsim[dask]'.")(f)
    f = click.option("--chunk-points", default=None,
                     help="With --scheduler: grid points per task (default: about 262,144 "
                          "candidate configurations each).")(f)
    f = click.option("--wide", is_flag=True, default=False,
                     help="Table: every column (failure-free and with failures, full "
                          "bottleneck names and infeasible reasons), however wide; by default "
                          "the table fits 100 columns. CSV, JSON and Parquet have every "
                          "column either way.")(f)
    return grid_options(f)


def merge_options(grid_file: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """Grid-file values overridden by those given on the command line."""
    merged = read_grid_file(grid_file) if grid_file else {}
    for name, value in options.items():
        if value is not None and value != ():
            merged[name.replace("_", "-")] = list(value) if isinstance(value, tuple) else value
    return merged


#: The format a file name's suffix names (any case).
SUFFIX_FORMATS = {".csv": "csv", ".json": "json", ".parquet": "parquet"}


def output_format(fmt: str | None, output: str | None, default: str = "table") -> str:
    """The format to write: ``--format`` where given, else the one ``--output``'s suffix names
    (:data:`SUFFIX_FORMATS`), else ``default``. A file whose suffix names another format than
    ``--format`` is refused (a table in ``rows.csv`` would be read as broken CSV)."""
    named = None
    if output is not None and not is_stdout(output):
        named = SUFFIX_FORMATS.get(PurePath(output.rstrip("/\\")).suffix.lower())
    if fmt is None:
        return named or default
    if named is not None and named != fmt:
        raise ConfigError(f"--output {output!r} names a {named} file but --format {fmt} was "
                          f"given; drop --format, or give --format {named}")
    return fmt


def check_output(fmt: str, output: str | None) -> None:
    """Fail before the sweep runs when the output cannot be written (``-`` is stdout)."""
    if fmt == "parquet":
        if importlib.util.find_spec("pyarrow") is None:
            raise ConfigError("--format parquet needs pyarrow, which is not installed: "
                              "pip install pyarrow (or use --format csv)")
        if is_stdout(output):
            raise ConfigError("--format parquet writes a binary file: give --output FILE")
    if output is not None and not output.strip():
        raise ConfigError("--output '' is an empty file name; give a file, or - for stdout")
    check_output_path(output)


@contextmanager
def progress(grid: Grid, always: bool = False) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on stderr for big grids (every grid with ``always``): its update
    function, else None."""
    from fsdpsim.drivers.sweep.run import estimated_candidates

    if not always and estimated_candidates(grid) < PROGRESS_MIN_CANDIDATES:
        yield None
        return
    with click.progressbar(length=grid.n_points, label=f"sweeping {grid.n_points:,} points",
                           file=sys.stderr) as bar:
        yield bar.update


def run(grid: Grid) -> pd.DataFrame:
    """Run the sweep, with a progress bar on stderr for big grids."""
    from fsdpsim.drivers.sweep.run import run_sweep

    try:
        with progress(grid) as update:
            return run_sweep(grid, progress=update)
    except MemoryError:
        raise _out_of_memory(grid) from None


def _out_of_memory(grid: Grid) -> ConfigError:
    from fsdpsim.drivers.sweep.run import estimated_candidates

    return ConfigError(f"the sweep of {describe(grid)} ({estimated_candidates(grid):,} "
                       "configurations) ran out of memory; --format csv or json writes rows as "
                       "they are computed (flat memory), or give a smaller grid")


# -- the table view ------------------------------------------------------------------------------
#: Candidate configurations per chunk when rows are written as they are computed: a quarter of
#: the in-memory sweep's chunk keeps a 10^6-row CSV sweep well below 1 GiB (the engine still
#: evaluates 65,536 configurations per call).
STREAM_CANDIDATES = 65_536
#: Above this many rows a table is written in blocks as the sweep runs (each block aligned on
#: its own, with its header); below, as one aligned table.
TABLE_BLOCK_ROWS = 20_000


def _slices(frames: Iterable[pd.DataFrame], counts: list[int]) -> Iterator[pd.DataFrame]:
    """The rows of ``frames`` in slices of at most ``output.ROWS_PER_CHUNK``; ``counts``
    accumulates [rows, feasible]."""
    for frame in frames:
        counts[0] += len(frame)
        counts[1] += int(frame["infeasible"].isna().sum())
        for start in range(0, len(frame), ROWS_PER_CHUNK):
            yield frame.iloc[start:start + ROWS_PER_CHUNK]


def _csv_chunks(frames: Iterable[pd.DataFrame], counts: list[int]) -> Iterator[str]:
    header = True
    for part in _slices(frames, counts):
        yield frame_csv(part, header=header)
        header = False


def _json_chunks(frames: Iterable[pd.DataFrame], counts: list[int]) -> Iterator[str]:
    """``render.to_json(records(frame))`` of all rows, one slice at a time (the same text,
    :func:`fsdpsim.report.frame_json.frame_json`)."""
    first = True
    for part in _slices(frames, counts):
        inner = frame_json(part)[2:-2]  # drop the list's "[\n" and "\n]"
        yield ("[\n" if first else ",\n") + inner
        first = False
    yield "[]\n" if first else "\n]\n"


def _table_chunks(frames: Iterable[pd.DataFrame], grid: Grid, counts: list[int],
                  wide: bool = False) -> Iterator[str]:
    import pandas as pd

    frames = iter(frames)
    held: list[pd.DataFrame] = []
    for frame in frames:
        held.append(frame)
        if sum(len(f) for f in held) > TABLE_BLOCK_ROWS:
            break
    else:  # small: one aligned table, as always
        frame = pd.concat(held, ignore_index=True) if len(held) > 1 else held[0]
        counts[0], counts[1] = len(frame), int(frame["infeasible"].isna().sum())
        yield table_text(frame, grid, wide=wide) + "\n"
        return
    yield f"fsdpsim sweep: {describe(grid)} -> {grid.n_points:,} rows, in blocks\n"
    gpus: set[str] = set()
    for part in _slices(itertools.chain(held, frames), counts):
        gpus |= set(part["gpu"].astype(str))
        yield table_text(part, grid, head=False, wide=wide) + "\n\n"
    lines = [f"{counts[0]:,} rows, {counts[1]:,} feasible", "", "notes",
             *render.note_lines(notes(grid, pd.DataFrame({"gpu": sorted(gpus)})))]
    yield "\n".join(lines) + "\n"


def write(frames: pd.DataFrame | Iterable[pd.DataFrame], grid: Grid, fmt: str,
          output: str | None, wide: bool = False) -> tuple[int, int]:
    """Write the rows of ``frames`` (one DataFrame, or chunks of rows as the sweep computes
    them) in ``fmt`` to stdout or ``output``; csv, json and big tables stream. Returns (rows,
    feasible rows)."""
    import pandas as pd

    if isinstance(frames, pd.DataFrame):
        frames = [frames]
    counts = [0, 0]
    if fmt == "parquet":
        frame = pd.concat(list(frames), ignore_index=True)
        try:
            write_parquet(frame, output)
        except OSError as exc:
            raise cannot_write(output, exc) from None
        return len(frame), int(frame["infeasible"].isna().sum())
    chunks = {"csv": _csv_chunks, "json": _json_chunks}.get(fmt)
    write_chunks(chunks(frames, counts) if chunks else _table_chunks(frames, grid, counts, wide),
                 None if is_stdout(output) else output)
    return counts[0], counts[1]


def run_on_cluster(ctx: click.Context, grid_file: str | None, fmt: str | None, output: str | None,
                   scheduler: str | None, chunk_points: str | None,
                   options: dict[str, Any]) -> None:
    """``sweep --scheduler``: the grid's chunks on a Dask cluster, Parquet partitions out."""
    from fsdpsim.drivers.sweep import distributed
    from fsdpsim.util.numbers import COUNT, read_number

    if scheduler is None:
        raise ConfigError("--chunk-points is for a distributed sweep: give --scheduler too")
    if not scheduler.strip():
        raise ConfigError("--scheduler '': give a Dask scheduler address (tcp://HOST:8786) or "
                          "local / local:N")
    if fmt not in (None, "parquet"):
        raise ConfigError(f"--format {fmt} with --scheduler: a distributed sweep writes Parquet "
                          "partitions (--format parquet)")
    if output_format(fmt, output, default="parquet") != "parquet":
        raise ConfigError(f"--output {output!r} with --scheduler: a distributed sweep writes "
                          "Parquet partitions into a folder (--output DIR.parquet)")
    points = None if chunk_points is None else int(read_number(chunk_points, "--chunk-points",
                                                               COUNT))
    distributed.check_folder(output)
    cat = load_catalog(ctx.obj.get("catalog_dirs", ()))
    grid = build_grid(cat, merge_options(grid_file, options))
    if points is not None:
        distributed.chunks(grid, points)  # a bad size fails before any cluster starts
    with distributed.client_for(scheduler) as client, progress(grid, always=True) as update:
        rows, feasible = distributed.run_distributed(grid, client, output, chunk_points=points,
                                                     progress=update)
    parts = len(list(distributed.partitions(output)))
    echo(f"fsdpsim sweep: {rows:,} rows ({feasible:,} feasible) written to {output} as "
         f"{parts:,} Parquet partition{'s' if parts != 1 else ''}")


def register(cli: click.Group) -> None:
    @cli.command("sweep")
    @sweep_options
    @click.pass_context
    def sweep_cmd(ctx: click.Context, grid_file: str | None, fmt: str | None, output: str | None,
                  wide: bool, scheduler: str | None, chunk_points: str | None,
                  **options: Any) -> None:
        """Predict every configuration of a grid: one row each, with every prediction field.

        Lists are comma-separated; GPU counts and sequence lengths take ranges A..B (powers of
        two between). Invalid combinations and configurations that do not fit are rows with an
        `infeasible` reason. Example:

          fsdpsim sweep --model llama3-8b,llama3-70b --gpu h100,b200 --num-gpus 8..1024 --best
        """
        from fsdpsim.drivers.sweep.grid import normalise_key
        from fsdpsim.drivers.sweep.run import iter_sweep
        from fsdpsim.report.sweep_table import with_predict_commands

        def normalised(o: dict[str, Any]) -> dict[str, Any]:
            return {normalise_key(k): v for k, v in o.items() if v not in (None, ())}

        if scheduler is not None or chunk_points is not None:
            run_on_cluster(ctx, grid_file, fmt, output, scheduler, chunk_points, options)
            return
        fmt = output_format(fmt, output)
        check_output(fmt, output)
        cat = load_catalog(ctx.obj.get("catalog_dirs", ()))
        merged = merge_options(grid_file, options)
        grid = build_grid(cat, merged)
        try:
            with progress(grid) as update:
                frames = iter_sweep(grid, progress=update, candidates_per_chunk=STREAM_CANDIDATES)
                if grid.free:  # --best: each row's plan as the predict command that reproduces it
                    frames = (with_predict_commands(f, normalised(merged),
                                                    ctx.obj.get("catalog_dirs", ()))
                              for f in frames)
                rows, feasible = write(frames, grid, fmt, output, wide)
        except MemoryError:
            raise _out_of_memory(grid) from None
        if not is_stdout(output):
            echo(f"fsdpsim sweep: {rows:,} rows ({feasible:,} feasible) written to {output}")


__all__ = ["register", "FORMATS", "table_text", "records"]
