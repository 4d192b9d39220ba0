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
``seq_len``, ``micro_batch``, ``grad_accum``
``sharding``               full | grad_op | optimizer | none | hybrid
``recompute``              none | selective | full
``reduce_dtype``           fp32 | bf16
``fused_loss``             true when the run used a fused cross-entropy (optional)
``tokens_per_s_per_gpu``   the measurement
=========================  =========================================================

The published calibration file in ``shared/validation`` (columns ``source_key``, ``gpu`` as
"A100 80GB", ...) is recognised and converted. Rows fsdpsim cannot model yet (tensor or pipeline
parallel) are kept with a ``skip`` reason instead of a silently wrong number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fsdpsim import engine
from fsdpsim.catalog import Catalog
from fsdpsim.errors import ConfigError
from fsdpsim.model import ModelSpec
from fsdpsim.parallel import ParallelPlan, TrainingConfig
from fsdpsim.predict import config_inputs
from fsdpsim.system import resolve_system

REQUIRED = ("gpu", "n_gpus", "gpus_per_node", "inter_node_gbps_per_gpu", "seq_len",
            "micro_batch", "grad_accum", "sharding", "recompute", "tokens_per_s_per_gpu")
_GPU_NAMES = {"a100 80gb": "a100-sxm4-80gb", "a100 sxm4 80gb": "a100-sxm4-80gb",
              "a100 40gb": "a100-sxm4-40gb"}


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "y")
    return bool(value) and not (isinstance(value, float) and np.isnan(value))


def _first_int(text: Any) -> int:
    return int(str(text).strip().split()[0])


def _from_published(raw: pd.DataFrame) -> pd.DataFrame:
    """Convert ``published_calibration.csv`` rows to the fsdpsim schema."""
    rows = []
    for _, r in raw.iterrows():
        skip = ""
        tp, pp = r.get("tp"), r.get("pp")
        if (pd.notna(tp) and tp > 1) or (pd.notna(pp) and pp > 1) or pd.isna(tp):
            skip = "tensor/pipeline parallel: not modelled yet"
        sharding_text = str(r.get("sharding", "")).lower()
        sharding = ("grad_op" if "grad_op" in sharding_text else
                    "full" if ("full_shard" in sharding_text or "zero-3" in sharding_text)
                    else "none")
        if r["source_key"] != "mosaicml_llmfoundry":
            skip = skip or "framework other than PyTorch FSDP: not modelled yet"
        inter = str(r.get("inter_node_interconnect", ""))
        per_node_gbps = 1600.0 if "1600" in inter else 8 * 200.0
        gpn = _first_int(r["gpus_per_node"])
        measured = r["tokens_per_s_per_gpu"]
        precision = str(r.get("precision", ""))
        rows.append({
            "id": r["id"], "arch": "mpt" if str(r["model"]).lower().startswith("mpt") else "gpt",
            "model": r["model"], "n_layers": r["n_layers"], "d_model": r["d_model"],
            "n_heads": r["n_heads"], "n_kv_heads": r["n_kv_heads"], "ffn_size": r["ffn_size"],
            "vocab": r["vocab"], "gpu": _GPU_NAMES.get(str(r["gpu"]).lower(), str(r["gpu"])),
            "n_gpus": int(r["n_gpus"]), "gpus_per_node": gpn,
            "inter_node_gbps_per_gpu": per_node_gbps / gpn, "seq_len": int(r["seq_len"]),
            "network": "mosaicml-roce-200" if "roce" in inter.lower() else "ib-hdr-200",
            "micro_batch": r["micro_batch"], "grad_accum": r["grad_accum"],
            "sharding": sharding,
            "recompute": "full" if str(r["activation_checkpointing"]).startswith("full") else "none",
            # Composer's FSDP mixed precision: PURE sets reduce_dtype bf16; DEFAULT leaves it
            # None, which FSDP1 resolves to param_dtype (bf16). Both reduce in bf16.
            "reduce_dtype": "bf16" if "bf16" in precision.lower() else "fp32",
            # llm-foundry's MPT defaults to flash-attn's fused cross-entropy (MPTConfig loss_fn).
            "fused_loss": True,
            "tokens_per_s_per_gpu": measured, "subset": r.get("subset", ""),
            "skip": skip or ("" if pd.notna(measured) else "no tokens/s measurement"),
        })
    return pd.DataFrame(rows)


def load_measurements(path: str | Path) -> pd.DataFrame:
    """Read a measurements CSV (fsdpsim schema or the published calibration file)."""
    try:
        raw = pd.read_csv(path)
    except FileNotFoundError:
        raise ConfigError(f"measurements file {str(path)!r} does not exist") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot parse as CSV: {exc}") from None
    raw.columns = [str(c).strip().lstrip("\ufeff") for c in raw.columns]
    if "source_key" in raw.columns:
        return _from_published(raw)
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
    return frame


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


def engine_inputs(frame: pd.DataFrame, catalog: Catalog) -> dict[str, np.ndarray]:
    """Stack the engine inputs of every row (rows with a ``skip`` reason must be dropped)."""
    per_row: list[dict[str, Any]] = []
    for _, row in frame.iterrows():
        spec = spec_for_row(row)
        network = row.get("network")
        system = resolve_system(catalog, gpu=str(row["gpu"]),
                                gpus_per_node=int(row["gpus_per_node"]),
                                network=str(network) if isinstance(network, str) and network else None,
                                inter_node_gbps_per_gpu=float(row["inter_node_gbps_per_gpu"]))
        plan = ParallelPlan(num_gpus=int(row["n_gpus"]), gpus_per_node=int(row["gpus_per_node"]),
                            sharding=str(row["sharding"]))
        mb, ga = int(row["micro_batch"]), int(row["grad_accum"])
        training = TrainingConfig(seq_len=int(row["seq_len"]), micro_batch=mb,
                                  recompute=str(row["recompute"]),
                                  reduce_dtype=str(row.get("reduce_dtype", "fp32")),
                                  fused_loss=_truthy(row.get("fused_loss", False)))
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


def summarise(result: pd.DataFrame) -> dict[str, float]:
    """MAPE, median and worst absolute error (fractions), and the row count."""
    err = result["error"].abs()
    return {"rows": int(len(result)), "mape": float(err.mean()),
            "median_ape": float(err.median()), "worst_ape": float(err.max()),
            "bias": float(result["error"].mean())}
