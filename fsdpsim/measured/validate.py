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
``fused_loss``             true when the run used a fused cross-entropy (optional; empty:
                           the framework profile's default, see below)
``dropout``                true when attention and residual dropout were on (optional)
``precision``              bf16 | fp16 | fp8 | fp32 (optional; default bf16)
``power_cap_w``            board power limit below TDP (optional)
``tie_word_embeddings``    true when the LM head shares the embedding (optional; default:
                           true for gpt/mpt, false for llama architecture columns)
``busbw_allreduce_intra_gbs``, ``busbw_allreduce_inter_gbs``, ``busbw_allgather_inter_gbs``,
``busbw_reducescatter_inter_gbs``  measured bus bandwidths (GB/s; optional), as ``predict
                           --busbw-*-gbs``
``tokens_per_s_per_gpu``   the measurement
=========================  =========================================================

The parallel layout and the run's switches (optional columns, named and valued as
``predict``'s flags; a missing column or an empty cell takes the default: for the switches
``ep_overlap``, ``moe_capacity_factor``, ``moe_dispatcher``, ``fp8_attention``,
``fp8_lm_head``, ``bf16_layers``, ``cuda_graphs``, ``recompute_modules`` and ``fused_loss`` the
``recipe`` profile's, :func:`fsdpsim.plan.frameworks.knob_default`, as ``predict`` without the flag;
:class:`fsdpsim.plan.parallel.ParallelPlan` documents each):

=========================  =========================================================
``tp``, ``pp``, ``cp``     tensor, pipeline, context-parallel degrees (default 1); the
                           data-parallel degree is ``n_gpus / (tp·pp·cp)``
``vpp``                    model chunks per pipeline rank (default 1); ``auto`` with
                           pp > 1: the interleaved schedule with the fastest chunk count
                           that fits
``sequence_parallel``      true | false (default: on when tp > 1)
``pp_schedule``            gpipe | 1f1b | interleaved | zb-h1 (default: interleaved when
                           vpp > 1, else 1f1b)
``cp_kind``                ring | all2all (default ring)
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
                           and tp); ``ep_overlap`` true to hide the expert all-to-alls
``moe_capacity_factor``,   token dropping (a capacity factor) or the dropless busiest-rank
``moe_imbalance``          load (default: dropless at the balanced-routing floor)
``moe_dispatcher``         alltoall (default) or deepep (once per destination node)
``fp8_attention``          true: attention in FP8 too (low-precision rows; default false)
``fp8_lm_head``            true: the LM head's GEMMs in the format too (default false: 16-bit)
``tp_overlap``             true: TP collectives overlapped with the GEMMs (``predict
                           --tp-overlap``: Transformer Engine's userbuffers ``tp_comm_overlap``,
                           async TP; default false)
``bf16_layers``            layers kept in BF16 under a low-precision format (default: the
                           format's recipe, TrainingConfig ``bf16_layers``)
``cuda_graphs``            none (default), partial or full: what the step replays from CUDA
                           graphs (TrainingConfig ``cuda_graphs``)
``recompute_modules``      Megatron's per-module recompute, comma-separated (mla_up_proj, mlp,
                           moe_act; default none)
``preset``, ``mtp_layers`` the model as a preset id (published MoE rows), its MTP modules
=========================  =========================================================

Published tables (the columns of ``shared/validation/published_calibration.csv`` and
``hybrid_calibration.csv``, and vTrain's ground truth) are recognised and converted by
:mod:`fsdpsim.measured.published.tables`. Rows fsdpsim cannot model (mixture of experts, an accelerator not in
the catalog, a layout the plan rejects) are kept with a ``skip`` reason instead of a silently
wrong number; in fsdpsim's own schema such a row is an error that names it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fsdpsim import engine

from fsdpsim.util import numbers

from fsdpsim.drivers import sensitivity
from fsdpsim.measured import grid, shipped
from fsdpsim.measured.published import tables as published
from fsdpsim.hardware.catalog import Catalog, load_catalog
from fsdpsim.util.errors import ConfigError, shown
from fsdpsim.util.files import MAX_TABLE_BYTES, open_capped
from fsdpsim.engine.peaks import bf16_linear_share
from fsdpsim.measured.rows import (PLAN_COLUMNS, cell, is_empty, row_setup, spec_for_row,
                                      whole_cell)
from fsdpsim.model.spec import ModelSpec
from fsdpsim.util.numbers import TINY, Rule, read_number
from fsdpsim.plan.parallel import (CP_KINDS, CUDA_GRAPHS, MOE_DISPATCHERS, PP_SCHEDULES,
                              TrainingConfig)
from fsdpsim.drivers.predict import config_inputs, predict
from fsdpsim.measured.published.plan import gpu_generation
from fsdpsim.hardware.system import BUSBW_COLUMNS, BUSBW_GBS

REQUIRED = ("gpu", "n_gpus", "gpus_per_node", "inter_node_gbps_per_gpu", "seq_len",
            "micro_batch", "grad_accum", "sharding", "recompute", "tokens_per_s_per_gpu")


def load_measurements(path: str | Path, catalog: Catalog | None = None) -> pd.DataFrame:
    """Read a measurements CSV (fsdpsim schema, the published-runs layout or vTrain's); the
    catalog (default: the built-in one) matches free-text GPU names of published tables."""
    path = shipped.resolve(path)
    text = str(path)
    if text.strip() and "\0" not in text and not Path(text).exists() and not Path(text).is_symlink():
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
    if "source_key" in raw.columns or published.is_vtrain(raw.columns):
        frame = (published.from_published(raw, catalog) if "source_key" in raw.columns
                 else published.from_vtrain(raw))
        _label_rows(frame)
        _read_cells(frame, COLUMN_RULES, skip=True)  # implausible cells: skipped with the reason
        frame = _check_layouts(frame, catalog, strict=False)
        return resolve_auto_knobs(frame, catalog) if "source_key" in raw.columns else frame
    missing = [c for c in REQUIRED if c not in raw.columns]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(missing)}; required: "
                          f"{', '.join(REQUIRED)} and model (or the architecture columns)")
    frame = raw.copy()
    if "skip" not in frame.columns:
        frame["skip"] = ""
    frame["skip"] = frame["skip"].fillna("")
    _label_rows(frame)
    _check_columns(frame)
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


def _auto_vpp(vpp: Any) -> bool:
    """Whether a ``vpp`` cell asks for the chunk count ``predict`` would choose."""
    return str(vpp).strip().lower() == "auto"


def _check_layouts(frame: pd.DataFrame, catalog: Catalog, strict: bool) -> pd.DataFrame:
    """Build every modelled row's plan and check it against its model (heads by TP, layers by
    PP × vpp, sequence by CP): a published row the plan refuses gets the reason as ``skip``;
    in fsdpsim's own schema (``strict``) it is an error naming the row."""
    frame = frame.copy()
    setups = grid.Setups(frame, catalog)  # one setup and check per group of equal rows
    checked: set[int] = set()
    vpps = frame["vpp"].tolist() if "vpp" in frame.columns else [""] * len(frame)
    for position, (i, skip, row_id) in enumerate(zip(frame.index, frame["skip"].tolist(),
                                                     frame["id"].tolist())):
        group = int(setups.group[position])
        if skip or _auto_vpp(vpps[position]) or group in checked:
            continue
        try:
            spec, _, plan, options = setups(position)
            plan.check_model(n_layers=spec.n_layers, n_heads=spec.n_heads,
                             n_kv_heads=spec.kv_heads, seq_len=options["seq_len"],
                             n_experts=spec.n_experts,
                             expert_ffn_size=spec.expert_size if spec.is_moe else 0)
            bf16_linear_share(spec, TrainingConfig(**options))  # BF16 layers of this model
            checked.add(group)
        except ConfigError as exc:
            if strict:
                raise ConfigError(f"row {row_id!r}: {exc}") from None
            frame.at[i, "skip"] = f"layout: {exc}"
    return frame


def _unstated(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value)) or \
        str(value).strip().lower() in ("", "auto", "nan")


def _vpp_candidates(row: pd.Series, spec: ModelSpec) -> list[int]:
    """Model chunks per pipeline rank an ``auto`` interleaved schedule may use: every v >= 2
    with n_layers divisible by pp × v (Megatron's rule)."""
    pp = whole_cell(row, "pp")
    found = [v for v in range(2, spec.n_layers // pp + 1) if spec.n_layers % (pp * v) == 0]
    if not found:
        raise ConfigError(f"n_layers({spec.n_layers}) does not split into pp({pp}) x vpp >= 2 "
                          "model chunks (interleaved schedule)")
    return found


def resolve_auto_knobs(frame: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Rows that do not state their micro-batch, recompute mode or (interleaved schedule)
    number of model chunks get what ``predict`` would choose for them (``auto``: the fastest
    setting that fits; with the row's global batch when it is known), and a ``knobs`` column
    says so. The issue this follows: published runs rarely state these knobs, and guessing them
    badly teaches the model wrong physics."""
    frame = frame.copy()
    if "knobs" not in frame.columns:
        frame["knobs"] = ""
    for column in ("micro_batch", "grad_accum", "recompute", "knobs", "vpp"):
        if column in frame.columns:
            frame[column] = frame[column].astype(object)  # "auto" text becomes a number
    # rows that describe the same run with the same knobs are searched once (the groups are
    # found when the first row needs them)
    group: np.ndarray | None = None
    found: dict[int, tuple] = {}
    chosen_cells: dict[str, dict[int, Any]] = {
        c: {} for c in ("micro_batch", "grad_accum", "recompute", "vpp", "knobs")}
    vpps = frame["vpp"].tolist() if "vpp" in frame.columns else [""] * len(frame)
    cells = zip(frame.index, frame["skip"].tolist(), frame["micro_batch"].tolist(),
                frame["recompute"].tolist(), vpps)
    for position, (i, skip, mb, rc, vpp_cell) in enumerate(cells):
        auto_mb, auto_rc, auto_vpp = _unstated(mb), _unstated(rc), _auto_vpp(vpp_cell)
        if skip or not (auto_mb or auto_rc or auto_vpp):
            continue
        if group is None:
            group = grid.group_ids(frame, grid.setup_columns(frame, ("micro_batch", "grad_accum",
                                                                     "recompute")))
            row_at = grid.rows_of(frame)
        g = int(group[position])
        if g not in found:
            row = row_at(position)
            try:
                vpps_tried = _vpp_candidates(row, spec_for_row(row)) if auto_vpp else [None]
                best = None
                for vpp in vpps_tried:
                    chosen = _predict_knobs(row, catalog, vpp, auto_mb, auto_rc)
                    rank = tuple(float(np.ravel(a)[0]) for a in engine.choice_rank(chosen.values))
                    if best is None or rank < best[0]:
                        best = (rank, vpp, chosen.training)
            except ConfigError as exc:  # not kept: the next row of the group tries again
                frame.at[i, "skip"] = f"auto knobs: {exc}"
                continue
            found[g] = best
        _, vpp, chosen = found[g]
        for column in ("micro_batch", "grad_accum", "recompute"):
            chosen_cells[column][position] = chosen[column]
        if auto_vpp:
            chosen_cells["vpp"][position] = vpp
        chosen_cells["knobs"][position] = "auto: " + ", ".join(
            [f"{k} {chosen[k]}" for k, auto in (("micro_batch", auto_mb), ("recompute", auto_rc))
             if auto] + ([f"vpp {vpp}"] if auto_vpp else []))
    for column, cells_set in chosen_cells.items():
        if cells_set:
            values = frame[column].tolist()
            for position, value in cells_set.items():
                values[position] = value
            frame[column] = pd.Series(values, index=frame.index, dtype=object)
    _check_knobs(frame)
    return frame


def _predict_knobs(row: pd.Series, catalog: Catalog, vpp: int | None, auto_mb: bool,
                   auto_rc: bool):
    """``predict`` of one row with its unstated knobs left to ``auto``."""
    spec, system, plan, options = row_setup(row, catalog, vpp)
    global_seqs = float(row.get("global_batch_seqs", float("nan")))
    if global_seqs != global_seqs and not auto_mb and not _unstated(row["grad_accum"]):
        global_seqs = float(row["micro_batch"]) * float(row["grad_accum"]) * plan.dp
    usable = global_seqs == global_seqs and global_seqs % plan.dp == 0
    training = TrainingConfig(micro_batch=None if auto_mb else int(row["micro_batch"]),
                              recompute=None if auto_rc else str(row["recompute"]),
                              global_batch=int(global_seqs) if usable else None, **options)
    # predict's auto ranks a micro-batch count the pipeline schedule cannot run (interleaved
    # 1F1B needs whole rounds of pp) last, and refuses it when nothing else is left.
    return predict(spec, system, plan, training)


#: The numeric columns of fsdpsim's schema and what each accepts (read with the one number
#: reader, :func:`fsdpsim.util.numbers.read_number`); True: an empty cell is allowed.
_WIDTH, _LAYERS, _HEADS = (Rule(1, 2**20, whole=True), Rule(1, 2**14, whole=True),
                           Rule(1, 2**16, whole=True))
COLUMN_RULES: dict[str, tuple[Rule, bool]] = {
    "n_gpus": (numbers.GPUS, False), "gpus_per_node": (numbers.GPUS, False),
    "seq_len": (numbers.SEQ_LEN, False),
    "inter_node_gbps_per_gpu": (numbers.INTER_NODE_GBPS, True),
    "tokens_per_s_per_gpu": (numbers.TOKENS_PER_S_PER_GPU, False),
    "power_cap_w": (numbers.POWER_CAP_W, True),
    "global_batch_seqs": (numbers.COUNT, True),
    # empty or "auto" (micro_batch, grad_accum, vpp): what predict would choose
    "micro_batch": (numbers.COUNT, True), "grad_accum": (numbers.COUNT, True),
    "n_layers": (_LAYERS, True), "d_model": (_WIDTH, True), "n_heads": (_HEADS, True),
    "n_kv_heads": (_HEADS, True), "ffn_size": (_WIDTH, True),
    "vocab": (Rule(1, 2**24, whole=True), True),
    # the layout (empty: the PLAN_COLUMNS default)
    **{k: (numbers.GPUS, True) for k in ("tp", "pp", "cp", "ep", "etp", "shard_group_size")},
    "moe_capacity_factor": (Rule(0.01, 1000.0), True), "moe_imbalance": (Rule(1.0, 1000.0), True),
    "mtp_layers": (Rule(0, 64, whole=True), True),
    "vpp": (Rule(1, 1024, whole=True, also="auto"), True),
    "pp_first_layers": (_LAYERS, True), "pp_last_layers": (_LAYERS, True),
    "recompute_layers": (Rule(0, 2**14, whole=True), True),
    "bf16_layers": (Rule(0, 2**14, whole=True), True),
    # measured bus bandwidths (GB/s), read as predict reads --busbw-*-gbs
    **{c: (BUSBW_GBS, True) for c in BUSBW_COLUMNS},
}
_AUTO_COLUMNS = ("micro_batch", "grad_accum", "vpp")


def _read_cells(frame: pd.DataFrame, columns: dict[str, tuple[Rule, bool]], *,
                skip: bool = False, auto: bool = True) -> None:
    """Check the numeric cells of every modelled row and write back the numbers read (``" 8 "``
    and ``"1e3"`` become 8 and 1000); one clear error for the first cell that is not accepted,
    or with ``skip`` (published tables) that message as the row's skip reason. ``auto``: the
    word "auto" passes in the columns that take it (resolved later)."""
    for column, (rule, empty_ok) in columns.items():
        if column not in frame.columns:
            continue
        values = frame[column].astype(object).to_numpy(copy=True)
        rows = np.flatnonzero((frame["skip"] == "").to_numpy(dtype=bool))
        # each distinct cell (value and type, grid.column_codes) read once, at its first row,
        # and written to all its rows; a cell refused is read again below per row, so that
        # the message names the row
        codes = grid.column_codes(values)[rows]
        _, first, which = np.unique(codes, return_index=True, return_inverse=True)
        read = np.empty(first.size, dtype=object)
        written = np.ones(first.size, dtype=bool)
        refused = np.zeros(first.size, dtype=bool)
        cells = values[rows[first]].tolist()
        for k in _plain_floats(cells, rule):  # read as read_number reads them
            read[k] = cells[k]
        for k, value in enumerate(cells):
            if read[k] is not None:
                continue
            if empty_ok and is_empty(value):
                read[k] = float("nan")
            elif auto and isinstance(value, str) and value.strip().lower() == "auto" and \
                    column in _AUTO_COLUMNS:
                written[k] = False
            else:
                try:
                    read[k] = read_number(value, column, rule)
                except ConfigError:
                    written[k], refused[k] = False, True
        at = written[which]
        values[rows[at]] = read[which[at]]
        failed = rows[refused[which]]
        for position in failed.tolist():  # the message names each row
            try:
                read_number(values[position],
                            f"row {shown(frame['id'].iat[position])}: column {column}", rule)
            except ConfigError as exc:
                if not skip:
                    raise
                frame.at[frame.index[position], "skip"] = str(exc)
        frame[column] = pd.Series(values, index=frame.index, dtype=object)


def _plain_floats(cells: list, rule: Rule) -> np.ndarray:
    """Positions of the cells that are Python floats :func:`read_number` gives back as they are
    (finite, accepted by a rule for any number), found for all cells at once
    (:meth:`fsdpsim.util.numbers.Rule.contains`, elementwise)."""
    if rule.whole:
        return np.zeros(0, dtype=int)
    at = np.flatnonzero(np.fromiter((type(c) is float for c in cells), dtype=bool,
                                    count=len(cells)))
    x = np.array([cells[k] for k in at.tolist()], dtype=float)
    with np.errstate(invalid="ignore"):
        above = x > rule.lo if rule.lo_open else x >= rule.lo
        ok = np.isfinite(x) & above & (x <= rule.hi) & ((x == 0) | (np.abs(x) >= TINY))
    return at[ok]


def _check_columns(frame: pd.DataFrame) -> None:
    """One clear error for a row of fsdpsim's schema whose numbers are not usable."""
    _read_cells(frame, COLUMN_RULES)
    layout = ["id"] + [c for c in ("sequence_parallel", "pp_schedule", "cp_kind",
                                   "moe_dispatcher", "cuda_graphs") if c in frame.columns]
    use = frame.loc[frame["skip"] == "", layout]
    for cells in use.itertuples(index=False, name=None):
        _check_plan_columns(dict(zip(layout, cells)))


def _check_plan_columns(row: pd.Series | dict) -> None:
    """One clear error for a layout cell of fsdpsim's schema that is not usable (the numeric
    ones are read by :func:`_read_cells`)."""
    def refuse(column: str, accepted: str) -> ConfigError:
        return ConfigError(f"row {shown(row['id'])}: column {column}: {shown(row[column])} is "
                           f"not accepted; accepted: {accepted} (or empty: "
                           f"{PLAN_COLUMNS[column]})")

    sp = cell(row, "sequence_parallel")
    if sp is not None and str(sp).strip().lower() not in ("true", "false", "1", "0", "yes",
                                                          "no", "1.0", "0.0"):
        raise refuse("sequence_parallel", "true or false")
    for column, choices in (("pp_schedule", PP_SCHEDULES), ("cp_kind", CP_KINDS),
                            ("moe_dispatcher", MOE_DISPATCHERS),
                            ("cuda_graphs", CUDA_GRAPHS)):
        value = cell(row, column)
        if value is not None and str(value) not in choices:
            raise refuse(column, ", ".join(choices))


def _check_knobs(frame: pd.DataFrame) -> None:
    """One clear error for a modelled row whose micro-batch, accumulation or recompute mode is
    not usable (a traceback later would be worse)."""
    _read_cells(frame, {"micro_batch": (numbers.COUNT, False),
                        "grad_accum": (numbers.COUNT, False)}, auto=False)
    use = frame[frame["skip"] == ""]
    for row_id, recompute in zip(use["id"].tolist(), use["recompute"].tolist()):
        if str(recompute) not in engine.RECOMPUTE_CODES:
            raise ConfigError(f"row {shown(row_id)}: recompute {shown(recompute)} is "
                              f"not accepted; accepted: {', '.join(engine.RECOMPUTE_CODES)}, auto")


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
    result["bottleneck"] = [engine.BOTTLENECKS[int(b)]
                            for b in per_row(sensitivity.analyse(x)["bottleneck"])]
    measured = result["tokens_per_s_per_gpu"].astype(float)
    result["error"] = result["predicted_tokens_per_s_per_gpu"] / measured - 1.0
    if intervals:
        from fsdpsim.measured.ranges import add_intervals

        result = add_intervals(result, x, out, catalog, measurements, run, setups)
    return result
