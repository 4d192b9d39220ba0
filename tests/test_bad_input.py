"""Bad input that must be refused (one line on stderr, exit status 2), not silently ignored."""

import pytest

from conftest import assert_one_line_error, run
from fsdpsim.plan.spelling import parse_plan
from fsdpsim.util.errors import ConfigError


def test_an_empty_plan_is_refused(capsys):
    err = assert_one_line_error(*run(capsys, "predict", "--plan", ""))
    assert "--plan ''" in err and "a plan such as 'fsdp8 × tp8 · ckpt none · mb 2'" in err


@pytest.mark.parametrize("text, missing, given", [
    ("fsdp8 × tp2 · mb 2 · accum 3", "'ckpt ...'", "'mb N'"),
    ("fsdp8 × tp2 · ckpt none", "'mb N'", "'ckpt ...'"),
])
def test_a_plan_error_names_only_what_is_missing(text, missing, given):
    with pytest.raises(ConfigError) as err:
        parse_plan(text, num_gpus=16, gpus_per_node=8)
    message = str(err.value).split("; accepted")[0]
    assert f"it needs {missing}" in message and given not in message


@pytest.mark.parametrize("args, option", [
    (("predict", "--gpu", "h100", "--gpu", "b200"), "--gpu"),
    (("predict", "--gpu=h100", "--gpu", "h100"), "--gpu"),
    (("predict", "--tp-overlap", "--no-tp-overlap"), "--tp-overlap"),
    (("search", "--num-gpus", "8", "--num-gpus", "16"), "--num-gpus"),
    (("catalog", "list", "--kind", "node", "--kind", "network"), "--kind"),
])
def test_a_one_value_option_given_twice_is_refused(capsys, args, option):
    err = assert_one_line_error(*run(capsys, *args))
    assert f"{option} is given 2 times" in err and "accepted: one" in err


def test_a_gpu_that_differs_from_the_clusters_is_refused(capsys):
    err = assert_one_line_error(*run(capsys, "predict", "--gpu", "b200", "--cluster", "p5"))
    assert "--gpu 'b200' conflicts with --cluster 'p5'" in err


@pytest.mark.parametrize("fix", [("tp=8,tp=4",), ("tp=8", "tp=4"), ("mb=2,micro_batch=4",)])
def test_a_setting_fixed_twice_with_different_values_is_refused(fix):
    from fsdpsim.drivers.search.fix import parse_fix

    with pytest.raises(ConfigError, match="fixed twice"):
        parse_fix(fix)
    assert parse_fix(("tp=8,tp=8",)) == {"tp": 8}


def test_search_refuses_a_setting_fixed_twice(capsys):
    err = assert_one_line_error(*run(capsys, "search", "--num-gpus", "8", "--fix", "tp=8,tp=4"))
    assert "--fix tp is fixed twice, to 8 and 4" in err


@pytest.mark.parametrize("args, what", [
    (("sweep", "--model", "llama3-8b,,", "--gpu", "h100", "--num-gpus", "8"), "--model"),
    (("sweep", "--model", "llama3-8b", "--gpu", "h100,", "--num-gpus", "8"), "--gpu"),
    (("sweep", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "8,,16"), "--num-gpus"),
    (("compare", "--gpu", "h100,,b200", "--num-gpus", "8"), "--gpu"),
    (("search", "--num-gpus", "8", "--fix", "tp=8,"), "--fix"),
])
def test_an_empty_list_item_is_refused(capsys, args, what):
    err = assert_one_line_error(*run(capsys, *args))
    assert f"{what} '" in err and "an empty item" in err


def test_validate_names_the_row_whose_gpu_cannot_run_its_precision(tmp_path, capsys):
    path = tmp_path / "m.csv"
    path.write_text("id,model,gpu,n_gpus,gpus_per_node,inter_node_gbps_per_gpu,seq_len,"
                    "micro_batch,grad_accum,sharding,recompute,tokens_per_s_per_gpu,precision\n"
                    "r1,llama3-8b,a100,16,8,400,4096,2,1,full,none,8000,fp8\n")
    err = assert_one_line_error(*run(capsys, "validate", str(path)))
    assert "row 'r1': precision 'fp8' is not available on a100" in err


_SCHEMA_ROW = {"id": "r1", "model": "llama3-8b", "gpu": "h100", "n_gpus": "16",
               "gpus_per_node": "8", "inter_node_gbps_per_gpu": "400", "seq_len": "4096",
               "micro_batch": "2", "grad_accum": "1", "sharding": "full", "recompute": "none",
               "tokens_per_s_per_gpu": "8000"}
_PUBLISHED_ROW = {"id": "p1", "source_key": "mine", "model": "MPT-7b", "n_layers": "32",
                  "d_model": "4096", "n_heads": "32", "vocab": "50368", "seq_len": "2048",
                  "gpu": "A100 80GB", "n_gpus": "64", "gpus_per_node": "8",
                  "framework": "Composer + PyTorch FSDP", "sharding": "FULL_SHARD",
                  "micro_batch": "8", "global_batch_seqs": "512", "precision": "amp_bf16",
                  "tokens_per_s_per_gpu": "3000"}


def _csv(path, row: dict, drop: tuple[str, ...]) -> str:
    kept = {k: v for k, v in row.items() if k not in drop}
    path.write_text(",".join(kept) + "\n" + ",".join(kept.values()) + "\n")
    return str(path)


@pytest.mark.parametrize("row, drop, says", [
    (_SCHEMA_ROW, ("model",), "missing column(s) model"),
    (_SCHEMA_ROW, ("gpu",), "missing column(s) gpu"),
    (_PUBLISHED_ROW, ("gpu",), "missing column(s) gpu"),
    (_PUBLISHED_ROW, ("n_gpus",), "missing column(s) n_gpus"),
    (_PUBLISHED_ROW, ("model",), "missing column(s) model"),
    (_PUBLISHED_ROW, ("tokens_per_s_per_gpu",), "missing column(s) tokens_per_s_per_gpu or "),
], ids=["schema-model", "schema-gpu", "published-gpu", "published-n_gpus", "published-model",
        "published-measurement"])
def test_validate_names_a_missing_column(tmp_path, capsys, row, drop, says):
    """A measurements CSV without a column every row needs: one line naming the column and
    the required ones (not a traceback, not 'every row skipped'); with it, the row runs."""
    err = assert_one_line_error(*run(capsys, "validate", _csv(tmp_path / "m.csv", row, drop)))
    assert says in err and "required" in err, err
    rc, out, err = run(capsys, "validate", _csv(tmp_path / "ok.csv", row, ()))
    assert rc == 0 and "Traceback" not in err, err


_DENSE_MOE = [(("--moe-capacity-factor", "1.2"), "--moe-capacity-factor 1.2"),
              (("--moe-imbalance", "1.3"), "--moe-imbalance 1.3"),
              (("--moe-dispatcher", "deepep"), "--moe-dispatcher deepep"),
              (("--moe-fp8-dispatch",), "--moe-fp8-dispatch"),
              (("--etp", "2"), "etp(2) != tp(1)"),
              (("--ep-overlap",), "ep_overlap")]


@pytest.mark.parametrize("knob, says", _DENSE_MOE)
def test_predict_refuses_expert_settings_on_a_dense_model(capsys, knob, says):
    err = assert_one_line_error(*run(capsys, "predict", "--model", "llama3-8b", *knob))
    assert says in err and ("mixture-of-experts" in err or "ep > 1" in err)


@pytest.mark.parametrize("command", ["search", "compare"])
@pytest.mark.parametrize("knob, says", [k for k in _DENSE_MOE if "moe-dispatcher" in k[1]
                                        or "fp8-dispatch" in k[1]])
def test_search_and_compare_refuse_expert_settings_on_a_dense_model(capsys, command, knob,
                                                                     says):
    args = ("--gpu", "h100") if command == "compare" else ()
    err = assert_one_line_error(*run(capsys, command, "--model", "llama3-8b", "--num-gpus",
                                     "8", *args, *knob))
    assert says in err and "needs a mixture-of-experts model" in err


@pytest.mark.parametrize("knob", ["--moe-capacity-factor=1.2", "--moe-imbalance=1.3",
                                  "--moe-dispatcher=deepep", "--moe-fp8-dispatch", "--ep=8"])
def test_sweep_marks_dense_rows_with_expert_settings_infeasible(capsys, knob):
    import csv
    import io

    rc, out, _ = run(capsys, "sweep", "--model", "llama3-8b,mixtral-8x7b", "--gpu", "h100",
                     "--num-gpus", "64", knob, "--format", "csv")
    rows = {r["model"]: r for r in csv.DictReader(io.StringIO(out))}
    assert rc == 0
    assert "needs a mixture-of-experts model" in rows["llama3-8b"]["infeasible"]
    assert rows["mixtral-8x7b"]["infeasible"] == ""


@pytest.mark.parametrize("args, says", [
    (("--vpp", "2"), "--vpp 2: needs a pipeline"),
    (("--pp-schedule", "gpipe"), "--pp-schedule gpipe: needs a pipeline"),
    (("--vpp", "2", "--pp", "1"), "--vpp 2: needs a pipeline"),
    (("--recompute-layers", "5", "--recompute", "none"), "beside --recompute none"),
    (("--recompute-layers", "100", "--recompute", "full"),
     "recompute_layers 100 is above the 32 layers of a pipeline stage"),
    (("--recompute-layers", "17", "--recompute", "full", "--pp", "2", "--num-gpus", "16"),
     "above the 16 layers"),
    (("--plan", "tp8 · ckpt full 1/31 · mb 1"), "has 32 layers, not 31; accepted: 1/32"),
    (("--plan", "fsdp4 × pp2(1f1b, m=4) · ckpt full 3/32 · mb 1"), "16 layers, not 32"),
    (("--plan", "tp8 · ckpt full 33 · mb 1"), "above the 32 layers"),
])
def test_predict_refuses_settings_it_would_ignore(capsys, args, says):
    err = assert_one_line_error(*run(capsys, "predict", "--model", "llama3-8b", *args))
    assert says in err


def test_predict_applies_a_stated_stage_total_that_matches(capsys):
    import json

    rc, out, _ = run(capsys, "predict", "--plan", "fsdp4 × pp2(1f1b, m=4) · ckpt full 3/16 · mb 1",
                     "--format", "json")
    assert rc == 0 and json.loads(out)["training"]["recompute_layers"] == 3


def test_layers_of_auto_recompute_are_stated_where_the_choice_recomputes_none(capsys):
    import json

    rc, out, _ = run(capsys, "predict", "--recompute-layers", "5", "--format", "json")
    report = json.loads(out)
    assert rc == 0 and report["training"]["recompute"] == "none"
    assert any(n.startswith("--recompute-layers 5: ") for n in report["notes"])


def test_a_misspelt_model_table_suggests_model_and_lists_every_table(tmp_path, capsys):
    (tmp_path / "m.toml").write_text('[[modell]]\nid = "my-model"\n')
    err = assert_one_line_error(*run(capsys, "--catalog", str(tmp_path), "catalog", "list"))
    assert "[[modell]] (did you mean: model" in err
    assert "[[model]]" in err.split("accepted:")[1] and "[[family]]" in err.split("accepted:")[1]


@pytest.mark.parametrize("command", [("catalog", "list"), ("predict", "--model", "llama3-8b")])
def test_a_broken_model_entry_is_refused_when_its_folder_is_read(tmp_path, capsys, monkeypatch,
                                                                  command):
    (tmp_path / "m.toml").write_text('[[model]]\nid = "my-broken"\nsource = "test"\n'
                                     'n_layers = 4\n')
    err = assert_one_line_error(*run(capsys, "--catalog", str(tmp_path), *command))
    assert "'my-broken': missing required key 'd_model'" in err
    monkeypatch.setenv("FSDPSIM_CATALOG", str(tmp_path))
    err = assert_one_line_error(*run(capsys, *command))
    assert "'my-broken': missing required key 'd_model'" in err


@pytest.mark.parametrize("args, says", [
    (("--num-gpus", "16", "--gpus-per-node", "3"), "e.g. 15 or 18 GPUs"),
    (("--num-gpus", "3"), "accepted: a divisor of 8"),
])
def test_gpus_not_in_whole_nodes_say_what_would_be(capsys, args, says):
    err = assert_one_line_error(*run(capsys, "predict", "--model", "llama3-8b", "--gpu", "h100",
                                     *args))
    assert says in err
