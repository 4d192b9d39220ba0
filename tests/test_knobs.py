"""Every knob is declared once (:mod:`fsdpsim.plan.knobs`): each command that claims it has its
option, with the declared spelling, help and parsing, no command declares one by hand, a bad
value is one line with exit status 2 in every command, and ``--price`` takes the same forms
everywhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from conftest import assert_one_line_error, run

from fsdpsim.cli import cli
from fsdpsim.plan.frameworks import KNOB_DEFAULTS
from fsdpsim.plan.knobs import (COMMANDS, FIX, FRAMEWORK, KERNEL_KNOBS, KINDS, KNOBS, ONE,
                                PLAN_SWITCHES, knob_default)

CLI = Path(__file__).resolve().parents[1] / "fsdpsim" / "cli"


def _params(command: str) -> dict[str, click.Parameter]:
    ctx = click.Context(cli)
    return {p.name: p for p in cli.get_command(ctx, command).params}


def test_every_knob_is_an_option_of_the_commands_it_names_and_of_no_other():
    params = {c: _params(c) for c in (*COMMANDS, "plot", "report")}
    for k in KNOBS.values():
        assert k.kind in KINDS and set(k.commands) <= set(COMMANDS), k.name
        for command in COMMANDS:
            if not k.is_option_of(command):  # search takes a FIX knob in --fix
                assert k.name not in params[command], (k.name, command)
                continue
            p = params[command][k.name]
            assert k.option in p.opts, (k.name, command, p.opts)
            if k.kind == "flag":
                assert p.secondary_opts == [k.off_option], (k.name, command)
            assert p.help == (k.help_of(command) or None), (k.name, command)
            if k.commands[command] == ONE and k.kind == "choice":
                assert tuple(p.type.choices) == k.choices, (k.name, command)
        if "sweep" in k.commands:  # plot draws sweep's grid
            assert k.name in params["plot"], k.name
        if "compare" in k.commands:  # report writes compare's rows
            assert k.name in params["report"], k.name


def test_no_command_declares_a_knob_option_by_hand():
    spellings = {k.option for k in KNOBS.values()} | {k.off_option for k in KNOBS.values()}
    found = []
    # validate's and calibrate's --framework and --gpu filter a file's rows: not knobs
    for path in sorted(set(CLI.glob("*.py")) - {CLI / "validate.py"}):
        for match in re.finditer(r"click\.option\(\s*\"(--[a-z0-9-]+)", path.read_text()):
            flag = match.group(1)
            if flag in spellings:
                found.append(f"{path.name}: {flag}")
    assert found == []


def _good_and_bad(k) -> tuple[str, object, str]:
    """A ``--fix`` value of knob ``k`` that its declaration accepts, the value it reads to, and
    one it refuses."""
    if k.kind == "flag":
        return "on", True, "maybe"
    if k.kind == "choice":
        return k.choices[-1], k.choices[-1], "bogus"
    return str(k.rule.hi), int(k.rule.hi), str(k.rule.hi + 1)


def test_search_fix_takes_each_plan_knob_as_its_declaration_types_it():
    """``search --fix KEY=VALUE`` holds exactly the knobs declared with search :data:`FIX`,
    under their key, each read as its option reads it: the rule's bounds (not a hand-kept
    table of types), a choice's words but ``auto``, a flag's true/false; the knob's own name is
    another spelling of its key."""
    from fsdpsim.drivers.search.fix import parse_fix
    from fsdpsim.util.errors import ConfigError

    fixed = {k.key: k for k in KNOBS.values() if k.commands.get("search") == FIX}
    assert {"tp", "pp", "cp", "ep", "vpp", "micro_batch", "recompute", "recompute_layers",
            "sharding", "keep_gathered", *PLAN_SWITCHES} <= set(fixed)
    for key, k in fixed.items():
        good, read, bad = _good_and_bad(k)
        expected = {"sharding": ["none", "optimizer", "grad_op", "full"][read]} \
            if key == "zero" else {key: read}
        assert parse_fix([f"{key}={good}"]) == expected, key
        assert parse_fix([f"{k.name}={good}"]) == expected, key
        with pytest.raises(ConfigError, match=f"--fix {key}"):
            parse_fix([f"{key}={bad}"])
    for k in KNOBS.values():
        if k.key not in fixed:
            with pytest.raises(ConfigError, match="accepted names"):
                parse_fix([f"{k.key}=1"])
    with pytest.raises(ConfigError, match="accepted: none, selective, full"):
        parse_fix(["recompute=auto"])


def test_every_knob_of_sweep_is_a_key_of_a_grid_file():
    from fsdpsim.drivers.sweep.grid import GRID_KEYS

    for k in KNOBS.values():
        if "sweep" in k.commands:
            assert k.option[2:] in GRID_KEYS, k.name


def test_the_framework_knobs_are_those_the_profiles_default():
    framework = {k.name for k in KNOBS.values() if k.default == FRAMEWORK}
    for own in KNOB_DEFAULTS.values():
        assert set(own) <= framework
    for name in framework:  # a profile without its own default leaves the knob plain
        assert knob_default("fsdp2", name) == KNOBS[name].plain_value, name
        assert KNOBS[name].plain(KNOBS[name].plain_value), name


def _bad_value(k) -> str:
    return {"choice": "bogus", "number": "-5"}.get(k.kind, "")


@pytest.mark.parametrize("name", [k.name for k in KNOBS.values()
                                  if k.kind in ("choice", "number")])
def test_a_bad_value_of_a_knob_is_one_line_in_every_command_taking_one(capsys, name):
    k = KNOBS[name]
    for command, form in k.commands.items():
        if form != ONE:
            continue
        rc, out, err = run(capsys, command, k.option, _bad_value(k))
        line = assert_one_line_error(rc, out, err)
        assert k.option in line, (command, line)


@pytest.mark.parametrize("name", [k.name for k in KNOBS.values() if "sweep" in k.commands
                                  and k.kind == "number"])
def test_sweep_reads_a_number_knob_by_its_declared_rule(capsys, name):
    """sweep's grid (a list, or one value for the grid) refuses a number just past what the
    knob's declaration accepts, in one line naming the option and the declared range: no rule
    of sweep's own."""
    k = KNOBS[name]
    too_big = k.rule.hi * 2 if not k.rule.whole else int(k.rule.hi) + 1
    line = assert_one_line_error(*run(capsys, "sweep", "--model", "llama3-8b", k.option,
                                      str(too_big)))
    assert k.option in line and k.rule.describe() in line, line


@pytest.mark.parametrize("price", ["2", "$2/h", "h100=2", "h100=2/h,b200=9"])
def test_price_takes_the_same_forms_in_every_command(capsys, price):
    for command, extra in (("predict", ()), ("compare", ("--gpu", "h100", "--num-gpus", "8")),
                           ("sweep", ())):
        rc, out, err = run(capsys, command, *extra, "--price", price, "--format", "json")
        assert rc == 0, (command, err)
        data = json.loads(out)
        row = {"predict": lambda: data, "compare": lambda: data["rows"][0],
               "sweep": lambda: data[0]}[command]()
        assert row["price_usd_per_gpu_hour"] == 2.0, command
    rc, out, err = run(capsys, "search", "--price", price, "--objective", "cost", "--top", "1")
    assert rc == 0, err


@pytest.mark.parametrize("command", ["predict", "search", "compare", "sweep"])
@pytest.mark.parametrize("price", ["cheap", "h100=cheap", "h1000=2", "2,3"])
def test_a_bad_price_is_one_line_in_every_command(capsys, command, price):
    line = assert_one_line_error(*run(capsys, command, "--gpu", "h100", "--price", price))
    assert "--price" in line


def test_a_price_that_names_another_gpu_only_is_refused_where_one_gpu_runs(capsys):
    for command in ("predict", "search"):
        line = assert_one_line_error(*run(capsys, command, "--gpu", "h100", "--price",
                                          "b200=5"))
        assert "b200" in line and "h100" in line


def _stated(k):
    """A value of knob ``k`` as a measurement cell, and as predict's option parses it."""
    if k.kind == "flag":
        return "yes", True
    if k.kind == "choice":
        return k.choices[-1], k.choices[-1]
    if k.kind == "number":
        value = max(k.rule.lo, 1)
        return str(value), int(value) if k.rule.whole else float(value)
    return "a,b", "a,b"


def test_a_measurement_row_reaches_predict_through_each_knobs_column():
    from fsdpsim.measured.rows import framework_knobs, row_options

    import pandas as pd

    columns = {k.column: _stated(k) for k in KNOBS.values() if k.column}
    row = pd.Series({"id": "r", "gpu": "h100", "n_gpus": 8, "grad_accum": 3,
                     **{c: cell for c, (cell, _) in columns.items()}, "micro_batch": "2"})
    options = row_options(row)
    for k in KNOBS.values():
        if k.column and "predict" in k.commands and k.column != "micro_batch":
            assert options[k.name] == columns[k.column][1], k.name
        elif not k.column and "predict" in k.commands and k.name != "global_batch":
            assert options[k.name] == (None if k.default == FRAMEWORK else k.default), k.name
    assert options["global_batch"] == str(2 * 3 * 8)  # micro-batch x accumulation x dp
    known = framework_knobs(row)
    assert set(known) == {k.name for k in KNOBS.values() if k.default == FRAMEWORK
                          and k.field.startswith("training.")}
    for name, value in known.items():
        stated = columns[KNOBS[name].column][1]
        assert value == (stated if KNOBS[name].kind != "text" else "a,b"), name
    empty = framework_knobs(pd.Series({"id": "r", "recipe": "megatron", "precision": "nvfp4"}))
    assert empty["fused_loss"] is True and empty["bf16_layers"] == 0  # megatron's defaults


def test_every_field_a_knob_declares_is_in_predicts_json():
    """A knob's declared ``field`` is a key of predict's JSON (the kernel knobs' from their
    declaration: a new one appears there without a hand-written entry)."""
    result = CliRunner().invoke(cli, ["predict", "--model", "llama3-8b", "--gpu", "h100",
                                      "--num-gpus", "16", "--format", "json"])
    report = json.loads(result.output)
    missing = []
    for knob in KNOBS.values():
        if knob.field and "predict" in knob.commands:
            node = report
            for part in knob.field.split("."):
                node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
            if node is _MISSING:
                missing.append(knob.field)
    assert not missing
    assert [k for k in report["training"] if k in KERNEL_KNOBS] == list(KERNEL_KNOBS)


_MISSING = object()


def test_every_field_a_sweep_knob_declares_is_a_column_of_its_csv(capsys):
    """A knob ``sweep`` takes writes its declared ``field`` as a column of every sweep row."""
    import csv
    import io

    rc, out, err = run(capsys, "sweep", "--model", "llama3-8b", "--num-gpus", "8",
                       "--format", "csv")
    assert rc == 0, err
    columns = set(next(csv.reader(io.StringIO(out))))
    assert [k.field for k in KNOBS.values()
            if "sweep" in k.commands and k.field and k.field not in columns] == []


#: A kernel knob declared in a fresh interpreter before anything else reads the declarations:
#: every place that reads them must see it without an entry of its own.
_FAKE_KNOB = """
import pandas as pd
from fsdpsim.plan import knobs
fake = knobs._kernel("fake_kernel", "choice", "A fake kernel.", "A fake kernel, grid-wide.",
                     default=knobs.FRAMEWORK, choices=("off", "on"), words="fake kernel {}")
knobs.KNOBS["fake_kernel"] = fake
knobs.KERNEL_KNOBS += ("fake_kernel",)
knobs.SWEEP_KERNEL_KNOBS += ("fake_kernel",)

from fsdpsim.drivers.sweep.grid import build_grid, grid_keys
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.measured import cells
from fsdpsim.measured.published.tables import STATED_COLUMNS, stated_columns
from fsdpsim.measured.rows import PLAN_COLUMNS, framework_knobs, row_options
from fsdpsim.util.errors import ConfigError

assert "fake-kernel" in grid_keys()
catalog = load_catalog()
assert build_grid(catalog, {"fake-kernel": "on"}).kernel["fake_kernel"] == "on"
assert build_grid(catalog, {}).kernel["fake_kernel"] == "off"  # plain: no profile sets it
row = pd.Series({"id": "r", "gpu": "h100", "n_gpus": 8, "grad_accum": 1, "micro_batch": 1,
                 "fake_kernel": "on"})
assert row_options(row)["fake_kernel"] == "on"
assert framework_knobs(row)["fake_kernel"] == "on"
assert framework_knobs(row.drop("fake_kernel"))["fake_kernel"] == "off"
assert "fake_kernel" in PLAN_COLUMNS and "fake_kernel" in STATED_COLUMNS
assert stated_columns(row)["fake_kernel"] == "on"
frame = pd.DataFrame([{"id": "r", "fake_kernel": "maybe", "skip": ""}])
try:
    cells.check_columns(frame)
    raise SystemExit("a bad fake_kernel cell passed")
except ConfigError as exc:
    assert "column fake_kernel: 'maybe' is not accepted; accepted: off, on" in str(exc), exc
fields = {**{n: knobs.KNOBS[n].plain_value for n in knobs.KERNEL_KNOBS}, "fake_kernel": "on"}
assert knobs.kernel_words(fields) == [("fake kernel on", "--fake-kernel on")]
print("reached")
"""


def test_a_new_kernel_knob_reaches_the_grid_measurement_files_and_reports_from_its_declaration():
    """The sweep grid (its keys, reader and default), the measurement-row readers (predict's
    options, the framework knobs, the layout defaults, the published tables' stated columns,
    the choice checks) and the report words take a kernel knob from its declaration alone: a
    place that listed the kernel knobs by hand would miss the fake one."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FAKE_KNOB], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "reached", done.stderr[-2000:]


def test_a_sweep_row_has_every_kernel_knob_in_declaration_order():
    from fsdpsim.drivers.sweep.grid import build_grid
    from fsdpsim.drivers.sweep.run import run_sweep
    from fsdpsim.hardware.catalog import load_catalog

    frame = run_sweep(build_grid(load_catalog(), {"precision": "fp8", "fp8-attention": "true",
                                                  "framework": "megatron"}))
    names = [c.split(".", 1)[1] for c in frame.columns if c.split(".", 1)[-1] in KERNEL_KNOBS
             and c.startswith("training.")]
    assert names == list(KERNEL_KNOBS)
    row = frame.iloc[0]
    assert row["training.fp8_attention"] and row["training.fused_loss"]  # given; megatron's
    assert row["training.bf16_layers"] == 0 and row["training.cuda_graphs"] == "none"


def test_every_plan_switch_is_a_plan_field_whose_words_read_back():
    """Each plan switch (:data:`~fsdpsim.plan.knobs.PLAN_SWITCHES`) is a ParallelPlan field of
    a mesh dimension; each value it spells is written in that dimension's brackets of the plan
    line and read back, and the plain value is written as nothing."""
    import dataclasses

    from fsdpsim.plan.parallel import ParallelPlan
    from fsdpsim.plan.spelling import RunPlan, format_plan, parse_plan

    fields = {f.name for f in dataclasses.fields(ParallelPlan)}
    assert PLAN_SWITCHES and set(PLAN_SWITCHES) <= fields
    for name in PLAN_SWITCHES:
        k = KNOBS[name]
        assert k.dim in fields and k.label and k.field == f"plan.{name}", name
        assert k.plain_value not in k.spelled, name
        for value, word in {**k.spelled, k.plain_value: None}.items():
            plan = ParallelPlan(num_gpus=8, gpus_per_node=8, **{k.dim: 2, name: value})
            line = format_plan(RunPlan(plan, micro_batch=1, grad_accum=1))
            dim = next(d for d in line.split(" · ")[0].split(" × ") if d.startswith(k.dim))
            assert (word in dim.partition("(")[2].rstrip(")").split(",")) == (word is not None)
            back = parse_plan(line, num_gpus=8, gpus_per_node=8).plan
            assert getattr(back, name) == value, (name, value, line)


#: A plan switch declared in a fresh interpreter (with a ParallelPlan that has its field) before
#: anything else reads the declarations: it must reach predict's and sweep's options, predict's
#: JSON and plan line (read back by ``--plan``), sweep's CSV (off where its dimension is 1), a
#: measurement row's options and plan, search's ``--fix``, table and rerun command.
_FAKE_SWITCH = """import dataclasses
import io
import json
import re

import pandas as pd
from fsdpsim.plan import knobs, parallel


@dataclasses.dataclass(frozen=True)
class Plan(parallel.ParallelPlan):
    fake_switch: bool = False


parallel.ParallelPlan = Plan
knobs.KNOBS["fake_switch"] = knobs._switch("fake_switch", "flag", "A fake switch.",
                                           "A fake switch, grid-wide.", "tp", {True: "fake"},
                                           "fake switch", default=False)
knobs.PLAN_SWITCHES += ("fake_switch",)

import click
from click.testing import CliRunner
from fsdpsim.cli import cli
from fsdpsim.drivers.sweep.grid import grid_keys
from fsdpsim.measured.published.tables import STATED_COLUMNS
from fsdpsim.measured.rows import PLAN_COLUMNS, row_options, row_plan


def params(command):
    return {p.name: p for p in cli.get_command(click.Context(cli), command).params}


for command in ("predict", "sweep", "plot"):
    p = params(command)["fake_switch"]
    assert p.opts == ["--fake-switch"] and p.secondary_opts == ["--no-fake-switch"], command
for command in ("search", "compare"):
    assert "fake_switch" not in params(command), command
assert "fake-switch" in grid_keys()


def run(*args):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output)
    return result.output


base = ("--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "8")
d = json.loads(run("predict", *base, "--tp", "2", "--fake-switch", "--format", "json"))
assert d["plan"]["fake_switch"] is True and "tp2(sp,fake)" in d["plan"]["line"], d["plan"]
d = json.loads(run("predict", *base, "--tp", "2", "--format", "json"))
assert d["plan"]["fake_switch"] is False and "fake" not in d["plan"]["line"]
d = json.loads(run("predict", *base, "--plan", "fsdp4 × tp2(sp,fake) · ckpt none · mb 1",
                   "--format", "json"))
assert d["plan"]["fake_switch"] is True, d["plan"]  # the plan line reads it back

rows = pd.read_csv(io.StringIO(run("sweep", *base, "--tp", "1,2", "--fake-switch", "--micro-batch",
                                   "1", "--format", "csv")))
assert dict(zip(rows["plan.tp"], rows["plan.fake_switch"])) == {1: False, 2: True}

row = pd.Series({"id": "r", "gpu": "h100", "n_gpus": 8, "gpus_per_node": 8, "grad_accum": 1,
                 "micro_batch": 1, "sharding": "full", "tp": 2, "fake_switch": "yes"})
assert row_options(row)["fake_switch"] is True
assert row_plan(row, 8).fake_switch is True and row_plan(row.drop("fake_switch"), 8) \\
    .fake_switch is False
assert PLAN_COLUMNS["fake_switch"] is False and "fake_switch" in STATED_COLUMNS

d = json.loads(run("search", *base, "--fix", "tp=2", "--fix", "fake_switch=true", "--top", "2",
                   "--format", "json"))
for plan in d["plans"]:
    assert plan["fake_switch"] is True and "fake" in plan["plan"], plan
    assert re.search(r"tp2\\((\\w+,)*fake\\)", plan["predict_command"]), plan["predict_command"]
print("reached")
"""


def test_a_new_plan_switch_reaches_options_reports_measurements_and_search_from_its_declaration():
    """Every generic place a plan switch passes through (module docstring of
    :mod:`fsdpsim.plan.knobs`, :data:`~fsdpsim.plan.knobs.PLAN_SWITCHES`) takes it from its
    declaration alone: a place that listed the switches by hand would miss the fake one."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FAKE_SWITCH], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "reached", done.stderr[-2000:]


#: A plan setting (a number on ParallelPlan, predict's option and a search --fix item) declared
#: in a fresh interpreter before anything reads the declarations: predict's option builds the
#: plan with it and its JSON reports it, a --plan line beside it is refused, a measurement row's
#: plan reads its column (a bad cell refused by its declared rule) and search's --fix holds it.
_FAKE_PLAN_KNOB = """import contextlib
import dataclasses
import io
import json

import pandas as pd
from fsdpsim.plan import knobs, parallel


@dataclasses.dataclass(frozen=True)
class Plan(parallel.ParallelPlan):
    fake_degree: int = 1


parallel.ParallelPlan = Plan
knobs.KNOBS["fake_degree"] = knobs.Knob(
    "fake_degree", "number", "A fake degree.", knobs._PREDICT_FIX, default=1,
    rule=knobs.Rule(1, 64, whole=True), field="plan.fake_degree", column="fake_degree")

import click
from click.testing import CliRunner
from fsdpsim.cli import cli, main
from fsdpsim.drivers.search.fix import parse_fix
from fsdpsim.measured import cells
from fsdpsim.measured.rows import PLAN_COLUMNS, row_plan
from fsdpsim.util.errors import ConfigError

params = {p.name: p for p in cli.get_command(click.Context(cli), "predict").params}
assert params["fake_degree"].opts == ["--fake-degree"]
base = ("predict", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "8")
result = CliRunner().invoke(cli, [*base, "--fake-degree", "3", "--format", "json"])
assert result.exit_code == 0, result.output
assert json.loads(result.output)["plan"]["fake_degree"] == 3
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as out:
    assert main([*base, "--fake-degree", "99"]) == 2 and not out.getvalue()
    assert main([*base, "--plan", "fsdp8 · ckpt none · mb 1", "--fake-degree", "3"]) == 2
lines = err.getvalue().splitlines()
assert len(lines) == 2 and all("--fake-degree" in line for line in lines), lines
assert "1 to 64" in lines[0] and "--plan states the whole plan" in lines[1], lines

row = pd.Series({"id": "r", "n_gpus": 8, "sharding": "full", "fake_degree": "3"})
assert row_plan(row, 8).fake_degree == 3 and PLAN_COLUMNS["fake_degree"] == 1
assert row_plan(row.drop("fake_degree"), 8).fake_degree == 1
frame = pd.DataFrame([{"id": "r", "fake_degree": "65", "skip": ""}])
try:
    cells.check_columns(frame)
    raise SystemExit("a bad fake_degree cell passed")
except ConfigError as exc:
    assert "column fake_degree" in str(exc) and "1 to 64" in str(exc), exc
assert parse_fix(["fake_degree=4"]) == {"fake_degree": 4}
try:
    parse_fix(["fake_degree=0"])
    raise SystemExit("a bad --fix fake_degree passed")
except ConfigError as exc:
    assert "1 to 64" in str(exc), exc
print("reached")
"""


def test_a_new_plan_knob_reaches_predict_measurements_and_search_fix_from_its_declaration():
    """The generic places a plan setting passes through take it from its declaration alone:
    predict's option, the plan it builds and its JSON, the ``--plan`` conflict check, a
    measurement row's plan and cell check, and ``search --fix`` (how search enumerates a
    new degree, and how a plan line spells it, are the new setting's own code)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FAKE_PLAN_KNOB], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "reached", done.stderr[-2000:]
