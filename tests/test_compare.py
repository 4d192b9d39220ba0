"""``fsdpsim compare`` and ``fsdpsim report``: rows equal search /
predict / procurement for the same inputs, one global batch for every row, the best of each
column marked, the CLI contract, and a self-contained HTML report checked by parsing it."""

from __future__ import annotations

from conftest import assert_one_line_error, invoke, run

import json
from html.parser import HTMLParser

import pytest

from fsdpsim.drivers.compare import best_rows
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import predict
from fsdpsim.model.presets import get_model
from fsdpsim.drivers.procurement import RunAssumptions, prediction_run
from fsdpsim.drivers.search.results import predict_choice
from fsdpsim.drivers.search.run import search
from fsdpsim.drivers.search.space import SearchSpace
from fsdpsim.hardware.system import resolve_system

SMALL = ("--model", "gpt3-350m", "--num-gpus", "8")


@pytest.fixture(scope="module")
def rows():
    return json.loads(invoke("compare", *SMALL, "--gpu", "h100,mi300x", "--tokens", "1t",
                             "--format", "json"))


def test_rows_equal_search_then_predict_then_procurement(cat, rows):
    # the GPU's catalog id, as predict, sweep and search name it (the alias h100 resolved)
    assert [r["hardware"] for r in rows["rows"]] == ["h100-sxm5-80gb", "mi300x"]
    spec = get_model("gpt3-350m").with_seq_len(4096)  # learned positions, as the CLI does
    training = TrainingConfig(seq_len=4096, global_batch=1024)
    run_ = RunAssumptions(tokens=1e12)
    for row in rows["rows"]:
        system = resolve_system(cat, gpu=row["hardware"])
        found = search(spec, system, 8, training, SearchSpace(), top=1, run=run_)
        p = predict_choice(spec, system, found.top[0], training)
        r = prediction_run(p, system, run_)
        assert row["global_batch"] == 1024 and row["seq_len"] == 4096
        assert row["tokens_per_s"] == pytest.approx(p.tokens_per_s, rel=1e-12)
        assert row["mfu"] == pytest.approx(p.mfu, rel=1e-12)
        assert row["bottleneck"] == p.bottleneck
        assert row["train_cost_usd"] == pytest.approx(r["train_cost_usd"], rel=1e-12)
        assert row["failures.train_cost_usd"] == pytest.approx(r["failures"]["train_cost_usd"],
                                                               rel=1e-12)
        assert row["failures.train_days"] == pytest.approx(
            r["failures"]["train_time_s"] / 86_400, rel=1e-12)
        assert row["price_source"] and row["price_retrieved"]
    assert rows["query"]["global_batch"] == 1024 and rows["query"]["train_tokens"] == 1e12


def test_plan_fsdp_is_predicts_auto_choice(cat):
    out = json.loads(invoke("compare", *SMALL, "--gpu", "h100", "--plan", "fsdp",
                            "--global-batch", "256", "--format", "json"))
    row = out["rows"][0]
    system = resolve_system(cat, gpu="h100")
    p = predict(get_model("gpt3-350m").with_seq_len(4096), system, ParallelPlan(num_gpus=8, gpus_per_node=8),
                TrainingConfig(seq_len=4096, global_batch=256))
    assert row["sharding"] == "full" and row["global_batch"] == 256
    assert (row["micro_batch"], row["recompute"]) == (p.training["micro_batch"],
                                                      p.training["recompute"])
    assert row["tokens_per_s"] == pytest.approx(p.tokens_per_s, rel=1e-12)


def test_best_per_column_among_rows_that_fit():
    values = [{"fits": True, "tokens_per_s": 10.0, "failures.train_cost_usd": 5.0},
              {"fits": True, "tokens_per_s": 20.0, "failures.train_cost_usd": 5.0},
              {"fits": False, "tokens_per_s": 99.0, "failures.train_cost_usd": 1.0}]
    best = best_rows(values)
    assert best["tokens_per_s"] == [1] and best["failures.train_cost_usd"] == [0, 1]
    assert "mfu" not in best


def test_table_marks_the_best_and_states_the_batch(rows):
    out = invoke("compare", *SMALL[:2], "--gpu", "h100,mi300x", "--num-gpus", "8,16",
                 "--tokens", "1t")
    lines = out.splitlines()
    assert "global batch 1,024 x 4,096 tokens" in lines[0]
    head = next(ln for ln in lines if ln.lstrip().startswith("hardware"))
    for column in ("tok/s", "tok/s/GPU", "MFU", "mem GiB", "days", "cost", "MWh", "bottleneck"):
        assert column in head
    table = lines[lines.index(head) + 1: lines.index(head) + 5]
    assert len(table) == 4 and all("*" not in ln.split()[0] for ln in table)
    assert sum(ln.count("*") for ln in table) >= 6
    plans = lines[lines.index("plans") + 1:]
    assert "batch (seqs)" in plans[0] and all("1,024" in ln for ln in plans[1:5])
    assert max(len(ln) for ln in lines) <= 100 or any("http" in ln for ln in lines)
    csv = invoke("compare", *SMALL, "--gpu", "h100", "--format", "csv")
    assert csv.splitlines()[0].startswith("model,hardware,accelerator")


def test_a_row_without_a_plan_says_why():
    out = json.loads(invoke("compare", *SMALL, "--gpu", "h100", "--global-batch", "3",
                            "--plan", "fsdp", "--format", "json"))
    assert out["rows"][0]["fits"] is False and "divisible" in out["rows"][0]["reason"]


@pytest.mark.parametrize("args, words", [
    (("--gpu", "h999"), "h999"),
    (("--gpu", "h100", "--num-gpus", "0"), "--num-gpus"),
    (("--gpu", "h100", "--num-gpus", "eight"), "--num-gpus"),
    ((), "--gpu"),
    (("--gpu", "h100", "--price", "h100"), "--price"),
    (("--gpu", "h100,h200,b200,mi300x", "--num-gpus", "1..1024", "--model", "gpt3-350m,llama3-8b"),
     "at most"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, words):
    line = assert_one_line_error(*run(capsys, "compare", *args))
    assert words in line


class _Parts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: dict[str, int] = {}
        self.links: list[str] = []
        self.figures: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name, value in attrs:
            if name in ("src", "href") or name.endswith(":href"):
                self.links.append(value or "")
            if tag == "figure" and name == "id":
                self.figures.append(value)


def test_report_is_one_self_contained_html_file(tmp_path, capsys):
    path = tmp_path / "report.html"
    out = invoke("report", *SMALL, "--gpu", "h100,mi300x", "--tokens", "1t", "-o", str(path))
    assert "written to" in out
    text = path.read_text(encoding="utf-8")
    parts = _Parts()
    parts.feed(text)
    assert text.startswith("<!DOCTYPE html>")
    assert set(parts.figures) == {"fig-throughput", "fig-cost", "fig-memory", "fig-breakdown",
                                  "fig-pareto", "fig-bandwidth-h100-sxm5-80gb",
                                  "fig-bandwidth-mi300x"}
    assert parts.tags["svg"] == len(parts.figures)
    assert parts.tags["table"] == 6  # comparison, plans, commands, rent, assumptions, ranges
    assert "script" not in parts.tags and "link" not in parts.tags
    assert all(link.startswith("#") for link in parts.links), parts.links
    for words in ("Comparison", "Plans and batch", "Assumptions and ranges", "PUE", "1.56",
                  "90 % range", "coreweave.com", "419 interruptions", "1,024"):
        assert words in text, words
    line = assert_one_line_error(*run(capsys, "report", *SMALL, "--gpu", "h100", "-o",
                                      str(tmp_path / "report.txt")))
    assert ".html" in line
