"""Engine inputs as the stages read them: categorical codes as integers, numbers as numpy
floats, the optional inputs (:data:`OPTIONAL_INPUTS`) filled in and the data-parallel group
layout derived where a caller built the inputs by hand (:func:`prepare`)."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from fsdpsim.costs import nccl
from fsdpsim.costs.compute import NUMBER_TYPES, as_array, maximum, minimum
from fsdpsim.engine import moe
from fsdpsim.engine.build_moe import DEFAULTS as MOE_DEFAULTS
from fsdpsim.engine.inputs import Prepared

#: Inputs given as category codes (kept as integers).
CATEGORICAL = ("strategy", "recompute", "optimizer", "pp_schedule")

#: Inputs that may be left out, and their values then: no fused loss or GLU kernel, no linear
#: biases, memory ceilings solved, a data-parallel plan (tp = pp = cp = 1).
OPTIONAL_INPUTS = {"grad_accum": 1.0,  # one micro-batch per step
                   "fused_loss": 0.0, "fused_glu": 0.0, "linear_bias": 0.0, "rmsnorm": 0.0,
                   "compute_clock_ratio": 1.0, "attention_peak_ratio": 1.0, "fp8_gemm": 0.0,
                   "fp8_attention": 0.0, "fp8_attention_peak_ratio": 1.0,
                   "fp8_lm_head": 0.0, "lm_head_peak_ratio": 1.0, "cuda_graphs": 0.0,
                   "rc_mla_up_proj": 0.0, "rc_mlp": 0.0, "rc_moe_act": 0.0,
                   "cast_scale": 1.0,
                   "keep_gathered": 0.0, "grad_sync_last": 0.0,
                   "ceilings": 1.0, "network_stated": 1.0,
                   "tp": 1.0, "pp": 1.0, "cp": 1.0, "vpp": 1.0, "pp_schedule": 1,
                   "sequence_parallel": 0.0, "cp_all2all": 0.0, "tp_overlap": 0.0,
                   "recompute_layers": -1.0, "megatron": 0.0, "dropout": 0.0,
                   "tp_size": 1.0, "tp_per_node": 1.0, "cp_size": 1.0, "cp_per_node": 1.0,
                   "pp_size": 1.0, "pp_per_node": 1.0,
                   # no fabric decay; NVLink inside a node; framework profile fsdp2
                   "nic_decay_per_doubling": 0.0, "nic_decay_from_nodes": 4.0,
                   "nic_decay_floor": 1.0, "link_nvlink": 1.0, "link_mesh": 0.0,
                   "dp_gather_overlap": 1.0, "dp_list_collectives": 0.0, "ddp_overlap": 1.0,
                   "zero1_reduce_overlap": 1.0, "grad_bucket_bytes": 0.0,
                   "param_broadcast": 0.0, "grad_all_reduce": 0.0,
                   "dp_block_calls": 1.0, "dp_root_calls": 1.0, "dp_comm_scale": 1.0,
                   "nic_uncertainty": 0.1, "framework_uncertainty": 0.0,
                   # no measured bus bandwidth pinned (fsdpsim.engine.build.busbw_inputs)
                   "busbw_ar_intra": np.nan, "busbw_ar_inter": np.nan,
                   "busbw_ring_inter": np.nan,
                   # no fp32 gradient accumulation pass (fsdpsim.plan.frameworks:
                   # grad_accum_pass_bytes)
                   "grad_accum_pass_bytes": 0.0,
                   # one non-blocking fabric, packed placement
                   "oversubscription": 1.0, "pod_gpus": np.inf, "placement_factor": 1.0,
                   # no MoE, MLA, MTP or windowed attention (fsdpsim.engine.build_moe)
                   **MOE_DEFAULTS}


#: Fields the stages read that may be absent from the inputs, and what absent means: each
#: group's members per non-blocking pod (None: laid out without pods, no pod factor) and the
#: attention's share of the causal query-key pairs (1: every layer full causal;
#: :func:`fsdpsim.engine.moe.attention_pairs` derives it for windowed attention).
ABSENT = {**{f"{group}_per_pod": None for group in ("tp", "cp", "pp", "shard", "replicate",
                                                    "dp_world", "ep", "etp", "edp", "eshard",
                                                    "ereplicate")},
          "attn_pair_ratio": 1.0}


def prepare(x: Mapping[str, object]) -> Prepared:
    """Inputs as the stages read them (:class:`fsdpsim.engine.inputs.Prepared`): categorical
    codes as integers, everything else as floats; optional inputs (:data:`OPTIONAL_INPUTS`)
    and :data:`ABSENT` filled in, and the data-parallel group layout derived as the
    data-parallel engine always placed it (the shard group innermost) when the caller did not
    give it (:func:`fsdpsim.plan.layout.group_layout` does for hybrid plans)."""
    g = dict(_START)
    float64 = np.float64
    for k, v in x.items():  # a loop, not a generator: this runs for every input of a predict
        kind = type(v)
        if k in _CATEGORICAL:
            g[k] = _categorical(v)
        elif kind is float64:
            g[k] = v
        elif kind is float or kind is int or kind is bool:  # _number's first case, inlined
            g[k] = float64(v)
        else:
            g[k] = _number(v)
    if "link_per_peer_bytes_per_s" not in g and "link_bytes_per_s" in g:
        g["link_per_peer_bytes_per_s"] = g["link_bytes_per_s"]
    if "param_gather_overlap" not in g:  # Megatron's distributed optimizer
        g["param_gather_overlap"] = g["megatron"]
    if "fused_attention" not in g:  # Transformer Engine's kernel with Megatron's recipe
        g["fused_attention"] = g["megatron"]
    if "nccl_simple_ring_base_s" not in g:  # the default collective library of the catalog
        g.update({k: as_array(v) for k, v in _default_library_inputs().items()})
    nccl.collapse_constant_library(g)
    if "mfu_peak_flops_per_s" not in g and "peak_flops_per_s" in g:
        g["mfu_peak_flops_per_s"] = g["peak_flops_per_s"]
    if "fused_attention_fraction" not in g and "attention_fraction" in g:
        g["fused_attention_fraction"] = g["attention_fraction"]
    if "ep_link_fraction" not in g and "link_fraction" in g:
        g["ep_link_fraction"] = g["link_fraction"]
    shard, repl, per_node = g["shard_size"], g["replicate_size"], g["gpus_per_node"]
    if "dp_world_size" not in g:
        g["dp_world_size"] = shard * repl
    if "dp" not in g:
        g["dp"] = g["dp_world_size"] / g["cp"]
    # One rank's tokens of a micro-batch, b·s/cp: context parallelism splits the sequence
    # (every stage reads this one value: layer widths, TP collectives, MoE routing).
    g["tokens_per_rank"] = g["micro_batch"] * g["seq_len"] / g["cp"]
    if "shard_per_node" not in g:
        g["shard_per_node"] = minimum(shard, per_node)
    if "replicate_per_node" not in g:
        g["replicate_per_node"] = minimum(maximum(1.0, per_node / shard), repl)
    if "dp_world_per_node" not in g:
        g["dp_world_per_node"] = minimum(g["dp_world_size"], per_node)
    if "n_params_rank" not in g:
        g["n_params_rank"] = g["n_params"]
    for key in ("layers_first", "layers_mid", "layers_last"):
        if key not in g:
            g[key] = g["n_layers"]
    if "mid_stage" not in g:
        g["mid_stage"] = 1.0
    moe.prepare_layers(g)
    return Prepared.of(g)


_CATEGORICAL = frozenset(CATEGORICAL)


def _number(v):
    """A float input as prepare() keeps it: one value as a numpy float scalar (numpy's operators
    on those cost a fraction of their cost on 0-d arrays), several as a float array."""
    if type(v) in NUMBER_TYPES or type(v) is bool:
        return np.float64(v)
    a = as_array(v)
    return a[()] if a.ndim == 0 else a


def _categorical(v):
    """A categorical input (codes) as prepare() keeps it: integers, one value as a numpy
    integer scalar (numpy's operators on a 0-d array cost ten times their cost on a scalar)."""
    a = np.asarray(v).astype(np.int64)
    return a[()] if a.ndim == 0 else a


#: :data:`OPTIONAL_INPUTS` as prepare() keeps them (converted once).
_OPTIONAL_PREPARED = {k: _categorical(v) if k in CATEGORICAL else _number(v)
                      for k, v in OPTIONAL_INPUTS.items()}
_START = {**ABSENT, **_OPTIONAL_PREPARED}


def _default_library_inputs() -> dict[str, float]:
    """NCCL constants of the default framework profile's release, from the built-in catalog
    (for callers that build engine inputs by hand)."""
    from fsdpsim.hardware.catalog import load_catalog
    from fsdpsim.costs import nccl
    from fsdpsim.plan.frameworks import PROFILES

    return nccl.library_inputs(load_catalog(use_env=False).collectives(
        PROFILES["fsdp2"].collectives))
