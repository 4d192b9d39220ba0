"""Per-rank memory of FSDP2 training at real model sizes, measured on a CPU without a GPU.

The recipe fsdpsim assumes is run for real, with fake tensors: the model is built under
``FakeTensorMode`` (shapes and dtypes, no data), sharded with FSDP2 ``fully_shard`` (each block,
then the root) over the fake process group at the requested world size, computes in bf16 under
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` with fp32 sharded parameters and
AdamW, and torch's ``FSDPMemTracker`` counts the bytes of every live tensor storage by category
([1] §4b). One tracked forward + backward of a 7B model takes seconds and a few hundred MB.

What is measured, per rank:

* :func:`measure_memory`: the tracker's categories at the step's peak and at the start of
  backward (after the loss), plus the bytes of the CPU-only RMSNorm tensors alive at the peak.
* :func:`saved_bytes_per_layer`: the bytes one block saves for backward (unique storages handed
  to autograd's saved-tensor hooks), which pins the activation term down exactly.
* :func:`loss_peak_bytes`: the peak of the LM head output and ``F.cross_entropy`` on its fp32
  upcast, alone.

and :func:`fsdpsim_memory` is what fsdpsim predicts for the same case
(:func:`fsdpsim.engine.memory_breakdown`); :mod:`fsdpsim.measured.harness.fake_memory_report` puts
them side by side.

Step protocol. AdamW states and the sharded gradients exist before the tracked step (one
untracked ``optimizer.step()`` on zero gradients; gradients are kept, as with gradient
accumulation or ``zero_grad(set_to_none=False)``, which is what fsdpsim counts). The tracked
step is ``logits = model(idx)``, ``loss = F.cross_entropy(logits.float(), targets)``,
``loss.backward()`` with the logits still referenced, as fsdpsim assumes. This gives the same
peak, to the byte, as the two-iteration protocol of [1] (``reset_mod_stats()`` after the first,
``optimizer.step()`` tracked, ``zero_grad(set_to_none=False)``), checked for llama2-7b W=8 s=1024
and gpt3-1.3b W=8 s=4096 with checkpointing, at a third of the cost. The optimizer step's own
transient (for-loop AdamW: one parameter's temporaries) stays far below the backward peak.

Where eager torch on CPU differs from fsdpsim (each difference is a term of
:func:`explained_saved_bytes_per_layer`, checked to the byte):

* ``nn.RMSNorm`` on CPU runs ``rms_norm_composite``: it saves the fp32 upcast of its input and
  the fp32 normalised tensor (8·h bytes per token) where CUDA's ``_fused_rms_norm`` saves the
  bf16 input and the fp32 ``rstd`` (2·h + 4) [2], [3]: 6·h bytes per token per norm that a GPU
  run does not have. :func:`measure_memory` tags these tensors and reports the CPU excess alive
  at the peak (``cpu_rmsnorm_excess_bytes``) so it can be taken out.
* Norm statistics: RMSNorm's fp32 ``rstd`` (4 B per token) and LayerNorm's mean and rstd
  (2 × 2 B on CPU in bf16; fp32 on CUDA) are not in fsdpsim's count.
* SwiGLU in eager mode also saves the SiLU output (``fused_glu=False`` in
  :func:`fsdpsim.costs.memory.activation_bytes_per_layer`).
* With rotary positions the reference model rotates q and k after the head transpose, so q is
  contiguous in [B, H, T, hs] order, the attention output is too, and the output projection
  saves a contiguous copy of it next to the copy SDPA saves: e·q bytes per token more (a
  property of this layout, HF-style Llama too; torchtitan rotates before the transpose). The
  rotary cos/sin tables (4 × s × hs/2 elements per layer) are saved as well.
* Manual attention builds a causal mask per layer (s² bools, saved by ``masked_fill``).

References
----------
[1] tests/data/reference/torch_validation_on_cpu.md §4 (FakeTensorMode + fake process group +
    FSDPMemTracker).
[2] PyTorch ``aten/src/ATen/native/layer_norm.cpp``: ``rms_norm_composite`` (upcast, saved by
    ``pow`` and ``mul``) and ``rms_norm_symint`` dispatching to ``_fused_rms_norm``, which has a
    CUDA kernel (``_fused_rms_norm_cuda``) and falls back to the composite on CPU.
[3] PyTorch ``tools/autograd/derivatives.yaml``: ``_fused_rms_norm`` backward saves ``input``,
    ``result1`` (rstd) and ``weight``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Iterator, Literal

import numpy as np

from fsdpsim.costs import memory as mem
from fsdpsim.model.spec import ModelSpec
from fsdpsim.model.presets import get_model

GIB = 2.0**30
COMPUTE_BYTES = 2.0  # bf16
CPU_RMSNORM_EXCESS_FRACTION = 6.0 / 8.0  # (8h saved on CPU - 2h on CUDA) / 8h tagged

#: Tracker categories (``_FSDPRefType`` values) in display order.
CATEGORIES = ("Sharded Param", "Sharded Grad", "OptState", "Unsharded Param", "All Gather",
              "Unsharded Grad", "Reduce Scatter", "Activation", "Temp", "Inputs", "Buffer")

#: Which tracker categories each fsdpsim term is compared with.
TERM_CATEGORIES: dict[str, tuple[str, ...]] = {
    "params_bytes": ("Sharded Param",),
    "grads_bytes": ("Sharded Grad",),
    "optimizer_bytes": ("OptState",),
    "unsharded_params_bytes": ("Unsharded Param", "All Gather"),
    "unsharded_grads_bytes": ("Unsharded Grad", "Reduce Scatter"),
    "activations_bytes+logits_bytes": ("Activation", "Temp", "Inputs", "Buffer"),
    "peak_bytes": CATEGORIES,
}


@dataclass(frozen=True)
class MemoryCase:
    """One training configuration to measure and predict."""

    model: str
    """fsdpsim preset id (:func:`fsdpsim.model.presets.get_model`)."""
    world_size: int
    """FSDP shard group size W (the fake process group's size) [-]."""
    micro_batch: int
    """Sequences per rank per forward/backward [-]."""
    seq_len: int
    """Tokens per sequence [-]."""
    recompute: Literal["none", "full"] = "none"
    """``"full"``: ``torch.utils.checkpoint`` around every block."""
    attention: Literal["sdpa", "manual"] = "sdpa"
    """``"sdpa"`` is fsdpsim's ``flash=1`` (only the output and the row logsumexp are saved);
    ``"manual"`` is ``flash=0`` (the s × s softmax output is saved)."""
    grad_accum: int = 1
    """Micro-batches per step, all tracked [-]."""
    grad_sync_last: bool = False
    """``set_requires_gradient_sync(False)`` on all but the last micro-batch."""
    keep_gathered: bool = False
    """``reshard_after_forward=False`` and ``set_reshard_after_backward(False)`` on all but the
    last micro-batch."""

    @property
    def spec(self) -> ModelSpec:
        spec = get_model(self.model)
        if spec.position == "learned" and spec.max_seq_len < self.seq_len:
            spec = spec.with_seq_len(self.seq_len)
        return spec

    @property
    def flash(self) -> bool:
        return self.attention == "sdpa"

    @property
    def label(self) -> str:
        accum = (f" ga={self.grad_accum}" + (" sync-last" if self.grad_sync_last else "")
                 + (" kept" if self.keep_gathered else "")) if self.grad_accum > 1 else ""
        return (f"{self.model} W={self.world_size} b={self.micro_batch} s={self.seq_len} "
                f"{'AC' if self.recompute == 'full' else 'noAC'} {self.attention}{accum}")


@dataclass(frozen=True)
class Measurement:
    """What the tracker saw in one fake FSDP2 step, per rank [B]."""

    case: MemoryCase
    peak: dict[str, int]
    """Categories at the moment of the step's peak, and ``"Total"``."""
    start_of_backward: dict[str, int]
    """Categories after the loss, before ``backward()`` (fsdpsim's assumed peak moment)."""
    cpu_rmsnorm_fp32_at_peak_bytes: int
    """fp32 tensors created in forward by ``nn.RMSNorm`` (CPU composite) alive at the peak."""
    n_param_tensors: int
    """Parameter tensors (one AdamW ``step`` scalar each)."""
    wall_s: float

    @property
    def cpu_rmsnorm_excess_bytes(self) -> float:
        """Bytes alive at the peak that CUDA's fused RMSNorm would not hold [B]."""
        return CPU_RMSNORM_EXCESS_FRACTION * self.cpu_rmsnorm_fp32_at_peak_bytes


# -- fsdpsim's side ---------------------------------------------------------------------------
def fsdpsim_inputs(case: MemoryCase) -> dict[str, Any]:
    """The engine inputs for ``case``: FULL_SHARD over W ranks, bf16 compute, fp32 reduce,
    AdamW, ``F.cross_entropy`` (``fused_loss`` 0), no runtime reserve or fragmentation."""
    from fsdpsim import engine
    from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
    from fsdpsim.drivers.predict import model_inputs, plan_inputs, training_inputs

    x: dict[str, Any] = {}
    x.update(model_inputs(case.spec, case.world_size))
    x.update(plan_inputs(ParallelPlan(num_gpus=case.world_size,
                                      gpus_per_node=min(8, case.world_size),
                                      keep_gathered=case.keep_gathered,
                                      grad_sync="last" if case.grad_sync_last else "every")))
    x.update(training_inputs(TrainingConfig(
        seq_len=case.seq_len, micro_batch=case.micro_batch, recompute=case.recompute,
        precision="bf16", reduce_dtype="fp32", optimizer="adamw",
        flash_attention=case.flash, fused_loss=False)))
    x.update(micro_batch=case.micro_batch, recompute=engine.RECOMPUTE_CODES[case.recompute],
             grad_accum=case.grad_accum, memory_bytes=1e15, runtime_reserved_bytes=0.0,
             allocator_fraction=0.0)
    return x


def fsdpsim_memory(case: MemoryCase) -> dict[str, float]:
    """fsdpsim's per-rank memory terms for ``case`` [B] (keys of :data:`memory.PEAK_KEYS`)."""
    from fsdpsim import engine

    out = engine.memory_breakdown(fsdpsim_inputs(case), ceilings=False)
    return {k: float(np.asarray(out[k]).reshape(-1)[0]) for k in mem.PEAK_KEYS}


def fsdpsim_layer_bytes(case: MemoryCase, *, fused_glu: bool = True,
                        recompute: str | None = None) -> float:
    """fsdpsim's saved bytes of one layer for ``case`` (``activation_bytes_per_layer``) [B]."""
    s = case.spec
    return float(mem.activation_bytes_per_layer(
        case.micro_batch, case.seq_len, s.d_model, s.q_dim, s.kv_dim, s.ffn_size, s.ffn_kind,
        s.n_heads, case.recompute if recompute is None else recompute,
        flash_attention=case.flash, act_bytes=COMPUTE_BYTES, fused_glu=fused_glu))


def explained_saved_bytes_per_layer(case: MemoryCase, *, cuda: bool = False) -> dict[str, float]:
    """fsdpsim's per-layer activation term plus every eager-torch difference, term by term [B].

    ``cuda=False`` gives what the reference model saves on CPU (to the byte); ``cuda=True``
    replaces the CPU RMSNorm composite by the fused CUDA kernel's saved tensors. The keys are
    the fsdpsim term (``fsdpsim_fused_glu``), then the differences; their sum is ``"total"``.
    """
    s = case.spec
    tokens = case.micro_batch * case.seq_len
    h, e = s.d_model, COMPUTE_BYTES
    terms: dict[str, float] = {"fsdpsim_fused_glu": fsdpsim_layer_bytes(case)}
    if case.recompute == "full":  # checkpoint keeps the block input only
        terms["total"] = sum(terms.values())
        return terms
    terms["swiglu_silu_output"] = (fsdpsim_layer_bytes(case, fused_glu=False)
                                   - terms["fsdpsim_fused_glu"])
    if s.norm == "rmsnorm":
        terms["rmsnorm_rstd"] = 2 * tokens * 4.0
        if not cuda:
            terms["cpu_rmsnorm_fp32"] = 2 * tokens * 6.0 * h
    else:
        stat_bytes = 4.0 if cuda else e  # CPU keeps LayerNorm's mean and rstd in bf16
        terms["layernorm_mean_rstd"] = 2 * tokens * 2 * stat_bytes
    if s.position == "rotary":
        terms["rotary_cos_sin"] = 4 * case.seq_len * (s.head_size // 2) * e
        if case.flash:
            terms["attention_output_copy"] = tokens * e * s.q_dim
    if not case.flash:
        terms["causal_mask"] = float(case.seq_len**2)
    terms["total"] = sum(terms.values())
    return terms


# -- torch's side -----------------------------------------------------------------------------
def _torch():
    import torch

    return torch


@contextlib.contextmanager
def fake_process_group(world_size: int) -> Iterator[Any]:
    """The fake process group of ``world_size`` ranks (this process is rank 0) and its 1-D
    device mesh, created outside ``FakeTensorMode`` as the mesh requires; torn down after."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("a default process group already exists in this process; the fake "
                           "FSDP memory run needs its own (run it in a fresh process)")
    dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    try:
        yield init_device_mesh("cpu", (world_size,))
    finally:
        dist.destroy_process_group()


def _checkpointed(block):
    torch = _torch()
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(torch.nn.Module):
        """``torch.utils.checkpoint`` (non-reentrant) around one FSDP-wrapped block, so the
        recomputation runs the block's FSDP pre-forward (and the tracker sees it as AC)."""

        def __init__(self, inner):
            super().__init__()
            self.block = inner

        def forward(self, x):
            return checkpoint(self.block, x, use_reentrant=False)

    return Checkpointed(block)


def _tracker_class():
    """``FSDPMemTracker`` that also tags the fp32 tensors RMSNorm creates in forward and keeps
    only the global peak."""
    torch = _torch()
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import _TOTAL_KEY
    from torch.utils.weak import WeakIdKeyDictionary

    class TaggingTracker(FSDPMemTracker):
        def __init__(self, mod, optm, d_model: int):
            super().__init__(mod, optm)
            self._d_model = d_model
            self._in_norm = 0
            self._tagged = WeakIdKeyDictionary()
            self.tagged_at_peak = 0

        def _tagged_bytes(self) -> int:
            return sum(st.nbytes() for st in list(self._tagged.keys()))

        def _track(self, reftype, t):
            super()._track(reftype, t)
            if (self._in_norm and t.dtype == torch.float32 and t.dim() > 0
                    and t.shape[-1] == self._d_model):
                self._tagged[t.untyped_storage()] = True

        def _update_peak_stats(self, peak_state):
            # Only the global peak is used: skip the base class's per-module peak snapshots,
            # which loop over every FSDP module on every op.
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap[_TOTAL_KEY]:
                    self._peak_mem[dev] = dev_snap[_TOTAL_KEY]
                    self._peak_mem_snap[dev] = dict(dev_snap)
                    self.tagged_at_peak = self._tagged_bytes()

        def norm_hooks(self, model) -> list:
            def enter(_m, _a):
                self._in_norm += 1

            def leave(_m, _a, _o):
                self._in_norm -= 1

            handles = []
            for m in model.modules():
                if isinstance(m, torch.nn.RMSNorm):
                    handles.append(m.register_forward_pre_hook(enter))
                    handles.append(m.register_forward_hook(leave, always_call=True))
            return handles

    return TaggingTracker


def _named(snapshot: dict) -> dict[str, int]:
    """``{device: {reftype: bytes}}`` of one device -> ``{category name: bytes, "Total": ...}``."""
    dev = next(iter(snapshot.values())) if snapshot else {}
    out = {c: 0 for c in CATEGORIES}
    for k, v in dev.items():
        out[str(getattr(k, "value", k))] = int(v)
    out.setdefault("Total", sum(out[c] for c in CATEGORIES))
    return out


def measure_memory(case: MemoryCase) -> Measurement:
    """Run one tracked FSDP2 step of ``case`` on fake tensors and return the tracker's view."""
    torch = _torch()
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from fsdpsim.measured.harness.reference import build_reference_model

    t0 = time.perf_counter()
    spec = case.spec
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    with fake_process_group(case.world_size) as mesh, FakeTensorMode():
        model = build_reference_model(spec, dtype=torch.float32, device="cpu",
                                      attention=case.attention)
        reshard = False if case.keep_gathered else None  # None: torch's default
        for block in model.blocks:
            fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
        if case.recompute == "full":
            for i, block in enumerate(model.blocks):
                model.blocks[i] = _checkpointed(block)
        fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
        params = list(model.parameters())
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=False)
        for p in params:  # AdamW states and the sharded gradients exist from step 2 on
            p.grad = torch.zeros_like(p)
        opt.step()
        idx = torch.randint(0, spec.vocab_size, (case.micro_batch, case.seq_len))
        targets = torch.randint(0, spec.vocab_size, (case.micro_batch, case.seq_len))

        tracker = _tracker_class()(model, opt, spec.d_model)
        tracker.track_inputs((idx, targets))
        handles = tracker.norm_hooks(model)
        try:
            with tracker:
                for mb in range(case.grad_accum):
                    last = mb == case.grad_accum - 1
                    if mb:  # the tracker follows one forward per module; the peak is kept
                        tracker.reset_mod_stats()
                    if case.grad_sync_last:
                        model.set_requires_gradient_sync(last)
                    if case.keep_gathered:
                        model.set_reshard_after_backward(last)
                    logits = model(idx)
                    loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(0, 1))
                    start = _named(tracker.get_tracker_snapshot("current"))
                    loss.backward()
                    del loss, logits
        finally:
            for h in handles:
                h.remove()
        peak = _named(tracker.get_tracker_snapshot("peak"))
        return Measurement(case=case, peak=peak, start_of_backward=start,
                           cpu_rmsnorm_fp32_at_peak_bytes=int(tracker.tagged_at_peak),
                           n_param_tensors=len(params), wall_s=time.perf_counter() - t0)


@contextlib.contextmanager
def saved_storages(params: set[int]) -> Iterator[dict[int, int]]:
    """``torch.autograd.graph.saved_tensors_hooks`` that record the bytes of each storage a
    saved tensor lives in, by storage id, the ``params`` storage ids left out; yields that
    dict (filled while the block runs). The saved tensors are held until the context ends, so
    a freed storage's id is not reused for another."""
    torch = _torch()
    seen: dict[int, int] = {}
    keep = []

    def pack(t):
        key = t.untyped_storage()._cdata
        if key not in params:
            seen.setdefault(key, t.untyped_storage().nbytes())
            keep.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield seen


def saved_bytes_per_layer(case: MemoryCase) -> int:
    """Bytes one block of ``case`` saves for backward in bf16 on CPU [B].

    One block (bf16 weights, input ``[b, s, h]`` requiring grad) runs under ``FakeTensorMode``
    inside ``saved_tensors_hooks``; the unique storages of the saved tensors, parameters
    excluded, are summed. With ``recompute="full"`` the block runs under
    ``torch.utils.checkpoint`` as in :func:`measure_memory`.
    """
    torch = _torch()
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.checkpoint import checkpoint

    from fsdpsim.measured.harness.reference import build_reference_model

    spec = dataclasses.replace(case.spec, n_layers=1)
    with FakeTensorMode():
        block = build_reference_model(spec, dtype=torch.bfloat16, device="cpu",
                                      attention=case.attention).blocks[0]
        params = {p.untyped_storage()._cdata for p in block.parameters()}
        x = torch.randn(case.micro_batch, case.seq_len, spec.d_model, dtype=torch.bfloat16,
                        requires_grad=True)
        with saved_storages(params) as seen:
            if case.recompute == "full":
                checkpoint(block, x, use_reentrant=False)
            else:
                block(x)
        return int(sum(seen.values()))


def loss_peak_bytes(micro_batch: int, seq_len: int, vocab_size: int) -> int:
    """Peak bytes of bf16 logits ``[b, s, V]`` and ``F.cross_entropy`` on their fp32 upcast,
    forward and backward, logits held by the caller (what fsdpsim's ``logits_bytes`` models) [B].
    """
    torch = _torch()
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode():
        hidden = torch.randn(micro_batch * seq_len, 8, dtype=torch.bfloat16, requires_grad=True)
        head = torch.randn(8, vocab_size, dtype=torch.bfloat16)
        targets = torch.randint(0, vocab_size, (micro_batch * seq_len,))
        tracker = MemTracker()
        tracker.track_external(hidden, head, targets)
        with tracker:
            start = _total(tracker.get_tracker_snapshot("current"))
            logits = hidden @ head
            loss = F.cross_entropy(logits.float(), targets)
            loss.backward()
            del loss, logits
        return _total(tracker.get_tracker_snapshot("peak")) - start


def _total(snapshot) -> int:
    dev = next(iter(snapshot.values())) if snapshot else {}
    return int(next((v for k, v in dev.items() if str(k) == "Total"), 0))
