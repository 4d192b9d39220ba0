"""The parallel plan and the training configuration, with their validation.

A plan places ``num_gpus`` GPUs (``gpus_per_node`` per node) on the product of parallel
degrees ``dp_replicate × dp_shard × tp × pp × cp``. Today fsdpsim models the data-parallel
dimensions (DDP, ZeRO-1/2/3 = FSDP, HSDP); ``tp``, ``pp`` and ``cp`` are part of the plan so the
cost functions and the search can grow into them, and are rejected with a clear message until
their cost models land.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fsdpsim.errors import ConfigError

Sharding = Literal["full", "grad_op", "optimizer", "none", "hybrid"]
Recompute = Literal["none", "selective", "full"]
SHARDINGS = ("full", "grad_op", "optimizer", "none", "hybrid")
RECOMPUTES = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp16", "fp8", "fp32")
OPTIMIZERS = ("adamw", "sgd")
GRAD_SYNCS = ("every", "last")
#: Strategies that shard parameters and gradients: the accumulation knobs (keep_gathered,
#: grad_sync) mean something for these only.
SHARDED = ("full", "grad_op", "hybrid")
SHARDING_HELP = ("full = FULL_SHARD/ZeRO-3, grad_op = SHARD_GRAD_OP/ZeRO-2, optimizer = ZeRO-1, "
                 "none = NO_SHARD/DDP, hybrid = HYBRID_SHARD/HSDP")


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} {value!r} is not accepted; accepted: {', '.join(choices)}")


@dataclass(frozen=True)
class ParallelPlan:
    """How the GPUs are used.

    ``shard_group_size`` only matters for ``hybrid`` (default: one node). For the other
    strategies the data-parallel group is the whole world (``none`` replicates, the ZeRO
    stages shard over it).
    """

    num_gpus: int
    """GPUs in the job [-]."""
    gpus_per_node: int
    """GPUs that share a scale-up link domain (NVLink) and a node's NICs [-]."""
    sharding: Sharding = "full"
    """full (ZeRO-3), grad_op (ZeRO-2), optimizer (ZeRO-1), none (DDP), hybrid (HSDP)."""
    shard_group_size: int | None = None
    """HSDP shard-group size; None = gpus_per_node (capped at the world)."""
    reshard_after_forward: bool = True
    """Free gathered parameters after forward and gather them again in backward (ZeRO-3)."""
    keep_gathered: bool = False
    """Keep every unit's gathered parameters for the whole step: gathered once in the first
    micro-batch's forward, never resharded until the last backward (FSDP2
    ``reshard_after_forward=False`` + ``set_reshard_after_backward(False)``); costs the full
    unsharded parameters in memory. Sharded-parameter strategies only."""
    grad_sync: str = "every"
    """"every": reduce-scatter gradients in every micro-batch's backward; "last": only in the
    last one, accumulating unsharded gradients until then (FSDP1 ``no_sync``, FSDP2
    ``set_requires_gradient_sync(False)``). Sharded-gradient strategies only (DDP and ZeRO-1
    reduce once per step already)."""
    tp: int = 1
    """Tensor-parallel degree (reserved: must be 1 today)."""
    pp: int = 1
    """Pipeline-parallel degree (reserved: must be 1 today)."""
    cp: int = 1
    """Context-parallel degree (reserved: must be 1 today)."""

    def __post_init__(self) -> None:
        _choice("sharding", self.sharding, SHARDINGS)
        for name in ("num_gpus", "gpus_per_node", "tp", "pp", "cp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        for name in ("tp", "pp", "cp"):
            if getattr(self, name) != 1:
                raise ConfigError(f"{name}={getattr(self, name)} is not supported yet: fsdpsim models "
                                  f"data parallelism (FSDP/ZeRO/DDP/HSDP) today; use {name}=1")
        if self.num_gpus > self.gpus_per_node and self.num_gpus % self.gpus_per_node:
            raise ConfigError(f"num_gpus({self.num_gpus}) is not a multiple of "
                              f"gpus_per_node({self.gpus_per_node}); use whole nodes")
        if self.num_gpus < self.gpus_per_node and self.gpus_per_node % self.num_gpus:
            raise ConfigError(f"num_gpus({self.num_gpus}) on one node must divide "
                              f"gpus_per_node({self.gpus_per_node})")
        dp = self.dp
        if self.sharding == "hybrid" and dp % self.dp_shard:
            raise ConfigError(f"shard_group_size({self.dp_shard}) must divide the data-parallel "
                              f"degree ({dp}); accepted: a divisor of {dp}")
        if self.dp_replicate * self.dp_shard * self.tp * self.pp * self.cp != self.num_gpus:
            raise ConfigError(f"dp_replicate({self.dp_replicate}) * dp_shard({self.dp_shard}) * "
                              f"tp({self.tp}) * pp({self.pp}) * cp({self.cp}) != "
                              f"world_size({self.num_gpus}); shard_group_size must divide {dp}")
        _choice("grad_sync", self.grad_sync, GRAD_SYNCS)
        if self.keep_gathered:  # kept gathered for the step: nothing is resharded after forward
            object.__setattr__(self, "reshard_after_forward", False)
        if self.keep_gathered and self.sharding not in SHARDED:
            raise ConfigError(f"keep_gathered applies to sharded parameters (sharding full, "
                              f"hybrid or grad_op); sharding {self.sharding!r} keeps them whole")
        if self.grad_sync == "last" and self.sharding not in SHARDED:
            raise ConfigError(f"grad_sync 'last' applies to sharding full, hybrid or grad_op; "
                              f"sharding {self.sharding!r} already reduces once per step")
        if self.sharding != "hybrid" and self.shard_group_size not in (None, dp):
            raise ConfigError(f"shard_group_size={self.shard_group_size} only applies to "
                              f"sharding 'hybrid' (got sharding {self.sharding!r})")

    @property
    def dp(self) -> int:
        """Data-parallel degree: replicas × shards [-]."""
        return self.num_gpus // (self.tp * self.pp * self.cp)

    @property
    def dp_shard(self) -> int:
        """GPUs one parameter/gradient/optimizer state is sharded over [-]."""
        if self.sharding == "none":
            return 1
        if self.sharding == "hybrid":
            size = self.shard_group_size or min(self.gpus_per_node, self.dp)
            return size
        return self.dp

    @property
    def dp_replicate(self) -> int:
        """Replicas of each shard [-]."""
        if self.dp % self.dp_shard:
            return 0  # caught by the degree check in __post_init__
        return self.dp // self.dp_shard

    @property
    def num_nodes(self) -> int:
        return max(1, self.num_gpus // self.gpus_per_node)


@dataclass(frozen=True)
class TrainingConfig:
    """What one step trains: batch geometry, recompute, precision, optimizer."""

    seq_len: int
    """Tokens per sequence [-]."""
    micro_batch: int | None = None
    """Sequences per GPU per forward/backward; None = auto (fastest that fits)."""
    global_batch: int | None = None
    """Sequences per optimizer step over all GPUs; None = micro_batch × data-parallel degree."""
    recompute: Recompute | None = None
    """Activation recompute; None = auto (fastest that fits)."""
    precision: str = "bf16"
    """Compute precision: selects the dense peak and the gathered-parameter bytes."""
    reduce_dtype: str | None = None
    """Gradient reduce-scatter dtype; None = fp32 (PyTorch FSDP MixedPrecisionPolicy as torchtitan sets it)."""
    optimizer: str = "adamw"
    flash_attention: bool = True
    """Fused causal attention (FlashAttention / SDPA); False = eager softmax attention."""
    fused_loss: bool = False
    """Fused cross-entropy that writes the gradient in place of the logits (flash-attn, Liger);
    False = PyTorch ``F.cross_entropy`` on upcast fp32 logits."""

    def __post_init__(self) -> None:
        if not isinstance(self.seq_len, int) or self.seq_len < 1:
            raise ConfigError(f"seq_len must be a positive integer, got {self.seq_len!r}")
        for name in ("micro_batch", "global_batch"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name} must be a positive integer or auto, got {value!r}")
        if self.recompute is not None:
            _choice("recompute", self.recompute, RECOMPUTES)
        _choice("precision", self.precision, PRECISIONS)
        if self.reduce_dtype is not None:
            _choice("reduce_dtype", self.reduce_dtype, ("fp32", "bf16", "fp16"))
        _choice("optimizer", self.optimizer, OPTIMIZERS)

    def grad_accum(self, dp: int, micro_batch: int) -> int:
        """Micro-batches per step; a clear error if the batch does not split evenly."""
        if self.global_batch is None:
            return 1
        if self.global_batch % dp:
            raise ConfigError(f"global_batch({self.global_batch}) is not divisible by the "
                              f"data-parallel degree ({dp})")
        per_gpu = self.global_batch // dp
        if per_gpu % micro_batch:
            raise ConfigError(f"global_batch({self.global_batch}) / dp({dp}) = {per_gpu} sequences "
                              f"per GPU does not split into micro-batches of {micro_batch}")
        return per_gpu // micro_batch
