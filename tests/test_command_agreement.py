"""Commands agree with each other: a GPU named alone runs on its usual node, one meaning per
result column in every command, the same GPU aliases in every measurement reader, and headers
that state the batch each row trains."""

import json
import re

import pytest

from conftest import assert_one_line_error, run


@pytest.mark.parametrize("gpu, node", [("gh200", "jupiter-node"),
                                       ("a100-64gb", "leonardo-node")])
def test_a_gpu_named_alone_runs_on_its_usual_nodes_gpus_per_node(capsys, gpu, node):
    """``--gpu`` alone takes the GPUs per node of the GPU's ``default_node`` (Jupiter and
    Leonardo have 4), so it predicts what ``--cluster`` of that node predicts; a given
    ``--gpus-per-node`` still wins."""
    common = ("predict", "--model", "llama3-70b", "--num-gpus", "64", "--format", "json")
    rc, by_gpu, err = run(capsys, *common, "--gpu", gpu)
    assert rc == 0, err
    rc, by_node, err = run(capsys, *common, "--cluster", node)
    assert rc == 0, err
    by_gpu, by_node = json.loads(by_gpu), json.loads(by_node)
    assert by_gpu["plan"]["gpus_per_node"] == by_node["plan"]["gpus_per_node"] == 4
    assert by_gpu["tokens_per_s_per_gpu"] == pytest.approx(by_node["tokens_per_s_per_gpu"])
    rc, out, err = run(capsys, *common, "--gpu", gpu, "--gpus-per-node", "8")
    assert rc == 0 and json.loads(out)["plan"]["gpus_per_node"] == 8, err


def test_train_cost_and_energy_mean_the_same_in_every_commands_json(capsys):
    """``train_cost_usd`` / ``train_energy_kwh`` are the failure-free run in predict, sweep,
    compare and search; the run with failures is ``failures.train_cost_usd`` /
    ``failures.train_energy_kwh`` in all of them (the plan search prints, run by predict)."""
    common = ("--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "4096", "--tokens", "15t",
              "--format", "json")
    rc, out, err = run(capsys, "search", *common, "--budget-usd", "3.1m")
    assert rc == 0, err
    found = json.loads(out)["plans"][0]
    rc, out, err = run(capsys, "predict", *common, "--plan", found["plan"])
    assert rc == 0, err
    pred = json.loads(out)
    rc, out, err = run(capsys, "compare", *common, "--plan", "fsdp")
    assert rc == 0, err
    row = json.loads(out)["rows"][0]
    rc, out, err = run(capsys, "predict", *common)
    assert rc == 0, err
    fsdp = json.loads(out)
    rc, out, err = run(capsys, "sweep", *common, "--sharding", "full", "--best")
    assert rc == 0, err
    swept = json.loads(out)[0]
    for key in ("train_cost_usd", "train_energy_kwh"):
        assert found[key] == pytest.approx(pred[key], rel=1e-9)
        assert found[f"failures.{key}"] == pytest.approx(pred["failures"][key], rel=1e-9)
        assert found[f"failures.{key}"] > found[key]
        for other in (row, swept):
            assert other[key] == pytest.approx(fsdp[key], rel=1e-9)
            assert other[f"failures.{key}"] == pytest.approx(fsdp["failures"][key], rel=1e-9)
    assert found["failures.train_days"] == pytest.approx(
        pred["failures"]["train_time_s"] / 86_400, rel=1e-9)


def _own_schema_csv(path, gpu: str):
    """A measurements file in fsdpsim's schema: 8 llama3-8b runs on ``gpu`` (as written in the
    ``gpu`` cell), FSDP2, numbers near what the model predicts."""
    import csv

    rows = [dict(id=f"r{i}", model="llama3-8b", gpu=gpu, n_gpus=n, gpus_per_node=8,
                 inter_node_gbps_per_gpu=400, seq_len=4096, micro_batch=mb, grad_accum=1,
                 sharding="full", recompute="full", framework="PyTorch FSDP2",
                 precision="bf16", tokens_per_s_per_gpu=6000 + 50 * i)
            for i, (n, mb) in enumerate((n, mb) for n in (8, 16, 32, 64) for mb in (1, 2))]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


@pytest.mark.parametrize("cell, option", [("h100", "h100"), ("h100", "h100-sxm5-80gb"),
                                          ("h100-sxm5-80gb", "h100")])
def test_calibrate_and_validate_match_a_rows_gpu_alias(tmp_path, capsys, cell, option):
    """A row whose ``gpu`` cell is an alias (``h100``) is on ``--gpu h100-sxm5-80gb`` and on
    ``--gpu h100``, in calibrate as in validate."""
    path = _own_schema_csv(tmp_path / "my.csv", cell)
    rc, out, err = run(capsys, "calibrate", "--measurements", path, "--gpu", option,
                       "--framework", "fsdp2", "--factor", "matmul_fraction")
    assert rc == 0, err
    assert "8 rows" in out and 'id = "h100-sxm5-80gb"' in out
    rc, out, err = run(capsys, "validate", path, "--gpu", option, "--format", "json")
    assert rc == 0, err
    assert len(json.loads(out)["rows"]) == 8


def test_rows_on_gpus_resolves_each_cell_through_the_catalog(cat):
    import pandas as pd

    from fsdpsim.measured.rows import on_gpus

    frame = pd.DataFrame({"gpu": ["h100", "h100-sxm5-80gb", "a100", "no-such-gpu", None]})
    assert on_gpus(frame, cat, ["h100"]).tolist() == [True, True, False, False, False]
    assert on_gpus(frame, cat, ["a100-80gb", "h100"]).tolist() == [True, True, True, False,
                                                                  False]


def test_compare_and_search_headers_state_the_batch_the_rows_train(capsys):
    """At the default batch, rows whose dp does not divide 1,024 train the batch moved to a
    multiple of it; the header states that batch, not 1,024."""
    rc, out, err = run(capsys, "compare", "--model", "llama3-405b", "--cluster",
                       "llama3-ib,llama3-roce", "--num-gpus", "16384")
    assert rc == 0, err
    head = " ".join(out.split("\n\n")[0].split())
    trained = {line.split()[-2] for line in out.split("plans\n")[1].split("\n\n")[0]
               .splitlines()[1:]}
    assert trained == {"16,384"}
    assert "every row at global batch 16,384 x 4,096 tokens (67.1M tokens/step): the default " \
           "1,024 moved to the nearest multiple of the rows' dp" in head
    rc, out, err = run(capsys, "compare", "--model", "llama3-405b", "--cluster", "llama3-ib",
                       "--num-gpus", "1024,4096")
    assert rc == 0, err
    assert "rows at global batch 1,024 or 4,096 x 4,096 tokens (the default 1,024" \
        in " ".join(out.split("\n\n")[0].split())
    rc, out, err = run(capsys, "search", "--model", "llama3-405b", "--cluster", "llama3-ib",
                       "--num-gpus", "4096", "--top", "2")
    assert rc == 0, err
    head = " ".join(out.split("\n\n")[0].split())
    assert "global batch 4,096 sequences (16.8M tokens, the default 1,024 moved to a multiple " \
           "of every plan's dp)" in head and "1,024 sequences" not in head


def test_no_plan_within_the_limits_names_the_closest_plan_and_what_helps(capsys):
    """Nothing within the budget: the cheapest plan (failures included, as the budget is
    judged) and no "more GPUs" (they do not lower the cost); a deadline: the fastest plan and
    more GPUs; days in the singular for one; tokens as every report writes them."""
    common = ("search", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "512,4096",
              "--tokens", "15t")
    rc, out, err = run(capsys, *common, "--objective", "cost", "--top", "1", "--format", "json")
    assert rc == 0, err
    cheapest = json.loads(out)["plans"][0]
    line = assert_one_line_error(*run(capsys, *common, "--budget-usd", "1m"))
    assert "trains 15T tokens for at most $1.00M; the cheapest, " + cheapest["plan"] + " on " \
        + f"{cheapest['num_gpus']:,} GPUs" in line
    assert f"${cheapest['failures.train_cost_usd'] / 1e6:,.2f}M (failures included)" in line
    assert "more GPUs" not in line and "a larger budget" in line
    line = assert_one_line_error(*run(capsys, *common, "--deadline-days", "1"))
    assert "trains 15T tokens within 1 day;" in line and "the fastest, " in line
    assert "more GPUs (--num-gpus)" in line and "budget" not in line


def test_predict_and_report_say_calibrated_of_the_same_table(capsys, tmp_path):
    """One notion of a calibrated range in predict and the HTML report: the efficiency table
    the plan uses has its own cross-validated range (A100 BF16: yes; H100 BF16 PyTorch, fitted
    without a range of its own: no), in the same words."""
    from fsdpsim.report.words import RANGE_CALIBRATED_WORDS

    for gpu, calibrated in (("a100", True), ("h100", False)):
        rc, out, err = run(capsys, "predict", "--model", "llama3-8b", "--gpu", gpu,
                           "--num-gpus", "64")
        assert rc == 0, err
        assert RANGE_CALIBRATED_WORDS[calibrated] in " ".join(out.split())
        path = tmp_path / f"{gpu}.html"
        rc, out, err = run(capsys, "report", "--model", "llama3-8b", "--gpu", gpu,
                           "--num-gpus", "64", "--plan", "fsdp", "-o", str(path))
        assert rc == 0, err
        text = path.read_text()
        assert RANGE_CALIBRATED_WORDS[calibrated] in text
        assert RANGE_CALIBRATED_WORDS[not calibrated] not in text
        assert "calibrated GPU type" not in text


def test_one_spelling_of_numbers_ranges_and_recompute(capsys, tmp_path):
    """validate writes the 90 % range as predict does (``4,041 .. 9,101``), predict's header
    the GPU count with separators, search the tokens per step as ``4.2M``, and search's
    recompute words are the plan spelling's (``ckpt full 12``, no ``/L``)."""
    from types import SimpleNamespace

    from fsdpsim.drivers.search.explain import ckpt_text
    from fsdpsim.plan.spelling import ckpt_text as spelled

    path = _own_schema_csv(tmp_path / "my.csv", "h100")
    rc, out, err = run(capsys, "validate", path)
    assert rc == 0, err
    assert "90 % range" in out and "90% range" not in out
    assert re.search(r"\d,\d{3} \.\. \d,\d{3}", out)
    rc, out, err = run(capsys, "predict", "--model", "llama3-8b", "--gpu", "h100",
                       "--num-gpus", "1024")
    assert rc == 0 and "llama3-8b on 1,024 GPUs — " in out, err
    rc, out, err = run(capsys, "search", "--model", "llama3-8b", "--gpu", "h100",
                       "--num-gpus", "64", "--top", "1")
    assert rc == 0 and "(4.2M tokens, the default" in " ".join(out.split()), err
    choice = SimpleNamespace(recompute="full", recompute_layers=12, layers_per_stage=40)
    assert ckpt_text(choice) == spelled("full", 12) == "ckpt full 12"


@pytest.mark.parametrize("width", range(60, 101))
def test_a_wrapped_line_keeps_a_number_with_its_unit(width):
    """Wherever the wrap falls, ``±10 %``, ``90 %``, ``2.44 s`` and ``4.9 TB`` stay on one
    line; the text is otherwise unchanged and no line is wider than asked."""
    from fsdpsim.util.text import wrap

    text = ("tokens/s per GPU  1,095  (90 % range 744 .. 1,212; range not calibrated: wider; "
            "with network ±10 %); checkpoints 4.9 TB every 3.9 min, written in 2.44 s; best "
            "plan per row within 90 % of GPU memory")
    out = wrap(text, "  ", "    ", width)
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines)
    assert " ".join(out.split()) == " ".join(text.split())
    for line in lines:
        assert not line.lstrip().startswith(("%", "TB", "s;")), (width, line)


def test_pareto_of_two_models_draws_one_front_per_model(cat):
    """Options of different models do not compete: each model's front is its own
    non-dominated set, and every front label names its model."""
    import numpy as np

    from conftest import sweep
    from fsdpsim.report.plots import data as plot_data
    from fsdpsim.report.plots import procurement as plots

    rows = sweep(cat, model="llama3-8b,llama3-70b", gpu="h100", num_gpus="64..512",
                 tokens="1t", best=True)
    fig = plots.procurement_pareto(rows)
    ax = fig.axes[0]
    front = {tuple(np.round(p, 9)) for c in ax.collections if c.get_gid() == plots.FRONT_GID
             for p in c.get_offsets()}
    ok = plot_data.feasible(rows) & rows["cost_usd_per_million_tokens"].notna()
    want = set()
    for model in ("llama3-8b", "llama3-70b"):
        mine = rows[ok & (rows["model"].astype(str) == model)]
        days = mine["train_time_s"].to_numpy(dtype=float) / 86_400.0
        cost = mine["cost_usd_per_million_tokens"].to_numpy(dtype=float)
        on = plot_data.pareto_front(days, cost)
        assert on.any()
        want |= {(round(d, 9), round(c, 9)) for d, c in zip(days[on], cost[on])}
    assert front == want
    labels = [t.get_text() for t in ax.texts if t.get_gid() == plots.FRONT_LABEL_GID]
    assert labels and all(t.startswith(("llama3-8b", "llama3-70b")) for t in labels)
    assert any(t.startswith("llama3-70b") for t in labels)


@pytest.mark.parametrize("gpu", ["tpu-v4", "tpu-v6e"])
def test_a_gpu_without_a_usual_node_says_the_network_is_fsdpsims_default(cat, gpu):
    """A TPU v4/v6e has no usual node (nor DCN entry) in the catalog: the header says the
    network is fsdpsim's default, not the chip's own."""
    from fsdpsim.hardware.system import DEFAULT_NETWORK, resolve_system

    label = resolve_system(cat, gpu=gpu).label
    assert f"1x {DEFAULT_NETWORK} per GPU (fsdpsim's default: no usual node of {gpu}" in label
    assert "the GPU's default" not in label


@pytest.mark.parametrize("pp, stage", [(4, 20), (8, 10)])
def test_predict_and_sweep_refuse_recompute_layers_above_a_stage_by_one_rule(capsys, pp, stage):
    """A recomputed-layer count above a pipeline stage's layers: predict refuses it (one line,
    exit 2), sweep marks the point infeasible with the same sentence and predicts nothing for
    it (fsdpsim.plan.training.check_recompute_layers); a count within the stage runs in both."""
    common = ("--model", "llama3-70b", "--gpu", "h100", "--num-gpus", "64", "--pp", str(pp),
              "--recompute", "full")
    rc, out, err = run(capsys, "predict", *common, "--recompute-layers", str(stage + 1))
    line = assert_one_line_error(rc, out, err)
    reason = line.removeprefix("fsdpsim: error: ")
    assert f"above the {stage} layers of a pipeline stage" in reason
    rc, out, err = run(capsys, "sweep", *common, "--recompute-layers", str(stage + 1),
                       "--format", "json")
    assert rc == 0, err
    (row,) = json.loads(out)
    assert row["infeasible"] == reason and row["tokens_per_s_per_gpu"] is None
    rc, out, err = run(capsys, "sweep", *common, "--recompute-layers", str(stage),
                       "--format", "json")
    assert rc == 0 and json.loads(out)[0]["infeasible"] is None, out


def test_search_keeps_a_fixed_recompute_count_to_plans_whose_stage_holds_it(capsys):
    """search --fix recompute_layers=K applies predict's rule: plans whose pipeline stage has
    fewer than K layers are left out, and where none is left it refuses with predict's
    sentence (one line, exit 2) instead of recomputing every layer."""
    common = ("search", "--model", "llama3-70b", "--gpu", "h100", "--num-gpus", "256")
    line = assert_one_line_error(*run(capsys, *common, "--fix", "recompute_layers=90,pp=4"))
    assert "recompute_layers 90 is above the 21 layers of a pipeline stage" in line
    rc, out, err = run(capsys, *common, "--fix", "recompute_layers=30", "--top", "5",
                       "--format", "json")
    assert rc == 0, err
    plans = json.loads(out)["plans"]
    assert plans and all("ckpt full 30" in p["plan"] for p in plans), [p["plan"] for p in plans]


@pytest.mark.parametrize("command", [
    ("predict", "--recompute", "none", "--recompute-layers", "5"),
    ("sweep", "--recompute", "none", "--recompute-layers", "5"),
    ("search", "--fix", "recompute=none,recompute_layers=5"),
])
def test_a_recompute_count_beside_recompute_none_is_refused_by_every_command(capsys, command):
    """A layer count with no recompute (plan.training.check_recompute_layers_beside): the same
    line from predict, sweep and search, not a count silently ignored."""
    line = assert_one_line_error(*run(capsys, *command[:1], "--model", "llama3-8b", "--gpu",
                                      "h100", "--num-gpus", "64", *command[1:]))
    assert "--recompute-layers 5 beside --recompute none" in line
