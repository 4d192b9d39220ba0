"""The grid of a sweep: option values (from the command line or a TOML grid file) → a :class:`Grid`.

Every grid option takes a list: comma-separated text (``"h100,b200"``), a TOML list, or a
number. Counts (``num-gpus``, ``seq-len``, ``micro-batch``, ``global-batch``,
``gpus-per-node``) also take a range ``A..B``: A, every power of two strictly between, and B
(``8..4096`` → 8, 16, ..., 4096). Model sizes take ``A..B`` as a 1-2-5 series (``1b..1t`` → 1b,
2b, 5b, ..., 500b, 1t; see :mod:`fsdpsim.model.ladder`).

Hardware is the union of the ``gpu`` and ``cluster`` lists, each crossed with the
``gpus-per-node``, ``network`` and ``inter-node-gbps-per-gpu`` lists (default: ``h100``).

The knobs ``sharding``, ``micro-batch`` and ``recompute`` also take ``auto``: the knob is left
free, every candidate is evaluated and each point keeps the fastest that fits (the rule of
``fsdpsim predict``). ``best = true`` leaves every knob that is not given free.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from fsdpsim.hardware.catalog import Catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.files import read_toml
from fsdpsim.drivers.sweep.values import (knob_counts, moe_number, one_choice, one_count,
                                 parse_choices, parse_counts, parse_prices, parse_sizes, price_of,
                                 read_flag, split_values)
from fsdpsim.hardware.spec import Price, System
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.frameworks import FRAMEWORK_NAMES, canonical, plan_defaults
from fsdpsim.plan import knobs as declared  # (build_grid's ``knobs`` are its free ones)
from fsdpsim.plan.knobs import KNOBS, Knob, kernel_default, knob_default, sweep_switches
from fsdpsim.plan.parallel import (LOW_PRECISION, PP_SCHEDULES, PRECISIONS,
                                   RECOMPUTES, SHARDINGS, ZERO_STAGES)
from fsdpsim.util.numbers import read_number
from fsdpsim.drivers.procurement import RunAssumptions, read_run_options, resolve_price
from fsdpsim.hardware.system import cluster_gpus, resolve_system
from fsdpsim.plan.training import (DEFAULT_BATCH_TOKENS, check_recompute_layers_beside,
                                    default_global_batch)
from fsdpsim.util.units import GBIT_PER_S_BYTES_PER_S

#: The keys a grid file accepts beside the kernel knobs' (:func:`grid_keys`).
_KEYS = ("model", "model-sizes", "gpu", "cluster", "gpus-per-node", "network",
         "inter-node-gbps-per-gpu", "power-cap-w", "placement", "num-gpus", "seq-len",
         "micro-batch", "global-batch", "sharding", "recompute", "precision", "best", "price",
         "pue", "tokens", "gpu-mtbf-hours", "checkpoint-gb-per-s", "restart-min", "ceilings",
         "grad-sync", "keep-params-gathered", "shard-group-size", "tp", "pp", "cp", "vpp",
         "pp-schedule", "recompute-layers", "ep", "etp", "moe-capacity-factor",
         "moe-imbalance", "free-batch")


def grid_keys() -> tuple[str, ...]:
    """The keys a grid file accepts (the ``fsdpsim sweep`` option names; ``_`` may replace
    ``-``): the fixed ones, then each plan switch's and kernel knob's as declared
    (:func:`sweep_switches`, :data:`fsdpsim.plan.knobs.SWEEP_KERNEL_KNOBS`), ``framework``,
    ``zero`` and ``optimizer``."""
    return (*_KEYS, *(declared.KNOBS[k].option[2:] for k in (*sweep_switches(),
                                                             *declared.SWEEP_KERNEL_KNOBS)),
            "framework", "zero", "optimizer")


#: :func:`grid_keys` of the declared knobs.
GRID_KEYS = grid_keys()
#: The kernel knobs sweep applies to the grid's low-precision entries only and refuses on a
#: grid without one: they name a low-precision kernel (TrainingConfig refuses them at 16 bits),
#: and a grid crosses 16-bit and low-precision entries with one value for the whole grid.
LOW_PRECISION_KNOBS = ("fp8_attention", "fp8_lm_head")
#: Values used for options given neither on the command line nor in the grid file.
DEFAULTS = {"num-gpus": "8", "seq-len": "4096", "precision": "bf16", "sharding": "full",
            "micro-batch": "auto", "recompute": "auto"}
DEFAULT_MODEL = "llama3-8b"
DEFAULT_GPU = "h100"


@dataclass(frozen=True)
class Hardware:
    """One hardware choice of the grid: a resolved system and where it came from."""

    system: System
    gpu: str
    """Accelerator id."""
    cluster: str
    """Node or cluster id, "" when built from ``--gpu``."""
    network: str
    max_gpus: int | None
    """GPUs in the named cluster; None for a GPU or node (no limit)."""

    @property
    def power_cap_w(self) -> float:
        """Board power limit, NaN when the GPU runs at its TDP."""
        cap = self.system.power_cap_w
        return float("nan") if cap is None else float(cap)

    @property
    def inter_node_gbps_per_gpu(self) -> float:
        return self.system.inter_node_bandwidth_bytes_per_s_per_gpu / GBIT_PER_S_BYTES_PER_S


@dataclass(frozen=True)
class Grid:
    """Every axis of a sweep, resolved. A knob set to None is free (``auto``)."""

    models: tuple[ModelSpec, ...]
    hardware: tuple[Hardware, ...]
    precisions: tuple[str, ...]
    num_gpus: tuple[int, ...]
    seq_lens: tuple[int, ...]
    global_batches: tuple[int | None, ...]
    shardings: tuple[str, ...] | None
    micro_batches: tuple[int, ...] | None
    recomputes: tuple[str, ...] | None
    price_overrides: Mapping[str, float] = field(default_factory=dict)
    """Rent per GPU-hour by accelerator id that the user gave (``--price``); the others come
    from the catalog (:func:`fsdpsim.drivers.procurement.resolve_price`)."""
    tdp_w: Mapping[str, float] = field(default_factory=dict)
    """Board power by accelerator id (catalog)."""
    run: RunAssumptions = field(default_factory=RunAssumptions)
    precision_given: bool = True
    """False when ``--precision`` was not given: each system then runs its GPU's own default
    (:attr:`fsdpsim.hardware.spec.Accelerator.default_precision`: bf16, fp16 on a V100), as
    ``predict`` does, and ``precisions`` holds one placeholder entry."""
    """Tokens to train, PUE, failure rate, checkpoint bandwidth and restart time."""
    grad_syncs: tuple[str, ...] = ("every",)
    """Gradient sync with accumulation ("every", "last"), for the sharded strategies; one
    block of rows per value (:func:`fsdpsim.drivers.sweep.run.iter_sweep` sweeps each in turn)."""
    keep_gathered: bool = False
    """Keep parameters gathered for the step, for the sharded-parameter strategies."""
    shard_group_size: int | None = None
    """GPUs per HSDP shard group (the hybrid strategy); None = one scale-up domain's worth."""
    ceilings: bool = True
    """Solve the largest micro-batch and sequence length that fit for every row."""
    layouts: tuple[tuple[int, int, int], ...] = ((1, 1, 1),)
    """Model-parallel degrees (tp, pp, cp): the product of the --tp, --pp and --cp lists."""
    vpp: int = 1
    """Virtual stages per pipeline rank (layouts with pp > 1)."""
    pp_schedule: str | None = None
    """Pipeline schedule of layouts with pp > 1; None = interleaved when vpp > 1, else 1f1b."""
    switches: Mapping[str, Any] = field(default_factory=dict)
    """The plan switches of every point (:func:`sweep_switches`) as ParallelPlan values: as
    given, else what predict takes without them (None: the plan decides)."""
    recompute_layers: int | None = None
    ep: int = 1
    """Expert-parallel degree of the mixture-of-experts models (dense models need 1)."""
    etp: int | None = None
    """Expert tensor-parallel degree; None = each layout's tp."""
    moe_capacity_factor: float | None = None
    """Token dropping with this capacity factor; None = dropless."""
    moe_imbalance: float | None = None
    """Dropless busiest-rank load over the mean; None = the balanced-routing floor."""
    kernel: Mapping[str, Any] = field(default_factory=dict)
    """The kernel knobs of every point (:data:`fsdpsim.plan.knobs.SWEEP_KERNEL_KNOBS`) as
    TrainingConfig values: as given, else the framework's default; those of
    :data:`LOW_PRECISION_KNOBS` apply to the low-precision entries only."""
    framework: str = "fsdp2"
    """The framework profile every point runs on (:mod:`fsdpsim.plan.frameworks`); the kernel
    knobs not given take its defaults, as predict's do."""
    optimizer: str = "adamw"
    """The optimizer of every point (TrainingConfig.optimizer)."""
    batch_tokens: int | None = None
    """Without ``global-batch`` or ``free-batch``: the global batch of each row is
    :func:`default_global_batch` of this many tokens at its sequence length and data-parallel
    degree; None = as ``global_batches`` says."""

    @property
    def pue(self) -> float:
        """Power usage effectiveness of the facility [-]."""
        return self.run.pue

    @property
    def train_tokens(self) -> float | None:
        """Tokens of a whole training run, for time/cost/energy to train [-]."""
        return self.run.tokens

    def price(self, hardware: Hardware) -> Price | None:
        """The rent per GPU-hour of one hardware choice (the user's, else the catalog's)."""
        return resolve_price(hardware.system, price_of(self.price_overrides, hardware.gpu))

    def precision_at(self, h: int, p: int) -> str:
        """The precision of system ``h`` at entry ``p`` of the precision axis: the given one,
        or (``--precision`` not given) the system's GPU's default."""
        if self.precision_given:
            return self.precisions[p]
        return self.hardware[h].system.accelerator.default_precision

    @property
    def precision_names(self) -> tuple[str, ...]:
        """:meth:`precision_at` of every system x precision entry, flattened as the sweep's
        system tables are (entry ``h * len(precisions) + p``)."""
        return tuple(self.precision_at(h, p) for h in range(len(self.hardware))
                     for p in range(len(self.precisions)))

    @property
    def axes(self) -> tuple[tuple, ...]:
        """The point axes in row order; a free knob is one placeholder value."""
        return (self.models, self.hardware, self.precisions, self.num_gpus, self.layouts,
                self.seq_lens,
                self.global_batches, self.shardings or ("auto",),
                self.micro_batches or (0,), self.recomputes or ("auto",))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a) for a in self.axes)

    @property
    def n_points(self) -> int:
        """Rows of the sweep: the points of :attr:`shape` for each gradient sync."""
        return math.prod(self.shape) * len(self.grad_syncs)

    @property
    def grad_sync(self) -> str:
        """The one gradient sync of a grid swept as one block (see :attr:`grad_syncs`)."""
        assert len(self.grad_syncs) == 1, "sweep each gradient sync as its own grid"
        return self.grad_syncs[0]

    @property
    def free(self) -> tuple[str, ...]:
        """The knobs left free."""
        return tuple(name for name, axis in (("sharding", self.shardings),
                                             ("micro_batch", self.micro_batches),
                                             ("recompute", self.recomputes)) if axis is None)


# -- reading values -----------------------------------------------------------------------------
def normalise_key(key: str) -> str:
    return str(key).strip().lower().replace("_", "-")


def read_grid_file(path: str | Path) -> dict[str, Any]:
    """The options in a TOML grid file (keys: :data:`GRID_KEYS`)."""
    data = read_toml(path, "grid file")
    out = {}
    for key, value in data.items():
        name = normalise_key(key)
        if name not in grid_keys():
            raise ConfigError(f"grid file {str(path)!r}: unknown key {key!r}; accepted: "
                              f"{', '.join(grid_keys())}")
        out[name] = value
    return out


# -- building the grid --------------------------------------------------------------------------
def _models(options: Mapping[str, Any]) -> tuple[ModelSpec, ...]:
    from fsdpsim.model.presets import get_model

    models: list[ModelSpec] = []
    files: list[str | None] = []  # the config file each model was read from (None: an id)
    if "model" in options:
        for name in split_values(options["model"], "--model"):
            models.append(get_model(name))
            files.append(config_file(name))
    if "model-sizes" in options:
        from fsdpsim.model.ladder import ladder_model

        sizes = parse_sizes(options["model-sizes"])
        models += [ladder_model(n) for n in sizes]
        files += [None] * len(sizes)
    if not models:
        models, files = [get_model(DEFAULT_MODEL)], [None]
    return tuple(_distinct_names(models, files))


def config_file(name: str) -> str | None:
    """The config.json a ``--model`` value reads, resolved; None for a preset or ladder id."""
    from fsdpsim.model.presets import PRESETS, _looks_like_path

    if name.strip().lower() in PRESETS or not _looks_like_path(name):
        return None
    path = Path(name).expanduser()
    path = path / "config.json" if path.is_dir() else path
    return str(path.resolve())


def _distinct_names(models: list[ModelSpec], files: list[str | None]) -> list[ModelSpec]:
    """Models whose names coincide: read from different config files, each is named by its
    path (rows and figures tell them apart); given twice (the same id or file), an error."""
    names = [m.name for m in models]
    seen: dict[tuple[str, str | None], int] = {}
    for i, key in enumerate(zip(names, files)):
        if key in seen:
            raise ConfigError(f"--model: {names[i]} given more than once"
                              + (f" ({files[i]})" if files[i] else ""))
        seen[key] = i
    out = list(models)
    for i, (name, file) in enumerate(zip(names, files)):
        if file is not None and names.count(name) > 1:
            out[i] = replace(models[i], name=f"{name} ({file})")
    return out


def _hardware(catalog: Catalog, options: Mapping[str, Any]) -> tuple[Hardware, ...]:
    sources = ([("gpu", g) for g in split_values(options["gpu"], "--gpu")]
               if "gpu" in options else [])
    if "cluster" in options:
        sources += [("cluster", c) for c in split_values(options["cluster"], "--cluster")]
    if not sources:
        sources = [("gpu", DEFAULT_GPU)]
    per_node = (parse_counts(options["gpus-per-node"], "--gpus-per-node")
                if "gpus-per-node" in options else [None])
    networks = (split_values(options["network"], "--network") if "network" in options else [None])
    bandwidths = ([read_number(v, "--inter-node-gbps-per-gpu",
                               KNOBS["inter_node_gbps_per_gpu"].rule)
                   for v in split_values(options["inter-node-gbps-per-gpu"],
                                         "--inter-node-gbps-per-gpu")]
                  if "inter-node-gbps-per-gpu" in options else [None])
    caps = ([read_number(v, "--power-cap-w", KNOBS["power_cap_w"].rule)
             for v in split_values(options["power-cap-w"], "--power-cap-w")]
            if "power-cap-w" in options else [None])
    placements = (split_values(options["placement"], "--placement") if "placement" in options
                  else ["packed"])
    out = []
    for kind, name in sources:
        for gpn, net, bw, cap, place in itertools.product(per_node, networks, bandwidths, caps,
                                                          placements):
            system = resolve_system(catalog, gpu=name if kind == "gpu" else None,
                                    cluster=name if kind == "cluster" else None,
                                    gpus_per_node=gpn, network=net,
                                    inter_node_gbps_per_gpu=bw, power_cap_w=cap,
                                    placement=place)
            cluster_id, max_gpus = "", None
            if kind == "cluster":
                found, cluster_id = catalog.find(name)
                max_gpus = cluster_gpus(catalog, name, system.gpus_per_node)
            out.append(Hardware(system=system, gpu=system.accelerator.id,
                                cluster=cluster_id, network=system.extra["network"],
                                max_gpus=max_gpus))
    labels = [h.system.label for h in out]
    if len(set(labels)) != len(labels):
        raise ConfigError("the hardware options name the same system more than once: "
                          + "; ".join(sorted({x for x in labels if labels.count(x) > 1})))
    return tuple(out)


def build_grid(catalog: Catalog, options: Mapping[str, Any]) -> Grid:
    """Resolve sweep options (names as in :func:`grid_keys`) into a :class:`Grid`."""
    options = {normalise_key(k): v for k, v in options.items() if v is not None}
    unknown = sorted(set(options) - set(grid_keys()))
    if unknown:
        raise ConfigError(f"unknown sweep option {unknown[0]!r}; accepted: "
                          f"{', '.join(grid_keys())}")
    best = read_flag(options.get("best", False), "--best")
    knobs = {"sharding": _shardings(options), "micro-batch": options.get("micro-batch"),
             "recompute": options.get("recompute")}
    framework = canonical(one_choice(options.get("framework", "fsdp2"), "--framework",
                                     FRAMEWORK_NAMES))
    default = lambda knob: knob_default(framework, knob)  # noqa: E731
    # the framework's data-parallel strategy where none is given, as predict's
    # (fsdpsim.plan.frameworks.plan_defaults: megatron's distributed optimizer is ZeRO-1)
    unset = {**DEFAULTS, "sharding": plan_defaults(framework)[0]["sharding"]}
    for key, value in knobs.items():
        if value is None:
            knobs[key] = "auto" if best else unset[key]
    get = lambda key: options.get(key, DEFAULTS.get(key))  # noqa: E731
    global_batches: list[int | None] = []
    if "global-batch" in options:
        for item in split_values(options["global-batch"], "--global-batch"):
            global_batches += ([None] if item.lower() in ("none", "auto")
                               else parse_counts(item, "--global-batch"))
    free_batch = read_flag(options.get("free-batch", False), "--free-batch")
    if free_batch and global_batches:
        raise ConfigError("give --global-batch or --free-batch, not both: --free-batch lets "
                          "each row run one micro-batch per GPU")
    batch_tokens = None if free_batch or global_batches else DEFAULT_BATCH_TOKENS
    hardware = _hardware(catalog, options)
    prices = parse_prices(options["price"], catalog) if "price" in options else {}
    precisions = parse_choices(get("precision"), "--precision", PRECISIONS)
    grid = Grid(
        models=_models(options),
        hardware=hardware,
        precisions=precisions, precision_given="precision" in options,
        num_gpus=tuple(parse_counts(get("num-gpus"), "--num-gpus")),
        seq_lens=tuple(parse_counts(get("seq-len"), "--seq-len")),
        global_batches=tuple(dict.fromkeys(global_batches)) or (None,),
        shardings=parse_choices(knobs["sharding"], "--sharding", SHARDINGS, allow_auto=True),
        micro_batches=knob_counts(knobs["micro-batch"], "--micro-batch"),
        recomputes=parse_choices(knobs["recompute"], "--recompute", RECOMPUTES, allow_auto=True),
        price_overrides=prices,
        tdp_w={h.gpu: h.system.accelerator.tdp_w for h in hardware if h.system.accelerator.tdp_w},
        run=read_run_options(options),
        ceilings=read_flag(options.get("ceilings", True), "--ceilings"),
        grad_syncs=parse_choices(options.get("grad-sync", "every"), "--grad-sync",
                                 KNOBS["grad_sync"].choices),
        keep_gathered=read_flag(options.get("keep-params-gathered", False),
                            "--keep-params-gathered"),
        shard_group_size=(None if options.get("shard-group-size") is None else
                          one_count(options["shard-group-size"], "--shard-group-size")),
        layouts=tuple(itertools.product(*(parse_counts(options.get(k, "1"), f"--{k}")
                                          for k in ("tp", "pp", "cp")))),
        vpp=one_count(options.get("vpp", 1), "--vpp"),
        pp_schedule=(one_choice(options["pp-schedule"], "--pp-schedule", PP_SCHEDULES)
                     if "pp-schedule" in options else None),
        switches=_switches(options, framework),
        recompute_layers=(None if options.get("recompute-layers") is None else
                          one_count(options["recompute-layers"], "--recompute-layers")),
        ep=one_count(options.get("ep", 1), "--ep"),
        etp=None if options.get("etp") is None else one_count(options["etp"], "--etp"),
        moe_capacity_factor=moe_number(options.get("moe-capacity-factor",
                                                   default("moe_capacity_factor")),
                                        "--moe-capacity-factor"),
        moe_imbalance=moe_number(options.get("moe-imbalance"), "--moe-imbalance"),
        kernel=_kernel_knobs(options, precisions, framework),
        framework=framework,
        optimizer=one_choice(options.get("optimizer", "adamw"), "--optimizer",
                             KNOBS["optimizer"].choices),
        batch_tokens=batch_tokens,
    )
    check_recompute_layers_beside(grid.recompute_layers, grid.recomputes)
    return grid


def _shardings(options: Mapping[str, Any]) -> Any:
    """``--sharding``, or its mesh spelling ``--zero`` (stages 0-3: :data:`ZERO_STAGES`, as
    predict's ``--zero`` without ``--dp-shard``/``--dp-replicate``); not both."""
    if "zero" not in options:
        return options.get("sharding")
    if options.get("sharding") is not None:
        raise ConfigError("give the data-parallel strategy once: --sharding or --zero, not both")
    stages = [read_number(v, "--zero", KNOBS["zero"].rule)
              for v in split_values(options["zero"], "--zero")]
    return [ZERO_STAGES[int(z)] for z in stages]


def _kernel_knobs(options: Mapping[str, Any], precisions, framework: str) -> dict[str, Any]:
    """The grid's kernel knobs (:data:`fsdpsim.plan.knobs.SWEEP_KERNEL_KNOBS`), one value for
    the whole grid, each read by its kind (:func:`_kernel_value`); a knob not given takes what
    predict takes without it under ``framework``
    (:func:`fsdpsim.plan.knobs.kernel_default`). A knob of :data:`LOW_PRECISION_KNOBS` that is
    on needs a low-precision entry: one line if the grid has none."""
    out = {}
    for name in declared.SWEEP_KERNEL_KNOBS:
        knob = declared.KNOBS[name]
        value = options.get(knob.option[2:])
        out[name] = (kernel_default(name, framework, None) if value is None
                     else _kernel_value(knob, value))
        if name in LOW_PRECISION_KNOBS and out[name] and \
                not set(precisions) & set(LOW_PRECISION):
            raise ConfigError(f"{knob.option} needs a low-precision --precision "
                              f"({', '.join(LOW_PRECISION)}); the grid has "
                              f"{', '.join(precisions)}")
    return out


def _switches(options: Mapping[str, Any], framework: str) -> dict[str, Any]:
    """The grid's plan switches (:func:`sweep_switches`), each read by its kind
    (:func:`_kernel_value`); one not given takes what predict takes without it under
    ``framework`` (:func:`fsdpsim.plan.knobs.switch_value`)."""
    out = {}
    for name in sweep_switches():
        value = options.get(declared.KNOBS[name].option[2:])
        out[name] = declared.switch_value(name, None if value is None else
                                          _kernel_value(declared.KNOBS[name], value), framework)
    return out


def _kernel_value(knob: Knob, value: Any) -> Any:
    """One grid-wide value of a kernel knob or plan switch as its TrainingConfig or ParallelPlan
    field takes it: a flag as
    true/false, a choice among its choices, a number by its rule, a text (a list joined with
    commas) as TrainingConfig reads and checks it."""
    from fsdpsim.plan.parallel import TrainingConfig

    if knob.kind == "flag":
        return read_flag(value, knob.option)
    if knob.kind == "choice":
        return one_choice(value, knob.option, knob.choices)
    if knob.kind == "number":
        return knob.value(read_number(value, knob.option, knob.rule))
    text = (",".join(str(v) for v in value) if isinstance(value, (list, tuple))
            else str(value))
    return getattr(TrainingConfig(seq_len=1, **{knob.name: text}), knob.name)


def describe(grid: Grid) -> str:
    """One line: the number of points and the axes that have more than one value."""
    names = ("models", "systems", "precisions", "GPU counts", "tp x pp x cp layouts",
             "sequence lengths",
             "global batches", "shardings", "micro-batches", "recomputes")
    parts = [f"{n} {name}" for n, name in zip((*grid.shape, len(grid.grad_syncs)),
                                              (*names, "gradient syncs")) if n > 1]
    text = f"{grid.n_points:,} points"
    if parts:
        text += f" ({' x '.join(parts)})"
    if grid.free:
        text += f"; free: {', '.join(grid.free)}"
    return text


def format_size(n_params: float) -> str:
    """:func:`fsdpsim.model.ladder.format_size` (imported on use: it needs numpy)."""
    from fsdpsim.model.ladder import format_size as _format_size

    return _format_size(n_params)


__all__ = ["Grid", "Hardware", "GRID_KEYS", "grid_keys", "build_grid", "default_global_batch",
           "DEFAULT_BATCH_TOKENS", "read_grid_file", "parse_counts",
           "parse_prices", "format_size"]
