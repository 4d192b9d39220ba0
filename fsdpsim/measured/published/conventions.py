"""What a framework named by a published row does where the row does not say: the profile it
runs and its defaults beyond :data:`fsdpsim.plan.frameworks.KNOB_DEFAULTS`, matched by words of
the row's ``framework`` text (:func:`framework_conventions`)."""

from __future__ import annotations

from typing import Any

#: What a framework named by a published row does where the row does not say, in the releases
#: the published tables come from (the profile it runs and its defaults beyond
#: :data:`fsdpsim.plan.frameworks.KNOB_DEFAULTS`); matched (first match wins) by words of the
#: row's ``framework`` text.
#:
#: * Megatron-Core (NeMo 1.x/2.0, Megatron-Bridge): the distributed optimizer (ZeRO-1: optimizer
#:   states sharded over the data-parallel group), sequence parallelism with TP and the fused
#:   cross-entropy and no layer kept in BF16 (the ``megatron`` profile's knob defaults,
#:   :data:`fsdpsim.plan.frameworks.KNOB_DEFAULTS`), as their performance recipes set them
#:   (Megatron-Bridge "Performance tuning guide"; NeMo ``llama3_70b`` recipes:
#:   ``use_distributed_optimizer``, ``sequence_parallel=True``), and fused attention
#:   (Transformer Engine's flash/cuDNN backends); no activation recompute unless the row says
#:   so (``TransformerConfig.recompute_granularity = None`` by default; the performance
#:   summaries list recompute only where their configs set it).
#: * Megatron-LM PTD-P (Narayanan et al., SC21, arXiv 2104.04473 §2.2): the interleaved 1F1B
#:   schedule; the paper states no chunk count, so it is chosen as ``auto``.
#: * InternEvo: ``sequence_parallel=False`` in its 7B configs (doc/en/train_performance.md).
#: * ``dropout``: GPT training in Megatron-LM (``--attention-dropout 0.1 --hidden-dropout 0.1``,
#:   arguments.py defaults) and OneFlow-GPT (its Megatron port); Llama-style recipes use none.
#:   OneFlow-GPT runs the ``megatron`` profile without its fused cross-entropy.
#: * ``profile``: the framework profile (:mod:`fsdpsim.plan.frameworks`: recipe, collective library
#:   release, granularity and overlap of data-parallel collectives). Megatron and its
#:   descendants keep bf16/fp16 parameters, fp32 main gradients and the fp32 master copy with
#:   the (distributed) optimizer; InternEvo's hybrid ZeRO does the same with its own
#:   collectives (``internevo``: gradients all-reduced, parameters broadcast by each shard's
#:   owner within its ``zero1`` group, read from the row's ``zero1=N``). Megatron-LM before
#:   Megatron-Core (2020-21: SC21's PTD-P, DLPerf's NGC 20.12 runs) all-reduced gradients after
#:   the backward (``megatron-2021``); SC21's DeepSpeed ZeRO-3 rows ran DeepSpeed's 2021 stage 3
#:   (``deepspeed-zero3-2021``); Composer's FSDP in torch 2.1 is FSDP1.
#: * nanotron (v0.5): TP in ``REDUCE_SCATTER`` mode is sequence parallelism; flash_attn 2; no
#:   recompute unless configured (``recompute_layer`` is False by default,
#:   ``config/models_config``);
#:   the ``nanotron`` profile (fp32 gradient accumulation, DDP hook, ZeRO-1 gather after the step).
#: * torchtitan: sequence parallelism in its TP plan (``SequenceParallel`` on the norms); its
#:   selective checkpointing is the op-level policy (``ac_mode = "selective"`` with its default
#:   ``selective_ac_option = "op"``, torchtitan/distributed/activation_checkpoint.py
#:   ``SelectiveAC``): ``op-selective`` (the ``selective`` key: what a row's "selective" means).
#: Any other framework: sequence parallelism off (Megatron-LM's ``--sequence-parallel`` is opt-in
#: and did not exist before 2022), data-parallel sharding as the row's words say.
FRAMEWORK_CONVENTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("megatron-core", "megatron-bridge", "nemo"),
     {"name": "Megatron-Core", "sharding": "optimizer", "sequence_parallel": True,
      "flash": True, "profile": "megatron", "recompute": "none"}),
    (("ptd-p",), {"name": "Megatron-LM PTD-P", "interleaved": True, "profile": "megatron-2021",
                  "dropout": True}),
    (("internevo", "internlm"), {"name": "InternEvo", "sequence_parallel": False,
                                 "profile": "internevo"}),
    (("deepspeed zero-3", "deepspeed zero3"),
     {"name": "DeepSpeed ZeRO-3 (2021)", "profile": "deepspeed-zero3-2021", "dropout": True}),
    (("megatron",), {"name": "Megatron-LM", "profile": "megatron-2021", "dropout": True}),
    (("oneflow",), {"name": "OneFlow-GPT", "profile": "megatron", "dropout": True,
                    "fused_loss": False}),
    (("nanotron",), {"name": "nanotron", "profile": "nanotron", "sequence_parallel": True,
                     "flash": True, "recompute": "none"}),
    (("torchtitan",), {"name": "torchtitan", "sequence_parallel": True,
                       "selective": "op-selective"}),
    (("composer",), {"name": "Composer (PyTorch FSDP1)", "profile": "fsdp1"}),
)

#: Words of a ``framework`` text that name PyTorch's own data parallelism, which the default
#: profile (``fsdp2``) models without conventions of its own ("PyTorch" alone does not: other
#: frameworks run on it, e.g. "nanotron v0.5 (PyTorch)").
PYTORCH_WORDS = ("fsdp", "ddp")


def framework_conventions(framework: str) -> dict[str, Any]:
    """The :data:`FRAMEWORK_CONVENTIONS` entry whose words appear in ``framework``; {} if none."""
    low = framework.lower()
    for words, conventions in FRAMEWORK_CONVENTIONS:
        if any(w in low for w in words):
            return conventions
    return {}


def unrecognised(framework: str) -> bool:
    """Whether a row's ``framework`` text names no framework fsdpsim reads: none of
    :data:`FRAMEWORK_CONVENTIONS` and no PyTorch data parallelism (:data:`PYTORCH_WORDS`). Such a
    row is modelled with the default profile (PyTorch FSDP2), which a reader should be told: a
    misspelt or foreign framework would otherwise be predicted as FSDP2 without a word."""
    low = str(framework).strip().lower()
    return bool(low) and not framework_conventions(low) and not any(
        w in low for w in PYTORCH_WORDS)
