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
``recompute``              none | selective | full | auto
``reduce_dtype``           fp32 | bf16
``fused_loss``             true when the run used a fused cross-entropy (optional)
``precision``              bf16 | fp16 | fp8 | fp32 (optional; default bf16)
``power_cap_w``            board power limit below TDP (optional)
``tokens_per_s_per_gpu``   the measurement
=========================  =========================================================

Published tables (the columns of ``shared/validation/published_calibration.csv``, and vTrain's
ground truth) are recognised and converted by :mod:`fsdpsim.published`. Rows fsdpsim cannot
model yet (tensor or pipeline parallel, an accelerator not in the catalog) are kept with a
``skip`` reason instead of a silently wrong number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fsdpsim import engine
from fsdpsim import published
from fsdpsim.catalog import Catalog, load_catalog
from fsdpsim.errors import ConfigError
from fsdpsim.model import ModelSpec
from fsdpsim.parallel import ParallelPlan, TrainingConfig
from fsdpsim.predict import config_inputs, predict
from fsdpsim.system import resolve_system

REQUIRED = ("gpu", "n_gpus", "gpus_per_node", "inter_node_gbps_per_gpu", "seq_len",
            "micro_batch", "grad_accum", "sharding", "recompute", "tokens_per_s_per_gpu")
def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "y")
    return bool(value) and not (isinstance(value, float) and np.isnan(value))


def load_measurements(path: str | Path, catalog: Catalog | None = None) -> pd.DataFrame:
    """Read a measurements CSV (fsdpsim schema, the published-runs layout or vTrain's); the
    catalog (default: the built-in one) matches free-text GPU names of published tables."""
    try:
        raw = pd.read_csv(path)
    except FileNotFoundError:
        raise ConfigError(f"measurements file {str(path)!r} does not exist") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot parse as CSV: {exc}") from None
    raw.columns = [str(c).strip().lstrip("\ufeff") for c in raw.columns]
    catalog = catalog or load_catalog()
    if "source_key" in raw.columns:
        return resolve_auto_knobs(published.from_published(raw, catalog), catalog)
    if published.is_vtrain(raw.columns):
        return published.from_vtrain(raw)
    missing = [c for c in REQUIRED if c not in raw.columns]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(missing)}; required: "
                          f"{', '.join(REQUIRED)} and model (or the architecture columns)")
    frame = raw.copy()
    if "skip" not in frame.columns:
        frame["skip"] = ""
    frame["skip"] = frame["skip"].fillna("")
    if "id" not in frame.columns:
        frame["id"] = [f"row-{i + 1}" for i in range(len(frame))]
    _check_columns(frame)
    return resolve_auto_knobs(frame, catalog)


def spec_for_row(row: pd.Series) -> ModelSpec:
    """The model of one measurement row: a preset/config path, or the architecture columns."""
    from fsdpsim.presets import get_model

    seq = int(row["seq_len"])
    if "n_layers" in row and pd.notna(row.get("n_layers")):
        arch = str(row.get("arch", "gpt")).lower()
        heads = int(row["n_heads"])
        kv = int(row["n_kv_heads"]) if pd.notna(row.get("n_kv_heads")) else heads
        llama = arch == "llama"
        return ModelSpec(
            name=str(row.get("model", "model")), n_layers=int(row["n_layers"]),
            d_model=int(row["d_model"]), n_heads=heads, n_kv_heads=kv,
            ffn_size=int(row["ffn_size"]), ffn_kind="swiglu" if llama else "gelu",
            vocab_size=int(row["vocab"]), tied_embeddings=not llama,
            position="rotary" if llama else "learned", max_seq_len=seq,
            norm="rmsnorm" if llama else "layernorm", norm_bias=not llama,
            qkv_bias=not llama, attn_out_bias=not llama, mlp_bias=not llama)
    spec = get_model(str(row["model"]))
    return spec.with_seq_len(seq) if spec.position == "learned" else spec


def _row_setup(row: pd.Series, catalog: Catalog) -> tuple[ModelSpec, Any, ParallelPlan, dict]:
    """The model, system, plan and training options one measurement row describes."""
    spec = spec_for_row(row)
    network = row.get("network")
    gbps = float(row["inter_node_gbps_per_gpu"])
    cap = float(row.get("power_cap_w", float("nan")))
    system = resolve_system(catalog, gpu=str(row["gpu"]),
                            gpus_per_node=int(row["gpus_per_node"]),
                            network=str(network) if isinstance(network, str) and network else None,
                            inter_node_gbps_per_gpu=gbps if gbps == gbps else None,
                            power_cap_w=cap if cap == cap else None)
    plan = ParallelPlan(num_gpus=int(row["n_gpus"]), gpus_per_node=int(row["gpus_per_node"]),
                        sharding=str(row["sharding"]))
    options = dict(seq_len=int(row["seq_len"]), reduce_dtype=str(row.get("reduce_dtype", "fp32")),
                   precision=str(row.get("precision", "bf16")),
                   flash_attention=_truthy(row.get("flash_attention", True)),
                   fused_loss=_truthy(row.get("fused_loss", False)))
    return spec, system, plan, options


def _unstated(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value)) or \
        str(value).strip().lower() in ("", "auto", "nan")


def resolve_auto_knobs(frame: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Rows that do not state their micro-batch or recompute mode get what ``predict`` would
    choose for them (``auto``: the fastest setting that fits; with the row's global batch when
    it is known), and a ``knobs`` column says so. The issue this follows: published runs rarely
    state these knobs, and guessing them badly teaches the model wrong physics."""
    frame = frame.copy()
    if "knobs" not in frame.columns:
        frame["knobs"] = ""
    for column in ("micro_batch", "grad_accum", "recompute", "knobs"):
        frame[column] = frame[column].astype(object)  # "auto" text becomes a number
    for i, row in frame.iterrows():
        auto_mb, auto_rc = _unstated(row["micro_batch"]), _unstated(row["recompute"])
        if row["skip"] or not (auto_mb or auto_rc):
            continue
        spec, system, plan, options = _row_setup(row, catalog)
        global_seqs = float(row.get("global_batch_seqs", float("nan")))
        if global_seqs != global_seqs and not auto_mb and not _unstated(row["grad_accum"]):
            global_seqs = float(row["micro_batch"]) * float(row["grad_accum"]) * plan.dp
        usable = global_seqs == global_seqs and global_seqs % plan.dp == 0
        training = TrainingConfig(micro_batch=None if auto_mb else int(row["micro_batch"]),
                                  recompute=None if auto_rc else str(row["recompute"]),
                                  global_batch=int(global_seqs) if usable else None, **options)
        try:
            chosen = predict(spec, system, plan, training).training
        except ConfigError as exc:
            frame.at[i, "skip"] = f"auto knobs: {exc}"
            continue
        frame.at[i, "micro_batch"] = chosen["micro_batch"]
        frame.at[i, "grad_accum"] = chosen["grad_accum"]
        frame.at[i, "recompute"] = chosen["recompute"]
        frame.at[i, "knobs"] = "auto: " + ", ".join(
            f"{k} {chosen[k]}" for k, auto in (("micro_batch", auto_mb), ("recompute", auto_rc))
            if auto)
    _check_knobs(frame)
    return frame


def _number_or_nan(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _whole(value: Any) -> bool:
    """A finite whole number >= 1."""
    number = _number_or_nan(value)
    return bool(np.isfinite(number) and number >= 1 and number == int(number))


def _check_columns(frame: pd.DataFrame) -> None:
    """One clear error for a row of fsdpsim's schema whose numbers are not usable."""
    for _, row in frame[frame["skip"] == ""].iterrows():
        for column in ("n_gpus", "gpus_per_node", "seq_len"):
            if not _whole(row[column]):
                raise ConfigError(f"row {row['id']!r}: {column} {row[column]!r} is not accepted; "
                                  "accepted: a whole number >= 1")
        for column, empty_ok in (("inter_node_gbps_per_gpu", True), ("tokens_per_s_per_gpu", False)):
            text = str(row[column]).strip().lower()
            number = _number_or_nan(row[column])
            if empty_ok and text in ("", "nan", "none"):
                continue
            if not (np.isfinite(number) and number > 0):
                raise ConfigError(f"row {row['id']!r}: {column} {row[column]!r} is not accepted; "
                                  "accepted: a positive number" + (" (or empty)" if empty_ok else ""))


def _check_knobs(frame: pd.DataFrame) -> None:
    """One clear error for a modelled row whose micro-batch, accumulation or recompute mode is
    not usable (a traceback later would be worse)."""
    for _, row in frame[frame["skip"] == ""].iterrows():
        for column in ("micro_batch", "grad_accum"):
            if not _whole(row[column]):
                raise ConfigError(f"row {row['id']!r}: {column} {row[column]!r} is not accepted; "
                                  "accepted: a whole number >= 1, or auto (micro_batch)")
        if str(row["recompute"]) not in engine.RECOMPUTE_CODES:
            raise ConfigError(f"row {row['id']!r}: recompute {row['recompute']!r} is not "
                              f"accepted; accepted: {', '.join(engine.RECOMPUTE_CODES)}, auto")


def engine_inputs(frame: pd.DataFrame, catalog: Catalog) -> dict[str, np.ndarray]:
    """Stack the engine inputs of every row (rows with a ``skip`` reason must be dropped)."""
    per_row: list[dict[str, Any]] = []
    for _, row in frame.iterrows():
        spec, system, plan, options = _row_setup(row, catalog)
        mb, ga = int(row["micro_batch"]), int(row["grad_accum"])
        training = TrainingConfig(micro_batch=mb, recompute=str(row["recompute"]), **options)
        x = config_inputs(spec, system, plan, training)
        x.update({"micro_batch": mb, "grad_accum": ga,
                  "recompute": engine.RECOMPUTE_CODES[training.recompute]})
        per_row.append(x)
    keys = per_row[0].keys()
    return {k: np.array([np.asarray(r[k], dtype=float) for r in per_row]) for k in keys}


def predict_measurements(frame: pd.DataFrame, catalog: Catalog,
                         overrides: dict[str, Any] | None = None) -> pd.DataFrame:
    """Predicted tokens/s per GPU and relative error for every modelled row."""
    use = frame[frame["skip"] == ""].reset_index(drop=True)
    if use.empty:
        raise ConfigError("no row of the measurements file can be modelled "
                          "(all rows have a skip reason)")
    x = engine_inputs(use, catalog)
    if overrides:
        x.update(overrides)
    out = engine.evaluate(x)
    result = use.copy()
    result["predicted_tokens_per_s_per_gpu"] = out["tokens_per_s_per_gpu"]
    result["predicted_mfu"] = out["mfu"]
    result["fits"] = out["fits"]
    result["bottleneck"] = [engine.BOTTLENECKS[int(b)] for b in np.broadcast_to(
        out["bottleneck"], len(use))]
    measured = result["tokens_per_s_per_gpu"].astype(float)
    result["error"] = result["predicted_tokens_per_s_per_gpu"] / measured - 1.0
    return result


def by_framework(frame: pd.DataFrame, framework: str | None) -> pd.DataFrame:
    """Rows whose ``framework`` contains ``framework`` (case-insensitive); all rows for None.
    A file without a framework column counts as PyTorch FSDP (fsdpsim's own schema)."""
    if not framework:
        return frame
    names = frame["framework"] if "framework" in frame.columns else pd.Series(
        "PyTorch FSDP", index=frame.index)
    return frame[names.fillna("").str.lower().str.contains(framework.lower(), regex=False)]


def summarise_groups(result: pd.DataFrame, column: str = "framework") -> dict[str, dict]:
    """:func:`summarise` per value of ``column`` (e.g. per framework)."""
    if column not in result.columns:
        return {}
    return {str(name): summarise(group) for name, group in result.groupby(column, sort=True)}


def summarise(result: pd.DataFrame) -> dict[str, float]:
    """MAPE, median and worst absolute error (fractions), and the row count."""
    err = result["error"].abs()
    return {"rows": int(len(result)), "mape": float(err.mean()),
            "median_ape": float(err.median()), "worst_ape": float(err.max()),
            "bias": float(result["error"].mean())}
