"""The ``fsdpsim predict`` command that reproduces a ranked or compared plan's numbers: the
plan in its one line (:func:`fsdpsim.plan.spelling.format_plan`, read back by ``predict
--plan``) and the options of the query that change a prediction (model, hardware, sequence,
precision, framework, kernels). ``tests/test_plan_command.py`` reruns these commands."""

from __future__ import annotations

import re
import shlex
from typing import Any, Mapping

from fsdpsim.plan.knobs import KERNEL_KNOBS, KNOBS, kernel_default

#: predict's options a command carries, in this order, with the default it leaves out; then
#: the kernel knobs (:data:`fsdpsim.plan.knobs.KERNEL_KNOBS`), each left out where it is what
#: predict takes when it is not given (:func:`kernel_default`).
OPTIONS: dict[str, Any] = {
    "model": None, "gpu": None, "cluster": None, "num_gpus": None, "gpus_per_node": None,
    "network": None, "inter_node_gbps_per_gpu": None, "power_cap_w": None,
    "placement": "packed", "seq_len": None, "precision": "bf16", "optimizer": "adamw",
    "framework": "fsdp2",
}


def predict_command(options: Mapping[str, Any], plan_text: str,
                    catalog_dirs: tuple[str, ...] = ()) -> str:
    """``fsdpsim predict --model … --plan '…'``: the options of :data:`OPTIONS` that
    ``options`` gives and that differ from predict's defaults, the kernel knobs that differ
    from what predict takes without them, then the plan (quoted for a POSIX shell)."""
    words = ["fsdpsim"] + [w for d in catalog_dirs for w in ("--catalog", d)] + ["predict"]
    for name, default in OPTIONS.items():
        value = options.get(name)
        if value is None or value == default or value == () or value == "":
            continue
        words += _option_words(name, value)
    framework, precision = options.get("framework"), options.get("precision")
    for name in KERNEL_KNOBS:
        value = options.get(name)
        if value is None:
            continue
        value = KNOBS[name].value(value)
        if value != kernel_default(name, framework, precision):
            words += _option_words(name, value)
    words += ["--plan", plan_text]
    return " ".join(shlex.quote(w) for w in words)


def _option_words(name: str, value: Any) -> list[str]:
    """``--name value`` of predict's option ``name`` (a flag alone, or its off spelling)."""
    knob = KNOBS.get(name)
    flag = knob.option if knob is not None else "--" + name.replace("_", "-")
    if value is True:
        return [flag]
    if value is False:  # only a declared flag has an off spelling
        return [knob.off_option] if knob is not None else []
    if isinstance(value, (tuple, list)):
        return [flag, ",".join(map(str, value))]
    return [flag, str(value)]


def plan_lines(plan_text: str, first: str, rest: str, width: int = 100) -> list[str]:
    """``plan_text`` after ``first`` on lines of at most ``width`` columns, broken after its
    separators (`` × ``, `` · ``) and continued after ``rest`` (a word longer than a line
    alone on its line). The plan reads back the same from the broken lines
    (:func:`fsdpsim.plan.spelling.parse_plan` reads any whitespace as one space)."""
    pieces = re.split(r"(?<= [×·]) ", plan_text)
    lines, line = [], first
    for piece in pieces:
        if line.strip() and line != first and len(line) + len(piece) > width:
            lines.append(line.rstrip())
            line = rest
        line += piece + ("" if piece is pieces[-1] else " ")
    return lines + [line]


def command_lines(command: str, indent: str = "    ", width: int = 100) -> list[str]:
    """``command`` over lines of at most ``width`` columns, each but the last continued with
    `` \\``; an option and its value stay together; a quoted plan too long for a line is
    broken inside its quotes (:func:`plan_lines`), which the shell keeps and the plan's parser
    reads back."""
    words = [shlex.quote(w) for w in shlex.split(command)]
    units: list[str] = []
    for w in words:  # "--flag value" as one unit
        if units and units[-1].startswith("--") and " " not in units[-1] \
                and not w.startswith("--"):
            units[-1] += " " + w
        else:
            units.append(w)
    lines, line = [], indent
    for u in units:
        if line.strip() and len(line) + 1 + len(u) + 2 > width:
            lines.append(line + " \\")
            line = indent + "  "
        if len(line) + len(u) + 1 > width and u.startswith("--plan '"):
            broken = plan_lines(u, line + ("" if not line.strip() else " "),
                                " " * (len(line) + (1 if line.strip() else 0) + 8), width)
            lines += broken[:-1]
            line = broken[-1]
            continue
        line += ("" if not line.strip() else " ") + u
    return lines + [line]


__all__ = ["predict_command", "OPTIONS", "command_lines", "plan_lines"]
