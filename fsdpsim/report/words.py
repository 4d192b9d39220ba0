"""The words of every report for the engine's codes: one phrase per bottleneck id
(:data:`fsdpsim.engine.BOTTLENECKS`, the ids of JSON and CSV) that predict, sweep, search,
compare and the HTML report print, and predict's one-line explanation of each."""

from __future__ import annotations

#: The bottleneck's phrase in every table (JSON and CSV keep the id).
BOTTLENECK_NAMES = {
    "compute": "compute",
    "hbm_bandwidth": "HBM bandwidth",
    "intra_node_link": "intra-node link",
    "inter_node_link": "inter-node network",
    "memory_capacity": "memory capacity",
    "pipeline_bubble": "pipeline bubble",
    "collective_latency": "collective latency",
}
#: What the bottleneck means (predict's line: the phrase, then why).
BOTTLENECK_WHY = {
    "compute": "matmul and attention kernels set the pace",
    "hbm_bandwidth": "memory-bound kernels (norms, activations, loss, optimizer) dominate",
    "intra_node_link": "exposed collectives limited by NVLink/PCIe bandwidth",
    "inter_node_link": "exposed collectives limited by the NICs' bandwidth",
    "memory_capacity": "the configuration does not fit in GPU memory",
    "pipeline_bubble": "stages idle in warm-up and cool-down (more micro-batches or virtual "
                       "stages would help)",
    "collective_latency": "exposed collectives that more bandwidth would not speed up (too "
                          "many ranks per collective, small messages or no overlap; smaller "
                          "shard groups (HSDP, InternEvo's zero1) or larger micro-batches help)",
}
BOTTLENECK_WORDS = {k: f"{BOTTLENECK_NAMES[k]}: {BOTTLENECK_WHY[k]}" for k in BOTTLENECK_NAMES}
#: What a table shows for a plan that does not fit in memory (as predict's headline).
NOT_RUNNABLE = "does not fit (not runnable)"


#: Formats whose MFU is of the 16-bit (or FP32) dense peak; any other is of its own peak.
SIXTEEN_BIT = ("bf16", "fp16", "fp32")


def mfu_note(precisions) -> str | None:
    """The note of a table whose MFU column mixes or holds low-precision rows: each row's MFU
    is of the dense peak of its own precision (``mfu_native``), ``mfu`` in CSV/JSON of the BF16
    one; None when every row is 16-bit."""
    low = sorted({str(p) for p in precisions if p and str(p) not in SIXTEEN_BIT})
    if not low:
        return None
    return (f"MFU of each row's own dense peak ({', '.join(p.upper() for p in low)} rows: "
            "of that format's tensor-core peak; mfu_native in CSV/JSON); mfu in CSV/JSON is "
            "of the BF16 peak and can exceed 100 % for them")


def bottleneck_name(code) -> str:
    """The phrase of bottleneck id ``code``; "-" for none (a row without a prediction)."""
    if code is None or code != code:
        return "-"
    return BOTTLENECK_NAMES.get(str(code), str(code))


__all__ = ["BOTTLENECK_NAMES", "BOTTLENECK_WHY", "BOTTLENECK_WORDS", "NOT_RUNNABLE",
           "bottleneck_name", "mfu_note", "SIXTEEN_BIT"]


def tokens_words(tokens: float) -> str:
    """A run's tokens as every report writes them: ``15T tokens`` (``--tokens 15t``)."""
    return f"{tokens / 1e12:g}T tokens"


def limit_words(deadline_days: float | None, budget_usd: float | None) -> str:
    """A deadline and a budget as search's header and its error write them: ``within 1 day and
    for at most $2.50M``; "" for neither."""
    return " and ".join(w for w in (
        None if deadline_days is None
        else f"within {deadline_days:g} day{'' if deadline_days == 1 else 's'}",
        None if budget_usd is None else f"for at most ${budget_usd / 1e6:,.2f}M") if w)


#: Whether a prediction's 90 % range is calibrated, in every report (predict's line, the HTML
#: report's column). One notion: the efficiency table the plan uses (GPU x precision x kernel
#: stack, :func:`fsdpsim.hardware.efficiency.resolve`) has its own cross-validated 5-95 %
#: range from ``fsdpsim calibrate``; a table whose fractions were fitted without a range of
#: its own (H100 BF16 PyTorch: one framework's rows on one node), a transferred one or a power
#: cap is not, and gets the wider range.
RANGE_CALIBRATED_WORDS = {True: "range calibrated for this GPU and kernel stack",
                          False: "range not calibrated for this GPU and kernel stack: wider"}
