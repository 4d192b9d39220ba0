"""A toy mixture-of-experts layer with expert parallelism on gloo ranks: the all-to-all bytes
a real dispatch and combine move, forward and backward, for the tests to compare with the
engine (``tests/test_moe_ep_torch.py``).

Every rank holds ``tokens`` tokens of width ``d_model`` and ``n_experts / world`` experts (one
``d × d`` weight each). Routing is top-``k`` of distinct experts per token, from a generator
every rank seeds alike, so each rank knows every rank's routing and needs no metadata exchange
(the only all-to-alls are the token tensors'):

* ``balanced``: token ``j`` goes to experts ``(j·k + i) mod E``: every expert receives
  ``T·k/E`` rows from each rank (``moe_router_force_load_balancing``);
* ``random``: k distinct experts drawn uniformly per token;
* ``capacity_factor``: every expert takes at most ``ceil(T·k/E · cf)`` rows per source rank,
  zero-padded to that (GShard / Megatron ``--moe-pad-expert-input-to-capacity``).

Dispatch and combine are ``torch.distributed.nn.functional.all_to_all_single`` (autograd-aware:
its backward is the reverse all-to-all); the gating weights apply on the source rank after
the combine. A ``TorchDispatchMode`` counts every c10d call's input bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class EpCase:
    """One forward and backward of the toy MoE layer over all ranks."""

    name: str
    tokens: int = 24
    """Tokens per rank, T [-]."""
    d_model: int = 16
    n_experts: int = 8
    top_k: int = 2
    routing: str = "balanced"
    """"balanced" or "random"."""
    capacity_factor: float | None = None
    """Drop and pad to ``ceil(T·k/E · cf)`` rows per expert and source rank; None: dropless."""
    seed: int = 0


def _routing(case: EpCase, world: int):
    """``experts[r]``: (T, k) expert ids of rank r's tokens, for every rank (same on all)."""
    import torch

    gen = torch.Generator().manual_seed(case.seed)
    out = []
    for _ in range(world):
        if case.routing == "balanced":
            j = torch.arange(case.tokens)[:, None] * case.top_k + torch.arange(case.top_k)[None]
            out.append(j % case.n_experts)
        else:
            scores = torch.rand(case.tokens, case.n_experts, generator=gen)
            out.append(scores.topk(case.top_k, dim=1).indices)
    return out


def _sent_rows(case: EpCase, experts, world: int):
    """For each source rank: (row indices into its T·k copies sorted by expert, rows sent to
    each expert, padding after each expert)."""
    import torch

    e = case.n_experts
    cap = (None if case.capacity_factor is None
           else math.ceil(case.tokens * case.top_k / e * case.capacity_factor))
    plans = []
    for r in range(world):
        flat = experts[r].reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=e)
        if cap is None:
            plans.append((order, counts.tolist(), [0] * e))
            continue
        keep, starts = [], torch.cumsum(counts, 0) - counts
        for x in range(e):
            keep.append(order[int(starts[x]):int(starts[x]) + min(int(counts[x]), cap)])
        sent = [min(int(c), cap) for c in counts]
        plans.append((torch.cat(keep), sent, [cap - s for s in sent]))
    return plans


def run_ep_case(rank: int, world: int, case: EpCase) -> dict[str, Any]:
    """Forward and backward of the toy layer on ``rank``; the collectives it issued."""
    import torch
    import torch.distributed.nn.functional as dfn

    from fsdpsim.measured.harness.tp_runs import tp_counter

    torch.manual_seed(1234 + rank)
    e_local = case.n_experts // world
    d = case.d_model
    weights = torch.randn(e_local, d, d, requires_grad=True)
    x = torch.randn(case.tokens, d, requires_grad=True)
    gates = torch.rand(case.tokens, case.top_k)
    experts = _routing(case, world)
    plans = _sent_rows(case, experts, world)
    order, sent, pad = plans[rank]
    # rows this rank sends to each destination rank (its experts in id order), padding included
    per_dest = [sum(sent[x] + pad[x] for x in range(q * e_local, (q + 1) * e_local))
                for q in range(world)]
    # rows it receives from each source rank, and their experts' counts
    recv = [sum(plans[s][1][x] + plans[s][2][x]
                for x in range(rank * e_local, (rank + 1) * e_local)) for s in range(world)]
    counter = tp_counter()
    with counter:
        copies = x.repeat_interleave(case.top_k, dim=0)[order]  # permuted by expert
        chunks, at = [], 0
        for xe in range(case.n_experts):
            chunks.append(copies[at:at + sent[xe]])
            if pad[xe]:
                chunks.append(torch.zeros(pad[xe], d))
            at += sent[xe]
        send = torch.cat(chunks)
        got = dfn.all_to_all_single(torch.empty(sum(recv), d), send, recv, per_dest)
        # local experts: rows arrive grouped by source rank, then by expert
        outs, at = [], 0
        for s in range(world):
            for le in range(e_local):
                xe = rank * e_local + le
                n = plans[s][1][xe] + plans[s][2][xe]
                outs.append(got[at:at + n] @ weights[le])
                at += n
        back = dfn.all_to_all_single(torch.empty(send.shape[0], d), torch.cat(outs), per_dest,
                                     recv)
        # drop the padding, un-permute and weight by the gates on the source rank
        rows, at = [], 0
        for xe in range(case.n_experts):
            rows.append(back[at:at + sent[xe]])
            at += sent[xe] + pad[xe]
        routed = torch.zeros(case.tokens * case.top_k, d).index_add(0, order, torch.cat(rows))
        y = (routed.view(case.tokens, case.top_k, d) * gates[..., None]).sum(1)
        y.square().sum().backward()
    return {"comm": counter.as_dict(), "sent_rows": int(send.shape[0]),
            "received_rows": int(sum(recv)), "element_bytes": x.element_size()}


def run_all(rank: int, world: int, cases: Sequence[EpCase]) -> dict[str, Any]:
    """Worker for :func:`fsdpsim.measured.harness.fsdp_runs.launch`: every case, by name."""
    import torch.distributed as dist

    out: dict[str, Any] = {}
    for case in cases:
        out[case.name] = run_ep_case(rank, world, case)
        dist.barrier()
    return out
