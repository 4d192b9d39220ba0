"""Hardware objects: accelerators, their links, scale-out networks, nodes and clusters.

All fields are SI floats (bytes, bytes/s, FLOP/s, seconds) and names carry the unit. The only
code that builds these from files is :mod:`fsdpsim.hardware.catalog`; the cost functions in
:mod:`fsdpsim.costs` take plain numbers derived from them, never the objects themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Mapping

from fsdpsim.util.errors import ConfigError
from fsdpsim.util.units import GBIT_PER_S_BYTES_PER_S

Topology = Literal["switch", "mesh", "pcie", "torus", "single"]
#: What a rent in the catalog is: a provider's published on-demand list price, or an estimate
#: (derived from other list prices, or remembered; the entry's comment says how).
PRICE_KINDS = ("on-demand", "estimate")
Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]


@dataclass(frozen=True)
class Price:
    """Rent of one GPU for one hour, and where the number comes from."""

    usd_per_gpu_hour: float
    kind: str
    """One of :data:`PRICE_KINDS`, or ``--price`` for a user's own."""
    source: str
    """URL (or ``--price``) the number was read from."""
    retrieved: str
    """Date the price was read at its source (ISO)."""


@dataclass(frozen=True)
class FitSpan:
    """The scale of the measured runs an efficiency table was fitted on (the rows its
    ``fsdpsim calibrate`` command selects; catalog keys ``fit_gpus_min`` .. ``fit_params_max``).
    Beyond it the fitted fractions carry effects the fit never saw, and the 90 % range widens
    (:func:`fsdpsim.drivers.interval.fit_span_doublings`)."""

    gpus_min: int
    """Fewest GPUs of a fitted run [-]."""
    gpus_max: int
    """Most GPUs of a fitted run [-]."""
    params_min: int
    """Parameters of the smallest fitted model [-]."""
    params_max: int
    """Parameters of the largest fitted model [-]."""


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions and overheads of one accelerator type (calibrated, with sources).

    These are the only numbers fsdpsim fits to measurements (``fsdpsim calibrate``); one set
    per GPU type, never per run.
    """

    matmul_fraction: float
    """Best-shape dense GEMM throughput / dense peak (MAMF, [MLE-acc] §6.1 of hardware.md)."""
    matmul_half_flops: float
    """GEMM size [FLOP] at which the rate is half of the best-shape rate (Hockney n_1/2)."""
    matmul_half_k: float
    """Reduction length [-] at which a GEMM tile runs at half its main-loop rate."""
    attention_half_kv: float
    """Keys per query tile [-] at which a FlashAttention tile runs at half its main-loop rate."""
    attention_fraction: float
    """FlashAttention forward throughput / dense peak (Dao 2023; Shah et al. 2024)."""
    hbm_fraction: float
    """Achievable / nominal HBM bandwidth for streaming kernels."""
    link_fraction: float
    """Ring collective bus bandwidth / per-direction intra-node link bandwidth (nccl-tests)."""
    kernel_overhead_s: float
    """Launch plus tail time per kernel [s]; dominates tiny models."""
    comm_compute_slowdown: float
    """Fractional compute slowdown while collectives run concurrently (SM/HBM contention)."""
    source: str
    throughput_ratio_p05: float = 0.70
    """5th percentile of measured / predicted tokens/s (cross-validated calibration residuals)."""
    throughput_ratio_p95: float = 1.10
    """95th percentile of measured / predicted tokens/s."""
    calibrated: bool = False
    """True when the interval comes from this GPU type's own calibration."""
    ep_link_fraction: float | None = None
    """Remote-byte rate of the flex (DeepEP/HybridEP) expert dispatch and combine over the
    scale-up link / its per-direction bandwidth (their kernels' measured algorithm bandwidth at
    the SMs recipes give them); None = ``link_fraction``."""
    fused_attention_fraction: float | None = None
    """Attention throughput / dense peak of the fused attention kernel Megatron-LM / NeMo use
    (Transformer Engine's cuDNN fused attention; FlashAttention-3 class on Hopper and later);
    None = ``attention_fraction`` (the PyTorch SDPA FlashAttention-2 kernel)."""
    fit_span: FitSpan | None = None
    """The scale of the runs the fields above were fitted on; None = not fitted (literature
    values) or not recorded."""
    tables: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Fractions split by precision class and kernel stack, their ceilings, and what the
    fields above were fitted on (:func:`fsdpsim.hardware.efficiency.tables_of`; read by
    :func:`fsdpsim.hardware.efficiency.resolve`)."""


@dataclass(frozen=True)
class Link:
    """An intra-node (scale-up) link as one GPU sees it."""

    kind: str
    bandwidth_bytes_per_s: float
    """Per GPU, one direction, aggregated over all its links."""
    latency_s: float
    topology: Topology
    per_peer_bandwidth_bytes_per_s: float | None = None
    """For meshes without a switch: one direction to a single peer."""
    domain_size: int | None = None
    """Most GPUs that share this link domain (e.g. 72 for NVL72); None = the node."""


@dataclass(frozen=True)
class Accelerator:
    """One accelerator as software sees it (an MI250X GCD, one GPU of a GB200 superchip)."""

    id: str
    name: str
    vendor: str
    memory_bytes: float
    """Capacity the framework can allocate from (usable where measured, else the label in GiB)."""
    hbm_bandwidth_bytes_per_s: float
    peak_flops_per_s: Mapping[str, float]
    """Dense (no 2:4 sparsity) peak per precision name."""
    link: Link
    efficiency: Efficiency
    runtime_reserved_bytes: float
    """CUDA/ROCm context, NCCL buffers and other memory outside the allocator's reach."""
    allocator_fraction: float
    """Fraction of the remaining capacity lost to allocator fragmentation and caching."""
    source: str
    retrieved: str
    tdp_w: float | None = None
    year: int | None = None
    price_usd: float | None = None
    rent_usd_per_hour: float | None = None
    """Rent per GPU-hour (catalog ``rent_usd_per_hour``), described by ``price_*``."""
    price_kind: str = "estimate"
    price_source: str = ""
    price_retrieved: str = ""
    notes: str = ""
    aliases: tuple[str, ...] = ()
    default_node: str | None = None
    """Id of the catalog node this part usually ships in: its network and NICs per GPU are the
    default when only the GPU is named (:func:`fsdpsim.hardware.system.resolve_system`)."""

    @property
    def price(self) -> Price | None:
        """The rent of one of these GPUs per hour, with its source; None when unknown."""
        if self.rent_usd_per_hour is None:
            return None
        return Price(float(self.rent_usd_per_hour), self.price_kind, self.price_source,
                     self.price_retrieved)

    @property
    def default_precision(self) -> str:
        """The precision a run on this part uses when none is given: its 16-bit format, bf16,
        or fp16 on a part without bf16 (the V100: Volta's tensor cores take fp16 only, NVIDIA
        V100 datasheet), else fp32."""
        return next((p for p in ("bf16", "fp16") if p in self.peak_flops_per_s), "fp32")

    def peak_for(self, precision: str) -> float:
        """Dense peak FLOP/s for ``precision``; a clear error if this part lacks it."""
        value = self.peak_flops_per_s.get(precision)
        if value is None:
            have = ", ".join(sorted(self.peak_flops_per_s))
            raise ConfigError(
                f"precision {precision!r} is not available on {self.id}; it has: {have}"
            )
        return value


@dataclass(frozen=True)
class Network:
    """A scale-out network technology (one NIC)."""

    id: str
    name: str
    kind: str
    nic_bandwidth_bytes_per_s: float
    """Line rate of one NIC, one direction."""
    latency_s: float
    achievable_fraction: float
    """Ring bus bandwidth / line rate for large messages (nccl-tests)."""
    source: str
    retrieved: str
    notes: str = ""
    aliases: tuple[str, ...] = ()
    scale_decay_per_doubling: float = 0.0
    """Share of bus bandwidth lost per doubling of nodes past ``scale_decay_from_nodes``."""
    scale_decay_from_nodes: float = 4.0
    scale_decay_floor: float = 1.0
    """The least share of bus bandwidth the decay leaves
    (:func:`fsdpsim.costs.nccl.fabric_factor`)."""
    scale_source: str = ""
    bandwidth_uncertainty: float = 0.1
    """Relative uncertainty of the achievable bus bandwidth at scale (widens the range)."""


@dataclass(frozen=True)
class CollectiveLibrary:
    """A collective library's cost-model constants (NCCL ``src/graph/tuning.cc``).

    ``latency_us[protocol][key]`` with protocols ``ll``, ``ll128``, ``simple`` and keys
    ``ring_base_us, ring_nvlink_hop_us, ring_pci_hop_us, ring_net_hop_us, tree_base_us,
    tree_nvlink_hop_us, tree_pci_hop_us, tree_net_hop_us``; bandwidth refinements as fractions
    of the bus bandwidth; LL's bandwidth caps by node count [B/s]."""

    id: str
    name: str
    library: str
    version: str
    latency_us: Mapping[str, Mapping[str, float]]
    net_overhead_s: float
    ll_multi_node_hop_factor: float
    ll_bandwidth_fraction: float
    ll128_bandwidth_fraction: float
    tree_bandwidth_fraction: float
    ll_max_bytes_per_s: tuple[float, float, float]
    """LL bus bandwidth cap on 1 node, 2 nodes, more nodes [B/s]."""
    ll128_channel_bytes_per_s: float
    """LL128 ring bandwidth cap per channel across nodes [B/s] (one channel per GPU's NICs)."""
    tree_channel_bytes_per_s: float
    """Tree all-reduce bandwidth cap per channel across nodes [B/s]."""
    pat: bool
    source: str
    retrieved: str
    notes: str = ""
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Node:
    """A server: accelerators, the links between them and its NICs."""

    id: str
    name: str
    accelerator: Accelerator
    gpus_per_node: int
    nics_per_node: float
    network: Network
    link: Link
    """The intra-node link (the accelerator's unless the node overrides it)."""
    source: str
    retrieved: str
    power_kw: float | None = None
    price_usd: float | None = None
    rent_usd_per_node_hour: float | None = None
    """Rent of the whole node (a cloud instance) per hour, as providers list it."""
    price_kind: str = "estimate"
    price_source: str = ""
    price_retrieved: str = ""
    notes: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def price(self) -> Price | None:
        """Rent per GPU-hour of this node (its hourly rent / its GPUs); None when unknown."""
        if self.rent_usd_per_node_hour is None:
            return None
        return Price(float(self.rent_usd_per_node_hour) / self.gpus_per_node, self.price_kind,
                     self.price_source, self.price_retrieved)

    @property
    def inter_node_bandwidth_bytes_per_s_per_gpu(self) -> float:
        """Line rate of the node's NICs shared by its GPUs, one direction, per GPU."""
        return self.nics_per_node * self.network.nic_bandwidth_bytes_per_s / self.gpus_per_node

    @property
    def inter_node_gbit_per_s_per_gpu(self) -> float:
        return self.inter_node_bandwidth_bytes_per_s_per_gpu / GBIT_PER_S_BYTES_PER_S


@dataclass(frozen=True)
class Cluster:
    """A named installation: a node type times a node count."""

    id: str
    name: str
    node: Node
    num_nodes: int | None
    topology: str
    source: str
    retrieved: str
    oversubscription: float = 1.0
    pod_gpus: int | None = None
    """GPUs in one non-blocking pod; ``oversubscription`` applies between pods."""
    notes: str = ""
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class System:
    """What a prediction runs on: an accelerator type, node shape and network, resolved.

    This is the one hardware object the prediction layer reads; it is built from a catalog
    accelerator, node or cluster plus user overrides (``--gpus-per-node``,
    ``--inter-node-gbps-per-gpu``).
    """

    accelerator: Accelerator
    gpus_per_node: int
    link: Link
    inter_node_bandwidth_bytes_per_s_per_gpu: float
    """Line rate per GPU, one direction (NICs per node × rate / GPUs per node)."""
    inter_node_latency_s: float
    inter_node_fraction: float
    label: str = ""
    power_cap_w: float | None = None
    """Board power limit below TDP (``nvidia-smi -pl``); None = run at TDP."""
    compute_clock_ratio: float = 1.0
    """Sustained compute clock relative to TDP operation (from the power cap) [-]."""
    network: Network | None = None
    """The scale-out network (its decay with scale and uncertainty); None = no decay."""
    oversubscription: float = 1.0
    """Uplink oversubscription between non-blocking pods (a cluster's), 1 = none [-]."""
    pod_gpus: int | None = None
    """GPUs per non-blocking pod (a cluster's); None = one non-blocking fabric."""
    placement: str = "packed"
    """packed (the job's nodes contiguous, rail-aligned) or fragmented (scattered)."""
    collectives: Mapping[str, CollectiveLibrary] = field(
        default_factory=lambda: MappingProxyType({}))
    """The catalog's collective libraries by id (a framework profile picks its release)."""
    extra: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    price: Price | None = None
    """Rent per GPU-hour: the node's (a cloud instance) when named, else the accelerator's."""
    measured_busbw: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    """Measured bus bandwidths that replace the modelled ones [B/s], by
    :data:`fsdpsim.hardware.system.BUSBW_COLUMNS` name (``--busbw-*-gbs``); empty: modelled."""
