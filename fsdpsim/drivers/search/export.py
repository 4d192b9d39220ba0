"""A searched plan in the words of the frameworks that run it: a torchtitan TOML fragment and
Megatron-LM command-line arguments.

Option names are those of torchtitan's ``JobConfig`` (``torchtitan/config/job_config.py``:
``[parallelism]``, ``[training]``, ``[activation_checkpoint]``) and Megatron-LM's
``megatron/training/arguments.py``. Where a framework has no exact equivalent the fragment says
so in a comment instead of guessing.
"""

from __future__ import annotations

from fsdpsim.plan.parallel import DEFAULT_MESH_ORDER

#: fsdpsim schedule -> torchtitan ``pipeline_parallel_schedule``.
TORCHTITAN_SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B",
                        "zb-h1": "InterleavedZeroBubble"}
_PRECISION = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "bfloat16",
              "fp8-block": "bfloat16", "mxfp8": "bfloat16", "nvfp4": "bfloat16"}
#: Megatron-LM's precision arguments (megatron/training/arguments.py: --fp8-format,
#: --fp8-recipe tensorwise|delayed|mxfp8|blockwise, --fp4-format, --fp4-recipe).
MEGATRON_PRECISION = {"bf16": "--bf16", "fp16": "--fp16", "fp32": "",
                      "fp8": "--bf16 --fp8-format hybrid --fp8-recipe tensorwise",
                      "fp8-block": "--bf16 --fp8-format e4m3 --fp8-recipe blockwise",
                      "mxfp8": "--bf16 --fp8-format e4m3 --fp8-recipe mxfp8",
                      "nvfp4": "--bf16 --fp4-format e2m1 --fp4-recipe nvfp4"}


def torchtitan_toml(choice, training) -> str:
    """The plan as torchtitan config sections (paste into a train config's TOML)."""
    p = choice.plan
    lines = ["[parallelism]"]
    notes = []
    if p.sharding == "none":
        shard, repl = 1, p.dp
    elif p.sharding == "optimizer":
        shard, repl = p.dp, 1
        notes.append("# ZeRO-1 (sharded optimizer only) is not a torchtitan mode; this shards "
                     "parameters too (FSDP). Megatron --use-distributed-optimizer is ZeRO-1.")
    else:
        shard, repl = p.dp_shard, p.dp_replicate
    lines += [f"data_parallel_replicate_degree = {repl}",
              f"data_parallel_shard_degree = {shard}"]
    if p.sharding in ("full", "grad_op", "hybrid", "optimizer"):
        raf = "never" if p.sharding == "grad_op" or not p.reshard_after_forward else "default"
        lines.append(f'fsdp_reshard_after_forward = "{raf}"')
    lines.append(f"tensor_parallel_degree = {p.tp}")
    if p.tp > 1:
        lines.append(f"enable_async_tensor_parallel = {str(p.tp_overlap).lower()}")
        if not p.sequence_parallel:
            notes.append("# torchtitan always uses sequence parallelism with TP; this plan "
                         "was searched without it.")
    lines.append(f"context_parallel_degree = {p.cp}")
    if p.cp > 1:
        method = "alltoall" if p.cp_kind == "all2all" else "allgather"
        lines.append(f'context_parallel_rotate_method = "{method}"')
    lines.append(f"pipeline_parallel_degree = {p.pp}")
    if p.pp > 1:
        lines += [f'pipeline_parallel_schedule = "{TORCHTITAN_SCHEDULES[p.pp_schedule]}"',
                  f"pipeline_parallel_microbatch_size = {choice.micro_batch}"]
        if p.pp_schedule == "zb-h1":
            notes.append("# zb-h1 (one stage per rank) has no torchtitan schedule of its own; "
                         "InterleavedZeroBubble needs 2+ stages per rank.")
        if p.vpp > 1 or p.pp_first_layers is not None:
            notes.append(f"# {p.vpp} model chunk(s) per rank"
                         + (f", end stages {p.pp_first_layers}/{p.pp_last_layers} layers"
                            if p.pp_first_layers is not None else "")
                         + ": set the stage split with pipeline_parallel_layers_per_stage / "
                           "module_fqns_per_model_part")
    if p.ep > 1:
        lines += [f"expert_parallel_degree = {p.ep}",
                  f"expert_tensor_parallel_degree = {p.etp}"]
    if p.mesh_order != DEFAULT_MESH_ORDER:
        notes.append("# mesh order (outermost first): " + ", ".join(p.mesh_order)
                     + " — torchtitan's is pp, dp_replicate, dp_shard, cp, tp; reorder ranks "
                       "by the launcher's host list")
    local = choice.micro_batch * choice.grad_accum  # sequences per data-parallel rank
    lines += ["", "[training]", f"global_batch_size = {training.global_batch}",
              f"local_batch_size = {local}", f"seq_len = {training.seq_len}",
              f'mixed_precision_param = "{_PRECISION[training.precision]}"']
    lines += ["", "[activation_checkpoint]"]
    if choice.recompute == "none" or choice.recompute_layers == 0:  # no layer recomputed
        lines.append('mode = "none"')
    elif choice.recompute == "selective" and choice.recompute_layers is None:
        lines += ['mode = "selective"', 'selective_ac_option = "op"']
    elif choice.recompute_layers is None:
        lines.append('mode = "full"')
    else:
        k, n = choice.recompute_layers, choice.layers_per_stage
        every = max(1, round(n / k))
        lines += ['mode = "selective"', f'selective_ac_option = "{every}"']
        notes.append(f"# the plan recomputes the first {k} of each stage's {n} layers "
                     f"({choice.recompute}); torchtitan checkpoints every {every}-th layer "
                     f"instead ({n // every} of {n}): check the memory")
    # the LM head stays 16-bit (torchtitan's FP8 recipes filter "output") unless fp8_lm_head
    head = [] if training.fp8_lm_head else ['filter_fqns = ["output"]']
    if training.precision == "fp8":
        lines += ["", "[quantize.linear.float8]", "enable_fsdp_float8_all_gather = false", *head]
    elif training.precision == "mxfp8":
        lines += ["", "[quantize.linear.mx]", 'recipe_name = "mxfp8"', *head]
    elif training.precision in ("fp8-block", "nvfp4"):
        notes.append(f"# {training.precision}: no torchtitan quantization recipe of that name; "
                     "Transformer Engine / Megatron-LM run it (--emit megatron)")
    if training.fp8_attention:
        notes.append("# FP8 attention: torchtitan has no FP8 attention option; Transformer "
                     "Engine's fp8_dot_product_attention does it (--emit megatron)")
    if training.fp8_lm_head and training.precision in ("fp8", "mxfp8"):
        notes.append("# LM head in the low-precision format: \"output\" is not in the "
                     "converter's filter_fqns")
    if training.cuda_graphs != "none":
        notes.append(f"# {training.cuda_graphs} CUDA graphs: torchtitan has no capture option "
                     "of its own; Megatron-Core's --cuda-graph-impl does it (--emit megatron)")
    if training.recompute_modules:
        notes.append("# per-module recompute (" + ", ".join(training.recompute_modules)
                     + "): Megatron-Core's recompute_modules; torchtitan has no equivalent")
    if p.ep > 1 and training.moe_dispatcher == "deepep":
        notes.append("# node-deduplicated dispatch (DeepEP): set torchtitan's expert-parallel "
                     "communication backend to DeepEP where the release has one")
    return "\n".join(_comments(notes) + lines) + "\n"


def _comments(notes: list[str]) -> list[str]:
    """Comment lines wrapped at 100 columns, each continued as a comment."""
    from fsdpsim.util.text import wrap

    return [line for note in notes
            for line in wrap(note[2:] if note.startswith("# ") else note, indent="# ",
                             hanging="#   ").split("\n")]


def megatron_args(choice, training) -> str:
    """The plan as Megatron-LM arguments (``pretrain_gpt.py``), one per line."""
    p = choice.plan
    args = [f"--tensor-model-parallel-size {p.tp}", f"--pipeline-model-parallel-size {p.pp}",
            f"--context-parallel-size {p.cp}"]
    notes = []
    if p.tp > 1 and p.sequence_parallel:
        args.append("--sequence-parallel")
    if p.tp_overlap:
        args.append("--tp-comm-overlap")
    if p.cp > 1:
        args.append(f"--cp-comm-type {'a2a' if p.cp_kind == 'all2all' else 'p2p'}")
    if p.pp > 1:
        if p.vpp > 1:
            args.append(f"--num-virtual-stages-per-pipeline-rank {p.vpp}")
        if p.pp_first_layers is not None:
            args += [f"--decoder-first-pipeline-num-layers {p.pp_first_layers}",
                     f"--decoder-last-pipeline-num-layers {p.pp_last_layers}"]
        if p.pp_schedule in ("gpipe", "zb-h1"):
            notes.append(f"# schedule {p.pp_schedule}: Megatron-LM runs 1F1B (interleaved with "
                         "virtual stages); no flag selects this one")
    if p.ep > 1:
        args += [f"--expert-model-parallel-size {p.ep}",
                 f"--expert-tensor-parallel-size {p.etp}"]
        if p.ep_overlap:
            args.append("--overlap-moe-expert-parallel-comm")
        if training.moe_dispatcher == "deepep":  # Megatron-Core's flex dispatcher on DeepEP
            args += ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep"]
        if training.moe_fp8_dispatch:
            notes.append("# FP8 dispatch: DeepEP's FP8 dispatch kernels; no Megatron-LM flag "
                         "selects it on its own")
    if p.sharding == "optimizer":
        args += ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
    elif p.sharding == "none":
        args.append("--overlap-grad-reduce")
    else:
        strategy = {"full": "optim_grads_params", "grad_op": "optim_grads",
                    "hybrid": "optim_grads_params"}[p.sharding]
        args += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {strategy}"]
        if p.sharding == "hybrid":
            notes.append(f"# HSDP: shard over {p.dp_shard} ranks, replicate {p.dp_replicate}x "
                         "(--num-distributed-optimizer-instances "
                         f"{p.dp_replicate} with the distributed optimizer)")
    args += [f"--micro-batch-size {choice.micro_batch}",
             f"--global-batch-size {training.global_batch}", f"--seq-length {training.seq_len}"]
    if choice.recompute == "selective" and choice.recompute_layers is None:
        args.append("--recompute-granularity selective")
    elif choice.recompute != "none" and choice.recompute_layers != 0:  # 0: no layer
        if choice.recompute == "selective":
            notes.append("# selective recompute of some layers only is not a Megatron option; "
                         "this recomputes those layers in full")
        k = choice.recompute_layers or choice.layers_per_stage
        args += ["--recompute-granularity full", "--recompute-method block",
                 f"--recompute-num-layers {k}"]
    args.append(MEGATRON_PRECISION[training.precision])
    if training.fp8_attention:
        args.append("--fp8-dot-product-attention")
    if training.cuda_graphs == "partial":
        args.append("--cuda-graph-impl transformer_engine --cuda-graph-modules attn mlp "
                    "moe_router moe_preprocess")
    elif training.cuda_graphs == "full":
        args += ["--cuda-graph-impl full_iteration", "--no-check-for-nan-in-loss-and-grad"]
        notes.append("# full-iteration CUDA graphs need sync-free experts (static token "
                     "counts: a capacity factor, or HybridEP's padded buffers)")
    if training.recompute_modules and choice.recompute != "full":
        # Megatron's selective granularity recomputes core_attn unless the list replaces it
        selective = "--recompute-granularity selective" in args
        if not selective:
            args.append("--recompute-granularity selective")
        args.append("--recompute-modules " + " ".join(
            (("core_attn",) if selective else ()) + training.recompute_modules))
    if training.fp8_lm_head:
        notes.append("# LM head in MXFP8: Megatron-Core's TransformerConfig.fp8_output_proj = "
                     "True (no command-line flag; needs --fp8-recipe mxfp8)")
    if p.mesh_order != DEFAULT_MESH_ORDER:
        notes.append("# mesh order (outermost first): " + ", ".join(p.mesh_order)
                     + "; Megatron's default is tp-cp-ep-dp-pp (innermost first): "
                       "--order may not express it")
    return "\n".join(_comments(notes) + [a for a in args if a]) + "\n"


__all__ = ["torchtitan_toml", "megatron_args", "TORCHTITAN_SCHEDULES"]
