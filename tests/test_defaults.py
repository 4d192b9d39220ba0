"""One plan, one answer: every command's default global batch and the framework's plan defaults
(fsdpsim.plan.training.default_global_batch, fsdpsim.plan.frameworks.plan_defaults)."""

from __future__ import annotations

import json

from conftest import assert_one_line_error, invoke, run

from fsdpsim.plan.frameworks import plan_defaults
from fsdpsim.plan.training import default_global_batch

HYBRID = ("--model", "llama3-70b", "--gpu", "h100", "--num-gpus", "256", "--tp", "8", "--pp",
          "4", "--format", "json")


def test_default_batch_rule():
    assert default_global_batch(4096) == 1024 and default_global_batch(8192) == 512
    assert default_global_batch(4096, 2048) == 2048  # dp above the batch: one sequence each
    assert default_global_batch(4096, 96) == 1056  # 1,024 / 96 = 10.7 -> 11 x 96
    assert default_global_batch(4096, 3) == 1023
    assert default_global_batch(131072) == 32


def test_predict_hybrid_takes_the_framework_defaults():
    titan = json.loads(invoke("predict", *HYBRID))
    assert titan["plan"]["sharding"] == "full" and not titan["plan"]["reshard_after_forward"]
    assert not titan["plan"]["tp_overlap"] and titan["plan"]["sequence_parallel"]
    assert titan["training"]["global_batch"] == 1024
    assert any("--framework fsdp2" in n for n in titan["notes"])
    mega = json.loads(invoke("predict", *HYBRID, "--framework", "megatron"))
    assert mega["plan"]["sharding"] == "optimizer" and not mega["plan"]["tp_overlap"]
    assert any("distributed optimizer (ZeRO-1)" in n for n in mega["notes"])
    given = json.loads(invoke("predict", *HYBRID, "--framework", "megatron", "--sharding",
                              "full"))
    assert given["plan"]["sharding"] == "full"
    assert plan_defaults("fsdp2", tp=8, pp=1)[0]["reshard_after_forward"]


def test_search_cost_prints_gpus_dollars_days_as_compare_does():
    common = ("--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "512", "--tokens", "15t")
    found = json.loads(invoke("search", *common, "--objective", "cost", "--top", "1",
                              "--format", "json"))["plans"][0]
    row = json.loads(invoke("compare", *common, "--objective", "cost", "--format", "json"))
    row = row["rows"][0] if isinstance(row, dict) else row[0]
    assert found["plan"] == row["plan"]
    for key in ("train_days", "train_cost_usd", "failures.train_days",
                "failures.train_cost_usd", "cost_usd_per_million_tokens"):
        assert abs(found[key] - row[key]) <= 1e-9 * abs(row[key])
    text = invoke("search", *common, "--objective", "cost", "--top", "1")
    assert f"512 GPUs · 15T tokens in {found['failures.train_days']:,.1f} days · " \
           f"${found['failures.train_cost_usd'] / 1e6:,.2f}M" in text


def test_deadline_keeps_the_cheapest_plan_that_ends_in_time(capsys):
    common = ("search", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "256,512,1024",
              "--tokens", "15t", "--top", "2", "--format", "json")
    free = json.loads(invoke(*common, "--objective", "time-to-train"))["plans"]
    days = {p["num_gpus"]: p["failures.train_days"] for p in free}
    limit = (days.get(512) or max(days.values())) * 1.01
    plans = json.loads(invoke(*common, "--deadline-days", str(limit)))["plans"]
    assert plans and all(p["failures.train_days"] <= limit for p in plans)
    costs = [p["failures.train_cost_usd"] for p in plans]
    assert costs == sorted(costs)
    line = assert_one_line_error(*run(capsys, *common[:-2], "--deadline-days", "0.5"))
    assert "no plan on 256, 512, 1,024 GPUs trains 15T tokens within 0.5 days" in line
    line = assert_one_line_error(*run(capsys, "search", "--deadline-days", "30"))
    assert "need --tokens" in line


# -- one plan, one answer: the README's question table through every command ----------------------
def _json(*args: str):
    return json.loads(invoke(*args, "--format", "json"))


def _rerun(command: str, *extra: str) -> dict:
    """The predict command a report prints, run in-process (JSON)."""
    import shlex

    words = shlex.split(command)
    assert words[:2] == ["fsdpsim", "predict"], command
    return _json(*words[1:], *extra)


def _same(a: float, b: float, what: str) -> None:
    assert abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-30), (what, a, b)


def _predict_numbers(d: dict) -> dict:
    """predict's JSON as compare's and search's names (cost and days with failures)."""
    from fsdpsim.drivers.procurement import run_summary

    return {"tokens_per_s_per_gpu": d["tokens_per_s_per_gpu"], "step_time_s": d["step_time_s"],
            "mfu": d["mfu"], "mfu_native": d["mfu_native"], "global_batch":
            d["training"]["global_batch"], **run_summary(d)}


README_SETUPS = [  # (model, gpu, GPUs, tokens): the question table's "how fast", "cost", network
    ("llama3-8b", "h100", "64", "1t"),
    ("llama3-70b", "h100", "64", None),
    ("llama3-8b", "h100", "1024", "15t"),
]


def test_readme_setups_agree_across_predict_sweep_compare_search():
    """Where predict, sweep --best, compare and search evaluate the same plan, the numbers agree
    to 1e-9: each report's predict command reproduces its row, predict's default plan equals
    sweep --best's with the same sharding, and compare's plan is search's best."""
    for model, gpu, n, tokens in README_SETUPS:
        common = ("--model", model, "--gpu", gpu, "--num-gpus", n) + (
            ("--tokens", tokens) if tokens else ())
        keys = ["tokens_per_s_per_gpu", "step_time_s", "mfu", "cost_usd_per_million_tokens"] \
            + (["train_days", "train_cost_usd", "failures.train_days",
                "failures.train_cost_usd"] if tokens else [])
        # predict's defaults = sweep --best at predict's sharding (the same plan)
        pred = _predict_numbers(_json("predict", *common))
        row = _json("sweep", *common, "--best", "--sharding", "full")[0]
        assert row["training.global_batch"] == pred["global_batch"] == 1024
        for key in ("tokens_per_s_per_gpu", "step_time_s", "mfu", "cost_usd_per_million_tokens"):
            _same(row[key], pred[key], key)
        again = _predict_numbers(_rerun(row["predict_command"]))
        for key in ("tokens_per_s_per_gpu", "step_time_s", "mfu"):
            _same(again[key], pred[key], key)
        # compare's plan is search's best; each reproduces through its predict command
        comp = _json("compare", *common)["rows"][0]
        best = _json("search", *common, "--top", "1")["plans"][0]
        assert comp["plan"] == best["plan"] and comp["global_batch"] == 1024
        rerun = _predict_numbers(_rerun(comp["predict_command"],
                                        *(("--tokens", tokens) if tokens else ())))
        for key in keys:
            _same(comp[key], best[key], key)
            _same(comp[key], rerun[key], key)


def test_one_vocabulary_for_the_bottleneck():
    from fsdpsim.engine import BOTTLENECKS
    from fsdpsim.report.words import BOTTLENECK_NAMES, BOTTLENECK_WORDS

    assert set(BOTTLENECK_NAMES) == set(BOTTLENECKS) == set(BOTTLENECK_WORDS)
    slow = ("--model", "llama3-70b", "--gpu", "h100", "--num-gpus", "64",
            "--inter-node-gbps-per-gpu", "50")
    rows = _json("sweep", *slow, "--best")
    assert rows[0]["bottleneck"] == "inter_node_link"  # the id in JSON and CSV
    table = invoke("sweep", *slow[:-1], "50,400", "--best")
    assert "inter-node network" in table and "inter_node_link" not in table
    pred = invoke("predict", *slow)
    assert "bottleneck        inter-node network:" in pred


def test_compare_shows_no_headline_for_a_plan_that_does_not_fit():
    out = invoke("compare", "--model", "llama3-405b", "--gpu", "h100", "--num-gpus", "8")
    row = next(line for line in out.splitlines() if line.strip().startswith("h100-sxm5-80gb    8"))
    assert "does not fit (not runnable)" in row
    assert row.split()[2:5] == ["-", "-", "-"]  # tok/s, tok/s/GPU, MFU


def test_low_precision_mfu_is_of_its_own_peak_in_every_table():
    common = ("--model", "llama3-70b", "--gpu", "gb300", "--num-gpus", "64", "--precision",
              "nvfp4")
    row = _json("sweep", *common, "--best")[0]
    assert row["mfu"] > 1 > row["mfu_native"]  # of the BF16 peak, of the NVFP4 peak
    table = invoke("sweep", *common, "--best")
    assert f"{100 * row['mfu_native']:.1f}%" in table and f"{100 * row['mfu']:.1f}%" not in table
    assert "MFU of each row's own dense peak (NVFP4" in " ".join(table.split())
    found = invoke("search", *common, "--top", "1")
    assert "of the NVFP4 peak" in found
    comp = _json("compare", *common)["rows"][0]
    assert f"{100 * comp['mfu_native']:.1f}%" in invoke("compare", *common)


def test_sweep_hybrid_row_equals_predict_with_the_framework_defaults():
    """sweep and predict give a hybrid layout the same torchtitan defaults (no reshard after
    forward under a pipeline) and so the same numbers."""
    args = ("--model", "llama3-70b", "--gpu", "h100", "--num-gpus", "256", "--tp", "8", "--pp",
            "4")
    row = _json("sweep", *args)[0]
    pred = _json("predict", *args)
    assert row["plan.reshard_after_forward"] is False and not pred["plan"]["reshard_after_forward"]
    assert row["plan.line"] == pred["plan"]["line"]
    for key in ("tokens_per_s_per_gpu", "step_time_s", "mfu"):
        _same(row[key], pred[key], key)
