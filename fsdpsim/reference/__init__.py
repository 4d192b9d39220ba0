"""A scalar reference model of one training step: read this package first.

``predict(model, system, plan, training)`` returns step time, tokens/s per GPU, MFU, HFU and
the per-GPU peak memory of one configuration, with plain Python floats, one equation per line,
each with its source. It is written from the equations of ``docs/model.md`` and the docstrings
of :mod:`fsdpsim.costs`, not from the vectorised engine (:mod:`fsdpsim.engine`), which it does
not call; ``tests/test_reference.py`` requires both to agree to a relative 1e-9 on random
configurations, so the engine can be rewritten and optimised against it.

Read it in this order: :mod:`.scope` (what is covered), :mod:`.inputs` (the catalog's rates
and the parameter shapes of one rank), :mod:`.layers` (one layer's and the root's compute),
:mod:`.communication` (NCCL, tensor and context parallelism), :mod:`.schedule` (overlap and
the pipeline schedules), :mod:`.memory` (the peak per GPU), :mod:`.flops` (MFU's and HFU's
FLOPs), then :mod:`.step` (:func:`predict`, which composes them stage by stage).

Scope (anything else raises :class:`~fsdpsim.util.errors.ConfigError`, never a silent number):

* dense decoder models with uniform full-attention layers (no MoE, MLA, MTP, QK-norm or
  sliding/chunked attention; :attr:`ModelSpec.engine_unsupported` empty);
* data parallelism: sharding ``full`` (ZeRO-3), ``grad_op`` (ZeRO-2), ``optimizer``
  (ZeRO-1), ``none`` (DDP) or ``hybrid`` (HSDP, any shard group size);
  ``reshard_after_forward``, ``keep_gathered`` and ``grad_sync`` (every / last micro-batch)
  either way;
* tensor parallelism inside one scale-up domain (``tp`` dividing ``gpus_per_node``; Megatron
  column/row split, sequence parallelism and TP overlap on or off);
* pipeline parallelism with the ``gpipe``, ``1f1b`` or ``zb-h1`` schedule (``vpp = 1``;
  given first/last stage layers, or the framework's default split,
  :func:`fsdpsim.plan.pipeline_split.default_split`: every middle stage is timed as the
  busiest one, whose memory is checked beside the ends'); context parallelism, ring or
  Ulysses; ``ep = 1``;
* frameworks ``fsdp2`` (PyTorch ``fully_shard``, the default; every parameter padded),
  ``fsdp1`` (one FlatParameter per unit, padded once), ``megatron``,
  ``deepspeed-zero3`` and ``nanotron`` (the last three Megatron's mixed-precision recipe and
  reentrant checkpoint; Megatron's distributed optimizer overlaps ZeRO-1's parameter gather
  with the next forward, not with pipelining; nanotron adds an fp32 gradient accumulation
  pass after each backward, reduces the gradients one call per 25 MiB DDP bucket and runs
  ZeRO-1's reduce-scatters after the backward, not beside it); all on the catalog's NCCL 2.30
  constants. GEMM and attention
  fractions are the catalog's for the GPU x precision class x the profile's kernel stack
  (:func:`fsdpsim.hardware.efficiency.resolve`; cuDNN fused attention on ``te`` only);
* every precision (16/32-bit, and FP8, FP8 block-scaled, MXFP8, NVFP4 with 16-bit weights,
  activations and attention unless ``fp8_attention`` / ``fp8_lm_head``, ``bf16_layers``
  blended); reduce dtype bf16, fp16 or fp32; AdamW or SGD;
  FlashAttention, fused loss and dropout on or off; recompute ``none``, ``selective``,
  ``full`` or ``op-selective`` (torchtitan's op-level policy: every second matmul's output,
  the attention kernel's and the reduce-scatters' kept, the rest rerun) on every layer or the
  first ``recompute_layers`` of each stage (at most its layers), and Megatron's
  per-module ``mlp`` recompute (``recompute_modules``); CUDA graphs on or off;
* micro-batch and recompute given (``predict``'s ``auto`` search is a driver concern);
* any scale-up link (NVSwitch, PCIe, switchless mesh), any catalog network and cluster
  (fabric decay, oversubscribed pods), power caps, fragmented placement and measured bus
  bandwidths (``--busbw-*-gbs``).

Not covered (refused): ``deepspeed-zero3-2021``, ``internevo``, ``megatron-2021``,
interleaved schedules, ``ep > 1``, TP across scale-up domains.

Symbols: b micro-batch, s sequence length, c the CP degree, T = b·s/c tokens of a micro-batch
on one rank, h = d_model, q and kv the query and key/value widths, f the MLP width, V the
vocabulary, L layers, k gradient-accumulation steps (micro-batches per step), N GPUs, t the
TP degree, S the FSDP shard group, e bytes per activation/parameter element in the compute
dtype, R = peak × achievable matmul fraction [FLOP/s], W = HBM bandwidth × achievable
fraction [B/s].

Where the engine counts something in a way that looks questionable, the reference does the
same (so the two agree) and says so in a comment: each pipeline end stage gathers the whole
root unit; an unpipelined root's fp32 accumulation pass (nanotron) counts its FSDP-padded
size; Megatron's ``mlp`` module recompute frees the MLP internals of every layer of a stage,
though it replays only the first ``recompute_layers``.
"""

from __future__ import annotations

from fsdpsim.reference.communication import (NCCL_PROTOCOLS, PAT_BASE_S, PAT_PER_RANK_S,
                                             bus_bandwidth, context_parallel_s, nccl_time_s,
                                             tensor_parallel_s)
from fsdpsim.reference.inputs import (CAST_BYTES, FP8_ATTENTION_SPEEDUP, NVFP4_BF16_SHARE,
                                      gemm_peak_flops_per_s, members_per_domain, padded_numel,
                                      rates, tp_local_shapes)
from fsdpsim.reference.layers import (FUSED_LOSS_BYTES, LOSS_BYTES, OPS_BASE, OPS_BIAS,
                                      OPS_DOWN_PROJ, OPS_EAGER_ATTN, OPS_RMSNORM, OPS_ROTARY,
                                      OPS_SWIGLU, layer_compute, linear_times_s, root_compute)
from fsdpsim.reference.memory import OPTIMIZER_STATE_BYTES, peak_memory
from fsdpsim.reference.schedule import (pipeline_makespan_s, pipelined_s, schedule_orders,
                                        slowed_s)
from fsdpsim.reference.scope import (DTYPE_BYTES, FRAMEWORKS, LOW_PRECISION, STRATEGIES,
                                     check_scope)
from fsdpsim.reference.step import OPTIMIZER_TRAFFIC_BYTES, predict

__all__ = ["predict", "check_scope", "rates", "layer_compute", "root_compute", "linear_times_s",
           "bus_bandwidth", "nccl_time_s", "tensor_parallel_s", "context_parallel_s",
           "members_per_domain", "tp_local_shapes", "padded_numel", "gemm_peak_flops_per_s",
           "slowed_s", "pipelined_s", "schedule_orders", "pipeline_makespan_s", "peak_memory",
           "DTYPE_BYTES", "LOW_PRECISION", "CAST_BYTES", "FP8_ATTENTION_SPEEDUP",
           "NVFP4_BF16_SHARE", "STRATEGIES", "FRAMEWORKS", "OPS_BASE", "OPS_EAGER_ATTN",
           "OPS_ROTARY", "OPS_SWIGLU", "OPS_RMSNORM", "OPS_BIAS", "OPS_DOWN_PROJ", "LOSS_BYTES",
           "FUSED_LOSS_BYTES", "OPTIMIZER_TRAFFIC_BYTES", "OPTIMIZER_STATE_BYTES",
           "NCCL_PROTOCOLS", "PAT_BASE_S", "PAT_PER_RANK_S"]
