"""Read published measurement tables into fsdpsim's measurement schema.

Two layouts are recognised besides fsdpsim's own (see :mod:`fsdpsim.measurements`):

* **published runs** (``shared/validation/published_calibration.csv`` and files with its
  columns: ``source_key``, ``gpu`` as "A100 80GB", ``framework``, ``sharding``, ``tp``/``pp``/``cp``,
  free-text ``precision``, ``inter_node_interconnect`` ...). Every row is read by what it says,
  not by which source it comes from: the accelerator is matched against the catalog, the
  inter-node network is parsed from its text, the measurement is taken from tokens/s, step
  time or TFLOP/s per GPU (with the accounting the row states).
* **vTrain ground truth** (``vtrain_ground_truth_*.csv``: ``# GPUs``, ``hidden size``, ...,
  ``iteration time (ms)``; Megatron-DeepSpeed GPT runs on A100, Bang et al., MICRO 2024).

The whole parallel layout is carried over: tensor, pipeline (with virtual stages), context and
data parallelism, sequence parallelism, the pipeline schedule. What a row leaves unstated is
filled by the conventions of the framework it names
(:data:`fsdpsim.published_plan.FRAMEWORK_CONVENTIONS`: e.g.
Megatron-Core's distributed optimizer and sequence parallelism) or left to ``auto``; column
``modelled_as`` says where a row is modelled by something close to, but not exactly, what ran.
Rows fsdpsim cannot model (mixture of experts; an accelerator missing from the catalog; a
layout that does not multiply to the GPU count; no measurement) keep a ``skip`` reason instead
of getting a silently wrong number.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from fsdpsim.catalog import Catalog
from fsdpsim.errors import ConfigError
from fsdpsim.numbers import number_in_text
from fsdpsim.published_plan import (
    UNFIT_FORMATS,
    framework_conventions,
    gpu_generation,
    precision_format,
    read_layout,
)

#: Megatron-DeepSpeed GPT vocabulary (GPT-2 BPE) of the vTrain runs.
VTRAIN_VOCAB = 50257
#: Megatron pads the vocabulary to a multiple of ``make_vocab_size_divisible_by`` (default 128)
#: × TP so that the embedding and LM head split evenly (``_vocab_size_with_padding``).
MEGATRON_VOCAB_MULTIPLE = 128
#: What the vTrain README states for its runs: A100 nodes of 8 GPUs, NVLink inside a node,
#: 4x 200 Gb/s HDR InfiniBand per node, activation checkpointing (github.com/VIA-Research/vTrain).
VTRAIN_GPU, VTRAIN_GPUS_PER_NODE, VTRAIN_NODE_GBPS = "a100-sxm4-80gb", 8, 4 * 200.0

_GBPS = r"g(?:b/s|bps|bit/s|b)"


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)


def _number(value: Any) -> float:
    """A number from a cell that may carry text ("8 (assumed ...)"); NaN when there is none
    (:func:`fsdpsim.numbers.number_in_text`: ASCII digits, NaN beyond float range)."""
    return number_in_text(value)


def _positive(value: Any) -> float:
    """A finite number > 0 from a cell, else NaN (unstated or unusable)."""
    number = _number(value)
    return number if np.isfinite(number) and number > 0 else float("nan")


def _count(value: Any) -> int | None:
    """A whole count >= 1 from a cell (GPUs, layers, a batch), or None when it is not one."""
    number = _positive(value)
    return int(number) if number == number and number == int(number) and number < 2**31 else None


def tp_vocab(vocab: int, tp: int) -> int:
    """The vocabulary a TP-split embedding holds: as stated when TP divides it, else Megatron's
    padding to a multiple of :data:`MEGATRON_VOCAB_MULTIPLE` × TP."""
    if vocab % tp == 0:
        return vocab
    multiple = MEGATRON_VOCAB_MULTIPLE * tp
    return -(-vocab // multiple) * multiple


def _or_nan(count: int | None) -> float:
    return float("nan") if count is None else count


def _or(value: Any, default: float) -> float:
    number = _positive(value)
    return number if number == number else default


# ------------------------------------------------------------------------------ accelerator
def match_accelerator(catalog: Catalog, text: str, memory_gb: float = float("nan")) -> str | None:
    """The catalog accelerator id a free-text GPU name means ("A100 80GB", "H100 SXM5",
    "NVIDIA H200 141GB"), or None when no single entry matches.

    An exact id or alias wins; otherwise the family (the first part of an id, e.g. ``h100``) must
    appear in the text, the memory (from the text or ``memory_gb``) must be within 15 % of the
    entry's, and "PCIe" selects the PCIe part (SXM otherwise)."""
    low = text.strip().lower()
    if not low:
        return None
    mem = _number(m.group(1)) if (m := re.search(r"(\d+)\s*gb", low)) else memory_gb

    def memory_matches(ident: str) -> bool:
        return mem != mem or abs(catalog.accelerator(ident).memory_bytes / 2**30 - mem) <= 0.15 * mem

    for candidate in (low, low.replace(" ", "-"), re.sub(r"^nvidia[ -]", "", low).replace(" ", "-")):
        try:
            ident = catalog.resolve_id("accelerator", candidate)
        except ConfigError:
            continue
        if memory_matches(ident):
            return ident
    tokens = [w for w in re.split(r"[^a-z0-9]+", low) if w]
    for a, b in zip(tokens, tokens[1:]):  # "TPU v5p" -> tpu-v5p
        try:
            ident = catalog.resolve_id("accelerator", f"{a}-{b}")
        except ConfigError:
            continue
        if memory_matches(ident):
            return ident
    words = set(tokens)
    ids = catalog.ids("accelerator")
    family = [i for i in ids if i.split("-")[0] in words or i in words]
    if not family:
        return None
    # a per-package memory ("MI250X 128GB" = 2 GCDs) may match no entry: then the family decides
    family = [i for i in family if memory_matches(i)] or family
    pcie = [i for i in family if "pcie" in i]
    family = pcie if "pcie" in words else ([i for i in family if "pcie" not in i] or family)
    if len(family) == 1:
        return family[0]
    if family:  # several memory sizes and none given: the family's own alias decides
        for word in words:
            try:
                ident = catalog.resolve_id("accelerator", word)
            except ConfigError:
                continue
            if ident in family:
                return ident
    return None


def parse_power_cap(catalog: Catalog, gpu: str | None, *texts: str) -> float | None:
    """A board power cap below the GPU's TDP stated in the row: any wattage below TDP in the GPU
    name ("H100 80GB (500 W)"), or one next to cap/limit/at/@ in the other texts ("power-capped
    to 500W", "H100 at 500 W"); None when none is stated."""
    if gpu is None or catalog.accelerator(gpu).tdp_w is None:
        return None
    tdp = catalog.accelerator(gpu).tdp_w
    for i, text in enumerate(texts):
        for m in re.finditer(r"(\d[\d,]{1,4})\s*w\b", text.lower()):
            context = text.lower()[max(0, m.start() - 30):m.end() + 10]
            watts = _number(m.group(1))
            named = i == 0 or re.search(r"cap|limit|@|throttl|\bat\b", context)
            if named and 0.1 * tdp < watts < tdp:
                return watts
    return None


# ------------------------------------------------------------------------------ network
def parse_network(text: str, gpus_per_node: int, source: str = "") -> tuple[str | None, float | None]:
    """(catalog network id, Gb/s per GPU one direction) from a free-text inter-node description.

    "8x 200 Gb/s HDR InfiniBand per node", "1600 Gbps per node RoCE", "400 Gb/s per GPU",
    "EFA v2 3200 Gbps per node". (None, None) when the text names no rate."""
    low = text.lower()
    nic_gbps = per_gpu = None
    if m := re.search(rf"(\d+)\s*[x×]\s*(\d+)\s*{_GBPS}", low):
        nic_gbps = float(m.group(2))
        per_gpu = float(m.group(1)) * nic_gbps / gpus_per_node
    elif m := re.search(rf"([\d,]+(?:\.\d+)?)\s*{_GBPS}\s*(?:per|/)\s*node", low):
        per_gpu = _number(m.group(1)) / gpus_per_node
    elif m := re.search(rf"([\d,]+(?:\.\d+)?)\s*{_GBPS}\s*(?:per|/)\s*gpu", low):
        per_gpu = _number(m.group(1))
    elif m := re.search(rf"([\d,]+(?:\.\d+)?)\s*{_GBPS}\D*?(\d+)\s*(?:hca|nic|adapter|port)s?"
                        r"\s*(?:per|/)\s*node", low):  # "100 Gb/s, 1 HCA per node"
        nic_gbps = _number(m.group(1))
        per_gpu = float(m.group(2)) * nic_gbps / gpus_per_node
    elif m := re.search(rf"([\d,]+(?:\.\d+)?)\s*{_GBPS}", low):
        per_gpu = nic_gbps = _number(m.group(1))
    if per_gpu is None:
        return None, None
    rate = nic_gbps or per_gpu
    if "roce" in low or "ethernet" in low:
        network = f"roce-{min((100, 200, 400), key=lambda r: abs(r - rate))}"
    elif "efa" in low:
        network = "efa-v1" if "v1" in low or "p4d" in low else "efa-v2"
    elif "slingshot" in low:
        network = "slingshot-11"
    elif "tcpxo" in low:
        network = "gcp-tcpxo"
    elif "tcpx" in low:
        network = "gcp-tcpx"
    elif "edr" in low:
        network = "ib-edr-100"
    elif "hdr" in low:
        network = "ib-hdr100" if rate <= 100 else "ib-hdr-200"
    elif "xdr" in low:
        network = "ib-xdr-800"
    elif "ndr" in low:
        network = "ib-ndr200" if rate <= 200 else "ib-ndr-400"
    else:  # InfiniBand or unnamed: the generation by its line rate
        network = {100: "ib-edr-100", 200: "ib-hdr-200", 400: "ib-ndr-400", 800: "ib-xdr-800"}[
            min((100, 200, 400, 800), key=lambda r: abs(r - rate))]
    return network, per_gpu


# ------------------------------------------------------------------------------ knobs
def parse_sharding(sharding: str, framework: str = "") -> str:
    """fsdpsim sharding from FSDP/ZeRO/DDP words (FULL_SHARD, ZeRO-3, SHARD_GRAD_OP, ...): the
    sharding cell's words, else the framework's ("torchtitan FSDP2"), else none (DDP)."""
    return sharding_words(sharding) or sharding_words(framework) or "none"


def sharding_words(text: str) -> str | None:
    """The data-parallel strategy a text names, or None ("not stated", "no FSDP (FSDP=0);
    optimizer sharding not stated" name none)."""
    low = _text(text).lower().replace("_", "-")
    low = re.sub(r"\bno[- ]fsdp\b|\bfsdp\s*=\s*0\b", "", low)  # "no FSDP (FSDP=0)"
    if "hybrid" in low or "hsdp" in low:
        return "hybrid"
    if "grad-op" in low or re.search(r"zero[- ]?(?:stage[- ]?)?2", low):
        return "grad_op"
    if re.search(r"zero[- ]?(?:stage[- ]?)?1", low):
        return "optimizer"
    if "full-shard" in low or re.search(r"zero[- ]?(?:stage[- ]?)?3", low):
        return "full"
    if re.search(r"no-shard|ddp|replica|\bnone\b(?! stated)", low):
        return "none"
    if "fsdp" in low or "fully-shard" in low:
        return "full"
    return None


def parse_recompute(text: str) -> str:
    low = text.lower()
    if "selective" in low:
        return "selective"
    if low.startswith(("full", "true", "yes")) or "full" in low:
        return "full"
    return "none"


def parse_precision(text: str, framework: str = "") -> tuple[str, str]:
    """(compute precision, gradient reduce dtype) from a precision description.

    Composer's FSDP mixed-precision modes (composer/trainer/mosaic_fsdp_utils.py,
    ``get_mixed_precision``, torch 2.x releases): PURE = params, reduce and buffers in the
    compute dtype; DEFAULT = params in the compute dtype, **reduce in fp32**. DeepSpeed and
    Megatron reduce in the model dtype; otherwise fp32 reduction is assumed (torchtitan's
    default, ``mixed_precision_reduce = float32``)."""
    low = text.lower()
    compute = ("fp8" if "fp8" in low else "fp16" if ("fp16" in low or "half" in low)
               else "fp32" if ("fp32" in low or "tf32" in low) and "bf16" not in low else "bf16")
    reduce_dtype = "fp32" if compute in ("fp32", "fp8") else compute
    fw = framework.lower()
    if "pure" in low or "deepspeed" in fw or "megatron" in fw:
        reduce_dtype = {"fp8": "bf16", "fp32": "fp32"}.get(compute, compute)
    elif "default" in low or "reduce fp32" in low or "fp32 reduce" in low or compute == "bf16":
        reduce_dtype = "fp32"
    return compute, reduce_dtype


def uses_flash_attention(*texts: str) -> bool:
    """Whether a run used FlashAttention: stated in its notes, or else assumed for runs after
    FlashAttention appeared (Dao et al., arXiv 2205.14135, May 2022); runs published before
    2022 (a year or an arXiv id of 2021 or earlier in the source) materialise the scores."""
    low = " ".join(texts).lower()
    if re.search(r"no flash|without flash|eager attention|math attention", low):
        return False
    if "flash" in low:
        return True
    # a year, not a quantity ("2003 TFLOP/s", "2048 GPUs", "2010 ms")
    years = [int(y) for y in re.findall(r"\b(20[0-2]\d)\b(?![\d.,]\d|\s*(?:[tgpm]?flop|[kmgt]i?b\b"
                                        r"|tok|ms\b|s\b|w\b|%|gpus?\b|x\b))", low)]
    years += [2000 + int(a) for a in re.findall(r"arxiv[: ]*(\d{2})\d{2}\.\d{4,5}", low)]
    return not years or max(years) >= 2022


def _arch(model: str) -> str:
    """The architecture family a model name implies: Llama-style (SwiGLU, RMSNorm, rotary)
    for Llama, Mistral, Qwen, InternLM (InternLM-7B: LLaMA-style blocks, Cai et al. 2024
    §2) and Nemotron-4 descendants are not Llama-style (squared ReLU; modelled as GPT)."""
    low = model.lower()
    if low.startswith("mpt"):
        return "mpt"
    if any(k in low for k in ("llama", "mistral", "qwen", "mixtral", "internlm")):
        return "llama"
    return "gpt"


# ------------------------------------------------------------------------------ measurement
def tokens_per_s_per_gpu(r: pd.Series) -> tuple[float, str]:
    """The measured tokens/s per GPU of a published row and where it came from.

    In order: ``tokens_per_s_per_gpu``; ``tokens_per_s_total`` / GPUs; global batch tokens /
    ``step_time_s`` / GPUs; ``tflops_per_gpu`` (or ``mfu_pct`` × ``peak_tflops_basis``) divided
    by the FLOPs per token of the accounting the row states: Megatron's eq. 3 (Narayanan et al., SC21, counts the recompute forward:
    96·l·h²·(1 + s/6h + V/16lh) per token) when ``tflops_counts_recompute`` says so, otherwise
    model FLOPs 6·N + 12·L·d·s per token (full attention square: the llm-foundry benchmarking
    README, NeMo 1.x and 24.x/25.0x tables), or 6·N + 6·L·d·s where the row says its count is
    causal (Megatron-Bridge tables). N is ``moe_active_params`` when stated; in a table with
    that column (``hybrid_calibration.csv``, whose README defines it) a dense model's N is its
    parameters less the input embedding (NeMo's count); otherwise ``n_params``."""
    value, source = _measured(r)
    return (value, source) if np.isfinite(value) and value > 0 else (float("nan"), "")


def _measured(r: pd.Series) -> tuple[float, str]:
    """:func:`tokens_per_s_per_gpu` before the check that the value is usable (every input is a
    finite positive number or NaN, so nothing divides by zero)."""
    n_gpus, seq = _positive(r.get("n_gpus")), _positive(r.get("seq_len"))
    direct = _positive(r.get("tokens_per_s_per_gpu"))
    if direct == direct:
        return direct, "tokens_per_s_per_gpu"
    total = _positive(r.get("tokens_per_s_total"))
    if total == total:
        return total / n_gpus, "tokens_per_s_total"
    step = _positive(r.get("step_time_s"))
    tokens = _positive(r.get("global_batch_tokens"))
    if tokens != tokens:
        tokens = _positive(r.get("global_batch_seqs")) * seq
    if step == step and tokens == tokens:
        return tokens / step / n_gpus, "step_time_s"
    tflops = _positive(r.get("tflops_per_gpu"))
    mfu = _positive(r.get("mfu_pct"))
    peak = _positive(r.get("peak_tflops_basis"))
    if tflops != tflops and mfu == mfu and peak == peak:
        tflops = mfu / 100.0 * peak  # MFU = model TFLOP/s per GPU / the stated peak
    if tflops == tflops:
        layers, d, vocab = (_positive(r.get(k)) for k in ("n_layers", "d_model", "vocab"))
        if "yes" in _text(r.get("tflops_counts_recompute")).lower():
            per_token = 96 * layers * d**2 * (1 + seq / (6 * d) + vocab / (16 * layers * d))
            return tflops * 1e12 / per_token, "tflops_per_gpu (Megatron eq. 3)"
        counting = _text(r.get("tflops_counts_recompute")).lower()
        n_params = _positive(r.get("n_params"))
        active = _positive(r.get("moe_active_params"))
        if active != active and "moe_active_params" in r.index:
            active = n_params - vocab * d  # active weights incl. the LM head, less the embedding
        n = active if active == active and active > 0 else n_params
        causal = "causal" in counting and "non-causal" not in counting
        attention = 6 if causal else 12  # per layer per token: fwd + bwd of QK^T and AV
        if n == n:
            return (tflops * 1e12 / (6 * n + attention * layers * d * seq),
                    f"tflops_per_gpu (6N+{attention}Lds)")
    return float("nan"), ""


# ------------------------------------------------------------------------------ converters
def from_published(raw: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Convert rows with the published-calibration columns to the fsdpsim schema, with their
    whole parallel layout (:func:`fsdpsim.published_plan.read_layout`) and the conventions of
    the framework each row names where it does not say."""
    rows = []
    for _, r in raw.iterrows():
        framework = _text(r.get("framework"))
        conventions = framework_conventions(framework)
        modelled_as: list[str] = []
        counts = {k: _count(r.get(k)) for k in ("n_gpus", "seq_len", "n_layers", "d_model",
                                                 "n_heads", "vocab")}
        n_gpus = counts["n_gpus"] or 1
        layout, notes, why = read_layout(r, raw.columns, n_gpus, counts["n_layers"], conventions)
        modelled_as += notes
        skip = why
        moe: dict[str, Any] = {}
        if _positive(r.get("ep")) > 1 or _positive(r.get("moe_experts")) > 0:
            from fsdpsim.published_moe import moe_row

            gpu_id = match_accelerator(catalog, _text(r.get("gpu")), _number(r.get("gpu_mem_gb")))
            moe, said, why = moe_row(
                _text(r.get("model")), framework, _text(r.get("notes")), layout,
                counts["n_layers"], gpu=gpu_id or "", source=_text(r.get("source_key")),
                number_format=precision_format(_text(r.get("precision")),
                                               parse_precision(_text(r.get("precision")),
                                                               framework)[0]),
                ep=int(_or(r.get("ep"), 1.0)))
            modelled_as += said
            skip = skip or why
        gpu_text = _text(r.get("gpu"))
        gpu = match_accelerator(catalog, gpu_text, _number(r.get("gpu_mem_gb")))
        if gpu is None:
            skip = skip or f"GPU {gpu_text!r} is not in the catalog"
        unstated = [k for k, v in counts.items() if v is None]
        if unstated:
            skip = skip or f"{', '.join(unstated)} not stated as whole numbers"
        gpn = _count(r.get("gpus_per_node"))
        gpn = gpn if gpn and gpn <= 1e6 else min(n_gpus, 8)
        domain = catalog.accelerator(gpu).link.domain_size if gpu else None
        if domain and domain > 8:  # a rack-scale NVLink domain (NVL72): its trays share it
            gpn = domain
        network, per_gpu = parse_network(_text(r.get("inter_node_interconnect")), gpn,
                                         _text(r.get("source_key")) + " " + framework)
        precision_text = _text(r.get("precision"))
        precision, reduce_dtype = parse_precision(precision_text, framework)
        number_format = precision_format(precision_text, precision)
        if number_format in UNFIT_FORMATS:  # reduced as FP8 recipes reduce
            reduce_dtype = parse_precision("fp8", framework)[1]
            precision = number_format
        sharding_text = _text(r.get("sharding"))
        sharding = parse_sharding(sharding_text, framework)
        if conventions.get("sharding") and sharding_words(sharding_text) is None:
            sharding = conventions["sharding"]
            modelled_as.append(f"sharding not stated: {conventions['name']}'s default "
                               f"({sharding})")
        model_parallel = np.prod([layout.get(k, 1) for k in ("tp", "pp", "cp")])
        dp = n_gpus // model_parallel if n_gpus % model_parallel == 0 else n_gpus
        zero_group = re.search(r"zero1\s*=\s*(\d+)", sharding_text.lower())
        if sharding == "optimizer" and zero_group and 1 < int(zero_group.group(1)) < dp:
            modelled_as.append(f"ZeRO-1 within groups of {zero_group.group(1)} modelled over all "
                               f"{dp} data-parallel ranks")
        mb, ga = _positive(r.get("micro_batch")), _positive(r.get("grad_accum"))
        global_seqs = _positive(r.get("global_batch_seqs"))
        if ga != ga and mb == mb:  # per-token cost barely depends on it (optimizer amortised)
            ga = max(1.0, round(global_seqs / (mb * dp))) if global_seqs == global_seqs else 1.0
        # An unstated micro-batch stays unstated: measurements.resolve_auto_knobs gives it what
        # predict's auto would choose (with the global batch when it is known).
        measured, measured_from = tokens_per_s_per_gpu(r)
        if measured != measured:
            skip = skip or "no measurement (tokens/s, step time or TFLOP/s per GPU)"
        model = _text(r.get("model"))
        heads = _number(r.get("n_heads"))
        vocab = _or_nan(counts["vocab"])  # the count as read; NaN where not stated (skipped)
        if counts["vocab"] and layout.get("tp", 1) > 1:
            vocab = tp_vocab(counts["vocab"], layout["tp"])
            if vocab != counts["vocab"]:
                modelled_as.append(f"vocab {counts['vocab']} padded to {vocab} (Megatron: a "
                                   f"multiple of {MEGATRON_VOCAB_MULTIPLE} x tp)")
        cap = parse_power_cap(catalog, gpu, gpu_text, _text(r.get("notes")))
        texts = [_text(r.get(k)) for k in ("notes", "framework", "source", "source_locator")]
        generation = gpu_generation(gpu or gpu_text)
        checkpointing = _text(r.get("activation_checkpointing"))
        rows.append({
            "id": r.get("id", f"row-{len(rows) + 1}"), "arch": _arch(model), "model": model,
            # the counts as read ("80 (assumed)" -> 80); NaN where not stated (then skipped)
            "n_layers": _or_nan(counts["n_layers"]), "d_model": _or_nan(counts["d_model"]),
            "n_heads": heads,
            "n_kv_heads": _or(r.get("n_kv_heads"), heads),
            "ffn_size": _or(r.get("ffn_size"), 4 * _number(r.get("d_model"))),
            "vocab": vocab, "gpu": gpu or gpu_text, "n_gpus": n_gpus, "gpus_per_node": gpn,
            "inter_node_gbps_per_gpu": per_gpu if per_gpu else float("nan"),
            "network": network or "",
            "seq_len": counts["seq_len"] or 1,
            "micro_batch": mb, "grad_accum": ga,
            "sharding": sharding,
            "recompute": (parse_recompute(checkpointing) if _stated(checkpointing)
                          else conventions.get("recompute", "auto")),
            "global_batch_seqs": global_seqs,
            **{k: layout.get(k, v) for k, v in (("tp", 1), ("pp", 1), ("cp", 1), ("vpp", 1))},
            "pp_schedule": layout.get("pp_schedule", ""),
            "sequence_parallel": layout.get("sequence_parallel", False),
            "pp_first_layers": layout.get("pp_first_layers", float("nan")),
            "pp_last_layers": layout.get("pp_last_layers", float("nan")),
            "ep": _or(r.get("ep"), 1.0),
            **moe,
            "precision": precision, "reduce_dtype": reduce_dtype,
            "precision_format": number_format, "precision_note": precision_text,
            # llm-foundry's MPT defaults to flash-attn's fused cross-entropy (MPTConfig loss_fn).
            "fused_loss": _arch(model) == "mpt" or bool(conventions.get("fused_loss")),
            "flash_attention": _flash(texts, conventions, generation),
            "power_cap_w": cap if cap is not None else float("nan"),
            "framework": framework, "source_key": _text(r.get("source_key")),
            "recipe": conventions.get("profile", "fsdp2"),
            "dropout": bool(conventions.get("dropout", False)) and _arch(model) == "gpt",
            "generation": generation, "tokens_per_s_per_gpu": measured,
            "measured_from": measured_from, "subset": _text(r.get("subset")),
            "modelled_as": "; ".join(modelled_as), "skip": skip,
        })
    return pd.DataFrame(rows)


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


def is_vtrain(columns) -> bool:
    return {"# GPUs", "hidden size", "iteration time (ms)"} <= set(columns)


def from_vtrain(raw: pd.DataFrame) -> pd.DataFrame:
    """Convert vTrain ground-truth rows (Megatron-DeepSpeed GPT on A100) to the fsdpsim schema.

    Iteration time → tokens/s per GPU = global batch · sequence / time / GPUs. The layout is
    the row's TP × PP × DP (tensor parallelism innermost, 8 GPUs per node), the plain 1F1B
    schedule, no sequence parallelism (Megatron-DeepSpeed's ``--sequence-parallel`` is opt-in),
    full activation checkpointing (vTrain README); the data-parallel gradients as DDP
    all-reduce (ZeRO-1's reduce-scatter + all-gather moves the same bytes); fp16 mixed
    precision as in Megatron-DeepSpeed's GPT examples. A row whose degrees do not multiply to
    its GPU count is skipped."""
    rows = []
    columns = {"tp": "tensor parallelism", "pp": "pipeline parallelism", "n_gpus": "# GPUs",
               "dp": "data parallelism", "mb": "micro batch", "gb": "global batch",
               "seq": "sequence length", "d": "hidden size", "layers": "# layers",
               "heads": "attention heads"}
    for i, r in raw.reset_index(drop=True).iterrows():
        counts = {k: _count(r.get(c)) for k, c in columns.items()}
        bad = [columns[k] for k, n in counts.items() if n is None]
        v = {k: n or 1 for k, n in counts.items()}
        tp, pp, n_gpus, dp = v["tp"], v["pp"], v["n_gpus"], v["dp"]
        mb, gb, seq, d, layers = v["mb"], v["gb"], v["seq"], v["d"], v["layers"]
        time_s = _positive(r.get("iteration time (ms)")) / 1e3
        skip = (f"{', '.join(bad)} not stated as whole numbers" if bad
                else f"layout tp({tp}) * pp({pp}) * dp({dp}) != # GPUs({n_gpus})"
                if tp * pp * dp != n_gpus
                else "" if time_s == time_s else "no iteration time")
        name = (f"GPT {r['Parameters (billion)']}B" if "Parameters (billion)" in raw.columns
                else f"GPT L{layers} d{d}")
        rows.append({
            "id": f"vtrain-{i + 1:04d}", "arch": "gpt", "model": name, "n_layers": layers,
            "d_model": d, "n_heads": v["heads"], "n_kv_heads": v["heads"], "ffn_size": 4 * d,
            "vocab": tp_vocab(VTRAIN_VOCAB, tp),
            "gpu": VTRAIN_GPU, "n_gpus": n_gpus, "gpus_per_node": min(VTRAIN_GPUS_PER_NODE, n_gpus),
            "inter_node_gbps_per_gpu": VTRAIN_NODE_GBPS / VTRAIN_GPUS_PER_NODE,
            "network": "ib-hdr-200", "seq_len": seq, "micro_batch": mb,
            "grad_accum": max(1, gb // (mb * dp)), "sharding": "none", "recompute": "full",
            "tp": tp, "pp": pp, "cp": 1, "vpp": 1, "pp_schedule": "1f1b",
            "sequence_parallel": False, "ep": 1,
            "precision": "fp16", "reduce_dtype": "fp16", "fused_loss": False,
            "flash_attention": False,  # Megatron-DeepSpeed GPT of vTrain: fused softmax, no flash
            "framework": "Megatron-DeepSpeed", "recipe": "megatron-2021", "dropout": True,
            "generation": gpu_generation(VTRAIN_GPU),
            "tokens_per_s_per_gpu": gb * seq / time_s / n_gpus,
            "measured_from": "iteration time (ms)", "subset": "vtrain", "skip": skip,
        })
    return pd.DataFrame(rows)
