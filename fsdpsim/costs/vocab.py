"""The vocabulary a vocab-parallel embedding and LM head hold: one rule for the engine's builder
(:func:`fsdpsim.engine.build.model_inputs`) and the published-row reader
(:mod:`fsdpsim.measured.published.tables`).

Source: Megatron-LM ``megatron/training/tokenizer/tokenizer.py`` ``_vocab_size_with_padding``
and ``megatron/training/arguments.py`` (``--make-vocab-size-divisible-by``, default 128), times
the tensor-parallel degree.
"""

from __future__ import annotations

#: Megatron's default ``--make-vocab-size-divisible-by``: the vocabulary is padded to a multiple
#: of this times the TP degree.
VOCAB_MULTIPLE = 128


def padded_vocab(vocab_size: int, tp: int) -> int:
    """The vocabulary a vocab-parallel embedding and LM head hold [-]: with ``tp > 1``,
    Megatron's padding to a multiple of :data:`VOCAB_MULTIPLE` · tp so the rows split evenly
    (``_vocab_size_with_padding``: ``ceil(V / (128·tp)) · 128·tp``); with ``tp = 1`` the
    model's own (a single-rank embedding keeps its size)."""
    if tp <= 1:
        return vocab_size
    multiple = VOCAB_MULTIPLE * tp
    return -(-vocab_size // multiple) * multiple


__all__ = ["VOCAB_MULTIPLE", "padded_vocab"]
