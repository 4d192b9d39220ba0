"""Scale advice: a faster setting of the same job, with the number."""

from __future__ import annotations

import json

import pytest

from fsdpsim.drivers.advice import MIN_GAIN, alternatives, scale_advice
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.cli import main
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import predict
from fsdpsim.model.presets import get_model
from fsdpsim.hardware.system import resolve_system

H100 = resolve_system(load_catalog(use_env=False), gpu="h100")
SPEC = get_model("llama3-8b")


def test_hsdp_is_advised_where_the_shard_group_is_too_large_and_its_number_is_predicts():
    plan = ParallelPlan(4096, 8, "full")
    training = TrainingConfig(seq_len=2048, micro_batch=1)
    base = predict(SPEC, H100, plan, training)
    advice = scale_advice(SPEC, H100, plan, training, base)
    assert advice and "HSDP" in advice[0]["setting"]
    assert all(a["gain"] >= MIN_GAIN for a in advice)
    assert [a["gain"] for a in advice] == sorted((a["gain"] for a in advice), reverse=True)
    size = int(advice[0]["setting"].split("--shard-group-size ")[1].rstrip(")"))
    again = predict(SPEC, H100, ParallelPlan(4096, 8, "hybrid", shard_group_size=size), training)
    assert advice[0]["tokens_per_s_per_gpu"] == pytest.approx(again.tokens_per_s_per_gpu)
    assert advice[0]["gain"] == pytest.approx(again.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu - 1)


def test_nothing_to_advise_on_one_node_with_auto_knobs():
    plan = ParallelPlan(8, 8, "full")
    assert alternatives(plan, TrainingConfig(seq_len=4096)) == []


def test_predict_json_and_table_carry_the_advice(capsys):
    args = ["predict", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "4096",
            "--micro-batch", "1", "--seq-len", "2048"]
    assert main(args + ["--format", "json"]) == 0
    advice = json.loads(capsys.readouterr().out)["advice"]
    assert 1 <= len(advice) <= 3
    assert main(args) == 0
    assert "faster at this scale" in capsys.readouterr().out
