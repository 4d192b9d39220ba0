"""Accuracy against the published calibration runs, and the calibration machinery itself.

The published file ships in ``validation/data/`` (its sources: ``validation/data/README.md``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fsdpsim.measured.calibrate import FACTORS, fit
from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.cli import main
from fsdpsim.util.errors import ConfigError
from fsdpsim.measured.stats import by_framework, summarise
from fsdpsim.measured.validate import engine_inputs, load_measurements, predict_measurements
from fsdpsim import engine

from conftest import VALIDATION_CSV, overlay_catalog

A100S = ("a100-sxm4-80gb", "a100-sxm4-40gb")


@pytest.fixture(scope="module")
def every_row():
    return load_measurements(VALIDATION_CSV)


@pytest.fixture(scope="module")
def published(every_row):
    """The PyTorch FSDP rows (MosaicML llm-foundry): the rows the A100 factors are fitted to."""
    return by_framework(every_row, "fsdp")


def test_fsdp_rows_meet_the_accuracy_floor(published):
    """Issue floor: MAPE <= 7 % on the 139 MosaicML FSDP rows (in-sample after calibration)."""
    result = predict_measurements(published, load_catalog(use_env=False))
    s = summarise(result)
    print(f"\nMosaicML FSDP rows: {s}")
    assert s["rows"] == 139
    assert s["mape"] <= 0.07
    assert s["median_ape"] <= 0.05
    assert abs(s["bias"]) <= 0.02
    # Every row but two memory-pressed runs stays within 25 %: the near-OOM MPT-30B seq-8192 run
    # (93 % of memory) and MPT-70B on 64 A100-40GB at micro-batch 2 (82 %; llm-foundry's own
    # table shows it at 35.9 % MFU against 48.9 % on 128 GPUs with micro-batch 4, and
    # tests/data/reference/network_at_scale.md §3 finds memory pressure, not the network, the likelier cause). It was
    # within 15 % only with a fabric fraction fitted to these rows, which the model does not do
    # (they run on the general RoCE class).
    bad = result[result["error"].abs() > 0.25]
    assert sorted(bad["id"]) == ["mosaic-080", "mosaic-140"], bad[["id", "error"]]


def test_every_measured_run_fits_in_memory(published):
    """These runs happened, so fsdpsim must not call any of them out of memory; MosaicML tuned
    micro-batches to the memory limit, so most sit above half the capacity."""
    use = published[published["skip"] == ""].reset_index(drop=True)
    mem = engine.memory_breakdown(engine_inputs(use, load_catalog(use_env=False)))
    share = mem["peak_bytes"] / mem["capacity_bytes"]
    assert mem["fits"].all(), use.loc[~mem["fits"], "id"].tolist()
    assert np.median(share) > 0.5


def test_rows_fsdpsim_cannot_model_are_skipped_with_a_reason(every_row):
    """The one row whose layout is not stated is skipped; the Megatron TP/PP rows (interleaved
    schedule, chunks and micro-batch not stated: auto) and the data-parallel DeepSpeed ZeRO-3
    rows (as FULL_SHARD) are modelled."""
    skipped = every_row[every_row["skip"] != ""]
    assert list(skipped["skip"]) == ["parallel layout (tp/pp/cp) not stated"]
    assert list(skipped["id"]) == ["megatron-sc21-text-01"]
    # Megatron rows state no micro-batch (Table 1) or no chunk count: predict's auto decides
    auto = every_row[every_row["knobs"] != ""]
    assert auto["id"].str.startswith("megatron-sc21-t").all() and len(auto) == 16
    assert auto.iloc[0]["knobs"] == f"auto: micro_batch {auto.iloc[0]['micro_batch']}"
    assert auto.iloc[0]["micro_batch"] * auto.iloc[0]["grad_accum"] * 32 == 512
    zero3 = every_row[every_row["framework"].str.contains("ZeRO-3")]
    assert len(zero3) == 6 and (zero3["skip"] == "").all()
    assert set(zero3["sharding"]) == {"full"} and set(zero3["precision"]) == {"fp16"}
    assert not zero3["flash_attention"].any()  # SC21 (2021) predates FlashAttention


def test_sc21_deepspeed_zero3_rows_with_the_2021_profile(every_row):
    """The six SC21 DeepSpeed ZeRO-3 rows (GPT-175B and 530B, 384-2,240 A100s,
    fixed global batch) within 25 % MAPE with the ``deepspeed-zero3-2021`` profile (code facts:
    a per-parameter gather after a device synchronisation, list collectives with a copy per
    rank; nothing fitted to these rows), and the shape: per-GPU throughput falls by at least a
    third from 384 to 768 GPUs and again from 768 to 1,536 (measured -39 % and -50 %)."""
    zero3 = every_row[every_row["framework"].str.contains("ZeRO-3")].reset_index(drop=True)
    assert set(zero3["recipe"]) == {"deepspeed-zero3-2021"}
    result = predict_measurements(zero3, load_catalog(use_env=False))
    s = summarise(result)
    print(f"\nSC21 DeepSpeed ZeRO-3 rows: {s}")
    assert s["rows"] == 6 and s["mape"] <= 0.25
    gpt175 = result[result["model"].str.contains("174.6B")].sort_values("n_gpus")
    tps = dict(zip(gpt175["n_gpus"], gpt175["predicted_tokens_per_s_per_gpu"]))
    assert tps[768] / tps[384] <= 2 / 3 and tps[1536] / tps[768] <= 2 / 3
    # Without the profile (as modern FSDP2 would run them) they are far too fast.
    fsdp2 = predict_measurements(zero3.assign(recipe="fsdp2"), load_catalog(use_env=False))
    assert summarise(fsdp2)["mape"] > 0.5


def test_validate_reports_each_framework(capsys):
    assert main(["validate", str(VALIDATION_CSV)]) == 0
    out = capsys.readouterr().out
    assert "Composer + PyTorch FSDP" in out and "DeepSpeed ZeRO-3" in out
    assert "skipped 1 of 162 rows:" in out
    assert "1  parallel layout (tp/pp/cp) not stated" in out
    assert main(["validate", str(VALIDATION_CSV), "--framework", "deepspeed",
                 "--format", "json"]) == 0
    assert '"rows": 6' in capsys.readouterr().out


def _synthetic(published, truth: dict[str, float]) -> pd.DataFrame:
    """Measurements made by the engine itself with known factors: calibration must recover them."""
    use = published[(published["skip"] == "") & published["gpu"].isin(A100S)].reset_index(drop=True)
    x = engine_inputs(use, load_catalog(use_env=False))
    for name, value in truth.items():
        x[name] = np.full(len(use), value)
    x["ceilings"] = 0.0
    frame = use.copy()
    frame["tokens_per_s_per_gpu"] = engine.evaluate(x)["tokens_per_s_per_gpu"]
    return frame


def test_calibration_recovers_known_factors(published):
    truth = {"matmul_fraction": 0.7, "attention_fraction": 0.45, "hbm_fraction": 0.8}
    frame = _synthetic(published, truth)
    result = fit(frame, load_catalog(use_env=False), A100S, tuple(truth))
    for name, value in truth.items():
        assert result.values[name] == pytest.approx(value, rel=0.01), name
    assert result.after["mape"] < 1e-3 < result.before["mape"]


def test_calibration_refuses_a_factor_the_rows_cannot_identify(published):
    single_node = published[(published["n_gpus"] == 8) & (published["skip"] == "")]
    result = fit(single_node, load_catalog(use_env=False), A100S,
                 ("matmul_fraction", "nic_fraction"))
    assert "nic_fraction" in result.refused and "matmul_fraction" in result.values
    with pytest.raises(ConfigError, match="no factor can be identified"):
        fit(single_node, load_catalog(use_env=False), A100S, ("nic_fraction",))


def test_a_factor_starting_at_the_middle_of_its_range_is_still_identified(published, tmp_path):
    """Regression: the identifiability probe moved every factor to the middle of
    its range, so one that started there (GB300's fused attention at 0.55 of (0.1, 1.0))
    changed nothing and was refused."""
    low, high = FACTORS["matmul_fraction"][2]
    middle = {gpu: {"matmul_fraction": 0.5 * (low + high)} for gpu in A100S}
    catalog = overlay_catalog(tmp_path / "catalog", middle)
    frame = _synthetic(published, {"matmul_fraction": 0.7})
    result = fit(frame, catalog, A100S, ("matmul_fraction",))
    assert "matmul_fraction" not in result.refused
    assert result.values["matmul_fraction"] == pytest.approx(0.7, rel=0.01)


def test_unknown_factor_is_a_config_error(tmp_path):
    frame = pd.DataFrame({"skip": ["", ""], "gpu": ["h100-sxm5-80gb"] * 2})
    with pytest.raises(ConfigError, match="fittable"):
        fit(frame, load_catalog(use_env=False), ["h100"], ("warp_speed",))


def test_calibrate_writes_an_overlay_that_validate_uses(tmp_path, capsys):
    overlay = tmp_path / "overlay" / "a100.toml"
    code = main(["calibrate", "--measurements", str(VALIDATION_CSV), "--gpu", A100S[0],
                 "--gpu", A100S[1], "--factor", "matmul_fraction", "--factor", "hbm_fraction",
                 "--output", str(overlay)])
    out = capsys.readouterr().out
    assert code == 0 and overlay.exists(), out
    assert "before:" in out and "after :" in out
    text = overlay.read_text()
    assert text.count("override = true") == 2 and "matmul_fraction" in text
    code = main(["--catalog", str(overlay.parent), "validate", str(VALIDATION_CSV),
                 "--format", "json"])
    assert code == 0
    assert '"mape"' in capsys.readouterr().out


def test_validate_bad_file_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "m.csv"
    bad.write_text("gpu,n_gpus\nh100,8\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing column" in err[0]
    assert main(["validate", str(tmp_path / "nope.csv")]) == 2


def test_factor_table_is_consistent_with_the_engine_inputs():
    from fsdpsim.drivers.predict import system_inputs
    from fsdpsim.hardware.system import resolve_system

    keys = system_inputs(resolve_system(load_catalog(use_env=False), gpu="h100"), "bf16")
    assert set(FACTORS) <= set(keys)


_SCHEMA = ("id,model,gpu,n_gpus,gpus_per_node,inter_node_gbps_per_gpu,seq_len,micro_batch,"
           "grad_accum,sharding,recompute,tokens_per_s_per_gpu").split(",")
_GOOD = dict(zip(_SCHEMA, "x,llama3-8b,h100,16,8,400,4096,2,1,full,none,8000".split(",")))


@pytest.mark.parametrize("column", _SCHEMA[1:])
@pytest.mark.parametrize("value", ["abc", "-1", "0", "1e400"])
def test_a_bad_cell_is_one_line_exit_2(tmp_path, capsys, column, value):
    """Every column of fsdpsim's measurement schema: an unusable value is one line naming the
    row, the column and what is accepted, exit 2 — never a traceback or a silent number."""
    path = tmp_path / "m.csv"
    pd.DataFrame([{**_GOOD, column: value}]).to_csv(path, index=False)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fsdpsim: error:"), err


def test_auto_knobs_in_fsdpsim_schema(tmp_path, capsys):
    path = tmp_path / "m.csv"
    pd.DataFrame([{**_GOOD, "micro_batch": "auto", "grad_accum": "auto", "recompute": "auto",
                   "global_batch_seqs": 64}]).to_csv(path, index=False)
    assert main(["validate", str(path), "--format", "json"]) == 0
    import json
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["knobs"].startswith("auto: micro_batch") and row["micro_batch"] * row["grad_accum"] * 16 == 64


def test_a_filter_that_matches_nothing_says_what_the_file_has(capsys):
    assert main(["validate", str(VALIDATION_CSV), "--framework", "jax"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--framework 'jax'" in err[0] and "a100-sxm4-40gb" in err[0]


def test_calibrate_on_a_file_without_usable_rows_is_one_line(tmp_path, capsys):
    """Regression (found by test_fuzz): a file whose every row has a skip reason
    made ``calibrate`` fail inside pandas (no usable row to test for MoE) instead of saying how
    many rows it could use."""
    from conftest import assert_one_line_error, run

    path = tmp_path / "m.csv"
    path.write_text("id,source_key,model,n_layers,d_model,n_heads,vocab,seq_len,gpu,n_gpus,"
                    "gpus_per_node,framework,tp,pp,cp,sharding,micro_batch,grad_accum,"
                    "global_batch_seqs,activation_checkpointing,precision,tokens_per_s_per_gpu\n"
                    "p0,fuzz,MPT-7b,32,4096,32,50368,2048,A100 80GB,64,8,Composer,1,1,,"
                    "FULL_SHARD,8,,512,false,amp_bf16,3000\n")
    line = assert_one_line_error(*run(capsys, "calibrate", "--measurements", str(path),
                                      "--gpu", "h100", "--framework", ""))
    assert "too few rows to fit" in line and "0 on --gpu h100-sxm5-80gb" in line
