"""The training configuration: batch geometry, recompute, precision, optimizer and the kernel
options of a step (what :func:`fsdpsim.drivers.predict.predict` trains with a plan of
:mod:`fsdpsim.plan.parallel`), with its validation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fsdpsim.util.errors import ConfigError

Recompute = Literal["none", "selective", "full", "op-selective"]
#: Activation recompute: none, ``selective`` (the attention core, Korthikanti et al. 2022 §5),
#: ``full`` (every layer from its input), ``op-selective`` (torchtitan's op-level selective
#: checkpointing: :mod:`fsdpsim.costs.activations` [5]).
RECOMPUTES = ("none", "selective", "full", "op-selective")
#: What ``auto`` recompute tries (predict, sweep; search the same three): op-selective is asked
#: for, or a torchtitan configuration says it (``selective_ac_option = "op"``).
AUTO_RECOMPUTES = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp16", "fp8", "fp8-block", "mxfp8", "nvfp4", "fp32")
#: Formats whose linear-layer GEMMs run on the low-precision tensor cores while attention,
#: norms, the embedding, the LM head and the gathered weights stay 16-bit (Transformer Engine
#: ``fp8_autocast`` recipes: per-tensor FP8, MXFP8 and NVFP4 block scaling).
LOW_PRECISION = ("fp8", "fp8-block", "mxfp8", "nvfp4")
OPTIMIZERS = ("adamw", "sgd")
#: Expert-parallel token dispatchers (TrainingConfig.moe_dispatcher).
MOE_DISPATCHERS = ("alltoall", "deepep")
#: What a training step replays from CUDA graphs (TrainingConfig.cuda_graphs), by code.
CUDA_GRAPHS = ("none", "partial", "full")
#: Megatron-Core's per-module recompute (``recompute_modules`` with selective granularity) that
#: fsdpsim models: the MLA query/key/value up projections, the MLP of dense (non-MoE) layers,
#: the routed experts' activation function.
RECOMPUTE_MODULES = ("mla_up_proj", "mlp", "moe_act")


#: The mixture-of-experts settings of a :class:`TrainingConfig`, each with the one value a
#: dense model accepts (its default: dropless, balanced-routing floor, 16-bit all-to-all).
MOE_KNOBS = {"moe_capacity_factor": None, "moe_imbalance": None, "moe_fp8_dispatch": False,
             "moe_dispatcher": "alltoall"}


#: Tokens per step of the default global batch: about 4M, Llama 3 405B's first pre-training
#: stage (arXiv 2407.21783 §3.4.1: 4M tokens of 4,096-token sequences) [-].
DEFAULT_BATCH_TOKENS = 4 * 2**20
#: The rule of :func:`default_global_batch`, as every command's notes state it.
DEFAULT_BATCH_RULE = ("the largest power of two sequences of at most about 4M tokens "
                      "(1,024 at seq 4,096), rounded to the nearest multiple of the "
                      "data-parallel degree where that does not divide it")


def default_global_batch(seq_len, dp=1, tokens: int = DEFAULT_BATCH_TOKENS):
    """The default global batch [sequences] of every command (predict, sweep, search, compare):
    the largest power of two not above ``tokens`` / ``seq_len`` (rounded), at least 1 (4,096-token
    sequences: 1,024), moved to the nearest multiple of the data-parallel degree ``dp`` (ties
    up, at least ``dp``) where ``dp`` does not divide it. ``seq_len`` and ``dp`` may be numpy
    arrays (one batch per element). Llama 3's 4M tokens per step (arXiv 2407.21783 §3.4.1)."""
    import numpy as np

    seq = np.asarray(seq_len, dtype=np.int64)
    per_step = np.maximum(np.rint(tokens / seq).astype(np.int64), 1)
    base = np.left_shift(1, np.floor(np.log2(per_step)).astype(np.int64))
    d = np.maximum(np.asarray(dp, dtype=np.int64), 1)
    batch = np.maximum((base + d // 2) // d, 1) * d
    batch = np.where(base % d == 0, base, batch)
    return int(batch) if batch.ndim == 0 else batch


def check_recompute_layers(layers: int | None, stage_layers: int, model: str) -> None:
    """The rule on a recomputed-layer count: it counts the layers of one pipeline stage
    (Megatron-LM's ``--recompute-num-layers``; the busiest middle rank's,
    :meth:`fsdpsim.plan.parallel.ParallelPlan.stage_layers`), so at most ``stage_layers``; a
    :class:`ConfigError` naming the count, the stage and what is accepted otherwise. ``predict``,
    ``sweep`` and the scalar reference all apply it."""
    if layers is not None and layers > stage_layers:
        raise ConfigError(f"recompute_layers {layers} is above the {stage_layers} layers of a "
                          f"pipeline stage of {model} under this plan; accepted: 0 to "
                          f"{stage_layers}")


def check_recompute_layers_beside(layers: int | None, recomputes) -> None:
    """A recomputed-layer count needs a recompute mode that recomputes: refused beside
    ``none`` alone (``recomputes``: the modes a run may take; None = auto, which counts the
    layers of its selective and full candidates); ``predict``, ``sweep`` and ``search``."""
    if layers is not None and recomputes is not None and tuple(recomputes) == ("none",):
        raise ConfigError(f"--recompute-layers {layers} beside --recompute none: no layer "
                          "recomputes; accepted: --recompute selective, full, op-selective or "
                          "auto beside it")


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} {value!r} is not accepted; accepted: {', '.join(choices)}")


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
    """Gradient reduce-scatter dtype; None = fp32 (PyTorch FSDP MixedPrecisionPolicy as torchtitan
    sets it)."""
    optimizer: str = "adamw"
    flash_attention: bool = True
    """Fused causal attention (FlashAttention / SDPA); False = eager softmax attention."""
    fused_loss: bool = False
    """Fused cross-entropy that writes the gradient in place of the logits (flash-attn, Liger);
    False = PyTorch ``F.cross_entropy`` on upcast fp32 logits."""
    dropout: bool = False
    """Dropout on the attention probabilities and the residual branches (Megatron GPT's 0.1;
    Llama-style recipes use none): its element-wise traffic and saved masks."""
    recompute_layers: int | None = None
    """Layers of each pipeline stage that apply ``recompute`` (the first K; Megatron
    ``--recompute-num-layers`` with the block method); None = every layer."""
    moe_capacity_factor: float | None = None
    """Token dropping: each expert takes at most this many times its mean share of the routed
    tokens, padded to that capacity (GShard / Switch Transformer; Megatron
    ``--moe-expert-capacity-factor`` with ``--moe-pad-expert-input-to-capacity``); None =
    dropless [-]."""
    moe_imbalance: float | None = None
    """Dropless routing: the busiest expert-parallel rank's routed tokens over the mean (>= 1);
    None = the statistical floor of balanced top-k routing
    (:func:`fsdpsim.costs.moe.default_imbalance`) [-]."""
    moe_fp8_dispatch: bool = False
    """Send the dispatch all-to-alls in FP8 with 1x128 block scales (DeepSeek-V3 §3.3.2,
    DeepEP); the combines stay in the 16-bit type."""
    moe_dispatcher: str = "alltoall"
    """How routed tokens cross nodes: ``alltoall`` (NCCL all-to-all, every routed copy to its
    expert's rank) or ``deepep`` (DeepEP / HybridEP, Megatron's ``flex`` dispatcher: once per
    destination node, then over NVLink; :func:`fsdpsim.costs.moe.node_dedup_factor`)."""
    fp8_attention: bool = False
    """Run attention in FP8 too (Transformer Engine ``fp8_dot_product_attention``, cuDNN FP8
    fused attention); only with a low-precision format. Default: attention in the 16-bit type."""
    recompute_modules: tuple[str, ...] = ()
    """Megatron-Core's per-module recompute (:data:`RECOMPUTE_MODULES`; ``recompute_modules``
    with ``recompute_granularity = "selective"``, megatron/core/transformer): ``mla_up_proj``
    reruns the MLA query and key/value up projections in backward and frees Q, K and V after
    the attention core (multi_latent_attention.py, CheckpointWithoutOutput); ``mlp`` reruns the
    MLP of the dense layers only (transformer_layer.py: not for MoE layers) and frees its
    internals; ``moe_act`` reruns the experts' activation and frees its output (moe/experts.py).
    Applies beside ``recompute`` none or selective (full recomputes everything already)."""
    fp8_lm_head: bool = False
    """Run the LM head's GEMMs (the output projection, and the MTP modules' shared one) in the
    low-precision format too (Megatron-Core ``fp8_output_proj``, MXFP8 only, Megatron-LM
    3f6a2ed844 of 2026-05-31); only with a low-precision format. Default: the 16-bit type, as
    Megatron-Core runs its ``output_layer`` (a ``tensor_parallel.ColumnParallelLinear``,
    outside Transformer Engine's FP8 autocast) and torchtitan's FP8 recipes (``output`` in the
    converter's ``filter_fqns``)."""

    bf16_layers: int | None = None
    """Transformer layers kept in BF16 under a low-precision format (Megatron
    ``first_last_layers_bf16`` with ``num_layers_at_start_in_bf16`` +
    ``num_layers_at_end_in_bf16``): their linear layers run at the 16-bit peak. None: the
    format's recipe default, 15 % of the layers for NVFP4 (NVIDIA's NVFP4 pretraining recipe,
    arXiv 2509.25149 §4), none for the FP8 formats (Megatron-Bridge's performance configs keep
    none under any format: ``first_last_layers_bf16 = False``)."""

    cuda_graphs: str = "none"
    """What the step replays from captured CUDA graphs, so the host does not issue it op by op
    (:data:`CUDA_GRAPHS`): ``none`` (eager: every op costs the catalog's host time per op,
    ``kernel_overhead_us``); ``partial`` (each layer's own kernels captured, as Megatron-Core's
    ``cuda_graph_impl = "transformer_engine"`` with the scopes attn, mlp, moe_router and
    moe_preprocess; a MoE layer's routed experts stay eager, their token counts change every
    step); ``full`` (the whole iteration, Megatron-Core's ``cuda_graph_impl =
    "full_iteration"``, which needs sync-free experts: no host time at all)."""

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
        _choice("moe_dispatcher", self.moe_dispatcher, MOE_DISPATCHERS)
        _choice("cuda_graphs", self.cuda_graphs, CUDA_GRAPHS)
        modules = self.recompute_modules
        if isinstance(modules, str):
            modules = tuple(m for m in modules.replace(" ", "").split(",") if m)
        modules = tuple(modules)
        bad = [m for m in modules if m not in RECOMPUTE_MODULES]
        if bad:
            raise ConfigError(f"recompute_modules {', '.join(map(repr, bad))} not accepted; "
                              f"accepted: {', '.join(RECOMPUTE_MODULES)} (comma-separated)")
        object.__setattr__(self, "recompute_modules",
                           tuple(m for m in RECOMPUTE_MODULES if m in modules))
        if self.recompute_modules and self.recompute == "op-selective":
            raise ConfigError("recompute_modules (Megatron's per-module recompute) does not "
                              "combine with recompute op-selective (torchtitan's op-level "
                              "policy); accepted: recompute none or selective with them")
        for name in ("fp8_attention", "fp8_lm_head"):
            if getattr(self, name) and self.precision not in LOW_PRECISION:
                raise ConfigError(f"{name} needs a low-precision format "
                                  f"({', '.join(LOW_PRECISION)}); precision is "
                                  f"{self.precision}")
        for name in ("recompute_layers", "bf16_layers"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 0):
                raise ConfigError(f"{name} must be a whole number >= 0, got {value!r}")
        if self.bf16_layers is not None and self.precision not in LOW_PRECISION:
            raise ConfigError(f"bf16_layers needs a low-precision format "
                              f"({', '.join(LOW_PRECISION)}); precision is {self.precision}")
        for name, low, high in (("moe_capacity_factor", 0.01, 1000.0),
                                ("moe_imbalance", 1.0, 1000.0)):
            value = getattr(self, name)
            if value is None:
                continue
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not low <= float(value) <= high):
                raise ConfigError(f"{name} {value!r} is not accepted; accepted: a number from "
                                  f"{low:g} to {high:g}, or none")
            object.__setattr__(self, name, float(value))

    def check_model(self, *, is_moe: bool) -> None:
        """A clear error for mixture-of-experts settings (:data:`MOE_KNOBS`) given for a
        dense model, which has no experts to apply them to (as ``ep > 1`` is refused:
        :meth:`fsdpsim.plan.parallel.ParallelPlan.check_model`)."""
        given = [f"--{name.replace('_', '-')}" + ("" if value is True else f" {value:g}"
                                                    if isinstance(value, float) else f" {value}")
                 for name, dense in MOE_KNOBS.items()
                 if (value := getattr(self, name)) != dense]
        if given and not is_moe:
            raise ConfigError(f"{' and '.join(given)} needs a mixture-of-experts model (this "
                              "one is dense); accepted: none of them on a dense model")

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
