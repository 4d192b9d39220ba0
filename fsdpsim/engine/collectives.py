"""Engine stage 3: the time of every collective a micro-batch or a step issues, per group.

Each group of the plan (:mod:`fsdpsim.plan.layout`: tensor, context, pipeline, FSDP shard, HSDP
replica and data-parallel world) gets NCCL's (algorithm, protocol) candidates on the bus
bandwidth of the tier it spans (:func:`fsdpsim.costs.nccl.candidates`); every collective is
then the least of a few multiply-adds, as NCCL picks the fastest.
Formulas: data-parallel collectives :mod:`fsdpsim.costs.comm`; tensor- and context-parallel
volumes Shoeybi et al. 2019 §3, Korthikanti et al. 2022 §4.2.2, Liu et al. 2023 (ring
attention), Jacobs et al. 2023 (Ulysses); pipeline point-to-point Narayanan et al. SC21 §3.2.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from fsdpsim.costs import comm, nccl
from fsdpsim.costs.compute import (NUMBER_TYPES, all_of, any_of, as_values, maximum, minimum,
                                   one_flag, where)
from fsdpsim.costs import context_parallel as context_parallel_costs
from fsdpsim.costs import tensor_parallel as tensor_parallel_costs
from fsdpsim.engine.inputs import Prepared
from fsdpsim.engine.results import (DATA_PARALLEL_FIELDS, ContextParallelComm,
                                    DataParallelComm, NcclGroups, Rates, TensorParallelComm)


def group_coefficients(g: Prepared, r: Rates) -> NcclGroups:
    """NCCL's (algorithm, protocol) candidates of each data-parallel group of the plan
    (:class:`fsdpsim.engine.results.NcclGroups`), each a :class:`GroupCandidates` on the bus
    bandwidth of the tier the group spans (:func:`bus_bandwidth`); the tensor-parallel
    group's: :func:`tensor_parallel`."""
    return NcclGroups(shard=GroupCandidates(g, r, "shard"),
                      replicate=GroupCandidates(g, r, "replicate"),
                      dp_world=GroupCandidates(g, r, "dp_world"))


class GroupCandidates:
    """One group's candidates per collective kind (:func:`fsdpsim.costs.nccl.candidates`):
    ``ring`` (all-gather and reduce-scatter), ``ar`` (all-reduce) and ``bcast`` (broadcast),
    each built on first read (a data-parallel grid never all-reduces over the replica group of
    rows that are not HSDP), on the bus bandwidth of the tier the group spans (also computed
    on first use)."""

    def __init__(self, g, r, name):
        self._g, self._r, self._name, self._busbw = g, r, name, None
        self._subsets: dict[bytes, GroupCandidates] = {}

    @functools.cached_property
    def ring(self) -> nccl.Candidates:
        """All-gather's and reduce-scatter's candidates."""
        return self._kind("ring")

    @functools.cached_property
    def ar(self) -> nccl.Candidates:
        """All-reduce's candidates."""
        return self._kind("ar")

    @functools.cached_property
    def bcast(self) -> nccl.Candidates:
        """Broadcast's candidates."""
        return self._kind("bcast")

    def _kind(self, key):
        """The candidates of collective kind ``key`` (``ring``, ``ar``, ``bcast``)."""
        g, name = self._g, self._name
        size, per_node = getattr(g, f"{name}_size"), getattr(g, f"{name}_per_node")
        if self._busbw is None:
            self._busbw = bus_bandwidth(g, self._r, size, per_node,
                                        getattr(g, f"{name}_per_pod"))
        busbw = pinned_bus_bandwidth(g, key, size, per_node, self._busbw)
        return nccl.candidates(g, size, per_node, busbw, g.link_nvlink > 0,
                               all_reduce=key == "ar", broadcast=key == "bcast")

    def rows(self, idx):
        """The same group on the rows ``idx`` only (a strategy's rows of a mixed grid); built
        once per set of rows (a MoE stage costs its dense, MoE and ZeRO-1 units on one group)."""
        key = idx.tobytes()
        if key not in self._subsets:
            self._subsets[key] = GroupCandidates(_Rows(self._g, idx), _Rows(self._r, idx),
                                                 self._name)
        return self._subsets[key]


def take(x, idx):
    """``x`` on the rows ``idx`` (scalars and single values stay as they are); a column by
    ``ndarray.take``, a quarter quicker than fancy indexing on numpy 2.4."""
    if type(x) is np.ndarray and x.ndim == 1:
        return x.take(idx) if x.size > 1 else x
    return x[idx] if np.ndim(x) and np.size(x) > 1 else x


class _Rows:
    """The prepared inputs or the rates (any object of named fields) restricted to the rows
    ``idx``, each field taken on first read (a name the object lacks: its AttributeError)."""

    __slots__ = ("_of", "_idx", "__dict__")

    def __init__(self, of, idx):
        self._of, self._idx = of, idx

    def __getattr__(self, name):
        value = take(getattr(self._of, name), self._idx)
        self.__dict__[name] = value
        return value


def per_strategy2(strategy, code, fn):
    """``fn(None)`` where every row has strategy ``code``; else ``fn(idx)`` on just those rows
    (``idx``), zero elsewhere; zeros where none has it. ``fn`` returns a pair (block and root
    times). Rows are grouped by what they are instead of every row computing every strategy's
    collectives and masking them away."""
    mask = strategy == code
    if not any_of(mask):
        return 0.0, 0.0
    if all_of(mask):
        return fn(None)
    idx = np.flatnonzero(mask)
    first, second = np.zeros(np.shape(strategy)), np.zeros(np.shape(strategy))
    first[idx], second[idx] = fn(idx)
    return first, second


def bus_bandwidth(g, r, size, per_node, per_pod=None):
    """Large-message bus bandwidth of a ring over a group [B/s]: the scale-up link inside a
    domain; across domains ``min(link, members per node × NIC share × fabric factor)``
    (:func:`fsdpsim.costs.comm.ring_coefficients`, :func:`fsdpsim.costs.nccl.fabric_factor`),
    times the pod factor (:func:`fsdpsim.costs.nccl.pod_factor`) for a group that spans the
    non-blocking pods of an oversubscribed fabric, and the placement factor."""
    gpn = minimum(per_node, size)
    multi = size > gpn
    if type(multi) is np.ndarray:  # a group's rows: one value where every row holds it
        multi = one_flag(multi)
    link = r.link
    if any_of(g.link_mesh > 0):
        link = where(g.link_mesh > 0, mesh_link(g, r, gpn), link)
    if type(multi) is np.bool_ and not multi:  # inside one domain (every row): the link
        return link  # alone, not broadcast to the NIC's rows (a configuration's slower twin)
    nodes = np.ceil(size / maximum(gpn, 1.0))
    fabric = nccl.fabric_factor(nodes, g.nic_decay_per_doubling, g.nic_decay_from_nodes,
                                g.nic_decay_floor) * g.placement_factor
    if per_pod is not None and any_of(per_pod < size):
        fabric = fabric * nccl.pod_factor(size, per_pod, gpn, g.oversubscription)
    intra = where(gpn > 1, link, np.inf)
    return where(multi, minimum(intra, gpn * r.nic * fabric), link)


def pinned_bus_bandwidth(g, key, size, per_node, modelled):
    """The bus bandwidth of one collective kind over a group [B/s]: a measured one where the
    user pinned it (``--busbw-*-gbs``, :func:`fsdpsim.engine.build.busbw_inputs`; nccl-tests' busbw
    over the job's GPUs, latency and fabric included) for a group of that tier (all-reduce
    inside one node; all-reduce, all-gather and reduce-scatter across nodes), else
    ``modelled``. Broadcasts keep the model's."""
    if key == "bcast":
        return modelled
    multi = size > minimum(per_node, size)
    if key == "ar":
        inter, intra = g.busbw_ar_inter, g.busbw_ar_intra
    else:
        inter, intra = g.busbw_ring_inter, np.nan
    if not (_any_finite(inter) or _any_finite(intra)):
        return modelled
    pin = where(multi, inter, intra)
    return where(np.isfinite(pin), pin, modelled)


def _any_finite(x) -> bool:
    """Whether some entry of ``x`` is finite (a pinned bandwidth; NaN where none is)."""
    return math.isfinite(x) if type(x) in NUMBER_TYPES else any_of(np.isfinite(x))


def mesh_link(g, r, members):
    """Achievable link bandwidth of a ring over ``members`` GPUs of a switchless mesh domain
    [B/s]: each GPU's links go to its ``D − 1`` peers (DGX-1's hybrid cube-mesh: 6 NVLinks
    per V100 to 4 of 7 peers, one or two each; NVIDIA DGX-1 System Architecture whitepaper), so
    a group of ``k`` of the ``D`` GPUs reaches only ``(k − 1) / (D − 1)`` of them, and never
    less than one peer link (``link_per_peer_bytes_per_s``); the whole domain gets the full
    aggregate (nccl-tests' busbw)."""
    domain = maximum(g.gpus_per_node, 2.0)
    share = (minimum(members, domain) - 1.0) / (domain - 1.0)
    floor = g.link_per_peer_bytes_per_s / g.link_bytes_per_s
    return r.link * minimum(maximum(share, floor), 1.0)  # np.clip's values, 5x quicker


#: The tensor- and context-parallel terms of plans without those dimensions (all zero).
NO_TENSOR_PARALLEL = TensorParallelComm(*[0.0] * 8)
NO_CONTEXT_PARALLEL = ContextParallelComm(*[0.0] * 6)


#: HBM passes over a gathered tensor per list collective of deepspeed-zero3-2021: the zeroed
#: output (``torch.zeros``), the copy out of NCCL's flat buffer (read and write), and the
#: ``param.norm()`` its debug f-string evaluates for every gathered parameter
#: (partition_parameters.py L776-823, stage3.py fetch_sub_module @c4f4ef5d).
LIST_HBM_PASSES = 4.0


def _dp_call_s(g, r, total_bytes, calls, cands, ranks, listed):
    """``calls`` data-parallel collectives sharing ``total_bytes`` over ``ranks`` [s]: NCCL's
    time per call, plus, for list collectives (``listed``: a framework that gathers into or
    reduces from one tensor per rank), one view and one copy per rank and call (host time of
    one eager op each, the catalog's ``kernel_overhead_s``) and :data:`LIST_HBM_PASSES` over
    the call's bytes (:mod:`fsdpsim.plan.frameworks`, deepspeed-zero3-2021)."""
    one = np.ndim(calls) == 0 and float(calls) == 1.0
    per_call = total_bytes if one else total_bytes / calls
    t = nccl.time_s(per_call, cands, 1.0 if one else calls)
    if listed is None:
        return t
    extra = calls * (ranks * g.kernel_overhead_s + LIST_HBM_PASSES * per_call / r.hbm)
    return t + where(listed & (ranks > 1), extra, 0.0)


def zero1_by_broadcast(g, co, params_bytes, t, block_numel):
    """InternEvo's hybrid ZeRO-1 (:mod:`fsdpsim.plan.frameworks` ``internevo``) [s]: per unit the
    gradients all-reduced in the compute dtype over the whole data-parallel group
    (``reduce_tensor`` without a destination; InternEvo buckets 512 M elements, fsdpsim one
    call per unit, overlapped with backward as ZeRO-1's reduce-scatter is), and after the step
    one broadcast per rank of the ``zero1`` group (``shard_size``) of the shard it owns
    (``broadcast_params``): ``z · t_bcast(P / z)`` over that group (``params_bytes``: the
    stage's, in the compute dtype), at NCCL's ring broadcast
    (:func:`fsdpsim.costs.nccl.candidates` ``broadcast``). Where the profile does not say so,
    ZeRO-1's reduce-scatter and all-gather (``t``) stay. ``block_numel``: a block unit's
    padded parameters [-]."""
    elem = g.compute_bytes
    world_ar = co.dp_world.ar
    grads_ar = g.grad_all_reduce > 0
    shard = g.shard_size
    broadcasts_s = shard * nccl.time_s(params_bytes / shard, co.shard.bcast)
    return {
        "zero1_rs_block_s": where(grads_ar, nccl.time_s(block_numel * elem,
                                                         world_ar), t["zero1_rs_block_s"]),
        "zero1_rs_root_s": where(grads_ar, nccl.time_s(g.root_numel_padded * elem,
                                                        world_ar), t["zero1_rs_root_s"]),
        "zero1_ag_all_s": where(g.param_broadcast > 0, broadcasts_s, t["zero1_ag_all_s"]),
    }


def bucket_calls(numel, elem_bytes, bucket_bytes):
    """Gradient collectives of one unit under PyTorch DDP's buckets [-]:
    ``max(1, floor(numel · elem_bytes / bucket_bytes))``; 1 where ``bucket_bytes`` is 0.

    A bucket closes once it holds at least ``bucket_bytes`` of gradients in the parameters'
    dtype (torch ``torch/csrc/distributed/c10d/reducer.cpp``
    ``compute_bucket_assignment_by_size``; ``bucket_cap_mb`` 25 MiB by default) and each
    bucket is one call, so a unit closes at most ``floor(bytes / bucket_bytes)`` buckets: the
    count where no tensor overflows the cap, an upper bound where one does (a tensor larger
    than the cap fills one bucket alone). Counted within the unit."""
    buckets = np.floor(numel * elem_bytes / maximum(bucket_bytes, 1.0))
    return where(bucket_bytes > 0, maximum(buckets, 1.0), 1.0)


def data_parallel(g, co, n_units, r, keys=None, block_numel=None):
    """FSDP / ZeRO / DDP / HSDP collectives of one stage holding ``n_units`` block units, and
    the root unit [s]: one call of each kind per unit, or one per gathered parameter
    (``dp_block_calls`` / ``dp_root_calls``, per framework), or DDP's and ZeRO-1's gradient
    reduction one call per bucket (``grad_bucket_bytes``, :func:`bucket_calls`), each at
    NCCL's chosen algorithm and protocol (module table of costs/comm.py for which collectives
    run). ``keys``: the times to return (None: all of them); the others are not costed.
    ``block_numel``: a block unit's padded parameters (None: ``g.block_numel_padded``; a MoE
    layer's dense part or a stage's mean unit, :func:`fsdpsim.engine.moe.data_parallel`)."""
    block_numel = g.block_numel_padded if block_numel is None else block_numel
    elem = g.compute_bytes
    shard = g.shard_size
    sh, rp, wd = co.shard, co.replicate, co.dp_world
    bc, rc = g.dp_block_calls, g.dp_root_calls
    listed = (g.dp_list_collectives > 0) if any_of(g.dp_list_collectives > 0) else None
    block_param_bytes = block_numel * elem
    root_param_bytes = g.root_numel_padded * elem
    block_grad_bytes = block_numel * g.reduce_bytes
    root_grad_bytes = g.root_numel_padded * g.reduce_bytes
    world = g.dp_world_size
    strategy = as_values(g.strategy)
    bucketed = any_of(g.grad_bucket_bytes > 0)
    grad_calls = ((bucket_calls(block_numel, elem, g.grad_bucket_bytes),
                   bucket_calls(g.root_numel_padded, elem, g.grad_bucket_bytes))
                  if bucketed else (1.0, 1.0))

    costed = {}

    def dp(key, total, calls, cands, ranks):
        """``key``'s time; 0.0 where it is not asked for. The same bytes in the same calls
        on the same candidates (ZeRO-1's reduce-scatter over the shard group itself, as
        FSDP's) are costed once."""
        if keys is not None and key not in keys:
            return 0.0
        same = (id(total), id(cands), ("n", float(calls)) if np.ndim(calls) == 0
                else ("a", id(calls)), None if listed is None else id(ranks))
        if same not in costed:
            costed[same] = _dp_call_s(g, r, total, calls, cands, ranks, listed)
        return costed[same]

    # Per-micro-batch gathers and reduce-scatters: FSDP's strategies only (costs/comm.py
    # table); ZeRO-1 and DDP rows never read them.
    per_mb = any_of((strategy == comm.FULL) | (strategy == comm.HYBRID)
                    | (strategy == comm.GRAD_OP))
    t = {
        key: (dp(key, total, calls, sh.ring, shard) if per_mb else 0.0)
        for key, total, calls in (("ag_block_s", block_param_bytes, bc),
                                  ("ag_root_s", root_param_bytes, rc),
                                  ("rs_block_s", block_grad_bytes, bc),
                                  ("rs_root_s", root_grad_bytes, rc))
    }
    t.update({
        "hsdp_ar_block_s": 0.0, "hsdp_ar_root_s": 0.0, "ddp_ar_block_s": 0.0,
        "ddp_ar_root_s": 0.0, "zero1_rs_block_s": 0.0, "zero1_rs_root_s": 0.0,
        "zero1_ag_all_s": 0.0,
    })
    # HSDP: all-reduce of each shard across replicas; DDP: of the whole unit. Each on the rows
    # of that strategy only.
    for code, group, divide, prefix in ((comm.HYBRID, rp, shard, "hsdp"),
                                        (comm.NONE, wd, 1.0, "ddp")):
        if keys is not None and not any(f"{prefix}_ar_{unit}_s" in keys
                                        for unit in ("block", "root")):
            continue
        def all_reduce(idx, grp=group, d=divide, ddp=code == comm.NONE):
            cands = grp.ar if idx is None else grp.rows(idx).ar
            if ddp and bucketed:
                def pick(v):
                    return v if idx is None else take(v, idx)
                return tuple(nccl.time_s(pick(b / n), cands, pick(n))
                             for b, n in zip((block_grad_bytes, root_grad_bytes), grad_calls))
            return tuple(nccl.time_s(take(b / d, idx) if idx is not None else b / d, cands)
                         for b in (block_grad_bytes, root_grad_bytes))
        t[f"{prefix}_ar_block_s"], t[f"{prefix}_ar_root_s"] = per_strategy2(strategy, code,
                                                                            all_reduce)
    if any_of(strategy == comm.OPTIMIZER):  # ZeRO-1 over the whole data-parallel group
        # (the shard group itself unless replicas are kept: the same candidates, built once)
        same = bool(all_of(((world == shard) & (g.dp_world_per_node == g.shard_per_node))
                           | (strategy != comm.OPTIMIZER)))
        ring = sh.ring if same else wd.ring
        t["zero1_rs_block_s"] = dp("zero1_rs_block_s", block_grad_bytes, grad_calls[0], ring,
                                   world)
        t["zero1_rs_root_s"] = dp("zero1_rs_root_s", root_grad_bytes, grad_calls[1], ring, world)
        params_bytes = (n_units * block_numel + g.root_numel_padded) * elem
        t["zero1_ag_all_s"] = dp("zero1_ag_all_s", params_bytes, 1.0, ring, world)
        if any_of(g.param_broadcast > 0) or any_of(g.grad_all_reduce > 0):
            t.update(zero1_by_broadcast(g, co, params_bytes, t, block_numel))
    if keys is not None:  # the others not costed
        t = {**_NOT_COSTED, **{k: t[k] for k in keys}}
    scale = g.dp_comm_scale
    if any_of(scale != 1.0):  # a what-if twin (fsdpsim.drivers.predict.comm_twins)
        t = {k: (None if v is None else v * scale) for k, v in t.items()}
    return DataParallelComm(**t)


_NOT_COSTED = dict.fromkeys(DATA_PARALLEL_FIELDS)


def _ring_time_s(table, prefix, cands, costed=None):
    """Seconds of the all-reduces, all-gathers and reduce-scatters counted in ``table``
    (:data:`fsdpsim.costs.tensor_parallel.TpCollectives`) under ``prefix`` (``forward`` /
    ``backward``): calls of equal size, each at NCCL's choice.
    ``costed``: the times of (calls, bytes, algorithm) entries already costed, by their
    objects (a table shares one entry between kinds of equal volume), filled in."""
    total = 0.0
    for kind, which in (("all_reduce", "ar"), ("all_gather", "ring"), ("reduce_scatter", "ring")):
        calls = getattr(table, f"{prefix}_{kind}_calls")
        if not any_of(calls):  # none of this kind on any row
            continue
        nbytes = getattr(table, f"{prefix}_{kind}_bytes")
        key = (id(calls), id(nbytes), which)
        t = None if costed is None else costed.get(key)
        if t is None:
            t = nccl.time_s(nbytes / maximum(calls, 1.0), getattr(cands, which), calls)
            if costed is not None:
                costed[key] = t
        total = total + t
    return total


def _head_forward_s(table, cands, costed=None):
    """Seconds of the root's forward TP collectives [s]: its all-reduces of two sizes each
    costed on its own (the embedding's m bytes, then the loss's three per-token reductions,
    :func:`fsdpsim.costs.tensor_parallel.tp_head_collectives`), as NCCL picks per call;
    the all-gathers and reduce-scatters as :func:`_ring_time_s`."""
    parts = table._replace(forward_all_reduce_calls=0.0)
    total = _ring_time_s(parts, "forward", cands, costed)
    for part in ("embedding", "loss"):
        calls = getattr(table, f"forward_{part}_all_reduce_calls")
        if any_of(calls):
            per_call = getattr(table, f"forward_{part}_all_reduce_bytes") / maximum(calls, 1.0)
            total = total + nccl.time_s(per_call, cands.ar, calls)
    return total


def _bytes(table, directions=("forward", "backward")):
    """The tensor bytes of a TP table's collectives in ``directions`` [B]."""
    return sum(getattr(table, f"{d}_{kind}_bytes") for d in directions
               for kind in ("all_reduce", "all_gather", "reduce_scatter"))


def tensor_parallel(g, r, layer):
    """Tensor-parallel collectives of one layer and of the root, one micro-batch, and what of
    them is exposed [s].

    Volumes from :func:`fsdpsim.costs.tensor_parallel.tp_layer_collectives` (Megatron: two
    all-reduces forward and two backward per layer, Shoeybi et al. 2019 §3; with sequence
    parallelism all-gathers and reduce-scatters of the same bytes plus the backward re-gather
    of the saved shard, Korthikanti et al. 2022 §4.2.2), checked call for call against torch
    DTensor on gloo. Each runs as a ring on the TP group's tier (all-reduce: two passes).
    Exposed by default; with ``tp_overlap`` (async TP / Megatron's TP comm overlap) it hides
    behind the GEMMs next to it and only the excess shows. ``r``: the rates (the TP group's NCCL
    candidates are built on them).
    """
    cands = GroupCandidates(g, r, "tp")
    on = g.tp_size > 1
    sp = g.sequence_parallel > 0
    layer_c = tensor_parallel_costs.tp_layer_collectives(
        g.tokens_per_rank, g.d_model, g.compute_bytes, g.tp, sp)
    root_c = tensor_parallel_costs.tp_head_collectives(
        g.tokens_per_rank, g.d_model, g.vocab_size,
        g.compute_bytes, g.tp, sp)
    costed = {}  # (calls, bytes, algorithm) entries the tables share, costed once
    fwd_s = where(on, _ring_time_s(layer_c, "forward", cands, costed), 0.0)
    bwd_s = where(on, _ring_time_s(layer_c, "backward", cands, costed), 0.0)
    overlap = g.tp_overlap > 0
    fwd_exposed = where(overlap, maximum(fwd_s - layer.gemm_fwd_s, 0.0), fwd_s)
    bwd_exposed = where(overlap, maximum(bwd_s - layer.gemm_bwd_s, 0.0), bwd_s)
    root_s = where(on, _head_forward_s(root_c, cands, costed)
                   + _ring_time_s(root_c, "backward", cands, costed), 0.0)
    return TensorParallelComm(
        tp_layer_fwd_s=fwd_s, tp_layer_bwd_s=bwd_s,
        tp_layer_fwd_exposed_s=fwd_exposed, tp_layer_bwd_exposed_s=bwd_exposed,
        tp_root_s=root_s, tp_layer_bytes=where(on, _bytes(layer_c), 0.0),
        tp_layer_fwd_bytes=where(on, _bytes(layer_c, ("forward",)), 0.0),
        tp_root_bytes=where(on, _bytes(root_c), 0.0))


def context_parallel(g, layer, r):
    """Context-parallel communication of one layer and one micro-batch [s].

    Ring (Liu et al. 2023, arXiv 2310.01889; Megatron/TE ``AttnFuncWithCPAndKVP2P``): the
    local K and V blocks travel cp−1 hops around the ring in forward, K, V and their gradients
    in backward (:func:`fsdpsim.costs.context_parallel.cp_ring_attention_bytes`); each hop is a
    send/recv between ring neighbours (over the link inside a scale-up domain, else the NIC)
    and overlaps the attention of the block before it, so only the excess over the attention
    compute is exposed. All-to-all (Ulysses, Jacobs et al. 2023 §3.1,
    :func:`~fsdpsim.costs.context_parallel.cp_all_to_all_bytes`): q, k, v are exchanged before
    attention and the output after it, the reverse in backward; not overlapped.
    """
    elem = g.compute_bytes
    cp = g.cp_size
    tokens = g.micro_batch * g.seq_len
    ring = context_parallel_costs.cp_ring_attention_bytes(tokens, g.kv_dim, elem, g.cp,
                                                          g.tp)
    spb, lat = comm.p2p_coefficients(g.cp_per_node >= cp, r.link, r.nic,
                                     g.link_latency_s, g.nic_latency_s)
    ring_fwd = ring.forward_bytes * spb + ring.forward_calls * lat
    ring_bwd = (ring.backward_kv_bytes + ring.backward_dkv_bytes) * spb \
        + ring.backward_kv_calls * lat
    a2a = context_parallel_costs.cp_all_to_all_bytes(tokens, g.q_dim, g.kv_dim, elem,
                                                     g.cp, g.tp)
    a2a_spb, a2a_lat = comm.all_to_all_coefficients(
        cp, g.cp_per_node, r.link, r.nic, g.link_latency_s, g.nic_latency_s)
    a2a_fwd = a2a.forward_bytes * a2a_spb + a2a.forward_calls * a2a_lat
    a2a_bwd = a2a.backward_bytes * a2a_spb + a2a.backward_calls * a2a_lat
    all2all = g.cp_all2all > 0
    on = cp > 1
    fwd_s = where(on, where(all2all, a2a_fwd, ring_fwd), 0.0)
    bwd_s = where(on, where(all2all, a2a_bwd, ring_bwd), 0.0)
    fwd_exposed = where(all2all, fwd_s, maximum(fwd_s - layer.attn_fwd_s, 0.0))
    bwd_exposed = where(all2all, bwd_s, maximum(bwd_s - layer.attn_bwd_s, 0.0))
    byte_count = where(on, where(all2all, a2a.forward_bytes + a2a.backward_bytes,
                                 ring.forward_bytes + ring.backward_kv_bytes
                                 + ring.backward_dkv_bytes), 0.0)
    fwd_bytes = where(on, where(all2all, a2a.forward_bytes, ring.forward_bytes), 0.0)
    return ContextParallelComm(
        cp_layer_fwd_s=fwd_s, cp_layer_bwd_s=bwd_s,
        cp_layer_fwd_exposed_s=fwd_exposed, cp_layer_bwd_exposed_s=bwd_exposed,
        cp_layer_bytes=byte_count, cp_layer_fwd_bytes=fwd_bytes)


def pipeline_p2p(g, w, r):
    """Seconds of one stage-boundary transfer (an activation forward, or its gradient
    backward) for one micro-batch: b·s/cp × h in the compute dtype, divided over the TP group
    with sequence parallelism (Megatron sends the SP-split tensor; without SP each TP rank
    sends the whole tensor to its peer). On the link when neighbouring stages share a scale-up
    domain, else over the NIC share."""
    split = where(g.sequence_parallel > 0, g.tp, 1.0)
    a_bytes = w.tokens * g.d_model * g.compute_bytes / split
    spb, lat = comm.p2p_coefficients(g.pp_per_node > 1, r.link, r.nic,
                                     g.link_latency_s, g.nic_latency_s)
    on = g.pp_size > 1
    return where(on, a_bytes * spb + lat, 0.0), where(on, a_bytes, 0.0)
