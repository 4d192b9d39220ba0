"""Framework profiles: what each training framework's implementation does that changes time.

A profile is read from the framework's code and documentation (file and version cited), never
fitted to measured rows. It says which mixed-precision recipe the framework uses (the memory
model's ``torch`` or ``megatron`` recipe), which collective library release its runs used
(NCCL's cost-model constants differ between releases: ``[[collectives]]`` in the catalog), how
fine its data-parallel collectives are (one per FSDP unit, or one per parameter), whether those
collectives can overlap compute at all, and per-call host work that grows with the number of
ranks, and its kernel stack (``kernel_stack``: which of the catalog's per-precision GEMM and
attention fractions its runs reach, :mod:`fsdpsim.hardware.efficiency`). ``uncertainty`` is the
relative spread of step time this profile's simplifications leave (it widens the 90 % range,
:func:`fsdpsim.drivers.predict.prediction_interval`).

Profiles (``--framework``; ``torch`` and ``megatron`` are the older spellings):

* ``fsdp2`` (PyTorch ``fully_shard``, torchtitan; torch 2.13
  ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``): one all-gather
  (``all_gather_into_tensor``) and one reduce-scatter per FSDP unit, on their own streams,
  prefetching the next unit (forward) and the previous one (backward), no CPU synchronisation
  (Zhao et al. 2023, arXiv 2304.11277 §3.3; torchtitan docs/fsdp.md).
* ``fsdp1`` (``FullyShardedDataParallel``, torch ``_flat_param.py``): one flat parameter per
  unit, the same collectives and overlap; its rate limiter (at most two all-gathers in flight,
  §3.4.2) bounds memory, not time, at the unit granularity modelled here.
* ``deepspeed-zero3`` (DeepSpeed ≥ 0.6, PR #1453, 2022-01: batched all-gather with
  ``_all_gather_base``, finer-grained synchronisation): gathers batched per prefetch bucket
  (5e7 elements, about one transformer block of a large model) on a side stream, overlapped.
* ``deepspeed-zero3-2021`` (DeepSpeed 0.3-0.5, ``runtime/zero/partition_parameters.py`` @c4f4ef5d,
  2021-04-30): **one all-gather per parameter** (parameters under
  ``stage3_param_persistence_threshold`` = 1e5 elements stay unpartitioned and are not
  gathered), each after ``torch.cuda.synchronize()`` (L798), so no gather overlaps compute
  (DeepSpeed PR #1188: "the async version is not async at all"); list-output
  ``torch.distributed.all_gather`` over ``world_size`` narrow views built in Python, which
  ``ProcessGroupNCCL`` fills with one ``copy_`` per rank; gradients by a per-parameter
  list-input ``reduce_scatter`` (L918-954, one copy per rank to flatten) on the reduction
  stream (overlapped, ``overlap_comm`` = True). NCCL 2.10 (mid-2021). Each per-rank view and
  copy costs one eager op of host time (the catalog's ``kernel_overhead_us``).
* ``megatron`` (Megatron-Core / NeMo / Megatron-Bridge, ``megatron/core/distributed``):
  distributed optimizer (ZeRO-1) with the gradient reduce-scatter overlapped with backward
  (``overlap_grad_reduce``) and the parameter all-gather with the next forward
  (``overlap_param_gather``); bf16 parameters, fp32 main gradients.
* ``internevo`` (InternEvo's hybrid ZeRO, ``internlm/solver/optimizer/hybrid_zero_optim.py``
  ``HybridZeroOptimizer``; its throughput table's runs, ``doc/en/train_performance.md``,
  2023): bf16 parameters and the fp32 master shard as Megatron's recipe; gradients all-reduced
  in the parameters' dtype over the whole data-parallel group in buckets during the last
  backward (``reduce_tensor`` with no destination, ``overlap_sync_grad=True``); the optimizer
  states sharded over the ``zero1`` group (``shard_group_size``; ``-1``: the whole
  data-parallel group), and after the step, behind a device synchronisation, one
  ``dist.broadcast`` per group rank of the shard it owns, all awaited before the next forward
  (``broadcast_params``; ``overlap_sync_param=False`` in ``configs/7B_sft.py``). A broadcast's
  latency grows with the ranks it chains through, so ``zero1=-1`` on 1,024 GPUs makes 1,024
  of them, each paying a 1,023-hop pipeline.
* ``nanotron`` (Hugging Face nanotron v0.5, 2024; ``src/nanotron/helpers.py``
  ``init_optimizer_and_grad_accumulator``, ``optim/gradient_accumulator.py``
  ``get_fp32_accum_hook``, ``optim/zero.py`` ``ZeroDistributedOptimizer._all_gather_params``,
  ``parallel/tensor_parallel/functional.py``): bf16 parameters, gradients accumulated into fp32
  buffers (``FP32GradientAccumulator``, the fp32 master copy beside them: Megatron's memory recipe)
  by one ``add_`` per parameter after every micro-batch's backward (read the bf16 gradient and the
  fp32 buffer, write the buffer: 10 bytes per parameter, ``grad_accum_pass_bytes``); PyTorch DDP's
  buckets (``bucket_cap_mb`` 25, ``trainer.py`` L860-865 and ``config/config.py`` L220 @67c5ebb6; a
  bucket closes at 25 MiB of bf16 gradients or more, torch ``reducer.cpp``
  ``compute_bucket_assignment_by_size``) call a communication hook during the last
  micro-batch's backward, one collective per bucket (``grad_bucket_bytes``;
  ``get_fp32_accum_hook``, ``optim/gradient_accumulator.py`` L322-393 @67c5ebb6, L317-388 in
  v0.5). ZeRO-0 all-reduces the bucket's fp32 buffers (``all_reduce_coalesced``, async, no
  callback), overlapped with that backward. ZeRO-1 reduce-scatters them with
  ``distributed.py`` ``reduce_scatter_coalesced`` (L70-135, v0.5 and @67c5ebb6), which hangs
  ``update_output`` (copy the shards back) on ``work.get_future().then(...)``: ProcessGroupNCCL
  marks the future complete when it enqueues the call, so the callback runs at once, on a pool
  stream made to wait for the NCCL stream's end event (torch ``ivalue::Future::invokeCallback``).
  With ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (the runs' ``run_multinode.sh`` L41 @67c5ebb6) every
  stream feeds one hardware queue, so the backward kernels launched after those copies wait for
  the reduce-scatter: each bucket's reduction runs between the backward's kernels, not beside
  them (``zero1_reduce_overlap`` False). With ZeRO-1 the bf16 parameters are all-gathered after
  the optimizer step, before the next forward, not overlapped. TP in ``REDUCE_SCATTER`` mode
  is sequence parallelism (all-gather before the column linears, reduce-scatter after the row
  linears); its "async" column linear overlaps
  only the local shard's GEMM (1/tp of it) with the all-gather and the row linear's
  reduce-scatter waits for its GEMM, so TP communication is modelled exposed. Attention is
  ``flash_attn`` 2 (not Transformer Engine's fused kernel); no activation recompute by default;
  1F1B pipeline (``PipelineEngine`` ``OneForwardOneBackwardPipelineEngine``).
* ``megatron-2021`` (Megatron-LM v2, 2021, ``megatron/training.py`` ``train_step``): the
  gradient all-reduce of its data-parallel wrapper runs after the whole backward
  (``model.allreduce_gradients()``), not overlapped; NCCL 2.10.

**Defaults of knobs a run leaves unset** (:data:`KNOB_DEFAULTS`; ``predict``/``search``/
``compare`` flags not given, empty cells of a measurement file): a profile's entry, else the
knob's plain value in its declaration (:mod:`fsdpsim.plan.knobs`; the same values: overlap
off, no CUDA graphs, ``alltoall``, 16-bit attention and LM head, no per-module recompute,
dropless, unfused loss, the format's BF16 layers). ``megatron``, read from Megatron-LM @d98e8a64dd
(2026-08-22) and Megatron-Bridge @067f987df (2026-08-22):

* ``ep_overlap`` false: ``ModelParallelConfig.overlap_moe_expert_parallel_comm = False``
  (``megatron/core/model_parallel_config.py``).
* ``cuda_graphs`` none: ``TransformerConfig.cuda_graph_impl = "none"``
  (``megatron/core/transformer/transformer_config.py``).
* ``moe_dispatcher`` alltoall: Megatron-Bridge's MoE bridges set
  ``moe_token_dispatcher_type = "alltoall"`` (``models/deepseek/deepseek_v3_bridge.py``,
  ``glm45_bridge.py`` ...); Megatron-Core's own ``"allgather"`` is not modelled, ``"flex"``
  (DeepEP/HybridEP) is ``deepep``.
* ``fp8_attention``, ``fp8_lm_head`` false: ``fp8_dot_product_attention = False``,
  ``fp8_output_proj = False`` (``transformer_config.py``).
* ``recompute_modules`` none beyond ``recompute``: ``recompute_granularity = None``,
  ``recompute_modules = None`` (``transformer_config.py``); ``recompute`` itself is the run's.
* ``bf16_layers`` 0 under a low-precision format: ``first_last_layers_bf16 = False``
  (``transformer_config.py``; Megatron-Bridge ``training/mixed_precision.py`` and
  ``scripts/performance/utils/precision.py``).
* ``moe_capacity_factor`` none (dropless): ``moe_expert_capacity_factor = None``.
* ``fused_loss`` true: Megatron-Bridge ``GPTModelProvider.cross_entropy_loss_fusion = True``
  (``models/gpt_provider.py``; Megatron-Core's own default is False, NeMo 2.0's GPTConfig
  sets True).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fsdpsim.util.errors import ConfigError, suggest


@dataclass(frozen=True)
class Framework:
    """One framework profile (module docstring)."""

    name: str
    recipe: str
    """Mixed-precision recipe of the memory model: ``torch`` or ``megatron``."""
    collectives: str
    """Catalog id of the collective library release its runs used."""
    per_parameter: bool = False
    """One data-parallel collective per parameter (else one per FSDP unit)."""
    persistence_numel: int = 0
    """Parameters with fewer elements stay unpartitioned and are not gathered."""
    gather_overlap: bool = True
    """All-gathers can run beside compute (no synchronisation before each)."""
    list_collectives: bool = False
    """List-output all-gather / list-input reduce-scatter: one view and one copy per rank."""
    grad_reduce_overlap: bool = True
    """DDP gradient all-reduce overlaps backward (bucketed), else it runs after it."""
    zero1_reduce_overlap: bool = True
    """ZeRO-1 gradient reduce-scatter overlaps backward, else it runs beside none of it."""
    grad_bucket_bytes: float = 0.0
    """Bytes of 16-bit gradients per PyTorch DDP bucket, each bucket one gradient collective
    of DDP or ZeRO-1 (``bucket_cap_mb`` · 2^20; 0: one call per unit)."""
    param_broadcast: bool = False
    """ZeRO-1 parameter sync after the optimizer step as one broadcast per shard owner (else
    one all-gather), waited for before the next forward."""
    grad_all_reduce: bool = False
    """ZeRO-1 gradients all-reduced in the compute dtype over the data-parallel group (else
    reduce-scattered in the reduce dtype); with no reduce dtype given they stay in it
    (:func:`with_defaults`)."""
    zero1_groups: bool = False
    """ZeRO-1's optimizer states may be sharded within groups smaller than the data-parallel
    group (``shard_group_size`` with sharding ``optimizer``)."""
    grad_accum_pass_bytes: float = 0.0
    """Bytes of HBM traffic per parameter and micro-batch to add the 16-bit gradient into an
    fp32 accumulation buffer after the backward (0: accumulated in place, e.g. Megatron's
    fused wgrad accumulation into ``main_grad``)."""
    flat_parameter: bool = False
    """FSDP1's ``FlatParameter``: each unit's parameters flattened into one tensor, padded once
    to a multiple of the shard count (torch ``_flat_param.py`` ``_get_shard`` /
    ``FlatParamHandle``); else FSDP2's padding of every parameter's dim 0
    (:func:`fsdpsim.costs.comm.padded_numel`)."""
    uncertainty: float = 0.0
    """Relative spread of step time this profile leaves [-]."""
    kernel_stack: str = "pytorch"
    """The GEMM and attention kernels its runs use, which pick the catalog's fractions per
    precision (:mod:`fsdpsim.hardware.efficiency`): ``te`` (Transformer Engine GEMMs and cuDNN fused
    attention), ``pytorch`` (torch.matmul / SDPA or flash-attn, eager or torch.compile),
    ``deepspeed``, ``megatron-lm`` (apex and cuBLAS, before Transformer Engine)."""
    source: str = ""
    supports: tuple[tuple[str, tuple], ...] = ()
    """What the framework can run, for ``fsdpsim search``: (plan setting, the values it
    accepts) where it cannot run everything the model can (e.g. no sequence parallelism
    before Megatron-LM v3); the search space keeps to these unless ``--fix`` says otherwise."""


PROFILES: dict[str, Framework] = {p.name: p for p in (
    Framework("fsdp2", "torch", "nccl-2.30",
              source="torch 2.13 torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py",
              # torchtitan's data parallelism: FSDP2 (ZeRO-3), HSDP or DDP, no ZeRO-1/2
              # (torchtitan/distributed/parallel_dims.py: dp_shard, dp_replicate); its
              # activation checkpointing: none, full, or selective per op ("op") or per n-th
              # layer (torchtitan/distributed/activation_checkpoint.py), not Megatron's
              # attention-core selective recompute
              # Its pipeline schedules with one stage per rank: GPipe and 1F1B, with virtual
              # stages Interleaved1F1B (its zero-bubble schedules are looped, not zb-h1:
              # torch.distributed.pipelining schedules); TP always with sequence parallelism
              # (SequenceParallel on the norms, torchtitan/models/llama3/infra/parallelize.py);
              # CP is ring attention (context_parallel_rotate_method allgather/alltoall rotate
              # the ring's keys/values, no head split); expert all-to-alls overlap another
              # micro-batch only in DualPipeV; one mesh order (ParallelDims._build_mesh: pp,
              # dp_replicate, dp_shard, cp, tp). Cross-field rules: plan_refusal.
              supports=(("sharding", ("full", "hybrid", "none")),
                        ("recompute", ("none", "op-selective", "full")),
                        ("pp_schedule", ("gpipe", "1f1b", "interleaved")),
                        ("sequence_parallel", (True,)), ("cp_kind", ("ring",)),
                        ("ep_overlap", (False,)), ("mesh_order", ("default",)),
                        # a partial recompute is every n-th layer of a model chunk
                        # (selective_ac_option = n): a count that divides the stage's layers
                        ("partial_recompute", ("every-nth",)))),
    Framework("fsdp1", "torch", "nccl-2.30", flat_parameter=True, uncertainty=0.05,
              source="torch 2.13 torch/distributed/fsdp/_flat_param.py; arXiv 2304.11277 §3",
              # async TP is DTensor/FSDP2-era (torch 2.5 torch.distributed._symmetric_memory)
              supports=(("tp_overlap", (False,)),)),
    Framework("deepspeed-zero3", "megatron", "nccl-2.30", uncertainty=0.10,
              kernel_stack="deepspeed",
              source="DeepSpeed PR #1453 (4912e0ad, 2022-01-20) batched all-gather",
              # DeepSpeed's sequence parallelism is Ulysses (all-to-all); ZeRO-2/3 do not
              # combine with its pipeline engine (runtime/pipe/engine.py asserts stage < 2)
              supports=(("cp_kind", ("all2all",)), ("tp_overlap", (False,)),
                        ("pp", (1,)))),
    Framework("deepspeed-zero3-2021", "megatron", "nccl-2.10", per_parameter=True,
              persistence_numel=100_000, gather_overlap=False, list_collectives=True,
              uncertainty=0.25, kernel_stack="deepspeed",
              source="DeepSpeed runtime/zero/partition_parameters.py @c4f4ef5d (2021-04-30) "
                     "L603-626, L776-823, L918-954; constants.py; PR #1188",
              # the 2021 ZeRO-3 engine: stage 3 alone, no pipeline, no sequence/context split;
              # Megatron-DeepSpeed's checkpointing recomputes every layer
              supports=(("sharding", ("full",)), ("pp", (1,)), ("cp", (1,)),
                        ("sequence_parallel", (False,)), ("tp_overlap", (False,)),
                        ("ep", (1,)), ("recompute", ("none", "full")),
                        ("partial_recompute", (False,)))),
    Framework("megatron", "megatron", "nccl-2.30", uncertainty=0.05, kernel_stack="te",
              source="Megatron-LM megatron/core/distributed (overlap_grad_reduce, "
                     "overlap_param_gather)",
              # Megatron-LM's schedules (megatron/core/pipeline_parallel/schedules.py): 1F1B,
              # interleaved with virtual stages; its rank order tp-cp-ep-dp-pp
              # (megatron/core/parallel_state.py RankGenerator). Cross-field rules:
              # plan_refusal.
              supports=(("pp_schedule", ("1f1b", "interleaved")),
                        ("mesh_order", ("default",)))),
    Framework("internevo", "megatron", "nccl-2.30", param_broadcast=True,
              grad_all_reduce=True, zero1_groups=True, uncertainty=0.05,
              source="InternLM/InternEvo internlm/solver/optimizer/hybrid_zero_optim.py "
                     "(HybridZeroOptimizer: reduce_tensor, broadcast_params); configs/7B_sft.py "
                     "(overlap_sync_grad=True, overlap_sync_param=False)",
              # hybrid ZeRO-1 (its zero1 groups: shard_group_size); no ring context parallel
              # or TP communication overlap of Megatron's kind
              supports=(("sharding", ("optimizer",)), ("cp", (1,)), ("tp_overlap", (False,)))),
    Framework("nanotron", "megatron", "nccl-2.30",
              grad_accum_pass_bytes=2.0 + 4.0 + 4.0, uncertainty=0.10,
              grad_bucket_bytes=25 * 2**20, zero1_reduce_overlap=False,
              source="huggingface/nanotron v0.5 src/nanotron/helpers.py "
                     "(init_optimizer_and_grad_accumulator), optim/gradient_accumulator.py "
                     "(get_fp32_accum_hook), optim/zero.py (_all_gather_params), "
                     "parallel/tensor_parallel/functional.py (column_linear, row_linear)",
              # DP (ZeRO-0/1), TP in REDUCE_SCATTER mode, 1F1B PP; no context parallelism,
              # no interleaving, no TP overlap beyond the local shard's GEMM
              supports=(("sharding", ("none", "optimizer")), ("cp", (1,)),
                        ("tp_overlap", (False,)), ("pp_schedule", ("1f1b",)), ("ep", (1,)))),
    Framework("megatron-2021", "megatron", "nccl-2.10", grad_reduce_overlap=False,
              uncertainty=0.10, kernel_stack="megatron-lm",
              source="Megatron-LM v2.x megatron/training.py train_step "
                     "(model.allreduce_gradients() after backward)",
              # v2.x: DDP data parallelism (the distributed optimizer and sequence parallelism
              # came with v3.0, 2022), 1F1B or interleaved schedules, no CP, no TP overlap;
              # --checkpoint-activations recomputes every layer (selective recompute and
              # --recompute-num-layers came with v3.0)
              supports=(("sharding", ("none",)), ("sequence_parallel", (False,)),
                        ("tp_overlap", (False,)), ("cp", (1,)), ("ep", (1,)),
                        ("pp_schedule", ("1f1b", "interleaved")),
                        ("recompute", ("none", "full")), ("partial_recompute", (False,)))),
)}

#: What a profile does where a run leaves a knob unset (module docstring), by profile name:
#: (TrainingConfig or plan field, value); a profile without an entry leaves the knob plain
#: (:func:`fsdpsim.plan.knobs.knob_default`). ``bf16_layers`` applies under a low-precision
#: format.
KNOB_DEFAULTS: dict[str, dict[str, object]] = {
    "megatron": {"ep_overlap": False, "cuda_graphs": "none", "moe_dispatcher": "alltoall",
                 "fp8_attention": False, "fp8_lm_head": False, "recompute_modules": "",
                 "bf16_layers": 0, "moe_capacity_factor": None, "fused_loss": True},
}
def plan_defaults(framework: str, *, tp: int = 1, pp: int = 1, cp: int = 1,
                  given: tuple[str, ...] = ()) -> tuple[dict, str]:
    """The data-parallel sharding and overlap a framework runs where a plan leaves them unset
    (``predict`` without ``--sharding``/``--zero``/``--reshard-after-forward``/``--tp-overlap``),
    and the note that states them:

    * ``megatron``: the distributed optimizer, ZeRO-1 (``use_distributed_optimizer`` of
      Megatron-Bridge's recipes,
      :data:`fsdpsim.measured.published.conventions.FRAMEWORK_CONVENTIONS`), sequence parallelism
      with TP, TP communication overlap off (``ModelParallelConfig.tp_comm_overlap = False``,
      ``megatron/core/model_parallel_config.py``).
    * ``fsdp2`` (torchtitan): FSDP2 (ZeRO-3) over the data-parallel ranks with TP/PP/CP
      inside; parameters resharded after forward only without a pipeline
      (``fsdp_reshard_after_forward = "default"``: ``reshard_after_forward = not pp_enabled``,
      ``torchtitan/models/llama3/infra/parallelize.py`` ``apply_fsdp``), async TP off
      (``parallelism.enable_async_tensor_parallel = False``), sequence parallelism in its TP
      plan.
    * any other profile: ZeRO-3, resharded after forward, no TP overlap (the flags' defaults).
    Returns ``({sharding, reshard_after_forward, tp_overlap}, note)``; the note leaves out the
    settings named in ``given`` (stated by the user), "" when none is left."""
    name = canonical(framework)
    if name == "megatron":
        chosen = {"sharding": "optimizer", "reshard_after_forward": True, "tp_overlap": False}
        words = {"sharding": "distributed optimizer (ZeRO-1)",
                 "tp_overlap": "sequence parallel, TP communication overlap off "
                               "(tp_comm_overlap)" if tp > 1 else ""}
    elif name == "fsdp2":
        chosen = {"sharding": "full", "reshard_after_forward": pp == 1, "tp_overlap": False}
        words = {"sharding": "FSDP2 (ZeRO-3)",
                 "tp_overlap": "sequence parallel, async TP off" if tp > 1 else "",
                 "reshard_after_forward": "no reshard after forward with a pipeline "
                                          "(torchtitan's default policy)" if pp > 1 else ""}
    else:
        chosen = {"sharding": "full", "reshard_after_forward": True, "tp_overlap": False}
        words = {"sharding": "ZeRO-3", "reshard_after_forward": "resharded after forward",
                 "tp_overlap": "no TP overlap" if tp > 1 else ""}
    said = ", ".join(w for k, w in words.items() if w and k not in given)
    return chosen, (f"defaults of --framework {name} where not given: {said}; --sharding, "
                    "--zero, --reshard-after-forward and --tp-overlap set others" if said else "")


#: Older and alternative spellings.
ALIASES = {"torch": "fsdp2", "megatron-core": "megatron", "megatron-dist-opt": "megatron",
           "deepspeed": "deepspeed-zero3", "megatron-lm-2021": "megatron-2021"}
FRAMEWORKS: tuple[str, ...] = tuple(PROFILES)
#: Every accepted spelling (CLI choices).
FRAMEWORK_NAMES: tuple[str, ...] = FRAMEWORKS + tuple(ALIASES)


def with_defaults(training, framework: str):
    """``training`` (a :class:`fsdpsim.plan.training.TrainingConfig`) with what the framework
    decides where the training leaves it open: the gradient reduce dtype of a framework that reduces
    its parameters' own 16-bit gradients (``grad_all_reduce``; InternEvo's ``reduce_tensor`` keeps
    their dtype): bf16, fp16 under fp16. Elsewhere the training's own default (fp32)."""
    if training.reduce_dtype is None and profile(framework).grad_all_reduce:
        return replace(training, reduce_dtype="fp16" if training.precision == "fp16" else "bf16")
    return training


def plan_refusals(framework: str, *, sharding: str, dp_shard: int, cp: int, tp: int,
                  ep: int, etp: int, sequence_parallel: bool, tp_overlap: bool,
                  pp: int, dp: int) -> list[str]:
    """Why ``framework`` cannot run a plan, for the rules that tie several settings together
    (one-setting rules are :attr:`Framework.supports`), each a reason; [] where it can. The
    search keeps to them (:mod:`fsdpsim.drivers.search.space`) and the emitters refuse a plan
    by them (:mod:`fsdpsim.drivers.search.export`): :func:`layout_refusals` and
    :func:`tp_refusals`."""
    return (layout_refusals(framework, sharding=sharding, dp_shard=dp_shard, cp=cp, tp=tp,
                            ep=ep, etp=etp, pp=pp, dp=dp)
            + tp_refusals(framework, sequence_parallel=sequence_parallel,
                          tp_overlap=tp_overlap))


#: Mesh dimensions, outermost first (torchtitan ``ParallelDims``: pp, dp_replicate, dp_shard,
#: cp, tp): tensor parallelism innermost, on adjacent ranks of one scale-up domain.
DEFAULT_MESH_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
#: The plan fields a profile's ``supports`` may restrict, and how a plan spells its value.
_PLAN_SUPPORTS = {
    "sharding": lambda p: p.sharding, "pp_schedule": lambda p: p.pp_schedule if p.pp > 1 else None,
    "sequence_parallel": lambda p: p.sequence_parallel if p.tp > 1 else None,
    "tp_overlap": lambda p: p.tp_overlap if p.tp > 1 else None,
    "cp_kind": lambda p: p.cp_kind if p.cp > 1 else None, "cp": lambda p: p.cp,
    "pp": lambda p: p.pp, "ep": lambda p: p.ep, "ep_overlap": lambda p: p.ep_overlap,
    "mesh_order": lambda p: None if p.mesh_order == DEFAULT_MESH_ORDER else "other"}
_SHARDING_WORDS = {"optimizer": "ZeRO-1 (sharded optimizer states with whole parameters)",
                   "grad_op": "ZeRO-2 (sharded optimizer states and gradients with whole "
                              "parameters)",
                   "full": "ZeRO-3 (FSDP)", "hybrid": "HSDP (ZeRO-3 within replicas)",
                   "none": "DDP (nothing sharded)"}
#: What a plan asks of a restricted setting, in words (the first half of a refusal).
_SETTING_WORDS = {
    "sharding": lambda p: _SHARDING_WORDS[p.sharding],
    "pp_schedule": lambda p: f"pipeline schedule {p.pp_schedule}",
    "sequence_parallel": lambda p: "TP " + ("with" if p.sequence_parallel else "without")
                                   + " sequence parallelism",
    "tp_overlap": lambda p: "TP communication overlap",
    "cp_kind": lambda p: {"all2all": "all-to-all (Ulysses) context parallelism",
                          "ring": "ring-attention context parallelism"}[p.cp_kind],
    "cp": lambda p: f"context parallelism {p.cp}", "pp": lambda p: f"pipeline parallelism {p.pp}",
    "ep": lambda p: f"expert parallelism {p.ep}",
    "ep_overlap": lambda p: "expert all-to-alls overlapped with another micro-batch",
    "mesh_order": lambda p: "mesh order " + ",".join(p.mesh_order)}
#: Why a profile does not run a setting (the second half), where its code says more than the
#: values it accepts (the sources are the profiles' comments in :data:`PROFILES`).
_WHY_NOT = {
    ("fsdp2", "sharding"): "torchtitan has no such mode, it shards the parameters too (FSDP) "
                           "or replicates everything (DDP)",
    ("fsdp2", "pp_schedule"): "torchtitan runs GPipe, 1F1B and Interleaved1F1B (its "
                              "zero-bubble schedules are looped, not one stage per rank)",
    ("fsdp2", "sequence_parallel"): "torchtitan's TP always shards the sequence",
    ("fsdp2", "cp_kind"): "torchtitan's context parallelism is ring attention",
    ("fsdp2", "ep_overlap"): "torchtitan overlaps them only in its DualPipeV schedule",
    ("fsdp2", "mesh_order"): "torchtitan's is fixed (" + ", ".join(DEFAULT_MESH_ORDER) + ")",
    ("megatron", "pp_schedule"): "Megatron-LM runs 1F1B, interleaved with virtual stages; no "
                                 "argument selects this one",
    ("megatron", "mesh_order"): "Megatron's rank order is tp-cp-ep-dp-pp (innermost first), "
                                "no argument changes it"}


def setting_refusals(framework: str, plan) -> list[str]:
    """The one-setting rules (:attr:`Framework.supports`) ``framework`` refuses ``plan`` (a
    :class:`~fsdpsim.plan.parallel.ParallelPlan`) by, one sentence per setting: what the plan
    asks, then why the framework does not run it (:data:`_WHY_NOT`, else the values it
    runs); [] where it runs them all."""
    name = canonical(framework)
    supports = dict(profile(name).supports)
    out = []
    for setting, value_of in _PLAN_SUPPORTS.items():
        value = value_of(plan)
        accepted = supports.get(setting)
        if value is None or accepted is None or value in accepted:
            continue
        why = _WHY_NOT.get((name, setting))
        if why is None:
            why = ("its order is fixed (" + ",".join(DEFAULT_MESH_ORDER) + ")"
                   if setting == "mesh_order" else
                   f"--framework {name} runs {setting} " + ", ".join(map(str, accepted)))
        out.append(f"{_SETTING_WORDS[setting](plan)}: {why}")
    return out


def unsupported(framework: str, plan) -> list[str]:
    """What of ``plan`` (a :class:`~fsdpsim.plan.parallel.ParallelPlan`) the framework cannot
    run, by the rules the search keeps to (:func:`setting_refusals`, :func:`plan_refusals`),
    each a reason; [] where it can. ``predict``'s note and the config emitters
    (:mod:`fsdpsim.drivers.search.export`) both say these."""
    return setting_refusals(framework, plan) + plan_refusals(
        framework, sharding=plan.sharding, dp_shard=plan.dp_shard, cp=plan.cp, tp=plan.tp,
        ep=plan.ep, etp=plan.etp, sequence_parallel=plan.sequence_parallel,
        tp_overlap=plan.tp_overlap, pp=plan.pp, dp=plan.dp)


def layout_refusals(framework: str, *, sharding: str, dp_shard: int, cp: int, tp: int, ep: int,
                    etp: int, pp: int, dp: int) -> list[str]:
    """The data-parallel and expert layouts ``framework`` cannot run. ``fsdp2`` (torchtitan,
    ``torchtitan/distributed/parallel_dims.py``): the parameters are sharded over
    ``dp_shard × cp`` (FSDP over the context-parallel ranks too), so DDP with CP does not
    exist and FSDP over one rank is not applied (no FSDP mesh); DDP over ``dp`` > 1 replicas
    runs only as the whole mesh (``torchtitan/models/llama3/infra/parallelize.py`` at
    e347b1e5e: "DDP has not supported > 1D parallelism" where the world is larger than the
    ``dp_replicate`` mesh, so no DDP with TP or a pipeline); expert TP is 1 or the TP
    degree, and only with EP > 1; EP × expert TP borrows the ``dp_shard × cp × tp`` ranks
    only (``dp_shard`` of DDP: 1)."""
    out = []
    if canonical(framework) == "fsdp2":
        if sharding == "none" and cp > 1:
            out.append("DDP with context parallelism: torchtitan shards the parameters over "
                       "the context-parallel ranks (FSDP over dp_shard x cp)")
        if sharding == "none" and dp > 1 and (tp > 1 or pp > 1) and cp == 1:
            out.append("DDP with TP or a pipeline: torchtitan applies DDP only where data "
                       "parallelism is the whole mesh (DDP has not supported > 1D "
                       "parallelism); HSDP or FSDP runs it")
        if sharding in ("full", "hybrid") and dp_shard * cp == 1:
            out.append("FSDP over one rank: torchtitan applies no FSDP there (data_parallel_"
                       "shard_degree 1 without context parallelism)")
        if etp not in (1, tp) or (ep == 1 and etp != tp):
            out.append(f"expert TP {etp} with TP {tp} and EP {ep}: torchtitan's expert TP is "
                       "1 or the TP degree, and applies only with EP > 1")
        shard_ranks = (dp_shard if sharding != "none" else 1) * cp * tp
        if ep > 1 and shard_ranks % (ep * etp):
            out.append(f"EP {ep} x expert TP {etp} over more than the {shard_ranks} ranks of "
                       "dp_shard x cp x tp: torchtitan's experts borrow only those ranks")
    return out


def tp_refusals(framework: str, *, sequence_parallel: bool, tp_overlap: bool) -> list[str]:
    """The TP settings ``framework`` cannot run: Megatron-LM's ``--tp-comm-overlap`` needs
    ``--sequence-parallel`` (``megatron/training/arguments.py``)."""
    if canonical(framework) == "megatron" and tp_overlap and not sequence_parallel:
        return ["TP overlap without sequence parallelism: --tp-comm-overlap needs "
                "--sequence-parallel"]
    return []


def canonical(name: str) -> str:
    """The profile name for ``name`` (an alias is resolved); a clear error otherwise."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in PROFILES:
        raise ConfigError(f"framework {name!r} is not accepted{suggest(key, FRAMEWORK_NAMES)}; "
                          f"accepted: {', '.join(FRAMEWORK_NAMES)}")
    return key


def profile(name: str) -> Framework:
    return PROFILES[canonical(name)]
