"""The table ``fsdpsim compare`` prints and the data ``fsdpsim report`` draws: a row per
(model,) hardware and GPU count, the plans, and the notes that say what every row assumes."""

from __future__ import annotations

from typing import Any

from fsdpsim.util.units import million_tokens_text
from fsdpsim.drivers.search.objective import DEFAULT_MEMORY_BUDGET_FRACTION
from fsdpsim.report import render
from fsdpsim.plan.knobs import kernel_fields, kernel_words
from fsdpsim.plan.training import default_global_batch
from fsdpsim.report.command import command_lines, predict_command
from fsdpsim.report.procurement import assumption_notes, money, rate, short_source
from fsdpsim.report.words import NOT_RUNNABLE, bottleneck_name, mfu_note
from fsdpsim.util.text import wrap

WIDTH = 100


def _cell(v: dict, key: str, text: str, best: dict[str, list[int]], i: int) -> str:
    return text + ("*" if i in best.get(key, ()) else "") if text != "-" else text


def _num(x: Any, spec: str, scale: float = 1.0) -> str:
    return "-" if not isinstance(x, (int, float)) or x != x else f"{x * scale:{spec}}"


#: Columns a row that does not fit leaves empty (predict prints them only "if it fitted").
_IF_IT_FITTED = ("tok/s", "tok/s/GPU", "MFU")


def table_rows(values: list[dict], best: dict[str, list[int]], tokens: float | None
               ) -> list[dict[str, str]]:
    """The comparison table: a row per (model,) hardware and GPU count; ``*`` marks the best
    value of each column among the rows that fit."""
    many_models = len({v["model"] for v in values}) > 1
    out = []
    for i, v in enumerate(values):
        row = {"model": v["model"]} if many_models else {}
        row.update({"hardware": v["hardware"], "GPUs": f"{v['num_gpus']:,}"})
        if "tokens_per_s" not in v:
            row.update({"tok/s": "-", "note": f"no plan: {v['reason']}"[:60]})
            out.append(row)
            continue
        cells = [("tok/s", "tokens_per_s", _num(v["tokens_per_s"], ",.0f")),
                 ("tok/s/GPU", "tokens_per_s_per_gpu", _num(v["tokens_per_s_per_gpu"], ",.0f")),
                 ("MFU", "mfu_native", _num(v["mfu_native"], ".1%")),
                 ("mem GiB", "memory_share",
                  f"{v['peak_bytes'] / 2**30:.0f}/{v['capacity_bytes'] / 2**30:.0f}"
                  + ("!" if not v["fits"] else "~" if v["above_default_budget"] else ""))]
        if tokens is None:
            cells += [("$/Mtok", "cost_usd_per_million_tokens",
                       _num(v["cost_usd_per_million_tokens"], ".3f")),
                      ("kWh/Mtok", "energy_kwh_per_million_tokens",
                       _num(v["energy_kwh_per_million_tokens"], ".3f"))]
        else:
            f = {k: v[f"failures.{k}"] for k in ("train_days", "train_cost_usd",
                                                  "train_energy_kwh")}
            cells += [("days", "failures.train_days", _num(f["train_days"], ",.1f")),
                      ("cost", "failures.train_cost_usd", money(f["train_cost_usd"])),
                      ("MWh", "failures.train_energy_kwh",
                       _num(f["train_energy_kwh"], ",.0f", 1e-3))]
        for head, key, text in cells:
            if not v["fits"] and head in _IF_IT_FITTED:  # not runnable: no headline number
                text = "-"
            row[head] = _cell(v, key, text, best, i)
        row["bottleneck"] = bottleneck_name(v["bottleneck"]) if v["fits"] else NOT_RUNNABLE
        out.append(row)
    return out


def plan_rows(values: list[dict]) -> list[dict[str, str]]:
    """The batch of each row (its plan: :func:`command_text`)."""
    many_models = len({v["model"] for v in values}) > 1
    out = []
    for v in values:
        row = {"model": v["model"]} if many_models else {}
        row.update({"hardware": v["hardware"], "GPUs": f"{v['num_gpus']:,}"})
        if "plan" not in v:
            out.append({**row, "mbs x accum": "-"})
            continue
        row.update({"mbs x accum": f"{v['micro_batch']} x {v['grad_accum']}",
                    "recompute": v["recompute"], "batch (seqs)": f"{v['global_batch']:,}",
                    "rent $/GPU-h": "-" if v["price_usd_per_gpu_hour"] is None
                    else rate(v["price_usd_per_gpu_hour"])})
        out.append(row)
    return out


def command_text(values: list[dict]) -> list[str]:
    """Each row's plan as the ``fsdpsim predict`` command that reproduces its numbers."""
    many_models = len({v["model"] for v in values}) > 1
    out = []
    for v in values:
        if "predict_command" in v:
            name = (f"{v['model']} on " if many_models else "") + \
                f"{v['hardware']} x {v['num_gpus']:,}"
            out += ["", f"{name}:", *command_lines(v["predict_command"], indent="  ",
                                                    width=WIDTH)]
    return out


def header(values: list[dict], training, run, plan_kind: str) -> str:
    models = ", ".join(dict.fromkeys(v["model"] for v in values))
    budget = "" if run.tokens is None else f", {run.tokens / 1e12:g}T tokens to train"
    plan = (f"best plan per row within {100 * DEFAULT_MEMORY_BUDGET_FRACTION:.0f} % of GPU "
            "memory (fsdpsim search's default budget)" if plan_kind == "search"
            else "FSDP plan per row (fsdpsim predict)")
    return f"fsdpsim compare: {models}; {_batch_words(values, training)}{budget}; {plan}"


def _batch_words(values: list[dict], training) -> str:
    """The global batch the rows train: the one every row trains (the default moved to a
    multiple of the rows' dp where it is not the default), else the default and each batch."""
    batch = training.global_batch or default_global_batch(training.seq_len)
    trained = sorted({v["global_batch"] for v in values if v.get("global_batch")})
    seq = training.seq_len
    if training.global_batch or trained in ([], [batch]):
        moved = ("" if training.global_batch else
                 ", the default, or where a row's dp does not divide it the nearest multiple")
        return (f"every row at global batch {batch:,} x {seq:,} tokens "
                f"({million_tokens_text(batch * seq)} tokens/step){moved}")
    if len(trained) == 1:
        return (f"every row at global batch {trained[0]:,} x {seq:,} tokens "
                f"({million_tokens_text(trained[0] * seq)} tokens/step): the default "
                f"{batch:,} moved to the nearest multiple of the rows' dp")
    return (f"rows at global batch {' or '.join(f'{b:,}' for b in trained)} x {seq:,} tokens "
            f"(the default {batch:,}, moved to the nearest multiple of a row's dp where it does "
            "not divide it; each row's in the plans below)")


def notes(values: list[dict], run, training) -> list[str]:
    out = ["* best of the column among rows that fit; mem GiB = peak/capacity per GPU "
           "(! = does not fit)"]
    if any(v.get("above_default_budget") and v.get("fits") for v in values):
        out.append(f"~ = above {100 * DEFAULT_MEMORY_BUDGET_FRACTION:.0f} % of the GPU's memory: "
                   "allocator retries and fragmentation can slow or stop a real run")
    kernels = [f"{words} ({option})" for words, option in kernel_words(kernel_fields(training))]
    if kernels:
        out.append("every row: " + "; ".join(kernels))
    mfu = mfu_note(v.get("peak_precision") for v in values)
    if mfu:
        out.append(mfu)
    if run.tokens is not None:
        out.append("days, cost and MWh include failures, checkpoints and restarts (goodput); "
                   "the failure-free numbers are in the JSON/CSV")
    out += assumption_notes(run)
    rents = {}
    for v in values:
        if v.get("price_kind") and v["price_kind"] != "--price":
            rents[v["accelerator"] if v["hardware"] == v["accelerator"] else v["hardware"]] = (
                f"{v['hardware']} {rate(v['price_usd_per_gpu_hour'])} ({v['price_kind']}, "
                f"{short_source(v['price_source'])}, {v['price_retrieved']})")
    if rents:
        out.append("rent: " + "; ".join(rents.values()))
    missing = sorted({v["hardware"] for v in values if "plan" in v and not v["price_kind"]})
    if missing:
        out.append(f"no price for {', '.join(missing)}: give --price GPU=USD/h")
    return out


def report_data(rows, training, run, plan_kind: str, options: dict[str, Any] | None = None,
                catalog_dirs: tuple[str, ...] = ()) -> dict[str, Any]:
    """The comparison as plain data: query, assumptions, rows (each with a plan: the
    ``fsdpsim predict`` command that reproduces its numbers, from compare's ``options``) and
    the best row per column."""
    from fsdpsim.drivers.compare import best_rows, row_values

    values = [row_values(r) for r in rows]
    for r, v in zip(rows, values):
        if "plan" in v:
            c = r.case
            v["predict_command"] = predict_command(
                {**(options or {}), "model": c.model_id or c.spec.name, "gpu": None,
                 "cluster": None, c.kind: c.hardware, "num_gpus": c.num_gpus,
                 "seq_len": training.seq_len}, v["plan"], catalog_dirs)
    best = best_rows(values)
    # --precision not given: each row runs its GPU's own default (Case.precision)
    precisions = list(dict.fromkeys(r.case.precision or training.precision for r in rows))
    batch = training.global_batch or default_global_batch(training.seq_len)
    return {"query": {"seq_len": training.seq_len, "global_batch": batch,
                      "global_batch_default": training.global_batch is None,
                      "tokens_per_step": batch * training.seq_len,
                      "precision": (precisions[0] if len(precisions) == 1 else
                                    ", ".join(precisions) + " (each GPU's default)"),
                      "optimizer": training.optimizer,
                      **kernel_fields(training),
                      "plan": plan_kind, "train_tokens": run.tokens},
            "assumptions": {"pue": run.pue, "gpu_mtbf_hours": run.gpu_mtbf_s / 3600,
                            "restart_s": run.restart_s,
                            "checkpoint_bytes_per_s": run.checkpoint_bytes_per_s},
            "rows": values,
            "best": {k: [values[i]["hardware"] + f" x {values[i]['num_gpus']}" for i in idx]
                     for k, idx in best.items()},
            "best_index": best}


def compare_text(data: dict[str, Any], training, run) -> str:
    values, best = data["rows"], data["best_index"]
    lines = [wrap(header(values, training, run, data["query"]["plan"]), hanging="  "), "",
             render.table(table_rows(values, best, run.tokens)), "", "plans",
             render.table(plan_rows(values)), *command_text(values), "", "notes"]
    lines += [wrap(n, "  - ", "    ") for n in notes(values, run, training)]
    return "\n".join(lines)
