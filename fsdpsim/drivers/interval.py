"""The 90 % range of a prediction: the GPU type's calibration residuals, the memory limit, and
what is uncertain about the plan's communication (the network class or none named, scale past
the largest measured one, the framework profile, a pipeline across nodes), evaluated on a
slower twin, and the scale beyond the runs the efficiency table was fitted on
(``fsdpsim.drivers.predict`` and ``fsdpsim.drivers.sweep.run`` both use these;
``fsdpsim.drivers.predict`` re-exports them)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from fsdpsim.costs.compute import as_array, maximum, minimum, where
from fsdpsim.hardware.catalog_schema import UNCALIBRATED_INTERVAL
from fsdpsim.hardware.spec import System


#: Above this share of capacity the measured runs fell furthest below their predictions: the
#: 27 MosaicML calibration rows above 85 % ran as slow as 0.75x the prediction (5th percentile
#: 0.845, against 0.902 for the rows below; README, Accuracy). The range widens to cover it.
NEAR_LIMIT_SHARE, NEAR_LIMIT_RATIO_LOW = 0.85, 0.75
#: A mixture of experts is modelled less surely than a dense model: the 5th and 95th
#: percentiles of measured / predicted tokens/s over the 34 DeepSeek-V3 ``core`` rows of
#: ``validation/data/hybrid_calibration.csv`` (Megatron-Bridge 25.09-26.08 on B200, B300,
#: GB200, GB300 and H100; nothing is fitted to them, so these are out-of-sample residuals;
#: `fsdpsim validate`; tests/test_moe_engine.py recomputes them). A MoE
#: prediction's range is at least this wide.
MOE_RATIO_P05, MOE_RATIO_P95 = 0.78, 1.07
#: Relative uncertainty of inter-node bandwidth when the plan names no network class: the
#: catalog's figure for fabrics without a nccl-tests measurement at scale (Ethernet and cloud
#: fabrics, ``bandwidth_uncertainty = 0.30`` in hardware_catalog/networks/cloud.toml), since an
#: unnamed fabric is at best as well known as those.
NETWORK_UNSTATED_UNCERTAINTY = 0.30
#: Relative uncertainty of the pipeline bubble when pipeline stages sit on different nodes: the
#: schedule's idle time (Narayanan et al. 2021, PTD-P, Sec. 2.2.1: (p - 1) / m of the ideal
#: step) assumes stages of equal time and point-to-point transfers hidden behind compute; across
#: nodes neither holds for certain (stage imbalance, p2p waits on the NIC), so the bubble may be
#: twice the modelled one (low end); the high end is the step without it, the most any schedule
#: can win back (the modelled bubble's p2p and imbalance terms may as well be too large).
PIPELINE_BUBBLE_UNCERTAINTY = 1.0
#: Relative widening of both ends of the range per doubling of GPU count above, or of model
#: size outside, the span of the runs the efficiency table was fitted on
#: (:func:`fit_span_doublings`): the smallest rate, in steps of 0.01, at which the out-of-sample
#: rows beyond their table's span in the five files of ``validation/data`` hold the measured
#: value at least 90 % of the time, each file one vote
#: (:func:`fsdpsim.measured.ranges.widening_rate`; docs/accuracy.md, "Prediction ranges").
SCALE_WIDENING_PER_DOUBLING = 0.06


def prediction_interval(values: Mapping[str, Any], system: System, *,
                        comm: tuple[Any, Any] = (1.0, 1.0),
                        uncertainty: tuple[Any, Any] | None = None,
                        efficiency=None, plan: Mapping[str, Any] | None = None
                        ) -> dict[str, Any]:
    """5-95 % range of tokens/s and step time from the GPU type's calibration residuals,
    widened by what is uncertain about the plan's communication.

    ``fsdpsim calibrate`` stores the 5th and 95th percentiles of measured / predicted tokens/s
    from 5-fold cross-validation (out-of-sample) in the catalog; the range is the prediction
    scaled by them. GPU types without their own calibration (or power-capped) use a wider,
    documented default (``fsdpsim.hardware.catalog.UNCALIBRATED_INTERVAL``) and are marked
    ``calibrated: false``. Near the memory limit (``peak_bytes`` / ``capacity_bytes`` above
    :data:`NEAR_LIMIT_SHARE`, when given) the low end drops to :data:`NEAR_LIMIT_RATIO_LOW`;
    a mixture of experts (``moe_s`` > 0, when given) widens the range to at least
    :data:`MOE_RATIO_P05` .. :data:`MOE_RATIO_P95`.
    ``comm`` are the throughput ratios on a slower network and framework (:func:`slower_twin`,
    evaluated) and on a faster one (:func:`faster_ratio`), from the network class's and the
    framework profile's uncertainty, wider past the largest measured scale; the low end is
    multiplied by the first, the high end by the second.
    ``uncertainty`` = :func:`comm_uncertainty`'s pair, reported. Scalars or arrays (a sweep
    passes one system's rows at once). ``efficiency`` (a
    :class:`fsdpsim.hardware.efficiency.Resolved`, the plan's GPU x precision x kernel
    stack): the range of the table it used, and a
    transferred triple widens both ends by its ``uncertainty``
    (:data:`fsdpsim.hardware.efficiency.TRANSFER_UNCERTAINTY` from another stack of the GPU,
    ``SCALED_UNCERTAINTY`` from another GPU's fit; ``efficiency_transferred``).
    ``plan`` (engine inputs ``pp``, ``pp_per_node``; when given, with ``bubble_s`` and
    ``step_time_s`` in ``values``): a pipeline whose stages span nodes
    (``pipeline_across_nodes``: pp > stages per node) widens by its bubble share
    b = bubble_s / step_time_s and :data:`PIPELINE_BUBBLE_UNCERTAINTY` u: the low end x
    1 / (1 + u·b) (the bubble (1 + u) times the modelled one), the high end x
    1 / (1 - min(u, 1)·b) (the bubble hidden).
    With ``num_gpus`` and ``n_params`` in ``plan`` and a table that records its fit's span
    (``efficiency.fit_span``), both ends widen last by (1 + r)^d, r =
    :data:`SCALE_WIDENING_PER_DOUBLING`, d = :func:`fit_span_doublings` (``beyond_fit_span``,
    ``fit_span_doublings``). The high end never exceeds the GEMM ceiling's throughput
    (:func:`physical_ratio_high`, with ``hfu``, ``mfu`` and ``mfu_native`` in ``values``).
    """
    lo, hi, calibrated, transferred = _calibrated_range(system, efficiency)
    lo, hi, moe = _widen_for_experts(values, lo, hi)
    lo, near = _widen_near_memory_limit(values, lo)
    lo, hi, across = _widen_for_pipeline(values, plan, lo, hi)
    slower, faster = (as_array(r) for r in comm)
    lo = lo * minimum(slower, 1.0)
    hi = hi * maximum(faster, 1.0)
    lo, hi, doublings = _widen_beyond_fit_span(plan, efficiency, lo, hi)
    beyond = as_array(doublings) > 0
    hi = minimum(hi, physical_ratio_high(values, efficiency))
    if np.ndim(lo) == 0:
        lo, hi = float(lo), float(hi)
    tps = values["tokens_per_s_per_gpu"]
    out = {"tokens_per_s_per_gpu_low": tps * lo, "tokens_per_s_per_gpu_high": tps * hi,
           "tokens_per_s_low": values["tokens_per_s"] * lo,
           "tokens_per_s_high": values["tokens_per_s"] * hi,
           "step_time_s_low": values["step_time_s"] / hi,
           "step_time_s_high": values["step_time_s"] / lo,
           "mfu_low": values["mfu"] * lo, "mfu_high": values["mfu"] * hi,
           "calibrated": calibrated, "efficiency_transferred": transferred,
           "near_memory_limit": near, "mixture_of_experts": moe,
           "pipeline_across_nodes": across,
           "beyond_fit_span": beyond.tolist() if np.ndim(beyond) == 0 else beyond,
           "fit_span_doublings": doublings,
           "coverage": 0.9}
    if uncertainty is not None:
        u_fab, u_fw = uncertainty
        out["network_uncertainty"] = float(u_fab) if np.ndim(u_fab) == 0 else u_fab
        out["framework_uncertainty"] = float(u_fw) if np.ndim(u_fw) == 0 else u_fw
    return out


def _calibrated_range(system: System, efficiency) -> tuple[Any, Any, bool, bool]:
    """The GPU type's 5-95 % ratios measured / predicted (those of the efficiency table used,
    when given; a transferred one widened by its uncertainty; the uncalibrated range at least
    without a calibration or under a power cap), whether calibrated, whether transferred."""
    eff = system.accelerator.efficiency
    lo, hi = eff.throughput_ratio_p05, eff.throughput_ratio_p95
    calibrated = eff.calibrated and system.power_cap_w is None
    transferred = False
    if efficiency is not None:
        if efficiency.interval is not None:
            lo, hi = efficiency.interval
        calibrated = (efficiency.calibrated and not efficiency.transferred
                      and system.power_cap_w is None)
        transferred = efficiency.transferred
        if transferred:
            u = efficiency.uncertainty
            lo, hi = lo * (1.0 - u), hi * (1.0 + u)
    if not calibrated:  # the power-cap model is uncalibrated: at least the uncalibrated range
        lo, hi = min(lo, UNCALIBRATED_INTERVAL[0]), max(hi, UNCALIBRATED_INTERVAL[1])
    return lo, hi, calibrated, transferred


def _widen_for_experts(values: Mapping[str, Any], lo, hi) -> tuple[Any, Any, Any]:
    """A mixture of experts (``moe_s`` > 0): at least :data:`MOE_RATIO_P05` ..
    :data:`MOE_RATIO_P95`; and where it applies."""
    if "moe_s" not in values:
        return lo, hi, False
    moe = as_array(values["moe_s"]) > 0
    lo = where(moe, minimum(lo, MOE_RATIO_P05), lo)
    hi = where(moe, maximum(hi, MOE_RATIO_P95), hi)
    return lo, hi, moe.tolist() if np.ndim(moe) == 0 else moe


def _widen_near_memory_limit(values: Mapping[str, Any], lo) -> tuple[Any, Any]:
    """Above :data:`NEAR_LIMIT_SHARE` of the memory: the low end at most
    :data:`NEAR_LIMIT_RATIO_LOW`; and where it applies."""
    if "peak_bytes" not in values or "capacity_bytes" not in values:
        return lo, False
    near = (as_array(values["peak_bytes"])
            > NEAR_LIMIT_SHARE * as_array(values["capacity_bytes"]))
    lo = where(near, minimum(lo, NEAR_LIMIT_RATIO_LOW), lo)
    return lo, near.tolist() if np.ndim(near) == 0 else near


def _widen_for_pipeline(values: Mapping[str, Any], plan: Mapping[str, Any] | None, lo,
                        hi) -> tuple[Any, Any, Any]:
    """A pipeline whose stages span nodes, by its bubble share b (at most 0.9) and
    :data:`PIPELINE_BUBBLE_UNCERTAINTY` u: low x 1 / (1 + u·b), high x 1 / (1 - min(u, 1)·b);
    and where it applies."""
    if plan is None or "pp" not in plan or "bubble_s" not in values:
        return lo, hi, False
    pp = as_array(plan["pp"])
    across = (pp > 1) & (as_array(plan.get("pp_per_node", pp)) < pp)
    share = where(across, np.clip(as_array(values["bubble_s"])
                                  / as_array(values["step_time_s"]), 0.0, 0.9), 0.0)
    lo = lo / (1.0 + PIPELINE_BUBBLE_UNCERTAINTY * share)
    hi = hi / (1.0 - min(PIPELINE_BUBBLE_UNCERTAINTY, 1.0) * share)
    return lo, hi, across.tolist() if np.ndim(across) == 0 else across


def _widen_beyond_fit_span(plan: Mapping[str, Any] | None, efficiency, lo,
                           hi) -> tuple[Any, Any, Any]:
    """Beyond the efficiency table's fit span: both ends by (1 + r)^d, r =
    :data:`SCALE_WIDENING_PER_DOUBLING`, d = :func:`fit_span_doublings`; and d."""
    span = getattr(efficiency, "fit_span", None)
    if span is None or plan is None or "num_gpus" not in plan or "n_params" not in plan:
        return lo, hi, 0.0
    doublings = fit_span_doublings(plan["num_gpus"], plan["n_params"], span)
    # the ufunc, not `**`: a numpy scalar's `**` rounds differently from an array's
    # element, and validate's grouped rows must equal its row-by-row reference
    widen = np.power(1.0 + SCALE_WIDENING_PER_DOUBLING, doublings)
    return lo / widen, hi * widen, doublings.tolist() if np.ndim(doublings) == 0 else doublings


def physical_ratio_high(values: Mapping[str, Any], efficiency=None) -> Any:
    """The most the measured throughput can exceed the prediction [-]: a step cannot run its
    hardware FLOPs faster than the best-shape GEMM rate of its number format (the measured
    maximum achievable matmul fraction of the dense peak, ``efficiency.ceiling``, MAMF; the
    dense peak itself where the catalog has none), so the high end's HFU against the format's
    own peak, ``hfu · mfu_native / mfu`` (:mod:`fsdpsim.engine.metrics`), stays at or below it.
    At least 1 (the prediction itself stays inside its range); inf without the utilisations in
    ``values``."""
    if not all(k in values for k in ("hfu", "mfu", "mfu_native")):
        return np.inf
    ceiling = getattr(efficiency, "ceiling", None) or 1.0
    mfu = as_array(values["mfu"])
    hfu, native = as_array(values["hfu"]), as_array(values["mfu_native"])
    if type(mfu) is np.float64 and mfu > 0:  # one configuration: no zero to divide by
        hfu_native = hfu * native / mfu
        if hfu_native > 0:  # np.where's side, without np.errstate's and np.where's cost
            return maximum(ceiling / hfu_native, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        hfu_native = hfu * native / mfu
        ratio = np.where(hfu_native > 0, ceiling / hfu_native, np.inf)
    return maximum(ratio, 1.0)


def fit_span_doublings(num_gpus, n_params, span) -> Any:
    """Doublings of scale beyond the runs an efficiency table was fitted on [-]:
    d = log2(max(N / N_max, 1)) + |log2(P / clip(P, P_min, P_max))|, N the GPU count and P the
    model's parameters, ``span`` the table's :class:`fsdpsim.hardware.spec.FitSpan`.

    The fitted fractions absorb whatever the fit rows' scale exercised (their communication,
    overlap and host time); above their GPU count, and for models larger or smaller than theirs,
    effects enter that the fit never saw. Fewer GPUs than the fit's are not counted: they add
    no communication the fit did not see. Scalars or arrays."""
    gpus = as_array(num_gpus)
    params = as_array(n_params)
    above = np.log2(maximum(gpus / span.gpus_max, 1.0))
    # np.clip's values, without its overhead on one configuration's numbers
    inside = minimum(maximum(params, float(span.params_min)), float(span.params_max))
    outside = np.abs(np.log2(params / inside))
    return above + outside


def fit_span_notes(num_gpus: float, n_params: float, efficiency) -> list[str]:
    """``predict``'s note when the plan lies beyond the span its efficiency table was fitted on
    (:func:`fit_span_doublings`), naming the scale, the span and the widening."""
    span = getattr(efficiency, "fit_span", None)
    if span is None:
        return []
    doublings = float(fit_span_doublings(num_gpus, n_params, span))
    if doublings <= 0:
        return []
    table = " ".join(filter(None, (efficiency.gpu, efficiency.precision_class, efficiency.table)))
    parts = []
    if num_gpus > span.gpus_max:
        parts.append(f"GPU count {num_gpus:g} beyond the {span.gpus_max} its {table} table was "
                     "fitted on")
    if not span.params_min <= n_params <= span.params_max:
        parts.append(f"model size {n_params / 1e9:.3g}B outside the {span.params_min / 1e9:.3g}"
                     f"-{span.params_max / 1e9:.3g}B {'it' if parts else f'its {table} table'} "
                     "was fitted on")
    widen = np.power(1.0 + SCALE_WIDENING_PER_DOUBLING, doublings)
    return [f"{'; '.join(parts)}: range widened x{widen:.2f} on each end "
            f"({100 * SCALE_WIDENING_PER_DOUBLING:.0f} % per doubling, {doublings:.1f} "
            "doublings)"]


#: Nodes up to which a fabric's decay with scale is measured (NVIDIA/nccl#1229: 4-128 nodes);
#: beyond, the decay is extrapolated and the range widens by the catalog's decay per doubling.
MEASURED_NODES = 128.0


def comm_uncertainty(x: Mapping[str, Any]) -> tuple[Any, Any]:
    """Relative uncertainty of inter-node bandwidth and of data-parallel communication for the
    configurations ``x`` (engine inputs): ``(u_fabric, u_framework)`` [-].

    ``u_fabric`` is the network class's ``bandwidth_uncertainty`` (catalog: 0.10 for
    InfiniBand, whose large-message busbw is measured at 0.88-0.96 of line rate; 0.3 for
    Ethernet/cloud fabrics without a measurement at scale), plus the decay per doubling for
    every doubling of nodes past :data:`MEASURED_NODES`; 0 on one node; at least
    :data:`NETWORK_UNSTATED_UNCERTAINTY` where no network class was named
    (``network_stated`` 0). ``u_framework`` is the framework profile's
    (:mod:`fsdpsim.plan.frameworks`)."""
    nodes = as_array(x["num_gpus"]) / as_array(x["gpus_per_node"])
    beyond = np.log2(maximum(nodes / MEASURED_NODES, 1.0))
    nic = as_array(x.get("nic_uncertainty", 0.1))
    nic = where(as_array(x.get("network_stated", 1.0)) > 0, nic,
                maximum(nic, NETWORK_UNSTATED_UNCERTAINTY))
    u_fab = where(nodes > 1.0, nic + as_array(x.get("nic_decay_per_doubling", 0.0)) * beyond,
                  0.0)
    return minimum(u_fab, 0.9), as_array(x.get("framework_uncertainty", 0.0))


def slower_twin(x: Mapping[str, Any]) -> dict[str, Any]:
    """The configurations ``x`` again on a slower network and framework
    (:func:`comm_uncertainty`): inter-node bandwidth x (1 - u_fabric) and data-parallel
    collectives x 1 / (1 - u_framework). Its throughput relative to ``x``'s lowers the low end
    of the 90 % range (:func:`prediction_interval`) by what is uncertain for that plan; predict
    and sweep both evaluate it."""
    u_fab, u_fw = comm_uncertainty(x)
    return {**x, "nic_fraction": as_array(x["nic_fraction"]) * (1.0 - u_fab),
            "dp_comm_scale": 1.0 / (1.0 - minimum(u_fw, 0.9))}


def faster_ratio(values: Mapping[str, Any], uncertainty: tuple[Any, Any]) -> Any:
    """Throughput ratio if communication were faster by the plan's uncertainty: the exposed
    communication shrinks by u / (1 + u) (u the larger of the network's and the framework's),
    ``step / (step - exposed · u / (1 + u))`` [-]. Exposed time is all a faster network can
    win back, so this is the most it can gain; it raises the high end of the range."""
    u = maximum(*(as_array(a) for a in uncertainty))
    step = as_array(values["step_time_s"])
    won = as_array(values["exposed_comm_s"]) * u / (1.0 + u)
    return step / maximum(step - won, 1e-300)
