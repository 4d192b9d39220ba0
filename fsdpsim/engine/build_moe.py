"""Engine inputs of models whose layers are not all alike: mixture-of-experts layers (routed and
shared experts, dense layers among them), multi-head latent attention, multi-token prediction,
sliding-window and chunked attention (:meth:`fsdpsim.model.spec.ModelSpec.layers`).

:func:`fsdpsim.engine.build.model_inputs` calls :func:`layered_model_inputs` for such models and
:func:`fsdpsim.engine.build.config_inputs` calls :func:`stage_inputs` (MoE layers per pipeline
stage) and :func:`moe_training_inputs`. The engine then times two kinds of layer
(:mod:`fsdpsim.engine.moe`): the *dense* kind (attention and a dense MLP of ``ffn_size``: the
engine's uniform block) and the *MoE* kind (attention, router, shared expert and the routed
experts, which expert parallelism divides). Parameters split the same way: the routed experts
(``expert_layer_numel``, all ``E`` experts of one layer, whole) are sharded over the expert mesh
(:class:`fsdpsim.plan.parallel.ParallelPlan`: ``ep × etp``, then the expert data-parallel group),
everything else like a dense model.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fsdpsim.model import layers as model_layers
from fsdpsim.costs.comm import padded_numel
from fsdpsim.model.spec import ModelSpec

#: Engine inputs of this module and their values for a model without any of these features
#: (the engine's defaults: :data:`fsdpsim.engine.OPTIONAL_INPUTS`).
DEFAULTS = {
    "moe_layers": 0.0, "n_experts": 1.0, "moe_top_k": 1.0, "expert_ffn": 0.0,
    "moe_router_groups": 1.0, "moe_router_group_top_k": 1.0,
    "shared_ffn": 0.0, "expert_layer_numel": 0.0, "moe_block_numel": 0.0,
    "moe_block_numel_rank": 0.0, "moe_block_numel_padded": 0.0,
    "moe_layer_matmul_params": 0.0, "dense_layer_matmul_params": 0.0,
    "mla": 0.0, "mla_q_rank": 0.0, "mla_kv_rank": 0.0, "mla_rope": 0.0, "mla_qk_head": 0.0,
    "mla_v_head": 0.0, "qk_norm": 0.0,
    "mtp_layers": 0.0, "mtp_moe": 0.0, "mtp_numel_rank": 0.0, "mtp_numel_padded": 0.0,
    "root_numel_rank": 0.0,
    "sliding_layers": 0.0, "sliding_window": 1.0, "chunked_layers": 0.0, "chunk_size": 1.0,
}
#: The model keys of :data:`DEFAULTS`: :func:`fsdpsim.engine.build.model_inputs` gives every model
#: all of them (a uniform model these values), so that inputs of any models stack.
MODEL_KEYS = tuple(DEFAULTS)
DEFAULTS = {
    **DEFAULTS,
    # training: dropless with the default imbalance; dispatch in the 16-bit type
    "moe_capacity_factor": 0.0, "moe_imbalance": 0.0, "moe_fp8_dispatch": 0.0,
    "moe_node_dedup": 0.0,
    # plan: no expert parallelism (etp defaults to tp: fsdpsim.engine.prepare)
    "ep": 1.0, "ep_overlap": 0.0,
}


def needs_layers(spec: ModelSpec) -> bool:
    """True when the engine needs this module's inputs for ``spec``."""
    return (spec.is_moe or spec.attention_kind == "mla" or spec.mtp_layers > 0 or spec.qk_norm
            or set(spec.attention_pattern) != {"full"})


def dense_kind_shapes(spec: ModelSpec):
    """Parameter shapes of a dense layer of ``spec`` (attention, norms, an ``ffn_size`` MLP),
    whether or not the model has one (a uniform MoE model's engine block is this kind too)."""
    return (model_layers._norm(spec, "attn_norm") + model_layers._attention_shapes(spec)
            + model_layers._norm(spec, "mlp_norm") + model_layers._mlp(spec, "mlp.", spec.ffn_size))


def moe_kind_shapes(spec: ModelSpec):
    """(non-expert, routed-expert) parameter shapes of one MoE layer of ``spec``."""
    index = next(layer.index for layer in spec.layers if layer.mlp == "moe")
    shapes = model_layers.layer_parameter_shapes(spec, index)
    experts = [(n, s) for n, s in shapes if n.startswith("mlp.experts.")]
    rest = [(n, s) for n, s in shapes if not n.startswith("mlp.experts.")]
    return rest, experts


def _numel(shapes) -> float:
    return float(sum(math.prod(sh) for _, sh in shapes))


def layered_model_inputs(spec: ModelSpec, shard_size, per_parameter: bool, tp: int,
                         root_numel_rank: float, root_padded) -> dict[str, Any]:
    """The model inputs of :func:`fsdpsim.engine.build.model_inputs` for a model with
    mixture-of-experts, MLA, MTP or non-full attention layers: the uniform-block keys
    describe the dense kind, the ``moe_*``, ``expert_*``, ``mla_*``, ``mtp_*`` keys the rest
    (:data:`DEFAULTS`). Parameter counts of the dense parts are one TP rank's, padded for
    ``shard_size`` (FSDP2 per parameter); routed experts are counted whole and divided by
    the expert mesh in the engine."""
    from fsdpsim.costs.tensor_parallel import tp_local_shapes

    out: dict[str, Any] = {}
    dense = dense_kind_shapes(spec)
    dense_local = tp_local_shapes(dense, tp) if tp > 1 else dense
    dense_padded = padded_numel(dense_local, shard_size, per_parameter)
    n_moe = sum(layer.mlp == "moe" for layer in spec.layers)
    n_dense = spec.n_layers - n_moe
    out.update(block_numel=_numel(dense), block_numel_rank=_numel(dense_local),
               block_numel_padded=dense_padded,
               dense_layer_matmul_params=float(model_layers.attention_matmul_params(spec)
                                               + sum(model_layers.mlp_matmul_params(
                                                   spec, "dense").values())))
    moe_rank = moe_padded = 0.0
    if spec.is_moe:
        rest, experts = moe_kind_shapes(spec)
        rest_local = tp_local_shapes(rest, tp) if tp > 1 else rest
        moe_rank = _numel(rest_local)
        moe_padded = padded_numel(rest_local, shard_size, per_parameter)
        out.update(moe_layers=float(n_moe), n_experts=float(spec.n_experts),
                   moe_top_k=float(spec.experts_per_token), expert_ffn=float(spec.expert_size),
                   moe_router_groups=float(spec.router_groups),
                   moe_router_group_top_k=float(spec.router_group_top_k),
                   shared_ffn=float(spec.shared_expert_ffn_size),
                   expert_layer_numel=_numel(experts), moe_block_numel=_numel(rest),
                   moe_block_numel_rank=moe_rank, moe_block_numel_padded=moe_padded,
                   moe_layer_matmul_params=float(model_layers.attention_matmul_params(spec)
                                                 + sum(model_layers.mlp_matmul_params(
                                                     spec, "moe").values())))
    if spec.attention_kind == "mla":
        out.update(mla=1.0, mla_q_rank=float(spec.q_lora_rank or 0),
                   mla_kv_rank=float(spec.kv_lora_rank), mla_rope=float(spec.qk_rope_head_dim),
                   mla_qk_head=float(spec.head_size), mla_v_head=float(spec.v_head_dim),
                   # the attention core's width as the engine's q_dim/kv_dim: scores over
                   # H·d_qk and values over H·d_v cost 4·b·s²·H·(d_qk + d_v)/2 FLOPs in all
                   q_dim=spec.n_heads * (spec.head_size + spec.v_head_dim) / 2.0,
                   kv_dim=spec.n_heads * (spec.head_size + spec.v_head_dim) / 2.0)
    out["qk_norm"] = float(spec.qk_norm)
    for mask, key, size_key in (("sliding", "sliding_layers", "sliding_window"),
                                ("chunked", "chunked_layers", "chunk_size")):
        layers = [layer for layer in spec.layers if layer.mask == mask]
        if layers:
            out[key] = float(len(layers))
            out[size_key] = float(layers[0].window)
    if spec.mtp_layers:
        last_moe = spec.layers[-1].mlp == "moe"
        # eh_proj (2d -> d, column parallel) and three norms; its block is the last layer's kind
        d = spec.d_model
        own = 2.0 * d * d / tp + 3.0 * spec.norm_params_per_norm
        block_rank = moe_rank if last_moe else _numel(dense_local)
        block_padded = moe_padded if last_moe else dense_padded
        out.update(mtp_layers=float(spec.mtp_layers), mtp_moe=float(last_moe),
                   mtp_numel_rank=spec.mtp_layers * (own + block_rank),
                   mtp_numel_padded=spec.mtp_layers * (own + block_padded))
    dense_total_rank = n_dense * _numel(dense_local) + n_moe * moe_rank
    out["n_params_padded"] = n_dense * dense_padded + n_moe * moe_padded + root_padded
    out["n_params_rank"] = dense_total_rank + root_numel_rank
    out["root_numel_rank"] = root_numel_rank
    return out


def stage_inputs(spec: ModelSpec, plan) -> dict[str, float]:
    """MoE layers on the first, the busiest middle and the last pipeline stage, by layer index
    (stages hold consecutive layers; with interleaving the chunks are placed as if they were
    not)."""
    if not spec.is_moe:
        return {}
    first, mid, last = plan.stage_layers(spec.n_layers)
    moe = np.array([layer.mlp == "moe" for layer in spec.layers], dtype=float)
    if plan.pp == 1:
        n = float(moe.sum())
        return {"moe_layers_first": n, "moe_layers_mid": n, "moe_layers_last": n}
    # the busiest middle stage's layers (the first middle one with an even split)
    start = sum(plan.layer_split(spec.n_layers).counts[:plan.busiest_middle_rank(spec.n_layers)])
    return {"moe_layers_first": float(moe[:first].sum()),
            "moe_layers_mid": float(moe[start:start + mid].sum()),
            "moe_layers_last": float(moe[spec.n_layers - last:].sum())}


def plan_moe_inputs(plan, pod_gpus=None) -> dict[str, float]:
    """The expert-parallel degrees of a plan and the layout of its expert groups (size, members
    per scale-up domain and per pod: :func:`fsdpsim.plan.layout.expert_layout`); every plan has
    them (a dense model's engine ignores them)."""
    from fsdpsim.plan.layout import expert_layout

    x = {"ep": float(plan.ep), "etp": float(plan.etp), "ep_overlap": float(plan.ep_overlap)}
    x.update({k: float(v) for k, v in expert_layout(plan, pod_gpus=pod_gpus).items()})
    return x


def moe_training_inputs(training) -> dict[str, float]:
    """Routing and dispatch knobs of a :class:`fsdpsim.plan.parallel.TrainingConfig` (0:
    default)."""
    return {"moe_capacity_factor": training.moe_capacity_factor or 0.0,
            "moe_imbalance": training.moe_imbalance or 0.0,
            "moe_fp8_dispatch": float(training.moe_fp8_dispatch),
            "moe_node_dedup": float(training.moe_dispatcher == "deepep")}


def uniform_keys(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input dicts of several configurations with one set of keys (to stack them): a key
    a layered model has and a uniform one lacks gets its :data:`DEFAULTS` value (or 0: MoE
    layers per stage, the root's count)."""
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    return [row if len(row) == len(keys) else
            {k: row[k] if k in row else DEFAULTS.get(k, 0.0) for k in keys} for row in rows]
