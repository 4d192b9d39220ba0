"""Collective time with NCCL's own cost structure: protocol and algorithm chosen per call.

NCCL predicts, for every collective call, the time of each (algorithm, protocol) pair and runs
the fastest (``src/enqueue.cc`` ``topoGetAlgoInfo``; model in ``src/graph/tuning.cc``
``ncclTopoTuneModel``, constants in the catalog's ``[[collectives]]`` entries)::

    t = latency(algorithm, protocol) + bytes / algorithm_bandwidth(algorithm, protocol)

Ring (every collective; the only algorithm for all-gather and reduce-scatter on nodes with
several GPUs unless SHARP/NVLS serve them, network_at_scale.md §1): ``nsteps`` = n − 1
(all-gather, reduce-scatter) or 2(n − 1) (all-reduce), of which ``n_inter`` = N − 1 or
2(N − 1) cross nodes (N nodes)::

    latency = base[p] + (nsteps − n_inter) · intra[p] + n_inter · net[p]
    intra[p] = max(hop_nvlink[p] (× the LL factor on several nodes), net_overhead · (3 if Simple))
    algorithm bandwidth = bus bandwidth · n / nsteps

so an M-byte all-gather costs ``latency + (n−1)/n · M / busbw`` (the nccl-tests ``busbw``
convention, NVIDIA nccl-tests PERFORMANCE.md). Tree (all-reduce across nodes): latency
``base[p] + 2 · ((ppn − 1) · intra[p] + log2(N) · net[p])``, algorithm bandwidth half the bus
bandwidth. PAT (NCCL ≥ 2.23, all-gather/reduce-scatter with one GPU per node): latency
``base + log2(N) · net/3.5 + 2.8 µs · n``, bandwidth × 0.75.

Per protocol (``tuning.cc`` "model refinements"): Simple runs at the bus bandwidth, LL128 at
0.92 of it, LL at a fraction capped by ``llMaxBw`` (per node count); tree all-reduce at 0.92
(LL: 1/3.8, LL128: 120/128). Across nodes LL128 and tree are also capped per channel
(``perChMaxRingLL128Bw``, ``perChMaxTreeBw``), with one channel per GPU's NICs (a DGX node's
8 NICs carry 8 channels: busBw = 8 × 24 GB/s on A100/HDR, 8 × 48 on H100/NDR,
network_at_scale.md §1); the caps are one value per library release in the catalog (NCCL
keys them by GPU generation). The bus bandwidth is the achievable large-message bus bandwidth
of the tier the group spans (:mod:`fsdpsim.costs.comm`), times the fabric's decay with node
count (:func:`fabric_factor`).

Left out, and why: NVLS and CollNet
(SHARP) algorithms (need switch support the catalog does not record; without them NCCL falls
back to ring/tree, the conservative choice), and the small-message channel reduction below
~1 MB (``enqueue.cc``: fewer channels while bytes < channels · threads · 64 B).

All functions are vectorised over numpy arrays; a group's candidates are computed once and
every collective on it is then ``min`` over a few multiply-adds (:func:`time_s`).
"""

from __future__ import annotations

import math
import zlib

import numpy as np

from fsdpsim.costs.compute import (all_of, any_of, as_array, as_values, broadcast_shape, maximum,
                                   minimum, one_flag, where)

PROTOCOLS = ("ll", "ll128", "simple")
_KEYS = ("ring_base", "ring_nvlink_hop", "ring_pci_hop", "ring_net_hop", "tree_base",
         "tree_nvlink_hop", "tree_pci_hop", "tree_net_hop")
US_S = 1e-6
#: PAT's base latency and its remaining linear term per rank (tuning.cc @5067397c:
#: baseLatencies PAT 8.0 us; "nRanks * 2.8 // Still a linear part").
PAT_BASE_S, PAT_PER_RANK_S = 8.0e-6, 2.8e-6
#: PAT's latency per log2 of the node count is the tree's Simple network hop over this, and its
#: bandwidth this share of the bus bandwidth (tuning.cc @5067397c, ncclTopoTuneModel).
PAT_NET_HOP_DIVISOR, PAT_BANDWIDTH_FRACTION = 3.5, 0.75
#: The tree all-reduce's LL bandwidth is the bus bandwidth over this (under llMaxBw), LL128's
#: this share of it (tuning.cc @5067397c, ncclTopoTuneModel's model refinements).
TREE_LL_DIVISOR, TREE_LL128_FRACTION = 3.8, 120.0 / 128.0
#: Cost terms of a candidate that does not apply (finite, so 0 bytes x OFF is 0, not NaN).
OFF = 1e30


def library_inputs(lib) -> dict[str, float]:
    """Engine inputs of a :class:`fsdpsim.hardware.spec.CollectiveLibrary`: scalars, SI units."""
    x = {f"nccl_{p}_{k}_s": lib.latency_us[p][f"{k}_us"] * US_S
         for p in PROTOCOLS for k in _KEYS}
    x.update({"nccl_id": float(zlib.crc32(lib.id.encode()) % 2**24),  # one value per library
              "nccl_net_overhead_s": lib.net_overhead_s,
              "nccl_ll_hop_factor": lib.ll_multi_node_hop_factor,
              "nccl_ll_fraction": lib.ll_bandwidth_fraction,
              "nccl_ll128_fraction": lib.ll128_bandwidth_fraction,
              "nccl_tree_fraction": lib.tree_bandwidth_fraction,
              "nccl_ll_max_1_bytes_per_s": lib.ll_max_bytes_per_s[0],
              "nccl_ll_max_2_bytes_per_s": lib.ll_max_bytes_per_s[1],
              "nccl_ll_max_n_bytes_per_s": lib.ll_max_bytes_per_s[2],
              "nccl_ll128_channel_bytes_per_s": lib.ll128_channel_bytes_per_s,
              "nccl_tree_channel_bytes_per_s": lib.tree_channel_bytes_per_s,
              "nccl_pat": float(lib.pat)})
    return x


def collapse_constant_library(g: dict) -> None:
    """Turn the library constants of ``g`` (the mapping :func:`fsdpsim.engine.prepare.prepare`
    builds its typed inputs from) into scalars when every row uses the same library
    (one ``nccl_id``): arrays of one repeated value cost as much to compute with as any other
    array. In place."""
    ident = g.get("nccl_id")
    if ident is None or np.ndim(ident) == 0 or np.size(ident) == 0:
        return
    flat = np.ravel(ident)
    if all_of(flat == flat[0]):
        for key in [k for k in g if k.startswith("nccl_")]:
            value = g[key]
            if np.ndim(value):
                g[key] = np.float64(np.ravel(value)[0])


def fabric_factor(nodes, decay_per_doubling, from_nodes, floor):
    """Share of the large-message bus bandwidth a ring keeps on ``nodes`` nodes [-].

    ``max(floor, 1 − decay · log2(nodes / from_nodes))`` past ``from_nodes``, else 1: measured
    reduce-scatter bus bandwidth on H100 falls about linearly in log(nodes) (NVIDIA/nccl#1229:
    360, 345, 320, 300, 280, 260 GB/s on 4 to 128 nodes), from routing, ECMP collisions and
    stragglers that NCCL's own model leaves out (network_at_scale.md §2, §6, §8.6). Per network
    class in the catalog, with its source.
    """
    n = maximum(as_array(nodes), 1.0)
    with np.errstate(divide="ignore"):
        lost = as_array(decay_per_doubling) * np.log2(maximum(n / as_array(from_nodes), 1.0))
    return maximum(as_array(floor), 1.0 - lost)


def pod_factor(size, per_pod, per_node, oversubscription):
    """Share of a ring's inter-node bandwidth left where it crosses oversubscribed pod uplinks
    [-]: ``min(1, per_pod / (2 · oversubscription · per_node))`` for a group spanning pods,
    else 1.

    Rings are rail-aligned (NCCL pairs same-index NICs across nodes, ``NCCL_CROSS_NIC``), so a
    ring inside one non-blocking pod stays off the spine (network_at_scale.md §6). A group of
    ``per_pod`` members per pod enters and leaves each pod once per channel, one channel per
    member node's NICs: every pod carries ``(pod GPUs / per_pod)`` such groups, each needing
    ``2 · per_node`` NIC-rates of uplink, against ``pod GPUs / oversubscription`` NIC-rates of
    uplink capacity. Llama 3's clusters (1:7 above 3,072-GPU pods) keep the data-parallel
    groups, the only ones that cross pods, this large (Dubey et al. 2024 §3.3.1)."""
    per_pod = as_array(per_pod)
    spans = per_pod < as_array(size)
    left = minimum(1.0, per_pod / (2.0 * as_array(oversubscription)
                                   * maximum(as_array(per_node), 1.0)))
    return where(spans, left, 1.0)


def _ll_max(g, nodes):
    """NCCL's LL bandwidth cap on ``nodes`` nodes (``llMaxBws``: one, two, more) [B/s]."""
    return where(nodes <= 1.0, g.nccl_ll_max_1_bytes_per_s,
                 where(nodes <= 2.0, g.nccl_ll_max_2_bytes_per_s,
                       g.nccl_ll_max_n_bytes_per_s))


def candidates(g, n, per_node, busbw_bytes_per_s, nvlink,
               all_reduce: bool, broadcast: bool = False):
    """``[(s_per_byte, latency_s), ...]`` of every (algorithm, protocol) NCCL considers for
    one collective over ``n`` ranks with ``per_node`` of them per node (module docstring).
    ``g``: the library's constants as fields (``g.nccl_ll_fraction``, ...: the engine's
    prepared inputs, :class:`fsdpsim.engine.inputs.Prepared`).

    ``busbw_bytes_per_s`` is the large-message bus bandwidth of the tier the group spans (fabric
    decay included); ``nvlink`` (bool array) says whether intra-node hops are NVLink (else
    PCIe). ``all_reduce`` adds the tree and doubles the ring's steps. Groups of one rank cost 0.

    ``broadcast``: ring only, every byte at the bus bandwidth (nccl-tests: broadcast's busbw =
    algbw; ``tuning.cc``: ring ratio ``nRanks / nsteps`` with ``nsteps = nRanks``), and the
    latency of the ring's hops as an all-gather's: NCCL's ring broadcast is a pipelined chain
    from the root (``src/device/broadcast.h``: send, ``recvCopySend`` on every rank, ``recv``
    on the last), so the last rank's first chunk crosses ``n − 1`` hops, ``N − 1`` of them
    between nodes. (``tuning.cc`` charges one hop when every channel takes the same path and
    ``nsteps`` network hops otherwise, "waiting for proper chunk modeling"; the chain's own
    hops are the physical count.)
    """
    n = as_array(n)
    ppn = minimum(as_array(per_node), n)
    nodes = maximum(np.ceil(n / maximum(ppn, 1.0)), 1.0)
    multi, active = nodes > 1.0, n > 1.0
    if type(multi) is _NDARRAY:  # a group's rows (one configuration: numbers already)
        multi, active = one_flag(multi), one_flag(active)
    multi_f, active_f = _as_float(multi), _as_float(active)
    steps = maximum(n - 1.0, 0.0)
    inter_steps = nodes - 1.0
    if all_reduce:  # two passes
        steps, inter_steps = 2.0 * steps, 2.0 * inter_steps
    intra_steps = steps - inter_steps
    share = steps / maximum(n, 1.0)        # (n-1)/n, or 2(n-1)/n; 0 for one rank
    if broadcast:
        share = _as_float(n > 1.0)         # M at the bus bandwidth; 0 for one rank
    bw = as_array(busbw_bytes_per_s)
    nv = as_values(nvlink, bool)
    all_nvlink = bool(all_of(nv))
    any_multi = bool(any_of(multi))
    # (one node on every row: the one-node cap, without testing each row's node count)
    ll_max = (g.nccl_ll_max_1_bytes_per_s if type(multi) is _BOOL_SCALAR and not multi
              else _ll_max(g, nodes))
    # Per-channel caps across nodes: one channel per GPU's NICs (DGX: 8 NICs, 8 channels).
    ll128_cap = (where(multi, ppn * g.nccl_ll128_channel_bytes_per_s, _INF) if any_multi
                 else _INF)
    all_active = type(active) is _BOOL_SCALAR and active  # then x · active_f is x
    out = Candidates()
    for p in PROTOCOLS:
        nvlink_hop = getattr(g, f"nccl_{p}_ring_nvlink_hop_s")
        hop = (nvlink_hop if all_nvlink else
               where(nv, nvlink_hop, getattr(g, f"nccl_{p}_ring_pci_hop_s")))
        if p == "ll":
            hop = hop * (1.0 + (g.nccl_ll_hop_factor - 1.0) * multi_f)
        overhead = g.nccl_net_overhead_s * (3.0 if p == "simple" else 1.0)
        intra = maximum(hop, overhead * multi_f)  # the network post overhead across nodes
        lat = (getattr(g, f"nccl_{p}_ring_base_s") + intra_steps * intra
               + inter_steps * getattr(g, f"nccl_{p}_ring_net_hop_s"))
        if not all_active:
            lat = lat * active_f
        if p == "simple":
            pbw = bw
        elif p == "ll128":
            pbw = bw * g.nccl_ll128_fraction
            if ll128_cap is not _INF:  # min(x, inf) is x, NaN included
                pbw = minimum(pbw, ll128_cap)
        else:
            pbw = minimum(ll_max, bw * g.nccl_ll_fraction)
        out.append((share / pbw, lat))
    if all_reduce and any_multi:
        depth = np.log2(nodes)
        off = OFF * (1.0 - multi_f)  # tree only across nodes (one node: a chain, slower)
        tree_cap = ppn * g.nccl_tree_channel_bytes_per_s
        for p in PROTOCOLS:
            nvlink_hop = getattr(g, f"nccl_{p}_tree_nvlink_hop_s")
            hop = (nvlink_hop if all_nvlink else
                   where(nv, nvlink_hop, getattr(g, f"nccl_{p}_tree_pci_hop_s")))
            lat = getattr(g, f"nccl_{p}_tree_base_s") + 2.0 * (
                (ppn - 1.0) * hop + depth * getattr(g, f"nccl_{p}_tree_net_hop_s"))
            if p == "simple":
                pbw = minimum(bw * g.nccl_tree_fraction, tree_cap)
            elif p == "ll128":
                pbw = minimum(bw * TREE_LL128_FRACTION, ll128_cap)
            else:
                pbw = minimum(ll_max, bw / TREE_LL_DIVISOR)
            out.append((2.0 / pbw + off, lat + off))
    elif not all_reduce and not broadcast:
        # PAT: one GPU per node (NCCL >= 2.23), Simple only.
        pat = (g.nccl_pat > 0) & multi & (ppn <= 1.0)
        if any_of(pat):
            off = OFF * (1.0 - pat)
            lat = (PAT_BASE_S + np.log2(nodes) * g.nccl_simple_tree_net_hop_s / PAT_NET_HOP_DIVISOR
                   + PAT_PER_RANK_S * n)
            out.append((share / (PAT_BANDWIDTH_FRACTION * bw) + off, lat + off))
    return out


_NDARRAY, _BOOL_SCALAR, _INF = np.ndarray, np.bool_, np.inf


def _as_float(mask):
    """``mask.astype(float)``; one boolean (a group of one configuration) as 0.0 or 1.0 without
    its call, which costs thirty times a float's arithmetic."""
    if type(mask) is np.bool_:
        return _ONE if mask else _ZERO
    return mask.astype(float)


_ONE, _ZERO = np.float64(1.0), np.float64(0.0)


class Candidates(list):
    """:func:`candidates`' ``[(s_per_byte, latency_s), ...]``, with the same values stacked
    (:meth:`stacked`) for :func:`time_s` on one message size over a few rows (predict's
    configuration and its slower twin), where numpy's per-call overhead is most of the cost."""

    _stacked: tuple | None = None
    _numbers: tuple | None = None

    def stacked(self) -> tuple:
        """``(s_per_byte, latency_s)``, each a float64 array of shape (candidates, *rows),
        the candidates broadcast to one shape; ``(None, None)`` above :data:`_STACKED_ROWS`
        rows or for other dtypes. Built on first use."""
        if self._stacked is None:
            self._stacked = (None, None)
            values = [v for pair in self for v in pair]
            if all(type(v) in _FLOATS or (type(v) is np.ndarray and v.dtype == np.float64)
                   for v in values):
                shape = broadcast_shape(*(v.shape if type(v) is np.ndarray else ()
                                          for v in values))
                if math.prod(shape) <= _STACKED_ROWS:
                    spb_k, lat_k = np.empty((len(self),) + shape), np.empty((len(self),) + shape)
                    for i, (spb, lat) in enumerate(self):  # each broadcast to the shape
                        spb_k[i], lat_k[i] = spb, lat
                    self._stacked = (spb_k, lat_k)
        return self._stacked

    def numbers(self) -> tuple:
        """The candidates as ``((s_per_byte, latency_s), ...)`` of Python floats where each is
        one finite number (a group of one configuration), else ``()``. Built on first use."""
        if self._numbers is None:
            self._numbers = ()
            if all(type(v) in _FLOATS and math.isfinite(v) for pair in self for v in pair):
                self._numbers = tuple((float(spb), float(lat)) for spb, lat in self)
        return self._numbers


_FLOATS = frozenset((float, np.float64))


#: Up to this many rows :func:`time_s` costs one message size on all candidates at once
#: (:meth:`Candidates.stacked`: three numpy calls, not three per candidate).
_STACKED_ROWS = 64

#: From this many rows on :func:`time_s` computes each candidate in one reused buffer (below,
#: numpy's per-call overhead outweighs the allocations it saves).
_BUFFERED_ROWS = 1024


def time_s(message_bytes, cands, calls=1.0):
    """Time of ``calls`` collectives of ``message_bytes`` each (the whole buffer: all-gather
    output, reduce-scatter input, all-reduce buffer) under NCCL's choice: the least of the
    candidates' ``latency + bytes · s_per_byte`` [s]."""
    m = as_array(message_bytes)
    if type(m) is np.float64 and type(cands) is Candidates and len(cands) > 1:
        numbers = cands.numbers()
        if numbers and math.isfinite(m):  # finite sums: Python's min is numpy's, bit for bit
            m = float(m)
            t = np.float64(min([m * spb + lat for spb, lat in numbers]))
            if type(calls) in (float, int, np.float64):
                return t if calls == 1.0 else calls * t
            return as_array(calls) * t
        spb_k, lat_k = cands.stacked()
        if spb_k is not None:  # the same products, sums and least value, in three calls
            t = np.minimum.reduce(m * spb_k + lat_k)
            if type(calls) in (float, int, np.float64):
                return t if calls == 1.0 else calls * t
            return as_array(calls) * t
    spb, lat = cands[0]
    t = m * spb + lat
    each = (np.empty_like(t) if type(t) is np.ndarray and t.size >= _BUFFERED_ROWS
            and len(cands) > 1 else None)
    for spb, lat in cands[1:]:
        if each is not None and broadcast_shape(m.shape, np.shape(spb), np.shape(lat)) == t.shape:
            np.multiply(m, spb, out=each)  # the same operations, in one reused buffer
            each += lat
            np.minimum(t, each, out=t)
        else:
            t = minimum(t, m * spb + lat)
    if type(calls) in (float, int, np.float64):
        return t if calls == 1.0 else calls * t
    return as_array(calls) * t


def bus_bandwidth_bytes_per_s(message_bytes, n, cands, all_reduce=False):
    """nccl-tests' bus bandwidth of one call: ``factor · M / t`` with factor (n−1)/n for
    all-gather and reduce-scatter, 2(n−1)/n for all-reduce [B/s] (for tests and plots)."""
    n = as_array(n)
    factor = (2.0 if all_reduce else 1.0) * (n - 1.0) / n
    return factor * as_array(message_bytes) / time_s(message_bytes, cands)
