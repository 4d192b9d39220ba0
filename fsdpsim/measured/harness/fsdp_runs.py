"""Real FSDP training steps on CPU (gloo), counted exactly: collectives, FLOPs, sharded state.

The yardstick for :func:`fsdpsim.engine.evaluate`'s per-step numbers:

* :func:`launch` runs a worker function in ``W`` spawned processes joined by a gloo process
  group (MASTER_ADDR 127.0.0.1, a free port per run, one intra-op thread per rank) and returns
  every rank's result; a hard timeout turns a hung collective into an error.
* :func:`comm_counter` is a ``TorchDispatchMode`` that intercepts every ``torch.ops.c10d.*``
  collective, also those issued inside autograd hooks. FSDP2 in torch 2.13 calls
  ``dist.all_gather_single`` / ``dist.reduce_scatter_single`` (``c10d._allgather_base_``,
  ``c10d._reduce_scatter_base_``) and FSDP1 on gloo the list-based ``c10d.allgather_``, so
  patching ``dist.all_gather_into_tensor`` would record nothing
  (``tests/data/reference/torch_validation_on_cpu.md`` §2).
* :func:`run_cases` (the worker) trains one small :func:`~fsdpsim.measured.harness.reference.
  build_reference_model` per :class:`RunCase` (FSDP2 ``fully_shard`` or FSDP1, any sharding
  strategy, gradient accumulation) for a few full steps (forward, backward, AdamW) and returns,
  per step, the collectives counted on that rank and, after the step, the bytes of its
  sharded parameters, gradients and AdamW states. :func:`count_flops` counts one forward and
  backward with ``FlopCounterMode``.

Byte conventions are those of the engine: tensor bytes, not wire bytes. All-gather: the
gathered output (``in_bytes`` is the local shard). Reduce-scatter: the padded input
(``out_bytes`` is the shard). All-reduce: the buffer.

torch is imported inside the functions: importing this module does not import torch.
"""

from __future__ import annotations

import functools
import os
import queue as queue_module
import socket
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fsdpsim.model.spec import ModelSpec

Wrapper = Literal["fsdp2", "fsdp1"]
Fsdp1Strategy = Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"]
#: Collective kinds reported by :func:`comm_counter`.
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "other")
#: c10d ops that move no tensor data and are not counted.
_NOT_COLLECTIVES = ("barrier", "monitored_barrier_")


class RunError(RuntimeError):
    """A spawned rank failed, died or did not finish within the timeout."""


# ============================================================================ launcher
def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (bind to port 0 and read it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(worker: Callable, rank: int, world_size: int, port: int, args: tuple,
               result_queue, timeout_s: float) -> None:
    """Entry point of one spawned rank: join the gloo group, run ``worker``, report back."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    try:
        import datetime

        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)  # 1 thread per rank: W ranks on few cores do not oversubscribe
        dist.init_process_group("gloo", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        try:
            result = worker(rank, world_size, *args)
            # Leave together: tearing gloo down while a peer still talks to it aborts the
            # process ("terminate called without an active exception").
            dist.barrier()
        finally:
            dist.destroy_process_group()
        result_queue.put((rank, True, result))
    except BaseException:  # noqa: BLE001 - every failure goes back to the parent as text
        result_queue.put((rank, False, traceback.format_exc()))


def launch(worker: Callable, world_size: int, args: Sequence[Any] = (), *,
           timeout_s: float = 120.0) -> list[Any]:
    """Run ``worker(rank, world_size, *args)`` on ``world_size`` spawned gloo ranks.

    Parameters
    ----------
    worker : a module-level (picklable) function; its return value must be picklable
    world_size : W, processes in the group [-]
    args : further positional arguments of ``worker``
    timeout_s : hard limit for the whole run, start-up included [s]; also the process
        group's timeout, so a collective that never completes raises in the ranks too

    Returns
    -------
    The ``worker`` results, indexed by rank.

    Raises
    ------
    RunError
        When a rank raises (its traceback is in the message), dies without reporting, or the
        run exceeds ``timeout_s``. Every spawned process is killed before this returns.
    """
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results_q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank_main, daemon=True, name=f"fsdpsim-rank{rank}",
                         args=(worker, rank, world_size, port, tuple(args), results_q,
                               timeout_s))
             for rank in range(world_size)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = sorted(set(range(world_size)) - set(results))
                raise RunError(f"{world_size}-rank run timed out after {timeout_s:.0f} s; "
                               f"ranks {missing} did not report (hung collective?)")
            try:
                rank, ok, payload = results_q.get(timeout=min(remaining, 0.5))
            except queue_module.Empty:
                dead = {p.name: p.exitcode for p in procs if p.exitcode not in (None, 0)}
                if dead:
                    raise RunError(f"ranks died without reporting: exit codes {dead}") from None
                continue
            if not ok:
                raise RunError(f"rank {rank} of {world_size} failed:\n{payload}")
            results[rank] = payload
    finally:
        for p in procs:
            p.join(timeout=10.0 if len(results) == world_size else 0.1)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        results_q.close()
        results_q.join_thread()
    return [results[r] for r in range(world_size)]


def launcher_probe(rank: int, world_size: int, behaviour: str) -> int:
    """A worker for testing :func:`launch` itself: ``"ok"`` returns the rank, ``"fail"``
    raises on rank 0 while the others block forever, ``"hang"`` blocks on every rank."""
    if behaviour == "fail" and rank == 0:
        raise ValueError(f"probe failure on rank {rank} of {world_size}")
    if behaviour in ("fail", "hang"):
        while True:
            time.sleep(1.0)
    return rank


# ============================================================================ counting
#: Collective kinds by the words of their op names (c10d and functional spellings).
_KIND_WORDS = (("all_gather", ("allgather", "all_gather")),
               ("reduce_scatter", ("reduce_scatter",)),
               ("all_reduce", ("allreduce", "all_reduce")),
               ("all_to_all", ("alltoall", "all_to_all")))


def collective_kind(opname: str, kinds: Sequence[str] = KINDS) -> str:
    """The collective an op name runs, if it is one of ``kinds``; else ``"other"``."""
    for kind, words in _KIND_WORDS:
        if any(word in opname for word in words):
            return kind if kind in kinds else "other"
    return "other"


def tree_nbytes(tree) -> int:
    """Bytes of every tensor in a pytree of op arguments or results."""
    import torch
    from torch.utils._pytree import tree_leaves

    return sum(t.numel() * t.element_size() for t in tree_leaves(tree)
               if isinstance(t, torch.Tensor))


@functools.cache
def _comm_counter_class() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    nbytes = tree_nbytes

    class CommCounter(TorchDispatchMode):
        """Counts calls and tensor bytes of every ``c10d`` collective run under it.

        ``counts[kind]`` has ``calls``, ``out_bytes`` and ``in_bytes``; ``ops`` maps each
        c10d op name to its calls. all-gather: out = gathered output, in = local shard;
        reduce-scatter: out = shard, in = padded input; all-reduce: out = in = buffer.
        """

        def __init__(self) -> None:
            super().__init__()
            self.counts = {k: {"calls": 0, "out_bytes": 0, "in_bytes": 0} for k in KINDS}
            self.ops: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func.namespace == "c10d" and func._opname not in _NOT_COLLECTIVES:
                kind = collective_kind(func._opname)
                rec = self.counts[kind]
                rec["calls"] += 1
                self.ops[func._opname] = self.ops.get(func._opname, 0) + 1
                if kind == "all_reduce":
                    rec["out_bytes"] += nbytes(args[0])
                    rec["in_bytes"] += nbytes(args[0])
                elif kind != "other":
                    rec["out_bytes"] += nbytes(args[0])  # c10d ops take (output, input, ...)
                    rec["in_bytes"] += nbytes(args[1])
            return func(*args, **kwargs)

        def as_dict(self) -> dict[str, Any]:
            return {**{k: dict(v) for k, v in self.counts.items()}, "ops": dict(self.ops)}

    return CommCounter


def comm_counter():
    """A fresh ``TorchDispatchMode`` counting c10d collectives (use as a context manager)."""
    return _comm_counter_class()()


def count_flops(spec: ModelSpec, *, batch: int, seq_len: int, checkpoint: bool = False,
                early_stop: bool = True, attention: str = "manual", seed: int = 0) -> int:
    """FLOPs that ``FlopCounterMode`` counts for one forward and backward of the reference
    model (cross-entropy loss on next-token targets), on one process [FLOP].

    ``checkpoint=True`` wraps every block in non-reentrant ``torch.utils.checkpoint``: the
    backward recomputes each block's forward, and the counter sees it. With ``early_stop``
    (torch's default, ``torch.utils.checkpoint.set_checkpoint_early_stop``) the recompute
    stops once every tensor saved for backward is back, so a block's trailing ops whose
    outputs backward does not need (the MLP down projection and the residual add) are not
    recomputed; ``early_stop=False`` recomputes the whole block forward.
    """
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import set_checkpoint_early_stop
    from torch.utils.flop_counter import FlopCounterMode

    from fsdpsim.measured.harness.reference import build_reference_model

    torch.manual_seed(seed)
    model = build_reference_model(spec, attention=attention)
    if checkpoint:
        model.blocks = torch.nn.ModuleList(_checkpointed_class()(b) for b in model.blocks)
    idx = torch.randint(0, spec.vocab_size, (batch, seq_len))
    with set_checkpoint_early_stop(early_stop), FlopCounterMode(display=False) as counter:
        logits = model(idx)
        F.cross_entropy(logits.flatten(0, 1), idx.roll(-1, dims=1).flatten()).backward()
    return int(counter.get_total_flops())


@functools.cache
def _checkpointed_class() -> type:
    import torch
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(torch.nn.Module):
        """A block whose forward runs under non-reentrant activation checkpointing."""

        def __init__(self, block: torch.nn.Module) -> None:
            super().__init__()
            self.block = block

        def forward(self, x):
            return checkpoint(self.block, x, use_reentrant=False)

    return Checkpointed


# ============================================================================ training runs
@dataclass(frozen=True)
class RunCase:
    """One wrapped model trained for a few steps inside :func:`run_cases`."""

    name: str
    """Key of the result."""
    spec: ModelSpec
    """Architecture of the reference model (fp32 parameters, manual attention)."""
    wrapper: Wrapper = "fsdp2"
    """``"fsdp2"``: ``fully_shard`` on every block, then on the root. ``"fsdp1"``:
    ``FullyShardedDataParallel`` with ``ModuleWrapPolicy({Block})``."""
    reshard_after_forward: bool | None = None
    """FSDP2 only: passed to every ``fully_shard`` call, blocks and root alike. None is torch's
    default (True for the blocks, False for the root)."""
    fsdp1_strategy: Fsdp1Strategy = "FULL_SHARD"
    """FSDP1 only: the ``ShardingStrategy``."""
    mesh_shape: tuple[int, int] | None = None
    """(replicate, shard) 2-D mesh for HSDP / HYBRID_SHARD; None = one flat group."""
    micro_batch: int = 2
    """Sequences per rank per forward/backward [-]."""
    seq_len: int = 32
    """Tokens per sequence [-]."""
    grad_accum: int = 1
    """Micro-batches per optimizer step [-]."""
    no_sync: bool = False
    """FSDP1: run all but the last micro-batch under ``model.no_sync()``."""
    grad_sync_last: bool = False
    """FSDP2: ``set_requires_gradient_sync(False)`` for all but the last micro-batch."""
    keep_gathered: bool = False
    """FSDP2: ``set_reshard_after_backward(False)`` for all but the last micro-batch (with
    ``reshard_after_forward=False``: each unit is gathered once per step)."""
    steps: int = 2
    """Optimizer steps; collectives are counted per step."""
    state_bytes: bool = False
    """Also measure the per-rank bytes of parameters, gradients and AdamW states after each
    step (before ``zero_grad``)."""


def _local(t):
    """The local shard of a DTensor, or the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _state_bytes(model, optimizer) -> dict[str, int]:
    """Bytes of this rank's parameters, their gradients and AdamW states.

    Each value counts the elements this rank holds (a DTensor's local shard, without FSDP2's
    padding: a rank whose chunk of dim 0 is short holds fewer rows). ``*_storage_bytes`` is
    the padded storage behind the local parameter shards (FSDP2 keeps every rank's shard
    ``ceil(d0/W)`` rows long, with the padding after the data). ``step_bytes`` are AdamW's
    step counters (one scalar tensor per parameter), reported apart.
    """
    def nbytes(t) -> int:
        return t.numel() * t.element_size()

    params = list(model.parameters())
    out = {"params_bytes": sum(nbytes(_local(p)) for p in params),
           "grads_bytes": sum(nbytes(_local(p.grad)) for p in params if p.grad is not None),
           "optimizer_bytes": 0, "step_bytes": 0, "n_param_tensors": len(params)}
    for p in params:
        for key, value in optimizer.state.get(p, {}).items():
            if key == "step":
                out["step_bytes"] += nbytes(_local(value))
            else:
                out["optimizer_bytes"] += nbytes(_local(value))
    storages = {}
    for p in params:
        local = _local(p)
        storages[local.untyped_storage().data_ptr()] = local.untyped_storage().nbytes()
    out["params_storage_bytes"] = sum(storages.values())
    return out


def _wrap(model, case: RunCase, world_size: int):
    import torch

    mesh = None
    if case.mesh_shape is not None:
        from torch.distributed.device_mesh import init_device_mesh

        replicate, shard = case.mesh_shape
        if replicate * shard != world_size:
            raise ValueError(f"mesh_shape {case.mesh_shape}: replicate({replicate}) * "
                             f"shard({shard}) != world_size({world_size})")
        mesh = init_device_mesh("cpu", case.mesh_shape, mesh_dim_names=("replicate", "shard"))
    if case.wrapper == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        kwargs = {"reshard_after_forward": case.reshard_after_forward}
        if mesh is not None:
            kwargs["mesh"] = mesh
        for block in model.blocks:
            fully_shard(block, **kwargs)
        return fully_shard(model, **kwargs)
    if case.wrapper == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        from fsdpsim.measured.harness.reference import Block

        kwargs = {"device_mesh": mesh} if mesh is not None else {}
        with warnings.catch_warnings():  # NO_SHARD is deprecated in favour of DDP; still runs
            warnings.filterwarnings("ignore", message="The `NO_SHARD` sharding strategy",
                                    category=FutureWarning)
            return FullyShardedDataParallel(
                model, auto_wrap_policy=ModuleWrapPolicy({Block}),
                sharding_strategy=ShardingStrategy[case.fsdp1_strategy],
                device_id=torch.device("cpu"), **kwargs)
    raise ValueError(f"wrapper {case.wrapper!r} is not one of: fsdp2, fsdp1")


def run_case(rank: int, world_size: int, case: RunCase) -> dict[str, Any]:
    """Train ``case`` for ``case.steps`` steps on this rank; counts per step.

    Returns ``{"steps": [{"comm": ..., "state": ..., "loss": ...}, ...]}`` where ``comm`` is
    :meth:`CommCounter.as_dict` over the whole step (every micro-batch's forward and backward,
    the AdamW step and ``zero_grad``).
    """
    import contextlib

    import torch
    import torch.nn.functional as F

    from fsdpsim.measured.harness.reference import build_reference_model

    torch.manual_seed(0)  # same initial weights on every rank
    model = _wrap(build_reference_model(case.spec, attention="manual"), case, world_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    gen = torch.Generator().manual_seed(1000 + rank)  # different data on every rank
    steps = []
    for _ in range(case.steps):
        counter = comm_counter()
        with counter:
            losses = []
            for mb in range(case.grad_accum):
                idx = torch.randint(0, case.spec.vocab_size, (case.micro_batch, case.seq_len),
                                    generator=gen)
                last = mb == case.grad_accum - 1
                sync = (model.no_sync() if case.no_sync and not last
                        else contextlib.nullcontext())
                if case.grad_sync_last:
                    model.set_requires_gradient_sync(last)
                if case.keep_gathered:
                    model.set_reshard_after_backward(last)
                with sync:
                    logits = model(idx)
                    loss = F.cross_entropy(logits.flatten(0, 1), idx.roll(-1, dims=1).flatten())
                    (loss / case.grad_accum).backward()
                losses.append(loss.detach().item())
            optimizer.step()
            state = _state_bytes(model, optimizer) if case.state_bytes else None
            optimizer.zero_grad()
        steps.append({"comm": counter.as_dict(), "state": state, "loss": losses})
    return {"steps": steps}


def run_cases(rank: int, world_size: int, cases: Sequence[RunCase]) -> dict[str, Any]:
    """Worker for :func:`launch`: :func:`run_case` for each case in turn, by name."""
    import torch.distributed as dist

    out = {}
    for case in cases:
        out[case.name] = run_case(rank, world_size, case)
        dist.barrier()
    return out
