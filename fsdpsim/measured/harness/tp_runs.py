"""Real tensor- and context-parallel steps on CPU (gloo), with every collective counted.

The yardstick for :mod:`fsdpsim.costs.tensor_parallel`:

* :func:`tp_counter` is a ``TorchDispatchMode`` that counts calls and tensor bytes of every
  collective: the ``c10d`` ops (FSDP2, ``torch.distributed`` calls) *and* the functional
  collectives (``_c10d_functional.*``) that DTensor's redistributions and the loss-parallel
  cross-entropy issue. Functional collectives run the process group directly, not through a
  ``c10d`` op, so :func:`fsdpsim.measured.harness.fsdp_runs.comm_counter` does not see them. Like
  torch's ``CommDebugMode`` the counter returns ``NotImplemented`` for ops on DTensors, so it
  sees the collectives DTensor lowers them to.
* :func:`run_tp_case` applies torchtitan-style ``parallelize_module`` plans (``ColwiseParallel``
  / ``RowwiseParallel``, optionally ``SequenceParallel`` norms with ``PrepareModuleInput``, a
  vocab-parallel embedding and LM head with ``loss_parallel``) to the reference model of
  :mod:`fsdpsim.measured.harness.reference`, optionally composed with FSDP2 ``fully_shard`` on the
  ``dp`` dimension of a 2-D mesh, and runs one micro-batch: forward, backward and an AdamW step
  are counted separately. It also reports every parameter's local shape and the per-rank bytes
  of parameters and AdamW states.
* :func:`run_ring_case` runs torch's own ring attention (``_templated_ring_attention`` and its
  backward, ``torch/distributed/tensor/experimental/_context_parallel/_attention.py``) with the
  CPU flash kernel ``aten._scaled_dot_product_flash_attention_for_cpu`` on a head-tail
  load-balanced sequence, counting its collectives, checking its output against unsharded
  attention and counting the attention FLOPs each rank executes.
* :func:`probe_context_parallel` tries the public ``context_parallel`` context manager on CPU.

Byte conventions: tensor bytes as the collective sees them. All-gather: the gathered output;
reduce-scatter: the input; all-reduce: the buffer; all-to-all: the input.

torch is imported inside the functions: importing this module does not import torch.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fsdpsim.model.spec import ModelSpec
from fsdpsim.measured.harness.fsdp_runs import collective_kind, tree_nbytes

#: Collective kinds reported by :func:`tp_counter`.
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "other")
#: Functional-collective namespaces (native, legacy Python, autograd-aware).
_FUNCTIONAL = ("_c10d_functional", "c10d_functional", "_c10d_functional_autograd")
#: Ops in those namespaces that move no data.
_NOT_COLLECTIVES = ("barrier", "monitored_barrier_", "wait_tensor", "_wrap_tensor_autograd")


@functools.cache
def _tp_counter_class() -> type:
    from torch.distributed.tensor import DTensor
    from torch.utils._python_dispatch import TorchDispatchMode

    nbytes = tree_nbytes

    class TpCommCounter(TorchDispatchMode):
        """Calls and bytes of every collective, by kind, and calls by op name.

        ``counts[kind]`` has ``calls`` and ``bytes`` (AG: gathered output; RS: input; AR:
        buffer; all-to-all: input) and ``sizes`` (each call's bytes, in order); ``ops`` has
        ``calls`` and ``bytes`` per op (``c10d.*``: FSDP2 and ``torch.distributed``;
        ``_c10d_functional.*``: DTensor).
        """

        def __init__(self) -> None:
            super().__init__()
            self.counts = {k: {"calls": 0, "bytes": 0, "sizes": []} for k in KINDS}
            self.ops: dict[str, dict[str, int]] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if any(issubclass(t, DTensor) for t in types):
                return NotImplemented  # let DTensor lower the op; count what it issues
            out = func(*args, **kwargs)
            ns, name = func.namespace, func._opname
            if (ns == "c10d" or ns in _FUNCTIONAL) and name not in _NOT_COLLECTIVES:
                kind = collective_kind(name, KINDS)
                if ns == "c10d":  # in-place ops: (output, input, ...), all-reduce (tensors)
                    size = nbytes(args[0]) if kind in ("all_gather", "all_reduce") else (
                        nbytes(args[1]) if len(args) > 1 else nbytes(args[0]))
                elif kind == "all_gather":
                    size = nbytes(out)  # functional: returns the gathered tensor
                else:
                    size = nbytes(args[0])
                self._record(kind, f"{ns}.{name}", size)
            elif ns == "_dtensor" and name == "shard_dim_alltoall":
                self._record("all_to_all", "_dtensor.shard_dim_alltoall", nbytes(args[0]))
            return out

        def _record(self, kind: str, op: str, size: int) -> None:
            rec = self.counts[kind]
            rec["calls"] += 1
            rec["bytes"] += size
            rec["sizes"].append(size)
            by_op = self.ops.setdefault(op, {"calls": 0, "bytes": 0})
            by_op["calls"] += 1
            by_op["bytes"] += size

        def as_dict(self) -> dict[str, Any]:
            kinds = {k: {"calls": v["calls"], "bytes": v["bytes"], "sizes": list(v["sizes"])}
                     for k, v in self.counts.items()}
            return {**kinds, "ops": {k: dict(v) for k, v in self.ops.items()}}

    return TpCommCounter


def tp_counter():
    """A fresh ``TorchDispatchMode`` counting c10d and functional collectives."""
    return _tp_counter_class()()


# ============================================================================ tensor parallel
@dataclass(frozen=True)
class TpCase:
    """One tensor-parallel (optionally 2-D FSDP x TP) forward/backward/step."""

    name: str
    """Key of the result."""
    spec: ModelSpec
    """Architecture (fp32 parameters, manual attention)."""
    tp: int
    """Tensor-parallel degree; the world is ``dp * tp`` ranks, mesh ``("dp", "tp")``."""
    dp: int = 1
    """Data-parallel degree; > 1 applies FSDP2 ``fully_shard`` on the ``dp`` mesh dimension."""
    sequence_parallel: bool = False
    """``SequenceParallel`` on the norms and ``PrepareModuleInput`` (Shard(1) -> Replicate) on
    attention and MLP, row-parallel outputs ``Shard(1)`` (torchtitan ``parallelize_llama``)."""
    parallelize_root: bool = True
    """Embedding ``RowwiseParallel`` (vocab-parallel), LM head ``ColwiseParallel``."""
    loss_parallel: bool = True
    """LM-head output stays ``Shard(-1)`` and the loss runs under ``loss_parallel()``;
    False gathers the logits (``output_layouts=Replicate()``)."""
    micro_batch: int = 2
    """Sequences per micro-batch [-]."""
    seq_len: int = 16
    """Tokens per sequence [-]."""


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _block_plan(sp: bool, gated: bool) -> dict:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(),
            "attn.v": ColwiseParallel(), "mlp.up": ColwiseParallel()}
    if gated:
        plan["mlp.gate"] = ColwiseParallel()
    if sp:
        to_full = dict(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        plan.update({"attn_norm": SequenceParallel(), "attn": PrepareModuleInput(**to_full),
                     "attn.o": RowwiseParallel(output_layouts=Shard(1)),
                     "mlp_norm": SequenceParallel(), "mlp": PrepareModuleInput(**to_full),
                     "mlp.down": RowwiseParallel(output_layouts=Shard(1))})
    else:
        plan.update({"attn.o": RowwiseParallel(), "mlp.down": RowwiseParallel()})
    return plan


def _root_plan(sp: bool, loss_parallel: bool, final_norm: bool) -> dict:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
    )

    logits = dict(output_layouts=Shard(-1) if loss_parallel else Replicate(),
                  use_local_output=not loss_parallel)
    if sp:
        plan = {"tok_emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
                "lm_head": ColwiseParallel(input_layouts=Shard(1), **logits)}
        if final_norm:
            plan["norm"] = SequenceParallel()
        return plan
    return {"tok_emb": RowwiseParallel(input_layouts=Replicate()),
            "lm_head": ColwiseParallel(**logits)}


def _local_heads(spec: ModelSpec, tp: int) -> ModelSpec:
    """The spec one TP rank's attention sees: n_heads / tp query and kv_heads / tp KV heads."""
    return dataclasses.replace(spec, n_heads=spec.n_heads // tp,
                               n_kv_heads=spec.kv_heads // tp, head_dim=spec.head_size)


def _parallelize(model, case: TpCase, mesh):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    tp_mesh = mesh["tp"]
    spec = case.spec
    for block in model.blocks:
        parallelize_module(block, tp_mesh, _block_plan(case.sequence_parallel,
                                                       spec.ffn_kind == "swiglu"))
        block.attn.spec = _local_heads(spec, case.tp)  # view() with the local head count
    if case.parallelize_root:
        parallelize_module(model, tp_mesh, _root_plan(case.sequence_parallel,
                                                      case.loss_parallel, spec.final_norm))
    if case.dp > 1:
        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    return model


def _state(model, optimizer) -> dict[str, Any]:
    """Per-rank bytes of parameters (local shards and their padded storage) and AdamW states,
    and every parameter's local shape."""
    def nbytes(t) -> int:
        return t.numel() * t.element_size()

    params = dict(model.named_parameters())
    storages = {}
    for p in params.values():
        local = _local(p)
        storages[local.untyped_storage().data_ptr()] = local.untyped_storage().nbytes()
    opt_bytes = step_bytes = 0
    for p in params.values():
        for key, value in optimizer.state.get(p, {}).items():
            if key == "step":
                step_bytes += nbytes(_local(value))
            else:
                opt_bytes += nbytes(_local(value))
    return {"params_bytes": sum(nbytes(_local(p)) for p in params.values()),
            "params_storage_bytes": sum(storages.values()),
            "optimizer_bytes": opt_bytes, "step_bytes": step_bytes,
            "n_param_tensors": len(params),
            "placements": {n: [str(x) for x in getattr(p, "placements", ())]
                           for n, p in params.items()}}


def run_tp_case(rank: int, world_size: int, case: TpCase) -> dict[str, Any]:
    """One micro-batch of ``case``: counted forward (with the loss), backward and AdamW step.

    Returns ``{"forward": ..., "backward": ..., "step": ...}`` (:meth:`TpCommCounter.as_dict`),
    ``"full_shapes"`` and ``"tp_shapes"`` (every parameter's shape, and its per-TP-rank shape
    when ``dp == 1``), ``"state"`` (after the step), ``"loss"`` and ``"reference_loss"`` (the
    unparallelised model on the same micro-batch).
    """
    import torch
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel

    from fsdpsim.measured.harness.reference import build_reference_model

    if case.dp * case.tp != world_size:
        raise ValueError(f"dp({case.dp}) * tp({case.tp}) != world_size({world_size})")
    mesh = init_device_mesh("cpu", (case.dp, case.tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)  # same initial weights on every rank
    model = build_reference_model(case.spec, attention="manual")
    full_shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    model = _parallelize(model, case, mesh)
    # Each TP rank's tensor before any FSDP split (a DTensor's local shard, or the whole
    # tensor for parameters the plan leaves alone); with dp > 1 FSDP splits them further.
    tp_shapes = ({n: tuple(_local(p).shape) for n, p in model.named_parameters()}
                 if case.dp == 1 else {})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    dp_rank = mesh["dp"].get_local_rank()
    gen = torch.Generator().manual_seed(1000 + dp_rank)  # same data within a TP group
    idx = torch.randint(0, case.spec.vocab_size, (case.micro_batch, case.seq_len),
                        generator=gen)
    target = idx.roll(-1, dims=1)
    forward, backward, step = tp_counter(), tp_counter(), tp_counter()
    with forward:
        logits = model(idx)
        if case.parallelize_root and case.loss_parallel:
            with loss_parallel():
                loss = F.cross_entropy(logits.flatten(0, 1), target.flatten())
        else:
            loss = F.cross_entropy(logits.flatten(0, 1), target.flatten())
    with backward:
        if case.parallelize_root and case.loss_parallel:
            with loss_parallel():
                loss.backward()
        else:
            loss.backward()
    with step:
        optimizer.step()
    torch.manual_seed(0)  # the same model unparallelised, on the same micro-batch
    reference = build_reference_model(case.spec, attention="manual")
    with torch.no_grad():
        expected = F.cross_entropy(reference(idx).flatten(0, 1), target.flatten())
    return {"forward": forward.as_dict(), "backward": backward.as_dict(),
            "step": step.as_dict(), "full_shapes": full_shapes, "tp_shapes": tp_shapes,
            "state": _state(model, optimizer), "loss": float(_local(loss).detach()),
            "reference_loss": float(expected)}




# ============================================================================ context parallel
@dataclass(frozen=True)
class RingCase:
    """torch's ring attention on a head-tail load-balanced causal sequence."""

    name: str
    """Key of the result."""
    batch: int = 2
    """Sequences [-]."""
    heads: int = 2
    """Heads at the attention kernel (after any GQA repeat) [-]."""
    seq_len: int = 16
    """Tokens per sequence before the CP split; divisible by 2 * cp [-]."""
    head_dim: int = 8
    """Width of one head [-]."""
    rotate: str = "allgather"
    """torch ``_RotateMethod`` for K, V: ``"allgather"`` (torch's default) or ``"alltoall"``;
    dK, dV always rotate with all-to-all."""


@functools.cache
def _register_cpu_sdpa_flops() -> None:
    """Make ``FlopCounterMode`` count the CPU flash-attention kernel (full q x k square)."""
    import torch
    from torch.utils.flop_counter import (
        register_flop_formula,
        sdpa_backward_flop_count,
        sdpa_flop_count,
    )

    aten = torch.ops.aten

    @register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu, get_raw=True)
    def _forward(query, key, value, *args, out_val=None, **kwargs) -> int:
        return sdpa_flop_count(query.shape, key.shape, value.shape)

    @register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu_backward,
                           get_raw=True)
    def _backward(grad_out, query, key, value, *args, out_val=None, **kwargs) -> int:
        return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


def _head_tail(x, rank: int, cp: int, dim: int = 2):
    """Chunks ``rank`` and ``2 cp - 1 - rank`` of ``x`` along ``dim`` (load-balanced causal)."""
    import torch

    chunks = x.chunk(2 * cp, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * cp - 1 - rank]], dim=dim)


def run_ring_case(rank: int, world_size: int, case: RingCase) -> dict[str, Any]:
    """Forward and backward of torch's ring attention on ``world_size`` CP ranks.

    Calls ``_templated_ring_attention`` / ``_templated_ring_attention_backward`` (the code that
    ``context_parallel`` dispatches SDPA to on GPUs) with the CPU flash kernel, load balancing
    on (torch's default). Returns the counted collectives of each pass, the attention FLOPs
    this rank executes (``FlopCounterMode``, full square per kernel call), those of unsharded
    attention, and the largest deviations of output and gradients from unsharded attention.
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor.experimental._context_parallel import _attention as cp_attention
    from torch.utils.flop_counter import FlopCounterMode

    _register_cpu_sdpa_flops()
    aten = torch.ops.aten
    forward_op = aten._scaled_dot_product_flash_attention_for_cpu.default
    backward_op = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    options = cp_attention._cp_options
    options.enable_load_balance = True
    options.rotate_method = {"allgather": cp_attention._RotateMethod.ALL_GATHER,
                             "alltoall": cp_attention._RotateMethod.ALL_TO_ALL}[case.rotate]

    gen = torch.Generator().manual_seed(7)  # the same full tensors on every rank
    shape = (case.batch, case.heads, case.seq_len, case.head_dim)
    q, k, v, dout = (torch.randn(shape, generator=gen) for _ in range(4))
    with FlopCounterMode(display=False) as full_flops:
        ref_out, ref_lse = forward_op(q, k, v, is_causal=True)
    ref_dq, ref_dk, ref_dv = backward_op(dout, q, k, v, ref_out, ref_lse, 0.0, True)

    local = [_head_tail(t, rank, world_size) for t in (q, k, v, dout)]
    group = dist.group.WORLD
    forward, backward = tp_counter(), tp_counter()
    with forward, FlopCounterMode(display=False) as flops:
        out, lse = cp_attention._templated_ring_attention(
            group, 2, forward_op, *local[:3], is_causal=True)
    with backward:
        dq, dk, dv = cp_attention._templated_ring_attention_backward(
            group, 2, backward_op, local[3], "grad_out", *local[:3], out, lse,
            is_causal=True, dropout_p=0.0)[:3]

    def err(a, b) -> float:
        return float((a - _head_tail(b, rank, world_size)).abs().max())

    return {"forward": forward.as_dict(), "backward": backward.as_dict(),
            "attention_flops": int(flops.get_total_flops()),
            "full_attention_flops": int(full_flops.get_total_flops()),
            "max_error": max(err(out, ref_out), err(dq, ref_dq), err(dk, ref_dk),
                             err(dv, ref_dv))}


def probe_context_parallel(rank: int, world_size: int) -> dict[str, Any]:
    """Try the public ``context_parallel`` API with SDPA on CPU tensors.

    Returns ``{"ok": True, ...counts}`` when it runs, else ``{"ok": False, "error": ...}``
    with the exception's type and message.
    """
    import torch
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("cp",))
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 2, 8 * world_size, 8, generator=gen) for _ in range(3))
    counter = tp_counter()
    try:
        with counter, context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    except Exception as exc:  # noqa: BLE001 - the probe reports what torch raised
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    return {"ok": True, "comm": counter.as_dict(), "out_type": type(out).__name__}


def run_all(rank: int, world_size: int, tp_cases: Sequence[TpCase] = (),
            ring_cases: Sequence[RingCase] = (), probe: bool = False) -> dict[str, Any]:
    """Worker for :func:`fsdpsim.measured.harness.fsdp_runs.launch`: every :class:`TpCase` and
    :class:`RingCase` in one spawn, by name, and :func:`probe_context_parallel` under the key
    ``"context_parallel"`` when ``probe``."""
    import torch.distributed as dist

    out: dict[str, Any] = {}
    for case in tp_cases:
        out[case.name] = run_tp_case(rank, world_size, case)
        dist.barrier()
    for case in ring_cases:
        out[case.name] = run_ring_case(rank, world_size, case)
        dist.barrier()
    if probe:
        out["context_parallel"] = probe_context_parallel(rank, world_size)
        dist.barrier()
    return out
