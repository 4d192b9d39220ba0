"""Read published measurement tables into fsdpsim's measurement schema.

Two layouts are recognised besides fsdpsim's own (see :mod:`fsdpsim.measured.validate`):

* **published runs** (``validation/data/published_calibration.csv`` and files with its
  columns: ``source_key``, ``gpu`` as "A100 80GB", ``framework``, ``sharding``,
  ``tp``/``pp``/``cp``, free-text ``precision``, ``inter_node_interconnect`` ...). Every row is read
  by what it says, not by which source it comes from: the accelerator is matched against the
  catalog, the inter-node network is parsed from its text, the measurement is taken from tokens/s,
  step time or TFLOP/s per GPU (with the accounting the row states).
* **vTrain ground truth** (``vtrain_ground_truth_*.csv``: ``# GPUs``, ``hidden size``, ...,
  ``iteration time (ms)``; Megatron-DeepSpeed GPT runs on A100, Bang et al., MICRO 2024),
  read by :mod:`fsdpsim.measured.published.vtrain`.

The whole parallel layout is carried over: tensor, pipeline (with virtual stages), context and
data parallelism, sequence parallelism, the pipeline schedule, and the switches a row states
in columns named as ``predict``'s flags (:data:`STATED_COLUMNS`). What a row leaves unstated is
filled by the conventions of the framework it names
(:data:`fsdpsim.measured.published.conventions.FRAMEWORK_CONVENTIONS`: e.g. Megatron-Core's
distributed optimizer and sequence parallelism; the switches by its profile,
:data:`fsdpsim.plan.frameworks.KNOB_DEFAULTS`) or left to ``auto``; column ``modelled_as`` says
where a row is modelled by something close to, but not exactly, what ran.
Rows fsdpsim cannot model (a MoE model that is not a preset; an accelerator missing from the
catalog; a
layout that does not multiply to the GPU count; no measurement) keep a ``skip`` reason instead
of getting a silently wrong number.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np
import pandas as pd

from fsdpsim.hardware.catalog import Catalog
from fsdpsim.measured.published.conventions import framework_conventions, unrecognised
from fsdpsim.plan.frameworks import profile
from fsdpsim.plan.knobs import KERNEL_KNOBS, KNOBS, PLAN_SWITCHES, knob_default
from fsdpsim.measured.rows import is_empty
from fsdpsim.hardware.system import BUSBW_COLUMNS
from fsdpsim.costs.vocab import VOCAB_MULTIPLE
from fsdpsim.measured.published.text import (
    arch_of,
    cell_count,
    cell_number,
    cell_positive,
    cell_text,
    count_or_nan,
    match_accelerator,
    number_or,
    parse_network,
    parse_power_cap,
    parse_precision,
    parse_recompute,
    parse_sharding,
    sharding_words,
    tp_vocab,
    uses_flash_attention,
)
from fsdpsim.measured.published.plan import (
    UNFIT_FORMATS,
    gpu_generation,
    precision_format,
    read_layout,
)


# ------------------------------------------------------------------------------ measurement
def tokens_per_s_per_gpu(r: pd.Series, model_flops=None) -> tuple[float, str]:
    """The measured tokens/s per GPU of a published row and where it came from.

    In order: ``tokens_per_s_per_gpu``; ``tokens_per_s_total`` / GPUs; global batch tokens /
    ``step_time_s`` / GPUs; ``tflops_per_gpu`` (or ``mfu_pct`` × ``peak_tflops_basis``) divided
    by the FLOPs per token of the accounting the row states: Megatron's eq. 3 (Narayanan et al.,
    SC21, counts the recompute forward: 96·l·h²·(1 + s/6h + V/16lh) per token) when
    ``tflops_counts_recompute`` says so, otherwise model FLOPs 6·N + 12·L·d·s per token (full
    attention square: the llm-foundry benchmarking README, NeMo 1.x and 24.x/25.0x tables), or
    6·N + 6·L·d·s where the row says its count is causal (Megatron-Bridge tables). N is
    ``moe_active_params`` when stated; in a table with that column (``hybrid_calibration.csv``,
    whose README defines it) a dense model's N is its parameters less the input embedding
    (NeMo's count); otherwise ``n_params``. ``model_flops`` = ``(name, flops_per_token(causal))``:
    the model's own count instead of 6·N + c·L·d·s (a preset's with MLA's attention and the MTP
    modules the tables count: :func:`fsdpsim.measured.published.moe.preset_flops_per_token`)."""
    value, source = _measured(r, model_flops)
    return (value, source) if np.isfinite(value) and value > 0 else (float("nan"), "")


def stated_tflops(r: pd.Series) -> float:
    """Model TFLOP/s per GPU a row states: ``tflops_per_gpu``, else ``mfu_pct`` × the stated
    peak (MFU = model TFLOP/s per GPU / ``peak_tflops_basis``), else NaN."""
    tflops = cell_positive(r.get("tflops_per_gpu"))
    mfu = cell_positive(r.get("mfu_pct"))
    peak = cell_positive(r.get("peak_tflops_basis"))
    if tflops != tflops and mfu == mfu and peak == peak:
        tflops = mfu / 100.0 * peak
    return tflops


def _counts_causal(r: pd.Series) -> bool:
    """Whether the row's TFLOP/s count causal attention (half the score/value work)."""
    counting = cell_text(r.get("tflops_counts_recompute")).lower()
    return "causal" in counting and "non-causal" not in counting


def _measured(r: pd.Series, model_flops=None) -> tuple[float, str]:
    """:func:`tokens_per_s_per_gpu` before the check that the value is usable (every input is a
    finite positive number or NaN, so nothing divides by zero)."""
    n_gpus, seq = cell_positive(r.get("n_gpus")), cell_positive(r.get("seq_len"))
    direct = cell_positive(r.get("tokens_per_s_per_gpu"))
    if direct == direct:
        return direct, "tokens_per_s_per_gpu"
    total = cell_positive(r.get("tokens_per_s_total"))
    if total == total:
        return total / n_gpus, "tokens_per_s_total"
    step = cell_positive(r.get("step_time_s"))
    tokens = cell_positive(r.get("global_batch_tokens"))
    if tokens != tokens:
        tokens = cell_positive(r.get("global_batch_seqs")) * seq
    if step == step and tokens == tokens:
        return tokens / step / n_gpus, "step_time_s"
    tflops = stated_tflops(r)
    if tflops == tflops:
        layers, d, vocab = (cell_positive(r.get(k)) for k in ("n_layers", "d_model", "vocab"))
        if "yes" in cell_text(r.get("tflops_counts_recompute")).lower():
            per_token = 96 * layers * d**2 * (1 + seq / (6 * d) + vocab / (16 * layers * d))
            return tflops * 1e12 / per_token, "tflops_per_gpu (Megatron eq. 3)"
        n_params = cell_positive(r.get("n_params"))
        active = cell_positive(r.get("moe_active_params"))
        if active != active and "moe_active_params" in r.index:
            active = n_params - vocab * d  # active weights incl. the LM head, less the embedding
        n = active if active == active and active > 0 else n_params
        causal = _counts_causal(r)
        attention = 6 if causal else 12  # per layer per token: fwd + bwd of QK^T and AV
        if n == n and model_flops is not None:
            name, flops_per_token = model_flops
            return (tflops * 1e12 / flops_per_token(causal),
                    f"tflops_per_gpu ({name} model FLOPs, {'causal' if causal else 'full'} "
                    "attention, MTP counted)")
        if n == n:
            return (tflops * 1e12 / (6 * n + attention * layers * d * seq),
                    f"tflops_per_gpu (6N+{attention}Lds)")
    return float("nan"), ""


# ------------------------------------------------------------------------------ converters
#: The plan switches a published row's layout sets (:func:`fsdpsim.measured.published.plan.
#: read_layout`: stated, else the framework's convention); the others are stated columns.
_LAYOUT_SWITCHES = ("sequence_parallel",)
#: Columns a published row may state about its run, named and valued as ``predict``'s flags
#: (``moe_imbalance`` is ``--moe-imbalance``, ``recompute_modules`` is ``--recompute-modules``
#: ...); a stated cell is passed on as the row's setting, an empty one leaves the framework
#: profile's default (:mod:`fsdpsim.plan.frameworks`). True/false columns are read as booleans,
#: the others as written (the measurement checks refuse a bad cell with the row's skip reason).
STATED_COLUMNS = ("mtp_layers", "moe_capacity_factor", "moe_imbalance",
                  *(KNOBS[k].column for k in KERNEL_KNOBS if KNOBS[k].column), "etp",
                  "pp_first_layers", "pp_last_layers", "pp_layers",
                  *(KNOBS[k].column for k in PLAN_SWITCHES if k not in _LAYOUT_SWITCHES))
#: The true/false ones among them (flags of :mod:`fsdpsim.plan.knobs`).
_FLAGS = tuple(k.column for k in KNOBS.values() if k.kind == "flag" and k.column in
               STATED_COLUMNS)
#: What a row's ``recompute`` cell (``predict --recompute``) accepts.
RECOMPUTE_CELLS = ("none", "selective", "full", "op-selective", "auto")


def _framework_selective(recompute: str, conventions: dict[str, Any]) -> str:
    """A row's ``selective`` recompute as its framework runs it: torchtitan's selective
    checkpointing is its op-level policy (``selective_ac_option = "op"``, its default:
    ``op-selective``); Megatron's is the attention core (``selective``)."""
    return conventions.get("selective", recompute) if recompute == "selective" else recompute


def stated_columns(r: pd.Series) -> dict[str, Any]:
    """The :data:`STATED_COLUMNS` cells the row fills (in that order)."""
    stated: dict[str, Any] = {}
    for column in STATED_COLUMNS:
        value = r.get(column)
        if is_empty(value):
            continue
        if column in _FLAGS and isinstance(value, str):
            low = value.strip().lower()
            value = True if low in ("true", "yes", "1") else False if low in (
                "false", "no", "0") else value
        stated[column] = value
    return stated


def from_published(raw: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Convert rows with the published-calibration columns to the fsdpsim schema, with their
    whole parallel layout (:func:`fsdpsim.measured.published.plan.read_layout`) and the conventions
    of the framework each row names where it does not say."""
    from fsdpsim.measured import grid

    # a file repeats few GPU names: each distinct (name, memory) is matched once (the match
    # depends on nothing else)
    accelerators: dict[tuple[str, float | None], str | None] = {}
    # Rows that differ only in their label and measurement are converted once, and their
    # converted cells are built as one row per group and repeated; the label, the cells passed
    # through and the measurement (:func:`tokens_per_s_per_gpu`) are read for every row.
    group = grid.group_ids(raw, [c for c in raw.columns if c != "id" and c not in
                                 MEASUREMENT_ONLY and c not in PASSED_THROUGH])
    values = raw.values
    row_at, columns = grid.rows_of(raw, values), list(raw.columns)
    ids = raw["id"].tolist() if "id" in raw.columns else None
    converted: list[tuple[dict[str, Any], str, str, Any]] = []
    own_columns = ["id", *PASSED_THROUGH, "tokens_per_s_per_gpu", "measured_from", "skip"]
    passed = [columns.index(c) if c in columns else -1 for c in PASSED_THROUGH]
    direct = _direct_measurements(raw)
    at_direct = columns.index("tokens_per_s_per_gpu") if direct.any() else -1
    own: list[tuple] = []  # the cells read per row, in the order of own_columns
    for position, cells in enumerate(values):
        g = int(group[position])
        if g == len(converted):  # groups are numbered in order of first appearance
            converted.append(_convert(row_at(position), raw.columns, catalog, accelerators))
        _, before, after, model_flops = converted[g]
        if direct[position]:  # the first source _measured reads, stated and usable
            measured, measured_from = float(cells[at_direct]), "tokens_per_s_per_gpu"
        else:
            measured, measured_from = tokens_per_s_per_gpu(grid.Cells(zip(columns, cells)),
                                                           model_flops)
        no_measurement = ("no measurement (tokens/s, step time or TFLOP/s per GPU)"
                          if measured != measured else "")
        own.append((ids[position] if ids is not None else f"row-{position + 1}",
                    *[cells[i] if i >= 0 else float("nan") for i in passed],
                    measured, measured_from, before or no_measurement or after))
    # one row per group, with the per-row cells' columns where a row puts them (their values
    # replaced below): the columns, their order and each column's type are those of one frame
    # built from every row's cells (rows as tuples: pandas reads them as it reads dicts)
    first_own = dict(zip(own_columns, own[0]))
    shared = pd.DataFrame([{**row, **first_own} for row, *_ in converted])
    frame = shared.iloc[group].reset_index(drop=True)
    for column, cells in pd.DataFrame(own, columns=own_columns).items():
        frame[column] = cells
    return frame


def _direct_measurements(raw: pd.DataFrame) -> np.ndarray:
    """Rows whose ``tokens_per_s_per_gpu`` is a finite number > 0 in a numeric column: their
    measurement is that cell (:func:`_measured`'s first source, read for all rows at once)."""
    column = raw.get("tokens_per_s_per_gpu")
    if column is None or column.dtype.kind not in "fiu":
        return np.zeros(len(raw), dtype=bool)
    a = column.to_numpy(dtype=float)
    return np.isfinite(a) & (a > 0)


#: Columns of a published row that only its measurement reads (:func:`_measured`).
MEASUREMENT_ONLY = ("tokens_per_s_per_gpu", "tokens_per_s_total", "step_time_s",
                    "tflops_per_gpu", "mfu_pct")
#: Columns a published-layout file must have (:func:`_convert` skips a row whose cell is
#: empty; a file without the column has no row to model), and one of :data:`MEASUREMENT_ONLY`.
REQUIRED = ("model", "gpu", "n_gpus", "seq_len", "n_layers", "d_model", "n_heads", "vocab")


def missing_columns(columns) -> list[str]:
    """The required columns (:data:`REQUIRED`, a measurement column) a published-layout file
    lacks, each as a reader would name it; [] where it has them all."""
    missing = [c for c in REQUIRED if c not in columns]
    if not any(c in columns for c in MEASUREMENT_ONLY):
        missing.append(" or ".join(MEASUREMENT_ONLY))
    return missing
#: Columns a published row's conversion copies as they are (:func:`_convert`), set per row.
PASSED_THROUGH = ("tie_word_embeddings", *BUSBW_COLUMNS)


def _convert(r: pd.Series, columns, catalog: Catalog,
             accelerators: dict) -> tuple[dict[str, Any], str, str, Any]:
    """One published row in the fsdpsim schema without its label and measurement: the row,
    the skip reason found before the measurement is read and the one after it, and the
    model's own FLOP count (``model_flops`` of :func:`tokens_per_s_per_gpu`)."""
    framework = cell_text(r.get("framework"))
    conventions = framework_conventions(framework)
    counts = {k: cell_count(r.get(k)) for k in ("n_gpus", "seq_len", "n_layers", "d_model",
                                             "n_heads", "vocab")}
    n_gpus = counts["n_gpus"] or 1
    layout, notes, skip = read_layout(r, columns, n_gpus, counts["n_layers"], conventions)
    modelled_as = list(notes)
    if not conventions and unrecognised(framework):
        modelled_as.append(f"framework {framework!r} unrecognised: the fsdp2 profile")
    moe, said, why = _moe_columns(r)
    modelled_as += said
    skip = skip or why
    gpu_text = cell_text(r.get("gpu"))
    gpu = _accelerator(r, catalog, accelerators)
    if gpu is None:
        skip = skip or f"GPU {gpu_text!r} is not in the catalog"
    unstated = [k for k, v in counts.items() if v is None]
    if unstated:
        skip = skip or f"{', '.join(unstated)} not stated as whole numbers"
    gpn, network, per_gpu = _nodes(r, catalog, gpu, n_gpus, framework)
    precision_text = cell_text(r.get("precision"))
    precision, reduce_dtype, number_format = _number_format(precision_text, framework)
    model_parallel = np.prod([layout.get(k, 1) for k in ("tp", "pp", "cp")])
    dp = n_gpus // model_parallel if n_gpus % model_parallel == 0 else n_gpus
    sharding, shard_group, said = _sharding(r, framework, conventions, dp)
    modelled_as += said
    # An unstated micro-batch stays unstated: measured.auto_knobs.resolve_auto_knobs gives it
    # what predict's auto would choose (with the global batch when it is known).
    batch = _batch(r, dp)
    model_flops = _preset_flops(moe, counts["seq_len"])
    before = skip
    model = cell_text(r.get("model"))
    heads = cell_number(r.get("n_heads"))
    vocab, said = _vocab(counts["vocab"], layout.get("tp", 1))
    modelled_as += said
    cap = parse_power_cap(catalog, gpu, gpu_text, cell_text(r.get("notes")))
    texts = [cell_text(r.get(k)) for k in ("notes", "framework", "source", "source_locator")]
    generation = gpu_generation(gpu or gpu_text)
    recipe = conventions.get("profile", "fsdp2")
    recompute, skip = _recompute(r, conventions)
    return {
        "id": "", "arch": arch_of(model), "model": model,
        # the counts as read ("80 (assumed)" -> 80); NaN where not stated (then skipped)
        "n_layers": count_or_nan(counts["n_layers"]), "d_model": count_or_nan(counts["d_model"]),
        "n_heads": heads,
        "n_kv_heads": number_or(r.get("n_kv_heads"), heads),
        "ffn_size": number_or(r.get("ffn_size"), 4 * cell_number(r.get("d_model"))),
        "vocab": vocab, "gpu": gpu or gpu_text, "n_gpus": n_gpus, "gpus_per_node": gpn,
        "inter_node_gbps_per_gpu": per_gpu if per_gpu else float("nan"),
        "network": network or "",
        "seq_len": counts["seq_len"] or 1,
        "micro_batch": batch["micro_batch"], "grad_accum": batch["grad_accum"],
        "sharding": sharding, "shard_group_size": shard_group,
        "recompute": recompute,
        "global_batch_seqs": batch["global_batch_seqs"],
        # the model's own tying where stated; measured bus bandwidths of the job (GB/s)
        "tie_word_embeddings": r.get("tie_word_embeddings", float("nan")),
        **{c: r.get(c, float("nan")) for c in BUSBW_COLUMNS},
        **{k: layout.get(k, v) for k, v in (("tp", 1), ("pp", 1), ("cp", 1), ("vpp", 1))},
        "pp_schedule": layout.get("pp_schedule", ""),
        "sequence_parallel": layout.get("sequence_parallel", False),
        "pp_first_layers": layout.get("pp_first_layers", float("nan")),
        "pp_last_layers": layout.get("pp_last_layers", float("nan")),
        "ep": number_or(r.get("ep"), 1.0),
        **moe,
        "precision": precision, "reduce_dtype": reduce_dtype,
        # the framework's recipe for BF16 layers under a low-precision format (else the
        # format's own default, TrainingConfig.bf16_layers)
        "bf16_layers": (moe["bf16_layers"] if "bf16_layers" in moe
                        else _or_nan(knob_default(recipe, "bf16_layers", precision))),
        "precision_format": number_format, "precision_note": precision_text,
        # llm-foundry's MPT defaults to flash-attn's fused cross-entropy (MPTConfig loss_fn).
        "fused_loss": (moe["fused_loss"] if "fused_loss" in moe else arch_of(model) == "mpt"
                       or bool(conventions.get("fused_loss", knob_default(recipe, "fused_loss")))),
        "flash_attention": _flash(texts, conventions, generation),
        "power_cap_w": cap if cap is not None else float("nan"),
        "framework": framework, "source_key": cell_text(r.get("source_key")),
        "recipe": recipe,
        "dropout": bool(conventions.get("dropout", False)) and arch_of(model) == "gpt",
        "generation": generation, "tokens_per_s_per_gpu": float("nan"),
        "measured_from": "", "subset": cell_text(r.get("subset")),
        "modelled_as": "; ".join(modelled_as), "skip": "",
    }, before, skip, model_flops


def _moe_columns(r: pd.Series) -> tuple[dict[str, Any], list[str], str]:
    """A mixture-of-experts row's preset and its columns (:func:`fsdpsim.measured.published.
    moe.moe_row`), with the switches the row states (:func:`stated_columns`); what it is
    modelled as and why it is skipped ('' if not)."""
    moe: dict[str, Any] = {}
    said: list[str] = []
    why = ""
    if cell_positive(r.get("ep")) > 1 or cell_positive(r.get("moe_experts")) > 0:
        from fsdpsim.measured.published.moe import moe_row

        moe, said, why = moe_row(cell_text(r.get("model")),
                                 mtp_stated=not is_empty(r.get("mtp_layers")))
    moe.update(stated_columns(r))
    return moe, said, why


def _accelerator(r: pd.Series, catalog: Catalog, accelerators: dict) -> str | None:
    """The catalog accelerator of the row's GPU text and memory (None if there is none),
    matched once per (text, memory) into ``accelerators``."""
    gpu_text = cell_text(r.get("gpu"))
    memory_gb = cell_number(r.get("gpu_mem_gb"))
    gpu_key = (gpu_text, memory_gb if memory_gb == memory_gb else None)  # NaN: one key
    if gpu_key not in accelerators:
        accelerators[gpu_key] = match_accelerator(catalog, gpu_text, memory_gb)
    return accelerators[gpu_key]


def _nodes(r: pd.Series, catalog: Catalog, gpu: str | None, n_gpus: int,
           framework: str) -> tuple[int, str | None, float | None]:
    """GPUs per node (as stated, else up to 8; a rack-scale NVLink domain's size, NVL72, whose
    trays share it), and the inter-node network with its bandwidth per GPU parsed from the
    row's text."""
    gpn = cell_count(r.get("gpus_per_node"))
    gpn = gpn if gpn and gpn <= 1e6 else min(n_gpus, 8)
    domain = catalog.accelerator(gpu).link.domain_size if gpu else None
    if domain and domain > 8:
        gpn = domain
    network, per_gpu = parse_network(cell_text(r.get("inter_node_interconnect")), gpn,
                                     cell_text(r.get("source_key")) + " " + framework)
    return gpn, network, per_gpu


def _number_format(precision_text: str, framework: str) -> tuple[str, str, str]:
    """The compute precision, the gradient-reduction dtype and the number format of the row's
    precision text; a block-scaled or 4-bit format is reduced as FP8 recipes reduce."""
    precision, reduce_dtype = parse_precision(precision_text, framework)
    number_format = precision_format(precision_text, precision)
    if number_format in UNFIT_FORMATS:
        reduce_dtype = parse_precision("fp8", framework)[1]
        precision = number_format
    return precision, reduce_dtype, number_format


def _sharding(r: pd.Series, framework: str, conventions: dict,
              dp: int) -> tuple[str, Any, list[str]]:
    """The sharding (as stated, else the framework's default) and ZeRO-1's shard group (NaN:
    all ``dp`` ranks; groups only where the framework runs them), with what is modelled as
    something close to what ran."""
    said = []
    sharding_text = cell_text(r.get("sharding"))
    sharding = parse_sharding(sharding_text, framework)
    if conventions.get("sharding") and sharding_words(sharding_text) is None:
        sharding = conventions["sharding"]
        said.append(f"sharding not stated: {conventions['name']}'s default ({sharding})")
    zero_group = re.search(r"zero1\s*=\s*(\d+)", sharding_text.lower())
    shard_group = float("nan")
    if sharding == "optimizer" and zero_group and 1 < int(zero_group.group(1)) < dp:
        if profile(conventions.get("profile", "fsdp2")).zero1_groups:  # as run
            shard_group = int(zero_group.group(1))
        else:
            said.append(f"ZeRO-1 within groups of {zero_group.group(1)} modelled "
                        f"over all {dp} data-parallel ranks")
    return sharding, shard_group, said


def _batch(r: pd.Series, dp: int) -> dict[str, float]:
    """Micro-batch, gradient accumulation and global batch [sequences] as stated; an unstated
    accumulation follows from the global batch (1 without one: the per-token cost barely
    depends on it, the optimizer amortised)."""
    mb, ga = cell_positive(r.get("micro_batch")), cell_positive(r.get("grad_accum"))
    global_seqs = cell_positive(r.get("global_batch_seqs"))
    if ga != ga and mb == mb:
        ga = max(1.0, round(global_seqs / (mb * dp))) if global_seqs == global_seqs else 1.0
    return {"micro_batch": mb, "grad_accum": ga, "global_batch_seqs": global_seqs}


def _preset_flops(moe: dict[str, Any], seq_len: int | None):
    """A preset's own FLOP count per token (MLA's attention, the MTP modules) for
    :func:`tokens_per_s_per_gpu`: (preset, function), None for the other rows."""
    if not moe.get("preset"):
        return None
    from fsdpsim.measured.published.moe import preset_flops_per_token

    return (moe["preset"], functools.partial(preset_flops_per_token, moe["preset"],
                                             moe.get("mtp_layers"), seq_len or 1))


def _vocab(vocab: int | None, tp: int) -> tuple[Any, list[str]]:
    """The vocabulary as read (NaN where not stated, then skipped), padded as Megatron pads
    it under tensor parallelism (:func:`tp_vocab`), with a note where padding changes it."""
    if not vocab or tp <= 1:
        return count_or_nan(vocab), []
    padded = tp_vocab(vocab, tp)
    if padded == vocab:
        return padded, []
    return padded, [f"vocab {vocab} padded to {padded} (Megatron: a multiple of "
                    f"{VOCAB_MULTIPLE} x tp)"]


def _recompute(r: pd.Series, conventions: dict) -> tuple[str, str]:
    """The recompute mode: the ``recompute`` column, else the activation-checkpointing text,
    else the framework's convention (``auto`` without one); and the skip reason of a
    ``recompute`` cell that is not accepted ('' if none)."""
    checkpointing = cell_text(r.get("activation_checkpointing"))
    stated = cell_text(r.get("recompute")).strip().lower()
    why = ""
    if stated and stated not in RECOMPUTE_CELLS:
        why = (f"column recompute: {stated!r} is not accepted; accepted: "
               f"{', '.join(RECOMPUTE_CELLS)} (or empty)")
        stated = ""
    return _framework_selective(
        stated or parse_recompute(checkpointing) if stated or _stated(checkpointing)
        else conventions.get("recompute", "auto"), conventions), why


def _or_nan(value: Any) -> Any:
    return float("nan") if value is None else value


def _flash(texts: list[str], conventions: dict, generation: str) -> bool:
    """Fused attention: as the row says; else the framework's default (Megatron-Core: on);
    else by date (:func:`uses_flash_attention`). FlashAttention's kernels need sm_75+ (v1) /
    sm_80+ (v2), so a Volta run that says nothing is eager."""
    if re.search(r"flash|eager attention|math attention", " ".join(texts).lower()):
        return uses_flash_attention(*texts)
    return generation != "Volta" and (bool(conventions.get("flash"))
                                      or uses_flash_attention(*texts))


def _stated(text: str) -> bool:
    """Whether a knob's cell says something ("not stated", "?", "" say nothing)."""
    low = text.strip().lower()
    return bool(low) and not re.match(r"(not|none) stated|unknown|n/?a$|\?$", low)
