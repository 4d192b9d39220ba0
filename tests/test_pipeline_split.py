"""Uneven pipeline splits (:mod:`fsdpsim.plan.pipeline_split`), their timing and memory, the
``--pp-layers`` override, expert tensor parallelism's default, and the calibration files'
plans all accepted."""

from __future__ import annotations

import glob
import json

import pytest

from conftest import assert_one_line_error, invoke, run
from fsdpsim.util.errors import ConfigError
from fsdpsim.model.spec import ModelSpec
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.plan.pipeline_split import default_split, describe, megatron_split, torchtitan_split
from fsdpsim.drivers.predict import predict
from fsdpsim.hardware.system import domain_gpus, resolve_system


# -- the rules --------------------------------------------------------------------------------
def test_megatron_accounts_for_embedding_and_loss_126_layers_over_16_stages():
    """Hand-worked (Megatron-Core get_num_layers_to_build): (126 + 1 + 1) / 16 = 8 per stage;
    the first stage builds 8 − 1 = 7 (the embedding counts as a layer), the last 7 (the loss),
    the 14 middle ones 8: 7 + 14·8 + 7 = 126."""
    split = megatron_split(126, 16, 1)
    assert split.counts == (7,) + (8,) * 14 + (7,)
    assert "--account-for-embedding-in-pipeline-split" in split.rule
    assert "--account-for-loss-in-pipeline-split" in split.rule
    plan = ParallelPlan(num_gpus=16, gpus_per_node=8, pp=16, framework="megatron")
    assert plan.stage_layers(126) == (7, 8, 7)
    # 126 over 8 with 8 chunks per rank: 128 / 8 = 16 per rank, 2 per chunk; the first chunk
    # of rank 0 and the last chunk of rank 7 hold 1
    assert megatron_split(126, 8, 8).counts == (15,) + (16,) * 6 + (15,)
    assert megatron_split(70, 12, 1).counts == (5,) + (6,) * 10 + (5,)  # BLOOM: 72 / 12


def test_megatron_end_stage_counts_where_no_account_flag_divides():
    """28 over 8: neither 30, 29 nor 29 divides by 8; the middle ranks hold 4, the ends 2 each
    (each end with its embedding or loss as one layer: 3 <= 4), the lightest busiest rank."""
    split = megatron_split(28, 8, 1)
    assert split.counts == (2,) + (4,) * 6 + (2,)
    assert "--decoder-first-pipeline-num-layers 2" in split.rule


def test_torchtitan_split_weighs_embedding_and_head_as_one_layer_each():
    """torchtitan generate_llm_fqn_per_model_part(8, 28): 30 effective layers over 8 stages,
    3 each and the first 30 mod 8 = 6 stages one more; the first gives one to the embedding,
    the last one to the head: 3, 4, 4, 4, 4, 4, 3, 2."""
    assert torchtitan_split(28, 8, 1).counts == (3, 4, 4, 4, 4, 4, 3, 2)
    assert torchtitan_split(126, 4, 1).counts == (31, 32, 32, 31)
    # 30 effective layers over 32 stages: torchtitan refuses, and so does fsdpsim, naming what
    # is accepted; nanotron's placement leaves the trailing stages empty
    with pytest.raises(ConfigError, match=r"32 virtual stages.*accepted: pp x vpp <= 30"):
        torchtitan_split(28, 32, 1)
    with pytest.raises(ConfigError, match="accepted: pp x vpp <= 128"):
        default_split(126, 64, 16, "fsdp2")
    split = torchtitan_split(28, 32, 1, empty_stages=True)
    assert split.counts == (0,) + (1,) * 28 + (0, 0, 0) and "empty" in split.rule
    assert default_split(28, 32, 1, "nanotron").counts == split.counts
    # the chunks torchtitan's emitter lists: its own virtual stages, every layer once
    chunks = default_split(80, 4, 8, "fsdp2").chunks(8)
    assert len(chunks) == 32 and sum(chunks) == 80 and chunks[0] == 2
    # virtual stages: 30 + 2 = 32 over 8 virtual stages of 4, rank r holds r and r + 4
    assert torchtitan_split(30, 4, 2).counts == (3 + 4, 4 + 4, 4 + 4, 4 + 3)


@pytest.mark.parametrize("n_layers, pp, vpp", [(32, 4, 1), (32, 4, 2), (80, 8, 1)])
@pytest.mark.parametrize("framework", ["fsdp2", "megatron"])
def test_even_splits_stay_even(n_layers, pp, vpp, framework):
    split = default_split(n_layers, pp, vpp, framework)
    assert split.counts == (n_layers // pp,) * pp and split.rule == "even"


@pytest.mark.parametrize("n_layers", [28, 61, 70, 80, 126])
@pytest.mark.parametrize("pp", [2, 3, 8, 12, 16, 32])
@pytest.mark.parametrize("framework", ["fsdp2", "megatron", "nanotron"])
def test_every_default_split_places_every_layer(n_layers, pp, framework):
    if pp > n_layers + 2 and framework != "nanotron":  # more stages than torchtitan splits
        with pytest.raises(ConfigError, match="accepted: pp x vpp <="):
            default_split(n_layers, pp, 1, framework)
        return
    counts = default_split(n_layers, pp, 1, framework).counts
    assert len(counts) == pp and sum(counts) == n_layers and min(counts) >= 0


def test_describe_folds_runs():
    assert describe((7,) + (8,) * 14 + (7,)) == "7, 8 x14, 7"


# -- timing and memory ------------------------------------------------------------------------
def _spec(n_layers=32):
    """A Llama-style model with a 256-token vocabulary: its embedding and head are tiny next to
    a layer, so the end stages carry almost nothing beyond their layers."""
    return ModelSpec(name="tiny-vocab", n_layers=n_layers, d_model=2048, n_heads=16,
                     ffn_size=8192, ffn_kind="swiglu", vocab_size=256, tied_embeddings=False,
                     position="rotary", max_seq_len=4096, norm="rmsnorm", norm_bias=False,
                     qkv_bias=False, attn_out_bias=False, mlp_bias=False)


def _predict(cat, pp_layers, gb, spec=None, **plan):
    system = resolve_system(cat, gpu="h100")
    p = ParallelPlan(num_gpus=4, gpus_per_node=domain_gpus(system, 4), pp=4, sharding="none",
                     pp_layers=pp_layers, **plan)
    training = TrainingConfig(seq_len=4096, micro_batch=1, recompute="none", global_batch=gb)
    return predict(spec or _spec(), system, p, training)


def test_the_slowest_stage_sets_the_step(cat):
    """8, 9, 8, 7 layers against 8 per stage (1F1B, no data parallelism): every stage is timed
    at the busiest one's count (the ends, lighter than it, do not shorten the steady state),
    so the m + p − 1 slots of the 1F1B timeline ([2] §2.2.1) each take one layer longer:
    step(heavy) − step(even) = (m + p − 1)·t_layer, with the same t_layer at every m, and
    t_layer one eighth of the even plan's time per extra micro-batch."""
    per_slot = []
    for m in (16, 64):
        even, heavy = _predict(cat, None, m), _predict(cat, (8, 9, 8, 7), m)
        per_slot.append((heavy.step_time_s - even.step_time_s) / (m + 4 - 1))
    assert per_slot[0] > 0
    assert per_slot[1] == pytest.approx(per_slot[0], rel=1e-3)
    slope = (_predict(cat, None, 64).step_time_s - _predict(cat, None, 16).step_time_s) / 48
    assert per_slot[0] == pytest.approx(slope / 8, rel=0.02)


def test_the_worst_stage_memory_binds(cat):
    """A middle stage with more layers than the first: its memory is evaluated (no embedding,
    no head, stage 1's micro-batches in flight) and binds when larger; each layer more adds
    the same bytes (one layer's states and its activations)."""
    peaks = []
    for mid in (9, 10, 11):
        p = _predict(cat, (7, mid, 8, 32 - 15 - mid), 16).to_dict()["memory"]
        assert p["peak_bytes"] == max(p["stages"].values())
        assert p["stages"]["middle"] > p["stages"]["first"]
        peaks.append(p["stages"]["middle"])
    assert peaks[1] - peaks[0] == pytest.approx(peaks[2] - peaks[1], rel=1e-9)
    assert peaks[1] > peaks[0]
    # an even split has no middle entry (its first stage holds the most)
    assert "middle" not in _predict(cat, None, 16).to_dict()["memory"]["stages"]


def test_llama3_405b_over_16_stages_is_accepted_and_noted(cat):
    out = json.loads(invoke("predict", "--model", "llama3-405b", "--gpu", "h100",
                            "--num-gpus", "1024", "--tp", "8", "--pp", "16", "--framework",
                            "megatron", "--global-batch", "1024", "--format", "json"))
    assert any(n.startswith("pipeline split: 7, 8 x14, 7 layers per stage (Megatron-Core")
               for n in out["notes"])
    assert out["memory"]["peak_bytes"] == max(out["memory"]["stages"].values())


# -- the override -----------------------------------------------------------------------------
def test_pp_layers_overrides_the_split(cat):
    out = json.loads(invoke("predict", "--model", "llama3-405b", "--gpu", "h100",
                            "--num-gpus", "1024", "--tp", "8", "--pp", "4", "--global-batch",
                            "1024", "--pp-layers", "30,33,33,30", "--format", "json"))
    assert "pipeline split: 30, 33 x2, 30 layers per stage (given; override with --pp-layers)" \
        in out["notes"]
    assert out["plan"]["pp_layers"] == [30, 33, 33, 30]


@pytest.mark.parametrize("value, words", [
    ("31,32,63", "gives 3 stage(s) for pp(4)"),
    ("31,32,32,30", "sum to 125, not n_layers(126)"),
    ("31,0,63,32", "'0' is not a whole number >= 1"),
    ("31,x,63,32", "'x' is not a whole number >= 1"),
])
def test_bad_pp_layers_is_one_line(capsys, value, words):
    rc, out, err = run(capsys, "predict", "--model", "llama3-405b", "--gpu", "h100",
                       "--num-gpus", "1024", "--tp", "8", "--pp", "4", "--pp-layers", value)
    assert words in assert_one_line_error(rc, out, err)


def test_pp_layers_with_end_counts_is_refused():
    with pytest.raises(ConfigError, match="give the pipeline split once"):
        ParallelPlan(num_gpus=4, gpus_per_node=4, pp=4, pp_layers="8,8,8,8", pp_first_layers=8)


# -- expert tensor parallelism ----------------------------------------------------------------
def test_etp_defaults_to_one_where_tp_does_not_fit():
    """64 GPUs, tp 4, pp 2: a stage has 32 ranks; etp = tp = 4 with ep 16 needs 64, so etp
    becomes 1 (Megatron-Bridge's MoE recipes); where tp fits it stays the default."""
    plan = ParallelPlan(num_gpus=64, gpus_per_node=8, tp=4, pp=2, ep=16)
    assert (plan.etp, plan.etp_defaulted, plan.expert_dp) == (1, True, 2)
    kept = ParallelPlan(num_gpus=64, gpus_per_node=8, tp=2, pp=2, ep=8)
    assert (kept.etp, kept.etp_defaulted) == (2, False)
    with pytest.raises(ConfigError, match=r"etp\(4\) \* ep\(16\)"):  # given: checked
        ParallelPlan(num_gpus=64, gpus_per_node=8, tp=4, pp=2, ep=16, etp=4)


# -- the calibration files --------------------------------------------------------------------
@pytest.mark.slow
def test_no_calibration_row_is_refused_for_its_plan():
    """Every row's plan is accepted; what remains skipped for its layout are rows the files
    mark doubtful whose stated degrees do not multiply to (or fit in) their GPU count."""
    from fsdpsim.measured.validate import load_measurements

    files = sorted(glob.glob("validation/data/*.csv"))
    for path in files:
        frame = load_measurements(path)
        layout = frame[frame["skip"].astype(str).str.startswith("layout")]
        for _, row in layout.iterrows():
            assert row.get("subset") == "doubtful", (path, row["id"], row["skip"])
            assert "!= n_gpus" in row["skip"] or "does not divide" in row["skip"]
        if path.endswith("nanotron.csv"):
            assert layout.empty


# -- the measurement column -------------------------------------------------------------------
def test_pp_layers_column_is_read_as_predict_reads_the_flag(tmp_path, cat):
    """A row stating ``pp_layers`` predicts what ``predict --pp-layers`` does; without the
    column the framework's default split applies, as in predict."""
    import pandas as pd

    from fsdpsim.measured.validate import engine_inputs, load_measurements

    row = dict(id="x", model="llama3-8b", gpu="h100", n_gpus=16, gpus_per_node=8,
               inter_node_gbps_per_gpu=400, seq_len=4096, micro_batch=1, grad_accum=16,
               sharding="optimizer", recompute="full", tokens_per_s_per_gpu=8000,
               global_batch_seqs=64, tp=2, pp=4, pp_layers="7,9,9,7")
    path = tmp_path / "m.csv"
    pd.DataFrame([row, {**row, "id": "y", "pp_layers": ""}]).to_csv(path, index=False)
    x = engine_inputs(load_measurements(path, cat), cat)
    assert [(x[k][0], x[k][1]) for k in ("layers_first", "layers_mid", "layers_last")] == \
        [(7, 8), (9, 8), (7, 8)]


@pytest.mark.parametrize("schedule, vpp", [("1f1b", 1), ("interleaved", 2)])
@pytest.mark.parametrize("counts", [(8, 9, 8, 7), (7, 8, 8, 7), (3, 4, 4, 4, 4, 4, 3, 2),
                                    (15,) + (16,) * 6 + (15,), (1,) + (2,) * 13 + (1, 0)])
@pytest.mark.parametrize("m", [16, 64])
def test_busiest_count_timing_bounds_the_event_simulation(schedule, vpp, counts, m):
    """The engine's timing of a split (every middle stage and any lighter end at the busiest
    middle count) against the event simulation of the real stage times (one layer: forward 1,
    backward 2): never below it, at most 12 % above (docs/model.md)."""
    from fsdpsim.costs.schedule import SCHEDULE_CODES, pipeline_time_s, stage_actions
    from fsdpsim.costs.schedule_sim import simulate

    p = len(counts)
    if schedule == "interleaved" and m % p:
        pytest.skip("interleaved needs m divisible by pp")
    layers = [float(c) for c in counts]
    real = simulate(stage_actions(schedule, p, m, vpp), layers, [2.0 * c for c in layers])
    mid = max(counts[1:-1])
    ends = [max(counts[0] - mid, 0), max(counts[-1] - mid, 0)]
    model, _ = pipeline_time_s(SCHEDULE_CODES[schedule], p, vpp, m, mid, 2.0 * mid, 0.0, 0.0,
                               ends[0], 2.0 * ends[0], ends[1], 2.0 * ends[1])
    assert real.makespan_s <= float(model) <= 1.12 * real.makespan_s
