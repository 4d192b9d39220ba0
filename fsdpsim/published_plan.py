"""The parallel layout of a published run: degrees, schedule and the framework's defaults.

:func:`read_layout` turns the layout cells of a published row (``tp``, ``pp``, ``cp``, ``dp``,
``vpp``, ``sequence_parallel``) into the plan columns of fsdpsim's measurement schema. What the
row leaves unstated comes from the conventions of the framework it names
(:data:`FRAMEWORK_CONVENTIONS`), or stays ``auto`` (the number of interleaved model chunks);
the row's ``modelled_as`` notes say where it is modelled by something close to, but not exactly,
what ran. A layout that does not multiply to the GPU count is a skip reason, never a guess.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from fsdpsim.numbers import number_in_text

#: What a framework does when a row does not say, in the releases the published tables come
#: from; matched (first match wins) by words of the row's ``framework`` text.
#:
#: * Megatron-Core (NeMo 1.x/2.0, Megatron-Bridge): the distributed optimizer (ZeRO-1: optimizer
#:   states sharded over the data-parallel group), sequence parallelism with TP and the fused
#:   cross-entropy and no layer kept in BF16 (the ``megatron`` profile's knob defaults,
#:   :data:`fsdpsim.frameworks.KNOB_DEFAULTS`), as their performance recipes set them
#:   (Megatron-Bridge "Performance tuning guide"; NeMo ``llama3_70b`` recipes:
#:   ``use_distributed_optimizer``, ``sequence_parallel=True``), and fused attention
#:   (Transformer Engine's flash/cuDNN backends); no activation recompute unless the row says
#:   so (``TransformerConfig.recompute_granularity = None`` by default; the performance
#:   summaries list recompute only where their configs set it).
#: * Megatron-LM PTD-P (Narayanan et al., SC21, arXiv 2104.04473 §2.2): the interleaved 1F1B
#:   schedule; the paper states no chunk count, so it is chosen as ``auto``.
#: * InternEvo: ``sequence_parallel=False`` in its 7B configs (doc/en/train_performance.md).
#: * ``dropout``: GPT training in Megatron-LM (``--attention-dropout 0.1 --hidden-dropout 0.1``,
#:   arguments.py defaults) and OneFlow-GPT (its Megatron port); Llama-style recipes use none.
#:   OneFlow-GPT runs the ``megatron`` profile without its fused cross-entropy.
#: * ``profile``: the framework profile (:mod:`fsdpsim.frameworks`: recipe, collective library
#:   release, granularity and overlap of data-parallel collectives). Megatron and its
#:   descendants keep bf16/fp16 parameters, fp32 main gradients and the fp32 master copy with
#:   the (distributed) optimizer; InternEvo's hybrid ZeRO does the same with its own
#:   collectives (``internevo``: gradients all-reduced, parameters broadcast by each shard's
#:   owner within its ``zero1`` group, read from the row's ``zero1=N``). Megatron-LM before
#:   Megatron-Core (2020-21: SC21's PTD-P, DLPerf's NGC 20.12 runs) all-reduced gradients after
#:   the backward (``megatron-2021``); SC21's DeepSpeed ZeRO-3 rows ran DeepSpeed's 2021 stage 3
#:   (``deepspeed-zero3-2021``); Composer's FSDP in torch 2.1 is FSDP1.
#: * torchtitan: sequence parallelism in its TP plan (``SequenceParallel`` on the norms).
#: Any other framework: sequence parallelism off (Megatron-LM's ``--sequence-parallel`` is opt-in
#: and did not exist before 2022), data-parallel sharding as the row's words say.
FRAMEWORK_CONVENTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("megatron-core", "megatron-bridge", "nemo"),
     {"name": "Megatron-Core", "sharding": "optimizer", "sequence_parallel": True,
      "flash": True, "profile": "megatron", "recompute": "none"}),
    (("ptd-p",), {"name": "Megatron-LM PTD-P", "interleaved": True, "profile": "megatron-2021",
                  "dropout": True}),
    (("internevo", "internlm"), {"name": "InternEvo", "sequence_parallel": False,
                                 "profile": "internevo"}),
    (("deepspeed zero-3", "deepspeed zero3"),
     {"name": "DeepSpeed ZeRO-3 (2021)", "profile": "deepspeed-zero3-2021", "dropout": True}),
    (("megatron",), {"name": "Megatron-LM", "profile": "megatron-2021", "dropout": True}),
    (("oneflow",), {"name": "OneFlow-GPT", "profile": "megatron", "dropout": True,
                    "fused_loss": False}),
    (("torchtitan",), {"name": "torchtitan", "sequence_parallel": True}),
    (("composer",), {"name": "Composer (PyTorch FSDP1)", "profile": "fsdp1"}),
)

#: GPU generation (architecture) by catalog id family, for error summaries per generation.
GENERATIONS = {"v100": "Volta", "a100": "Ampere", "h100": "Hopper", "h200": "Hopper",
               "gh200": "Hopper", "b200": "Blackwell", "b300": "Blackwell",
               "gb200": "Blackwell", "gb300": "Blackwell", "mi250x": "CDNA2", "mi300x": "CDNA3",
               "mi325x": "CDNA3", "mi355x": "CDNA4", "l4": "Ada", "l40s": "Ada"}

#: Block-scaled formats, modelled as themselves (:func:`fsdpsim.inputs.gemm_peak_flops_per_s`:
#: MXFP8 at the FP8 rate, NVFP4 at the FP4 rate with the recipe's BF16 layers) and validated,
#: but not fitted: a calibration's factors come from the FP8/BF16/FP16 rows, so these rows test
#: the formats' model out of sample.
UNFIT_FORMATS = {"mxfp8": "MXFP8", "nvfp4": "NVFP4"}


def framework_conventions(framework: str) -> dict[str, Any]:
    """The :data:`FRAMEWORK_CONVENTIONS` entry whose words appear in ``framework``; {} if none."""
    low = framework.lower()
    for words, conventions in FRAMEWORK_CONVENTIONS:
        if any(w in low for w in words):
            return conventions
    return {}


def gpu_generation(gpu: str) -> str:
    """"Hopper" for ``h100-sxm5-80gb`` (or an unmatched name such as "GB300"); "other" if
    unknown."""
    family = re.split(r"[^a-z0-9]", gpu.strip().lower())[0] if gpu else ""
    return GENERATIONS.get(family, "other")


def precision_format(text: str, compute: str) -> str:
    """The number format a precision text names: nvfp4, mxfp8 (MXFP8, NeMo's "FP8-MX", 32x32
    block scaling), or else the compute precision (fp8 covers per-tensor and blockwise
    scaling)."""
    low = text.lower()
    if "fp4" in low:
        return "nvfp4"
    if "mxfp8" in low or "fp8-mx" in low or "32x32" in low:
        return "mxfp8"
    return compute


def _number(value: Any) -> float:
    return number_in_text(value)  # ASCII digits only; NaN beyond float range


def _whole(value: float) -> bool:
    return bool(np.isfinite(value) and value >= 1 and value == int(value) and value < 2**31)


def _yes_no(text: str) -> bool | None:
    low = text.strip().lower()
    if re.match(r"(yes|true|on)\b", low):
        return True
    if re.match(r"(no|false|off)\b", low):
        return False
    return None


def read_layout(r, columns, n_gpus: int, n_layers: int | None,
                conventions: dict[str, Any]) -> tuple[dict[str, Any], list[str], str]:
    """(plan columns, ``modelled_as`` notes, skip reason) of one published row.

    A missing ``tp``/``pp``/``cp`` column means no such parallelism; an empty cell means "not
    stated". One unstated degree is derived from the stated ``dp`` (``n_gpus = dp·tp·pp·cp``);
    a stated ``dp`` that does not multiply with the others to the GPU count is a skip reason.
    ``vpp``: a number is the model chunks per pipeline rank; "interleaved" without a number (or a
    framework whose schedule is interleaved) is ``auto``; unstated is 1 (plain 1F1B).
    """
    notes: list[str] = []
    degrees = {k: (_number(r.get(k)) if k in columns else 1.0) for k in ("tp", "pp", "cp")}
    dp = _number(r.get("dp"))
    dp = dp if np.isfinite(dp) and dp > 0 else float("nan")
    unstated = [k for k, v in degrees.items() if v != v]
    if len(unstated) == 1 and dp == dp:
        name = unstated[0]
        known = dp * np.prod([v for k, v in degrees.items() if k != name])
        derived = n_gpus / known
        if _whole(derived):
            degrees[name] = derived
            notes.append(f"{name} {int(derived)} derived: n_gpus / (dp x the other degrees)")
            unstated = []
    if unstated:
        return {}, notes, "parallel layout (tp/pp/cp) not stated"
    bad = [f"{k} {v:g}" for k, v in degrees.items() if not _whole(v)]
    if bad:
        return {}, notes, f"parallel degree(s) {', '.join(bad)} not whole numbers >= 1"
    tp, pp, cp = (int(degrees[k]) for k in ("tp", "pp", "cp"))
    if n_gpus % (tp * pp * cp):
        return {}, notes, (f"tp({tp}) * pp({pp}) * cp({cp}) does not divide "
                           f"n_gpus({n_gpus})")
    if dp == dp and dp * tp * pp * cp != n_gpus:
        return {}, notes, (f"layout dp({dp:g}) * tp({tp}) * pp({pp}) * cp({cp}) = "
                           f"{dp * tp * pp * cp:g} != n_gpus({n_gpus})")
    vpp_text = "" if r.get("vpp") is None else str(r.get("vpp")).lower()
    vpp_cell = _number(r.get("vpp"))
    vpp: int | str = 1
    if pp > 1 and _whole(vpp_cell):
        vpp = int(vpp_cell)
    elif pp > 1 and ("interleav" in vpp_text or conventions.get("interleaved")):
        vpp = "auto"
        notes.append("interleaved schedule, model chunks not stated: auto")
    layout: dict[str, Any] = {
        "tp": tp, "pp": pp, "cp": cp, "vpp": vpp,
        "pp_schedule": "interleaved" if vpp == "auto" or vpp > 1 else "",
        "sequence_parallel": False, "pp_first_layers": float("nan"),
        "pp_last_layers": float("nan")}
    stated_sp = _yes_no("" if r.get("sequence_parallel") is None
                        else str(r.get("sequence_parallel")))
    layout["sequence_parallel"] = tp > 1 and (
        stated_sp if stated_sp is not None else bool(conventions.get("sequence_parallel")))
    return layout, notes, ""
