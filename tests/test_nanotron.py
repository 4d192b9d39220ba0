"""The nanotron profile, the measured-bus-bandwidth knobs and the nanotron H100 BF16 runs.

Collective bytes of the ``nanotron`` profile are checked against numbers worked by hand for one
small plan; ``validate`` and ``predict --busbw-*-gbs`` must give the same prediction for the
first rows of ``hopper_bf16_nanotron.csv``; bad bus bandwidths are one line and exit 2; the
file's error is asserted at the level it reaches today.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.measured.rows import spec_for_row
from fsdpsim.measured.validate import load_measurements, predict_measurements
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.drivers.predict import predict
from fsdpsim.hardware.system import BUSBW_COLUMNS, resolve_system

from conftest import VALIDATION_DATA, assert_one_line_error, invoke, run

CATALOG = load_catalog(use_env=False)
NANOTRON = VALIDATION_DATA / "hopper_bf16_nanotron.csv"

#: A small Llama: 2 layers, d 256, 4 heads, FFN 512, vocab 1,024, tied embeddings.
SMALL = ModelSpec(name="small-llama", n_layers=2, d_model=256, n_heads=4, n_kv_heads=4,
                  ffn_size=512, ffn_kind="swiglu", vocab_size=1024, tied_embeddings=True,
                  position="rotary", max_seq_len=512, norm="rmsnorm", norm_bias=False,
                  qkv_bias=False, attn_out_bias=False, mlp_bias=False)
#: Its parameters by hand: per layer q, k, v, o (4 · 256²) + gate, up, down (3 · 256 · 512)
#: + two RMSNorm weights (2 · 256); the tied embedding 1,024 · 256; the final norm 256.
SMALL_PARAMS = 2 * (4 * 256**2 + 3 * 256 * 512 + 2 * 256) + 1024 * 256 + 256


def _small(sharding: str, framework: str = "nanotron", tp: int = 1):
    system = resolve_system(CATALOG, gpu="h100-sxm5-80gb", gpus_per_node=8)
    plan = ParallelPlan(num_gpus=8, gpus_per_node=8, sharding=sharding, tp=tp,
                        framework=framework)
    training = TrainingConfig(micro_batch=1, recompute="none", seq_len=512, global_batch=8 // tp)
    return predict(SMALL, system, plan, training)


def test_small_model_parameters_by_hand():
    assert SMALL.n_params == SMALL_PARAMS == 1_574_144


def test_nanotron_zero0_all_reduces_the_fp32_gradients():
    """ZeRO-0: one all-reduce of the fp32 accumulation buffers (4 bytes per parameter) per
    step (``get_fp32_accum_hook``, ``reduce_scatter=False``); nothing gathered."""
    v = _small("none").values
    assert v["all_reduce_bytes"] == pytest.approx(4 * SMALL_PARAMS)
    assert v["all_gather_bytes"] == 0 and v["reduce_scatter_bytes"] == 0


def test_nanotron_zero1_reduce_scatters_fp32_and_gathers_bf16():
    """ZeRO-1: the fp32 buffers reduce-scattered (4 bytes per parameter), the bf16 parameters
    all-gathered after the step (2 bytes per parameter); with TP 2 each rank holds half of
    every linear and of the embedding, the norms whole."""
    v = _small("optimizer").values
    assert v["reduce_scatter_bytes"] == pytest.approx(4 * SMALL_PARAMS)
    assert v["all_gather_bytes"] == pytest.approx(2 * SMALL_PARAMS)
    assert v["all_reduce_bytes"] == 0
    per_rank = (2 * (4 * 256**2 + 3 * 256 * 512) + 1024 * 256) // 2 + 2 * 2 * 256 + 256
    assert _small("optimizer", tp=2).values["all_gather_bytes"] == pytest.approx(2 * per_rank)


def test_nanotron_zero1_gather_is_not_hidden():
    """Megatron-Core overlaps ZeRO-1's parameter gather with the next forward; nanotron's
    ``_all_gather_params`` runs after the step and is waited for: its step is longer by at
    least that gather, with the same bytes."""
    nano, mega = _small("optimizer"), _small("optimizer", framework="megatron")
    assert nano.values["all_gather_bytes"] == mega.values["all_gather_bytes"]
    assert nano.values["step_time_s"] > mega.values["step_time_s"]


def test_nanotron_attention_is_flash_attention_2():
    """nanotron calls flash-attn 2, not Transformer Engine's fused kernel: its attention runs
    at the catalog's ``attention_fraction``, Megatron's at ``fused_attention_fraction``."""
    nano, mega = _small("optimizer"), _small("optimizer", framework="megatron")
    assert nano.inputs["fused_attention"] == 0.0 and mega.inputs["fused_attention"] == 1.0
    assert nano.values["attention_s"] > mega.values["attention_s"]


def _row_args(row: pd.Series, config: str) -> list[str]:
    """``predict`` options that state what one nanotron row states."""
    args = ["predict", "--model", config, "--gpu", "h100-sxm5-80gb",
            "--num-gpus", str(int(row["n_gpus"])), "--gpus-per-node", "8",
            "--tp", str(int(row["tp"])), "--pp", str(int(row["pp"])),
            "--sharding", str(row["sharding"]), "--framework", "nanotron",
            "--micro-batch", str(int(row["micro_batch"])),
            "--global-batch", str(int(row["global_batch_seqs"])),
            "--seq-len", str(int(row["seq_len"])), "--recompute", "none",
            "--precision", "bf16", "--reduce-dtype", "fp32", "--format", "json"]
    for column in BUSBW_COLUMNS:
        args += ["--" + column.replace("_", "-"), str(row[column])]
    return args


def _config(row: pd.Series, path) -> str:
    spec = spec_for_row(row)
    path.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": spec.d_model, "intermediate_size": spec.ffn_size,
        "num_hidden_layers": spec.n_layers, "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.kv_heads, "vocab_size": spec.vocab_size,
        "tie_word_embeddings": bool(row["tie_word_embeddings"]),
        "max_position_embeddings": int(row["seq_len"]), "hidden_act": "silu"}))
    return str(path)


def test_validate_and_predict_read_the_bus_bandwidths_alike(tmp_path):
    """The first rows of the nanotron file (single- and multi-node): ``validate``'s prediction
    equals ``predict``'s with the row's ``busbw_*`` columns given as ``--busbw-*-gbs``; and
    the pinned bandwidths change the prediction of the multi-node ones."""
    raw = pd.read_csv(NANOTRON)
    rows = pd.concat([raw.head(3), raw[raw["n_gpus"] > 8].head(2)])
    rows.to_csv(tmp_path / "rows.csv", index=False)
    frame = load_measurements(tmp_path / "rows.csv", CATALOG)
    assert (frame["skip"] == "").all() and (frame["recipe"] == "nanotron").all()
    got = predict_measurements(frame, CATALOG).set_index("id")
    for i, (_, row) in enumerate(rows.iterrows()):
        args = _row_args(row, _config(row, tmp_path / f"config{i}.json"))
        value = json.loads(invoke(*args))["tokens_per_s_per_gpu"]
        assert value == pytest.approx(got.at[row["id"], "predicted_tokens_per_s_per_gpu"],
                                      rel=1e-9)
        if row["n_gpus"] > 8:
            unpinned = json.loads(invoke(*args[:-2 * len(BUSBW_COLUMNS)]))
            assert unpinned["tokens_per_s_per_gpu"] != pytest.approx(value, rel=1e-3)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "fast", "1e9"])
def test_bad_bus_bandwidth_is_one_line_and_exit_2(capsys, value):
    rc, out, err = run(capsys, "predict", "--gpu", "h100", "--num-gpus", "16",
                       "--busbw-allgather-inter-gbs", value)
    assert "--busbw-allgather-inter-gbs" in assert_one_line_error(rc, out, err)


def test_bad_bus_bandwidth_column_skips_the_row(tmp_path):
    """A published row whose ``busbw_*`` cell is not a usable bandwidth is skipped with the
    reason, not predicted on a wrong number."""
    raw = pd.read_csv(NANOTRON).head(2)
    raw.loc[0, "busbw_allreduce_intra_gbs"] = -3
    path = tmp_path / "bad.csv"
    raw.to_csv(path, index=False)
    frame = load_measurements(path, CATALOG)
    assert "busbw_allreduce_intra_gbs" in frame.loc[0, "skip"]
    assert frame.loc[1, "skip"] == ""


def doubtful(raw: pd.DataFrame) -> pd.Series:
    """Rows kept out of the second error figure, by two rules (docs/accuracy.md, nanotron):
    near out of memory (``mem_reserved_gb`` >= 70 of 80 GB: the caching allocator frees and
    retries), and throughput inconsistent with the same layout at a larger micro-batch m' > m
    (a micro-batch's time cannot fall when it grows, so tokens/s(m') <= m'/m x tokens/s(m);
    flagged beyond 2.5x that bound: a hiccup of the one logged iteration)."""
    key = ["model", "tp", "pp", "dp", "sharding"]
    best = raw.groupby(key + ["micro_batch"])["tokens_per_s_per_gpu"].max()
    flagged = []
    for _, row in raw.iterrows():
        same = best.xs(tuple(row[k] for k in key), level=key)
        larger = same[same.index > row["micro_batch"]]
        flagged.append(bool((larger > 2.5 * larger.index / row["micro_batch"]
                             * row["tokens_per_s_per_gpu"]).any()))
    return (raw["mem_reserved_gb"] >= 70) | pd.Series(flagged, index=raw.index)


@pytest.mark.slow
def test_nanotron_file_error_floor():
    """Every row of the nanotron file (uneven pipeline splits included), and those less the
    doubtful rows; the floors
    are what the model reaches today (the goal is 15 %; docs/accuracy.md says what is
    missing: chiefly TP with a pipeline that spans nodes)."""
    raw = pd.read_csv(NANOTRON)
    frame = load_measurements(NANOTRON, CATALOG)
    result = predict_measurements(frame, CATALOG)
    assert len(result) == 1274  # no row refused for its plan
    ape = result.set_index("id")["error"].abs()
    kept = ape.drop(raw.loc[doubtful(raw), "id"], errors="ignore")
    assert len(kept) == 1239
    assert ape.mean() <= 1.35, ape.mean()
    assert kept.mean() <= 0.95, kept.mean()
    # single-node rows, where no inter-node effect enters
    single = result[result["n_gpus"] == 8]["error"].abs()
    assert single.mean() <= 0.15, single.mean()


def test_nanotron_fp32_accumulation_pass(monkeypatch):
    """After every micro-batch's backward nanotron adds each bf16 gradient into its fp32
    buffer (``FP32GradientAccumulator._accumulate_grad``): 10 bytes per parameter (read 2 and
    4, write 4) at the achievable HBM bandwidth, k times a step. Without that pass (the same
    profile with ``grad_accum_pass_bytes`` 0) the step is shorter by exactly that."""
    from dataclasses import replace

    from fsdpsim.plan import frameworks

    system = resolve_system(CATALOG, gpu="h100-sxm5-80gb", gpus_per_node=8)
    plan = ParallelPlan(num_gpus=8, gpus_per_node=8, sharding="none", framework="nanotron")
    training = TrainingConfig(micro_batch=1, recompute="none", seq_len=512, global_batch=32)
    with_pass = predict(SMALL, system, plan, training)
    monkeypatch.setitem(frameworks.PROFILES, "nanotron",
                        replace(frameworks.PROFILES["nanotron"], grad_accum_pass_bytes=0.0))
    without = predict(SMALL, system, plan, training)
    hbm = with_pass.inputs["hbm_bytes_per_s"] * with_pass.inputs["hbm_fraction"]
    expected_s = 4 * 10 * SMALL_PARAMS / hbm  # 4 micro-batches of one sequence on 8 ranks
    assert with_pass.values["step_time_s"] - without.values["step_time_s"] == pytest.approx(
        expected_s, rel=1e-6)


@pytest.mark.parametrize("numel, bucket_bytes, calls", [
    (1_000, 25 * 2**20, 1),            # a unit below the cap: one bucket
    (13_107_200, 25 * 2**20, 1),       # exactly 25 MiB of bf16 gradients: one bucket
    (13_107_199, 25 * 2**20, 1),       # 2 bytes short of the cap: still one call
    (26_214_400, 25 * 2**20, 2),       # 50 MiB: two buckets
    (67_112_960, 25 * 2**20, 5),       # a 1.34B Llama block (d 2,048, FFN 8,192): 128 MiB
    (67_112_960, 0.0, 1),              # no buckets: one call per unit
])
def test_ddp_bucket_calls_by_hand(numel, bucket_bytes, calls):
    """DDP closes a bucket once it holds at least the cap (torch reducer.cpp): a unit of B
    bytes of bf16 gradients is at most floor(B / 25 MiB) buckets, at least one; scalar and
    array inputs agree."""
    from fsdpsim.engine.collectives import bucket_calls

    assert float(bucket_calls(numel, 2.0, bucket_bytes)) == calls
    many = bucket_calls(np.full(3, float(numel)), 2.0, np.full(3, float(bucket_bytes)))
    assert np.array_equal(many, np.full(3, float(calls)))


#: A Llama of the file's smallest width (d 2,048, FFN 8,192, 2 layers): a block's bf16
#: gradients are 128 MiB, five 25 MiB buckets.
WIDE = ModelSpec(name="wide-llama", n_layers=2, d_model=2048, n_heads=16, n_kv_heads=16,
                 ffn_size=8192, ffn_kind="swiglu", vocab_size=32768, tied_embeddings=True,
                 position="rotary", max_seq_len=1024, norm="rmsnorm", norm_bias=False,
                 qkv_bias=False, attn_out_bias=False, mlp_bias=False)


def _wide(sharding: str, monkeypatch=None, **profile):
    """WIDE on 32 H100 (4 nodes), micro-batch 1, one micro-batch a step; ``profile``
    overrides fields of the nanotron profile."""
    from dataclasses import replace

    from fsdpsim.plan import frameworks

    if profile:
        monkeypatch.setitem(frameworks.PROFILES, "nanotron",
                            replace(frameworks.PROFILES["nanotron"], **profile))
    system = resolve_system(CATALOG, gpu="h100-sxm5-80gb", gpus_per_node=8)
    plan = ParallelPlan(num_gpus=32, gpus_per_node=8, sharding=sharding, framework="nanotron")
    training = TrainingConfig(micro_batch=1, recompute="none", seq_len=1024, global_batch=32,
                              precision="bf16", reduce_dtype="fp32")
    return predict(WIDE, system, plan, training).values


@pytest.mark.parametrize("sharding, key", [("none", "all_reduce_s"),
                                           ("optimizer", "reduce_scatter_s")])
def test_nanotron_reduces_gradients_per_bucket(monkeypatch, sharding, key):
    """One gradient collective per 25 MiB DDP bucket: the same bytes in more calls take longer
    (each pays NCCL's latency, at the bus bandwidth of its smaller message); a cap above every
    unit gives back one call per unit exactly, and a smaller cap takes longer still."""
    default = _wide(sharding)[key]
    one_call = _wide(sharding, monkeypatch, grad_bucket_bytes=0.0)[key]
    huge_cap = _wide(sharding, monkeypatch, grad_bucket_bytes=2.0**40)[key]
    small_cap = _wide(sharding, monkeypatch, grad_bucket_bytes=5 * 2**20)[key]
    assert huge_cap == pytest.approx(one_call, rel=1e-12)
    assert one_call < default < small_cap


def test_nanotron_zero1_reduce_scatter_is_not_hidden(monkeypatch):
    """nanotron's ZeRO-1 bucket reduce-scatters run between the backward's kernels (the
    hook's ``update_output`` callback waits for them on a stream that, with one hardware
    queue, every later kernel queues behind): with TP 1 and PP 1 every second of gradient
    reduce-scatter and parameter all-gather shows in the step. ZeRO-0's bucket all-reduces
    (no callback) still hide behind the backward, and so do ZeRO-1's where the profile lets
    them overlap."""
    zero1 = _wide("optimizer")
    exposed = zero1["reduce_scatter_s"] + zero1["all_gather_s"]
    assert zero1["exposed_comm_s"] == pytest.approx(exposed, rel=1e-9)
    overlapped = _wide("optimizer", monkeypatch, zero1_reduce_overlap=True)
    assert overlapped["exposed_comm_s"] < exposed
    zero0 = _wide("none")
    assert zero0["exposed_comm_s"] < zero0["all_reduce_s"]


def test_nanotron_pure_data_parallel_zero1_rows(tmp_path):
    """The file's pure data-parallel ZeRO-1 rows (TP 1, PP 1; 8 to 256 GPUs): with the bucket
    reduce-scatters not hidden, the median error per GPU count stays within 20 % (with them
    hidden it was +43 % on 128 GPUs and +95 % on 256, docs/accuracy.md)."""
    raw = pd.read_csv(NANOTRON)
    rows = raw[(raw["tp"] == 1) & (raw["pp"] == 1) & (raw["sharding"] == "optimizer")]
    rows.to_csv(tmp_path / "rows.csv", index=False)
    frame = load_measurements(tmp_path / "rows.csv", CATALOG)
    result = predict_measurements(frame, CATALOG)
    by_gpus = result.groupby("n_gpus")["error"].median()
    assert set(by_gpus.index) == {8, 16, 32, 64, 128, 256}
    assert by_gpus.abs().max() <= 0.20, by_gpus


def _per_layer_slot_ms(raw: pd.DataFrame) -> pd.Series:
    """Measured time per layer and 1F1B slot: the step (global tokens over the job's tokens/s)
    over the (m + pp - 1) slots of a 1F1B stage (Narayanan et al. 2021, §2.2.1) and the
    layers of one stage (L / pp)."""
    step_s = raw["global_batch_tokens"] / (raw["tokens_per_s_per_gpu"] * raw["n_gpus"])
    slots = raw["grad_accum"] + raw["pp"] - 1
    return 1e3 * step_s / (slots * raw["n_layers"] / raw["pp"])


def test_nanotron_cross_node_pipeline_floor_is_per_layer_and_flat():
    """The measured shape of what the model misses (docs/accuracy.md, nanotron): with TP 8 and a
    pipeline across nodes a layer and 1F1B slot takes ~25 ms whatever the micro-batch (1 to 8
    sequences: flat, where the work grows 8x), the width (d 2,048 to 8,192) and the layers
    per stage (the time is per layer: slot time over layers per stage is the same at 8 and at
    40 layers per stage); without a pipeline the same TP 8 on as many nodes takes ~5 ms."""
    raw = pd.read_csv(NANOTRON)
    raw = raw[~doubtful(raw)].assign(ms=_per_layer_slot_ms)
    tp8 = raw[raw["tp"] == 8]
    across = tp8[(tp8["pp"] > 1) & (tp8["n_gpus"] > 8) & (tp8["micro_batch"] <= 8)]
    no_pp = tp8[(tp8["pp"] == 1) & (tp8["n_gpus"] > 8) & (tp8["micro_batch"] <= 2)]
    assert 20 <= across["ms"].median() <= 32, across["ms"].median()
    assert no_pp["ms"].median() <= 8, no_pp["ms"].median()
    small = across[across["model"] == "nanotron-Llama 1.34B"].groupby("micro_batch")["ms"]
    assert 0.8 <= small.median()[8] / small.median()[1] <= 1.25
    wide = across[across["d_model"] == 8192]
    assert 20 <= wide["ms"].median() <= 32, wide["ms"].median()
    per_stage = across.groupby(across["n_layers"] / across["pp"])["ms"].median()
    assert 0.8 <= per_stage[40] / per_stage[8] <= 1.25


def test_nanotron_cross_node_pipeline_floor_grows_with_tp_not_dp():
    """The same floor across TP degrees (docs/accuracy.md, nanotron): at micro-batch 1 with a
    pipeline across nodes a layer and 1F1B slot takes ~11, ~16 and ~26 ms at TP 2, 4 and 8,
    about (tp + 2.3) x 2.5 ms, whatever the data-parallel degree (1 to 16); the same TP
    degrees with a pipeline inside one node take ~5-6 ms, and so do they without a pipeline
    on as many nodes."""
    raw = pd.read_csv(NANOTRON)
    raw = raw[~doubtful(raw) & (raw["micro_batch"] == 1)].assign(ms=_per_layer_slot_ms)
    across = raw[(raw["pp"] > 1) & (raw["n_gpus"] > 8)]
    floor = across.groupby("tp")["ms"].median()
    assert 9 <= floor[2] <= 13 and 14 <= floor[4] <= 19 and 22 <= floor[8] <= 30, floor
    per_rank_ms = (floor[8] - floor[4]) / 4, (floor[4] - floor[2]) / 2
    assert all(2.0 <= step <= 3.2 for step in per_rank_ms), per_rank_ms
    by_dp = across[across["tp"].isin([2, 4, 8]) & (across["dp"] <= 16)]
    by_dp = by_dp.groupby(["tp", "dp"])["ms"].median().unstack("dp")
    assert (by_dp.max(axis=1) / by_dp.min(axis=1)).max() <= 1.25, by_dp
    inside = raw[(raw["pp"] > 1) & (raw["n_gpus"] == 8) & (raw["tp"] >= 2)]
    no_pp = raw[(raw["pp"] == 1) & (raw["n_gpus"] > 8) & raw["tp"].isin([2, 4, 8])]
    assert inside["ms"].median() <= 7 and no_pp["ms"].median() <= 7


@pytest.mark.parametrize("framework, tp, pp, gpus, warned", [
    ("nanotron", 4, 4, 32, True), ("nanotron", 8, 2, 16, True),
    ("nanotron", 4, 2, 8, False),   # the pipeline inside one node
    ("nanotron", 1, 4, 32, False),  # no TP
    ("nanotron", 8, 1, 32, False),  # no pipeline
    ("megatron", 4, 4, 32, False),  # another framework
])
def test_predict_warns_of_nanotrons_tp_pipeline_gap(framework, tp, pp, gpus, warned):
    """predict names the gap the floor tests above measure, where its shape holds and only
    there; the prediction itself is the model's (the warning changes no number)."""
    from fsdpsim.model.presets import get_model
    from fsdpsim.plan.known_gaps import NANOTRON_TP_PIPELINE

    spec = get_model("llama3-8b")
    plan = ParallelPlan(num_gpus=gpus, gpus_per_node=8, sharding="optimizer", tp=tp, pp=pp,
                        framework=framework)
    system = resolve_system(load_catalog(use_env=False), gpu="h100")
    result = predict(spec, system, plan, TrainingConfig(seq_len=4096, micro_batch=1,
                                                        global_batch=64 * gpus // (tp * pp)))
    assert (NANOTRON_TP_PIPELINE in result.notes) == warned
