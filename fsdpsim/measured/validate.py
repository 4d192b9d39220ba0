"""Measured training runs: read them, predict them with the same engine, report the error.

fsdpsim's own measurement schema is one row per run with these columns (CSV):

=========================  =========================================================
``id``                     row label
``model``                  preset id or config.json path (or give the architecture
                           columns ``n_layers, d_model, n_heads, n_kv_heads, ffn_size,
                           vocab, arch`` with arch = ``mpt`` | ``gpt`` | ``llama``)
``gpu``                    catalog accelerator id
``n_gpus``, ``gpus_per_node``
``inter_node_gbps_per_gpu``  NIC line rate per GPU, one direction
``network``                catalog network id (latency, achievable fraction); optional
``seq_len``, ``micro_batch``, ``grad_accum``  (``micro_batch`` may be ``auto``: what ``predict``
                           would choose; ``global_batch_seqs`` then fixes the batch)
``sharding``               full | grad_op | optimizer | none | hybrid
``recompute``              none | selective | full | op-selective | auto
``reduce_dtype``           fp32 | bf16
``dropout``                true when attention and residual dropout were on (optional)
``precision``              as ``predict --precision`` (optional; default bf16)
``power_cap_w``            board power limit below TDP (optional)
``tie_word_embeddings``    true when the LM head shares the embedding (optional; default:
                           true for gpt/mpt, false for llama architecture columns)
``busbw_allreduce_intra_gbs``, ``busbw_allreduce_inter_gbs``, ``busbw_allgather_inter_gbs``,
``busbw_reducescatter_inter_gbs``  measured bus bandwidths (GB/s; optional), as ``predict
                           --busbw-*-gbs``
``tokens_per_s_per_gpu``   the measurement
=========================  =========================================================

The parallel layout and the run's switches (optional columns, named and valued as
``predict``'s flags; a missing column or an empty cell takes the default: for a knob whose
default is the framework's, :data:`fsdpsim.plan.knobs.FRAMEWORK`, the ``recipe`` profile's,
:func:`fsdpsim.plan.knobs.knob_default`, as ``predict`` without the flag;
:class:`fsdpsim.plan.parallel.ParallelPlan` documents each):

=========================  =========================================================
``tp``, ``pp``, ``cp``     tensor, pipeline, context-parallel degrees (default 1); the
                           data-parallel degree is ``n_gpus / (tp·pp·cp)``
``vpp``                    model chunks per pipeline rank (default 1); ``auto`` with
                           pp > 1: the interleaved schedule with the fastest chunk count
                           that fits
``pp_schedule``            gpipe | 1f1b | interleaved | zb-h1 (default: interleaved when
                           vpp > 1, else 1f1b)
``pp_first_layers``,       layers on the first / last pipeline stage (default: the
``pp_last_layers``         framework's split, :mod:`fsdpsim.plan.pipeline_split`)
``pp_layers``              layers on every pipeline stage, comma-separated (``31,32,32,31``;
                           default: the framework's split, as ``predict --pp-layers``)
``recompute_layers``       layers of each stage that recompute (default: all)
``recipe``                 torch (default) or megatron: the mixed-precision recipe
                           (ParallelPlan ``framework``; any framework profile name)
``shard_group_size``       HSDP's shard group, or InternEvo's zero1 group with sharding
                           optimizer and recipe internevo (default: see ParallelPlan)
``ep``, ``etp``            expert-parallel and expert-tensor-parallel degrees (default 1
                           and tp)
``moe_capacity_factor``,   token dropping (a capacity factor) or the dropless busiest-rank
``moe_imbalance``          load (default: dropless at the balanced-routing floor)
each plan switch's column its ``column`` in :mod:`fsdpsim.plan.knobs` (the plan
                           switches, :data:`~fsdpsim.plan.knobs.PLAN_SWITCHES`: sequence
                           parallelism, TP overlap, the CP kind, EP overlap), valued as its
                           ``predict`` flag, empty as ``predict`` without it
each kernel knob's column  its ``column`` in :mod:`fsdpsim.plan.knobs` (the kernel knobs,
                           :data:`~fsdpsim.plan.knobs.KERNEL_KNOBS`), valued as its
                           ``predict`` flag (``fsdpsim predict --help``)
``preset``, ``mtp_layers`` the model as a preset id (published MoE rows), its MTP modules
=========================  =========================================================

Published tables (the columns of ``validation/data/published_calibration.csv`` and
``hybrid_calibration.csv``, and vTrain's ground truth) are recognised and converted by
:mod:`fsdpsim.measured.published.tables`. Rows fsdpsim cannot model (mixture of experts, an
accelerator not in the catalog, a layout the plan rejects) are kept with a ``skip`` reason
instead of a silently wrong number; in fsdpsim's own schema such a row is an error that names
it.

Each cell is checked by :mod:`fsdpsim.measured.cells`; a row's unstated micro-batch, recompute
mode or model chunks get what ``predict`` would choose (:mod:`fsdpsim.measured.auto_knobs`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fsdpsim import engine

from fsdpsim.drivers import sensitivity
from fsdpsim.measured import grid, shipped
from fsdpsim.measured.auto_knobs import asks_auto_vpp, each_cell, resolve_auto_knobs
from fsdpsim.measured.cells import COLUMN_RULES, check_columns, read_cells
from fsdpsim.measured.published import tables as published, vtrain
from fsdpsim.hardware.catalog import Catalog, load_catalog
from fsdpsim.util.errors import ConfigError, shown
from fsdpsim.util.files import MAX_TABLE_BYTES, open_capped
from fsdpsim.engine.peaks import bf16_linear_share, gemm_peak_flops_per_s
from fsdpsim.measured.rows import is_empty, row_setup
from fsdpsim.plan.parallel import TrainingConfig
from fsdpsim.drivers.predict import config_inputs
from fsdpsim.measured.published.plan import gpu_generation

REQUIRED = ("gpu", "n_gpus", "gpus_per_node", "inter_node_gbps_per_gpu", "seq_len",
            "micro_batch", "grad_accum", "sharding", "recompute", "tokens_per_s_per_gpu")


def load_measurements(path: str | Path, catalog: Catalog | None = None) -> pd.DataFrame:
    """Read a measurements CSV (fsdpsim schema, the published-runs layout or vTrain's); the
    catalog (default: the built-in one) matches free-text GPU names of published tables."""
    path = shipped.resolve(path)
    text = str(path)
    if (text.strip() and "\0" not in text and not Path(text).exists()
            and not Path(text).is_symlink()):
        raise ConfigError(f"measurements file {shown(text)} does not exist; give a CSV path or the "
                          f"name of a shipped one ({', '.join(shipped.names())})")
    source = open_capped(path, "measurements file", MAX_TABLE_BYTES)
    try:
        # labels stay text ("1e400", "inf"); low_memory=False: each column's type is read from
        # all its cells at once, not chunk by chunk (which warns DtypeWarning on mixed columns)
        raw = pd.read_csv(source, dtype={"id": str}, low_memory=False)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path}: the file is empty; a measurements CSV has a header line "
                          f"({', '.join(REQUIRED)}, model) and one line per run") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot parse as CSV: "
                          f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"
                          ) from None
    if raw.empty:
        raise ConfigError(f"{path}: no rows, only a header line; a measurements CSV has one "
                          "line per run below the header")
    if not isinstance(raw.index, pd.RangeIndex):  # pandas made the extra leading cells an index
        raise ConfigError(_extra_fields(path, source))
    raw.columns = [str(c).strip().lstrip("\ufeff") for c in raw.columns]
    catalog = catalog or load_catalog()
    missing = published.missing_columns(raw.columns) if "source_key" in raw.columns else []
    if missing:
        raise ConfigError(f"{path}: missing column(s) {'; '.join(missing)}; required in the "
                          f"published-runs layout (source_key): "
                          f"{', '.join(published.REQUIRED)} and a measurement column")
    if "source_key" in raw.columns or vtrain.is_vtrain(raw.columns):
        frame = (published.from_published(raw, catalog) if "source_key" in raw.columns
                 else vtrain.from_vtrain(raw))
        _label_rows(frame)
        read_cells(frame, COLUMN_RULES, skip=True)  # implausible cells: skipped with the reason
        frame = _check_layouts(frame, catalog, strict=False)
        return resolve_auto_knobs(frame, catalog) if "source_key" in raw.columns else frame
    missing = [c for c in REQUIRED if c not in raw.columns]
    if "model" not in raw.columns and "n_layers" not in raw.columns:  # no model to build
        missing.append("model")
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(missing)}; required: "
                          f"{', '.join(REQUIRED)} and model (or the architecture columns)")
    frame = raw.copy()
    if "skip" not in frame.columns:
        frame["skip"] = ""
    frame["skip"] = frame["skip"].fillna("")
    _label_rows(frame)
    check_columns(frame)
    if "generation" not in frame.columns:
        frame["generation"] = [_generation(catalog, g) for g in frame["gpu"]]
    return resolve_auto_knobs(_check_layouts(frame, catalog, strict=True), catalog)


def _extra_fields(path: str | Path, source) -> str:
    """The message for a CSV whose rows hold more fields than its header: the first such line
    (pandas takes the extra leading cells of every row as an index, shifting the columns)."""
    import csv
    import io

    data = source.getvalue() if isinstance(source, io.BytesIO) else Path(source).read_bytes()
    reader = csv.reader(io.StringIO(data.decode("utf-8-sig", "replace")))
    header = next(reader, [])
    for row in reader:
        if len(row) > len(header):
            return (f"{path}: line {reader.line_num} has {len(row)} fields, the header "
                    f"{len(header)}; each line takes one field per header column")
    return f"{path}: rows hold more fields than the header's {len(header)}"


def _label_rows(frame: pd.DataFrame) -> None:
    """Every row's ``id`` as text; ``row-N`` where the file gives none."""
    ids = frame["id"] if "id" in frame.columns else [None] * len(frame)
    frame["id"] = [f"row-{i + 1}" if is_empty(v) else str(v) for i, v in enumerate(ids)]


def _generation(catalog: Catalog, gpu: Any) -> str:
    try:
        return gpu_generation(catalog.accelerator(str(gpu)).id)
    except ConfigError:  # reported by the row's checks
        return gpu_generation(str(gpu))


def _check_layouts(frame: pd.DataFrame, catalog: Catalog, strict: bool) -> pd.DataFrame:
    """Build every modelled row's plan and check it against its model (heads by TP, layers by
    PP × vpp, sequence by CP): a published row the plan refuses gets the reason as ``skip``;
    in fsdpsim's own schema (``strict``) it is an error naming the row."""
    frame = frame.copy()
    # one setup per group of equal rows, one check per layout (groups that differ only in
    # their measured bus bandwidths, which the checks do not read)
    setups = grid.Setups(frame, catalog)
    checked: set[int] = set()
    checked_layouts: set[int] = set()
    auto_vpp = (each_cell(asks_auto_vpp, frame["vpp"].tolist()) if "vpp" in frame.columns
                else [False] * len(frame))
    for position, (i, skip, row_id) in enumerate(zip(frame.index, frame["skip"].tolist(),
                                                     frame["id"].tolist())):
        group = int(setups.group[position])
        if skip or auto_vpp[position] or group in checked:
            continue
        try:
            spec, system, plan, options = setups(position)
            layout = int(setups.layout[position])
            if layout not in checked_layouts:
                plan.check_model(n_layers=spec.n_layers, n_heads=spec.n_heads,
                                 n_kv_heads=spec.kv_heads, seq_len=options["seq_len"],
                                 n_experts=spec.n_experts,
                                 expert_ffn_size=spec.expert_size if spec.is_moe else 0)
                training = TrainingConfig(**options)
                bf16_linear_share(spec, training)  # BF16 layers of this model
                gemm_peak_flops_per_s(system.accelerator, training.precision)  # the GPU runs it
                checked_layouts.add(layout)
            checked.add(group)
        except ConfigError as exc:
            if strict:
                raise ConfigError(f"row {row_id!r}: {exc}") from None
            frame.at[i, "skip"] = f"layout: {exc}"
    return frame


def engine_inputs(frame: pd.DataFrame, catalog: Catalog) -> dict[str, np.ndarray]:
    """Stack the engine inputs of every row (rows with a ``skip`` reason must be dropped):
    :func:`fsdpsim.engine.build.config_inputs` of the row's objects (the one builder ``predict``
    uses) plus its micro-batch, accumulation and recompute mode; built once per group of rows
    that describe the same run (:func:`fsdpsim.measured.grid.engine_inputs`), identical to
    :func:`engine_inputs_per_row`."""
    from fsdpsim.measured import grid

    return grid.engine_inputs(frame, catalog)


def engine_inputs_per_row(frame: pd.DataFrame, catalog: Catalog) -> dict[str, np.ndarray]:
    """:func:`engine_inputs` one row at a time (the reference the grid path is tested
    against)."""
    per_row: list[dict[str, Any]] = []
    for _, row in frame.iterrows():
        spec, system, plan, options = row_setup(row, catalog)
        mb, ga = int(row["micro_batch"]), int(row["grad_accum"])
        training = TrainingConfig(micro_batch=mb, recompute=str(row["recompute"]), **options)
        x = config_inputs(spec, system, plan, training)
        x.update({"micro_batch": mb, "grad_accum": ga,
                  "recompute": engine.RECOMPUTE_CODES[training.recompute]})
        per_row.append(x)
    from fsdpsim.engine.build_moe import uniform_keys

    per_row = uniform_keys(per_row)
    keys = per_row[0].keys()
    return {k: np.array([np.asarray(r[k], dtype=float) for r in per_row]) for k in keys}


def predict_measurements(frame: pd.DataFrame, catalog: Catalog,
                         overrides: dict[str, Any] | None = None, *, intervals: bool = False,
                         measurements: str | Path | None = None) -> pd.DataFrame:
    """Predicted tokens/s per GPU and relative error for every modelled row; with
    ``intervals`` also each row's 90 % range and whether it holds the measurement
    (:func:`fsdpsim.measured.ranges.add_intervals`; ``measurements``: the file's path, which
    tells in-sample rows from the others)."""
    use = frame[frame["skip"] == ""].reset_index(drop=True)
    if use.empty:
        raise ConfigError("no row of the measurements file can be modelled "
                          "(all rows have a skip reason)")
    # each distinct run once (rows that repeat a run share its prediction), unless per-row
    # overrides make every row its own
    setups = grid.Setups(use, catalog)
    x, run = grid.distinct_inputs(use, catalog, setups)
    if overrides:
        x, run = {k: v[run] for k, v in x.items()}, np.arange(len(use))
        x.update(overrides)
    n_runs = len(next(iter(x.values())))
    out = engine.evaluate(x)

    def per_row(values):
        return np.broadcast_to(np.asarray(values), n_runs)[run]

    result = use.copy()
    result["predicted_tokens_per_s_per_gpu"] = per_row(out["tokens_per_s_per_gpu"])
    result["predicted_mfu"] = per_row(out["mfu"])
    result["fits"] = per_row(out["fits"])
    # MoE rows (some layer routes to experts) are summarised apart from dense ones
    result["moe"] = per_row(np.asarray(out.get("moe_s", 0.0)) > 0)
    # the bottleneck as predict reports it (fsdpsim.drivers.sensitivity), not the engine's heuristic
    words = np.array(engine.BOTTLENECKS, dtype=object)
    result["bottleneck"] = words[per_row(sensitivity.analyse(x)["bottleneck"]).astype(np.int64)
                                 ].tolist()
    measured = result["tokens_per_s_per_gpu"].astype(float)
    result["error"] = result["predicted_tokens_per_s_per_gpu"] / measured - 1.0
    if intervals:
        from fsdpsim.measured.ranges import add_intervals

        result = add_intervals(result, x, out, catalog, measurements, run, setups)
    return result
