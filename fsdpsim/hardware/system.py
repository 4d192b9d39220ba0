"""Resolve what a prediction runs on: an accelerator, a node shape and a network.

The user names a GPU (``--gpu``) or a node/cluster preset (``--cluster``), and may override the
GPUs per node, the network or the inter-node bandwidth per GPU. The result is one
:class:`~fsdpsim.hardware.spec.System`, with a label that says where every number came from.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from fsdpsim.hardware.catalog import Catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.hardware.spec import System
from fsdpsim.util.numbers import INTER_NODE_GBPS, POWER_CAP_W, Rule, read_number
from fsdpsim.util.units import GBIT_PER_S_BYTES_PER_S

#: Where the job's nodes sit in the fabric (``--placement``).
PLACEMENTS = ("packed", "fragmented")
#: Bus bandwidth kept with a fragmented placement: Meta's RoCE training clusters lost more than
#: 30 % with fragmented placement and pinned paths (ECMP collisions; SIGCOMM'24, as summarised
#: in engineering.fb.com 2024-08-05; network_at_scale.md §6: approximate, a secondary source).
FRAGMENTED_FACTOR = 0.7
#: Added to the network's uncertainty with a fragmented placement (how much a job loses depends
#: on what else runs beside it; no measurement gives more than the >30 % above).
FRAGMENTED_UNCERTAINTY = 0.2

#: Used when only a GPU is named and the catalog gives it no usual node (``default_node``): one
#: 400 Gb/s NDR InfiniBand NIC per GPU (the DGX H100 / HGX layout, hardware.md §5), 8 GPUs per
#: node (a rack-scale NVLink domain's size where larger). Reports say so.
DEFAULT_NETWORK = "ib-ndr-400"
DEFAULT_GPUS_PER_NODE = 8


def default_gpus_per_node(catalog: Catalog, acc) -> int:
    """GPUs per node of a system named by its GPU alone [-]: those of the accelerator's usual
    node in the catalog (``default_node``: Jupiter's 4 GH200, Leonardo's 4 A100 64GB, an NVL72
    rack's 72), else a rack-scale NVLink domain (NVL72) when larger than
    :data:`DEFAULT_GPUS_PER_NODE`, else :data:`DEFAULT_GPUS_PER_NODE`."""
    if acc.default_node is not None:
        return catalog.node(acc.default_node).gpus_per_node
    rack = acc.link.domain_size if (acc.link.domain_size or 0) > DEFAULT_GPUS_PER_NODE else None
    return rack or DEFAULT_GPUS_PER_NODE


def default_network(catalog: Catalog, acc, network: str | None = None):
    """``(network, NICs per GPU, usual node id or None)`` of a system named by its GPU alone.

    ``--network`` given: that network, one NIC per GPU. Not given: the network and the NICs per
    GPU (``nics_per_node / gpus_per_node``) of the accelerator's usual node in the catalog
    (``default_node``, each with its source there: DGX A100's 8x HDR 200, a Gaudi 3 node's
    3x 200 GbE per card, a DGX-1's 4x EDR 100 for 8 V100), else :data:`DEFAULT_NETWORK`, one
    NIC per GPU."""
    if network is not None:
        return catalog.network(network), 1.0, None
    if acc.default_node is None:
        return catalog.network(DEFAULT_NETWORK), 1.0, None
    node = catalog.node(acc.default_node)
    return node.network, node.nics_per_node / node.gpus_per_node, node.id


#: Measured bus bandwidths a user may pin (nccl-tests' busbw, GB/s), by measurement column /
#: ``predict`` option (``--busbw-allreduce-inter-gbs`` ...): all-reduce inside one node, and
#: all-reduce, all-gather and reduce-scatter over groups that span nodes.
BUSBW_COLUMNS = ("busbw_allreduce_intra_gbs", "busbw_allreduce_inter_gbs",
                 "busbw_allgather_inter_gbs", "busbw_reducescatter_inter_gbs")
#: What a pinned bus bandwidth accepts [GB/s]: above zero, at most 100 TB/s.
BUSBW_GBS = Rule(1e-3, 1e5)


def busbw_option(column: str) -> str:
    """The ``predict`` option of a :data:`BUSBW_COLUMNS` column."""
    return "--" + column.replace("_", "-")


def read_busbw(busbw_gbs: Mapping[str, object] | None) -> dict[str, float]:
    """The pinned bus bandwidths [B/s] by column, each read with the one number reader (a bad
    value: one clear error naming the option); unknown keys are refused."""
    out: dict[str, float] = {}
    for column, value in (busbw_gbs or {}).items():
        if column not in BUSBW_COLUMNS:
            raise ConfigError(f"bus bandwidth {column!r} is not accepted; accepted: "
                              f"{', '.join(BUSBW_COLUMNS)}")
        if value is None:
            continue
        out[column] = read_number(value, busbw_option(column), BUSBW_GBS) * 1e9
    return out


def resolve_system(catalog: Catalog, *, gpu: str | None = None, cluster: str | None = None,
                   gpus_per_node: int | None = None, network: str | None = None,
                   inter_node_gbps_per_gpu: float | None = None,
                   power_cap_w: float | None = None, placement: str = "packed",
                   busbw_gbs: Mapping[str, object] | None = None) -> System:
    """Build the :class:`System` for a prediction; a clear error on conflicting options.

    ``placement``: ``packed`` (default; the job's nodes contiguous and rail-aligned) or
    ``fragmented`` (scattered over the fabric; :data:`FRAGMENTED_FACTOR`). ``busbw_gbs``:
    measured bus bandwidths by :data:`BUSBW_COLUMNS` name [GB/s] that replace the modelled
    large-message bus bandwidth of those collectives (:func:`read_busbw`)."""
    pinned = read_busbw(busbw_gbs)
    if gpu is None and cluster is None:
        raise ConfigError("name the hardware: --gpu ID or --cluster ID "
                          "(see `fsdpsim catalog list`)")
    for flag, value in (("--gpu", gpu), ("--cluster", cluster), ("--network", network)):
        if value is not None and not str(value).strip():
            raise ConfigError(f"{flag} {value!r} is empty; give an id (see `fsdpsim catalog "
                              "list`) or leave the option out")
    if placement not in PLACEMENTS:
        raise ConfigError(f"--placement {placement!r} is not accepted; accepted: "
                          f"{', '.join(PLACEMENTS)}")
    notes = []
    oversubscription, pod_gpus = 1.0, None
    if cluster is not None:
        kind, ident = catalog.find(cluster)
        if kind == "cluster":
            node = catalog.cluster(ident).node
            oversubscription = catalog.cluster(ident).oversubscription
            pod_gpus = catalog.cluster(ident).pod_gpus
        elif kind == "node":
            node = catalog.node(ident)
        else:
            raise ConfigError(f"--cluster {cluster!r} is the id of a catalog {kind}; it takes a "
                              "node or cluster id (see `fsdpsim catalog list --kind node`)")
        acc = node.accelerator
        price = node.price or acc.price
        if gpu is not None and catalog.accelerator(gpu).id != acc.id:
            raise ConfigError(f"--gpu {gpu!r} conflicts with --cluster {cluster!r}, whose GPU is "
                              f"{acc.id}; give one of them")
        per_node = gpus_per_node or node.gpus_per_node
        net = catalog.network(network) if network is not None else node.network
        share = node.nics_per_node * net.nic_bandwidth_bytes_per_s / per_node
        link = node.link
        label = f"{ident} ({per_node}x {acc.id}, {node.nics_per_node:g}x {net.id} per node)"
    else:
        acc = catalog.accelerator(gpu)
        price = acc.price
        per_node = gpus_per_node or default_gpus_per_node(catalog, acc)
        net, nics, usual = default_network(catalog, acc, network)
        share = nics * net.nic_bandwidth_bytes_per_s
        link = acc.link
        label = f"{per_node}x {acc.id} per node, {nics:g}x {net.id} per GPU"
        if network is None:
            label += (f" (the GPU's default, as {usual})" if usual else
                      f" (fsdpsim's default: no usual node of {acc.id} in the catalog)")
            if inter_node_gbps_per_gpu is None:
                why = (f"its usual node {usual}" if usual else
                       f"no usual node in the catalog: one {DEFAULT_NETWORK} NIC per GPU")
                notes.append(f"network not given: {nics:g}x {net.id} per GPU, the default for "
                             f"{acc.id} ({why})")
    if per_node < 1:
        raise ConfigError(f"gpus_per_node must be a positive integer, got {per_node}")
    if inter_node_gbps_per_gpu is not None:
        gbps = read_number(inter_node_gbps_per_gpu, "--inter-node-gbps-per-gpu", INTER_NODE_GBPS)
        share = gbps * GBIT_PER_S_BYTES_PER_S
        label += f", inter-node overridden to {gbps:g} Gb/s per GPU"
    elif not INTER_NODE_GBPS.contains(share / GBIT_PER_S_BYTES_PER_S):
        raise ConfigError(
            f"inter-node bandwidth per GPU {share / GBIT_PER_S_BYTES_PER_S:.3g} Gb/s ({net.id} "
            f"shared by {per_node:,} GPUs per node) is not accepted; accepted: "
            f"{INTER_NODE_GBPS.describe()}: give fewer --gpus-per-node or "
            "--inter-node-gbps-per-gpu")
    if placement == "fragmented":
        label += ", fragmented placement"
        notes.append(f"fragmented placement: inter-node bus bandwidth x{FRAGMENTED_FACTOR:g} "
                     "(Meta's RoCE clusters, >30 % lost; approximate: wider range)")
    clock = 1.0
    if power_cap_w is not None:
        power_cap_w = read_number(power_cap_w, "--power-cap-w", POWER_CAP_W)
        clock = _power_cap_clock(acc, power_cap_w)
        label += f", power-capped to {_watts(power_cap_w)} W of {_watts(acc.tdp_w)} W"
        notes.append(f"power cap {_watts(power_cap_w)} W: compute clock x{clock:.3f} (DVFS cube "
                     "law, uncalibrated: wider range)")
    if pinned:
        label += ", measured bus bandwidth " + ", ".join(
            f"{busbw_option(c)[2:]} {v / 1e9:g} GB/s" for c, v in pinned.items())
    return System(
        measured_busbw=MappingProxyType(pinned),
        accelerator=acc, gpus_per_node=per_node, link=link,
        inter_node_bandwidth_bytes_per_s_per_gpu=share,
        inter_node_latency_s=net.latency_s, inter_node_fraction=net.achievable_fraction,
        label=label, extra={"notes": "; ".join(notes), "network": net.id},
        power_cap_w=power_cap_w, compute_clock_ratio=clock, network=net,
        oversubscription=oversubscription, pod_gpus=pod_gpus, placement=placement,
        collectives=MappingProxyType({i: catalog.collectives(i)
                                      for i in catalog.ids("collectives")}),
        price=price,
    )


def domain_gpus(system: System, num_gpus: int) -> int:
    """GPUs of the job in one scale-up domain [-].

    A job fills whole nodes (``num_gpus`` a multiple of the node, or a divisor of it on one
    node). A rack-scale NVLink domain (NVL72: 72 GPUs in 4-GPU compute trays) need not be
    filled: a job of fewer GPUs runs inside one rack, and a larger job that does not fill whole
    racks uses the same number of GPUs in each rack, the largest multiple of a tray that
    divides the job (256 GPUs on NVL72 racks: 64 per rack, as deployments leave spare trays)."""
    per = system.gpus_per_node
    domain = system.link.domain_size
    if domain is None or domain <= 8 or per < domain:
        return per
    if num_gpus <= per:
        return num_gpus
    if num_gpus % per == 0:
        return per
    used = [d for d in range(per, 0, -1) if num_gpus % d == 0 and d % RACK_TRAY_GPUS == 0]
    return used[0] if used else per


#: GPUs per compute tray of an NVL72 rack (each tray with its own NICs; NVIDIA GB200 NVL72).
RACK_TRAY_GPUS = 4


def _power_cap_clock(acc, power_cap_w: float) -> float:
    from fsdpsim.costs.compute import STATIC_POWER_FRACTION, power_capped_clock_ratio

    if acc.tdp_w is None:
        raise ConfigError(f"--power-cap-w needs the GPU's TDP, and {acc.id} has no tdp_w in the "
                          "catalog; add it (see README, Adding hardware) or drop the cap")
    floor = STATIC_POWER_FRACTION * acc.tdp_w
    if not floor < power_cap_w <= acc.tdp_w:
        raise ConfigError(f"--power-cap-w {_watts(power_cap_w)} is outside what {acc.id} "
                          f"accepts: more than its static draw ({_watts(floor)} W) and at most "
                          f"its TDP ({_watts(acc.tdp_w)} W)")
    return float(power_capped_clock_ratio(power_cap_w, acc.tdp_w))


def _watts(x: float) -> str:
    """Watts as given, every digit that matters (700.0001 is not 700)."""
    return f"{x:.12g}"


def cluster_gpus(catalog: Catalog, cluster: str | None, gpus_per_node: int) -> int | None:
    """GPUs in the named cluster (its nodes x ``gpus_per_node``); None for a node, a GPU or a
    cluster whose size the catalog does not give."""
    if cluster is None:
        return None
    kind, ident = catalog.find(cluster)
    if kind != "cluster":
        return None
    nodes = catalog.cluster(ident).num_nodes
    return nodes * gpus_per_node if nodes else None


def cluster_too_small(num_gpus: int, cluster: str, have: int) -> str:
    """The one message for a GPU count larger than the named cluster (predict and sweep)."""
    return f"num_gpus({int(num_gpus)}) is more than cluster {cluster} has ({int(have)})"


def check_cluster_size(catalog: Catalog, cluster: str | None, num_gpus: int,
                       gpus_per_node: int) -> None:
    """A clear error when ``num_gpus`` is more than the named cluster has (``sweep`` marks the
    same point infeasible with the same words)."""
    have = cluster_gpus(catalog, cluster, gpus_per_node)
    if have is not None and num_gpus > have:
        _, ident = catalog.find(cluster)
        raise ConfigError(cluster_too_small(num_gpus, ident, have) + "; give --num-gpus "
                          f"{have:,} or fewer, or a bigger cluster")
