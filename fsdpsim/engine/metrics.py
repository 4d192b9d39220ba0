"""Engine stage 6: metrics of a step: hardware FLOPs for HFU.

Conventions (README glossary): MFU counts the model FLOPs of PaLM (App. B: 6·N_mm per token plus
attention over the full s × s square, no recompute), HFU the FLOPs the hardware executes counted
the same way (the full square, as ``torch.utils.flop_counter`` counts SDPA) plus everything run
again: FlashAttention's backward recomputes the scores (2.5 × the forward instead of 2 ×) and
activation checkpointing repeats the forward. So HFU >= MFU, with equality when nothing is
recomputed. A causal kernel skipping the upper triangle is the kernel's saving, which shows in
the step time (fsdpsim.engine.layers), not a change of either count. Both are measured against
the same peak (the 16-bit dense peak for FP8 training, :func:`fsdpsim.engine.build.system_inputs`).

The binding resource and the thresholds of the seed study (Wang et al. 2025, arXiv
2504.03655) are not engine outputs: :mod:`fsdpsim.drivers.sensitivity` asks the engine itself
how the step responds to each resource, so the bottleneck and the thresholds cannot contradict
each other."""

from __future__ import annotations

import numpy as np

from fsdpsim.costs import compute
from fsdpsim.costs.activations import op_selective_recompute_flops
from fsdpsim.costs.compute import any_of, as_values, where
from fsdpsim.costs.pass_ratios import EAGER_ATTENTION_PASSES, FLASH_ATTENTION_PASSES

#: Exposed communication (or pipeline bubble) at or above this share of the step names it as
#: the bottleneck.
EXPOSED_COMM_BINDS = 0.1


def executed_flops_per_microbatch(g, recompute_fraction):
    """Hardware FLOPs of one micro-batch over its whole model-parallel group [FLOP]: 3x the
    forward of every weight matmul (PaLM), the attention over the full square (the MFU
    convention; a causal kernel's skipped half is not discounted) with FlashAttention's 2.5x
    backward, and the recomputed forward (torch's early-stop checkpoint skips the MLP down
    projection, Megatron's reentrant checkpoint does not) on the share of layers that
    recompute, and there too Megatron's ``mlp`` module recompute (``recompute_modules``, dense
    layers without full recompute; :func:`fsdpsim.engine.module_recompute.mlp_recompute_s`):
    the MLP's up (and gate) and down GEMMs again, 2·T·(3 or 2)·h·f."""
    b, s, L = g.micro_batch, g.seq_len, g.n_layers
    tokens = b * s
    swiglu, flash = g.swiglu > 0, g.flash > 0
    recompute = as_values(g.recompute)
    attn_flops_fwd = compute.attention_flops_fwd(b, s, g.q_dim, causal=False)
    layer_mm = compute.layer_matmul_flops_fwd(tokens, g.d_model, g.q_dim, g.kv_dim,
                                              g.ffn_size, swiglu, g.active_experts)
    # torch's early-stop checkpoint skips the down projection; Megatron's recomputes it.
    down_fwd_flops = where(g.megatron > 0, 0.0,
                           2.0 * tokens * g.d_model * g.ffn_size * g.active_experts)
    mlp_fwd_flops = where((g.rc_mlp > 0) & (recompute != 2) & (g.active_experts <= 1),
                          2.0 * tokens * where(swiglu, 3.0, 2.0) * g.d_model * g.ffn_size,
                          0.0)
    # torchtitan's op-level policy: the matmuls it does not save (activations [5])
    op_flops = (op_selective_recompute_flops(tokens, g.d_model, g.q_dim, g.kv_dim,
                                             g.ffn_size, g.linear_bias > 0)
                if any_of(recompute == 3) else 0.0)
    return (L * (3.0 * layer_mm + where(flash, FLASH_ATTENTION_PASSES, EAGER_ATTENTION_PASSES)
                 * attn_flops_fwd)
            + 3.0 * compute.lm_head_flops_fwd(tokens, g.d_model, g.vocab_size)
            + L * (where(recompute == 2, layer_mm - down_fwd_flops + attn_flops_fwd,
                         where(recompute == 1, attn_flops_fwd,
                               where(recompute == 3, op_flops, 0.0)))
                   + mlp_fwd_flops) * recompute_fraction)
