"""Tracker and fsdpsim side by side (:mod:`fsdpsim.measured.harness.fake_memory`): per fsdpsim term
the tracker categories it stands for at the peak, a plain-text table in GiB, and a proposed
two-phase peak built from fsdpsim's own term functions (reported, not used by fsdpsim)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fsdpsim.costs import memory as mem
from fsdpsim.measured.harness.fake_memory import (
    COMPUTE_BYTES,
    GIB,
    TERM_CATEGORIES,
    MemoryCase,
    Measurement,
    fsdpsim_inputs,
    fsdpsim_memory,
)


# -- side by side -----------------------------------------------------------------------------
def category_sum(snapshot: dict[str, int], categories: tuple[str, ...]) -> int:
    return int(sum(snapshot.get(c, 0) for c in categories))


def compare(measurement: Measurement, predicted: dict[str, float]) -> list[dict[str, Any]]:
    """Rows ``{term, categories, tracker_bytes, fsdpsim_bytes, ratio}`` at the peak."""
    rows = []
    for term, cats in TERM_CATEGORIES.items():
        tracked = (measurement.peak["Total"] if term == "peak_bytes"
                   else category_sum(measurement.peak, cats))
        pred = sum(predicted[k] for k in term.split("+"))
        rows.append({"term": term, "categories": " + ".join(cats) if term != "peak_bytes"
                     else "Total", "tracker_bytes": tracked, "fsdpsim_bytes": pred,
                     "ratio": tracked / pred if pred else float("nan")})
    return rows


def format_table(measurement: Measurement, predicted: dict[str, float],
                 proposed: dict[str, float] | None = None) -> str:
    """A plain-text table of :func:`compare` in GiB, plus the peak without the CPU-only
    RMSNorm excess and, if given, the proposed two-phase peak (:func:`phase_peak_bytes`)."""
    head = (f"  {'fsdpsim term':34s} {'tracker category (at its peak)':36s} "
            f"{'tracker GiB':>11s} {'fsdpsim GiB':>11s} {'trk/sim':>7s}")
    lines = [f"{measurement.case.label}  (fake run {measurement.wall_s:.1f} s)", head]

    def row(term, cats, tracked, pred):
        ratio = tracked / pred if pred else float("nan")
        lines.append(f"  {term:34s} {cats:36s} {tracked / GIB:11.3f} {pred / GIB:11.3f} "
                     f"{ratio:7.3f}")

    for r in compare(measurement, predicted):
        row(r["term"], r["categories"], r["tracker_bytes"], r["fsdpsim_bytes"])
    corrected = measurement.peak["Total"] - measurement.cpu_rmsnorm_excess_bytes
    row("peak_bytes", "Total - CPU RMSNorm excess", corrected, predicted["peak_bytes"])
    if proposed is not None:
        row("proposed: max of 2 phases", "Total - CPU RMSNorm excess", corrected,
            proposed["peak_bytes"])
    return "\n".join(lines)


# -- a proposed refinement of fsdpsim's peak (reported, not used by fsdpsim) -------------------
def phase_peak_bytes(case: MemoryCase, *, fused_glu: bool = True) -> dict[str, float]:
    """The peak as the larger of two moments instead of the sum of every term's maximum [B].

    * ``loss_backward``: states + the resident root unit + all saved activations + the head's
      inputs + the logits and cross-entropy temporaries (``logits_bytes``). Only the root is
      gathered: a block's pre-backward all-gather starts after the LM head's backward.
    * ``first_block_backward``: states + the gathered root and two blocks
      (``unsharded_params_bytes``) + one unit's gradient buffers (``unsharded_grads_bytes``) +
      all saved activations + one recomputed layer (``W``) + the logits the loop still holds
      (2 B each); the cross-entropy temporaries and the head's inputs are freed by then.

    Built from fsdpsim's own term functions; ``fused_glu=False`` also applies the eager-SwiGLU
    fix.
    """
    s = case.spec
    p = fsdpsim_memory(case)
    shape = (case.micro_batch, case.seq_len, s.d_model, s.q_dim, s.kv_dim, s.ffn_size,
             s.ffn_kind, s.n_heads)
    opts = dict(flash_attention=case.flash, act_bytes=COMPUTE_BYTES, fused_glu=fused_glu)
    saved = s.n_layers * float(mem.activation_bytes_per_layer(*shape, case.recompute, **opts))
    working = float(mem.recompute_working_bytes(*shape, case.recompute, **opts))
    head = float(mem.head_activation_bytes(case.micro_batch, case.seq_len, s.d_model,
                                           act_bytes=COMPUTE_BYTES))
    x = fsdpsim_inputs(case)
    root = COMPUTE_BYTES * float(np.asarray(x["root_numel_padded"]))
    states = p["params_bytes"] + p["grads_bytes"] + p["optimizer_bytes"]
    logits_held = COMPUTE_BYTES * case.micro_batch * case.seq_len * s.vocab_size
    out = {
        "loss_backward": states + root + saved + head + p["logits_bytes"],
        "first_block_backward": (states + p["unsharded_params_bytes"]
                                 + p["unsharded_grads_bytes"] + saved + working + logits_held),
    }
    out["peak_bytes"] = max(out.values())
    return out
