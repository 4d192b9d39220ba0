"""Communication time [s]: NCCL collectives (bus bandwidth per tier, the least over
NCCL's algorithms and protocols), Megatron's tensor-parallel collectives and context
parallelism's ring hops or Ulysses all-to-alls."""

from __future__ import annotations

import math

NCCL_PROTOCOLS = ("ll", "ll128", "simple")
PAT_BASE_S, PAT_PER_RANK_S = 8.0e-6, 2.8e-6  # NCCL tuning.cc PAT latency


def bus_bandwidth(x, n, per_node, per_pod=None):
    """Large-message bus bandwidth of a ring over n ranks, ``per_node`` of them per domain
    [B/s]: the scale-up link inside one domain; across domains the node's NIC share
    (``per_node`` × NIC share × fabric decay), capped by the link (fsdpsim.costs.comm), and
    for a group spanning the pods of an oversubscribed fabric (``per_pod`` < n members in
    one pod) the uplinks' share: each pod carries pod/per_pod such rings, each needing
    2·per_node NIC rates of uplink, against pod/oversubscription (fsdpsim.costs.nccl
    ``pod_factor``; Dubey et al. 2024 §3.3.1)."""
    g = min(per_node, n)
    link = x["link"]
    if x["mesh"]:
        # A switchless mesh (DGX-1 cube-mesh, MI300X Infinity Fabric): g of the D GPUs reach
        # only (g − 1)/(D − 1) of each GPU's links, never less than one peer link (NVIDIA
        # DGX-1 System Architecture whitepaper).
        domain = max(x["gpus_per_node"], 2)
        share = (min(g, domain) - 1) / (domain - 1)
        link = link * min(max(share, x["per_peer_link"] / x["link_raw"]), 1.0)
    if n <= g:
        return link
    nodes = math.ceil(n / max(g, 1))
    # Fabric decay with node count (NVIDIA/nccl#1229), per network class in the catalog.
    lost = x["decay"] * math.log2(max(nodes / x["decay_from"], 1.0))
    fabric = max(x["decay_floor"], 1.0 - lost) * x["placement_factor"]
    if per_pod is not None and per_pod < n:
        fabric *= min(1.0, per_pod / (2.0 * x["oversubscription"] * max(g, 1)))
    intra = link if g > 1 else math.inf
    return min(intra, g * x["nic"] * fabric)


def nccl_time_s(x, message_bytes, n, per_node, all_reduce=False, per_pod=None):
    """One NCCL collective on M bytes over n ranks: the least over NCCL's (algorithm,
    protocol) pairs of ``latency + M · share / bandwidth`` (NCCL src/graph/tuning.cc
    ``ncclTopoTuneModel``; constants from the catalog's library; fsdpsim.costs.nccl).

    A bus bandwidth the user measured (nccl-tests' busbw, ``--busbw-*-gbs``) replaces the
    modelled one for its kind and tier: all-reduce inside one domain or across domains,
    all-gather / reduce-scatter across domains. With both of the latter pinned, the ring
    collectives (priced alike) take the bandwidth at which an all-gather and a
    reduce-scatter of M bytes last as long as the two measured ones together:
    ``2 / (1/B_ag + 1/B_rs)``."""
    if n <= 1:
        return 0.0
    lib = x["nccl"]
    ppn = min(per_node, n)
    nodes = max(math.ceil(n / max(ppn, 1)), 1)
    multi = nodes > 1
    pins = x["busbw_pins"]
    if all_reduce:
        pin = pins.get("busbw_allreduce_inter_gbs" if multi else "busbw_allreduce_intra_gbs")
    else:
        ring = [pins[k] for k in ("busbw_allgather_inter_gbs", "busbw_reducescatter_inter_gbs")
                if k in pins]
        pin = len(ring) / sum(1.0 / v for v in ring) if ring and multi else None
    busbw = bus_bandwidth(x, n, per_node, per_pod) if pin is None else pin
    passes = 2.0 if all_reduce else 1.0
    steps = passes * (n - 1)                 # ring steps: n − 1, twice for all-reduce
    inter = passes * (nodes - 1)             # of which cross nodes
    share = steps / n                        # (n−1)/n of M per rank (nccl-tests busbw)
    ll_max = lib.ll_max_bytes_per_s[0 if nodes <= 1 else 1 if nodes <= 2 else 2]
    ll128_cap = ppn * lib.ll128_channel_bytes_per_s if multi else math.inf
    hop_kind = "nvlink" if x["nvlink"] else "pci"
    lat = lambda p, k: lib.latency_us[p][f"{k}_us"] * 1e-6  # noqa: E731
    best = math.inf
    for p in NCCL_PROTOCOLS:
        hop = lat(p, f"ring_{hop_kind}_hop")
        if p == "ll" and multi:
            hop *= lib.ll_multi_node_hop_factor
        overhead = lib.net_overhead_s * (3.0 if p == "simple" else 1.0)
        intra = max(hop, overhead if multi else 0.0)
        latency = lat(p, "ring_base") + (steps - inter) * intra + inter * lat(p, "ring_net_hop")
        bw = {"simple": busbw,
              "ll128": min(busbw * lib.ll128_bandwidth_fraction, ll128_cap),
              "ll": min(ll_max, busbw * lib.ll_bandwidth_fraction)}[p]
        best = min(best, message_bytes * share / bw + latency)
    if all_reduce and multi:  # tree: up and down a log2(nodes)-deep tree, 2·M/bw
        tree_cap = ppn * lib.tree_channel_bytes_per_s
        for p in NCCL_PROTOCOLS:
            latency = lat(p, "tree_base") + 2.0 * ((ppn - 1) * lat(p, f"tree_{hop_kind}_hop")
                                                   + math.log2(nodes) * lat(p, "tree_net_hop"))
            bw = {"simple": min(busbw * lib.tree_bandwidth_fraction, tree_cap),
                  "ll128": min(busbw * 120.0 / 128.0, ll128_cap),
                  "ll": min(ll_max, busbw / 3.8)}[p]
            best = min(best, message_bytes * 2.0 / bw + latency)
    elif not all_reduce and lib.pat and multi and ppn <= 1:  # PAT, one GPU per node
        latency = (PAT_BASE_S + math.log2(nodes) * lat("simple", "tree_net_hop") / 3.5
                   + PAT_PER_RANK_S * n)
        best = min(best, message_bytes * share / (0.75 * busbw) + latency)
    return best


def tensor_parallel_s(m, x, tp_per_node, tp_per_pod):
    """Tensor-parallel collectives per micro-batch over the TP group [s]: (layer forward,
    layer backward, root forward + backward), Megatron's operators (Shoeybi et al. 2019 §3
    f and g; Korthikanti et al. 2022 §4.2.2 with sequence parallelism), m = T·h·e bytes each:

    * layer, no SP: forward 2 all-reduces (after attention and MLP), backward 2 (fused QKV
      and gate/up input gradients); SP: forward 2 all-gathers + 2 reduce-scatters, backward 2
      reduce-scatters + 4 all-gathers (the block inputs gathered again for the weight grads);
    * root: the embedding (no SP: all-reduce; SP: reduce-scatter, and an all-gather back),
      the LM head (no SP: its input gradient all-reduced; SP: input all-gathered, gradient
      reduce-scattered and input re-gathered), and the vocab-parallel loss's three per-token
      fp32 all-reduces (max, target logit, sum-exp: 12 B per token in all).

    Calls of one kind and size in one pass are charged together; the no-SP forward root's
    all-reduces differ in size (one of m bytes, three of 4·T) and each is costed on its own,
    as NCCL picks an algorithm per call: t(m) + 3·t(4T)."""
    t, T = x["tp"], x["T"]
    msg = T * m.d_model * x["e"]
    loss_bytes = T * 12.0
    def ar(total, calls):
        return calls * nccl_time_s(x, total / calls, t, tp_per_node, True, tp_per_pod)

    def ring(total, calls):
        return calls * nccl_time_s(x, total / calls, t, tp_per_node, False, tp_per_pod)

    if x["sp"]:
        fwd = ring(2 * msg, 2) + ring(2 * msg, 2)                     # g, ḡ
        bwd = ring(2 * msg, 2) + ring(4 * msg, 4)                     # g', ḡ' + re-gather
        root = (ar(loss_bytes, 3) + ring(msg, 1) + ring(msg, 1)        # loss; embed RS; head AG
                + ring(2 * msg, 2) + ring(msg, 1))                    # bwd AG x2; head RS
    else:
        fwd, bwd = ar(2 * msg, 2), ar(2 * msg, 2)
        root = ar(msg, 1) + ar(loss_bytes, 3) + ar(msg, 1)            # embed; loss; head grad
    return fwd, bwd, root


def context_parallel_s(m, x, cp_per_node):
    """Context-parallel communication of one layer per micro-batch [s]: (forward, backward).

    Ring attention (Liu et al. 2023 §3; TransformerEngine ``AttnFuncWithCPAndKVP2P``): the
    rank's K and V block, kv = 2·T·kv_dim/t·e bytes, travels c − 1 hops forward; backward K, V
    and their gradients travel c − 1 hops each, packed into the same sends. Each hop is a
    send/recv to the ring neighbour over the link (inside a domain) or the NIC share.
    Ulysses (Jacobs et al. 2023 §3.1): q, k, v all-to-all before attention and the output
    after, the reverse in backward: 4 calls of T·(2q + 2kv)/t·e bytes in all, each rank
    sending (g − 1)/c of them over the link and (c − g)/c over its NIC at once."""
    c, t, T, e = x["cp"], x["tp"], x["T"], x["e"]
    inside = cp_per_node >= c
    if not x["cp_all2all"]:
        per_byte = 1.0 / (x["link"] if inside else x["nic"])
        latency = x["link_latency_s"] if inside else x["nic_latency_s"]
        kv = 2.0 * T * m.kv_dim / t * e
        hops = c - 1
        return hops * kv * per_byte + hops * latency, 2.0 * hops * kv * per_byte + hops * latency
    g = min(cp_per_node, c)
    per_byte = max((g - 1) / c / x["link"], (c - g) / c / x["nic"] if c > g else 0.0)
    latency = (c - 1) * (x["nic_latency_s"] if c > g else x["link_latency_s"])
    total = T * (2.0 * m.q_dim + 2.0 * m.kv_dim) / t * e
    one_pass = total * per_byte + 4.0 * latency
    return one_pass, one_pass

