"""Bottleneck and thresholds from one computation: the engine asked how each resource matters.

A post-pass on chosen configurations only (predict's one, each sweep point's winner, validate's
rows), so :func:`fsdpsim.engine.evaluate` itself stays as fast as it is. :func:`analyse`
evaluates the engine again on variants of every configuration — each resource 5 % faster, the
inter-node bandwidth infinite, and the points a bracketed root search needs — and derives the
reported bottleneck and every threshold from those step times. Nothing here assumes a closed
form (``t = bytes / bandwidth`` no longer holds under NCCL's per-call protocol choice,
:mod:`fsdpsim.costs.nccl`), so the numbers are what the engine itself predicts.

Notation: ``S(·)`` the engine's step time; ``B`` the inter-node line rate per GPU (one
direction; ``B0`` the system's); ``t`` tokens per GPU per micro-batch, ``b·s/cp`` (``t0`` the
plan's; varied through the micro-batch ``b`` at fixed sequence length); tokens per step fixed,
so throughput ∝ 1/S.

1. **Sensitivities** (:data:`SPEEDUP` = 1.05): ``gain_r = S / S(r × 1.05) − 1`` for r the peak
   FLOP/s, the HBM bandwidth, the scale-up link bandwidth and the NIC bandwidth.
2. **Network share**: ``ρ = S(B = ∞) / S(B0)``, the throughput at the system's bandwidth as a
   share of the throughput with infinite inter-node bandwidth (``≤ 1``).
3. **Bandwidth for the share** (:data:`SHARE` = 0.95): the ``B`` at which
   ``S(∞) / S(B) = 0.95`` (the smallest such ``B`` for a step time that falls with ``B``; the
   engine's is monotone). ``0``: reached down to ``B0 / 2^20`` (no inter-node traffic, or
   too little to matter); ``∞`` (JSON null): not reached below ``B0 · 2^30``.
4. **Tokens for the share**: the ``t`` at which ``S(t, ∞) / S(t, B0) = 0.95``. ``0``: reached
   down to one token; ``∞`` (null): larger micro-batches (up to ``2^20 × b``) never reach it
   (tensor- or context-parallel traffic across nodes grows with the tokens).
5. **Hide-communication bandwidth**, the seed paper's reading (Wang et al. 2025,
   arXiv 2504.03655, §4: communication of a micro-batch hidden behind its compute): the ``B``
   at which the data-parallel collectives of a micro-batch, ``(AG + RS + AR) / k``, take no
   longer than its compute ``(compute − optimizer) / k`` — the engine's own collective times
   (NCCL protocol and algorithm choice, latencies, fabric decay). ``∞`` (null): they cannot
   hide at any bandwidth; ``0``: they do not leave the node, or no collective runs per
   micro-batch (DDP, ZeRO-1 reduce once per step).
6. **Critical tokens** (same reading): the ``t`` at which that compute equals those
   collectives at ``B0``. ``0``: at any, down to one token (the host's issue time of a
   micro-batch alone can outlast them); ``∞`` (null): at none up to ``2^20 × b``.
7. **Bottleneck**, in this order: ``memory_capacity`` when the configuration does not fit;
   ``inter_node_link`` when ``ρ < 0.95``; ``pipeline_bubble`` when the bubble is at least 10 %
   of the step and longer than the exposed communication (the engine's rule); else the resource
   among compute, HBM bandwidth and the intra-node link with the largest ``gain_r`` (ties: that
   order); when none gains anything (a step bound by host issue or latency) the larger of
   matmul/attention time and memory-bound time, as the engine ranks it. Between the bubble and
   the network: ``collective_latency`` when the exposed communication is at least 10 % of the
   step and 5 % more link and NIC bandwidth win back less than half of what they would if it
   were all bandwidth (:data:`LATENCY_GAIN_SHARE`): ring latency over thousands of ranks, many
   small calls, per-rank host work, or no overlap.

**Consistency rule** (by construction; tests/test_sensitivity.py checks it on 12,000 random
plans): for a configuration that fits,

    bottleneck == inter_node_link  ⇔  ρ < 0.95  ⇔  B_share > B0  ⇔  t_share > t0

and likewise ``B_hide > B0 ⇔ t_hide > t0``. Every search starts from a bracket whose one end
is the plan's own point, evaluated once and shared by the bottleneck and both searches, so a
threshold lands on the side of the present value that the bottleneck's test says. The network
is named only when it costs more than 5 % of throughput: a plan whose network costs 3 % is not
network-bound even if the NICs have the largest ``gain_r`` (e.g. a host-bound step), and one
whose network costs 8 % is, even where 5 % more FLOP/s would gain more (exposed first
all-gather and last reduce-scatter around a compute-bound step).

Searches: every threshold is a point of a geometric lattice anchored at the plan, ``2^(k/1024)``
times its bandwidth or micro-batch (steps of 0.068 %): the least ``k`` at which the target is
reached, for a function that grows with ``k`` (the engine's step time is monotone in every
bandwidth, tests/test_engine.py::test_step_time_non_increasing_in_every_rate; in the tokens
the 95 % function need not be: where it turns, a search finds a crossing within the first grid
interval whose ends differ in sign, which a sweep and ``predict`` could place differently —
always on the side of the plan that the bottleneck says). A row's search brackets it from the
plan's own point (``k = 0``, evaluated once and shared by the bottleneck and the searches)
towards the side the plan's sign points to, over a grid evaluated with the plan, then narrows
the bracket to adjacent lattice points: each round evaluates the midpoint and both lattice
neighbours of the roots of three secants, straight in 1/B or in b where NCCL's ``latency +
bytes / bandwidth`` and compute's linearity in tokens make the functions about linear. The
answer does not depend on the path, so a sweep (many rows per call, few points per row) equals
``predict`` (one row, a dense first grid and wider rounds: two engine calls, rarely three) to
the last digit.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from fsdpsim import engine
from fsdpsim.costs.comm import FULL, GRAD_OP, HYBRID
from fsdpsim.drivers.sensitivity_search import STEPS, Search
from fsdpsim.engine import groups
from fsdpsim.util.units import GBIT_PER_S_BYTES_PER_S

#: Share of the infinite-inter-node-bandwidth throughput the thresholds ask for [-].
SHARE = 0.95
#: Factor by which each resource is made faster to measure its sensitivity [-].
SPEEDUP = 1.05
#: Resources and the engine input each one scales, in tie-break order.
RESOURCES = {"compute": "peak_flops_per_s", "hbm_bandwidth": "hbm_bytes_per_s",
             "intra_node_link": "link_bytes_per_s", "inter_node_link": "nic_share_bytes_per_s"}
#: Lattice range of the bandwidth searches, in octaves of the system's bandwidth.
BANDWIDTH_OCTAVES = (-20, 30)
#: Octaves above the plan's micro-batch the token searches look (below: down to one token).
TOKEN_OCTAVES_UP = 20
#: The first call's grid, in octaves around the plan (with the range's ends).
COARSE_GRID_OCTAVES = (-6.0, -3.0, 3.0, 6.0)
#: With few configurations an engine call costs about the same for one row or a thousand: the
#: first call then evaluates every quarter octave within 8 octaves of the plan and every octave
#: beyond (``DENSE_GRID_ROWS`` rows per configuration, while ``n × DENSE_GRID_ROWS ≤
#: DENSE_ROWS``), and each round adds ``min(MAX_SPREAD, SPREAD_ROWS // n)`` evenly spaced
#: points per search to the secants' (which alone end predict's searches after one round in
#: the cases measured: 15 plans x 3 bandwidths). Neither changes a result (the lattice), only
#: how many calls and rows a search takes.
DENSE_GRID_ROWS, DENSE_ROWS = 400, 2048
SPREAD_ROWS, MAX_SPREAD = 16, 15
MAX_ROUNDS = 40
#: Configurations analysed per block (each about 24 engine rows in the first call, then up to
#: 9 per search per round).
BLOCK = 4096
_NIC = "nic_share_bytes_per_s"
_KEEP = ("step_time_s", "compute_s", "optimizer_s", "all_gather_s", "reduce_scatter_s",
         "all_reduce_s", "bubble_s", "exposed_comm_s", "gemm_s", "attention_s",
         "memory_bound_s")
_CODE = {name: i for i, name in enumerate(engine.BOTTLENECKS)}

#: What :func:`analyse` returns (the first three replace the engine's heuristic and closed forms
#: of the same names in every report).
OUTPUTS = ("bottleneck", "min_inter_node_bytes_per_s_per_gpu", "critical_tokens_per_gpu",
           "inter_node_bytes_per_s_per_gpu_at_share", "critical_tokens_per_gpu_at_share",
           "inter_node_throughput_share", *(f"gain_{r}" for r in RESOURCES))

__all__ = ["analyse", "analyse_in_chunks", "report", "report_columns",
           "OUTPUTS", "SHARE", "SPEEDUP", "RESOURCES", "STEPS"]


def analyse(x: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Bottleneck, sensitivities and thresholds of the configurations ``x`` (engine inputs
    that broadcast to n rows), each an array of n (module docstring for the definitions):

    ``bottleneck`` (index into ``engine.BOTTLENECKS``), ``gain_<resource>`` [-],
    ``inter_node_throughput_share`` (ρ) [-], ``inter_node_bytes_per_s_per_gpu_at_share`` [B/s],
    ``critical_tokens_per_gpu_at_share`` [-], ``min_inter_node_bytes_per_s_per_gpu`` [B/s] and
    ``critical_tokens_per_gpu`` [-] (the hide-communication readings; names as the engine's
    closed forms, which they replace in every report).
    """
    shape = np.broadcast_shapes(*{np.shape(v) for v in x.values()})
    n = int(np.prod(shape)) if shape else 1
    flat = {k: (np.broadcast_to(np.asarray(v), shape).reshape(-1) if np.ndim(v) else v)
            for k, v in x.items()}
    # a column of one value in a block is that value: not copied into every variant's rows
    parts = [_analyse_block({k: (groups.one_value(v[lo:lo + BLOCK]) if np.ndim(v) else v)
                             for k, v in flat.items()}, min(BLOCK, n - lo))
             for lo in range(0, n, BLOCK)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def analyse_in_chunks(inputs: Callable[[np.ndarray], Mapping[str, Any]], n: int,
                      chunk: int) -> dict[str, np.ndarray]:
    """:func:`analyse` of ``n`` configurations whose engine inputs ``inputs(rows)`` builds,
    ``chunk`` at a time (a sweep's winners: memory stays that of one chunk)."""
    if n == 0:
        return {k: np.zeros(0) for k in OUTPUTS}
    parts = [analyse(inputs(np.arange(lo, min(lo + chunk, n)))) for lo in range(0, n, chunk)]
    return {k: np.concatenate([p[k] for p in parts]) for k in OUTPUTS}


def report_columns(s: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reported fields of :func:`analyse`'s result, named as predict's JSON flattened
    (``thresholds.*``, ``sensitivity.*``), display units (Gb/s); NaN where JSON says null."""
    def finite(v):
        v = np.asarray(v, dtype=float)
        return np.where(np.isfinite(v), v, np.nan)

    n = np.shape(s["bottleneck"])
    return {
        "thresholds.min_inter_node_gbps_per_gpu":
            finite(s["min_inter_node_bytes_per_s_per_gpu"] / GBIT_PER_S_BYTES_PER_S),
        "thresholds.critical_tokens_per_gpu": finite(s["critical_tokens_per_gpu"]),
        "thresholds.throughput_share": np.full(n, SHARE),
        "thresholds.inter_node_gbps_per_gpu_at_share":
            finite(s["inter_node_bytes_per_s_per_gpu_at_share"] / GBIT_PER_S_BYTES_PER_S),
        "thresholds.critical_tokens_per_gpu_at_share":
            finite(s["critical_tokens_per_gpu_at_share"]),
        "sensitivity.speedup": np.full(n, SPEEDUP),
        "sensitivity.inter_node_throughput_share": finite(s["inter_node_throughput_share"]),
        **{f"sensitivity.throughput_gain.{r}": finite(s[f"gain_{r}"]) for r in RESOURCES},
    }


def report(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """:func:`report_columns` of one configuration (``values`` holds :data:`OUTPUTS` as
    numbers), nested as predict's JSON: ``{"thresholds": {...}, "sensitivity": {...}}``; None
    where a value is not finite (null in JSON)."""
    out: dict[str, dict[str, Any]] = {}
    for name, column in report_columns({k: np.asarray([values[k]]) for k in OUTPUTS}).items():
        v = float(column[0])
        node = out
        *parents, leaf = name.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = v if np.isfinite(v) else None
    return out


# -- one block ---------------------------------------------------------------------------------
def _analyse_block(x: dict[str, Any], n: int):
    """:func:`analyse` of ``n`` configurations (``x``: scalars or arrays of n)."""
    rows = np.arange(n)
    col = {k: (v if np.ndim(v) else np.full(n, v)) for k, v in x.items()
           if k in (_NIC, "micro_batch", "seq_len", "cp", "strategy", *RESOURCES.values())}
    have = np.maximum(np.asarray(col[_NIC], dtype=float), 1e-300)
    b0 = np.asarray(col["micro_batch"], dtype=float)
    tokens0 = b0 * np.asarray(col["seq_len"], dtype=float) / np.asarray(col["cp"], dtype=float)
    strategy = np.asarray(col["strategy"])
    per_microbatch = (strategy == FULL) | (strategy == GRAD_OP) | (strategy == HYBRID)
    inf = np.full(n, np.inf)
    # Lattice ranges: bandwidth B0 / 2^20 .. B0 · 2^30; tokens from one token to 2^20 × t0.
    bw_lo = np.full(n, BANDWIDTH_OCTAVES[0] * STEPS)
    bw_hi = np.full(n, BANDWIDTH_OCTAVES[1] * STEPS)
    tok_lo = -np.floor(np.log2(np.maximum(tokens0, 1.0)) * STEPS)
    tok_hi = np.full(n, TOKEN_OCTAVES_UP * STEPS)
    if n * DENSE_GRID_ROWS <= DENSE_ROWS:  # quarter octaves near the plan, octaves beyond
        octaves = np.concatenate([np.arange(BANDWIDTH_OCTAVES[0], -8.0),
                                  np.arange(-8.0, 8.25, 0.25),
                                  np.arange(9.0, BANDWIDTH_OCTAVES[1] + 1.0)])
    else:
        octaves = np.array(COARSE_GRID_OCTAVES)
    octaves = octaves[octaves != 0.0] * STEPS
    kb = np.concatenate([np.broadcast_to(octaves, (n, octaves.size)), bw_lo[:, None],
                         bw_hi[:, None]], axis=1)
    kb = np.where((kb >= bw_lo[:, None]) & (kb <= bw_hi[:, None]), kb, np.nan)
    kt = np.concatenate([np.broadcast_to(octaves, (n, octaves.size)), tok_lo[:, None],
                         tok_hi[:, None]], axis=1)
    kt = np.where((kt >= tok_lo[:, None]) & (kt <= tok_hi[:, None]) & (kt != 0), kt, np.nan)

    # One call: the plan, each resource 5 % faster, infinite inter-node bandwidth, and a grid
    # of lattice points in bandwidth and micro-batch (with the ends) the searches start from.
    ib, it = np.nonzero(np.isfinite(kb)), np.nonzero(np.isfinite(kt))
    code = groups.structure(x, n)  # the engine's groups, which no variant changes
    if code is not None and not np.count_nonzero(code != code[0]):
        code = None  # one structure: the variants stay in request order
    full = _run(x, [
        (rows, {}), *[(rows, {key: np.asarray(col[key], dtype=float) * SPEEDUP})
                      for key in RESOURCES.values()],
        (rows, {_NIC: inf}),
        (ib[0], {_NIC: have[ib[0]] * 2.0 ** (kb[ib] / STEPS)}),
        (it[0], {"micro_batch": b0[it[0]] * 2.0 ** (kt[it] / STEPS)}),
        (it[0], {"micro_batch": b0[it[0]] * 2.0 ** (kt[it] / STEPS), _NIC: inf[it[0]]})],
        code)
    base, *faster, at_inf, ob, ot, ot_inf = full

    def hidden(o, r):
        return compute_minus_comm_s(o, per_microbatch[r])

    step, s_inf = base["step_time_s"], at_inf["step_time_s"]
    out: dict[str, np.ndarray] = {f"gain_{r}": step / o["step_time_s"] - 1.0
                                  for r, o in zip(RESOURCES, faster)}
    out["inter_node_throughput_share"] = s_inf / step
    f95 = _short_of_share(s_inf, step)  # < 0: the network costs more than 1 - SHARE
    searches = {
        "bw95": Search(f95, -1.0, kb, _at(ib, _short_of_share(s_inf[ib[0]], ob["step_time_s"]),
                                          kb.shape)),
        "bw_hide": Search(hidden(base, rows), -1.0, kb, _at(ib, hidden(ob, ib[0]), kb.shape)),
        "tok95": Search(f95, 1.0, kt, _at(it, _short_of_share(ot_inf["step_time_s"],
                                                               ot["step_time_s"]), kt.shape)),
        "tok_hide": Search(hidden(base, rows), 1.0, kt, _at(it, hidden(ot, it[0]), kt.shape)),
    }
    spread = int(min(MAX_SPREAD, SPREAD_ROWS // n))
    for _ in range(MAX_ROUNDS):
        if not any(s.active.any() for s in searches.values()):
            break
        k = {name: s.proposals(spread) for name, s in searches.items()}
        kb = np.concatenate([k["bw95"], k["bw_hide"]], axis=1)
        k95, kh = k["tok95"], k["tok_hide"]
        ib, i95, ih = (np.nonzero(np.isfinite(a)) for a in (kb, k95, kh))
        ob, o95, o95_inf, oh = _run(x, [
            (ib[0], {_NIC: have[ib[0]] * 2.0 ** (kb[ib] / STEPS)}),
            (i95[0], {"micro_batch": b0[i95[0]] * 2.0 ** (k95[i95] / STEPS)}),
            (i95[0], {"micro_batch": b0[i95[0]] * 2.0 ** (k95[i95] / STEPS),
                      _NIC: inf[i95[0]]}),
            (ih[0], {"micro_batch": b0[ih[0]] * 2.0 ** (kh[ih] / STEPS)})], code)
        searches["bw95"].update(kb, _at(ib, _short_of_share(s_inf[ib[0]], ob["step_time_s"]),
                                        kb.shape))
        searches["bw_hide"].update(kb, _at(ib, hidden(ob, ib[0]), kb.shape))
        searches["tok95"].update(k95, _at(i95, _short_of_share(o95_inf["step_time_s"],
                                                               o95["step_time_s"]), k95.shape))
        searches["tok_hide"].update(np.concatenate([k95, kh], axis=1), np.concatenate(
            [_at(i95, hidden(o95, i95[0]), k95.shape), _at(ih, hidden(oh, ih[0]), kh.shape)],
            axis=1))

    for name, key, unit in (("bw95", "inter_node_bytes_per_s_per_gpu_at_share", have),
                            ("bw_hide", "min_inter_node_bytes_per_s_per_gpu", have),
                            ("tok95", "critical_tokens_per_gpu_at_share", tokens0),
                            ("tok_hide", "critical_tokens_per_gpu", tokens0)):
        k_star = searches[name].result()  # the lattice point, as evaluated; -inf: below range
        out[key] = np.where(np.isneginf(k_star), 0.0, unit * 2.0 ** (k_star / STEPS))
    fits = np.broadcast_to(engine.memory_breakdown(x, ceilings=False)["fits"], (n,))
    out["bottleneck"] = _bottleneck(base, out, f95 < 0, fits)
    return out


def _short_of_share(s_inf, s):
    """``S(∞) − SHARE · S`` [s]: ≥ 0 where the throughput reaches :data:`SHARE` of its value
    with infinite inter-node bandwidth. In seconds rather than as a ratio: about linear in
    1/B and in the micro-batch, which the searches' secants use."""
    return s_inf - SHARE * s


def _at(index, values, shape):
    """An array of ``shape``, NaN but ``values`` at ``index``."""
    a = np.full(shape, np.nan)
    a[index] = values
    return a


def compute_minus_comm_s(o, per_microbatch):
    """Compute minus data-parallel collectives over a step, ``k`` times those of a micro-batch
    [s]: the all-gathers, reduce-scatters and all-reduces against the compute (the optimizer is
    no micro-batch's), for rows whose strategy issues them per micro-batch (``per_microbatch``;
    DDP and ZeRO-1 reduce once per step: none). Negative where the collectives take longer
    than the compute (Wang et al. 2025, arXiv 2504.03655, §4). Seconds, not a ratio: about
    linear in 1/B and in the micro-batch, which the searches' secants use."""
    comm = np.where(per_microbatch, o["all_gather_s"] + o["reduce_scatter_s"] + o["all_reduce_s"],
                    0.0)
    return (o["compute_s"] - o["optimizer_s"]) - comm


#: Exposed communication is latency-bound when 5 % more link and NIC bandwidth together win
#: back less than half of what 5 % would win if the exposure were all bandwidth (0.05 x the
#: exposed share of the step).
LATENCY_GAIN_SHARE = 0.5


def _bottleneck(base, out, net, fits):
    """The bottleneck code (module docstring, item 7); ``fits``: whether each configuration
    fits in memory."""
    gains = np.stack([out["gain_compute"], out["gain_hbm_bandwidth"],
                      out["gain_intra_node_link"]])
    best = np.argmax(gains, axis=0)  # first of equals: compute, HBM, link
    on_chip = np.where(base["gemm_s"] + base["attention_s"] >= base["memory_bound_s"],
                       _CODE["compute"], _CODE["hbm_bandwidth"])
    word = np.where(np.max(gains, axis=0) > 1e-9, np.array([_CODE["compute"],
                    _CODE["hbm_bandwidth"], _CODE["intra_node_link"]])[best], on_chip)
    step, bubble = base["step_time_s"], base["bubble_s"]
    bubble_binds = (bubble >= engine.EXPOSED_COMM_BINDS * step) & (bubble > base["exposed_comm_s"])
    word = np.where(bubble_binds, _CODE["pipeline_bubble"], word)
    # Exposed communication that more bandwidth would not buy back: the latency of collectives
    # over many ranks (NCCL's ring latency grows with them, fsdpsim.costs.nccl), many small
    # calls, or a framework that cannot overlap. Fewer ranks per collective (HSDP), larger
    # micro-batches or overlap help; a faster NIC or link does not.
    exposed = base["exposed_comm_s"]
    bandwidth_gain = out["gain_inter_node_link"] + out["gain_intra_node_link"]
    latency_binds = ((exposed >= engine.EXPOSED_COMM_BINDS * step) & ~bubble_binds
                     & (bandwidth_gain < LATENCY_GAIN_SHARE * (SPEEDUP - 1.0)
                                       * exposed / step))
    word = np.where(latency_binds, _CODE["collective_latency"], word)
    word = np.where(net, _CODE["inter_node_link"], word)
    return np.where(fits, word, _CODE["memory_capacity"]).astype(np.int64)


def _run(x: Mapping[str, Any], requests, code=None) -> list[dict[str, np.ndarray]]:
    """One :func:`engine.evaluate` call (memory ceilings off) over every request ``(rows,
    overrides)`` stacked (rows of ``x`` with some inputs replaced); the outputs of
    :data:`_KEEP`, split per request. ``code``: each row's structure
    (:func:`fsdpsim.engine.groups.structure`, which no override changes), by which the stacked
    rows are ordered so that the engine's groups are runs of rows (read as views, not
    gathered: :func:`fsdpsim.engine._evaluate_slices`) and only the kept outputs are put back
    in request order."""
    sizes = [int(np.size(r)) for r, _ in requests]
    total = sum(sizes)
    if total == 0:
        return [{k: np.zeros(0) for k in _KEEP} for _ in requests]
    every = np.concatenate([r for r, _ in requests])
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    at = None  # where each request row is among the stacked rows (None: in request order)
    if code is not None and total >= engine.GROUP_ROWS:
        order = np.argsort(code[every], kind="stable")
        every = every[order]
        at = np.empty(total, dtype=np.intp)
        at[order] = np.arange(total)
    stacked = {k: (v[every] if isinstance(v, np.ndarray) and v.ndim else v)
               for k, v in x.items()}
    for i, (_, overrides) in enumerate(requests):
        for k, v in overrides.items():
            if k not in stacked:  # an optional input left out: its default elsewhere
                stacked[k] = engine.OPTIONAL_INPUTS[k]
            if not np.ndim(stacked[k]):
                stacked[k] = np.full(total, stacked[k], dtype=float)
            stacked[k][slice(bounds[i], bounds[i + 1]) if at is None
                       else at[bounds[i]:bounds[i + 1]]] = v
    stacked["ceilings"] = 0.0
    # times only (no time depends on memory); variants whose layers do not come back (no memo)
    y = engine.evaluate(stacked, memory=False, memo=False)
    kept = {k: (y[k] if np.shape(y[k]) == (total,) else np.broadcast_to(y[k], (total,)))
            for k in _KEEP}
    if at is not None:
        kept = {k: v[at] for k, v in kept.items()}
    return [{k: v[bounds[i]:bounds[i + 1]] for k, v in kept.items()}
            for i in range(len(requests))]
