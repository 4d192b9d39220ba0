"""The parallel plan and its validation (the training's: :mod:`fsdpsim.plan.training`).

A plan is a device mesh, as torchtitan's ``ParallelDims`` is: ``num_gpus`` GPUs (``gpus_per_node``
per scale-up domain) laid out as ``pp × dp_replicate × dp_shard × cp × tp`` in
:data:`DEFAULT_MESH_ORDER` (outermost first, TP innermost so its group stays on NVLink), plus a
ZeRO stage for the data dimension (``sharding``), a pipeline schedule, the sequence- and
context-parallel variants, and the accumulation knobs. :mod:`fsdpsim.plan.layout` places each mesh
dimension's groups on the network tiers.

The data-parallel group of the parameters and gradients is ``dp_shard × cp`` (context-parallel
ranks hold the same weights, so FSDP shards over them too: torchtitan's ``dp_shard_cp`` mesh;
Megatron's distributed optimizer reduces over ``data_parallel_group_with_cp``), replicated
``dp_replicate`` times (HSDP).

Expert parallelism follows Megatron-Core's expert mesh ("parallel folding", ``RankGenerator``
with order ``tp-ep-dp-pp``): the ``tp × cp × dp`` ranks of one pipeline stage are split again,
for the routed experts only, into ``etp × ep × expert-dp`` (expert tensor parallelism
innermost, then expert parallelism, then the expert data-parallel group that holds the same
experts). ``etp`` defaults to ``tp``, so EP folds over the data-parallel × context ranks, as in
torchtitan (``ep`` borrows from ``dp_shard × cp``); with ``etp = 1`` it may take the TP ranks
too. :func:`fsdpsim.plan.layout.expert_layout` places these groups on the tiers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.frameworks import (DEFAULT_MESH_ORDER, FRAMEWORK_NAMES, PROFILES,  # noqa: F401
                                     canonical, profile)
# the training configuration and its choices (re-exported for importers of this module)
from fsdpsim.plan.training import (CUDA_GRAPHS, LOW_PRECISION, MOE_DISPATCHERS,  # noqa: F401
                              OPTIMIZERS, PRECISIONS, RECOMPUTE_MODULES, RECOMPUTES, Recompute,
                              TrainingConfig, _choice)

Sharding = Literal["full", "grad_op", "optimizer", "none", "hybrid"]
SHARDINGS = ("full", "grad_op", "optimizer", "none", "hybrid")
GRAD_SYNCS = ("every", "last")
#: Strategies that shard parameters and gradients: the accumulation knobs (keep_gathered,
#: grad_sync) mean something for these only.
SHARDED = ("full", "grad_op", "hybrid")
SHARDING_HELP = ("full = FULL_SHARD/ZeRO-3, grad_op = SHARD_GRAD_OP/ZeRO-2, optimizer = ZeRO-1, "
                 "none = NO_SHARD/DDP, hybrid = HYBRID_SHARD/HSDP")
#: ZeRO stage -> the FSDP-style spelling (``--zero`` and ``--sharding`` mean the same plans).
ZERO_STAGES = {0: "none", 1: "optimizer", 2: "grad_op", 3: "full"}
#: The frameworks whose ZeRO-1 shards within groups (for messages): InternEvo's ``zero1``.
_ZERO1_GROUP_FRAMEWORKS = tuple(p.name for p in PROFILES.values() if p.zero1_groups)
PP_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")
#: Training frameworks whose implementations differ in ways the model sees (recipe, collective
#: granularity and overlap): :mod:`fsdpsim.plan.frameworks` (``torch`` = ``fsdp2``).
FRAMEWORKS = FRAMEWORK_NAMES
CP_KINDS = ("ring", "all2all")


def _positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class ParallelPlan:
    """How the GPUs are used: the degrees of the device mesh, its order, and the strategies.

    ``shard_group_size`` only matters for ``hybrid`` (default: one scale-up domain's worth of
    data-parallel ranks) and, under the ``internevo`` framework, for ``optimizer`` (its
    ``zero1`` groups; default the whole data-parallel group). For the other strategies the
    data-parallel group is the whole ``dp × cp`` (``none`` replicates, the ZeRO stages shard
    over it).
    """

    num_gpus: int
    """GPUs in the job [-]."""
    gpus_per_node: int
    """GPUs of the job in one scale-up (NVLink) domain: a node of 8, or the GPUs used in one
    NVL72 rack [-]."""
    sharding: Sharding = "full"
    """full (ZeRO-3), grad_op (ZeRO-2), optimizer (ZeRO-1), none (DDP), hybrid (HSDP)."""
    shard_group_size: int | None = None
    """HSDP ``dp_shard`` degree; None = the data-parallel ranks of one scale-up domain. With
    ``optimizer`` under ``internevo``: the ranks its optimizer states are sharded over (InternEvo
    ``zero1``); None = all data-parallel ranks."""
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
    """Tensor-parallel degree (Megatron column/row split of attention and MLP) [-]."""
    pp: int = 1
    """Pipeline-parallel degree (stages) [-]."""
    cp: int = 1
    """Context-parallel degree (the sequence split over ranks) [-]."""
    vpp: int = 1
    """Virtual pipeline stages (model chunks) per pipeline rank; > 1 means interleaved 1F1B.
    Only with pp > 1 (with pp = 1 it is 1) [-]."""
    pp_schedule: str | None = None
    """gpipe, 1f1b, interleaved or zb-h1; None = interleaved when vpp > 1, else 1f1b. Only with
    pp > 1 (with pp = 1 it is 1f1b)."""
    sequence_parallel: bool | None = None
    """Split norms, dropout and residual activations over the TP group (Korthikanti et al.
    2022); None = on when tp > 1."""
    cp_kind: str = "ring"
    """ring (KV blocks passed around the CP ring) or all2all (Ulysses: heads <-> sequence)."""
    tp_overlap: bool = False
    """Overlap TP collectives with the GEMMs beside them (async TP, Megatron tp-comm-overlap)."""
    mesh_order: tuple[str, ...] = DEFAULT_MESH_ORDER
    """The mesh dimensions from outermost to innermost (a permutation of DEFAULT_MESH_ORDER)."""
    pp_first_layers: int | None = None
    """Layers on the first pipeline stage (Megatron --decoder-first-pipeline-num-layers);
    None = an even split."""
    pp_last_layers: int | None = None
    """Layers on the last pipeline stage; None = an even split."""
    pp_layers: tuple[int, ...] | None = None
    """Layers on each pipeline rank, first to last (all its virtual stages together; Megatron's
    ``--pipeline-model-parallel-layout``, torchtitan's ``module_fqns_per_model_part``); None =
    the framework's split (:func:`fsdpsim.plan.pipeline_split.default_split`)."""
    framework: str = "fsdp2"
    """The framework profile (:mod:`fsdpsim.plan.frameworks`): recipe, collectives and overlap."""
    ep: int = 1
    """Expert-parallel degree: each MoE layer's routed experts are divided over ``ep`` ranks,
    which exchange tokens with all-to-alls (module docstring: the expert mesh) [-]."""
    etp: int | None = None
    """Expert tensor-parallel degree: each expert's GEMMs split over ``etp`` ranks (Megatron
    ``--expert-tensor-parallel-size``); None = ``tp`` (Megatron-Core's default) [-]."""
    ep_overlap: bool = False
    """Overlap the expert-parallel all-to-alls with the compute of another micro-batch
    (DeepSeek's DualPipe / DeepEP, Megatron-Core ``--overlap-moe-expert-parallel-comm``)."""
    etp_defaulted: bool = field(default=False, init=False, compare=False, repr=False)
    """Whether ``etp`` was not given and ``tp`` did not fit, so it became 1."""

    def __post_init__(self) -> None:
        _choice("sharding", self.sharding, SHARDINGS)
        if self.etp is None:
            object.__setattr__(self, "etp", self._default_etp())
        for name in ("num_gpus", "gpus_per_node", "tp", "pp", "cp", "vpp", "ep", "etp"):
            _positive_int(name, getattr(self, name))
        if self.shard_group_size is not None:
            _positive_int("shard_group_size", self.shard_group_size)
        if self.pp == 1 and (self.vpp > 1 or self.pp_schedule not in (None, "1f1b")):
            # Without a pipeline there is nothing to interleave or schedule (as sweep's
            # layouts with pp = 1): one chunk, plain 1F1B.
            if self.pp_schedule is not None:
                _choice("pp_schedule", self.pp_schedule, PP_SCHEDULES)
            object.__setattr__(self, "vpp", 1)
            object.__setattr__(self, "pp_schedule", "1f1b")
        if self.pp_schedule is None:
            object.__setattr__(self, "pp_schedule", "interleaved" if self.vpp > 1 else "1f1b")
        _choice("pp_schedule", self.pp_schedule, PP_SCHEDULES)
        if self.sequence_parallel is None:
            object.__setattr__(self, "sequence_parallel", self.tp > 1)
        _choice("cp_kind", self.cp_kind, CP_KINDS)
        object.__setattr__(self, "framework", canonical(self.framework))
        order = tuple(self.mesh_order)
        object.__setattr__(self, "mesh_order", order)
        if sorted(order) != sorted(DEFAULT_MESH_ORDER):
            raise ConfigError(f"mesh_order {','.join(order)!r} is not accepted; accepted: a "
                              f"permutation of {','.join(DEFAULT_MESH_ORDER)}")
        if self.vpp > 1 and self.pp_schedule != "interleaved":
            raise ConfigError(f"vpp({self.vpp}) needs pp_schedule 'interleaved' (got "
                              f"{self.pp_schedule!r})")
        if self.pp_schedule == "interleaved" and self.pp > 1 and self.vpp < 2:
            raise ConfigError("pp_schedule 'interleaved' needs vpp >= 2 model chunks per stage")
        if self.sequence_parallel and self.tp == 1:
            object.__setattr__(self, "sequence_parallel", False)
        if self.tp_overlap and self.tp == 1:
            raise ConfigError("tp_overlap needs tp > 1")
        for name in ("pp_first_layers", "pp_last_layers"):
            value = getattr(self, name)
            if value is not None:
                _positive_int(name, value)
                if self.pp < 2:
                    raise ConfigError(f"{name}={value} needs pp >= 2")
        self._check_pp_layers()
        model_parallel = self.tp * self.pp * self.cp
        if self.num_gpus % model_parallel:
            raise ConfigError(f"tp({self.tp}) * pp({self.pp}) * cp({self.cp}) = {model_parallel} "
                              f"does not divide num_gpus({self.num_gpus}); accepted: degrees "
                              f"whose product divides {self.num_gpus}")
        if (n := self.num_gpus) > (per := self.gpus_per_node) and n % per:
            raise ConfigError(f"num_gpus({n}) is not a multiple of gpus_per_node({per}); accepted:"
                              f" whole nodes, e.g. {n - n % per:,} or {n - n % per + per:,} GPUs")
        if n < per and per % n:
            raise ConfigError(f"num_gpus({n}) on one node must divide gpus_per_node({per}); "
                              f"accepted: a divisor of {per}")
        dp = self.dp
        if self.sharding in ("hybrid", "optimizer") and dp % self.dp_shard:
            raise ConfigError(f"shard_group_size({self.dp_shard}) must divide the data-parallel "
                              f"degree ({dp}); accepted: a divisor of {dp}")
        if self.dp_replicate * self.dp_shard * self.cp * self.tp * self.pp != self.num_gpus:
            raise ConfigError(f"dp_replicate({self.dp_replicate}) * dp_shard({self.dp_shard}) * "
                              f"cp({self.cp}) * tp({self.tp}) * pp({self.pp}) != "
                              f"num_gpus({self.num_gpus}); shard_group_size must divide {dp}")
        _choice("grad_sync", self.grad_sync, GRAD_SYNCS)
        self._check_experts()
        if self.keep_gathered:  # kept gathered for the step: nothing is resharded after forward
            object.__setattr__(self, "reshard_after_forward", False)
        if self.keep_gathered and self.sharding not in SHARDED:
            raise ConfigError(f"keep_gathered applies to sharded parameters (sharding full, "
                              f"hybrid or grad_op); sharding {self.sharding!r} keeps them whole")
        if self.grad_sync == "last" and self.sharding not in SHARDED:
            raise ConfigError(f"grad_sync 'last' applies to sharding full, hybrid or grad_op; "
                              f"sharding {self.sharding!r} already reduces once per step")
        if self.shard_group_size not in (None, dp) and not self.grouped_shards:
            raise ConfigError(f"shard_group_size={self.shard_group_size} only applies to "
                              f"sharding 'hybrid', or 'optimizer' with framework "
                              f"{', '.join(map(repr, _ZERO1_GROUP_FRAMEWORKS))} (its zero1 "
                              f"groups); got sharding {self.sharding!r}, framework "
                              f"{self.framework!r}")

    def _default_etp(self) -> int:
        """``tp`` (Megatron-Core's default) where ``tp × ep`` divides a pipeline stage's
        ``tp × cp × dp`` ranks, else 1, as Megatron-Bridge's MoE recipes set it
        (``expert_tensor_parallel_size = 1``); the plan's other checks name bad degrees."""
        if not all(isinstance(v, int) and v >= 1 for v in (self.tp, self.pp, self.cp, self.ep,
                                                            self.num_gpus)):
            return self.tp
        stage = self.num_gpus // self.pp if self.num_gpus % self.pp == 0 else 0
        if self.ep > 1 and stage and stage % (self.tp * self.ep) and stage % self.ep == 0:
            object.__setattr__(self, "etp_defaulted", True)
            return 1
        return self.tp

    def _check_pp_layers(self) -> None:
        """``pp_layers``: one whole count >= 1 per pipeline rank, not with the end counts."""
        if self.pp_layers is None:
            return
        from fsdpsim.plan.pipeline_split import parse_layers

        counts = parse_layers(self.pp_layers)
        object.__setattr__(self, "pp_layers", counts)
        if len(counts) != self.pp or self.pp < 2:
            raise ConfigError(f"pp_layers {','.join(map(str, counts))} gives {len(counts)} "
                              f"stage(s) for pp({self.pp}); accepted: one layer count per "
                              f"pipeline rank ({self.pp}), with pp >= 2")
        if self.pp_first_layers is not None or self.pp_last_layers is not None:
            raise ConfigError("give the pipeline split once: pp_layers or "
                              "pp_first_layers/pp_last_layers, not both")

    def _check_experts(self) -> None:
        """The expert mesh: ``etp × ep`` divides one pipeline stage's ``tp × cp × dp`` ranks,
        and with HSDP the expert data-parallel group splits into the replicas."""
        if self.ep_overlap and self.ep == 1:
            raise ConfigError("ep_overlap needs ep > 1 (there is no expert all-to-all to hide)")
        stage = self.tp * self.cp * self.dp
        if stage % (self.etp * self.ep):
            raise ConfigError(
                f"etp({self.etp}) * ep({self.ep}) = {self.etp * self.ep} does not divide "
                f"tp({self.tp}) * cp({self.cp}) * dp({self.dp}) = {stage}: the routed experts "
                f"re-split one pipeline stage's ranks as etp x ep x expert-dp (Megatron-Core's "
                f"expert mesh); accepted: etp * ep dividing {stage}")
        if self.sharding == "hybrid" and self.expert_dp % self.dp_replicate:
            raise ConfigError(
                f"expert-dp({self.expert_dp}) = tp({self.tp}) * cp({self.cp}) * dp({self.dp}) / "
                f"(etp({self.etp}) * ep({self.ep})) is not divisible by dp_replicate"
                f"({self.dp_replicate}): HSDP replicates the expert shards as it does the "
                f"others; accepted: ep * etp dividing {stage // self.dp_replicate}")

    @property
    def expert_dp(self) -> int:
        """Ranks that hold the same routed experts: ``tp × cp × dp / (etp × ep)`` [-]."""
        return max(1, self.tp * self.cp * self.dp // (self.etp * self.ep))

    @property
    def expert_shard_group(self) -> int:
        """GPUs the routed experts' states are sharded over: the expert data-parallel group,
        within one replica for HSDP, 1 for DDP [-]."""
        if self.sharding == "none":
            return 1
        if self.sharding == "hybrid":
            return max(1, self.expert_dp // self.dp_replicate)
        return self.expert_dp

    @classmethod
    def from_degrees(cls, *, num_gpus: int, gpus_per_node: int, zero: int = 3,
                     dp_shard: int | None = None, dp_replicate: int | None = None,
                     **options) -> "ParallelPlan":
        """A plan from mesh degrees and a ZeRO stage (the ``--zero/--dp-shard/--dp-replicate``
        spelling): ZeRO-3 with ``dp_replicate > 1`` is HSDP; DDP replicates over everything;
        ZeRO-1/2 shard over the whole data-parallel group. Each given degree is checked."""
        if zero not in ZERO_STAGES:
            raise ConfigError(f"zero {zero!r} is not accepted; accepted: 0, 1, 2, 3")
        model_parallel = (options.get("tp", 1) * options.get("pp", 1) * options.get("cp", 1))
        dp = num_gpus // model_parallel if num_gpus % model_parallel == 0 else None
        sharding = ZERO_STAGES[zero]
        shard_group = None
        if dp_shard is not None or dp_replicate is not None:
            if dp is None:
                cls(num_gpus=num_gpus, gpus_per_node=gpus_per_node, **options)  # names degrees
            shard = dp_shard if dp_shard is not None else dp // dp_replicate
            repl = dp_replicate if dp_replicate is not None else (dp // dp_shard if dp_shard else 0)
            if shard * repl != dp or shard < 1:
                raise ConfigError(
                    f"dp_replicate({repl}) * dp_shard({shard}) * cp({options.get('cp', 1)}) * "
                    f"tp({options.get('tp', 1)}) * pp({options.get('pp', 1)}) != "
                    f"num_gpus({num_gpus}); the data-parallel degree is {dp}")
            if zero == 0 and shard > 1:
                raise ConfigError(f"dp_shard({shard}) > 1 needs zero 1, 2 or 3 (zero 0 is DDP: "
                                  "it replicates)")
            groups = profile(options.get("framework", "fsdp2")).zero1_groups
            if zero == 1 and repl > 1 and groups:  # its zero1 groups
                shard_group = shard
            elif zero in (1, 2) and repl > 1:
                raise ConfigError(f"dp_replicate({repl}) > 1 with zero {zero} is not modelled; "
                                  "accepted: zero 3 (HSDP), zero 0 (DDP), or zero 1 with "
                                  f"framework {', '.join(_ZERO1_GROUP_FRAMEWORKS)} (its zero1 "
                                  "groups)")
            if zero == 3 and repl > 1:
                sharding, shard_group = "hybrid", shard
        return cls(num_gpus=num_gpus, gpus_per_node=gpus_per_node, sharding=sharding,
                   shard_group_size=shard_group, **options)

    @property
    def dp(self) -> int:
        """Data-parallel degree: replicas × shards, excluding CP [-]."""
        return self.num_gpus // (self.tp * self.pp * self.cp)

    @property
    def grouped_shards(self) -> bool:
        """Whether the shard group may be smaller than the data-parallel group: HSDP, or
        ZeRO-1 in groups under a framework that has them (InternEvo's ``zero1``:
        :attr:`fsdpsim.plan.frameworks.Framework.zero1_groups`)."""
        return self.sharding == "hybrid" or (self.sharding == "optimizer"
                                             and profile(self.framework).zero1_groups)

    @property
    def dp_shard(self) -> int:
        """Data-parallel ranks one parameter/gradient/optimizer state is sharded over,
        excluding CP (FSDP shards over ``dp_shard × cp``: :attr:`shard_group`) [-]."""
        if self.sharding == "none":
            return 1
        if self.sharding == "hybrid":
            if self.shard_group_size:
                return self.shard_group_size
            per_domain = max(1, self.gpus_per_node // (self.tp * self.cp))
            return min(per_domain, self.dp)
        if self.grouped_shards and self.shard_group_size:
            return self.shard_group_size
        return self.dp

    @property
    def dp_replicate(self) -> int:
        """Replicas of each shard [-]."""
        if self.dp % self.dp_shard:
            return 0  # caught by the degree check in __post_init__
        return self.dp // self.dp_shard

    @property
    def shard_group(self) -> int:
        """GPUs the parameters, gradients and optimizer states are sharded over: dp_shard × cp
        (1 for DDP) [-]."""
        return 1 if self.sharding == "none" else self.dp_shard * self.cp

    @property
    def grad_group(self) -> int:
        """GPUs that hold the same weights and average their gradients: dp × cp [-]."""
        return self.dp * self.cp

    @property
    def degrees(self) -> dict[str, int]:
        """Every mesh degree by name (their product is num_gpus)."""
        return {"pp": self.pp, "dp_replicate": self.dp_replicate, "dp_shard": self.dp_shard,
                "cp": self.cp, "tp": self.tp}

    @property
    def num_nodes(self) -> int:
        return max(1, self.num_gpus // self.gpus_per_node)

    def layer_split(self, n_layers: int):
        """Layers on every pipeline rank and the rule that placed them
        (:class:`fsdpsim.plan.pipeline_split.Split`): the given ``pp_layers``, Megatron's end-stage
        counts, or the framework's default split; a clear error when they do not add up."""
        from fsdpsim.plan.pipeline_split import Split, default_split

        if self.pp_layers is not None:
            if sum(self.pp_layers) != n_layers:
                raise ConfigError(f"pp_layers {','.join(map(str, self.pp_layers))} sum to "
                                  f"{sum(self.pp_layers)}, not n_layers({n_layers}); accepted: "
                                  f"{self.pp} counts >= 1 that sum to {n_layers}")
            return Split(self.pp_layers, "given")
        if self.pp > 1 and self.pp_first_layers is None and self.pp_last_layers is None:
            return default_split(n_layers, self.pp, self.vpp, self.framework)
        first, middle, last = self._end_stage_layers(n_layers)
        return Split((first,) + (middle,) * (self.pp - 2) + (last,) if self.pp > 1
                     else (n_layers,), "given" if self.pp > 1 else "even")

    def stage_layers(self, n_layers: int) -> tuple[int, int, int]:
        """Layers on the (first, middle, last) pipeline stages as the engine composes them:
        the middle count is the busiest middle rank's (it sets the steady state of the
        schedule); with two stages it is the lighter end's, so that both ends' surplus is
        timed. A clear error when the layers do not split."""
        if (self.pp > 1 and self.pp_first_layers is None and self.pp_last_layers is None) \
                or self.pp_layers is not None:
            counts = self.layer_split(n_layers).counts
            if len(set(counts)) == 1:
                return counts[0], counts[0], counts[0]
            middle = max(counts[1:-1]) if self.pp > 2 else min(counts)
            return counts[0], middle, counts[-1]
        return self._end_stage_layers(n_layers)

    def busiest_middle_rank(self, n_layers: int) -> int:
        """The first middle pipeline rank holding the most layers (the one whose memory can
        bind among the middle ranks: most layers, most micro-batches in flight); 1 with fewer
        than three stages [-]."""
        if self.pp < 3:
            return 1
        middle = self.layer_split(n_layers).counts[1:-1]
        return 1 + middle.index(max(middle))

    def _end_stage_layers(self, n_layers: int) -> tuple[int, int, int]:
        """(first, middle, last) with Megatron's end-stage counts (or none): every evenly
        split stage's layers divide into ``vpp`` chunks (Megatron's rule)."""
        if self.pp == 1:
            if n_layers % self.vpp:
                raise ConfigError(f"n_layers({n_layers}) is not divisible by vpp({self.vpp})")
            return n_layers, n_layers, n_layers
        first, last = self.pp_first_layers, self.pp_last_layers
        rest_stages = self.pp - (first is not None) - (last is not None)
        rest = n_layers - (first or 0) - (last or 0)
        if rest_stages == 0:
            if rest != 0:
                raise ConfigError(f"pp_first_layers({first}) + pp_last_layers({last}) != "
                                  f"n_layers({n_layers}) with pp(2)")
            middle = first
        elif rest < rest_stages or rest % rest_stages:
            raise ConfigError(
                f"n_layers({n_layers}) does not split over pp({self.pp})"
                + (f" with pp_first_layers({first})" if first else "")
                + (f" and pp_last_layers({last})" if last else "")
                + f": {rest} layers left for {rest_stages} stages")
        else:
            middle = rest // rest_stages
        first = middle if first is None else first
        last = middle if last is None else last
        # Stages given their own count may hold uneven chunks (Megatron's account-for-embedding
        # and -loss splits); the evenly split ones divide into vpp chunks.
        for name, count in (("first", first if self.pp_first_layers is None else middle),
                            ("middle", middle),
                            ("last", last if self.pp_last_layers is None else middle)):
            if count % self.vpp:
                raise ConfigError(f"the {name} pipeline stage's {count} layers are not divisible "
                                  f"by vpp({self.vpp}); accepted: n_layers divisible by "
                                  f"pp({self.pp}) * vpp({self.vpp})")
        return first, middle, last

    def check_model(self, *, n_layers: int, n_heads: int, n_kv_heads: int, seq_len: int,
                    n_experts: int = 0, expert_ffn_size: int = 0) -> None:
        """Degrees the model must divide: heads and KV heads by TP (Megatron splits whole
        heads), layers by PP × vpp, the sequence by 2·CP (ring attention's load-balanced causal
        chunks) or heads by TP·CP (Ulysses all-to-all); the routed experts by EP and each
        expert's width by ETP (Megatron: ``num_moe_experts % expert_model_parallel_size``);
        expert parallelism, its overlap and an expert TP of its own need experts."""
        on = {f"ep({self.ep}) > 1": self.ep > 1, "ep_overlap": self.ep_overlap,
              f"etp({self.etp}) != tp({self.tp})": self.etp != self.tp}
        if n_experts == 0 and any(on.values()):
            raise ConfigError(f"{' and '.join(t for t in on if on[t])} needs a mixture-of-experts "
                              "model (this one is dense); accepted: ep 1, etp = tp, no ep_overlap")
        if n_experts and n_experts % self.ep:
            raise ConfigError(f"n_experts({n_experts}) is not divisible by ep({self.ep}); "
                              f"accepted: ep dividing {n_experts}")
        if n_experts and expert_ffn_size % self.etp:
            raise ConfigError(f"expert width({expert_ffn_size}) is not divisible by "
                              f"etp({self.etp}); accepted: etp dividing {expert_ffn_size}")
        if n_heads % self.tp:
            raise ConfigError(f"n_heads({n_heads}) is not divisible by tp({self.tp}); "
                              f"accepted: tp dividing {n_heads}")
        if n_kv_heads % self.tp:  # Megatron-Core divide(num_query_groups, tp); nanotron asserts
            raise ConfigError(f"n_kv_heads({n_kv_heads}) is not divisible by tp({self.tp}); "
                              f"accepted: tp dividing {n_kv_heads} (each rank whole KV heads)")
        self.stage_layers(n_layers)
        if self.cp > 1 and self.cp_kind == "ring" and seq_len % (2 * self.cp):
            raise ConfigError(f"seq_len({seq_len}) is not divisible by 2 * cp({self.cp}) = "
                              f"{2 * self.cp} (load-balanced causal chunks of ring attention)")
        if self.cp > 1 and self.cp_kind == "all2all" and n_heads % (self.tp * self.cp):
            raise ConfigError(f"n_heads({n_heads}) is not divisible by tp({self.tp}) * "
                              f"cp({self.cp}) (all-to-all context parallelism splits heads)")

    def describe(self) -> str:
        """The plan in one line: ``dp_shard 16 × tp 8 × pp 4 (1f1b, m=32)`` style."""
        parts = []
        if self.dp_replicate > 1:
            parts.append(f"dp_replicate {self.dp_replicate}")
        if self.dp_shard > 1 or self.sharding == "none":
            name = {"none": "ddp", "optimizer": "zero1", "grad_op": "zero2"}.get(self.sharding,
                                                                              "dp_shard")
            parts.append(f"{name} {self.dp if self.sharding == 'none' else self.dp_shard}")
        for name in ("cp", "tp", "pp"):
            if getattr(self, name) > 1:
                parts.append(f"{name} {getattr(self, name)}")
        if self.ep > 1:
            parts.append(f"ep {self.ep}" + (f" (etp {self.etp})" if self.etp != self.tp else ""))
        return " × ".join(parts) or "1 GPU"

