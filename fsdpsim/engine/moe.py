"""Engine stage helper: layers of two kinds, expert parallelism and multi-token prediction.

A model whose layers differ (:mod:`fsdpsim.engine.build_moe`) is timed as two kinds of layer, each
through :func:`fsdpsim.engine.layers.layer_times` with its own GEMMs:

* the **dense kind**: attention (GQA's fused QKV and output projections, or multi-head latent
  attention's down and up projections, DeepSeek-V3 Eq. 1-11) and a dense MLP of ``ffn_size``;
* the **MoE kind**: the same attention, the router, the shared expert (a dense MLP of
  ``shared_ffn``) and the rank's routed experts as grouped GEMMs on their real shapes, at the
  busiest expert-parallel rank's load (:mod:`fsdpsim.costs.moe`; under Megatron at least the
  host time of their per-expert launches), plus per layer and micro-batch the expert-parallel
  all-to-alls (:mod:`fsdpsim.engine.expert_comm`: dispatch and combine, forward and backward,
  on the tier the EP group spans, exposed, or hidden behind another micro-batch's compute with
  ``ep_overlap``; DeepSeek-V3 §3.2.1 DualPipe; Megatron-Core's 1F1B all-to-all overlap).

A pipeline stage's per-layer values are the mean over its layers, ``(1 − φ)·dense + φ·MoE``
with ``φ`` its share of MoE layers (exact for the stage's totals; the FSDP overlap then sees
average units). The data-parallel collectives of a MoE layer are its dense part over the
ordinary shard group and its local experts over the expert data-parallel group (Megatron's
expert data parallelism; torchtitan shards experts over ``dp_shard_mod_ep``). Multi-token
prediction adds, on the last stage, ``mtp_layers`` blocks of the last layer's kind, their
``2d → d`` projection and a second pass through the LM head and loss (DeepSeek-V3 §2.2).
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from fsdpsim.costs import comm, compute, pass_ratios
from fsdpsim.costs.compute import all_of, any_of, maximum, minimum, where
from fsdpsim.costs import moe as moe_costs
from fsdpsim.engine import collectives, expert_comm, layers, module_recompute
from fsdpsim.engine.moe_parts import (_gemms, attention_gemm_times,  # noqa: F401
                                      gemm_rates, gqa_gemm_times, mlp_gemm_times, moe_tokens,
                                      routing)
from fsdpsim.engine.inputs import Prepared
from fsdpsim.engine.results import (DATA_PARALLEL_GROUPS, LAYER_FIELDS, LayerKind, LayerTimes,
                                    MoeLayerTimes, replace)

#: Per-block data-parallel collective times (:func:`fsdpsim.engine.collectives.data_parallel`).
DP_BLOCK_KEYS = ("ag_block_s", "rs_block_s", "hsdp_ar_block_s", "ddp_ar_block_s",
                 "zero1_rs_block_s")
_DP_BLOCK_VALUES = attrgetter(*DP_BLOCK_KEYS)  # those times of a result, in that order
#: The times :func:`data_parallel` reads of a MoE layer's experts (:data:`DP_BLOCK_KEYS`, and
#: the optimizer their ZeRO-1 gather) and of a stage's mean unit.
_EXPERT_KEYS = (*DP_BLOCK_KEYS, "zero1_ag_all_s")
_GATHER_KEYS = ("zero1_ag_all_s",)
#: Expert groups and the data-parallel group names they stand in for.
EXPERT_GROUP_OF = {"shard": "eshard", "replicate": "ereplicate", "dp_world": "edp"}


LAYERED_KEYS = ("moe_layers", "mla", "qk_norm", "mtp_layers")


def layered(g: Prepared) -> bool:
    """True when some row has MoE layers, MLA, q/k norms or MTP modules."""
    return any(any_of(np.asarray(getattr(g, k)) > 0) for k in LAYERED_KEYS)


def mla_everywhere(g: Prepared) -> bool:
    """True when every row has multi-head latent attention (DeepSeek-V3, Kimi K2): no row is
    the uniform layer, whose GEMMs :func:`layer_kinds` then does not need."""
    return bool(all_of(g.mla > 0))


def layered_rows(g: Prepared) -> np.ndarray:
    """Which rows have MoE layers, MLA, q/k norms or MTP modules (the others keep the uniform
    engine's numbers exactly)."""
    rows = np.asarray(getattr(g, LAYERED_KEYS[0])) > 0
    for key in LAYERED_KEYS[1:]:  # inputs of one value and per-row ones broadcast
        rows = rows | (np.asarray(getattr(g, key)) > 0)
    return rows


def moe_share(g, layers_key="layers_mid", moe_key="moe_layers_mid"):
    """φ: the share of a stage's layers that are MoE layers [-]."""
    moe_layers = getattr(g, moe_key)
    return where(moe_layers > 0, moe_layers / maximum(getattr(g, layers_key), 1.0), 0.0)


def _qk_norm_bytes(g, w):
    """HBM bytes of per-head q/k RMSNorms (Qwen3), (forward, backward) [B]."""
    width = w.tokens * (w.q + w.kv) * g.compute_bytes * (g.qk_norm > 0)
    return 2.0 * width, 3.0 * width


def layer_kinds(g, r, w, lt, rates, gqa, core=None):
    """Times of the dense and the MoE kind of layer, one micro-batch, one rank, and the MoE
    layer's expert-parallel communication: ``(lt_dense, lt_moe, ep)``; ``lt`` is the uniform
    layer :func:`fsdpsim.engine.layers.layer_times` gave (the dense kind without MLA), ``rates``
    :func:`gemm_rates` and ``gqa`` the GQA projections' times
    (:func:`fsdpsim.engine.moe_parts.gqa_gemm_times`), which the uniform layer's GEMMs
    include; every kind shares the uniform layer's attention core. Where every row has MLA
    (:func:`mla_everywhere`), no row is the uniform layer: ``lt`` and ``gqa`` are None and
    ``core`` is the attention core (:func:`fsdpsim.engine.layers.attention_times`)."""
    elem = g.compute_bytes
    attn = attention_gemm_times(g, w, rates, elem, gqa)
    if core is None:
        core = (lt.attn_fwd_s, lt.attn_bwd_s, lt.attn_flops_fwd)  # the kinds' attention core
    qk = _qk_norm_bytes(g, w) if any_of(g.qk_norm > 0) else None
    lt_d = lt
    if lt is None or any_of(g.mla > 0) or qk is not None:
        mlp = mlp_gemm_times(g, w.tokens, w.ffn, rates, elem)
        mla = g.mla > 0  # rows without MLA keep the uniform layer's GEMMs exactly
        if all_of(mla):
            gemm = (attn[0] + mlp[0], attn[1] + mlp[1], mlp[2])
        else:
            uniform = compute.layer_gemm_times_with_down_s(
                w.tokens, g.d_model, w.q, w.kv, w.ffn, g.swiglu > 0,
                g.active_experts, r.matmul, r.hbm, g.matmul_half_flops,
                g.matmul_half_k, elem, gqa)
            gemm = (where(mla, attn[0] + mlp[0], uniform[0]),
                    where(mla, attn[1] + mlp[1], uniform[1]), where(mla, mlp[2], uniform[2]))
        lt_d = layers.layer_times(g, r, w, gemm=gemm, extra_ew=qk, attention=core)
    mla_up_s = None
    if any_of(g.rc_mla_up_proj > 0) and any_of(g.mla > 0):
        mla_up_s = where((g.rc_mla_up_proj > 0) & (g.mla > 0)
                         & (np.asarray(g.recompute) != 2),
                         module_recompute.mla_up_proj_fwd_s(g, w, rates, elem), 0.0)
        lt_d = replace(lt_d, recompute_s=lt_d.recompute_s + mla_up_s)
    if not any_of(g.moe_layers > 0):
        return lt_d, lt_d, None
    ro = routing(g)
    shared_local = g.shared_ffn / g.tp
    shared = mlp_gemm_times(g, w.tokens, shared_local, rates, elem)
    router = moe_costs.router_gemm_times_s(ro.tokens, g.d_model, g.n_experts,
                                           r.matmul, r.hbm, g.matmul_half_flops,
                                           g.matmul_half_k, elem)
    experts = moe_costs.expert_gemm_times_s(ro.rows_per_expert, ro.local, g.d_model,
                                            ro.ffn_local, g.swiglu > 0, r.matmul,
                                            r.hbm, g.matmul_half_flops,
                                            g.matmul_half_k, elem)
    expert_ops = None
    if any_of(g.megatron > 0):  # Megatron's experts cost host time per local expert
        experts, expert_ops = _host_bound_experts(g, ro, experts)
    ew = moe_costs.moe_elementwise_bytes(ro.tokens, ro.rows, g.d_model, ro.ffn_local,
                                         g.n_experts, g.swiglu > 0, elem)
    if any_of(g.fp8_gemm > 0):
        cast = moe_costs.expert_fp8_cast_bytes(ro.rows, g.d_model, ro.ffn_local,
                                               ro.local, g.swiglu > 0)
        fp8 = g.fp8_gemm > 0
        scale = g.cast_scale  # block-scaled formats: their bytes per element over FP8's
        ew = (ew[0] + where(fp8, scale * cast[0], 0.0),
              ew[1] + where(fp8, scale * cast[1], 0.0))
    if qk is not None:
        ew = (ew[0] + qk[0], ew[1] + qk[1])
    gemm = (attn[0] + shared[0] + router[0] + experts[0],
            attn[1] + shared[1] + router[1] + experts[1], shared[2] + experts[2])
    # the shared expert as the MLP; Megatron's "mlp" module recompute skips MoE layers (their
    # shared expert included)
    kind = LayerKind(active_experts=1.0, block_numel=g.moe_block_numel, rc_mlp=0.0)
    layer = layers.layer_times(g, r, replace(w, ffn=shared_local), gemm=gemm, extra_ew=ew,
                               extra_ops=expert_ops, kind=kind, attention=core)
    recompute_s = layer.recompute_s
    if mla_up_s is not None:
        recompute_s = recompute_s + mla_up_s
    if any_of(g.rc_moe_act > 0):
        recompute_s = recompute_s + where(
            (g.rc_moe_act > 0) & (np.asarray(g.recompute) != 2),
            module_recompute.moe_act_recompute_s(g, r, ro, elem), 0.0)
    # The MoE MLP alone (router, shared and routed experts, their element-wise kernels): the
    # time reported as the MoE share.
    lt_m = MoeLayerTimes(**{**dict(zip(LAYER_FIELDS, _LAYER_VALUES(layer))),
                            "recompute_s": recompute_s},
                         moe_mlp_fwd_s=gemm[0] - attn[0]
                         + compute.memory_bound_time_s(ew[0], r.hbm),
                         moe_mlp_bwd_s=gemm[1] - attn[1]
                         + compute.memory_bound_time_s(ew[1], r.hbm))
    return lt_d, lt_m, expert_comm.expert_parallel(g, r, ro, lt_m)


def _host_bound_experts(g, ro, experts):
    """Megatron's expert GEMM times with the host time of their per-expert work
    (:func:`fsdpsim.costs.moe.expert_host_ops`), and that work as host ops of the layer
    (forward, backward) [s, -].

    * Forward: a dropless dispatch synchronises host and device, so the experts take at least
      their host time ``h_f`` (a capacity-padded dispatch has static splits and no sync).
    * Backward: nothing synchronises inside a chain of layers, which starts with an empty
      queue; for n layers of host time ``h_E + h_A`` and device time ``d_E + d_A`` (experts,
      the rest) issued in order, the GPU finishes at ``max_i(H_≤i + D_≥i)`` = ``n·d + max(0,
      h_E − d_E)`` while the host keeps up with each layer (``h ≤ d``): the first layer's
      excess shows, once per chain — the stage's MoE layers (one chunk's with interleaving,
      the whole model's without pipelining); the later ones hide behind the lead the host
      gains on the device-bound rest. It is spread over the chain's MoE layers here
      (``tests/test_moe_engine.py`` checks the formula against a host/device queue).
    * Either pass: the layer's own floor counts the experts' ops among its host ops
      (:func:`fsdpsim.engine.layers.layer_times` ``extra_ops``): ``n·h`` where the host
      falls behind (``h > d``)."""
    on = (g.megatron > 0) & (g.cuda_graphs < 2)  # a full-iteration graph replays them
    ops = tuple(where(on, n, 0.0) for n in moe_costs.expert_host_ops(ro.local,
                                                                     g.fp8_gemm > 0))
    host_fwd_s, host_bwd_s = (n * g.kernel_overhead_s for n in ops)
    dropless = g.moe_capacity_factor <= 0
    chain = where(g.pp > 1, g.moe_layers_mid / maximum(g.vpp, 1.0), g.moe_layers)
    bwd_excess_s = maximum(host_bwd_s - experts[1], 0.0) / maximum(chain, 1.0)
    timed = (where(dropless, maximum(experts[0], host_fwd_s), experts[0]),
             experts[1] + bwd_excess_s, experts[2])
    return timed, ops


def mix(dense: LayerTimes, moe: LayerTimes, phi) -> LayerTimes:
    """``(1 − φ)·dense + φ·moe`` of each field of :class:`~fsdpsim.engine.results.LayerTimes`
    [s, FLOP], as ``d + φ·(m − d)``; where φ is 1 on every row (every layer a MoE layer) and
    ``m − d`` a float64 array (of φ's shape where φ is an array), ``d + (m − d)`` (the same
    values and array: 1·x is x, bit for bit)."""
    one = bool(all_of(phi == 1.0))
    shape = np.shape(phi)
    mixed = []
    for d, m in zip(_LAYER_VALUES(dense), _LAYER_VALUES(moe)):
        diff = m - d
        same = (one and type(diff) is np.ndarray and diff.dtype == np.float64
                and (not shape or diff.shape == shape))
        mixed.append(d + (diff if same else phi * diff))
    return LayerTimes(*mixed)


#: A layer's times in the order of :data:`~fsdpsim.engine.results.LAYER_FIELDS`.
_LAYER_VALUES = attrgetter(*LAYER_FIELDS)


def mtp_times(g, r, w, lt_d, lt_m, ep, rt):
    """Forward and backward time of the multi-token-prediction modules for one micro-batch on
    the last stage [s]: each a block of the last layer's kind (its expert-parallel exposure
    included), the ``2d → d`` projection of the normed hidden state and next-token embedding,
    and the shared LM head with its loss again (DeepSeek-V3 Eq. 21-25)."""
    n = g.mtp_layers
    moe = g.mtp_moe > 0
    proj = compute.linear_time_s(w.tokens, g.d_model / g.tp, 2.0 * g.d_model,
                                 r.matmul, r.hbm, g.matmul_half_flops,
                                 g.matmul_half_k, g.compute_bytes)
    fwd = where(moe, lt_m.block_fwd_s + ep.fwd_exposed_s, lt_d.block_fwd_s)
    bwd = where(moe, lt_m.block_bwd_s + ep.bwd_exposed_s, lt_d.block_bwd_s)
    return (n * (fwd + proj[0] + rt.head_fwd_s), n * (bwd + proj[1] + rt.head_bwd_s))


# -- inputs ------------------------------------------------------------------------------------
def prepare_layers(g: dict) -> None:
    """Defaults of the layered-model inputs a caller did not give (fsdpsim.engine.build_moe): MoE
    layers per stage in proportion to the stage's layers (exact without pipelining), the expert
    groups as the data-parallel ones re-split by ``etp × ep`` (every layout is exact for
    ep = 1 and etp = tp), and the attention's share of the causal pairs its masks keep; no
    MoE layer: none on any stage. A step of :func:`fsdpsim.engine.prepare.prepare`, on the
    mapping it builds the prepared inputs from (in place)."""
    if "etp" not in g:
        g["etp"] = g["tp"]
    if not any_of(g["moe_layers"] > 0):  # no MoE layer on any stage
        for end in ("first", "mid", "last"):
            g.setdefault(f"moe_layers_{end}", 0.0)
        if any_of(g["sliding_layers"] > 0) or any_of(g["chunked_layers"] > 0):
            attention_pairs(g)
        return
    for end in ("first", "mid", "last"):
        if f"moe_layers_{end}" not in g:
            g[f"moe_layers_{end}"] = g["moe_layers"] * g[f"layers_{end}"] / g["n_layers"]
    ratio = g["tp"] / (g["etp"] * g["ep"])
    for expert, (dense, scale) in {"ep": (None, None), "etp": (None, None),
                                   "edp": ("dp_world", ratio), "eshard": ("shard", ratio),
                                   "ereplicate": ("replicate", 1.0)}.items():
        if f"{expert}_size" in g:
            continue
        if dense is None:
            size = g[expert]
            g[f"{expert}_size"], g[f"{expert}_per_node"] = size, minimum(size,
                                                                             g["gpus_per_node"])
        else:
            size = maximum(g[f"{dense}_size"] * scale, 1.0)
            g[f"{expert}_size"] = size
            g[f"{expert}_per_node"] = np.clip(g[f"{dense}_per_node"] * scale, 1.0, size)
    if any_of(g["sliding_layers"] > 0) or any_of(g["chunked_layers"] > 0):
        attention_pairs(g)


def attention_pairs(g: dict) -> None:
    """``attn_pair_ratio``: the mean over layers of the causal query-key pairs each layer's
    mask keeps, relative to full causal attention (:mod:`fsdpsim.model.flops`)."""
    from fsdpsim.model import flops as model_flops

    s = g["seq_len"]
    full = model_flops.full_causal_pairs(s)
    sliding = model_flops.sliding_window_pairs(s, g["sliding_window"]) / full
    chunked = model_flops.chunked_causal_pairs(s, g["chunk_size"]) / full
    n_full = g["n_layers"] - g["sliding_layers"] - g["chunked_layers"]
    g["attn_pair_ratio"] = (n_full + g["sliding_layers"] * sliding
                            + g["chunked_layers"] * chunked) / g["n_layers"]


# -- data parallelism -----------------------------------------------------------------------
def expert_local_numel(g):
    """Routed-expert parameters of one MoE layer on one rank: all experts / (ep · etp) [-]."""
    return g.expert_layer_numel / (g.ep * g.etp)


def expert_inputs(g):
    """The engine inputs ``g`` with the expert groups in place of the data-parallel ones and a
    MoE layer's local experts as the unit (no root), for
    :func:`fsdpsim.engine.collectives.data_parallel` and the optimizer."""
    groups = {group + suffix: getattr(g, expert + suffix)
              for group, expert in EXPERT_GROUP_OF.items()
              for suffix in ("_size", "_per_node", "_per_pod")
              if getattr(g, expert + suffix) is not None}  # no pods: the dense group's stay
    return g.replace(**groups, block_numel_padded=expert_local_numel(g), root_numel_padded=0.0,
                     dp_block_calls=1.0, dp_root_calls=1.0)


def data_parallel(g, r, co, dpc, n_units, phi):
    """Per-block data-parallel collective times of a stage with MoE layers [s]:
    ``(1 − φ)·dense layer + φ·(MoE layer's dense part + its local experts over the expert
    groups)``; returns (mixed dpc, the experts' own dpc and their inputs)."""
    dpc_m = collectives.data_parallel(g, co, n_units, r, keys=DP_BLOCK_KEYS,
                                      block_numel=g.moe_block_numel_padded)
    g_e = expert_inputs(g)
    co_e = collectives.group_coefficients(g_e, r)
    # An expert group laid out as its dense group on every row (ep = 1, etp = tp) has the
    # dense group's NCCL candidates: built once.
    co_e = replace(co_e, **{name: getattr(co, name) for name in DATA_PARALLEL_GROUPS
                            if all(_same(getattr(g_e, name + suffix), getattr(g, name + suffix))
                                   for suffix in ("_size", "_per_node", "_per_pod"))})
    dpc_e = collectives.data_parallel(g_e, co_e, n_units * phi, r, keys=_EXPERT_KEYS)
    mixed = {k: d + phi * (m + e - d) for k, d, m, e in zip(
        DP_BLOCK_KEYS, _DP_BLOCK_VALUES(dpc), _DP_BLOCK_VALUES(dpc_m), _DP_BLOCK_VALUES(dpc_e))}
    if any_of(np.asarray(g.strategy) == comm.OPTIMIZER):  # ZeRO-1's gather of the stage
        mean = stage_dense_numel(g, n_units, n_units * phi) / maximum(n_units, 1.0)
        whole = collectives.data_parallel(g, co, n_units, r, keys=_GATHER_KEYS,
                                          block_numel=mean)
        mixed["zero1_ag_all_s"] = where(g.moe_layers > 0, whole.zero1_ag_all_s
                                        + dpc_e.zero1_ag_all_s, dpc.zero1_ag_all_s)
    return replace(dpc, **mixed), dpc_e, g_e


def _same(a, b) -> bool:
    """Whether two inputs hold the same values (both absent, one object, or equal arrays)."""
    if a is b:
        return True
    if a is None or b is None or np.shape(a) != np.shape(b):
        return False
    return bool(np.array_equal(a, b))


def stage_dense_numel(g, n_layers, n_moe):
    """Padded dense-part parameters of a stage's layers (no root) [-]."""
    return (n_layers - n_moe) * g.block_numel_padded + n_moe * g.moe_block_numel_padded


# -- FLOPs ----------------------------------------------------------------------------------------
def layered_flops(g, rc_share, k):
    """Executed and model FLOPs of one step of a layered model [FLOP] (as
    :func:`fsdpsim.engine.metrics.executed_flops_per_microbatch` and
    :func:`fsdpsim.costs.compute.model_flops_per_token`, per kind of layer): every active
    weight 3 × its forward (dense layers their MLP, MoE layers router + top-k experts +
    shared), attention over the pairs each mask keeps (the full square for full layers, as MFU
    counts it; FlashAttention's backward 2.5 × its forward), the
    LM head, the MTP modules, and the recomputed forward."""
    b, s, L = g.micro_batch, g.seq_len, g.n_layers
    tokens = b * s
    flash = g.flash > 0
    ratio = g.attn_pair_ratio
    attn = compute.attention_flops_fwd(b, s, g.q_dim, causal=False) * ratio
    n_moe = g.moe_layers
    mm = 2.0 * tokens * ((L - n_moe) * g.dense_layer_matmul_params
                         + n_moe * g.moe_layer_matmul_params)
    head = compute.lm_head_flops_fwd(tokens, g.d_model, g.vocab_size)
    mtp_mm = g.mtp_layers * (2.0 * tokens * where(g.mtp_moe > 0,
                                                     g.moe_layer_matmul_params,
                                                     g.dense_layer_matmul_params)
                                + 2.0 * tokens * 2.0 * g.d_model ** 2 + head)
    recompute = np.asarray(g.recompute)
    layer_fwd = mm + L * attn
    extra = where(recompute == 2, layer_fwd, where(recompute == 1, L * attn, 0.0))
    if any_of(g.rc_mla_up_proj > 0) or any_of(g.rc_mlp > 0):
        extra = extra + where(recompute != 2, module_recompute.module_recompute_flops(g, tokens),
                              0.0)
    passes = where(flash, pass_ratios.FLASH_ATTENTION_PASSES, pass_ratios.EAGER_ATTENTION_PASSES)
    executed = (3.0 * (mm + head + mtp_mm) + (L + g.mtp_layers) * passes
                * attn + extra * rc_share) * k * g.dp
    full_attn = 12.0 * s * g.q_dim * ratio  # PaLM: the full square per token and layer
    model = (6.0 * g.matmul_params + 3.0 * mtp_mm / tokens
             + (L + g.mtp_layers) * full_attn) * tokens * k * g.dp
    return executed, model


# -- memory ---------------------------------------------------------------------------------------
def memory_update(g, config, stage, stage_free=None):
    """Memory keywords of a stage of a layered model (:func:`fsdpsim.engine.memory.
    memory_config`): the dense parts of its dense and MoE layers over the shard group, the
    local experts over the expert shard group (their states as the rest, unpadded: Megatron's
    flat buffers), the MoE layers' routed activations at the busiest rank's load and a dispatch
    in flight, MLP activations at the stage's mean width, and the MTP modules on the last
    stage. Rows of uniform models keep their keywords. ``stage_free``: a table shared by the
    stages of one evaluation, where the per-token routed bytes (the same on every stage) are
    kept once computed."""
    if stage == "only":
        n_layers, n_moe = g.n_layers, g.moe_layers
    else:
        n_layers, n_moe = getattr(g, f"layers_{stage}"), getattr(g, f"moe_layers_{stage}")
    rows = layered_rows(g)
    last = stage in ("only", "last")  # the stage with the MTP modules
    mtp = where(last, g.mtp_layers, 0.0)
    root_rank, root_padded = {"only": ("root_numel_rank", "root_numel_padded"),
                              "first": ("embed_numel_rank", "embed_numel_padded"),
                              "mid": (None, None),
                              "last": ("head_numel_rank", "head_numel_padded")}[stage]
    root_rank_numel = 0.0 if root_rank is None else getattr(g, root_rank)
    root_padded_numel = 0.0 if root_padded is None else getattr(g, root_padded)
    dense_rank = (n_layers - n_moe) * g.block_numel_rank + n_moe * g.moe_block_numel_rank
    n = maximum(n_layers, 1.0)
    new = {
        "n_params": dense_rank + root_rank_numel + where(last, g.mtp_numel_rank, 0.0),
        "padded_n_params": (stage_dense_numel(g, n_layers, n_moe) + root_padded_numel
                            + where(last, g.mtp_numel_padded, 0.0)),
        # a gathered MoE unit: its dense part and its local experts
        "unit_numel": maximum(g.block_numel_padded, where(
            n_moe > 0, g.moe_block_numel_padded + expert_local_numel(g), 0.0)),
        "ffn_size": ((n_layers - n_moe) * g.ffn_size + n_moe * g.shared_ffn) / n,
    }
    for key, value in new.items():
        config[key] = where(rows, value, config[key])
    config["expert_n_params"] = (n_moe + mtp * g.mtp_moe) * expert_local_numel(g)
    config["expert_shard_size"] = where(np.asarray(g.strategy) == comm.NONE, 1.0,
                                        g.eshard_size)
    if any_of(g.moe_layers > 0):
        table = {} if stage_free is None else stage_free
        if "routed_bytes" not in table:
            table["routed_bytes"] = _routed_bytes_per_token(g)
        kept, working = table["routed_bytes"]
        layers_moe = n_moe + mtp * g.mtp_moe
        config["moe_saved_bytes_per_token"] = where(layers_moe > 0, layers_moe * kept, 0.0)
        config["moe_working_bytes_per_token"] = where(n_moe > 0, working, 0.0)
    return config


def _routed_bytes_per_token(g):
    """A MoE layer's routed activation bytes per token of the micro-batch that the backward
    keeps (none under full recompute), and that its working set holds (those and a dispatch
    buffer in flight) [B] (:func:`memory_update`)."""
    ro = routing(g)
    per_token = 1.0 / (g.cp * g.tp)  # routed rows per token of the micro-batch
    rows_per_token = ro.rows / maximum(ro.tokens, 1e-300) * per_token
    saved = rows_per_token * moe_costs.routed_saved_bytes_per_row(
        g.d_model, ro.ffn_local, g.swiglu > 0, g.compute_bytes)
    saved = saved + per_token * moe_costs.ROUTER_BYTES * g.n_experts  # fp32 logits
    kept = where(np.asarray(g.recompute) == 2, 0.0, saved)
    working = saved + rows_per_token * moe_costs.a2a_buffer_bytes(1.0, g.d_model,
                                                                  g.compute_bytes)
    return kept, working
