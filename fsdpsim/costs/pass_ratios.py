"""How a kernel's work splits between the forward and the backward pass: the ratios the engine
applies to a forward time or FLOP count (:mod:`fsdpsim.engine.layers`,
:mod:`fsdpsim.engine.metrics`, :mod:`fsdpsim.engine.moe`), in one table.

=================================  =====  ====================================================
constant                           value  source
=================================  =====  ====================================================
``FLASH_ATTENTION_BWD_PER_FWD``    2.5    FlashAttention-2 (Dao 2023, arXiv 2307.08691 §3.1.2,
                                          Alg. 2): the backward runs five matmuls of the
                                          forward's size (S = QKᵀ recomputed, dV, dP, dQ, dK)
                                          against the forward's two; the paper's benchmarks
                                          count backward FLOPs as 2.5 × forward
                                          (``benchmarks/benchmark_flash_attention.py``)
``EAGER_ATTENTION_BWD_PER_FWD``    2.0    eager attention keeps the scores: its backward runs
                                          four matmuls (dV, dP, dQ, dK) against the forward's
                                          two, the 2 × of any matmul (input and weight
                                          gradients: :mod:`fsdpsim.costs.compute`, FLOP
                                          conventions); the s × s score traffic is costed apart
``LOSS_FWD_SHARE``                 0.4    the unfused cross-entropy's bytes per logit
``LOSS_BWD_SHARE``                 0.6    (:data:`fsdpsim.costs.compute.LOSS_BYTES_PER_LOGIT`):
                                          upcast and log-softmax, 14 of 36 B, run in forward,
                                          the rest in backward; 14/36 = 0.39 is rounded to 0.4,
                                          and the fused kernel's 4 B are split the same way:
                                          an engineering estimate, not a measurement
=================================  =====  ====================================================

The executed (HFU) attention FLOPs of a forward and its backward are ``1 + bwd/fwd`` times the
forward's: 3.5 with FlashAttention (the FlashAttention-2 benchmarks' ``fwd_bwd`` count), 3.0
eager (:data:`FLASH_ATTENTION_PASSES`, :data:`EAGER_ATTENTION_PASSES`).
"""

from __future__ import annotations

#: Backward time and FLOPs of FlashAttention over its forward's (recomputes the scores) [-].
FLASH_ATTENTION_BWD_PER_FWD = 2.5
#: Backward time and FLOPs of eager (materialised-scores) attention over its forward's [-].
EAGER_ATTENTION_BWD_PER_FWD = 2.0
#: Forward plus backward attention FLOPs over the forward's, FlashAttention and eager [-].
FLASH_ATTENTION_PASSES = 1.0 + FLASH_ATTENTION_BWD_PER_FWD
EAGER_ATTENTION_PASSES = 1.0 + EAGER_ATTENTION_BWD_PER_FWD
#: Shares of the cross-entropy loss's memory-bound time in the forward and the backward [-].
LOSS_FWD_SHARE = 0.4
LOSS_BWD_SHARE = 0.6
