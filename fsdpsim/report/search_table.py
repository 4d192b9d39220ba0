"""The report of ``fsdpsim search``: one dict (JSON, CSV rows) and its table."""

from __future__ import annotations

from typing import Any

from fsdpsim.engine import MEMORY_PRESSURE_FRACTION
from fsdpsim.util.text import wrap
from fsdpsim.drivers.search.export import CANNOT, megatron_args, torchtitan_toml
from fsdpsim.drivers.search.explain import differences, plan_line
from fsdpsim.report.command import command_lines, plan_lines, predict_command
from fsdpsim.report.words import limit_words, tokens_words
from fsdpsim.plan.knobs import switch_fields
from fsdpsim.plan.training import default_global_batch
from fsdpsim.util.units import GIB_BYTES, million_tokens_text

#: The default budget's share of the GPU's memory (predict's near-the-limit rule); a plan above
#: it (a larger ``--memory-budget-gib``) is marked tight.
TIGHT_FRACTION = MEMORY_PRESSURE_FRACTION
#: Time parts of the best plan's step shown by ``--explain`` (predict's ``time`` keys).
BREAKDOWN = (("compute_s", "compute (incl. recompute and optimizer)"),
             ("recompute_s", "  of which recompute"), ("exposed_comm_s", "exposed communication"),
             ("bubble_s", "pipeline bubble"), ("optimizer_s", "optimizer step"))


def search_command(o: dict[str, Any], training, choice, catalog_dirs=()) -> str:
    """The ``fsdpsim predict`` command that reproduces ``choice``'s numbers
    (:func:`fsdpsim.report.command.predict_command`) from search's options ``o``."""
    return predict_command({**o, "num_gpus": choice.plan.num_gpus, "seq_len": training.seq_len},
                           plan_line(choice), catalog_dirs)


def report_dict(spec, system, training, o: dict[str, Any], results, rows,
                catalog_dirs=(), runs=None, limits=(None, None)) -> dict[str, Any]:
    """Query, space statistics, the ranked plans (each with predict's numbers, the cost, energy
    and time of its run as compare reports them (``runs``:
    :func:`fsdpsim.drivers.procurement.run_summary` of each) and the predict command that
    reproduces them), the best plan's breakdown and cut-offs, and the best plan for torchtitan
    and Megatron-LM."""
    best_c, best_p = rows[0]
    budget_gib = results[-1][1].budget_bytes / GIB_BYTES
    runs = runs or [{} for _ in rows]
    plans = []
    for rank, ((c, p), run) in enumerate(zip(rows, runs), 1):
        v = p.values
        plans.append({
            "rank": rank, "plan": plan_line(c),
            "predict_command": search_command(o, training, c, catalog_dirs),
            "num_gpus": c.plan.num_gpus, **run,
            "tokens_per_s": v["tokens_per_s"], "tokens_per_s_per_gpu": v["tokens_per_s_per_gpu"],
            "step_time_s": v["step_time_s"], "mfu": v["mfu"], "hfu": v["hfu"],
            "mfu_native": v["mfu_native"],
            "peak_precision": p.utilisation()["native_precision"],
            "peak_gib": v["peak_bytes"] / GIB_BYTES,
            "budget_gib": budget_gib, "gpu_memory_gib": v["capacity_bytes"] / GIB_BYTES,
            "above_default_budget": bool(v["peak_bytes"] > TIGHT_FRACTION
                                         * v["capacity_bytes"]),
            "bottleneck": p.bottleneck,
            "vs_best": c.score / best_c.score - 1.0 if best_c.score > 0 else
            best_c.score / c.score - 1.0 if c.score else 0.0,
            "gives_up": "" if rank == 1 else differences(best_c, c),
            "tp": c.plan.tp, "pp": c.plan.pp, "cp": c.plan.cp, "vpp": c.plan.vpp,
            "ep": c.plan.ep, "etp": c.plan.etp,
            "dp": c.plan.dp, "dp_shard": c.plan.dp_shard,
            "dp_replicate": c.plan.dp_replicate, "sharding": c.plan.sharding,
            "pp_schedule": c.plan.pp_schedule if c.plan.pp > 1 else None,
            **switch_fields(c.plan),
            "pp_first_layers": c.plan.pp_first_layers, "pp_last_layers": c.plan.pp_last_layers,
            "mesh_order": ",".join(c.plan.mesh_order), "grad_sync": c.plan.grad_sync,
            "keep_gathered": c.plan.keep_gathered,
            "reshard_after_forward": c.plan.reshard_after_forward,
            "micro_batch": c.micro_batch, "grad_accum": c.grad_accum,
            "global_batch": c.global_batch, "tokens_per_step": c.global_batch * training.seq_len,
            "recompute": c.recompute, "recompute_layers": c.recompute_layers,
            "layers_per_stage": c.layers_per_stage,
        })
    time = best_p.values  # predict's "time" parts, without the rest of its report
    # the query's batch: the given one, or the default before each mesh's adjustment
    batch = training.global_batch or default_global_batch(training.seq_len)
    space = {"plans": sum(r.plans for _, r in results),
             "plans_fitting": sum(r.plans_fitting for _, r in results),
             "candidates_evaluated": sum(r.candidates for _, r in results),
             "seconds": sum(r.elapsed_s for _, r in results)}
    space["candidates_per_s"] = space["candidates_evaluated"] / max(space["seconds"], 1e-9)
    cut = [{"plan": plan_line(c), "num_gpus": n, "tokens_per_s": c.tokens_per_s,
            "peak_gib": c.peak_bytes / GIB_BYTES, "why": why}
           for n, r in results for c, why in r.cut_off]
    cut.sort(key=lambda d: -d["tokens_per_s"])
    return {
        "query": {"model": spec.name, "system": system.label,
                  "num_gpus": [n for n, _ in results], "seq_len": training.seq_len,
                  "global_batch": batch, "global_batch_default": training.global_batch is None,
                  "tokens_per_step": batch * training.seq_len,
                  "precision": training.precision, "framework": o["framework"],
                  "memory_budget_gib": budget_gib,
                  "gpu_memory_gib": system.accelerator.memory_bytes / GIB_BYTES,
                  "default_budget_fraction": TIGHT_FRACTION,
                  "objective": o["objective"], "fixed": [str(f) for f in o["fix"]],
                  "train_tokens": runs[0].get("train_tokens"),
                  "deadline_days": limits[0], "budget_usd": limits[1]},
        "space": space,
        "plans": plans,
        "best_breakdown_s": {k: time[k] for k, _ in BREAKDOWN} | {"step_time_s":
                                                                  best_p.values["step_time_s"]},
        "cut_off": cut[:3],
        "torchtitan": torchtitan_toml(best_c, training),
        "megatron": megatron_args(best_c, training),
    }


def report_table(report: dict[str, Any], rows, explain: bool = False) -> str:
    """The ranking as text; with ``explain`` the best plan's breakdown and the cut-offs."""
    q, sp = report["query"], report["space"]
    gpus = ", ".join(f"{n:,}" for n in q["num_gpus"])
    batch, batch_words = _batch_words(q, report["plans"])
    out = [wrap(f"search: {q['model']} on {gpus} GPUs — {q['system']}", hanging="  "),
           wrap(f"  seq {q['seq_len']:,} · {batch_words} · {q['precision']} · "
                f"{q['framework']}", hanging="  "),
           wrap(f"  budget {q['memory_budget_gib']:.1f} GiB/GPU ({_budget_words(q)}) · "
                f"objective {q['objective']}"
                + (f" · fixed {', '.join(q['fixed'])}" if q["fixed"] else ""), hanging="  "),
           *_limit_lines(q),
           f"  {sp['plans']:,} plans ({sp['plans_fitting']:,} fit), "
           f"{sp['candidates_evaluated']:,} candidates evaluated in {sp['seconds']:.2f} s", ""]
    for p in report["plans"]:  # two lines a plan: the plan, then its numbers (<= 100 wide)
        vs = "best" if p["rank"] == 1 else f"{100 * p['vs_best']:+.1f} % vs #1"
        tight = " (tight)" if p["above_default_budget"] else ""
        out += plan_lines(p["plan"], f"{p['rank']:>2}. ", "      ")
        out += [
                f"    {p['tokens_per_s_per_gpu']:,.0f} tok/s/GPU · "
                f"MFU {100 * p['mfu_native']:.1f} %{_peak_words(p)} · "
                f"{p['peak_gib']:.1f} GiB{tight} · {_neck(p['bottleneck'])} · {vs}"]
        money = _money_line(p, q)
        if money:
            out.append(money)
        if p["rank"] > 1:
            out.append(f"    differs: {p['gives_up']}")
        if p["global_batch"] != batch:
            out.append(f"    trains global batch {p['global_batch']:,} sequences: the default "
                       f"moved to a multiple of its dp ({p['dp']:,})")
        out += command_lines(p["predict_command"], indent="    ")
    if any(p["above_default_budget"] for p in report["plans"]):
        out += ["", wrap(f"(tight) = above {100 * TIGHT_FRACTION:.0f} % of the GPU's memory (the "
                         "default budget): allocator retries and fragmentation can slow or stop "
                         "a real run; the default --memory-budget-gib keeps headroom",
                         hanging="  ")]
    if explain:
        b = report["best_breakdown_s"]
        out += ["", f"why #1 wins — its step of {b['step_time_s'] * 1e3:,.0f} ms:"]
        for key, label in BREAKDOWN:
            out.append(f"  {label:<40} {b[key] * 1e3:>9,.1f} ms")
        if report["cut_off"]:
            out += ["", "faster plans that cannot run here:"]
            for c in report["cut_off"]:
                reason = (f"needs {c['peak_gib']:.1f} GiB > {q['memory_budget_gib']:.1f}"
                          if c["why"] == "memory" else "its pipeline schedule cannot run "
                                                          "these micro-batches")
                out += plan_lines(c["plan"], "  ", "    ")
                out.append(f"    {c['tokens_per_s'] / c['num_gpus']:,.0f} tok/s/GPU, {reason}")
        else:
            out += ["", "no faster plan was cut off by memory or the schedule"]
        free = report.get("without_constraints")
        if free:
            out += ["", f"without the constraints ({', '.join(q['fixed']) or 'limits'}) the "
                        f"best is {free['plan']}: {100 * free['gain']:+.1f} %"
                        + ("" if free["gain"] > 1e-12 else " (the constraints cost nothing)")]
    out += ["", "best plan for torchtitan (--emit torchtitan):",
            *_indented_toml(report["torchtitan"]),
            "", "for Megatron-LM (--emit megatron):",
            # the arguments without their notes; where it cannot run the plan, why not
            *(_indented_toml(report["megatron"]) if CANNOT in report["megatron"].split("\n")[0]
              else _wrapped([line for line in report["megatron"].splitlines()
                             if not line.startswith("#")]))]
    return "\n".join(out)


def _indented_toml(text: str, width: int = 100) -> list[str]:
    """The emitted TOML indented by two; a comment line too long for ``width`` continues on
    further comment lines (TOML reads each as a comment)."""
    import textwrap

    out: list[str] = []
    for line in text.splitlines():
        if len(line) + 2 <= width or not line.lstrip().startswith("#"):
            out.append("  " + line)
            continue
        lead = line[:len(line) - len(line.lstrip())] + "# "
        body = line.lstrip()[1:].strip()
        out += ["  " + part for part in textwrap.wrap(body, width - 2, initial_indent=lead,
                                                      subsequent_indent=lead + "  ")]
    return out


def _batch_words(q: dict[str, Any], plans: list[dict]) -> tuple[int, str]:
    """The global batch of the header and its words: the one every listed plan trains (the
    default moved to a multiple of their dp where it is not the default), else the query's;
    a plan that trains another says so on its own line."""
    batch = q["global_batch"]
    trained = {p["global_batch"] for p in plans}
    if not q["global_batch_default"]:
        why = ""
    elif len(trained) == 1 and trained != {batch}:
        why = f", the default {batch:,} moved to a multiple of every plan's dp"
        batch = trained.pop()
    else:
        why = ", the default; each mesh a multiple of its dp"
    return batch, (f"global batch {batch:,} sequences ({million_tokens_text(batch * q['seq_len'])} "
                   f"tokens{why})")


def _money_line(p: dict[str, Any], q: dict[str, Any]) -> str:
    """A plan's GPUs, dollars and days (with failures, as compare shows them): the whole run
    with ``--tokens``, else per million tokens under ``--objective cost``; "" otherwise (and
    without a price and tokens)."""
    days, usd, per_m = p.get("failures.train_days"), p.get("failures.train_cost_usd"), \
        p.get("cost_usd_per_million_tokens")
    if days is not None:
        cost = "no price" if usd is None else f"${usd / 1e6:,.2f}M"
        return (f"    {p['num_gpus']:,} GPUs · {tokens_words(q['train_tokens'])} in "
                f"{days:,.1f} days · {cost} (failures included)")
    if per_m is not None and q["objective"] != "throughput":
        return f"    {p['num_gpus']:,} GPUs · ${per_m:,.3f} per million tokens"
    return ""


def _limit_lines(q: dict[str, Any]) -> list[str]:
    """The query's deadline or budget, and the order it ranks by."""
    days, usd = q.get("deadline_days"), q.get("budget_usd")
    if days is None and usd is None:
        return []
    limits = limit_words(days, usd)
    order = {"cost": "the cheapest first", "time-to-train": "the fastest first",
             "energy": "the least energy first", "throughput": "the most tokens/s first"}
    return [wrap(f"  plans that train {tokens_words(q['train_tokens'])} {limits} (failures "
                 f"included), {order[q['objective']]}", hanging="    ")]


def _peak_words(p: dict[str, Any]) -> str:
    """" of the NVFP4 peak" for a plan whose MFU is against a low-precision peak; "" for a
    16-bit one."""
    prec = p.get("peak_precision") or "bf16"
    return "" if prec in ("bf16", "fp16", "fp32") else f" of the {prec.upper()} peak"


def _budget_words(q: dict[str, Any]) -> str:
    """How the budget was set: the default share of the GPU's memory, or the user's."""
    share = q["memory_budget_gib"] / q["gpu_memory_gib"]
    if abs(share - q["default_budget_fraction"]) < 1e-9:
        return f"default: {100 * share:.0f} % of {q['gpu_memory_gib']:.0f} GiB"
    return f"--memory-budget-gib: {100 * share:.0f} % of {q['gpu_memory_gib']:.0f} GiB"


def _wrapped(args: list[str], width: int = 96) -> list[str]:
    """Arguments joined into lines of at most ``width`` characters, indented, continued."""
    lines, line = [], "  "
    for arg in args:
        if len(line) + len(arg) + 1 > width and line.strip():
            lines.append(line + " \\")
            line = "  "
        line += ("" if not line.strip() else " ") + arg
    return lines + [line]


def _neck(code: str) -> str:
    """The bottleneck in every report's words: "inter-node network"."""
    from fsdpsim.report.words import bottleneck_name

    return "bound by " + bottleneck_name(code)
