"""The catalog schema: every accepted key, its type, whether it is required, and its range.

Keys carry datasheet units and direction; :mod:`fsdpsim.hardware.catalog` reads files against these
tables and converts to SI. Ranges are plausibility bounds wide enough for CPU hosts measured by
``fsdpsim calibrate --local`` and for every catalogued accelerator.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

KINDS = ("accelerator", "network", "node", "cluster", "collectives")
#: Tables of the model catalog (fsdpsim.model.catalog), which may share a user catalog folder
#: with hardware entries: the hardware reader skips them.
MODEL_KINDS = ("family", "model")
#: GEMM reduction length at which a tile reaches half its main-loop rate, when an entry does not
#: give one: the prologue/epilogue of a 128x128 tile is worth about 64 k-steps (an estimate to
#: be calibrated per GPU; see fsdpsim.costs.compute.gemm_time_s).
DEFAULT_MATMUL_HALF_K = 64.0
#: Keys per query tile at which a FlashAttention tile reaches half its main-loop rate, when an
#: entry does not give one (an estimate: a 128-key block's prologue/epilogue; calibrated per GPU).
DEFAULT_ATTENTION_HALF_KV = 128.0
#: 5-95 % range of measured / predicted throughput for a GPU type without its own calibration:
#: the A100 cross-validated range (0.87-1.10, README "Accuracy") widened on the low side by the
#: 15-25 % over-prediction that A100-fitted models show on Hopper (validation/README.md).
UNCALIBRATED_INTERVAL = (0.70, 1.10)
ENV_VAR = "FSDPSIM_CATALOG"
#: Kernel stacks of the framework profiles (fsdpsim.hardware.efficiency; repeated there).
KERNEL_STACKS = ("te", "pytorch", "deepspeed", "megatron-lm")
_NUM = (int, float)


@dataclass(frozen=True)
class Field:
    """One accepted key: its type, whether it is required, and its plausible range or choices."""

    types: type | tuple[type, ...]
    required: bool = True
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] | None = None
    unit: str = ""

    def rule(self):
        """The :class:`fsdpsim.util.numbers.Rule` of a numeric key with a range."""
        from fsdpsim.util.numbers import Rule

        return Rule(self.lo, self.hi, whole=self.types is int, unit=self.unit)

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.lo is not None:
            return f"{self.lo:g}..{self.hi:g}{(' ' + self.unit) if self.unit else ''}"
        names = self.types if isinstance(self.types, tuple) else (self.types,)
        return " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in names)


_TYPE_NAMES = {str: "text", int: "integer", float: "number", bool: "true/false", list: "list",
               _dt.date: "date"}

#: Kinds of rent (fsdpsim.hardware.spec.PRICE_KINDS; repeated here: the schema imports nothing).
_PRICE_KINDS = ("on-demand", "estimate")
#: How a rent is described: its kind, the URL it was read from and the date it was read.
_PRICE = {
    "price_kind": Field(str, False, choices=_PRICE_KINDS),
    "price_source": Field(str, False),
    "price_retrieved": Field((str, _dt.date), False),
}

_COMMON = {
    "id": Field(str),
    "name": Field(str),
    "aliases": Field(list, False),
    "source": Field(str),
    "retrieved": Field((str, _dt.date)),
    "notes": Field(str, False),
    "override": Field(bool, False),
}

# Lower bounds admit CPU hosts measured by `fsdpsim calibrate --local` (tens of GFLOP/s,
# tens of GB/s, gloo links below 1 GB/s with ~0.5 ms per step).
_PEAK = {p: Field(_NUM, False, 0.001, 100_000, unit="TFLOP/s")
         for p in ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")}

_LINK = {
    "kind": Field(str),
    "gb_per_s_per_direction": Field(_NUM, True, 0.01, 10_000, unit="GB/s"),
    "per_peer_gb_per_s_per_direction": Field(_NUM, False, 1, 10_000, unit="GB/s"),
    "latency_us": Field(_NUM, True, 0.05, 100_000, unit="us"),
    "topology": Field(str, True, choices=("switch", "mesh", "pcie", "torus", "single")),
    "domain_size": Field(int, False, 1, 100_000),
    "source": Field(str, False),
}

#: The scale of the runs a fitted table's fractions come from (fsdpsim.hardware.spec.FitSpan):
#: GPU count and model parameters of the rows its `fsdpsim calibrate` command selects.
_FIT_SPAN = {
    "fit_gpus_min": Field(int, False, 1, 1_000_000),
    "fit_gpus_max": Field(int, False, 1, 1_000_000),
    "fit_params_min": Field(int, False, 1e6, 1e14),
    "fit_params_max": Field(int, False, 1e6, 1e14),
}

_EFFICIENCY = {
    "matmul_fraction": Field(_NUM, True, 0.05, 1.0),
    "matmul_half_gflop": Field(_NUM, True, 0.0, 1e4, unit="GFLOP"),
    "matmul_half_k": Field(_NUM, False, 0.0, 4096),
    "attention_half_kv": Field(_NUM, False, 0.0, 65536),
    "throughput_ratio_p05": Field(_NUM, False, 0.1, 1.0),
    "throughput_ratio_p95": Field(_NUM, False, 1.0, 10.0),
    "attention_fraction": Field(_NUM, True, 0.05, 1.0),
    "fused_attention_fraction": Field(_NUM, False, 0.05, 1.0),
    "hbm_fraction": Field(_NUM, True, 0.2, 1.0),
    "link_fraction": Field(_NUM, True, 0.2, 1.1),
    "ep_link_fraction": Field(_NUM, False, 0.05, 1.1),
    "kernel_overhead_us": Field(_NUM, True, 0.0, 100, unit="us"),
    "comm_compute_slowdown": Field(_NUM, True, 0.0, 5.0),
    "source": Field(str),
    **_FIT_SPAN,
    # what the fractions above were fitted on (fsdpsim.hardware.efficiency.resolve)
    "stack": Field(str, False, choices=KERNEL_STACKS),
    "precision": Field(str, False, choices=("bf16", "fp8")),
}
#: One kernel stack's fractions for one precision class ([accelerator.efficiency.bf16.te]);
#: fsdpsim.hardware.efficiency.check_tables requires a source and at least one fraction.
_STACK_EFFICIENCY = {
    "matmul_fraction": Field(_NUM, False, 0.05, 1.0),
    "attention_fraction": Field(_NUM, False, 0.05, 1.0),
    "fused_attention_fraction": Field(_NUM, False, 0.05, 1.0),
    "throughput_ratio_p05": Field(_NUM, False, 0.1, 1.0),
    "throughput_ratio_p95": Field(_NUM, False, 1.0, 10.0),
    "source": Field(str, False),
    "scaled_from": Field(str, False),  # the accelerator id whose fit a literature table carries
    **_FIT_SPAN,
}
#: A precision class ([accelerator.efficiency.bf16] / [...fp8]): its measured ceiling and its
#: kernel stacks' tables.
_CLASS_EFFICIENCY = {
    "matmul_ceiling": Field(_NUM, False, 0.05, 1.0),
    "ceiling_source": Field(str, False),
    "fused_attention_ceiling": Field(_NUM, False, 0.05, 1.0),  # fused attention kernel, fwd+bwd
    "attention_ceiling_source": Field(str, False),
    **{stack: _STACK_EFFICIENCY for stack in KERNEL_STACKS},
}
_EFFICIENCY.update({"bf16": _CLASS_EFFICIENCY, "fp8": _CLASS_EFFICIENCY})

SCHEMAS: dict[str, dict[str, Any]] = {
    "accelerator": {
        **_COMMON,
        "vendor": Field(str),
        "memory_gib": Field(_NUM, True, 1, 4096, unit="GiB"),
        "memory_usable_gib": Field(_NUM, False, 1, 4096, unit="GiB"),
        "hbm_bandwidth_tb_per_s": Field(_NUM, True, 0.001, 100, unit="TB/s"),
        "runtime_reserved_gib": Field(_NUM, True, 0.0, 32, unit="GiB"),
        "allocator_fraction": Field(_NUM, True, 0.0, 0.5),
        "tdp_w": Field(_NUM, False, 10, 5000, unit="W"),
        "year": Field(int, False, 2010, 2040),
        # The node this part usually ships in (a [[node]] id whose accelerator is this one): its
        # network and NICs per GPU are the default when only --gpu is named; and why it is the
        # usual one.
        "default_node": Field(str, False),
        "default_node_source": Field(str, False),
        "price_usd": Field(_NUM, False, 100, 10_000_000, unit="USD"),
        "rent_usd_per_hour": Field(_NUM, False, 0.01, 500, unit="USD/h"),
        **_PRICE,
        "peak_dense_tflops": _PEAK,
        "intra_node_link": _LINK,
        "efficiency": _EFFICIENCY,
    },
    "network": {
        **_COMMON,
        "kind": Field(str, True, choices=("infiniband", "roce", "ethernet", "efa", "slingshot",
                                          "tcpx", "ici", "local")),
        "gbit_per_s_per_nic": Field(_NUM, True, 0.01, 10_000, unit="Gb/s"),
        "latency_us": Field(_NUM, True, 0.05, 100_000, unit="us"),
        "achievable_fraction": Field(_NUM, True, 0.1, 1.0),
        "fraction_source": Field(str),
        # Bus bandwidth lost as a job spans more nodes (fsdpsim.costs.nccl.fabric_factor).
        "scale_decay_per_doubling": Field(_NUM, False, 0.0, 0.5),
        "scale_decay_from_nodes": Field(_NUM, False, 1, 1_000_000),
        "scale_decay_floor": Field(_NUM, False, 0.05, 1.0),
        "scale_source": Field(str, False),
        # Relative uncertainty of the achievable bandwidth at scale (widens the 90 % range).
        "bandwidth_uncertainty": Field(_NUM, False, 0.0, 0.9),
    },
    "node": {
        **_COMMON,
        "accelerator": Field(str),
        # a scale-up domain: up to a TPU pod's ICI torus (v5p: 8,960 chips)
        "gpus_per_node": Field(int, True, 1, 16_384),
        "nics_per_node": Field(_NUM, True, 0.25, 16_384),
        "network": Field(str),
        "intra_node_link": {k: Field(f.types, False, f.lo, f.hi, f.choices, f.unit)
                            for k, f in _LINK.items()},
        "power_kw": Field(_NUM, False, 0.1, 1000, unit="kW"),
        "price_usd": Field(_NUM, False, 100, 100_000_000, unit="USD"),
        "rent_usd_per_node_hour": Field(_NUM, False, 0.01, 50_000, unit="USD/h"),
        **_PRICE,
    },
    "cluster": {
        **_COMMON,
        "node": Field(str),
        "num_nodes": Field(int, False, 1, 1_000_000),
        "topology": Field(str),
        "oversubscription": Field(_NUM, False, 1.0, 64),
        "pod_gpus": Field(int, False, 1, 10_000_000),
    },
    "collectives": {
        **_COMMON,
        "library": Field(str, True, choices=("nccl", "rccl")),
        "version": Field(str),
        "net_overhead_us": Field(_NUM, True, 0.0, 1000, unit="us"),
        "ll_multi_node_hop_factor": Field(_NUM, True, 1.0, 10.0),
        "ll_bandwidth_fraction": Field(_NUM, True, 0.01, 1.0),
        "ll128_bandwidth_fraction": Field(_NUM, True, 0.01, 1.0),
        "tree_bandwidth_fraction": Field(_NUM, True, 0.01, 1.0),
        "ll_max_gb_per_s_one_node": Field(_NUM, True, 0.1, 10_000, unit="GB/s"),
        "ll_max_gb_per_s_two_nodes": Field(_NUM, True, 0.1, 10_000, unit="GB/s"),
        "ll_max_gb_per_s_more_nodes": Field(_NUM, True, 0.1, 10_000, unit="GB/s"),
        "ll128_channel_gb_per_s": Field(_NUM, True, 0.1, 10_000, unit="GB/s"),
        "tree_channel_gb_per_s": Field(_NUM, True, 0.1, 10_000, unit="GB/s"),
        "pat": Field(bool, True),
        **{proto: {key: Field(_NUM, True, 0.0, 10_000, unit="us")
                   for key in ("ring_base_us", "ring_nvlink_hop_us", "ring_pci_hop_us",
                               "ring_net_hop_us", "tree_base_us", "tree_nvlink_hop_us",
                               "tree_pci_hop_us", "tree_net_hop_us")}
           for proto in ("ll", "ll128", "simple")},
    },
}
