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
    for key in ("train_days", "train_cost_usd", "cost_usd_per_million_tokens"):
        assert abs(found[key] - row[key]) <= 1e-9 * abs(row[key])
    text = invoke("search", *common, "--objective", "cost", "--top", "1")
    assert f"512 GPUs · 15T tokens in {found['train_days']:,.1f} days · " \
           f"${found['train_cost_usd'] / 1e6:,.2f}M" in text


def test_deadline_keeps_the_cheapest_plan_that_ends_in_time(capsys):
    common = ("search", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "256,512,1024",
              "--tokens", "15t", "--top", "2", "--format", "json")
    free = json.loads(invoke(*common, "--objective", "time-to-train"))["plans"]
    days = {p["num_gpus"]: p["train_days"] for p in free}
    limit = (days.get(512) or max(days.values())) * 1.01
    plans = json.loads(invoke(*common, "--deadline-days", str(limit)))["plans"]
    assert plans and all(p["train_days"] <= limit for p in plans)
    costs = [p["train_cost_usd"] for p in plans]
    assert costs == sorted(costs)
    line = assert_one_line_error(*run(capsys, *common[:-2], "--deadline-days", "0.5"))
    assert "no plan on 256, 512, 1,024 GPUs trains 15t tokens within 0.5 days" in line
    line = assert_one_line_error(*run(capsys, "search", "--deadline-days", "30"))
    assert "need --tokens" in line
