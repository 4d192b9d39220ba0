"""What a torchtitan TOML fragment or Megatron-LM arguments from
:mod:`fsdpsim.drivers.search.export` run, read by each framework's own rules, as a
:class:`~fsdpsim.plan.spelling.RunPlan`: the check that an emitted configuration runs the
ranked plan (``tests/test_export.py``).

- torchtitan (``torchtitan/config/job_config.py`` and ``train.py`` at e347b1e5e): the
  data-parallel degree is ``dp_replicate × dp_shard``; gradient accumulation is
  ``global_batch_size / (local_batch_size × dp)``; with a pipeline, ``local_batch_size`` runs as
  micro-batches of ``pipeline_parallel_microbatch_size``; ``data_parallel_shard_degree`` > 1
  is FSDP (ZeRO-3), HSDP with replicas, else DDP; ``fsdp_reshard_after_forward = "never"``
  keeps parameters after forward; ``selective_ac_option = "n"`` checkpoints every n-th layer,
  ``"op"`` is the op-level policy (``op-selective``; ``activation_checkpoint.py``);
  ``expert_tensor_parallel_degree`` applies with ``expert_parallel_degree`` > 1.
- Megatron-LM (``megatron/training/arguments.py``): ``--expert-tensor-parallel-size`` defaults
  to ``--tensor-model-parallel-size``; micro-batches per step = ``global / (micro × dp)``, dp =
  world / (tp × pp × cp); ``--use-distributed-optimizer`` is ZeRO-1, Megatron-FSDP's
  ``optim_grads`` / ``optim_grads_params`` ZeRO-2 / ZeRO-3, neither DDP;
  ``--num-distributed-optimizer-instances R`` shards within R replicas; no
  ``--num-virtual-stages-per-pipeline-rank`` is 1F1B; ``--recompute-num-layers`` counts per
  model chunk.
"""

from __future__ import annotations

import re
import shlex
import tomllib

from fsdpsim.drivers.search.export import CANNOT, TORCHTITAN_SCHEDULES
from fsdpsim.plan.parallel import ParallelPlan
from fsdpsim.plan.spelling import RunPlan, canonical
from fsdpsim.util.errors import ConfigError

_SCHEDULES = {v: k for k, v in TORCHTITAN_SCHEDULES.items()}


def read_torchtitan(text: str, *, num_gpus: int, gpus_per_node: int, layers_per_stage: int,
                    framework: str = "fsdp2") -> RunPlan | None:
    """The plan a torchtitan TOML fragment runs on ``num_gpus`` GPUs of a model with
    ``layers_per_stage`` layers on a middle pipeline stage (all its layers without a
    pipeline); None for a fragment that says it cannot run the plan."""
    if CANNOT in text.splitlines()[0]:
        return None
    cfg = tomllib.loads(text)
    par, tr, ac = cfg["parallelism"], cfg["training"], cfg["activation_checkpoint"]
    tp, pp, cp = (par.get(k, 1) for k in ("tensor_parallel_degree", "pipeline_parallel_degree",
                                         "context_parallel_degree"))
    repl = par.get("data_parallel_replicate_degree", 1)
    shard = par.get("data_parallel_shard_degree", -1)
    if shard == -1:  # the leftover ranks
        shard = num_gpus // (repl * tp * pp * cp)
    dp = repl * shard
    local, global_batch = tr["local_batch_size"], tr["global_batch_size"]
    if global_batch % (local * dp):
        raise ConfigError(f"global_batch_size {global_batch} is not a multiple of "
                          f"local_batch_size {local} x dp {dp}")
    accum = global_batch // (local * dp)
    micro, vpp = local, 1
    kw = {}
    if pp > 1:
        micro = par.get("pipeline_parallel_microbatch_size", 1)
        accum *= local // micro
        parts = par["module_fqns_per_model_part"]
        vpp = len(parts) // pp
        per_rank = [sum(1 for part in parts[r::pp] for name in part
                        if name.startswith("layers.")) for r in range(pp)]
        kw.update(pp_schedule=_SCHEDULES[par["pipeline_parallel_schedule"]],
                  **_split_fields(per_rank, vpp, layers_per_stage, framework))
    # FSDP over dp_shard x cp when either is above 1 (HSDP with replicas), else DDP
    sharding = ("none" if shard * cp == 1 else "hybrid" if repl > 1 else "full")
    group = shard if sharding == "hybrid" else None
    raf = par.get("fsdp_reshard_after_forward", "default") != "never"
    ep = par.get("expert_parallel_degree", 1)
    plan = ParallelPlan(
        num_gpus=num_gpus, gpus_per_node=gpus_per_node, sharding=sharding,
        shard_group_size=group, tp=tp, pp=pp, cp=cp, vpp=vpp, framework=framework,
        sequence_parallel=tp > 1, tp_overlap=bool(par.get("enable_async_tensor_parallel")),
        ep=ep, etp=par.get("expert_tensor_parallel_degree", 1) if ep > 1 else tp,
        reshard_after_forward=raf, **kw)
    mode = ac.get("mode", "selective")
    option = str(ac.get("selective_ac_option", "2"))
    if mode == "none":
        recompute, layers = "none", None
    elif mode == "full":
        recompute, layers = "full", None
    elif option == "op":  # SelectiveAC's op-level policy (activation_checkpoint.py)
        recompute, layers = "op-selective", None
    else:  # every n-th layer: L / n of a stage's L layers, in full
        recompute, layers = "full", layers_per_stage // int(option)
    return RunPlan(canonical(plan), micro, accum, recompute, layers)


def _split_fields(per_rank: list[int], vpp: int, layers_per_stage: int,
                  framework: str) -> dict:
    """The plan fields that state a pipeline split of ``per_rank`` layers: none where it is the
    framework's own split of their sum (:func:`fsdpsim.plan.pipeline_split.default_split`),
    else the end stages' counts where the middle ranks hold ``layers_per_stage`` each, else
    every rank's count (``pp_layers``)."""
    from fsdpsim.plan.frameworks import canonical as framework_name
    from fsdpsim.plan.pipeline_split import default_split

    pp = len(per_rank)
    try:
        own = default_split(sum(per_rank), pp, vpp, framework_name(framework)).counts
    except ConfigError:
        own = None
    if tuple(per_rank) == own:
        return {}
    if all(n == layers_per_stage for n in per_rank[1:-1]):
        first, last = per_rank[0], per_rank[-1]
        return {"pp_first_layers": None if first == layers_per_stage else first,
                "pp_last_layers": None if last == layers_per_stage else last}
    return {"pp_layers": tuple(per_rank)}


def megatron_layout(text: str) -> list[int]:
    """Layers of each stage of a ``--pipeline-model-parallel-layout`` string, read as
    Megatron-LM reads it (``PipelineParallelLayerLayout.parse_str_to_list``: commas dropped,
    ``(...)*n`` then ``x*n`` unrolled, stages split at ``|``; ``t`` is a layer)."""
    text = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    return [stage.count("t") for stage in text.split("|")]


def read_megatron(text: str, *, num_gpus: int, gpus_per_node: int, layers_per_stage: int,
                  framework: str = "megatron") -> RunPlan | None:
    """The plan Megatron-LM arguments run on ``num_gpus`` GPUs (``layers_per_stage``: the
    layers of a middle stage, for an all-layer recompute); None for arguments that say they
    cannot run the plan."""
    lines = text.splitlines()
    if CANNOT in lines[0]:
        return None
    words = shlex.split(" ".join(line for line in lines if not line.startswith("#")))
    args: dict[str, list[str]] = {}
    for w in words:
        if w.startswith("--"):
            key = w[2:].replace("-", "_")
            args[key] = []
        else:
            args[key].append(w)

    def num(name, default=None):
        return int(args[name][0]) if name in args else default

    tp, pp, cp = (num(n, 1) for n in ("tensor_model_parallel_size",
                                      "pipeline_model_parallel_size", "context_parallel_size"))
    dp = num_gpus // (tp * pp * cp)
    micro, global_batch = num("micro_batch_size"), num("global_batch_size")
    accum = global_batch // (micro * dp)
    vpp = num("num_virtual_stages_per_pipeline_rank", 1)
    split = {"pp_first_layers": num("decoder_first_pipeline_num_layers"),
             "pp_last_layers": num("decoder_last_pipeline_num_layers")}
    if "pipeline_model_parallel_layout" in args:  # one stage per model chunk
        chunks = megatron_layout(args["pipeline_model_parallel_layout"][0])
        vpp = len(chunks) // pp
        split = _split_fields([sum(chunks[r::pp]) for r in range(pp)], vpp, layers_per_stage,
                              framework)
    instances = num("num_distributed_optimizer_instances", 1)
    if "use_megatron_fsdp" in args:
        strategy = args["data_parallel_sharding_strategy"][0]
        sharding = {"optim_grads_params": "full", "optim_grads": "grad_op"}[strategy]
        if instances > 1:
            sharding = "hybrid" if sharding == "full" else sharding
    elif "use_distributed_optimizer" in args:
        sharding = "optimizer"
    else:
        sharding = "none"
    group = dp // instances if instances > 1 else None
    sp = "sequence_parallel" in args and tp > 1
    plan = ParallelPlan(
        num_gpus=num_gpus, gpus_per_node=gpus_per_node, sharding=sharding,
        shard_group_size=group, tp=tp, pp=pp, cp=cp, vpp=vpp, framework=framework,
        pp_schedule=("interleaved" if vpp > 1 else "1f1b") if pp > 1 else None,
        **split,
        sequence_parallel=sp, tp_overlap="tp_comm_overlap" in args,
        cp_kind="all2all" if args.get("cp_comm_type") == ["a2a"] else "ring",
        ep=num("expert_model_parallel_size", 1), etp=num("expert_tensor_parallel_size", tp),
        ep_overlap="overlap_moe_expert_parallel_comm" in args)
    granularity = args.get("recompute_granularity", [None])[-1]
    if granularity is None:
        recompute, layers = "none", None
    elif granularity == "selective":
        recompute, layers = "selective", None
    elif args["recompute_method"] == ["uniform"] and num("recompute_num_layers") == 1:
        recompute, layers = "full", None
    else:  # block: the first K of each model chunk
        recompute, layers = "full", num("recompute_num_layers") * vpp
        if layers >= layers_per_stage:
            layers = None
    return RunPlan(canonical(plan), micro, accum, recompute, layers)


__all__ = ["read_torchtitan", "read_megatron"]
