"""The table ``fsdpsim sweep`` prints: compact columns of a sweep's rows (constant inputs said
once, ``--wide`` for every column), and its notes (the CLI's rendering; no formulas)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

from fsdpsim.report import render
from fsdpsim.engine import MEMORY_PRESSURE_FRACTION
from fsdpsim.report.procurement import assumption_notes, rate, short_source
from fsdpsim.drivers.sweep.grid import Grid, describe
from fsdpsim.util.units import GIB_BYTES
from fsdpsim.report.words import bottleneck_name, mfu_note
from fsdpsim.plan.knobs import KNOBS, SWEEP_KERNEL_KNOBS

if TYPE_CHECKING:  # pandas is imported where rows are made, not at start-up
    import pandas as pd

DAY_S = 86_400.0


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as plain dicts; missing values as None."""
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def _fmt(value: Any, spec: str, scale: float = 1.0, unit: str = "") -> str:
    import pandas as pd

    if value is None or value is pd.NA or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value * scale if scale != 1.0 else value:{spec}}{unit}"


def _mfu(r: Mapping[str, Any]):
    """A row's MFU against the dense peak of its own precision (``mfu_native``; the BF16
    peak's is ``mfu``): never above 100 % for a low-precision row."""
    native = r.get("mfu_native")
    return r.get("mfu") if native is None else native


#: Columns of the compact table that go first when it is wider than render.WIDTH, in order.
DROP_TO_FIT = ("MWh", "kWh/Mtok", "step", "MFU", "bottleneck", "mem GiB", "$M", "$/Mtok")
#: Input columns a row's plan line states too (its sharding, ``mb N``, ``ckpt ...``): they go
#: next where the table has a ``plan`` column and is still too wide.
STATED_BY_PLAN = ("sharding", "mbs", "recompute")


def _widths(rows: list[dict[str, str]]) -> dict[str, int]:
    """Each column's width in ``render.table(rows)`` (right-aligned; one space between)."""
    return {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in rows[0]}


#: The columns of a row the table reads besides the varying inputs (:func:`table_text`).
_TABLE_COLUMNS = ("plan.line", "plan.grad_sync", "plan.sharding", "training.micro_batch",
                  "training.global_batch", "training.recompute", "infeasible", "step_time_s",
                  "tokens_per_s_per_gpu", "mfu", "mfu_native", "memory.peak_bytes",
                  "memory.capacity_bytes", "fits", "bottleneck", "cost_usd_per_million_tokens",
                  "energy_kwh_per_million_tokens", "train_time_s", "train_cost_usd",
                  "train_energy_kwh", "failures.goodput", "failures.train_time_s",
                  "failures.train_cost_usd", "failures.train_energy_kwh")


#: Headers of the input columns in the table.
SHORT = {"inter_node_gbps_per_gpu": "Gb/s/GPU", "power_cap_w": "cap W", "plan.num_gpus": "GPUs",
         "training.seq_len": "seq", "training.precision": "prec"}


def table_text(frame: pd.DataFrame, grid: Grid, head: bool = True, wide: bool = False) -> str:
    """The table view: the varying inputs, the chosen knobs and the headline numbers (with
    ``head``, the summary line above and the notes below).

    Compact by default, to fit :data:`fsdpsim.report.render.WIDTH` columns: an input or knob that is
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
    rows = []
    read = [c for c in dict.fromkeys((*varying, *_TABLE_COLUMNS)) if c in frame.columns]
    for r in records(frame[read]):  # the columns read, not all ~170
        row = {SHORT.get(c, c): r[c] for c in varying}
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
        row.update(_wide_cells(r, grid) if wide else _compact_cells(r, grid))
        row["infeasible"] = r["infeasible"] or ""
        rows.append(row)
    if wide or not rows:
        return _with_head(render.table(rows), frame, grid, [], head)
    inputs = {*(SHORT.get(c, c) for c in varying), "plan", "grad sync", "sharding", "mbs",
              "batch", "recompute"}
    return _compact_table(rows, inputs, frame, grid, head)


def _wide_cells(r: Mapping[str, Any], grid: Grid) -> dict[str, str]:
    """``--wide``'s headline numbers of a row: every one, in its own unit."""
    row = {
        "step": _fmt(r["step_time_s"], ",.1f", 1e3, " ms"),
        "tok/s/GPU": _fmt(r["tokens_per_s_per_gpu"], ",.0f"),
        "MFU": _fmt(_mfu(r), ".1f", 100, " %"),
        "peak": _fmt(r["memory.peak_bytes"], ".1f", 1 / GIB_BYTES, " GiB"),
        "bottleneck": bottleneck_name(r["bottleneck"] or None),
        "$/Mtok": _fmt(r["cost_usd_per_million_tokens"], ".3f"),
        "kWh/Mtok": _fmt(r["energy_kwh_per_million_tokens"], ".3f"),
    }
    if grid.train_tokens is not None:
        row["train days"] = _fmt(r["train_time_s"], ",.1f", 1 / DAY_S)
        row["train $M"] = _fmt(r["train_cost_usd"], ",.2f", 1e-6)
        row["train MWh"] = _fmt(r["train_energy_kwh"], ",.0f", 1e-3)
        row["goodput"] = _fmt(r["failures.goodput"], ".1f", 100, " %")
        row["w/ failures days"] = _fmt(r["failures.train_time_s"], ",.1f", 1 / DAY_S)
        row["w/ failures $M"] = _fmt(r["failures.train_cost_usd"], ",.2f", 1e-6)
    return row


def _compact_cells(r: Mapping[str, Any], grid: Grid) -> dict[str, str]:
    """The compact table's headline numbers of a row: memory as peak/capacity ("~" near the
    limit), and with a token budget what it costs with failures, checkpoints and restarts."""
    peak, cap = r["memory.peak_bytes"], r["memory.capacity_bytes"]
    no_peak = peak is None or not math.isfinite(peak) or not cap
    row = {
        "step": render.seconds(r["step_time_s"]),
        "tok/s/GPU": _fmt(r["tokens_per_s_per_gpu"], ",.0f"),
        "MFU": _fmt(_mfu(r), ".1f", 100, "%"),
        "mem GiB": "-" if no_peak else f"{peak / GIB_BYTES:.0f}/{cap / GIB_BYTES:.0f}"
        + ("~" if r["fits"] and peak > MEMORY_PRESSURE_FRACTION * cap else ""),
        "bottleneck": bottleneck_name(r["bottleneck"] or None),
    }
    if grid.train_tokens is None:
        row["$/Mtok"] = _fmt(r["cost_usd_per_million_tokens"], ".3f")
        row["kWh/Mtok"] = _fmt(r["energy_kwh_per_million_tokens"], ".3f")
    else:  # what the budget costs with failures, checkpoints and restarts
        row["days"] = _fmt(r["failures.train_time_s"], ",.1f", 1 / DAY_S)
        row["$M"] = _fmt(r["failures.train_cost_usd"], ",.2f", 1e-6)
        row["MWh"] = _fmt(r["failures.train_energy_kwh"], ",.0f", 1e-3)
    return row


def _compact_table(rows: list[dict[str, str]], inputs: set[str], frame: pd.DataFrame,
                   grid: Grid, head: bool) -> str:
    """The compact table of ``rows``: the ``inputs`` the same in every row said once above
    (with ``head``), infeasible reasons numbered below, then columns of :data:`DROP_TO_FIT`
    left out until it fits :data:`fsdpsim.report.render.WIDTH` columns."""
    above, left_out = [], []
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
    widths = _widths(rows)
    for column in DROP_TO_FIT + (STATED_BY_PLAN if "plan" in rows[0] else ()):
        if sum(widths.values()) + len(widths) - 1 <= render.WIDTH:
            break
        if column in widths:
            del widths[column]
            left_out.append(column)
    if left_out:
        rows = [{c: v for c, v in r.items() if c in widths} for r in rows]
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
                   f"that fits within {100 * MEMORY_PRESSURE_FRACTION:.0f} % of memory, else "
                   "the fastest that fits above it (~), else the smallest memory footprint")
    peak, cap = frame.get("memory.peak_bytes"), frame.get("memory.capacity_bytes")
    if peak is not None and cap is not None and bool(
            (frame["fits"].astype(bool) & (peak > MEMORY_PRESSURE_FRACTION * cap)).any()):
        out.append(f"~ = above {100 * MEMORY_PRESSURE_FRACTION:.0f} % of the GPU's memory: "
                   "allocator retries and fragmentation can slow or stop a real run")
    if "utilisation.native_precision" in frame:
        mfu = mfu_note(frame["utilisation.native_precision"].dropna().astype(str))
        if mfu:
            out.append(mfu)
    out.extend(split_notes(grid, frame))
    out.append(batch_note(grid, frame))
    return out


def split_notes(grid: Grid, frame: pd.DataFrame) -> list[str]:
    """predict's pipeline-split note (:func:`fsdpsim.drivers.predict.plan_notes`) for each
    model and pipeline layout of the feasible rows whose layers do not split evenly."""
    from fsdpsim.plan.parallel import ParallelPlan

    if "plan.pp" not in frame:
        return []
    rows = frame[frame["infeasible"].isna() & (frame["plan.pp"] > 1)]
    specs = {spec.name: spec for spec in grid.models}
    out = []
    for (name, pp, vpp), _ in rows.groupby(["model", "plan.pp", "plan.vpp"], sort=False):
        spec = specs.get(name)
        if spec is None:
            continue
        probe = ParallelPlan(num_gpus=int(pp), gpus_per_node=1, pp=int(pp), vpp=int(vpp),
                             pp_schedule=grid.pp_schedule, framework=grid.framework)
        split = probe.layer_split(spec.n_layers)
        if not split.even:
            out.append(f"pipeline split of {name} over pp {int(pp)}"
                       + (f" x vpp {int(vpp)}" if vpp > 1 else "")
                       + ": " + split.words("predict's --pp-layers overrides it"))
    return out


#: Sweep options that, when given, a row's predict command carries (from the row's column).
_SYSTEM_COLUMNS = {"network": "network", "inter-node-gbps-per-gpu": "inter_node_gbps_per_gpu",
                   "power-cap-w": "power_cap_w", "gpus-per-node": "plan.gpus_per_node"}
#: Training columns of a row that predict reads as options (report.command.OPTIONS names).
_TRAINING_COLUMNS = ("precision", "optimizer", *SWEEP_KERNEL_KNOBS)


def _one(value: Any) -> str | None:
    """A sweep option's value when it names one choice (``packed``), else None."""
    values = [v for item in ([value] if isinstance(value, str) else value or ())
              for v in str(item).split(",") if v.strip()]
    return values[0].strip() if len(values) == 1 else None


def with_predict_commands(frame: pd.DataFrame, given: Mapping[str, Any],
                          catalog_dirs: tuple[str, ...] = ()) -> pd.DataFrame:
    """``frame`` with a ``predict_command`` column: the ``fsdpsim predict --plan ...`` line
    that reproduces each row that has a plan (:func:`fsdpsim.report.command.predict_command`;
    None for a row without one). ``given``: the sweep's options (those of
    :data:`_SYSTEM_COLUMNS` given are carried from the row, with ``placement``)."""
    from fsdpsim.report.command import predict_command

    cache: dict[tuple, str] = {}
    out = []
    read = ("plan.line", "infeasible", "model", "plan.num_gpus", "training.seq_len",
            "plan.framework", "cluster", "gpu", *_SYSTEM_COLUMNS.values(),
            *(f"training.{name}" for name in _TRAINING_COLUMNS))
    # the columns read, not the row's ~170 (most of the time of a sweep's --best rows)
    for r in records(frame[[c for c in dict.fromkeys(read) if c in frame.columns]]):
        line = r.get("plan.line")
        if not line or r.get("infeasible"):
            out.append(None)
            continue
        o: dict[str, Any] = {"model": r["model"], "num_gpus": int(r["plan.num_gpus"]),
                             "seq_len": int(r["training.seq_len"]),
                             "framework": r.get("plan.framework") or "fsdp2",
                             "placement": _one(given.get("placement"))}
        if r.get("cluster"):
            o["cluster"] = r["cluster"]
        else:
            o["gpu"] = r["gpu"]
        for option, column in _SYSTEM_COLUMNS.items():
            if given.get(option) is not None and r.get(column) is not None:
                value = r[column]
                o[option.replace("-", "_")] = (int(value) if float(value).is_integer()
                                               else value) if column != "network" else value
        for name in _TRAINING_COLUMNS:
            value = r.get(f"training.{name}")
            if isinstance(value, str) and name in KNOBS and KNOBS[name].kind == "text":
                value = tuple(v for v in value.split(",") if v)  # a list: comma-separated
            o[name] = value
        key = tuple(sorted((k, str(v)) for k, v in o.items())) + (line,)
        if key not in cache:
            cache[key] = predict_command(o, line, catalog_dirs)
        out.append(cache[key])
    frame = frame.copy()  # one block: the sweep builds its frame column by column
    frame["predict_command"] = out
    return frame


def batch_note(grid: Grid, frame: pd.DataFrame) -> str:
    """Which global batch the rows used (the ``batch`` column), and why."""
    from fsdpsim.plan.training import (DEFAULT_BATCH_RULE, DEFAULT_BATCH_TOKENS,
                                       default_global_batch)

    if grid.batch_tokens is not None:
        fixed = ", ".join(f"{default_global_batch(s, 1, grid.batch_tokens):,} sequences at seq "
                          f"{s:,}" for s in grid.seq_lens)
        adjusted = ""
        if "training.global_batch" in frame and "training.seq_len" in frame:
            base = default_global_batch(frame["training.seq_len"].fillna(4096).astype(int)
                                        .to_numpy(), 1, grid.batch_tokens)
            moved = frame["training.global_batch"].notna() & (
                frame["training.global_batch"].to_numpy() != base)
            if bool(moved.any()):
                adjusted = (f"; {int(moved.sum())} row(s) whose data-parallel degree does not "
                            "divide it run the nearest multiple of it (batch)")
        return (f"global batch (batch): {fixed}, about {DEFAULT_BATCH_TOKENS / 2**20:g}M tokens "
                f"per step, the default of every command ({DEFAULT_BATCH_RULE}){adjusted}; "
                "--global-batch sets another; --free-batch lets each row run one micro-batch "
                "per GPU")
    if grid.global_batches != (None,):
        return ("global batch as given (--global-batch): "
                + ", ".join("one micro-batch per GPU" if b is None else f"{b:,} sequences"
                            for b in grid.global_batches) + " (batch)")
    batches = (sorted({int(b) for b in frame["training.global_batch"].dropna()})
               if "training.global_batch" in frame else [])
    varies = (f"; the rows use {len(batches)} different batches: compare them with care"
              if len(batches) > 1 else "")
    return ("global batch: one micro-batch per GPU, no accumulation (batch)" + varies)


__all__ = ["table_text", "notes", "batch_note", "records", "DAY_S"]
