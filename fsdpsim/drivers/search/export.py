"""A searched plan in the words of the frameworks that run it: a torchtitan TOML fragment and
Megatron-LM command-line arguments, each of which runs the ranked plan exactly (micro-batch,
accumulation, every degree, schedule, ZeRO stage, expert TP), or says in comment lines why
the framework cannot run it instead of emitting another plan.

Option names and rules are those of torchtitan's ``JobConfig``
(``torchtitan/config/job_config.py`` at pytorch/torchtitan e347b1e5e, the last release read
from TOML: ``[parallelism]``, ``[training]``, ``[activation_checkpoint]``; ``train.py``:
gradient accumulation = ``global_batch_size / (local_batch_size × dp_replicate × dp_shard)``,
the pipeline splits ``local_batch_size`` into micro-batches of
``pipeline_parallel_microbatch_size``) and of Megatron-LM's
``megatron/training/arguments.py`` (``--expert-tensor-parallel-size`` defaults to
``--tensor-model-parallel-size``; ``--tp-comm-overlap`` needs ``--sequence-parallel``; the
number of micro-batches is ``global / (micro × dp)``; Megatron-FSDP runs HSDP when
``--num-distributed-optimizer-instances`` > 1: ``megatron/core/distributed/fsdp/
mcore_fsdp_adapter.py``, ``enable_hsdp``; each rank's layers split into
``--num-virtual-stages-per-pipeline-rank`` equal chunks, else the split is stated as
``--pipeline-model-parallel-layout``). :mod:`fsdpsim.drivers.search.
export_read` reads both back by those rules; ``tests/test_export.py`` checks that what it
reads is the ranked plan.
"""

from __future__ import annotations

from fsdpsim.plan.frameworks import unsupported

#: fsdpsim schedule -> torchtitan ``pipeline_parallel_schedule`` (torch.distributed.pipelining
#: names); zb-h1 with one stage per rank has none (torchtitan's zero-bubble schedules are
#: looped: InterleavedZeroBubble, ZBVZeroBubble).
TORCHTITAN_SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B"}
_PRECISION = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "bfloat16",
              "fp8-block": "bfloat16", "mxfp8": "bfloat16", "nvfp4": "bfloat16"}
#: Megatron-LM's precision arguments (megatron/training/arguments.py: --fp8-format,
#: --fp8-recipe tensorwise|delayed|mxfp8|blockwise, --fp4-format, --fp4-recipe).
MEGATRON_PRECISION = {"bf16": "--bf16", "fp16": "--fp16", "fp32": "",
                      "fp8": "--bf16 --fp8-format hybrid --fp8-recipe tensorwise",
                      "fp8-block": "--bf16 --fp8-format e4m3 --fp8-recipe blockwise",
                      "mxfp8": "--bf16 --fp8-format e4m3 --fp8-recipe mxfp8",
                      "nvfp4": "--bf16 --fp4-format e2m1 --fp4-recipe nvfp4"}
#: The first line of a fragment that does not run the plan (then only comments follow).
CANNOT = "cannot run this plan"


def stage_layers(choice) -> tuple[int, int, int]:
    """Layers of the (first, middle, last) pipeline stages of a candidate [-]."""
    return choice.plan.stage_layers(choice.n_layers)


def chunk_layers(choice) -> list[int]:
    """Layers of each model chunk in torchtitan's order (chunk ``v·pp + r`` on pipeline rank
    ``r``: the looped placement of Interleaved1F1B): the plan's split of the model
    (:meth:`fsdpsim.plan.parallel.ParallelPlan.layer_split`, the framework's where the plan
    states none), each rank's layers in vpp chunks as even as they go where the split does not
    place its chunks itself."""
    p = choice.plan
    return list(p.layer_split(choice.n_layers).chunks(p.vpp))


def _torchtitan_blockers(choice) -> list[str]:
    """What of the plan torchtitan cannot run (each a reason): the ``fsdp2`` profile's rules
    (:func:`fsdpsim.plan.frameworks.unsupported`, which the search and ``predict``'s note
    use), then what no profile setting holds (gathered parameters, recompute)."""
    p = choice.plan
    out = unsupported("fsdp2", p)
    if p.keep_gathered or p.grad_sync == "last":
        out.append("parameters kept gathered / gradients synced once per step: torchtitan "
                   "has no option for either")
    k, n = choice.recompute_layers, choice.layers_per_stage
    if choice.recompute == "selective" and k != 0:
        out.append("selective recompute of the attention core (Megatron's): torchtitan's "
                   "selective checkpointing is per op (op-selective) or per n-th layer")
    elif choice.recompute != "none" and k not in (None, 0) and (
            choice.recompute == "op-selective" or n % k or p.vpp > 1):
        out.append(f"recompute of {k} of each stage's {n} layers: torchtitan checkpoints "
                   "every n-th layer of a model chunk (selective_ac_option = n)")
    return out


def torchtitan_toml(choice, training) -> str:
    """The plan as torchtitan config sections (paste into a train config's TOML), or comment
    lines saying why torchtitan cannot run it."""
    p = choice.plan
    blockers = _torchtitan_blockers(choice)
    if blockers:
        return "\n".join(_comments([f"# torchtitan {CANNOT}:"] + [f"# - {b}" for b in blockers]
                                   + ["# (--emit megatron, or --fix to constrain the search)"])
                         ) + "\n"
    shard, repl = (1, p.dp) if p.sharding == "none" else (p.dp_shard, p.dp_replicate)
    lines = ["[parallelism]", f"data_parallel_replicate_degree = {repl}",
             f"data_parallel_shard_degree = {shard}"]
    if p.sharding != "none":
        lines.append('fsdp_reshard_after_forward = '
                     f'"{"always" if p.reshard_after_forward else "never"}"')
    lines.append(f"tensor_parallel_degree = {p.tp}")
    if p.tp > 1:
        lines.append(f"enable_async_tensor_parallel = {str(p.tp_overlap).lower()}")
    lines.append(f"context_parallel_degree = {p.cp}")
    if p.cp > 1:  # ring attention: KV shards passed to the next rank
        lines.append('context_parallel_rotate_method = "alltoall"')
    lines.append(f"pipeline_parallel_degree = {p.pp}")
    local = choice.micro_batch
    if p.pp > 1:
        local = choice.micro_batch * choice.grad_accum  # one pipeline step: m micro-batches
        lines += [f'pipeline_parallel_schedule = "{TORCHTITAN_SCHEDULES[p.pp_schedule]}"',
                  f"pipeline_parallel_microbatch_size = {choice.micro_batch}",
                  "module_fqns_per_model_part = " + _fqns(chunk_layers(choice))]
    if p.ep > 1:
        lines += [f"expert_parallel_degree = {p.ep}",
                  f"expert_tensor_parallel_degree = {p.etp}"]
    lines += ["", "[training]", f"global_batch_size = {choice.global_batch}",
              f"local_batch_size = {local}", f"seq_len = {training.seq_len}",
              f'mixed_precision_param = "{_PRECISION[training.precision]}"']
    lines += ["", "[activation_checkpoint]"]
    if choice.recompute == "none" or choice.recompute_layers == 0:  # no layer recomputed
        lines.append('mode = "none"')
    elif choice.recompute == "op-selective":  # torchtitan SelectiveAC's op-level policy
        lines += ['mode = "selective"', 'selective_ac_option = "op"']
    elif choice.recompute_layers is None:
        lines.append('mode = "full"')
    else:  # every n-th layer: L / n of the stage's L layers
        lines += ['mode = "selective"',
                  f'selective_ac_option = "{choice.layers_per_stage // choice.recompute_layers}"']
    lines, notes = _torchtitan_knobs(lines, p, training)
    return "\n".join(_comments(notes) + lines) + "\n"


def _fqns(chunks: list[int], width: int = 94) -> str:
    """torchtitan's ``module_fqns_per_model_part`` for chunks of these layer counts (the
    embedding on the first, the final norm and output on the last): one part a line, broken
    at ``width`` columns (a TOML array may span lines)."""
    lines, start = ["["], 0
    for i, n in enumerate(chunks):
        names = (["tok_embeddings"] if i == 0 else []) + \
            [f"layers.{j}" for j in range(start, start + n)] + \
            (["norm", "output"] if i == len(chunks) - 1 else [])
        items = [f'"{x}",' for x in names[:-1]] + [f'"{names[-1]}"],']
        line = "  [" + items[0]
        for item in items[1:]:
            if len(line) + 1 + len(item) > width:
                lines.append(line)
                line = "   " + item
            else:
                line += " " + item
        lines.append(line)
        start += n
    return "\n".join(lines + ["]"])


def _torchtitan_knobs(lines: list[str], p, training) -> tuple[list[str], list[str]]:
    """The precision sections and the notes on training knobs torchtitan lacks (these change
    kernels, not the plan)."""
    notes = []
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
        notes.append("# node-deduplicated dispatch (DeepEP): expert_parallel_comm_backend = "
                     "\"deepep\" in [parallelism]")
    return lines, notes


def _comments(notes: list[str]) -> list[str]:
    """Comment lines wrapped at 100 columns, each continued as a comment."""
    from fsdpsim.util.text import wrap

    return [line for note in notes
            for line in wrap(note[2:] if note.startswith("# ") else note, indent="# ",
                             hanging="#   ").split("\n")]


def _megatron_blockers(choice) -> list[str]:
    """What of the plan Megatron-LM cannot run (each a reason): the ``megatron`` profile's
    rules (:func:`fsdpsim.plan.frameworks.unsupported`), then what no profile setting holds."""
    p = choice.plan
    out = unsupported("megatron", p)
    if not p.reshard_after_forward or p.keep_gathered or p.grad_sync == "last":
        out.append("parameters kept after forward / gathered for the step / gradients synced "
                   "once per step: Megatron-FSDP reshards and reduces every micro-batch")
    k = choice.recompute_layers
    if choice.recompute == "op-selective" and k != 0:
        out.append("op-selective recompute (torchtitan's per-op policy): Megatron-LM's "
                   "selective granularity recomputes the attention core or listed modules")
    if choice.recompute == "selective" and k is not None:
        out.append(f"selective recompute of {k} layers only: Megatron's selective granularity "
                   "applies to every layer")
    if choice.recompute == "full" and k is not None and k % p.vpp:
        out.append(f"full recompute of {k} of each stage's layers over {p.vpp} virtual "
                   "stages: --recompute-num-layers counts per model chunk")
    elif choice.recompute == "full" and k and p.pp > 1:
        # block recompute: the first K/vpp layers of each chunk, all of a smaller chunk
        chunks, per_chunk = chunk_layers(choice), k // p.vpp
        if any(sum(min(per_chunk, c) for c in chunks[r::p.pp]) != k for r in range(p.pp)
               if sum(chunks[r::p.pp]) == choice.layers_per_stage):
            out.append(f"full recompute of {k} of each stage's layers: --recompute-num-layers "
                       f"{per_chunk} recomputes at most that many of each model chunk, and "
                       "some chunks of this split hold fewer")
    return out


def megatron_args(choice, training) -> str:
    """The plan as Megatron-LM arguments (``pretrain_gpt.py``), one per line, or comment lines
    saying why Megatron-LM cannot run it."""
    p = choice.plan
    blockers = _megatron_blockers(choice)
    if blockers:
        return "\n".join(_comments([f"# Megatron-LM {CANNOT}:"]
                                   + [f"# - {b}" for b in blockers]
                                   + ["# (--emit torchtitan, or --fix to constrain the search)"])
                         ) + "\n"
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
        args += _megatron_split_args(choice)
    if p.ep > 1 or p.etp != p.tp:  # its default is the TP degree
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
    if p.dp_replicate > 1 and p.sharding != "none":  # shards within each of R replicas
        args.append(f"--num-distributed-optimizer-instances {p.dp_replicate}")
    args += [f"--micro-batch-size {choice.micro_batch}",
             f"--global-batch-size {choice.global_batch}", f"--seq-length {training.seq_len}"]
    if choice.recompute == "selective":
        args.append("--recompute-granularity selective")
    elif choice.recompute == "full" and choice.recompute_layers != 0:  # 0: no layer
        k = choice.recompute_layers
        args += ["--recompute-granularity full"] + (
            ["--recompute-method uniform", "--recompute-num-layers 1"] if k is None else
            ["--recompute-method block", f"--recompute-num-layers {k // p.vpp}"])
    args, notes = _megatron_knobs(args, notes, choice, training)
    return "\n".join(_comments(notes) + [a for a in args if a]) + "\n"


def megatron_chunks(n_layers: int, pp: int, vpp: int, first: int | None,
                    last: int | None) -> tuple[int, ...] | None:
    """Layers of each model chunk (chunk ``v·pp + r`` on rank ``r``) Megatron-LM builds from
    ``--decoder-first/last-pipeline-num-layers`` (None: not given) and ``vpp`` virtual stages,
    or None where it refuses them: the ranks left after the given ends share the rest
    evenly, and each rank's layers split into ``vpp`` equal chunks (Megatron-LM
    ``TransformerConfig.__post_init__`` checks, ``get_num_layers_to_build``)."""
    rest_ranks = pp - (first is not None) - (last is not None)
    rest = n_layers - (first or 0) - (last or 0)
    if rest_ranks == 0 and rest != 0 or rest_ranks and (rest < rest_ranks or rest % rest_ranks):
        return None
    middle = rest // rest_ranks if rest_ranks else 0
    counts = ([middle if first is None else first] + [middle] * (pp - 2)
              + [middle if last is None else last])
    if any(n % vpp for n in counts):
        return None
    return tuple(counts[r] // vpp for v in range(vpp) for r in range(pp))


def _megatron_split_args(choice) -> list[str]:
    """The plan's pipeline split (:func:`chunk_layers`) as Megatron-LM arguments: the virtual
    stages and the end stages' counts where Megatron builds exactly those chunks from them
    (:func:`megatron_chunks`), else ``--pipeline-model-parallel-layout``, one stage per chunk
    in chunk order (``E`` the embedding, ``t*N`` N layers, ``L`` the loss;
    ``megatron/core/transformer/pipeline_parallel_layer_layout.py``), which Megatron-LM takes
    instead of ``--num-virtual-stages-per-pipeline-rank`` (``arguments.py``)."""
    p, chunks = choice.plan, tuple(chunk_layers(choice))
    if megatron_chunks(choice.n_layers, p.pp, p.vpp, p.pp_first_layers,
                       p.pp_last_layers) == chunks:
        args = [f"--num-virtual-stages-per-pipeline-rank {p.vpp}"] if p.vpp > 1 else []
        for end, n in (("first", p.pp_first_layers), ("last", p.pp_last_layers)):
            if n is not None:
                args.append(f"--decoder-{end}-pipeline-num-layers {n}")
        return args
    stages = [("E" if j == 0 else "") + ("t" if n == 1 else f"t*{n}" if n else "")
              + ("L" if j == len(chunks) - 1 else "") for j, n in enumerate(chunks)]
    runs: list[list] = []  # equal neighbouring stages, written once as (stage|)*k
    for stage in stages:
        if runs and runs[-1][0] == stage:
            runs[-1][1] += 1
        else:
            runs.append([stage, 1])
    *head, (last, k) = runs
    text = "".join(f"{s}|" if n == 1 else f"({s}|)*{n}," for s, n in head + [[last, k - 1]]
                   if n) + last
    return [f"--pipeline-model-parallel-layout '{text}'"]


def _megatron_knobs(args: list[str], notes: list[str], choice, training):
    """Precision, FP8 attention, CUDA graphs and per-module recompute arguments."""
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
    return args, notes


__all__ = ["torchtitan_toml", "megatron_args", "TORCHTITAN_SCHEDULES", "CANNOT",
           "chunk_layers", "stage_layers"]
