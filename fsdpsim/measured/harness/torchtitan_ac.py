"""torchtitan's op-level selective activation checkpointing, run on a CPU block.

torchtitan's default selective checkpointing (``ac_mode = "selective"``,
``selective_ac_option = "op"``) wraps each transformer block in
``torch.utils.checkpoint`` with a policy of ``create_selective_checkpoint_contexts``
(pytorch/torchtitan @b5bcd76c, ``torchtitan/distributed/activation_checkpoint.py``:
``SelectiveAC._wrap_block``, ``_get_custom_policy``, ``_get_default_save_ops``):

* the outputs of the ops on its save list are kept (``MUST_SAVE``): the compute-intensive ops
  of ``torch._functorch.partitioners.get_default_op_list`` (``mm``, ``bmm``, ``addmm``, the SDPA
  and flash/efficient attention kernels, ...), the other SDPA variants, ``aten.max``,
  ``aten.linear``, ``aten.topk``, and the ``reduce_scatter_tensor`` / ``all_to_all_single``
  functional collectives;
* of ``aten.mm`` / ``aten.linear``, every second call of a block is recomputed instead (a
  counter per forward and per recompute);
* everything else is recomputed in backward (``PREFER_RECOMPUTE``).

:func:`op_policy` is that policy (the MoE router's forced recompute by weight shape and the
CUDA-to-CPU copies do not occur in a dense CPU block and are left out). It also records the
storages of the outputs it keeps, so :func:`op_selective_saved_bytes` can count what one block
holds for backward: the block input (kept by the checkpoint, seen by ``saved_tensors_hooks``)
plus the cached outputs. Compared with fsdpsim's ``op-selective`` term
(:func:`fsdpsim.costs.activations.saved_bytes_by_policy`) in ``tests/test_torch_memory.py``.

On a CPU, ``F.scaled_dot_product_attention`` runs ``_scaled_dot_product_flash_attention_for_cpu``,
the CPU counterpart of the CUDA flash kernel on the list (same outputs: the attention output and
the fp32 row logsumexp); :func:`default_save_ops` adds it.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def default_save_ops() -> set:
    """torchtitan's ``_get_default_save_ops`` (the ops whose outputs are kept), plus the CPU
    flash-attention kernel (module docstring)."""
    import torch
    from torch._functorch.partitioners import get_default_op_list

    aten = torch.ops.aten
    ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    ops |= {aten._scaled_dot_product_cudnn_attention.default,
            aten._scaled_dot_product_attention_math.default,
            aten._scaled_dot_product_fused_attention_overrideable.default,
            aten.max.default, aten.linear.default, aten.topk.default,
            torch.ops._c10d_functional.reduce_scatter_tensor.default,
            torch.ops._c10d_functional.all_to_all_single.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default}
    return ops


def op_policy(saved: dict[int, int], save_ops: set | None = None):
    """torchtitan's ``_get_custom_policy`` for one block; the storages of the outputs it keeps
    in forward go to ``saved`` (storage id -> bytes)."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy

    save_ops = default_save_ops() if save_ops is None else save_ops
    mm_ops = (torch.ops.aten.mm.default, torch.ops.aten.linear.default)
    meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        key = f"{mode}_mm_count"
        if func in mm_ops:
            meta[key] += 1
        if func in save_ops:
            if func in mm_ops and meta[key] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
            if not ctx.is_recompute:
                _record(saved, getattr(ctx, "op_output", None))
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _record(saved: dict[int, int], output: Any) -> None:
    import torch
    from torch.utils._pytree import tree_leaves

    for t in tree_leaves(output):
        if isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            saved.setdefault(storage._cdata, storage.nbytes())


def op_selective_saved_bytes(spec, micro_batch: int, seq_len: int,
                             attention: str = "sdpa") -> dict[str, int]:
    """Bytes one block of ``spec``
    (:func:`fsdpsim.measured.harness.reference.build_reference_model`, bf16, under
    ``FakeTensorMode``) keeps for backward under torchtitan's op-level policy: ``{"input": the block
    input the checkpoint keeps, "cached": the policy's kept outputs, "total": their sum}`` [B]
    (unique storages, parameters excluded)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    from fsdpsim.measured.harness.reference import build_reference_model

    from fsdpsim.measured.harness.fake_memory import saved_storages

    one = dataclasses.replace(spec, n_layers=1)
    cached: dict[int, int] = {}
    with FakeTensorMode():
        block = build_reference_model(one, dtype=torch.bfloat16, device="cpu",
                                      attention=attention).blocks[0]
        params = {p.untyped_storage()._cdata for p in block.parameters()}
        x = torch.randn(micro_batch, seq_len, one.d_model, dtype=torch.bfloat16,
                        requires_grad=True)
        policy = op_policy(cached)
        with saved_storages(params) as hooked:
            out = checkpoint(block, x, use_reentrant=False,
                             context_fn=lambda: create_selective_checkpoint_contexts(policy))
            del out
    only_cached = {k: v for k, v in cached.items() if k not in hooked and k not in params}
    return {"input": sum(hooked.values()), "cached": sum(only_cached.values()),
            "total": sum(hooked.values()) + sum(only_cached.values())}


def op_selective_rerun_flops(spec, micro_batch: int, seq_len: int) -> int:
    """FLOPs one block of ``spec`` runs again in backward under torchtitan's op-level policy:
    ``torch.utils.flop_counter.FlopCounterMode`` over forward + backward with the policy, less
    the same without checkpointing [FLOP] (fake tensors, bf16, SDPA attention)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts
    from torch.utils.flop_counter import FlopCounterMode

    from fsdpsim.measured.harness.reference import build_reference_model

    one = dataclasses.replace(spec, n_layers=1)
    totals = []
    with FakeTensorMode():
        block = build_reference_model(one, dtype=torch.bfloat16, device="cpu",
                                      attention="sdpa").blocks[0]
        for checkpointed in (True, False):
            x = torch.randn(micro_batch, seq_len, one.d_model, dtype=torch.bfloat16,
                            requires_grad=True)
            counter = FlopCounterMode(display=False)
            with counter:
                if checkpointed:
                    policy = op_policy({})
                    y = checkpoint(block, x, use_reentrant=False,
                                   context_fn=lambda: create_selective_checkpoint_contexts(policy))
                else:
                    y = block(x)
                y.sum().backward()
            totals.append(counter.get_total_flops())
    return totals[0] - totals[1]
