"""Mixture-of-experts rows of published tables: which model they name.

A published MoE row names its model (``DeepSeekV3``, ``DeepSeekV3 (w/o MTP)``, ``Qwen3-235B-A22B``)
and its expert-parallel degree (``ep``). This module reads only that text (the preset a model
name means, "w/o MTP") and the tables' FLOP count of a preset
(:func:`preset_flops_per_token`). What the run's recipe set (expert overlap, CUDA graphs, FP8
attention and LM head, per-module recompute, token dispatcher, token dropping, routing balance,
expert tensor parallelism, stage sizes) is stated by the row's own columns, read as ``predict``
reads the same flags (:data:`fsdpsim.measured.published.tables.STATED_COLUMNS`); an empty cell is
the framework profile's default (:mod:`fsdpsim.plan.frameworks`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

#: Model names of published MoE rows -> preset id (first match wins).
MOE_PRESETS = ((r"deepseek[-_ ]?v3", "deepseek-v3"), (r"kimi[-_ ]?k2", "kimi-k2"),
               (r"mixtral[-_ ]?8x7b", "mixtral-8x7b"), (r"mixtral[-_ ]?8x22b", "mixtral-8x22b"),
               (r"qwen3[-_ ]?235b", "qwen3-235b-a22b"), (r"qwen3[-_ ]?30b", "qwen3-30b-a3b"),
               (r"gpt[-_ ]?oss[-_ ]?120b", "gpt-oss-120b"),
               (r"gpt[-_ ]?oss[-_ ]?20b", "gpt-oss-20b"))


def moe_preset(model: str) -> str | None:
    """The preset id a published MoE model name means, or None."""
    low = model.lower()
    return next((preset for pattern, preset in MOE_PRESETS if re.search(pattern, low)), None)


def moe_row(model: str, mtp_stated: bool = False) -> tuple[dict[str, Any], list[str], str]:
    """(measurement columns, ``modelled_as`` notes, skip reason) a published MoE row's model
    name gives: its preset, and no MTP module where the name says "w/o MTP" (``mtp_stated``:
    the row's ``mtp_layers`` column says it instead)."""
    from fsdpsim.model.presets import get_model

    preset = moe_preset(model)
    if preset is None:
        return {}, [], f"mixture of experts: model {model!r} is not a preset"
    low = model.lower()
    cols: dict[str, Any] = {"preset": preset}
    said: list[str] = []
    if "w/o mtp" in low or "without mtp" in low:
        cols["mtp_layers"] = 0
    elif not mtp_stated and "w/ mtp" not in low and get_model(preset).mtp_layers:
        said.append(f"MTP not stated: the {preset} preset's ({get_model(preset).mtp_layers})")
    return cols, said, ""


def preset_flops_per_token(preset: str, mtp_layers: int | None, seq_len: int,
                           causal: bool = True) -> float:
    """Model FLOPs per trained token of a preset under a table's count [FLOP/token]: forward
    and backward (3× forward) of every layer, the LM head and the MTP modules, from the
    architecture (:mod:`fsdpsim.model.flops`: MLA's projections and its 192-wide scores and
    128-wide values, not ``d_model``-wide attention).

    Why: a row that states only TFLOP/s per GPU is turned into tokens/s by this count. The
    generic ``6N + 6·L·d·s`` assumes attention ``d_model`` wide; DeepSeek-V3's MLA has 128 heads
    × (192 + 128), so its causal attention is 30.7 GFLOP/token, not 10.7 — the generic count
    reads 330 TFLOP/s as 1,432 tokens/s where the table's own row beside it (338 TFLOP/s, 1,297
    tokens/s) gives 1,266. The Megatron-Bridge tables count causal attention and DeepSeek-V3's
    MTP layer (``validation/data/README.md``; the row's stated/implied TFLOP/s = 1.041 without
    MTP, 1.004 with it). ``causal=False`` counts every score of the square (NeMo 24.x tables).
    """
    import dataclasses

    from fsdpsim.model.flops import (forward_flops_per_token, keys_per_query,
                                     layer_flops_per_token, mtp_forward_flops_per_token)
    from fsdpsim.model.presets import get_model

    spec = get_model(preset)
    if mtp_layers is not None:
        spec = dataclasses.replace(spec, mtp_layers=int(mtp_layers))
    forward = float(forward_flops_per_token(spec, seq_len)
                    + mtp_forward_flops_per_token(spec, seq_len))
    if not causal:  # the whole square: every query against every key of the sequence
        keys = np.array([float(keys_per_query(seq_len, layer.mask, layer.window))
                         for layer in spec.layers])
        extra = layer_flops_per_token(spec, seq_len)["attention_score_flops"] * (
            seq_len / keys - 1.0)
        forward += float(extra.sum() + spec.mtp_layers * extra[-1])
    return 3.0 * forward
