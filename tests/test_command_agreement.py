"""Commands agree with each other: a GPU named alone runs on its usual node, one meaning per
result column in every command, the same GPU aliases in every measurement reader, and headers
that state the batch each row trains."""

import json

import pytest

from conftest import run


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
