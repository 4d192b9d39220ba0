"""Reading published measurement tables: GPU names, networks, knobs and the measurement."""

from __future__ import annotations

import pandas as pd
import pytest

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.cli import main
from conftest import VALIDATION_CSV
from fsdpsim.measured.validate import load_measurements, predict_measurements
from fsdpsim.measured.published.tables import (
    from_published,
    match_accelerator,
    parse_network,
    parse_precision,
    parse_recompute,
    parse_sharding,
    tokens_per_s_per_gpu,
    uses_flash_attention,
)
from fsdpsim.measured.published.vtrain import from_vtrain

CATALOG = load_catalog(use_env=False)


@pytest.mark.parametrize("text, memory_gb, expected", [
    ("A100 80GB", None, "a100-sxm4-80gb"),
    ("A100 40GB", None, "a100-sxm4-40gb"),
    ("A100 SXM4 80GB", None, "a100-sxm4-80gb"),
    ("A100", 40, "a100-sxm4-40gb"),
    ("A100", None, "a100-sxm4-80gb"),          # the family alias decides
    ("H100 80GB", None, "h100-sxm5-80gb"),
    ("NVIDIA H100 SXM5", None, "h100-sxm5-80gb"),
    ("H100 PCIe", None, "h100-pcie-80gb"),
    ("h100_80gb", None, "h100-sxm5-80gb"),     # llm-foundry's own spelling
    ("NVIDIA H200 141GB", None, "h200-sxm-141gb"),
    ("GH200 96GB", None, "gh200-96gb"),
    ("MI300X", None, "mi300x"),
    ("AMD Instinct MI250X", None, "mi250x"),
    ("TPU v5p", None, "tpu-v5p"),
    ("MI250X 128GB", None, "mi250x"),             # per-package memory: the family decides
    ("H100 SXM5 80GB HBM3", None, "h100-sxm5-80gb"),
    ("Z9000 Hyper", None, None),
    ("", None, None),
])
def test_gpu_names_match_the_catalog(text, memory_gb, expected):
    assert match_accelerator(CATALOG, text, float("nan") if memory_gb is None else memory_gb) \
        == expected


@pytest.mark.parametrize("text, gpn, source, expected", [
    ("8x 200 Gb/s HDR InfiniBand per node (Selene, 3-level fat tree)", 8, "",
     ("ib-hdr-200", 200.0)),
    ("1600 Gbps per node RoCE (as stated)", 8, "mosaicml_llmfoundry", ("roce-200", 200.0)),
    ("3200 Gbps per node RoCE", 8, "other lab", ("roce-400", 400.0)),
    ("400 Gb/s per GPU NDR InfiniBand", 8, "", ("ib-ndr-400", 400.0)),
    ("4x 200 Gb/s HDR per node", 4, "", ("ib-hdr-200", 200.0)),
    ("EFA v2, 3200 Gbps per node", 8, "", ("efa-v2", 400.0)),
    ("Slingshot-11, 4x 200 Gb/s per node", 8, "", ("slingshot-11", 100.0)),
    ("not stated", 8, "", (None, None)),
])
def test_network_text_gives_fabric_and_rate_per_gpu(text, gpn, source, expected):
    assert parse_network(text, gpn, source) == expected


@pytest.mark.parametrize("sharding, framework, expected", [
    ("FSDP FULL_SHARD (ZeRO-3-like)", "", "full"), ("ZeRO-3", "", "full"),
    ("SHARD_GRAD_OP", "", "grad_op"), ("ZeRO stage 2", "", "grad_op"),
    ("ZeRO-1", "", "optimizer"), ("HYBRID_SHARD", "", "hybrid"), ("HSDP 8x16", "", "hybrid"),
    ("none (DP replicas)", "", "none"), ("NO_SHARD", "", "none"), ("DDP", "", "none"),
    ("", "torchtitan FSDP2", "full"), ("", "Megatron-LM", "none"),
])
def test_sharding_words(sharding, framework, expected):
    assert parse_sharding(sharding, framework) == expected


@pytest.mark.parametrize("text, framework, expected", [
    ("bf16 pure (FSDP mixed_precision PURE)", "Composer", ("bf16", "bf16")),
    # Composer DEFAULT (torch 2.x): params bf16, gradients reduced in fp32
    ("amp_bf16 (FSDP mixed_precision DEFAULT)", "Composer", ("bf16", "fp32")),
    ("mixed fp16", "Megatron-LM + DeepSpeed ZeRO-3", ("fp16", "fp16")),
    ("bf16", "torchtitan", ("bf16", "fp32")),
    ("amp_fp8", "Composer", ("fp8", "fp32")),
    ("fp32", "", ("fp32", "fp32")),
])
def test_precision_and_reduce_dtype(text, framework, expected):
    assert parse_precision(text, framework) == expected


def test_recompute_words():
    assert [parse_recompute(t) for t in ("full (per-block)", "True", "selective", "none", "")] \
        == ["full", "full", "selective", "none", "none"]


def test_flash_attention_from_notes_and_dates():
    assert uses_flash_attention("FlashAttention via attn_impl=flash")
    assert not uses_flash_attention("Narayanan et al., SC21 (arXiv 2104.04473)")
    assert not uses_flash_attention("GPT-3 runs, 2020")
    assert uses_flash_attention("torchtitan, 2024")
    assert uses_flash_attention("")                     # modern default
    assert not uses_flash_attention("2024, eager attention")


def test_measurement_from_each_kind_of_column():
    """Hand-worked: Megatron eq. 3 for GPT-3 175B at s = 2048, V = 51200: 96·l·h²·(1 + s/6h
    + V/16lh) = 1.4340e12 FLOPs per token, so 144 TFLOP/s is 100.4 tokens/s per GPU."""
    base = {"n_gpus": 8, "seq_len": 2048}
    assert tokens_per_s_per_gpu(pd.Series({**base, "tokens_per_s_per_gpu": 5.0})) \
        == (5.0, "tokens_per_s_per_gpu")
    assert tokens_per_s_per_gpu(pd.Series({**base, "tokens_per_s_total": 80.0}))[0] == 10.0
    step = tokens_per_s_per_gpu(pd.Series({**base, "step_time_s": 2.0, "global_batch_seqs": 16}))
    assert step == (16 * 2048 / 2.0 / 8, "step_time_s")
    megatron = pd.Series({**base, "tflops_per_gpu": 144, "n_layers": 96, "d_model": 12288,
                          "vocab": 51200, "tflops_counts_recompute": "yes (eq.3)"})
    per_token = 96 * 96 * 12288**2 * (1 + 2048 / (6 * 12288) + 51200 / (16 * 96 * 12288))
    assert per_token == pytest.approx(1.4340e12, rel=1e-4)
    assert tokens_per_s_per_gpu(megatron)[0] == pytest.approx(144e12 / per_token)
    mosaic = pd.Series({**base, "tflops_per_gpu": 100, "n_layers": 24, "d_model": 2048,
                        "n_params": 1.3e9, "tflops_counts_recompute": "no (model TFLOP/s)"})
    assert tokens_per_s_per_gpu(mosaic)[0] == pytest.approx(
        100e12 / (6 * 1.3e9 + 12 * 24 * 2048 * 2048))
    from_mfu = pd.Series({**base, "mfu_pct": 50.0, "peak_tflops_basis": "312 TFLOP/s (A100)",
                          "n_layers": 24, "d_model": 2048, "n_params": 1.3e9})
    assert tokens_per_s_per_gpu(from_mfu)[0] == pytest.approx(
        156e12 / (6 * 1.3e9 + 12 * 24 * 2048 * 2048))
    assert tokens_per_s_per_gpu(pd.Series(base))[1] == ""


def test_a_moe_row_with_only_tflops_is_converted_by_its_architecture():
    """Regression: DeepSeek-V3's 25.09 H100 pair in hybrid_calibration.csv. The table gives
    338 TFLOP/s and 1,297 tokens/s for one FP8 variant, only 330 TFLOP/s for the other. The
    generic 6N + 6·L·d·s takes attention d_model wide (10.7 GFLOP/token) where MLA's 128 heads
    × (192 + 128) make 30.7, and read 330 TFLOP/s as 1,432 tokens/s — faster than its sibling
    at fewer FLOP/s. Counted from the preset (causal, with the MTP layer, as the table counts),
    338 TFLOP/s is the stated 1,297 tokens/s (±0.1 %) and 330 is 1,266."""
    from fsdpsim.measured.published.moe import preset_flops_per_token

    per_token = preset_flops_per_token("deepseek-v3", None, 4096)
    assert 338e12 / per_token == pytest.approx(1297, rel=1e-3)
    without_mtp = preset_flops_per_token("deepseek-v3", 0, 4096)
    assert per_token / without_mtp == pytest.approx(1.041, abs=0.003)  # the row's stated/implied
    full = preset_flops_per_token("deepseek-v3", None, 4096, causal=False)
    # the full square doubles the causal scores: 30.7 GFLOP/token more over 61 layers, and the
    # MTP block's share
    assert full - per_token == pytest.approx(30.70e9 * 62 / 61, rel=0.01)
    row = _row(id="ds", model="DeepSeekV3 (dropless)", n_layers=61, d_model=7168, n_heads=128,
               n_kv_heads=float("nan"), ffn_size=2048, vocab=129280, seq_len=4096, n_gpus=1024,
               tp=2, pp=8, vpp=4, ep=64, moe_experts=256, moe_topk=8, n_params=671025397760,
               moe_active_params=36624596992, framework="NeMo Megatron-Bridge 25.09 container",
               precision="fp8", tokens_per_s_per_gpu=float("nan"), tflops_per_gpu=330.0,
               tflops_counts_recompute="no (model TFLOP/s; causal attention)")
    r = from_published(pd.DataFrame([row]), CATALOG).iloc[0]
    assert r["tokens_per_s_per_gpu"] == pytest.approx(1266, rel=1e-3)
    assert r["measured_from"].startswith("tflops_per_gpu (deepseek-v3 model FLOPs")


def _row(**over):
    row = {"id": "r1", "source_key": "some_lab", "model": "Llama-3-8B", "n_layers": 32,
           "d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "ffn_size": 14336, "vocab": 128256,
           "seq_len": 8192, "gpu": "H100 80GB", "n_gpus": 64, "gpus_per_node": 8,
           "inter_node_interconnect": "8x 400 Gb/s NDR InfiniBand per node",
           "framework": "torchtitan (FSDP2)", "tp": 1, "pp": 1, "cp": 1, "sharding": "FSDP2",
           "micro_batch": 1, "grad_accum": 1, "activation_checkpointing": "selective",
           "precision": "bf16", "tokens_per_s_per_gpu": 6000.0, "notes": "2024 run"}
    row.update(over)
    return row


def test_rows_of_any_source_are_read_by_what_they_say():
    frame = from_published(pd.DataFrame([
        _row(),
        _row(id="tp", tp=8),
        _row(id="gpu", gpu="Z9000"),
        _row(id="nomb", micro_batch=float("nan"), grad_accum=float("nan")),
        _row(id="nomeas", tokens_per_s_per_gpu=float("nan")),
        _row(id="nogpus", n_gpus=float("nan")),
        _row(id="noarch", d_model=float("nan"), seq_len="?"),
    ]), CATALOG).set_index("id")
    r = frame.loc["r1"]
    assert (r["skip"], r["gpu"], r["network"], r["inter_node_gbps_per_gpu"]) == \
        ("", "h100-sxm5-80gb", "ib-ndr-400", 400.0)
    # torchtitan's "selective" is its op-level policy (selective_ac_option = "op")
    assert (r["sharding"], r["recompute"], r["precision"], r["reduce_dtype"], r["arch"]) == \
        ("full", "op-selective", "bf16", "fp32", "llama")
    assert r["flash_attention"] and not r["fused_loss"]
    assert (r["tp"], r["pp"], r["cp"], r["vpp"]) == (1, 1, 1, 1)
    tp = frame.loc["tp"]  # tensor parallel: modelled; torchtitan's TP plan is sequence-parallel
    assert (tp["skip"], tp["tp"], tp["sequence_parallel"]) == ("", 8, True)
    assert frame.loc["gpu", "skip"] == "GPU 'Z9000' is not in the catalog"
    assert frame.loc["nomb", "skip"] == "" and pd.isna(frame.loc["nomb", "micro_batch"])
    assert frame.loc["nomeas", "skip"].startswith("no measurement")
    assert frame.loc["nogpus", "skip"] == "n_gpus not stated as whole numbers"
    assert frame.loc["noarch", "skip"] == "seq_len, d_model not stated as whole numbers"


def test_unstated_knobs_get_what_predict_would_choose():
    """Published runs rarely state micro-batch and recompute; they are resolved as predict's
    auto would resolve them (within the stated global batch), and marked."""
    from fsdpsim.measured.auto_knobs import resolve_auto_knobs
    from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
    from fsdpsim.drivers.predict import predict
    from fsdpsim.model.presets import get_model
    from fsdpsim.hardware.system import resolve_system

    frame = resolve_auto_knobs(from_published(pd.DataFrame([
        _row(id="a", micro_batch=float("nan"), grad_accum=float("nan"), global_batch_seqs=128,
             activation_checkpointing=float("nan"))]), CATALOG), CATALOG)
    row = frame.iloc[0]
    assert row["knobs"] == (f"auto: micro_batch {int(row['micro_batch'])}, recompute "
                            f"{row['recompute']}")
    assert row["micro_batch"] * row["grad_accum"] * 64 == 128
    system = resolve_system(CATALOG, gpu="h100", network="ib-ndr-400",
                            inter_node_gbps_per_gpu=400.0)
    chosen = predict(get_model("llama3-8b"), system, ParallelPlan(64, 8),
                     TrainingConfig(seq_len=8192, global_batch=128)).training
    assert (row["micro_batch"], row["recompute"]) == (chosen["micro_batch"], chosen["recompute"])


def test_a_published_layout_file_validates_end_to_end(tmp_path, capsys):
    path = tmp_path / "runs.csv"
    pd.DataFrame([_row(), _row(id="r2", n_gpus=8, tokens_per_s_per_gpu=7000.0),
                  _row(id="tp", tp=2), _row(id="gpu", gpu="Z9000")]).to_csv(path, index=False)
    frame = load_measurements(path, CATALOG)
    result = predict_measurements(frame, CATALOG)
    assert len(result) == 3 and result["predicted_tokens_per_s_per_gpu"].gt(0).all()
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "skipped 1 of 4 rows:" in out and "GPU 'Z9000' is not in the catalog" in out
    assert "tokens/s per GPU: 3 rows" in out


def test_a_framework_text_fsdpsim_does_not_read_is_said_on_stderr(tmp_path, capsys):
    """A misspelt or foreign framework is modelled with the default profile (fsdp2): validate
    names each such text and its row count on stderr, the row's modelled_as says it, and a text
    that names PyTorch FSDP or a known framework is not mentioned."""
    path = tmp_path / "runs.csv"
    pd.DataFrame([_row(), _row(id="typo", framework="nanotrn v0.5 (PyTorch)"),
                  _row(id="typo2", framework="nanotrn v0.5 (PyTorch)"),
                  _row(id="jax", framework="MaxText (JAX)"),
                  _row(id="fsdp", framework="PyTorch FSDP2")]).to_csv(path, index=False)
    frame = load_measurements(path, CATALOG).set_index("id")
    assert "'MaxText (JAX)' unrecognised: the fsdp2 profile" in frame.loc["jax", "modelled_as"]
    assert "unrecognised" not in frame.loc["fsdp", "modelled_as"] + frame.loc["r1", "modelled_as"]
    assert main(["validate", str(path), "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("fsdpsim: note: ")
    assert "'nanotrn v0.5 (PyTorch)' (2 rows); 'MaxText (JAX)' (1 row)" in captured.err
    assert "FSDP2'" not in captured.err and "torchtitan (FSDP2)'" not in captured.err
    assert captured.out.startswith("id,")
    assert main(["validate", str(VALIDATION_CSV)]) == 0  # every text known: no note
    assert capsys.readouterr().err == ""


def test_vtrain_rows():
    raw = pd.DataFrame({"# GPUs": [8, 8], "global batch": [32, 32], "micro batch": [4, 4],
                        "hidden size": [1024, 1024], "attention heads": [16, 16],
                        "# layers": [24, 24], "sequence length": [1024, 1024],
                        "tensor parallelism": [1, 2], "data parallelism": [8, 4],
                        "pipeline parallelism": [1, 1], "iteration time (ms)": [500.0, 500.0]})
    frame = from_vtrain(raw)
    assert list(frame["skip"]) == ["", ""]
    assert list(frame["tp"]) == [1, 2] and list(frame["pp_schedule"]) == ["1f1b"] * 2
    # Megatron pads the vocabulary to a multiple of 128 x tp for the TP-split embedding
    assert list(frame["vocab"]) == [50257, 50432]
    first = frame.iloc[0]
    assert first["tokens_per_s_per_gpu"] == pytest.approx(32 * 1024 / 0.5 / 8)
    assert (first["grad_accum"], first["sharding"], first["recompute"]) == (1, "none", "full")
    assert predict_measurements(frame, CATALOG)["error"].notna().all()


@pytest.mark.parametrize("column", ["n_gpus", "gpus_per_node", "seq_len", "n_layers", "d_model",
                                    "n_kv_heads", "ffn_size", "dp", "micro_batch",
                                    "global_batch_seqs", "step_time_s", "tflops_per_gpu"])
@pytest.mark.parametrize("value", ["abc", "-1", "0", "", "1e400", "2.5"])
def test_garbage_cells_never_raise(tmp_path, capsys, column, value):
    """A published-layout row with an unusable cell is skipped with a reason or modelled from
    its other columns; validate never shows a traceback."""
    path = tmp_path / "runs.csv"
    row = _row(tokens_per_s_per_gpu=float("nan"), step_time_s=2.0, global_batch_seqs=128,
               tflops_per_gpu=300.0, dp=64, tflops_counts_recompute="no", n_params=8.0e9)
    pd.DataFrame([{**row, column: value}, _row(id="ok")]).to_csv(path, index=False)
    assert main(["validate", str(path)]) in (0, 2)
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("column", ["# GPUs", "micro batch", "global batch", "hidden size",
                                    "data parallelism", "iteration time (ms)"])
@pytest.mark.parametrize("value", ["abc", "0", "", "1e400", "2.5"])
def test_vtrain_garbage_cells_are_skipped_with_a_reason(column, value):
    raw = pd.DataFrame({"# GPUs": [8], "global batch": [32], "micro batch": [4],
                        "hidden size": [1024], "attention heads": [16], "# layers": [24],
                        "sequence length": [1024], "tensor parallelism": [1],
                        "data parallelism": [8], "pipeline parallelism": [1],
                        "iteration time (ms)": [500.0]}).astype(object)
    raw.loc[0, column] = value
    row = from_vtrain(raw).iloc[0]
    if column == "iteration time (ms)" and value == "2.5":
        assert row["skip"] == ""  # 2.5 ms is a time
    else:
        assert row["skip"] in (f"{column} not stated as whole numbers", "no iteration time")


def test_selective_means_what_the_framework_runs():
    """A row's "selective" checkpointing is torchtitan's op-level policy under torchtitan and
    the attention core elsewhere (Megatron); said outright, op-selective is read anywhere."""
    frame = from_published(pd.DataFrame([
        _row(id="titan"),
        _row(id="mega", framework="Megatron-LM"),
        _row(id="op", framework="Megatron-LM", activation_checkpointing="selective (op)"),
    ]), CATALOG).set_index("id")
    assert frame["recompute"].to_dict() == {"titan": "op-selective", "mega": "selective",
                                            "op": "op-selective"}
