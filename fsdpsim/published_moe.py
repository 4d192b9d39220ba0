"""Mixture-of-experts rows of published tables: which model, and what the framework did.

A published MoE row names its model (``DeepSeekV3``, ``DeepSeekV3 (w/o MTP)``, ``DeepSeekV3
(tokendrop)``) and its expert-parallel degree (``ep``); the rest comes from the conventions of
the framework's recipes for that model, read from their source (never fitted to the rows):

* **NeMo Megatron-Bridge, DeepSeek-V3** (github NVIDIA-NeMo/Megatron-Bridge @067f987,
  ``src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py``, the base of every DeepSeek-V3
  performance recipe, and ``perf_recipes/deepseek/common.py``):
  ``expert_tensor_parallel_size = 1``; ``mtp_num_layers = 1`` unless the row says "w/o MTP";
  ``moe_router_force_load_balancing = True`` in every performance recipe (the tables' footnote:
  "token distribution force-balanced"), so the busiest rank carries the mean (imbalance 1);
  token-dropping rows (``--use_tokendrop``) run ``apply_moe_token_drop``: capacity factor 1.0,
  padded to capacity (``training/utils/moe_token_drop.py``); the pipeline layout of
  ``_get_deepseek_v3_pipeline_layout`` (:func:`deepseek_stage_layers`).
* The expert all-to-all overlap (``moe_a2a_overlap`` of ``scripts/performance/configs/deepseek/
  deepseek_workload_base_configs.py``, Megatron-Core ``overlap_moe_expert_parallel_comm``) is
  off in every DeepSeek-V3 workload config except those of :data:`A2A_OVERLAP_CONFIGS`, which
  a row matches by GPU, number format, container release and layout; attention runs in FP8
  (``fp8_dot_product_attention``) only in those of :data:`FP8_ATTENTION_CONFIGS`, the LM head
  in MXFP8 (``fp8_output_proj``) only in those of :data:`FP8_LM_HEAD_CONFIGS`.
* Every DeepSeek-V3 workload config dispatches with Megatron's ``flex`` dispatcher on DeepEP or
  HybridEP (``moe_flex_dispatcher_backend = "deepep"`` / ``"hybridep"``; H100 since f36e5de7d
  and 12a211987, B200, B300, GB200, GB300): tokens cross nodes once per destination node
  (``moe_dispatcher = deepep``), with DeepSeek-V3's group-limited routing (8 groups, 4 per
  token, from its ``config.json`` through the bridge's ``n_group``/``topk_group`` mapping) —
  except the 25.09 token-drop runs and the 25.11 B200 config, which keep the ``alltoall``
  dispatcher (:func:`alltoall_dispatcher`).
* Expert overlap slows the computation it hides behind by the dispatcher's SM carve-out
  (:data:`fsdpsim.costs.moe.FLEX_DISPATCH_COMPUTE_SLOWDOWN`).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

#: Model names of published MoE rows -> preset id (first match wins).
MOE_PRESETS = ((r"deepseek[-_ ]?v3", "deepseek-v3"), (r"kimi[-_ ]?k2", "kimi-k2"),
               (r"mixtral[-_ ]?8x7b", "mixtral-8x7b"), (r"mixtral[-_ ]?8x22b", "mixtral-8x22b"),
               (r"qwen3[-_ ]?235b", "qwen3-235b-a22b"), (r"qwen3[-_ ]?30b", "qwen3-30b-a3b"),
               (r"gpt[-_ ]?oss[-_ ]?120b", "gpt-oss-120b"), (r"gpt[-_ ]?oss[-_ ]?20b", "gpt-oss-20b"))


#: Megatron-Bridge DeepSeek-V3 workload configs that overlap the expert all-to-alls:
#: (GPU, number formats or None for any, first and last container release (None: open),
#: (pp, vpp, ep) or None for any layout, where ``moe_a2a_overlap`` /
#: ``overlap_moe_expert_parallel_comm`` is set). H100: the 25.09 run script's ``A2A_1F1B``
#: (r0.1.0 ``scripts/performance/run_script.py``, "h100" only) and the 25.11 H100 base config
#: (v0.2.0 ``workload_base_configs.py``, ``moe_a2a_overlap=True``), off from 26.02; GB300 and
#: GB200 MXFP8: the full-iteration CUDA-graph recipes of June 2026 (26.06); B200 MXFP8 "V2"
#: (pp 8, vpp 2, ep 32, DeepEP) since April 2026.
A2A_OVERLAP_CONFIGS = (
    ("h100", None, (25, 9), (25, 11), None, "run_script.py A2A_1F1B (r0.1.0), v0.2.0 H100 "
     "base config"),
    ("gb300", ("mxfp8",), (26, 6), None, None, "8af195c0a (2026-06-06)"),
    ("gb200", ("mxfp8",), (26, 6), None, None, "afb5dd47c (2026-06-10)"),
    ("b200", ("mxfp8",), (26, 4), None, (8, 2, 32), "5acef9309 (2026-04-18)"),
)


#: Megatron-Bridge DeepSeek-V3 workload configs that run attention in FP8
#: (``fp8_dot_product_attention=True``), in the shape of :data:`A2A_OVERLAP_CONFIGS`: the GB300
#: MXFP8 full-iteration CUDA-graph recipe (GB200's of 26.06, afb5dd47c, does not set it).
FP8_ATTENTION_CONFIGS = (
    ("gb300", ("mxfp8",), (26, 6), None, None, "8af195c0a (2026-06-06)"),
)


#: Megatron-Bridge DeepSeek-V3 workload configs that run the LM head in MXFP8
#: (``cfg.model.fp8_output_proj = True``, Megatron-Core's opt-in TE output layer of
#: Megatron-LM 3f6a2ed844): the GB300 and GB200 MXFP8 full-iteration CUDA-graph recipes as the
#: r0.5.0 release branch (container 26.06) took them, B300 MXFP8 from r0.5.1 (26.06.01).
#: Every other row's LM head (and its MTP copy) runs in BF16.
FP8_LM_HEAD_CONFIGS = (
    ("gb300", ("mxfp8",), (26, 6), None, None, "7a8bd64b2 (2026-06-10, r0.5.0)"),
    ("gb200", ("mxfp8",), (26, 6), None, None, "7a8bd64b2 (2026-06-10, r0.5.0)"),
    ("b300", ("mxfp8",), (26, 6, 1), None, None, "78540b210 (2026-06-29, r0.5.0)"),
)


#: Megatron-Bridge DeepSeek-V3 workload configs that capture CUDA graphs, first match wins:
#: (GPU, number formats or None, first and last container release, (pp, vpp, ep) or None,
#: (TrainingConfig ``cuda_graphs``, where set)). ``full``: ``cuda_graph_impl = "full_iteration"``
#: (with sync-free HybridEP experts and the fused grouped MLP: GB300 and GB200 MXFP8 from the
#: June 2026 recipes, B300 MXFP8 from r0.5.1); ``partial``: ``"transformer_engine"`` per-layer
#: graphs of attn, moe_router and moe_preprocess (GB200 since v0.2.0, where attention joined
#: in v0.3.0; GB300 in v0.2.0 and its BF16 config after; B300 V2 from #3549; B200 MXFP8 V2).
#: Every other DeepSeek-V3 config, and the 25.09 run script, captures none; a row whose layout
#: is not its config's (pp, vpp, ep) is left without graphs.
CUDA_GRAPH_CONFIGS = (
    ("gb300", ("mxfp8",), (26, 6), None, None, ("full", "8af195c0a (2026-06-06)")),
    ("gb200", ("mxfp8",), (26, 6), None, None, ("full", "afb5dd47c (2026-06-10)")),
    ("b300", ("mxfp8",), (26, 6, 1), None, None, ("full", "v0.5.1 B300 FP8_MX configs")),
    ("b300", None, (26, 4, 1), None, (8, 1, 8), ("partial", "cf9411452 (2026-04-30), B300 V2")),
    ("b200", ("mxfp8",), (26, 4), None, (8, 2, 32), ("partial", "5acef9309 (2026-04-18), V2")),
    ("gb300", None, (25, 11), (25, 11), (4, 4, 64), ("partial", "v0.2.0 GB300 base config")),
    ("gb300", ("bf16",), (26, 2), None, (4, 4, 64), ("partial", "v0.3.0+ GB300 BF16 config")),
    ("gb200", None, (25, 11), None, (4, 4, 64), ("partial", "v0.2.0+ GB200 configs")),
)


#: Megatron-Bridge DeepSeek-V3 performance recipes' per-module recompute
#: (``recompute_modules`` with selective granularity), by GPU, number formats (None: any), the
#: first and last container release (None: open) and where it is set: the 25.09 run script
#: (``scripts/performance/run_script.py`` @a28844195, r0.1.0; the GB200 rows are token-drop
#: runs), the workload base configs of v0.2.0 (25.11) to v0.5.x (26.06.01), and the 26.08
#: perf recipes. The recipes' "layernorm" module (GB300 26.04.01 V2) is not in these rows.
RECOMPUTE_MODULES_CONFIGS = (
    ("h100", None, (25, 9), None, ("mla_up_proj", "mlp"), "run_script.py @a28844195, v0.2.0+"),
    ("b200", None, (25, 9), (26, 4), ("mla_up_proj",), "run_script.py @a28844195, v0.2.0-v0.4.0"),
    ("b200", None, (26, 4, 1), None, ("mla_up_proj", "mlp"), "5acef9309 (2026-04-18, V2)"),
    ("b300", None, (26, 2), None, ("mla_up_proj",), "v0.3.0+ B300 configs"),
    ("gb200", None, (25, 9), (26, 2, 1), ("mla_up_proj",), "run_script.py @a28844195 "
     "(token drop), v0.2.0-v0.3.1"),
    ("gb200", None, (26, 4), (26, 4, 1), ("mlp",), "801277876 (2026-03-31), v0.4.x"),
    ("gb200", None, (26, 6), None, ("mla_up_proj",), "v0.5.0+ GB200 MXFP8 configs"),
    ("gb300", None, (25, 11), (25, 11), ("moe_act",), "v0.2.0 GB300 base config"),
    ("gb300", None, (26, 2), (26, 4, 1), ("mla_up_proj",), "v0.3.0-v0.4.2 GB300 V1 config"),
    ("gb300", ("mxfp8",), (26, 6), None, (), "8af195c0a (2026-06-06): none"),
)


def alltoall_dispatcher(gpu: str, source: str, token_drop: bool) -> str | None:
    """Where a DeepSeek-V3 row's recipe leaves Megatron's default ``alltoall`` token
    dispatcher (the flex DeepEP/HybridEP one everywhere else), or None: the 25.09 run
    script's token-drop runs ("Using token drop, disabling DeepEP": B200 and GB200 by default,
    r0.1.0 ``scripts/performance/run_script.py``) and the 25.11 B200 base config, which names
    no flex backend (v0.2.0 ``workload_base_configs.py``; ``DeepSeekProvider``'s
    ``moe_token_dispatcher_type = "alltoall"``)."""
    release = container_release(source)
    if release is None:
        return None
    if token_drop and release < (25, 11):
        return "run_script.py r0.1.0: token drop disables DeepEP"
    if gpu.startswith("b200") and release[:2] == (25, 11):
        return "v0.2.0 B200 base config: no flex backend"
    return None


def recompute_modules_of(gpu: str, number_format: str,
                         source: str) -> tuple[tuple[str, ...], str] | None:
    """(modules, where set) of the recipe a DeepSeek-V3 row ran, from
    :data:`RECOMPUTE_MODULES_CONFIGS`, or None when no entry matches."""
    release = container_release(source)
    if release is None:
        return None
    for family, formats, first, last, modules, where in RECOMPUTE_MODULES_CONFIGS:
        if _applies(gpu, number_format, release, family, formats, first, last):
            return modules, where
    return None


def _applies(gpu: str, number_format: str, release: tuple[int, ...], family: str,
             formats: tuple[str, ...] | None, first: tuple[int, ...],
             last: tuple[int, ...] | None) -> bool:
    """A recipe-table entry covers the row: its GPU family, one of its number formats (None:
    any) and its container releases ``[first, last]`` (last None: open)."""
    return (gpu.startswith(family) and (formats is None or number_format in formats)
            and release >= first and (last is None or release <= last))


def container_release(text: str) -> tuple[int, ...] | None:
    """The NeMo container release a source names ("..._26.04.01" -> (26, 4, 1))."""
    m = re.search(r"(\d{2})\.(\d{2})(?:\.(\d{2}))?(?!\d)", text)
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def recipe_commit(configs, gpu: str, number_format: str, source: str,
                  layout: dict[str, Any], ep: int) -> Any:
    """Where the config in ``configs`` (:data:`A2A_OVERLAP_CONFIGS`,
    :data:`FP8_ATTENTION_CONFIGS`, :data:`FP8_LM_HEAD_CONFIGS`; the value and where with
    :data:`CUDA_GRAPH_CONFIGS`) a row matches sets it, or None: the entry applies
    (:func:`_applies`) and the layout ``(pp, vpp, ep)`` matches (None: any)."""
    release = container_release(source)
    if release is None:
        return None
    shape = (layout.get("pp", 1), layout.get("vpp", 1), ep)
    for family, formats, first, last, needs, commit in configs:
        if (_applies(gpu, number_format, release, family, formats, first, last)
                and (needs is None or shape == needs)):
            return commit
    return None


def moe_preset(model: str) -> str | None:
    """The preset id a published MoE model name means, or None."""
    low = model.lower()
    return next((preset for pattern, preset in MOE_PRESETS if re.search(pattern, low)), None)


def deepseek_stage_layers(n_layers: int, pp: int, vpp: int) -> tuple[int, int] | None:
    """Decoder layers on the first and last pipeline stage of Megatron-Bridge's DeepSeek-V3
    layout (``_get_deepseek_v3_pipeline_layout``), or None without pipelining.

    Its table spreads the layers over the ``V = pp·vpp`` virtual stages ``c = ceil(L/V)`` at a
    time, the embedding with the first and ``L − c·(V−1)`` decoder layers with MTP and the loss
    on the last ((4, 1): 16, 16, 16, 13; (8, 2) and (4, 2): 8 ... 5; (16, 1): 4 ... 1). Where
    that leaves the last virtual stage no layer (V = 32) Megatron's
    ``account_for_embedding_in_pipeline_split`` and ``..._loss_...`` apply, with MTP a layer's
    slot: ``c = (L + 3)/V``, the first ``c − 1`` and the last ``c − 2``. A physical stage holds
    ``vpp`` virtual stages, the first and the last of them at its ends."""
    if pp < 2:
        return None
    v = pp * vpp
    c = math.ceil(n_layers / v)
    first_vs, last_vs = c, n_layers - c * (v - 1)
    if last_vs < 1:
        if (n_layers + 3) % v:
            return None
        c = (n_layers + 3) // v
        first_vs, last_vs = c - 1, c - 2
    return first_vs + (vpp - 1) * c, last_vs + (vpp - 1) * c


def moe_row(model: str, framework: str, notes: str, layout: dict[str, Any],
            n_layers: int | None, *, gpu: str = "", number_format: str = "", source: str = "",
            ep: int = 1) -> tuple[dict[str, Any], list[str], str]:
    """(measurement columns, ``modelled_as`` notes, skip reason) of a published MoE row."""
    preset = moe_preset(model)
    if preset is None:
        return {}, [], f"mixture of experts: model {model!r} is not a preset"
    low, text = model.lower(), f"{model} {notes}".lower()
    megatron = any(w in framework.lower() for w in ("megatron", "nemo"))
    cols: dict[str, Any] = {"preset": preset}
    said: list[str] = []
    if "w/o mtp" in low or "without mtp" in low:
        cols["mtp_layers"] = 0
    elif preset == "deepseek-v3" and megatron and "w/ mtp" not in low:
        said.append("MTP not stated: Megatron-Bridge's DeepSeek-V3 recipe (mtp_num_layers 1)")
    if "tokendrop" in low or "token drop" in low:
        cols["moe_capacity_factor"] = 1.0
        said.append("token dropping: capacity factor 1.0, padded (Megatron-Bridge "
                    "apply_moe_token_drop)")
    elif "force-balanced" in text or "force balanced" in text:
        cols["moe_imbalance"] = 1.0
        said.append("routing force-balanced (moe_router_force_load_balancing): imbalance 1")
    if megatron and preset == "deepseek-v3":
        commit = recipe_commit(A2A_OVERLAP_CONFIGS, gpu, number_format, source, layout, ep)
        if commit:
            cols["ep_overlap"] = True
            said.append(f"expert all-to-all overlapped (Megatron-Bridge moe_a2a_overlap, {commit})")
        commit = recipe_commit(FP8_ATTENTION_CONFIGS, gpu, number_format, source, layout, ep)
        if commit:
            cols["fp8_attention"] = True
            said.append(f"attention in FP8 (Megatron-Bridge fp8_dot_product_attention, {commit})")
        found = recompute_modules_of(gpu, number_format, source)
        if found and found[0]:
            cols["recompute_modules"] = ",".join(found[0])
            said.append(f"recompute of {', '.join(found[0])} (Megatron-Bridge recompute_modules, "
                        f"{found[1]})")
        commit = recipe_commit(FP8_LM_HEAD_CONFIGS, gpu, number_format, source, layout, ep)
        if commit:
            cols["fp8_lm_head"] = True
            said.append(f"LM head in MXFP8 (Megatron-Bridge fp8_output_proj, {commit})")
        graphs = recipe_commit(CUDA_GRAPH_CONFIGS, gpu, number_format, source, layout, ep)
        if graphs:
            cols["cuda_graphs"] = graphs[0]
            said.append(f"{graphs[0]} CUDA graphs (Megatron-Bridge cuda_graph_impl "
                        f"{'full_iteration' if graphs[0] == 'full' else 'transformer_engine'}, "
                        f"{graphs[1]})")
        where = alltoall_dispatcher(gpu, source, "moe_capacity_factor" in cols)
        if where:
            cols["moe_dispatcher"] = "alltoall"
            said.append(f"all-to-all dispatcher: every routed copy crosses nodes ({where})")
        else:
            cols["moe_dispatcher"] = "deepep"
            said.append("tokens cross nodes once per node (Megatron-Bridge flex dispatcher, "
                        "DeepEP/HybridEP)")
        cols["etp"] = 1
        said.append("etp 1 (Megatron-Bridge DeepSeek-V3 recipe)")
        vpp = layout.get("vpp", 1)
        if isinstance(vpp, int) and n_layers:
            split = deepseek_stage_layers(n_layers, layout.get("pp", 1), vpp)
            if split is not None:
                cols["pp_first_layers"], cols["pp_last_layers"] = split
                said.append(f"stages {split[0]} + ... + {split[1]} layers (Megatron-Bridge "
                            "DeepSeek-V3 pipeline layout)")
    return cols, said, ""


def preset_flops_per_token(preset: str, mtp_layers: int | None, seq_len: int,
                           causal: bool = True) -> float:
    """Model FLOPs per trained token of a preset under a table's count [FLOP/token]: forward
    and backward (3× forward) of every layer, the LM head and the MTP modules, from the
    architecture (:mod:`fsdpsim.model_flops`: MLA's projections and its 192-wide scores and
    128-wide values, not ``d_model``-wide attention).

    Why: a row that states only TFLOP/s per GPU is turned into tokens/s by this count. The
    generic ``6N + 6·L·d·s`` assumes attention ``d_model`` wide; DeepSeek-V3's MLA has 128 heads
    × (192 + 128), so its causal attention is 30.7 GFLOP/token, not 10.7 — the generic count
    reads 330 TFLOP/s as 1,432 tokens/s where the table's own row beside it (338 TFLOP/s, 1,297
    tokens/s) gives 1,266. The Megatron-Bridge tables count causal attention and DeepSeek-V3's
    MTP layer (``../shared/validation`` README; the row's stated/implied TFLOP/s = 1.041 without
    MTP, 1.004 with it). ``causal=False`` counts every score of the square (NeMo 24.x tables).
    """
    import dataclasses

    from fsdpsim.model_flops import (forward_flops_per_token, keys_per_query,
                                     layer_flops_per_token, mtp_forward_flops_per_token)
    from fsdpsim.presets import get_model

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
