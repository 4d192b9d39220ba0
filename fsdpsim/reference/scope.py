"""What the reference covers: the dtypes, strategies and frameworks it models, and
:func:`check_scope`, which refuses anything else with a ConfigError naming the setting
(the list is in :mod:`fsdpsim.reference`'s docstring)."""

from __future__ import annotations

from fsdpsim.util.errors import ConfigError

#: Bytes per element of the 16- and 32-bit dtypes (compute, gathers, gradient reduction).
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0}
#: Low-precision GEMM formats: weights gathered and activations kept in 16 bits, only the
#: GEMM operands cast (Transformer Engine fp8_autocast; torchao float8 in torchtitan).
LOW_PRECISION = ("fp8", "fp8-block", "mxfp8", "nvfp4")
#: The shardings (ParallelPlan ``sharding``) and framework profiles (fsdpsim.plan.frameworks)
#: the reference covers.
STRATEGIES = ("full", "grad_op", "optimizer", "none", "hybrid")
FRAMEWORKS = ("fsdp2", "fsdp1", "megatron", "deepspeed-zero3", "nanotron")


def check_scope(model, system, plan, training) -> None:
    """Raise ConfigError naming the first setting outside this reference's scope."""
    def refuse(what, accepted):
        raise ConfigError(f"fsdpsim.reference covers {accepted}; got {what}")
    if model.engine_unsupported or model.is_moe or model.attention_kind == "mla" \
            or model.mtp_layers or model.qk_norm or set(model.attention_pattern) != {"full"}:
        refuse(f"model {model.name!r} (MoE, MLA, MTP, QK-norm or windowed attention)",
               "dense uniform full-attention models")
    for name in ("ep", "vpp"):
        if getattr(plan, name) != 1:
            refuse(f"{name}={getattr(plan, name)}", f"{name}=1 only")
    if plan.pp > 1 and plan.pp_schedule not in ("gpipe", "1f1b", "zb-h1"):
        refuse(f"pp_schedule {plan.pp_schedule!r}", "pipeline schedules gpipe, 1f1b, zb-h1")
    if plan.gpus_per_node % plan.tp:
        refuse(f"tp={plan.tp} across scale-up domains of {plan.gpus_per_node}",
               "tp dividing gpus_per_node")
    if plan.sharding not in STRATEGIES:
        refuse(f"sharding {plan.sharding!r}", f"sharding {', '.join(STRATEGIES)}")
    from fsdpsim.plan.frameworks import canonical

    framework = canonical(plan.framework)
    if framework not in FRAMEWORKS:
        refuse(f"framework {plan.framework!r}", f"frameworks {', '.join(FRAMEWORKS)}")
    if framework == "megatron" and plan.pp > 1 and plan.sharding == "optimizer":
        refuse("megatron's overlapped parameter gather with pipelining", "pp = 1 with it")
    reduce_dtype = training.reduce_dtype or "fp32"
    if reduce_dtype not in DTYPE_BYTES:
        refuse(f"reduce_dtype {training.reduce_dtype!r}", "reduce dtype bf16, fp16 or fp32")
    from fsdpsim.hardware.system import domain_gpus

    if plan.gpus_per_node not in (system.gpus_per_node, domain_gpus(system, plan.num_gpus)):
        raise ConfigError(f"plan gpus_per_node({plan.gpus_per_node}) != system "
                          f"gpus_per_node({system.gpus_per_node})")
    if training.micro_batch is None or training.recompute is None:
        refuse("an auto micro-batch or recompute", "a given micro_batch and recompute")
    if training.recompute == "op-selective" and len(
            {model.qkv_bias, model.attn_out_bias, model.mlp_bias}) > 1:
        refuse(f"op-selective on {model.name!r} (biases on some linear layers only)",
               "op-selective with biases on every linear layer or none")
    # Dense models: Megatron's ``mlp`` module recompute; the MLA and expert modules have
    # nothing to act on.

