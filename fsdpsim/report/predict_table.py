"""The table ``fsdpsim predict`` prints: the report of one prediction in words and units (the
CLI's rendering; no formulas)."""

from __future__ import annotations

from fsdpsim.plan import frameworks
from fsdpsim.plan.knobs import kernel_words

from fsdpsim.report import render
from fsdpsim.report.procurement import run_table
from fsdpsim.report.words import BOTTLENECK_NAMES, BOTTLENECK_WORDS, RANGE_CALIBRATED_WORDS
from fsdpsim.util.units import GBIT_PER_S_BYTES_PER_S


def _comm_range_words(interval: dict) -> str:
    """What widened the range beyond the calibration: the network's and the framework's
    uncertainty (fsdpsim.drivers.predict.comm_uncertainty), when there is any."""
    parts = [f"{name} ±{100 * interval[key]:.0f} %" for name, key in
             (("network", "network_uncertainty"), ("framework", "framework_uncertainty"))
             if interval.get(key)]
    return ("; with " + ", ".join(parts)) if parts else ""


def fit_advice_lines(d: dict) -> list[str]:
    """What the hybrid search finds for a plan that does not fit (``fit_advice``), each with
    the predict command that reproduces it."""
    from fsdpsim.report.command import command_lines

    out = []
    for a in d.get("fit_advice", ()):
        here = a["num_gpus"] == d["plan"]["num_gpus"]
        head = (f"  on these {a['num_gpus']:,} GPUs" if here else
                f"  the fewest GPUs a searched plan fits on: {a['num_gpus']:,}")
        how = ("" if a["within_default_budget"] else
               f", {a['peak_bytes'] / 2**30:.1f} GiB: above the default 90 % budget, tight")
        out.append(f"{head} ({a['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU{how}):")
        out += command_lines(a["predict_command"], indent="    ")
    if out:
        out.insert(0, "\nthe hybrid search (fsdpsim search) finds instead:")
    return out


def _utilisation_rows(d: dict, fitted: str = "") -> list[tuple[str, str]]:
    """MFU / HFU and the peak they divide by; for FP8 the FP8 peak's MFU on a row beside."""
    u = d["utilisation"]
    rows = [("MFU / HFU", f"{_pct(d['mfu'])} / {_pct(d['hfu'])}{fitted}  (of the "
                          f"{u['peak_precision'].upper()} dense peak, "
                          f"{u['peak_flops_per_s_per_gpu'] / 1e12:,.0f} TFLOP/s per GPU)")]
    if u["native_precision"] != u["peak_precision"]:
        native = u["native_precision"].upper()
        rows.append((f"MFU of {native} peak", f"{_pct(d['mfu_native'])}  "
                     f"({u['native_peak_flops_per_s_per_gpu'] / 1e12:,.0f} TFLOP/s per GPU)"))
    return rows


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _plan_text(pl: dict) -> str:
    """The plan in the report: its one line (:mod:`fsdpsim.plan.spelling`, what ``predict
    --plan`` reads) and, in words, what the line leaves implicit."""
    extras = ((", parameters kept gathered for the step" if pl["keep_gathered"] else "")
              + (", gradient sync on the last micro-batch" if pl["grad_sync"] == "last"
                 else ""))
    framework = "" if pl["framework"] == "fsdp2" else f", {pl['framework']}"
    if pl["tp"] * pl["pp"] * pl["cp"] * pl.get("ep", 1) > 1:
        words = [pl["line"], f"ZeRO-{pl['zero']}" + (" (HSDP)" if pl["sharding"] == "hybrid"
                                                     else "")]
        if pl["tp"] > 1:
            words.append("sequence parallel" if pl["sequence_parallel"] else "no SP")
        if pl["tp_overlap"]:
            words.append("TP overlapped")
        if pl["cp"] > 1:
            words.append(f"CP {pl['cp_kind']}")
        if pl.get("ep", 1) > 1:
            words.append(f"expert-dp {pl['expert_dp']}, all-to-all "
                         + ("overlapped" if pl["ep_overlap"] else "exposed"))
        return ", ".join(words) + framework + extras
    zero = f"ZeRO-{pl['zero']}" + (" (HSDP)" if pl["sharding"] == "hybrid" else "")
    return (f"{pl['line']}, {zero}, reshard after forward: "
            f"{'yes' if pl['reshard_after_forward'] else 'no'}" + framework + extras)


def _moe_lines(d: dict) -> list[tuple[str, str]]:
    """The expert all-to-all (how much it costs and whether it hides) and the MoE layers'
    share of the step, for models with MoE layers."""
    t, c, pl = d["time"], d["comm"], d["plan"]
    if not t.get("moe_s"):
        return []
    lines = []
    if pl.get("ep", 1) > 1:
        hidden = c["ep_s"] - c["ep_exposed_s"]
        verdict = ("hidden behind compute" if c["ep_exposed_s"] <= 0.05 * c["ep_s"]
                   else f"{100 * hidden / c['ep_s']:.0f} % hidden" if hidden > 0
                   else "not hidden: --ep-overlap runs it beside another micro-batch")
        lines.append(("expert all-to-all", f"{render.gib(c['ep_bytes'])} in "
                      f"{render.seconds(c['ep_s'])}, exposed {render.seconds(c['ep_exposed_s'])} "
                      f"({100 * c['ep_exposed_s'] / d['step_time_s']:.1f} % of the step; "
                      f"{verdict})"))
    lines.append(("MoE layers", f"{render.seconds(t['moe_s'])} ({100 * t['moe_share']:.1f} % of "
                  "the step: router, experts, their kernels and exposed all-to-alls)"))
    return lines


def predict_table(p, report: dict | None = None, run=None) -> str:
    """The table report; with ``report`` (``to_dict`` plus
    :func:`fsdpsim.drivers.procurement.prediction_run`) and ``run``, also cost, energy and time to
    train."""
    d = p.to_dict()
    t, m, c = d["time"], d["memory"], d["comm"]
    tr, pl = d["training"], d["plan"]
    lines = [render.wrap(f"fsdpsim predict: {d['model']} on {pl['num_gpus']:,} GPUs — "
                         f"{d['system']}", hanging="  ")]
    if not d["fits"]:  # the headline: no number below is runnable
        over = d["memory"]["peak_bytes"] - d["memory"]["capacity_bytes"]
        lines.append(render.wrap(
            f"DOES NOT FIT: {render.gib(over)} per GPU over the "
            f"{render.gib(d['memory']['capacity_bytes'])} usable; this plan cannot run, and its "
            "throughput and MFU below are what it would give if it fitted", hanging="  "))
    lines.append(render.key_values([
        ("plan", _plan_text(pl)),
        ("training", f"seq {tr['seq_len']:,}, micro-batch {tr['micro_batch']} x {tr['grad_accum']} "
                     f"accumulation = {tr['global_batch']:,} sequences/step, recompute "
                     f"{tr['recompute']}, {tr['precision']}, {tr['optimizer']}, reduce "
                     f"{tr['reduce_dtype']}"
                     + "".join(f", {words}" for words, _ in kernel_words(tr))),
    ]))
    if d["chosen"].get("why"):
        lines.append(render.wrap(f"({d['chosen']['why']})", "  ", "   "))
    fitted = "" if d["fits"] else " if it fitted"
    if not d["fits"]:
        lines.extend(fit_advice_lines(d))
    lines.append("\nthroughput" + (" if it fitted (not runnable)" if fitted else ""))
    lines.append(render.key_values([
        ("step time", f"{render.seconds(d['step_time_s'])}{fitted}  (bounds: "
                      f"{render.seconds(t['step_lower_bound_s'])} perfect overlap .. "
                      f"{render.seconds(t['step_upper_bound_s'])} no overlap)"),
        ("tokens/s", f"{d['tokens_per_s']:,.0f}{fitted}"),
        ("tokens/s per GPU", f"{d['tokens_per_s_per_gpu']:,.0f}{fitted}  (90 % range "
                             f"{d['interval']['tokens_per_s_per_gpu_low']:,.0f} .. "
                             f"{d['interval']['tokens_per_s_per_gpu_high']:,.0f}; "
                             + RANGE_CALIBRATED_WORDS[bool(d['interval']['calibrated'])]
                             + _comm_range_words(d['interval'])
                             + ("; mixture of experts: the range of the DeepSeek-V3 runs'"
                                " residuals" if d['interval'].get('mixture_of_experts') else "")
                             + ("; near the memory limit: lower low end)"
                                if d['interval'].get('near_memory_limit') else ")")),
        *_utilisation_rows(d, fitted),
        ("bottleneck", BOTTLENECK_WORDS[d["bottleneck"]]),
    ]))
    cap, peak = m["capacity_bytes"], m["peak_bytes"]
    status = (f"fits, {render.gib(cap - peak)} free" if d["fits"]
              else f"DOES NOT FIT, {render.gib(peak - cap)} over")
    lines.append(f"\nmemory per GPU ({render.gib(cap)} usable; {status})")
    rows = [(k.removesuffix("_bytes").replace("_", " "), render.gib(m[k]))
            for k in ("params_bytes", "grads_bytes", "optimizer_bytes", "unsharded_params_bytes",
                      "unsharded_grads_bytes", "activations_bytes", "logits_bytes",
                      "runtime_reserved_bytes", "fragmentation_bytes")]
    rows.append(("peak", f"{render.gib(peak)}  ({100 * peak / cap:.0f} % of capacity)"))
    lines.append(render.key_values(rows))
    lines.append("\ntime per step")
    lines.append(render.key_values([
        ("compute", f"{render.seconds(t['compute_s'])}  (GEMM {render.seconds(t['gemm_s'])}, "
                    f"attention {render.seconds(t['attention_s'])}, memory-bound "
                    f"{render.seconds(t['memory_bound_s'])}, of which recompute "
                    f"{render.seconds(t['recompute_s'])}; optimizer "
                    f"{render.seconds(t['optimizer_s'])})"),
        # a ZeRO-1 that syncs parameters by one broadcast per shard owner (InternEvo's)
        ("broadcasts" if pl.get("sharding") == "optimizer"
         and frameworks.profile(pl.get("framework", "fsdp2")).param_broadcast else "all-gather",
         f"{render.gib(c['all_gather_bytes'])} in {render.seconds(c['all_gather_s'])}"),
        ("reduce-scatter", f"{render.gib(c['reduce_scatter_bytes'])} in "
                           f"{render.seconds(c['reduce_scatter_s'])}"),
        ("all-reduce", f"{render.gib(c['all_reduce_bytes'])} in "
                       f"{render.seconds(c['all_reduce_s'])}"),
        *[(label, f"{render.gib(c[f'{dim}_bytes'])} in {render.seconds(c[f'{dim}_s'])}, "
                  f"exposed {render.seconds(c[f'{dim}_exposed_s'])}")
          for dim, label in (("tp", "tensor parallel"), ("cp", "context parallel"),
                             ("pp", "pipeline p2p")) if pl[dim] > 1],
        *_moe_lines(d),
        *([("pipeline bubble", f"{render.seconds(t['bubble_s'])} "
                               f"({100 * t['bubble_s'] / d['step_time_s']:.1f} % of the step)")]
          if pl["pp"] > 1 else []),
        ("exposed comm", f"{render.seconds(c['exposed_s'])} "
                         f"({100 * c['exposed_s'] / d['step_time_s']:.1f} % of the step)"),
    ]))
    lines.extend(threshold_lines(d, p.inputs["nic_share_bytes_per_s"] / GBIT_PER_S_BYTES_PER_S))
    if d.get("advice"):
        lines.append("\nfaster at this scale")
        lines.extend(render.note_lines(f"{a['setting']}: {a['tokens_per_s_per_gpu']:,.0f} "
                                       f"tokens/s per GPU ({100 * a['gain']:+.0f} %)"
                                       for a in d["advice"]))
    if report is not None:
        from fsdpsim.drivers.procurement import RunAssumptions

        lines.append(run_table(report, run or RunAssumptions()))
    if d["notes"]:
        lines.append("\nnotes")
        lines.extend(render.note_lines(d["notes"]))
    return "\n".join(lines)


def threshold_lines(d: dict, have_gbps: float) -> list[str]:
    """The thresholds and sensitivities of a prediction (fsdpsim.drivers.sensitivity): the 95 %
    readings that the bottleneck follows, the seed paper's hide-communication readings, the memory
    ceilings, and each resource's gain when 5 % faster."""
    th, sens, tr, pl = d["thresholds"], d["sensitivity"], d["training"], d["plan"]
    have_tokens = tr["micro_batch"] * tr["seq_len"] // pl["cp"]
    # The seed study's reading weighs per-micro-batch FSDP collectives against compute; DDP and
    # ZeRO-1 reduce once per step, after the last backward.
    once_per_step = ("n/a: gradients are reduced once per step (DDP / ZeRO-1), not per "
                     "micro-batch" if pl["sharding"] in ("none", "optimizer") else "")

    def gbps(v, zero, null, gives=""):
        return (zero if v == 0 else null if v is None
                else f"{v:,.1f} Gb/s (have {have_gbps:,.0f} Gb/s{gives})")

    def tokens(v, null):
        return ("any, down to one token" if v == 0 else null if v is None
                else f"{v:,.0f} (have {have_tokens:,})")

    share = f"{100 * th['throughput_share']:.0f} %"
    lines = ["\n" + render.wrap(f"thresholds for {share} of the throughput with infinite "
                                "inter-node bandwidth (a plan that fits is network-bound exactly "
                                "when these exceed what it has)"),
             render.key_values([
                 ("inter-node bandwidth per GPU", gbps(
                     th["inter_node_gbps_per_gpu_at_share"],
                     "any: no inter-node traffic that matters",
                     "beyond 2^30 x the present bandwidth",
                     f", which gives {100 * sens['inter_node_throughput_share']:.1f} %")),
                 ("tokens per GPU per micro-batch", tokens(
                     th["critical_tokens_per_gpu_at_share"],
                     "none: larger micro-batches do not reach it"))]),
             "\n" + render.wrap("hide-communication thresholds (Wang et al. 2025: a micro-batch's "
                         "data-parallel collectives take no longer than its compute)"),
             render.key_values([
                 ("inter-node bandwidth per GPU to hide comm", once_per_step or gbps(
                     th["min_inter_node_gbps_per_gpu"], "no inter-node traffic that matters",
                     "cannot hide at any bandwidth")),
                 ("critical tokens per GPU per micro-batch", once_per_step or tokens(
                     th["critical_tokens_per_gpu"], "none: larger micro-batches do not hide it"))]),
             "\nmemory ceilings",
             render.key_values([
                 ("largest micro-batch that fits", f"{th['max_micro_batch']}"
                  if th["max_micro_batch"] else "none: even micro-batch 1 does not fit with "
                  "this plan"),
                 (f"longest sequence at micro-batch {tr['micro_batch']}",
                  f"{th['max_seq_len']:,}" if th["max_seq_len"]
                  else "none: not even 1 token fits with this plan")])]
    words = {**BOTTLENECK_NAMES, "compute": "compute (peak FLOP/s)"}
    cost = f"{100 - 100 * th['throughput_share']:.0f} %"
    lines.append("\n" + render.wrap(f"sensitivity (tokens/s gained with each resource "
                             f"{100 * (sens['speedup'] - 1):.0f} % faster; the bottleneck is "
                             f"the largest, the network only when it costs more than {cost})"))
    lines.append(render.key_values([(words[k], f"{100 * v:+.2f} %")
                                    for k, v in sens["throughput_gain"].items()]))
    return lines


__all__ = ["predict_table", "threshold_lines", "BOTTLENECK_WORDS"]
