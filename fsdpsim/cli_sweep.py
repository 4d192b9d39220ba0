"""``fsdpsim sweep``: parse the grid, run :func:`fsdpsim.sweep.run_sweep`, write the rows."""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import click

from fsdpsim import render
from fsdpsim.catalog import load_catalog
from fsdpsim.cli_procurement import assumption_notes, rate, run_options, short_source
from fsdpsim.errors import ConfigError
from fsdpsim.grid import Grid, build_grid, describe, read_grid_file
from fsdpsim.output import ROWS_PER_CHUNK, OutputError, echo, is_stdout, write_chunks
from fsdpsim.parallel import SHARDING_HELP
from fsdpsim.units import GIB_BYTES

if TYPE_CHECKING:  # pandas is imported where rows are made, not at start-up
    import pandas as pd

FORMATS = ("table", "csv", "json", "parquet")
#: Show a progress bar on stderr from this many candidate configurations (about a second).
PROGRESS_MIN_CANDIDATES = 500_000
DAY_S = 86_400.0

_LIST = "comma-separated, repeatable"


def grid_options(f):
    """The grid options of ``fsdpsim sweep`` (everything but ``--format`` and ``--output``);
    ``fsdpsim plot`` takes the same ones."""
    opts = [
        click.option("--grid", "grid_file", type=click.Path(dir_okay=False), default=None,
                     help="TOML grid file; keys are these option names (the command line "
                          "wins where both give a value)."),
        click.option("--model", multiple=True, help=f"Preset ids or config.json paths ({_LIST})."),
        click.option("--model-sizes", multiple=True,
                     help="Llama-style ladder models of these sizes: 7b,70b or a 1-2-5 range "
                          "1b..1t (fsdpsim.model_ladder)."),
        click.option("--gpu", multiple=True, help=f"Accelerator ids or aliases ({_LIST}); "
                     "default h100."),
        click.option("--cluster", multiple=True, help=f"Node or cluster ids ({_LIST})."),
        click.option("--gpus-per-node", multiple=True, help="Override GPUs per node."),
        click.option("--network", multiple=True, help=f"Network ids between nodes ({_LIST})."),
        click.option("--inter-node-gbps-per-gpu", multiple=True,
                     help="Inter-node Gb/s per GPU, one direction, e.g. 50,100,200,400."),
        click.option("--power-cap-w", multiple=True,
                     help="Board power limits per GPU, e.g. 500,600,700 (uncalibrated DVFS model)."),
        click.option("--placement", multiple=True,
                     help="packed and/or fragmented (as predict; default packed)."),
        click.option("--num-gpus", multiple=True,
                     help="GPU counts: 8,64 or 8..4096 (powers of two between); default 8."),
        click.option("--seq-len", multiple=True, help="Sequence lengths (ranges as --num-gpus); "
                     "k = 1,024 here (8k = 8,192); default 4096."),
        click.option("--micro-batch", multiple=True,
                     help="Micro-batch sizes, or auto (free: fastest that fits); default auto."),
        click.option("--global-batch", multiple=True,
                     help="Sequences per step, or none (one micro-batch per GPU); default none."),
        click.option("--sharding", multiple=True,
                     help=f"Strategies or auto (free); default full. {SHARDING_HELP}."),
        click.option("--recompute", multiple=True,
                     help="none, selective, full, or auto (free); default auto."),
        click.option("--precision", multiple=True, help="bf16, fp16, fp8, fp32; default bf16."),
        click.option("--grad-sync", multiple=True,
                     help="With accumulation, reduce gradients every micro-batch or only the "
                          "last, for the sharded strategies: every, last or both (every,last: "
                          "rows for each); default every."),
        click.option("--shard-group-size", default=None,
                     help="GPUs per HSDP shard group, for --sharding hybrid (default: one "
                          "scale-up domain's worth), as predict's."),
        click.option("--keep-params-gathered/--regather-params", default=None,
                     help="With accumulation, gather each unit once per step and keep it, for "
                          "the sharded-parameter strategies (default: re-gather)."),
        click.option("--best/--no-best", default=None,
                     help="Leave every knob not given free (sharding, micro-batch, recompute) "
                          "and keep, per point, the fastest setting that fits, at a fixed "
                          "global batch (--global-batch, else about 4M tokens)."),
        click.option("--free-batch/--fixed-batch", default=None,
                     help="With --best: let each row run one micro-batch per GPU (its global "
                          "batch then differs between rows) instead of a fixed global batch."),
        click.option("--price", multiple=True,
                     help="Rent per GPU-hour, GPU=USD/h (e.g. h100=2.5/h); default: catalog "
                          "(the cloud node's or the GPU's)."),
        click.option("--ceilings/--no-ceilings", default=None,
                     help="Solve the largest micro-batch and sequence that fit for every row "
                          "(default on; off is about 3x faster on grids without free knobs)."),
        click.option("--tp", multiple=True, help=f"Tensor-parallel degrees ({_LIST}); "
                     "crossed with --pp and --cp."),
        click.option("--pp", multiple=True, help=f"Pipeline-parallel degrees ({_LIST})."),
        click.option("--cp", multiple=True, help=f"Context-parallel degrees ({_LIST})."),
        click.option("--vpp", default=None, help="Virtual stages per pipeline rank (pp > 1)."),
        click.option("--pp-schedule", default=None,
                     help="gpipe, 1f1b, interleaved or zb-h1 (pp > 1; default 1f1b, "
                          "interleaved with --vpp > 1)."),
        click.option("--cp-kind", default=None, help="ring (default) or all2all."),
        click.option("--sequence-parallel/--no-sequence-parallel", default=None,
                     help="Sequence parallelism with tp > 1 (default on)."),
        click.option("--tp-overlap/--no-tp-overlap", default=None,
                     help="Overlap TP collectives with GEMMs (tp > 1)."),
        click.option("--recompute-layers", default=None,
                     help="Recompute only the first K layers of each stage."),
        click.option("--ep", default=None,
                     help="Expert-parallel degree of the MoE models (one value; dense models "
                          "need 1)."),
        click.option("--etp", default=None, help="Expert tensor-parallel degree (default tp)."),
        click.option("--ep-overlap/--no-ep-overlap", default=None,
                     help="Hide the expert all-to-alls behind another micro-batch (ep > 1)."),
        click.option("--moe-capacity-factor", default=None,
                     help="Token dropping with this capacity factor; none = dropless."),
        click.option("--moe-imbalance", default=None,
                     help="Dropless busiest-rank load over the mean (default: the balanced-"
                          "routing floor)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return run_options(f)


def sweep_options(f):
    """:func:`grid_options` plus ``--format`` and ``--output``."""
    f = click.option("--output", "-o", type=click.Path(dir_okay=False, allow_dash=True),
                     default=None, help="Write to FILE instead of stdout (- is stdout).")(f)
    f = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
                     show_default=True, help="Output format (parquet needs pyarrow).")(f)
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
    if not is_stdout(output):
        parent = Path(output).resolve().parent
        if not parent.is_dir():
            raise ConfigError(f"--output {output!r}: folder {str(parent)!r} does not exist")


@contextmanager
def progress(grid: Grid) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on stderr for big grids: its update function, else None."""
    from fsdpsim.sweep import estimated_candidates

    if estimated_candidates(grid) < PROGRESS_MIN_CANDIDATES:
        yield None
        return
    with click.progressbar(length=grid.n_points, label=f"sweeping {grid.n_points:,} points",
                           file=sys.stderr) as bar:
        yield bar.update


def run(grid: Grid) -> pd.DataFrame:
    """Run the sweep, with a progress bar on stderr for big grids."""
    from fsdpsim.sweep import run_sweep

    try:
        with progress(grid) as update:
            return run_sweep(grid, progress=update)
    except MemoryError:
        raise _out_of_memory(grid) from None


def _out_of_memory(grid: Grid) -> ConfigError:
    from fsdpsim.sweep import estimated_candidates

    return ConfigError(f"the sweep of {describe(grid)} ({estimated_candidates(grid):,} "
                       "configurations) ran out of memory; --format csv or json writes rows as "
                       "they are computed (flat memory), or give a smaller grid")


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as plain dicts; missing values as None."""
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


# -- the table view ------------------------------------------------------------------------------
def _fmt(value: Any, spec: str, scale: float = 1.0, unit: str = "") -> str:
    import pandas as pd

    if value is None or value is pd.NA or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value * scale if scale != 1.0 else value:{spec}}{unit}"


#: The bottleneck in one word for the compact table (the full name is in --wide, CSV, JSON).
BOTTLENECK_SHORT = {"compute": "compute", "hbm_bandwidth": "HBM", "intra_node_link": "scale-up",
                    "inter_node_link": "network", "memory_capacity": "memory",
                    "pipeline_bubble": "bubble", "collective_latency": "latency"}
#: Columns of the compact table that go first when it is wider than render.WIDTH, in order.
DROP_TO_FIT = ("MWh", "kWh/Mtok", "step", "MFU", "bottleneck", "mem GiB", "$M", "$/Mtok")


def _width(rows: list[dict[str, str]]) -> int:
    """Width of ``render.table(rows)``: right-aligned columns, one space between."""
    return sum(max(len(c), *(len(str(r[c])) for r in rows)) for c in rows[0]) + len(rows[0]) - 1


def table_text(frame: pd.DataFrame, grid: Grid, head: bool = True, wide: bool = False) -> str:
    """The table view: the varying inputs, the chosen knobs and the headline numbers (with
    ``head``, the summary line above and the notes below).

    Compact by default, to fit :data:`fsdpsim.render.WIDTH` columns: an input or knob that is
    the same in every row is said once above the table (with ``head``), the cost of a token
    budget is the expected one (failures included, as ``compare``), the bottleneck is one
    word, infeasible reasons are numbered below, and when that is still too wide the columns
    of :data:`DROP_TO_FIT` go first (named in the notes). ``wide``: every column as it is."""
    varying = [c for c in ("model", "gpu", "cluster", "network", "inter_node_gbps_per_gpu",
                           "power_cap_w",
                           "plan.num_gpus", "training.seq_len", "training.precision")
               if frame[c].astype(str).nunique() > 1 or c in ("model", "gpu", "plan.num_gpus")]
    if "cluster" in varying and (frame["cluster"] == "").all():
        varying.remove("cluster")
    short = {"inter_node_gbps_per_gpu": "Gb/s/GPU", "power_cap_w": "cap W", "plan.num_gpus": "GPUs",
             "training.seq_len": "seq", "training.precision": "prec"}
    rows = []
    for r in records(frame):
        row = {short.get(c, c): r[c] for c in varying}
        if any(layout != (1, 1, 1) for layout in grid.layouts):
            row["plan"] = r["plan.line"] or "-"
        if len(grid.grad_syncs) > 1:
            row["grad sync"] = r["plan.grad_sync"] or "-"
        row.update({
            "sharding": r["plan.sharding"] or "-",
            "mbs": _fmt(r["training.micro_batch"], "d"),
            "batch": _fmt(r["training.global_batch"], ",d"),
            "recompute": r["training.recompute"] or "-",
        })
        if wide:
            row.update({
                "step": _fmt(r["step_time_s"], ",.1f", 1e3, " ms"),
                "tok/s/GPU": _fmt(r["tokens_per_s_per_gpu"], ",.0f"),
                "MFU": _fmt(r["mfu"], ".1f", 100, " %"),
                "peak": _fmt(r["memory.peak_bytes"], ".1f", 1 / GIB_BYTES, " GiB"),
                "bottleneck": r["bottleneck"] or "-",
                "$/Mtok": _fmt(r["cost_usd_per_million_tokens"], ".3f"),
                "kWh/Mtok": _fmt(r["energy_kwh_per_million_tokens"], ".3f"),
            })
            if grid.train_tokens is not None:
                row["train days"] = _fmt(r["train_time_s"], ",.1f", 1 / DAY_S)
                row["train $M"] = _fmt(r["train_cost_usd"], ",.2f", 1e-6)
                row["train MWh"] = _fmt(r["train_energy_kwh"], ",.0f", 1e-3)
                row["goodput"] = _fmt(r["failures.goodput"], ".1f", 100, " %")
                row["w/ failures days"] = _fmt(r["failures.train_time_s"], ",.1f", 1 / DAY_S)
                row["w/ failures $M"] = _fmt(r["failures.train_cost_usd"], ",.2f", 1e-6)
            row["infeasible"] = r["infeasible"] or ""
        else:
            peak, cap = r["memory.peak_bytes"], r["memory.capacity_bytes"]
            no_peak = peak is None or not math.isfinite(peak) or not cap
            row.update({
                "step": render.seconds(r["step_time_s"]),
                "tok/s/GPU": _fmt(r["tokens_per_s_per_gpu"], ",.0f"),
                "MFU": _fmt(r["mfu"], ".1f", 100, "%"),
                "mem GiB": "-" if no_peak else f"{peak / GIB_BYTES:.0f}/{cap / GIB_BYTES:.0f}",
                "bottleneck": BOTTLENECK_SHORT.get(r["bottleneck"], r["bottleneck"] or "-"),
            })
            if grid.train_tokens is None:
                row["$/Mtok"] = _fmt(r["cost_usd_per_million_tokens"], ".3f")
                row["kWh/Mtok"] = _fmt(r["energy_kwh_per_million_tokens"], ".3f")
            else:  # what the budget costs with failures, checkpoints and restarts
                row["days"] = _fmt(r["failures.train_time_s"], ",.1f", 1 / DAY_S)
                row["$M"] = _fmt(r["failures.train_cost_usd"], ",.2f", 1e-6)
                row["MWh"] = _fmt(r["failures.train_energy_kwh"], ",.0f", 1e-3)
            row["infeasible"] = r["infeasible"] or ""
        rows.append(row)
    if wide or not rows:
        return _with_head(render.table(rows), frame, grid, [], head)
    above, left_out = [], []
    inputs = {*(short.get(c, c) for c in varying), "plan", "grad sync", "sharding", "mbs",
              "batch", "recompute"}
    if head and len(rows) > 1:  # one value for every row: said once, above the table
        first = rows[0]
        same = [c for c in first if c in inputs and all(r[c] == first[c] for r in rows)]
        above = [f"{c} {first[c]}" for c in same]
        rows = [{c: v for c, v in r.items() if c not in same} for r in rows]
    reasons: dict[str, int] = {}
    for r in rows:
        if r["infeasible"]:
            r["infeasible"] = f"({reasons.setdefault(r['infeasible'], len(reasons) + 1)})"
    if not reasons:
        rows = [{c: v for c, v in r.items() if c != "infeasible"} for r in rows]
    for column in DROP_TO_FIT:
        if _width(rows) <= render.WIDTH:
            break
        if column in rows[0]:
            rows = [{c: v for c, v in r.items() if c != column} for r in rows]
            left_out.append(column)
    extra = ([f"every row: {', '.join(above)}"] if above else [])
    notes_extra = []
    if grid.train_tokens is not None:
        notes_extra.append("days, $M and MWh include failures, checkpoints and restarts "
                           "(goodput); the failure-free numbers are in --wide and the CSV/JSON")
    if left_out:
        notes_extra.append(f"left out to fit {render.WIDTH} columns: {', '.join(left_out)} "
                           "(--wide shows every column)")
    if reasons:
        notes_extra += [f"({k}) infeasible: {reason}" for reason, k in reasons.items()]
    return _with_head(render.table(rows), frame, grid, notes_extra, head, extra)


def _with_head(table: str, frame: pd.DataFrame, grid: Grid, notes_extra: list[str],
               head: bool, above: list[str] = ()) -> str:
    """The table, and with ``head`` the summary line(s) above and the notes below."""
    if not head:
        return "\n".join([*(render.wrap(a, "", "  ") for a in above), table,
                          *render.note_lines(notes_extra)])
    feasible = int(frame["infeasible"].isna().sum())
    first = f"fsdpsim sweep: {describe(grid)} -> {len(frame):,} rows, {feasible:,} feasible"
    return "\n".join([render.wrap(first, "", "  "), *(render.wrap(a, "", "  ") for a in above),
                      table, "", "notes",
                      *render.note_lines([*notes_extra, *notes(grid, frame)])])


def notes(grid: Grid, frame: pd.DataFrame) -> list[str]:
    """What the cost, energy and failure columns assume, and each system's rent."""
    out = assumption_notes(grid.run)
    shown = set(frame["gpu"].astype(str))
    rents, no_price = {}, set()
    for hw in grid.hardware:
        price = grid.price(hw)
        if hw.gpu not in shown:
            continue
        if price is None:
            no_price.add(hw.gpu)
            continue
        where = hw.cluster or hw.gpu
        rents[where] = (f"{where} {rate(price.usd_per_gpu_hour)}/GPU-h "
                        + ("(--price)" if price.kind == "--price" else
                           f"({price.kind}, {short_source(price.source)}, {price.retrieved})"))
    if rents:
        out.append("rent: " + "; ".join(rents.values()))
    if no_price:
        first = sorted(no_price)[0]
        out.append(f"no price for {', '.join(sorted(no_price))}: give --price {first}=USD/h")
    no_tdp = sorted(set(frame["gpu"]) - set(grid.tdp_w))
    if no_tdp:
        out.append(f"no TDP in the catalog for {', '.join(no_tdp)}: energy left empty")
    if grid.free:
        out.append(f"free knobs ({', '.join(grid.free)}): each row is the fastest candidate "
                   "that fits (else the smallest memory footprint)")
    out.append(batch_note(grid, frame))
    return out


def batch_note(grid: Grid, frame: pd.DataFrame) -> str:
    """Which global batch the rows used (the ``batch`` column), and why."""
    from fsdpsim.grid import DEFAULT_BATCH_TOKENS, default_global_batch

    if grid.batch_tokens is not None:
        fixed = ", ".join(f"{default_global_batch(s, grid.batch_tokens):,} sequences at seq "
                          f"{s:,}" for s in grid.seq_lens)
        return (f"global batch fixed for every row (batch): {fixed}, about "
                f"{DEFAULT_BATCH_TOKENS / 2**20:g}M tokens per step (--global-batch sets "
                "another; --free-batch lets each row run one micro-batch per GPU)")
    if grid.global_batches != (None,):
        return ("global batch as given (--global-batch): "
                + ", ".join("one micro-batch per GPU" if b is None else f"{b:,} sequences"
                            for b in grid.global_batches) + " (batch)")
    batches = (sorted({int(b) for b in frame["training.global_batch"].dropna()})
               if "training.global_batch" in frame else [])
    varies = (f"; the rows use {len(batches)} different batches: compare them with care"
              if len(batches) > 1 else "")
    return ("global batch: one micro-batch per GPU, no accumulation (batch)" + varies)


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
        yield part.to_csv(index=False, header=header)
        header = False


def _json_chunks(frames: Iterable[pd.DataFrame], counts: list[int]) -> Iterator[str]:
    """``render.to_json(records(frame))`` of all rows, one slice at a time (the same text)."""
    first = True
    for part in _slices(frames, counts):
        inner = render.to_json(records(part))[2:-2]  # drop the list's "[\n" and "\n]"
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
            frame.to_parquet(output, index=False)
        except OSError as exc:
            raise OutputError(f"cannot write --output {output!r}: {exc.strerror or exc}"
                              ) from None
        return len(frame), int(frame["infeasible"].isna().sum())
    chunks = {"csv": _csv_chunks, "json": _json_chunks}.get(fmt)
    write_chunks(chunks(frames, counts) if chunks else _table_chunks(frames, grid, counts, wide),
                 None if is_stdout(output) else output)
    return counts[0], counts[1]


def register(cli: click.Group) -> None:
    @cli.command("sweep")
    @sweep_options
    @click.pass_context
    def sweep_cmd(ctx: click.Context, grid_file: str | None, fmt: str, output: str | None,
                  wide: bool, **options: Any) -> None:
        """Predict every configuration of a grid: one row each, with every prediction field.

        Lists are comma-separated; GPU counts and sequence lengths take ranges A..B (powers of
        two between). Invalid combinations and configurations that do not fit are rows with an
        `infeasible` reason. Example:

          fsdpsim sweep --model llama3-8b,llama3-70b --gpu h100,b200 --num-gpus 8..1024 --best
        """
        from fsdpsim.sweep import iter_sweep

        check_output(fmt, output)
        cat = load_catalog(ctx.obj.get("catalog_dirs", ()))
        grid = build_grid(cat, merge_options(grid_file, options))
        try:
            with progress(grid) as update:
                rows, feasible = write(iter_sweep(grid, progress=update,
                                                  candidates_per_chunk=STREAM_CANDIDATES),
                                       grid, fmt, output, wide)
        except MemoryError:
            raise _out_of_memory(grid) from None
        if not is_stdout(output):
            echo(f"fsdpsim sweep: {rows:,} rows ({feasible:,} feasible) written to {output}")


__all__ = ["register", "FORMATS", "table_text", "records"]
