"""``fsdpsim validate`` on hybrid-parallel published runs.

Each source's mapping is checked on hand-read rows of ``validation/data`` (degrees, schedule,
sharding, precision, skip reasons); the engine inputs of a hybrid row equal what
``predict.config_inputs`` builds from the objects the row describes; every dense core row of
``hybrid_calibration.csv`` is modelled or skipped for a listed reason; the CLI prints the
groupings the issue's accuracy floors are read from. Accuracy is printed here; every figure the
README and docs/accuracy.md quote is asserted as a ceiling in ``tests/test_accuracy_claims.py``
(no model constant is tuned to these rows).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.cli import main
from fsdpsim.measured.stats import by_framework, summarise, summarise_by
from fsdpsim.measured.rows import row_setup, spec_for_row
from fsdpsim.measured.validate import engine_inputs, load_measurements, predict_measurements
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import config_inputs
from fsdpsim.hardware.system import resolve_system

from conftest import VALIDATION_DATA

CATALOG = load_catalog(use_env=False)
HYBRID = VALIDATION_DATA / "hybrid_calibration.csv"
PUBLISHED = VALIDATION_DATA / "published_calibration.csv"
VTRAIN_MULTI = VALIDATION_DATA / "vtrain_ground_truth_multi.csv"
#: Dense core rows of hybrid_calibration.csv that may be skipped today, by reason prefix, and why.
ALLOWED_CORE_SKIPS = {
    # Llama 3.1 405B (126 layers) on Megatron-Bridge: the embedding and the loss each take a
    # layer's slot (account_for_embedding/loss_in_pipeline_split), so with virtual stages the
    # first and last stages hold chunks of unequal size; ParallelPlan.stage_layers refuses it.
    "layout: the first pipeline stage's": "uneven first/last stages with virtual stages",
}


@pytest.fixture(scope="module")
def hybrid():
    return load_measurements(HYBRID, CATALOG).set_index("id", drop=False)


@pytest.fixture(scope="module")
def published():
    return load_measurements(PUBLISHED, CATALOG).set_index("id", drop=False)


@pytest.fixture(scope="module")
def vtrain_multi():
    return load_measurements(VTRAIN_MULTI, CATALOG)


# ------------------------------------------------------------------ each source's mapping
def test_sc21_ptd_p_rows_are_interleaved_1f1b_with_full_recompute(published):
    """SC21 Table 1 (GPT-529.6B: 105 layers on tp 8 x pp 35, dp 9): interleaved schedule with
    the only chunk count that splits 3 layers per stage (3), full recompute, DDP, fp16, eager
    attention (2021), no sequence parallelism (pre-dates it)."""
    r = published.loc["megatron-sc21-t1-09"]
    assert r["skip"] == ""
    assert (r["tp"], r["pp"], r["cp"], r["vpp"], r["pp_schedule"]) == (8, 35, 1, 3, "interleaved")
    assert (r["sharding"], r["recompute"], r["precision"], r["reduce_dtype"]) == \
        ("none", "full", "fp16", "fp16")
    assert not r["sequence_parallel"] and not r["flash_attention"]
    assert r["knobs"].startswith("auto: micro_batch") and r["knobs"].endswith("vpp 3")
    assert r["micro_batch"] * r["grad_accum"] * 9 == 2520  # the stated global batch, dp 9


def test_sc21_table2_pipeline_degree_is_derived_from_the_stated_dp(published):
    """Table 2 states model-parallel size 96 = tp 8 x pp ?, with dp 4 on 384 GPUs: pp 12."""
    r = published.loc["megatron-sc21-t2-07"]
    assert r["skip"] == "" and (r["tp"], r["pp"], r["micro_batch"]) == (8, 12, 1)
    assert "pp 12 derived" in r["modelled_as"]
    assert r["vpp"] in (2, 4, 8) and r["pp_schedule"] == "interleaved"  # 8 layers per stage
    assert published.loc["megatron-sc21-text-01", "skip"] == \
        "parallel layout (tp/pp/cp) not stated"
    zero3 = published.loc["megatron-sc21-t2-01"]
    assert (zero3["skip"], zero3["sharding"], zero3["tp"], zero3["pp"]) == ("", "full", 1, 1)


def test_megatron_bridge_rows_take_megatron_core_defaults(hybrid):
    """Llama 3 70B on 64 GB200 (tp 2, pp 4, vpp 5, NVFP4): the distributed optimizer (ZeRO-1),
    sequence parallelism with TP, the interleaved schedule, NVFP4 modelled as itself (the FP4
    peak with the recipe's BF16 layers), recompute not stated (none: Megatron-Core's default), Megatron's
    mixed-precision recipe, one NVL72 rack's NVLink domain."""
    r = hybrid.loc["mbridge-2602-002"]
    assert r["skip"] == ""
    assert (r["tp"], r["pp"], r["cp"], r["vpp"], r["pp_schedule"]) == (2, 4, 1, 5, "interleaved")
    assert (r["sharding"], r["precision"], r["precision_format"]) == ("optimizer", "nvfp4",
                                                                       "nvfp4")
    assert r["sequence_parallel"] and r["flash_attention"] and r["fused_loss"]
    assert r["precision_note"] == "nvfp4 (NVFP4)" and "FP8" not in r["modelled_as"]
    assert (r["recompute"], r["recipe"], r["dropout"]) == ("none", "megatron", False)
    assert (r["gpu"], r["gpus_per_node"], r["generation"]) == ("gb200", 72, "Blackwell")
    spec, system, plan, _ = row_setup(r, CATALOG)
    assert plan.gpus_per_node == system.gpus_per_node == 64  # 64 of 72 GPUs per rack used
    fsdp = hybrid.loc["mbridge-2511-027"]  # Llama 3 8B on 8 H100, Megatron-FSDP, FP8-CS
    assert (fsdp["sharding"], fsdp["precision"], fsdp["precision_format"], fsdp["gpu"],
            fsdp["gpus_per_node"]) == ("full", "fp8", "fp8", "h100-sxm5-80gb", 8)
    assert fsdp["precision_note"] == "fp8 (FP8-CS, per-tensor current scaling)"
    mx = hybrid.loc["mbridge-2511-002"]  # source label FP8-MX: MXFP8 block scaling
    assert (mx["precision"], mx["precision_format"]) == ("mxfp8", "mxfp8")


#: H100 rows whose recipe sets Transformer Engine's userbuffers TP comm overlap
#: (``tp_comm_overlap``): Megatron-Bridge's Llama 3 70B and 3.1 405B perf configs from r0.1.0 to
#: v0.5.x, and NeMo-Framework-Launcher 24.07's configs of the same TP x PP layout.
TP_OVERLAP_H100 = ("mbridge-2509-023", "mbridge-2509-024", "mbridge-2511-028", "mbridge-2511-029",
                   "mbridge-2602-007", "mbridge-2602-014", "mbridge-260201-007",
                   "mbridge-2604-007", "mbridge-260401-007", "mbridge-260401-014",
                   "mbridge-2606-007", "mbridge-2606-036", "mbridge-2606-041", "nemo2407-002",
                   "nemo2407-007", "nemo2407-008", "nemo2407-009", "nemo2407-012")


def test_tp_comm_overlap_is_read_from_the_rows_recipe(hybrid):
    """The ``tp_overlap`` column is ``predict --tp-overlap``: the stated rows plan with it, the
    DeepSeek-V3 H100 rows (``tp_comm_overlap=False`` in their recipe) and unstated rows without
    it, and on a 405B row it hides the TP all-gathers/reduce-scatters behind the GEMMs: the
    prediction is faster than the same row with the cell cleared."""
    h100 = hybrid[(hybrid["gpu"] == "h100-sxm5-80gb") & (hybrid["skip"] == "")]
    stated = {i for i in h100.index if row_setup(h100.loc[i], CATALOG)[2].tp_overlap}
    assert stated == set(TP_OVERLAP_H100)
    assert not row_setup(hybrid.loc["mbridge-2509-025"], CATALOG)[2].tp_overlap
    row = hybrid.loc[["mbridge-2606-007"]].copy()
    off = row.assign(tp_overlap=float("nan"))
    on_tps, off_tps = (predict_measurements(r, CATALOG)["predicted_tokens_per_s_per_gpu"].iloc[0]
                       for r in (row, off))
    assert on_tps > 1.2 * off_tps


def test_the_h100_fp8_fit_is_below_its_gemm_ceiling_only_with_tp_overlap(hybrid):
    """Fitted on H100's 34 dense FP8 core rows (the catalog's command), the Transformer Engine
    matmul fraction is under the FP8 MAMF ceiling 0.709 with each row's TP comm overlap, and
    above it (the TP collectives counted as exposed) without."""
    from fsdpsim.measured.calibrate import fit
    from fsdpsim.measured.stats import fit_rows

    rows = fit_rows(hybrid[hybrid["gpu"] == "h100-sxm5-80gb"].reset_index(drop=True))
    assert len(rows) == 34
    factors = ["fused_attention_fraction", "matmul_fraction"]
    with_overlap = fit(rows, CATALOG, ["h100-sxm5-80gb"], factors, cross_validate=False)
    assert with_overlap.values["matmul_fraction"] == pytest.approx(0.6667, abs=2e-3)
    assert with_overlap.after["mape"] < 0.065
    without = fit(rows.assign(tp_overlap=float("nan")), CATALOG, ["h100-sxm5-80gb"], factors,
                  cross_validate=False, check_ceiling=False)
    assert without.values["matmul_fraction"] > 0.709


def test_deepseek_recipe_dispatcher_and_overlap_by_release(hybrid):
    """The file's ep_overlap and moe_dispatcher columns (read from Megatron-Bridge's configs:
    H100 overlapped the expert all-to-alls in 25.09 and 25.11, not from 26.02; the 25.09
    token-drop runs and the 25.11 B200 config keep the alltoall dispatcher) reach the rows."""
    assert hybrid.loc["mbridge-2509-025", "ep_overlap"] is True
    assert hybrid.loc["mbridge-2511-023", "ep_overlap"] is not True   # B200 25.11
    for row in ("mbridge-2509-007", "mbridge-2509-017", "mbridge-2511-023"):
        assert hybrid.loc[row, "moe_dispatcher"] == "alltoall", row
    for row in ("mbridge-2509-025", "mbridge-2602-018", "mbridge-2608-002"):
        assert hybrid.loc[row, "moe_dispatcher"] == "deepep", row


def test_deepseek_recipe_cuda_graphs_by_release(hybrid):
    """The file's cuda_graphs column (from Megatron-Bridge's configs: GB300/GB200 MXFP8 replay the whole iteration from
    June 2026, the B300 V2 (pp 8) and B200 V2 (pp 8, vpp 2, ep 32) configs capture per-layer
    graphs, GB200's configs per-layer graphs since 25.11; the 25.09 run script and the pp-16
    configs capture none; empty: Megatron-Core's default, none)."""
    expected = {"mbridge-2606-008": "full", "mbridge-2608-002": "full",
                "mbridge-260401-017": "partial", "mbridge-260401-018": "partial",
                "mbridge-2602-016": "partial", "mbridge-2602-018": "none",
                "mbridge-2602-017": "none", "mbridge-2509-007": "none",
                "mbridge-2604-014": "none"}
    for row, graphs in expected.items():
        got = hybrid.loc[row, "cuda_graphs"]
        assert (got if isinstance(got, str) else "none") == graphs, row


def test_megatron_bridge_405b_stages_account_for_embedding_and_loss(hybrid):
    """126 layers over pp 16 x vpp 4 (GB200): Megatron-Bridge counts the embedding and the loss
    as layers (128 = 16 x 4 x 2), so the first and last stages hold 7 layers, the others 8:
    the megatron profile's default split, as predict makes it (the row states no split)."""
    r = hybrid.loc["mbridge-2602-013"]
    assert (r["tp"], r["pp"], r["vpp"], r["recipe"]) == (4, 16, 4, "megatron")
    assert pd.isna(r["pp_first_layers"]) and pd.isna(r["pp_last_layers"])
    spec, _, plan, _ = row_setup(r, CATALOG)
    assert plan.layer_split(spec.n_layers).counts == (7,) + (8,) * 14 + (7,)


def test_moe_rows_modelled_and_inconsistent_layouts_skipped_with_their_reason(hybrid):
    # DeepSeek-V3 EP rows: the recipe's settings as the file's columns state them
    row = hybrid.loc["mbridge-2608-001"]                          # DeepSeek-V3, ep 32
    assert (row["skip"], row["preset"], row["ep"], row["etp"]) == ("", "deepseek-v3", 32, 1)
    assert (row["pp_first_layers"], row["pp_last_layers"], row["moe_imbalance"]) == (32, 29, 1)
    assert row["ep_overlap"] is True
    drop = hybrid.loc["mbridge-2509-007"]                         # DeepSeek-V3 (tokendrop)
    assert drop["moe_capacity_factor"] == 1.0 and drop["skip"] == ""
    assert hybrid.loc["mbridge-2511-005", "mtp_layers"] == 0      # DeepSeek-V3 (w/o MTP)
    # Qwen3-235B-A22B (ep 8) on MI355X states no sequence length
    assert hybrid.loc["primuspipe-007", "skip"] == "seq_len not stated as whole numbers"
    # NeMo long-sequence B200 table: the stated degrees multiply to a quarter of the GPUs
    row = hybrid.loc["nemocp-001"]
    assert row["skip"] == "layout dp(2) * tp(1) * pp(1) * cp(1) = 2 != n_gpus(8)"
    assert row["subset"] == "doubtful"
    assert hybrid.loc["nemocp-017", "skip"] == "parallel layout (tp/pp/cp) not stated"
    assert hybrid.loc["primuspipe-001", "skip"] == "seq_len not stated as whole numbers"


def test_internevo_rows(hybrid):
    """InternEvo: its own ZeRO-1 profile (``internevo``: gradients all-reduced, parameters
    broadcast), zero1=-1 over every DP rank and zero1=4/8 within groups (``shard_group_size``),
    TP 2 without sequence parallelism (its configs), 4 x 100 Gb/s RoCE per node, checkpointing
    as stated."""
    r = hybrid.loc["internevo-026"]  # 16 GPUs, tp 2, zero1=4
    assert (r["skip"], r["tp"], r["sharding"], r["recompute"], r["precision"]) == \
        ("", 2, "optimizer", "none", "bf16")
    assert (r["recipe"], r["shard_group_size"], r["modelled_as"]) == ("internevo", 4, "")
    assert not r["sequence_parallel"] and r["flash_attention"]
    assert (r["network"], r["inter_node_gbps_per_gpu"]) == ("roce-100", 50.0)
    assert hybrid.loc["internevo-033", "recompute"] == "full"
    whole = hybrid.loc["internevo-001"]  # zero1=-1: every data-parallel rank
    assert whole["modelled_as"] == "" and pd.isna(whole["shard_group_size"])


def test_internevo_zero1_over_every_rank_falls_off_with_scale(hybrid):
    """Regression (InternEvo's per-GPU throughput falling at 512-1,024 A100, once predicted
    +37 % and +70 % fast): with zero1=-1 every
    rank broadcasts its shard through a chain of all the others after the step, so 1,024 GPUs
    run at 2,271 tokens/s per GPU against 3,625 with zero1=8. Predicted, that fall is more
    than 30 % (it was 1 %), and the rows of the table sit within 20 % (they were 70 % off)."""
    ids = ["internevo-008", "internevo-016", "internevo-007", "internevo-006"]
    result = predict_measurements(hybrid.loc[ids].reset_index(drop=True), CATALOG).set_index("id")
    pred = result["predicted_tokens_per_s_per_gpu"]
    assert pred["internevo-008"] < 0.7 * pred["internevo-016"]
    assert result["error"].abs().max() < 0.20, result["error"]


def test_megatron_bridge_low_precision_rows_keep_no_bf16_layers(hybrid):
    """Megatron-Bridge's performance configs keep no transformer layer in BF16 under any
    format (``precision.py``: ``first_last_layers_bf16 = False``; ``bf16_with_nvfp4_mixed``
    sets none), so its NVFP4 rows run every linear layer at the FP4 rate, not the NVFP4
    pretraining recipe's 15 % in BF16 that fsdpsim assumes when nothing is said. Regression:
    with that default the 17 NVFP4 core rows were 12.4 % off, all predicted slow (bias
    -12.4 %); read as run they are within 10 % with a bias under 8 %."""
    rows = hybrid[(hybrid["subset"] == "core") & (hybrid["precision"] == "nvfp4")
                  & (hybrid["skip"] == "")]
    assert len(rows) == 17 and (rows["bf16_layers"] == 0).all()
    assert hybrid.loc["internevo-001", "bf16_layers"] != 0  # bf16 rows: nothing to keep
    result = predict_measurements(rows.reset_index(drop=True), CATALOG)
    assert result["error"].abs().mean() < 0.10 and abs(result["error"].mean()) < 0.08


def test_dlperf_v100_rows(hybrid):
    """DLPerf GPT on V100 (2020-21): fp16, eager attention, DDP, 1F1B for PP, 1 EDR HCA per
    8-GPU node; full recompute: stated for OneFlow, and for Megatron-LM (not stated in the
    table) from DLPerf's launch script (``--checkpoint-activations``), never the selective
    recompute Megatron-LM of 2020 did not have."""
    r = hybrid.loc["dlperf-033"]  # OneFlow, dp 2 x tp 4 x pp 4 on 32 GPUs
    assert (r["skip"], r["tp"], r["pp"], r["vpp"], r["pp_schedule"]) == ("", 4, 4, 1, "")
    assert (r["precision"], r["sharding"], r["recompute"]) == ("fp16", "none", "full")
    assert not r["flash_attention"] and not r["sequence_parallel"]
    assert (r["network"], r["inter_node_gbps_per_gpu"], r["generation"]) == \
        ("ib-edr-100", 12.5, "Volta")
    for i in range(2, 37, 2):  # every Megatron-LM row
        megatron = hybrid.loc[f"dlperf-{i:03d}"]
        assert "Megatron-LM" in megatron["framework"]
        assert megatron["recompute"] == "full" and not str(megatron["knobs"]).startswith("auto")


def test_nemo_long_sequence_rows_convert_their_tflops(hybrid):
    """No tokens/s in NeMo's CP table: its TFLOP/s count the full attention square with N
    less the input embedding (the row's note: 16,665 tokens/s per GPU for Llama 2 7B at 4K)."""
    r = hybrid.loc["nemocp-016"]
    assert r["measured_from"] == "tflops_per_gpu (6N+12Lds)"
    assert r["tokens_per_s_per_gpu"] == pytest.approx(16665, rel=1e-3)
    cp = hybrid.loc["nemocp-024"]  # 64 H100, tp 4 x cp 2 x dp 8, 64K tokens
    assert (cp["skip"], cp["tp"], cp["cp"], cp["sequence_parallel"]) == ("", 4, 2, True)


def test_vtrain_multi_node_rows_are_all_modelled(vtrain_multi):
    """vTrain: TP x PP x DP on 64-512 A100, 1F1B, full recompute, no sequence parallelism;
    Megatron pads the GPT-2 vocabulary to a multiple of 128 x tp."""
    assert len(vtrain_multi) == 109 and (vtrain_multi["skip"] == "").all()
    r = vtrain_multi[(vtrain_multi["tp"] == 8) & (vtrain_multi["pp"] == 4)].iloc[0]
    assert (r["pp_schedule"], r["recompute"], r["sharding"], r["vocab"]) == \
        ("1f1b", "full", "none", 51200)
    assert not r["sequence_parallel"] and r["generation"] == "Ampere"


# ------------------------------------------------------------------ one builder
@pytest.mark.parametrize("row_id, objects", [
    ("megatron-sc21-t1-05", lambda r: (
        resolve_system(CATALOG, gpu="a100-sxm4-80gb", gpus_per_node=8, network="ib-hdr-200",
                       inter_node_gbps_per_gpu=200.0),
        ParallelPlan(num_gpus=512, gpus_per_node=8, sharding="none", tp=8, pp=2,
                     vpp=int(r["vpp"]), sequence_parallel=False, framework="megatron-2021"),
        TrainingConfig(seq_len=2048, micro_batch=int(r["micro_batch"]), recompute="full",
                       precision="fp16", reduce_dtype="fp16", flash_attention=False,
                       dropout=True))),
])
def test_engine_inputs_equal_predicts_builder(published, row_id, objects):
    """The engine inputs of a hybrid row are exactly ``config_inputs`` of the objects it
    describes (built here by hand from the row as read), plus its knobs."""
    r = published.loc[row_id]
    system, plan, training = objects(r)
    expected = config_inputs(spec_for_row(r), system, plan, training)
    got = engine_inputs(published.loc[[row_id]].reset_index(drop=True), CATALOG)
    _same_inputs(expected, got)
    assert (got["micro_batch"][0], got["grad_accum"][0]) == (r["micro_batch"], r["grad_accum"])


def test_engine_inputs_equal_predicts_builder_on_an_nvl72_rack(hybrid):
    r = hybrid.loc["mbridge-2602-002"]
    system = resolve_system(CATALOG, gpu="gb200", gpus_per_node=64)
    plan = ParallelPlan(num_gpus=64, gpus_per_node=64, sharding="optimizer", tp=2, pp=4, vpp=5,
                        sequence_parallel=True, framework="megatron")
    training = TrainingConfig(seq_len=8192, micro_batch=1, recompute=str(r["recompute"]),
                              precision="nvfp4", reduce_dtype="bf16", flash_attention=True,
                              fused_loss=True, bf16_layers=0)  # Megatron-Bridge keeps none
    expected = config_inputs(spec_for_row(r), system, plan, training)
    got = engine_inputs(hybrid.loc[["mbridge-2602-002"]].reset_index(drop=True), CATALOG)
    _same_inputs(expected, got)


def _same_inputs(expected: dict, got: dict) -> None:
    """Every input of ``config_inputs`` equals the stacked row exactly (NaN equal to NaN)."""
    assert set(expected) <= set(got)
    differ = {k: (v, got[k][0]) for k, v in expected.items()
              if not np.array_equal(np.asarray(v, dtype=float), got[k][0], equal_nan=True)}
    assert not differ, differ


# ------------------------------------------------------------------ coverage and accuracy
def test_every_core_row_is_modelled_or_skipped_for_a_listed_reason(hybrid):
    core = hybrid[hybrid["subset"] == "core"]
    skipped = core[core["skip"] != ""]
    unlisted = skipped[[not any(s.startswith(p) for p in ALLOWED_CORE_SKIPS)
                        for s in skipped["skip"]]]
    print(f"\n{len(core)} core rows: {len(core) - len(skipped)} modelled, "
          f"{len(skipped)} skipped")
    for reason, n in skipped["skip"].value_counts().items():
        print(f"  {n:>3}  {reason}")
    assert unlisted.empty, unlisted[["id", "skip"]].to_string()
    assert len(core) - len(skipped) >= 100
    assert set(hybrid["subset"]) == {"core", "doubtful", "finetune", "unusable"}


def _accuracy(name: str, frame: pd.DataFrame) -> dict:
    s = summarise(predict_measurements(frame, CATALOG))
    print(f"{name}: {s['rows']} rows, MAPE {100 * s['mape']:.1f} %, median "
          f"{100 * s['median_ape']:.1f} %, worst {100 * s['worst_ape']:.1f} %, "
          f"bias {100 * s['bias']:+.1f} %")
    return s


def test_accuracy_on_the_issue_floors_is_reported(published, vtrain_multi, hybrid):
    """The issue's floors (vTrain multi-node <= 12 %, SC21 PTD-P <= 10 %, dense core rows <= 12 %
    per generation and precision) are targets for the hybrid physics; this prints where the
    model stands and asserts that every group is predicted (the quoted figures are ceilings in
    tests/test_accuracy_claims.py)."""
    print()
    assert _accuracy("vTrain multi-node", vtrain_multi)["rows"] == 109
    assert _accuracy("SC21 PTD-P", by_framework(published, "ptd-p"))["rows"] == 16
    assert _accuracy("SC21 ZeRO-3", by_framework(published, "zero-3"))["rows"] == 6
    groups = summarise_by(predict_measurements(hybrid, CATALOG), "generation")
    for name, s in groups.items():
        print(f"hybrid core {name}: {s['rows']} rows, MAPE {100 * s['mape']:.1f} %, median "
              f"{100 * s['median_ape']:.1f} %, bias {100 * s['bias']:+.1f} %")
    assert {"Ampere bf16", "Hopper fp8", "Volta fp16"} <= set(groups)
    assert all(np.isfinite(s["mape"]) for s in groups.values())
    # the mixture-of-experts core rows (DeepSeek-V3 with expert parallelism; floor 15 %):
    # printed by GPU, no per-row tuning
    moe = hybrid[(hybrid["subset"] == "core") & hybrid["model"].str.contains("DeepSeek")
                 & (hybrid["skip"] == "")]
    result = predict_measurements(moe, CATALOG)
    s = _accuracy("hybrid core MoE (DeepSeek-V3)", moe)
    assert s["rows"] >= 34
    for gpu, part in result.groupby("gpu"):
        print(f"  {gpu}: {len(part)} rows, MAPE {100 * part['error'].abs().mean():.1f} %, "
              f"bias {100 * part['error'].mean():+.1f} %")


# ------------------------------------------------------------------ the CLI
@pytest.mark.parametrize("path, titles", [
    (HYBRID, ("by framework", "by subset", "by GPU generation x precision (core rows)")),
    (PUBLISHED, ("by framework", "by subset")),
    (VTRAIN_MULTI, ()),
])
def test_validate_prints_the_groupings(capsys, path, titles):
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    summary = out[out.index("\n\n") + 2:]  # after the rows table
    for title in titles:
        assert title in summary
    assert "tokens/s per GPU:" in summary
    assert max(len(line) for line in summary.splitlines()) <= 100, summary


def test_validate_by_option(capsys):
    assert main(["validate", str(HYBRID), "--by", "generation", "--by", "source",
                 "--format", "json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert set(out["by"]) == {"generation", "source"}
    assert "Hopper fp8" in out["by"]["generation"]
    assert main(["validate", str(PUBLISHED), "--framework", "ptd-p", "--by", "gpu"]) == 0
    assert "by GPU" in capsys.readouterr().out


# ------------------------------------------------------------------ fsdpsim's own schema
_OWN = dict(id="x", model="llama3-8b", gpu="h100", n_gpus=16, gpus_per_node=8,
            inter_node_gbps_per_gpu=400, seq_len=4096, micro_batch="auto", grad_accum="auto",
            sharding="optimizer", recompute="full", tokens_per_s_per_gpu=8000,
            global_batch_seqs=64, tp=2, pp=2, vpp="auto", sequence_parallel="true")


def test_own_schema_carries_the_layout(tmp_path):
    """tp 2 x pp 2 x dp 4 on 16 H100 with the interleaved chunk count and micro-batch left to
    auto: llama3-8b's 32 layers split into pp 2 x v for v in 2, 4, 8, 16."""
    path = tmp_path / "m.csv"
    pd.DataFrame([_OWN, {**_OWN, "id": "y", "vpp": "", "pp": "", "cp": 2,
                         "cp_kind": "all2all", "recompute_layers": 4}]).to_csv(path, index=False)
    frame = load_measurements(path, CATALOG).set_index("id", drop=False)
    x = frame.loc["x"]
    assert x["vpp"] in (2, 4, 8, 16) and x["knobs"].endswith(f"vpp {x['vpp']}")
    assert x["micro_batch"] * x["grad_accum"] * 4 == 64 and x["grad_accum"] % 2 == 0
    _, _, plan, options = row_setup(x, CATALOG)
    assert (plan.tp, plan.pp, plan.dp, plan.pp_schedule, plan.sequence_parallel) == \
        (2, 2, 4, "interleaved", True)
    _, _, plan, options = row_setup(frame.loc["y"], CATALOG)
    assert (plan.tp, plan.pp, plan.cp, plan.cp_kind, plan.dp) == (2, 1, 2, "all2all", 4)
    assert options["recompute_layers"] == 4
    assert predict_measurements(frame, CATALOG)["predicted_tokens_per_s_per_gpu"].gt(0).all()


@pytest.mark.parametrize("column, value, says", [
    ("tp", "1.5", "column tp: 1.5 is not accepted"),
    ("vpp", "many", "accepted: a whole number from 1 to 1,024, or auto"),
    ("pp_schedule", "zigzag", "gpipe, 1f1b, interleaved, zb-h1"),
    ("cp_kind", "spiral", "ring, all2all"), ("sequence_parallel", "maybe", "true or false"),
    ("moe_dispatcher", "nccl", "alltoall, deepep"),
    ("fp8_attention", "maybe", "column fp8_attention: 'maybe' is not accepted"),
    ("cuda_graphs", "some", "column cuda_graphs: 'some' is not accepted; accepted: none, "
     "partial, full"),
    ("ep", 2, "ep(2) > 1 needs a mixture-of-experts model"),
    ("ep", 16, "etp(2) * ep(16) = 32 does not divide tp(2) * cp(1) * dp(4) = 8"),
    ("tp", 3, "tp(3) * pp(2) * cp(1) = 6 does not divide num_gpus(16)"),
])
def test_own_schema_bad_layout_is_one_line_naming_the_row(tmp_path, capsys, column, value, says):
    path = tmp_path / "m.csv"
    pd.DataFrame([{**_OWN, "vpp": 2, column: value}]).to_csv(path, index=False)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "row 'x'" in err[0] and says in err[0], err


def test_generation_summary_keeps_moe_rows_apart_from_dense_ones():
    """The dense floors are about dense core rows and the MoE floor about MoE rows: the
    generation x precision summary labels MoE rows (some layer routes to experts) apart."""
    import pandas as pd


    frame = pd.DataFrame({"generation": ["Hopper"] * 3, "precision_format": ["fp8"] * 3,
                          "subset": ["core"] * 3, "moe": [False, False, True],
                          "error": [0.1, -0.1, 0.5]})
    found = summarise_by(frame, "generation")
    assert set(found) == {"Hopper fp8", "Hopper fp8 MoE"}
    assert found["Hopper fp8"]["rows"] == 2 and found["Hopper fp8"]["mape"] == pytest.approx(0.1)
