"""Text of published measurement tables, read into fsdpsim's values: cells as numbers and
counts, the accelerator matched against the catalog, the inter-node network, power cap,
sharding, recompute and precision parsed from their free text
(:mod:`fsdpsim.measured.published.tables` reads whole rows with them)."""

from __future__ import annotations

import math
import re
from typing import Any

from fsdpsim.costs.vocab import padded_vocab
from fsdpsim.hardware.catalog import Catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.numbers import number_in_text

_GBPS = r"g(?:b/s|bps|bit/s|b)"


def cell_text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def cell_number(value: Any) -> float:
    """A number from a cell that may carry text ("8 (assumed ...)"); NaN when there is none
    (:func:`fsdpsim.util.numbers.number_in_text`: ASCII digits, NaN beyond float range)."""
    return number_in_text(value)


def cell_positive(value: Any) -> float:
    """A finite number > 0 from a cell, else NaN (unstated or unusable)."""
    number = cell_number(value)
    return number if math.isfinite(number) and number > 0 else float("nan")


def cell_count(value: Any) -> int | None:
    """A whole count >= 1 from a cell (GPUs, layers, a batch), or None when it is not one."""
    number = cell_positive(value)
    return int(number) if number == number and number == int(number) and number < 2**31 else None


def tp_vocab(vocab: int, tp: int) -> int:
    """The vocabulary of a published row's model: as stated when TP divides it (the row's
    model size counts it so; the engine pads it for its vocab-parallel layers all the same),
    else Megatron's padding (:func:`fsdpsim.costs.vocab.padded_vocab`)."""
    return vocab if vocab % tp == 0 else padded_vocab(vocab, tp)


def count_or_nan(count: int | None) -> float:
    return float("nan") if count is None else count


def number_or(value: Any, default: float) -> float:
    number = cell_positive(value)
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
    mem = cell_number(m.group(1)) if (m := re.search(r"(\d+)\s*gb", low)) else memory_gb

    def memory_matches(ident: str) -> bool:
        return mem != mem or (abs(catalog.accelerator(ident).memory_bytes / 2**30 - mem)
                              <= 0.15 * mem)

    for candidate in (low, low.replace(" ", "-"),
                      re.sub(r"^nvidia[ -]", "", low).replace(" ", "-")):
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
            watts = cell_number(m.group(1))
            named = i == 0 or re.search(r"cap|limit|@|throttl|\bat\b", context)
            if named and 0.1 * tdp < watts < tdp:
                return watts
    return None


# ------------------------------------------------------------------------------ network
def parse_network(text: str, gpus_per_node: int,
                  source: str = "") -> tuple[str | None, float | None]:
    """(catalog network id, Gb/s per GPU one direction) from a free-text inter-node description.

    "8x 200 Gb/s HDR InfiniBand per node", "1600 Gbps per node RoCE", "400 Gb/s per GPU",
    "EFA v2 3200 Gbps per node". (None, None) when the text names no rate."""
    low = text.lower()
    nic_gbps = per_gpu = None
    if m := re.search(rf"(\d+)\s*[x×]\s*(\d+)\s*{_GBPS}", low):
        nic_gbps = float(m.group(2))
        per_gpu = float(m.group(1)) * nic_gbps / gpus_per_node
    elif m := re.search(rf"([\d,]+(?:\.\d+)?)\s*{_GBPS}\s*(?:per|/)\s*node", low):
        per_gpu = cell_number(m.group(1)) / gpus_per_node
    elif m := re.search(rf"([\d,]+(?:\.\d+)?)\s*{_GBPS}\s*(?:per|/)\s*gpu", low):
        per_gpu = cell_number(m.group(1))
    elif m := re.search(rf"([\d,]+(?:\.\d+)?)\s*{_GBPS}\D*?(\d+)\s*(?:hca|nic|adapter|port)s?"
                        r"\s*(?:per|/)\s*node", low):  # "100 Gb/s, 1 HCA per node"
        nic_gbps = cell_number(m.group(1))
        per_gpu = float(m.group(2)) * nic_gbps / gpus_per_node
    elif m := re.search(rf"([\d,]+(?:\.\d+)?)\s*{_GBPS}", low):
        per_gpu = nic_gbps = cell_number(m.group(1))
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
    low = cell_text(text).lower().replace("_", "-")
    if low.strip() in ("optimizer", "grad-op", "full", "hybrid", "none"):  # fsdpsim's own names
        return low.strip().replace("-", "_")
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
    """none, selective, full or op-selective (torchtitan's op-level selective checkpointing,
    said as "op-selective" or "selective (op)") from a row's checkpointing text."""
    low = text.lower()
    if "op-selective" in low or ("selective" in low and "op" in low.replace("selective", "")
                                 .replace("(", " ").replace(")", " ").split()):
        return "op-selective"
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
    Megatron reduce in the model dtype, and so does InternEvo (its gradients are the bf16
    parameters' own, all-reduced in their dtype: ``reduce_tensor`` with ``dtype=None``,
    ``internlm/solver/optimizer/utils.py``); otherwise fp32 reduction is assumed (torchtitan's
    default, ``mixed_precision_reduce = float32``)."""
    low = text.lower()
    compute = ("fp8" if "fp8" in low else "fp16" if ("fp16" in low or "half" in low)
               else "fp32" if ("fp32" in low or "tf32" in low) and "bf16" not in low else "bf16")
    reduce_dtype = "fp32" if compute in ("fp32", "fp8") else compute
    fw = framework.lower()
    if "pure" in low or any(w in fw for w in ("deepspeed", "megatron", "internevo")):
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


def arch_of(model: str) -> str:
    """The architecture family a model name implies: Llama-style (SwiGLU, RMSNorm, rotary)
    for Llama, Mistral, Qwen, InternLM (InternLM-7B: LLaMA-style blocks, Cai et al. 2024
    §2) and Nemotron-4 descendants are not Llama-style (squared ReLU; modelled as GPT)."""
    low = model.lower()
    if low.startswith("mpt"):
        return "mpt"
    if any(k in low for k in ("llama", "mistral", "qwen", "mixtral", "internlm")):
        return "llama"
    return "gpt"
