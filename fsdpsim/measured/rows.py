"""One measurement row as fsdpsim's objects: its model (a preset or the architecture columns),
its parallel plan, system and training options, with the schema's layout defaults
(:data:`PLAN_COLUMNS`) and the cell readers :mod:`fsdpsim.measured.cells` checks files with."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import pandas as pd

from fsdpsim.hardware.catalog import Catalog
from fsdpsim.util.errors import ConfigError, shown
from fsdpsim.model.spec import ModelSpec, check_plausible_size
from fsdpsim.plan.knobs import (FRAMEWORK, KNOBS, PLAN_SWITCHES, knob_default, option_default,
                                plan_field)
from fsdpsim.plan.parallel import ParallelPlan
from fsdpsim.hardware.system import BUSBW_COLUMNS, domain_gpus, resolve_system


#: Block families of the architecture columns (mpt and gpt: GELU, LayerNorm, learned positions).
ARCHES = ("gpt", "mpt", "llama")


#: The defaults of the schema's knob columns and layout cells (a missing column or an empty
#: cell): a knob's column (:attr:`fsdpsim.plan.knob.Knob.column`) its option's default, None for
#: a knob whose default is the framework's (:data:`fsdpsim.plan.knobs.FRAMEWORK`; its empty cell
#: read by :func:`knob`); the framework column ``recipe`` torch (fsdp2's profile).
PLAN_COLUMNS = {**{k.column: option_default(k.name) for k in KNOBS.values() if k.column},
                "recipe": "torch", "preset": None, "mtp_layers": None}


#: The knobs whose column :func:`plan_cells` reads: plan fields, not the plan switches nor the
#: scale-up domain (the caller's, :func:`row_setup`).
_PLAN_CELLS = tuple(k for k in KNOBS.values() if k.column and plan_field(k)
                    and k.name not in PLAN_SWITCHES and k.name != "gpus_per_node")

_TRUE, _FALSE = ("1", "true", "yes", "y"), ("0", "false", "no", "n")


def flag(row: pd.Series, column: str, default: bool) -> bool:
    """A true/false cell; empty (or no such column) is the default."""
    value = row.get(column, default)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if is_empty(value):
        return default
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    if isinstance(value, (int, float, np.integer, np.floating)) and value in (0, 1):
        return bool(value)
    raise ConfigError(f"row {shown(row.get('id'))}: column {column}: {shown(value)} is not "
                      f"accepted; accepted: true or false ({', '.join(_TRUE + _FALSE)}), or "
                      "empty")


#: The cells :func:`spec_for_row` reads (``id`` only to name the row in an error).
SPEC_COLUMNS = ("seq_len", "preset", "mtp_layers", "n_layers", "d_model", "n_heads",
                "n_kv_heads", "ffn_size", "vocab", "arch", "tie_word_embeddings", "model")


def spec_for_row(row: pd.Series) -> ModelSpec:
    """The model of one measurement row: a preset/config path, or the architecture columns."""
    from fsdpsim.model.presets import get_model

    seq = int(row["seq_len"])
    preset = cell(row, "preset") if "preset" in row else None
    if preset is not None:  # a published MoE row: the preset, with its MTP modules as stated
        spec = get_model(str(preset))
        mtp = whole_cell(row, "mtp_layers")
        return spec if mtp is None else dataclasses.replace(spec, mtp_layers=mtp)
    if "n_layers" in row and pd.notna(row.get("n_layers")):
        missing = [c for c in ("d_model", "n_heads", "ffn_size", "vocab")
                   if c not in row or pd.isna(row.get(c))]
        if missing:
            raise ConfigError(f"row {shown(row.get('id'))}: n_layers is given, so the "
                              f"architecture columns are needed too; missing: {', '.join(missing)}")
        arch = "gpt" if is_empty(row.get("arch")) else str(row.get("arch")).strip().lower()
        if arch not in ARCHES:
            raise ConfigError(f"row {shown(row.get('id'))}: column arch: {shown(row.get('arch'))} "
                              f"is not accepted; accepted: {', '.join(ARCHES)}")
        heads = int(row["n_heads"])
        kv = int(row["n_kv_heads"]) if pd.notna(row.get("n_kv_heads")) else heads
        llama = arch == "llama"
        tied = flag(row, "tie_word_embeddings", not llama)
        return check_plausible_size(ModelSpec(
            name=str(row.get("model", "model")), n_layers=int(row["n_layers"]),
            d_model=int(row["d_model"]), n_heads=heads, n_kv_heads=kv,
            ffn_size=int(row["ffn_size"]), ffn_kind="swiglu" if llama else "gelu",
            vocab_size=int(row["vocab"]), tied_embeddings=tied,
            position="rotary" if llama else "learned", max_seq_len=seq,
            norm="rmsnorm" if llama else "layernorm", norm_bias=not llama,
            qkv_bias=not llama, attn_out_bias=not llama, mlp_bias=not llama),
            f"row {shown(row.get('id'))}")
    spec = get_model(str(row["model"]))
    return spec.with_seq_len(seq) if spec.position == "learned" else spec


def cell(row: pd.Series, column: str) -> Any:
    """A layout cell of the row, or its :data:`PLAN_COLUMNS` default when missing or empty."""
    value = row.get(column)
    if value is None or (isinstance(value, float) and value != value) or \
            (isinstance(value, str) and value.strip().lower() in ("", "nan")):
        return PLAN_COLUMNS[column]
    return value


def whole_cell(row: pd.Series, column: str) -> int | None:
    value = cell(row, column)
    return None if value is None else int(float(value))


def _text_cell(row: pd.Series, column: str) -> str | None:
    """A text cell (``31,32,32,31``), or None when missing or empty; a number read by pandas
    comes back as its whole-number text."""
    value = cell(row, column)
    if value is None or isinstance(value, str):
        return value
    return str(int(value)) if float(value) == int(value) else str(value)


def knob(row: pd.Series, column: str) -> Any:
    """The cell of a knob whose default is the framework's (:data:`fsdpsim.plan.knobs.FRAMEWORK`)
    in ``column``; where it is empty, what the row's framework profile (column ``recipe``) does
    by default (:func:`fsdpsim.plan.knobs.knob_default`, the default ``predict`` takes
    when the flag is not given)."""
    value = row.get(column)
    if is_empty(value):
        return _knob_default(str(cell(row, "recipe") or "torch"), column,
                             str(row.get("precision", "bf16")))
    return value


@functools.lru_cache(maxsize=4096)
def _knob_default(framework: str, column: str, precision: str) -> Any:
    """:func:`fsdpsim.plan.knobs.knob_default` (a table lookup of immutable values),
    remembered: a file's rows ask for few distinct ones."""
    return knob_default(framework, column, precision)


def row_plan(row: pd.Series, gpus_per_node: int, vpp: int | None = None) -> ParallelPlan:
    """The :class:`ParallelPlan` of one measurement row (``vpp`` overrides the row's, for the
    ``auto`` chunk count): each plan field with a knob column (:func:`plan_cells`) and the plan
    switches (:func:`switch_cells`); a clear error when the plan's checks refuse it."""
    return ParallelPlan(num_gpus=int(row["n_gpus"]), gpus_per_node=gpus_per_node,
                        **plan_cells(row, **({"vpp": vpp} if vpp else {})),
                        **switch_cells(row))


def plan_cells(row: pd.Series, **given: Any) -> dict[str, Any]:
    """The ParallelPlan fields one measurement row states other than the plan switches: every
    knob that is a plan field (:func:`fsdpsim.plan.knobs.plan_field`) with a column, the
    framework's in ``recipe``, each cell read as its kind reads it (a whole number as an int,
    a text as text, a choice as a word; :data:`PLAN_COLUMNS` for an empty one); a field in
    ``given`` instead of its cell (which is not read)."""
    out: dict[str, Any] = {}
    for k in _PLAN_CELLS:
        if k.key in given:
            out[k.key] = given[k.key]
        elif k.kind == "number":
            out[k.key] = whole_cell(row, k.column)
        elif k.kind == "text":
            out[k.key] = _text_cell(row, k.column)
        else:
            value = cell(row, k.column)
            out[k.key] = None if value is None else str(value)
    return out


def switch_cells(row: pd.Series) -> dict[str, Any]:
    """The plan switches (:data:`fsdpsim.plan.knobs.PLAN_SWITCHES`) of one measurement row,
    each from its column as its kind reads it (a flag by :func:`flag`); an empty cell is the
    :data:`PLAN_COLUMNS` default, the row's framework profile's for a knob whose default is the
    framework's (:func:`knob`), None where the plan decides (sequence parallelism)."""
    out: dict[str, Any] = {}
    for name in PLAN_SWITCHES:
        k = KNOBS[name]
        value = knob(row, k.column) if k.default == FRAMEWORK else cell(row, k.column)
        if k.kind == "flag":
            out[name] = flag(row, k.column, None if value is None else bool(value))
        else:
            out[name] = None if value is None else str(value)
    return out


def row_setup(row: pd.Series, catalog: Catalog, vpp: int | None = None,
              spec: ModelSpec | None = None) -> tuple[ModelSpec, Any, ParallelPlan, dict]:
    """The model, system, plan and training options one measurement row describes (``spec``:
    its :func:`spec_for_row`, when already built).

    The scale-up domain is what ``predict`` uses (:func:`fsdpsim.hardware.system.domain_gpus`): the
    row's GPUs per node, or on NVL72 racks the GPUs the job uses in each rack."""
    spec = spec if spec is not None else spec_for_row(row)
    system = row_system(row, catalog, int(row["gpus_per_node"]))
    per_domain = domain_gpus(system, int(row["n_gpus"]))
    if per_domain != system.gpus_per_node:
        system = row_system(row, catalog, per_domain)
    plan = row_plan(row, per_domain, vpp)
    options = dict(seq_len=int(row["seq_len"]), reduce_dtype=str(row.get("reduce_dtype", "fp32")),
                   precision=str(row.get("precision", "bf16")),
                   flash_attention=flag(row, "flash_attention", True),
                   dropout=flag(row, "dropout", False),
                   recompute_layers=whole_cell(row, "recompute_layers"),
                   moe_imbalance=_float_or_none(cell(row, "moe_imbalance")),
                   **framework_knobs(row))
    return spec, system, plan, options


def row_system(row: pd.Series, catalog: Catalog, gpus_per_node: int):
    """The :class:`~fsdpsim.hardware.spec.System` of one measurement row with ``gpus_per_node``
    GPUs in its scale-up domain: its GPU, network, NIC rate, power cap and measured bus
    bandwidths (:data:`fsdpsim.hardware.system.BUSBW_COLUMNS`, the only cells of the row's
    setup that enter nothing but the system)."""
    network = row.get("network")
    gbps = float(row["inter_node_gbps_per_gpu"])
    cap = float(row.get("power_cap_w", float("nan")))
    busbw = {c: row.get(c) for c in BUSBW_COLUMNS if not is_empty(row.get(c))}
    return resolve_system(
        catalog, gpu=str(row["gpu"]), gpus_per_node=gpus_per_node,
        network=str(network) if isinstance(network, str) and network else None,
        inter_node_gbps_per_gpu=gbps if gbps == gbps else None,
        power_cap_w=cap if cap == cap else None, busbw_gbs=busbw or None)


def framework_knobs(row: pd.Series) -> dict[str, Any]:
    """The TrainingConfig fields of the knobs whose default is the framework's
    (:data:`fsdpsim.plan.knobs.FRAMEWORK`), read from their registry columns: a stated cell, else
    the row's framework profile's default (:func:`knob`), each as its kind reads it."""
    out: dict[str, Any] = {}
    for k in KNOBS.values():
        if k.default != FRAMEWORK or not (k.field or "").startswith("training."):
            continue
        value = knob(row, k.column)
        if k.kind == "flag":
            out[k.name] = flag(row, k.column, bool(value))
        elif k.kind == "number":
            out[k.name] = (_whole_or_none(value) if k.rule.whole else _float_or_none(value))
        else:
            out[k.name] = str(value or "") if k.kind == "text" else str(value)
    return out


def _whole_or_none(value: Any) -> int | None:
    return None if value is None else int(float(value))


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def row_options(row: pd.Series) -> dict[str, Any]:
    """``fsdpsim predict``'s parsed options for the run one measurement row states, read through
    the knob registry (:data:`fsdpsim.plan.knobs.KNOBS`): each predict knob from its
    :attr:`~fsdpsim.plan.knobs.Knob.column`, a cell the row leaves empty (or a knob without a
    column) being the flag not given (its option's default; the ``--framework`` profile's for
    the framework knobs, resolved where predict resolves it). The row's GPUs, accelerator and
    accumulation give ``--num-gpus``, ``--gpu`` and ``--global-batch`` (micro-batch x
    accumulation x data-parallel degree)."""
    from fsdpsim.plan.knobs import of_command, option_default

    out: dict[str, Any] = {"model": None, "gpu": str(row["gpu"]), "cluster": None,
                           "num_gpus": int(row["n_gpus"])}
    for k in of_command("predict"):
        value = None if k.column is None else row.get(k.column)
        if value is None or value is pd.NA or (isinstance(value, float) and value != value) \
                or (isinstance(value, str) and value.strip().lower() in ("", "nan")):
            out[k.name] = option_default(k.name)
        else:
            out[k.name] = _option_value(row, k, value)
    tp, pp, cp = (out[k] for k in ("tp", "pp", "cp"))
    dp = out["num_gpus"] // (tp * pp * cp)
    out["global_batch"] = str(int(out["micro_batch"]) * int(float(row["grad_accum"])) * dp)
    return out


def _option_value(row: pd.Series, k, value: Any) -> Any:
    """A stated cell as predict's option ``k`` parses it (a knob of
    :mod:`fsdpsim.plan.knobs`)."""
    if k.kind == "flag":
        return flag(row, k.column, False)
    if k.kind == "number":
        number = float(value)
        return int(number) if k.rule.whole else number
    if isinstance(value, (int, float, np.integer, np.floating)) and float(value) == int(value):
        return str(int(value))  # a text cell pandas read as a number (seq_len, pp_layers)
    return str(value)


def is_empty(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and value != value) \
        or (isinstance(value, str) and value.strip().lower() in ("", "nan", "none"))


def on_gpus(frame: pd.DataFrame, catalog: Catalog, gpus) -> pd.Series:
    """Which rows of ``frame`` ran on one of ``gpus`` (ids or aliases, as ``--gpu`` takes
    them): each row's ``gpu`` cell resolved through the catalog as its prediction resolves it
    (``h100`` is ``h100-sxm5-80gb``); a cell the catalog does not know matches nothing."""
    wanted = {catalog.accelerator(g).id for g in gpus}

    def resolved(name: Any) -> str | None:
        try:
            return catalog.accelerator(str(name)).id
        except ConfigError:
            return None

    ids = {name: resolved(name) for name in frame["gpu"].dropna().unique()}
    return frame["gpu"].map(ids).isin(wanted)
