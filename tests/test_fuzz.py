"""The fuzz suite: hostile and extreme input through every command, and the promise it checks.

Hypothesis draws values (valid, at the edges of what is accepted, just past them, and garbage:
NaN, infinities, 1e400, 400-digit integers, non-ASCII digits, empty and very long text, wrong
types) for

* every option of ``predict`` and ``sweep`` (and the sweep-only ones),
* every field of a Hugging Face ``config.json`` of each supported model type,
* catalog overlays (every key of every kind, overrides of built-in entries, duplicates),
* grid TOML files (every grid key), and
* measurement CSVs (fsdpsim's schema, the published-runs layout, vTrain's).

Every run must keep the promise (README, "Reliability"): exit status 0 or 2; with 2, exactly one
line on stderr naming the problem, nothing on stdout; with 0, nothing on stderr; never a
traceback or a Python warning (numpy's RuntimeWarnings included); and every number in every
output format (table, JSON, CSV) finite and either 0 or of magnitude between 1e-45 and 1e45.
Where ``predict`` succeeds, ``sweep`` of the same options succeeds and its row equals predict's
JSON on every field.

CI runs a fixed, seeded set: 861 cases, about 1,650 commands, 20-25 s on two cores.
``FSDPSIM_FUZZ_EXAMPLES=N`` runs N random cases per test instead (e.g. 2000 before a release);
``FSDPSIM_FUZZ_ARGS=FILE`` appends every command run and its exit status to FILE (JSON lines).
"""

from __future__ import annotations

from conftest import assert_one_line_error, run

import copy
import io
import json
import math
import os
import re
import tempfile
import warnings
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from fsdpsim.hardware.catalog_schema import SCHEMAS, Field
from fsdpsim.drivers.sweep.grid import GRID_KEYS
from fsdpsim.plan.parallel import PRECISIONS, RECOMPUTES, SHARDINGS
from fsdpsim.report.render import flatten

#: Random cases per test when set (and then not derandomized); else the seeded CI set.
EXAMPLES = int(os.environ.get("FSDPSIM_FUZZ_EXAMPLES", "0") or 0)
#: Every number an output holds is 0 or within these magnitudes. The largest accepted inputs
#: (2^22 GPUs, micro-batches of 2^31 sequences of 2^24 tokens, a 10^15-parameter model) give
#: about 1e42 FLOP per step; NaN, infinities and the 1e300s of underflowed arithmetic are out.
LARGEST, SMALLEST = 1e45, 1e-45


def fuzz_settings(ci_examples: int):
    return settings(max_examples=EXAMPLES or ci_examples, derandomize=not EXAMPLES,
                    database=None, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


# -- the promise ---------------------------------------------------------------------------------
def _check_number(value: float, where: str) -> None:
    assert math.isfinite(value), (where, value)
    assert value == 0 or SMALLEST <= abs(value) <= LARGEST, (where, value)


_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_NON_FINITE = re.compile(r"(?<![a-z])(?:nan|inf|infinity)(?![a-z])")
_TABLE_NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _check_json(text: str, skip: frozenset = frozenset()) -> None:
    def refuse(constant):
        raise AssertionError(f"{constant} in JSON output")

    def walk(value, where):
        if isinstance(value, dict):
            for k, v in value.items():
                if k not in skip:
                    walk(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            _check_number(float(value), where)

    walk(json.loads(text, parse_constant=refuse), "$")


def _check_csv(text: str, skip: frozenset = frozenset()) -> None:
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    for column in set(frame.columns) - skip:
        for cell in frame[column]:
            assert not _NON_FINITE.fullmatch(cell.strip().lower()), (column, cell)
            if _NUMBER.match(cell.strip()):
                _check_number(float(cell), column)


def _check_table(text: str, echoes: tuple[str, ...] = ()) -> None:
    for echo in sorted(echoes, key=len, reverse=True):  # the user's own labels, shown back
        text = text.replace(echo, " ")
    assert not _NON_FINITE.search(text.lower()), text
    for token in _TABLE_NUMBER.findall(text):
        number = float(token.replace(",", ""))
        assert math.isfinite(number) and abs(number) <= LARGEST, token


def keeps_the_promise(capsys, *args: str, echoes: dict[str, set[str]] | None = None
                      ) -> tuple[int, str]:
    """Run ``fsdpsim ARGS`` and check the promise; returns (exit status, stdout). ``echoes``:
    input columns of free text (labels) and their values, which outputs may show back."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, out, err = run(capsys, *args)
    if os.environ.get("FSDPSIM_FUZZ_ARGS"):
        with open(os.environ["FSDPSIM_FUZZ_ARGS"], "a") as log:
            log.write(json.dumps([rc, *args]) + "\n")
    assert not [str(w.message) for w in caught], (args, [str(w.message) for w in caught])
    assert rc in (0, 2), (args, rc, err)
    event(f"{args[0] if args[0] != '--catalog' else args[2]}: exit {rc}")
    if rc == 2:
        assert_one_line_error(rc, out, err)
        return rc, out
    assert err == "", (args, err)
    fmt = args[args.index("--format") + 1] if "--format" in args else "table"
    echoes = echoes or {}
    if fmt == "json":
        _check_json(out, frozenset(echoes))
    elif fmt == "csv":
        _check_csv(out, frozenset(echoes))
    else:
        _check_table(out, tuple(v for values in echoes.values() for v in values if v.strip()))
    return rc, out


def _same(a, b) -> bool:
    missing = lambda v: v is None or (isinstance(v, float) and math.isnan(v))  # noqa: E731
    if missing(a) or missing(b):
        return missing(a) and missing(b)
    return a == b


# -- values ----------------------------------------------------------------------------------------
_GARBAGE = st.sampled_from(["", " ", "nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400",
                            "1e-400", "0", "-0", "-1", "0x10", "1_0", "٨", "８", "𝟖", "8\u200b",
                            "1" + "0" * 400, "x" * 300, "auto", "none", "1,2", "1..", "..8",
                            "8..4", "2**31", "1e3", "4k", "32k", "1.5", "abc"])
_WORD = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF,
                              blacklist_categories=("Cs",)), max_size=12)


def _mostly(valid, bad=_GARBAGE, one_in: int = 8):
    """``valid``, and once in ``one_in`` draws ``bad``: most runs get far enough to compute.
    (Not ``i == 0``: hypothesis draws the ends of a range more often than the middle.)"""
    return st.integers(0, one_in - 1).flatmap(lambda i: bad if i == 3 else valid)


def _count(values, edges=()):
    """Counts: ``values`` and small whole numbers; rarely an edge just past the accepted range
    or garbage."""
    return _mostly(st.one_of(st.sampled_from([str(v) for v in values]),
                             st.integers(1, 5000).map(str)),
                   st.one_of(st.sampled_from([str(v) for v in edges] or ["0"]), _GARBAGE,
                             st.integers(-3, 0).map(str)))


def _float(values, edges=()):
    return _mostly(st.sampled_from([str(v) for v in values]),
                   st.one_of(st.sampled_from([str(v) for v in edges] or ["0"]), _GARBAGE,
                             st.floats(allow_nan=True, allow_infinity=True).map(repr)))


MODELS = ["llama3-8b", "llama3-70b", "llama3.1-405b", "gpt3-125m", "gpt3-1.3b", "gpt3-175b",
          "gpt-1t", "mixtral-8x7b", "mpt-7b", "qwen2.5-7b", "mistral-7b", "LLAMA3-8B",
          "deepseek-v3", "qwen3-30b-a3b", "gpt-oss-20b", "llama4-scout"]
GPUS = ["h100", "a100", "a100-sxm4-40gb", "v100", "v100-sxm2-16gb", "mi300x", "mi250x",
        "tpu-v5p", "tpu-v4", "b200", "gaudi3", "l4", "gh200-96gb", "H100"]
CLUSTERS = ["eos", "dgx-h100", "p4d", "frontier", "lumi-g", "juwels-booster", "selene",
            "mosaicml-a100-80gb", "llama3-roce", "h100"]
NETWORKS = ["ib-ndr-400", "ib-hdr-200", "efa-v1", "roce-100", "slingshot-11", "gcp-tcpx",
            "no-such-net"]
SHARED_OPTIONS = {  # options predict and sweep both take, with the same meaning
    "--price": _mostly(st.sampled_from(["2.5", "$2.5/h", "0.0001", "1e4", "3/gpu-hour",
                                        "h100=2.5/h", "h100=$0.0001"]),
                       st.sampled_from(["nan", "-1", "1e5", "cheap", "", "h100=1e5", "a100=nan",
                                        "h100=inf", "h100=-1", "h100"])),
    "--optimizer": _mostly(st.sampled_from(["adamw", "sgd"]), st.just("adam")),
    "--zero": _mostly(st.sampled_from(["0", "1", "2", "3"]), st.just("4")),
    "--framework": _mostly(st.sampled_from(["torch", "megatron", "fsdp1", "deepspeed-zero3",
                                            "internevo", "nanotron"]), st.just("jax")),
    "--model": _mostly(st.sampled_from(MODELS), st.one_of(_WORD, _GARBAGE)),
    "--gpu": _mostly(st.sampled_from(GPUS), st.one_of(_WORD, _GARBAGE)),
    "--cluster": _mostly(st.sampled_from(CLUSTERS)),
    "--num-gpus": _mostly(st.sampled_from(["64", "128", "1024", "4096", "4608", "8192",
                                           str(2**22), "1", "2", "8", "16", "12", "24"]),
                          st.one_of(st.just(str(2**22 + 1)), _GARBAGE), one_in=10),
    "--gpus-per-node": _mostly(st.sampled_from(["1", "2", "4", "8", "16", "72", "1024", "2",
                                                "8", "4194304"]), one_in=6),
    "--network": _mostly(st.sampled_from(NETWORKS)),
    "--inter-node-gbps-per-gpu": _float([0.001, "1e-3", 0.01, 1, 25, 100, 400, 3200, 1e5],
                                        ["5e-324", "1e-300", 0.000999, 100001, "1e-30"]),
    "--power-cap-w": _float([300, 350, 400, 500, 600, 700, 700],
                            [1, 70, 70.0001, 700.0001, 1000, 10000, 10001]),
    "--seq-len": _count([1, 2, 128, 2048, 4096, "32k", "1m", "16m", 2**24], ["17m", 2**24 + 1]),
    "--micro-batch": _count(["auto", "auto", 1, 2, 3, 8, 256, 2**20, 2**31], [2**31 + 1]),
    "--global-batch": _count([1, 8, 64, 96, 512, 2**20, 2**31], [2**31 + 1]),
    "--sharding": _mostly(st.sampled_from(SHARDINGS)),
    "--recompute": _mostly(st.sampled_from(("auto",) + RECOMPUTES)),
    "--precision": _mostly(st.sampled_from(PRECISIONS)),
    "--grad-sync": _mostly(st.sampled_from(["every", "last"]), st.just("sometimes")),
    "--placement": _mostly(st.sampled_from(["packed", "fragmented"]), st.just("random")),
    "--keep-params-gathered": st.just(None),
    # hybrid parallelism: degrees, schedules and variants
    "--tp": _mostly(st.sampled_from(["1", "2", "4", "8", "3"]), one_in=6),
    "--pp": _mostly(st.sampled_from(["1", "2", "4", "8", "3"]), one_in=6),
    "--cp": _mostly(st.sampled_from(["1", "2", "4"]), one_in=6),
    "--vpp": _mostly(st.sampled_from(["1", "2", "4"]), st.sampled_from(["0", "1025", "٢"]),
                     one_in=6),
    "--pp-schedule": _mostly(st.sampled_from(["gpipe", "1f1b", "interleaved", "zb-h1"]),
                             st.just("dualpipe")),
    "--cp-kind": _mostly(st.sampled_from(["ring", "all2all"]), st.just("ulysses")),
    "--sequence-parallel": st.just(None),
    "--no-sequence-parallel": st.just(None),
    "--tp-overlap": st.just(None),
    "--recompute-layers": _mostly(st.sampled_from(["0", "1", "2", "16"]), one_in=6),
    # a training run: tokens, energy, failures and checkpoints
    "--pue": _float([1, 1.2, 1.56, 10], [10.5, 0.9]),
    "--tokens": _float(["15t", "1", "1e19", "1k"], ["1e20", "0.5"]),
    "--gpu-mtbf-hours": _float([1, 100, 50677, "1e9"], ["0.5", "1e10", "-1"]),
    "--checkpoint-gb-per-s": _float([0.001, 1, 2000, "1e7"], ["1e-4", "2e7"]),
    "--restart-min": _float([0, 1, 10, 10080], ["-1", "10081"]),
    # mixture of experts
    "--ep": _mostly(st.sampled_from(["1", "2", "4", "8", "64", "3"]), one_in=6),
    "--etp": _mostly(st.sampled_from(["1", "2"]), one_in=6),
    "--ep-overlap": st.just(None),
    "--moe-capacity-factor": _float(["none", 1, 1.25, 2], [0.0099, 1001, "-1"]),
    "--moe-imbalance": _float([1, 1.1, 2], [0.99, 1001, "-1"]),
}
PREDICT_ONLY = {
    "--shard-group-size": _count([1, 2, 8, 16, 3]),
    "--reduce-dtype": _mostly(st.sampled_from(["fp32", "bf16", "fp16"]), st.just("fp8")),
    "--eager-attention": st.just(None),
    "--no-reshard-after-forward": st.just(None),
    "--dp-shard": _count([1, 2, 8, 64]),
    "--dp-replicate": _count([1, 2, 8]),
    "--pp-first-layers": _count([1, 2, 15, 31]),
    "--pp-last-layers": _count([1, 2, 15, 31]),
    "--pp-layers": _mostly(st.sampled_from(["16,16", "8,8,8,8", "7,9,9,7", "1,31"]),
                           st.sampled_from(["0,32", "8,8,8,9", "x", "", "8,,8", "-1,33"])),
    "--mesh-order": _mostly(st.sampled_from(["pp,dp_replicate,dp_shard,cp,tp",
                                             "tp,cp,dp_shard,dp_replicate,pp"]),
                            st.sampled_from(["tp,tp", "dp", ""])),
    "--dropout": st.just(None),
}
SWEEP_ONLY = {
    "--model-sizes": _mostly(st.sampled_from(["7b", "1b..10b", "1e6", "1e15", "1e16", "1m",
                                              "10t", "1b..1t"])),
    "--best": st.just(None),
    "--no-ceilings": st.just(None),
}


def _args(options: dict) -> list[str]:
    out = []
    for name, value in options.items():
        out += [name] if value is None else [f"{name}={value}"]
    return out


# -- 1. every option of predict and sweep ----------------------------------------------------------
@pytest.mark.slow
@fuzz_settings(400)
@given(shared=st.fixed_dictionaries({"--num-gpus": SHARED_OPTIONS["--num-gpus"]},
                                    optional={k: v for k, v in SHARED_OPTIONS.items()
                                              if k != "--num-gpus"}),
       predict_only=st.fixed_dictionaries({}, optional=PREDICT_ONLY),
       sweep_only=st.fixed_dictionaries({}, optional=SWEEP_ONLY),
       fmt=st.sampled_from(["json", "csv", "table"]))
@example(shared={"--num-gpus": "64", "--inter-node-gbps-per-gpu": "5e-324"},
         predict_only={}, sweep_only={}, fmt="csv")  # inputs that once failed, always in the run
@example(shared={"--num-gpus": "64", "--inter-node-gbps-per-gpu": "1e-300"},
         predict_only={}, sweep_only={}, fmt="table")
@example(shared={"--num-gpus": "64", "--inter-node-gbps-per-gpu": "inf"},
         predict_only={}, sweep_only={}, fmt="json")
@example(shared={"--num-gpus": "4096", "--inter-node-gbps-per-gpu": "0.001",
                 "--model": "llama3.1-405b"}, predict_only={}, sweep_only={}, fmt="csv")
@example(shared={"--num-gpus": "8192", "--cluster": "eos"}, predict_only={}, sweep_only={},
         fmt="json")
@example(shared={"--num-gpus": "٨"}, predict_only={}, sweep_only={}, fmt="json")
@example(shared={"--num-gpus": "64", "--seq-len": "32k", "--sharding": "none"},
         predict_only={}, sweep_only={}, fmt="table")
@example(shared={"--num-gpus": "4194304"}, predict_only={}, sweep_only={}, fmt="table")
@example(shared={"--num-gpus": "64", "--model": "a" * 300}, predict_only={}, sweep_only={},
         fmt="json")
@example(shared={"--num-gpus": "8", "--power-cap-w": "700.0001"}, predict_only={},
         sweep_only={}, fmt="json")
@example(shared={"--num-gpus": "64", "--network": ""}, predict_only={}, sweep_only={},
         fmt="json")
def test_fuzz_predict_and_sweep_options(capsys, shared, predict_only, sweep_only, fmt):
    rc, out = keeps_the_promise(capsys, "predict", "--format", "json",
                                *_args({**shared, **predict_only}))
    sweep_rc, sweep_out = keeps_the_promise(capsys, "sweep", "--format", fmt,
                                            *_args({**shared, **sweep_only}))
    if rc != 0 or predict_only or sweep_only or {"--gpu", "--cluster"} <= set(shared):
        return  # (sweep takes --gpu and --cluster as a union of systems, predict as one)
    # sweep rows equal predict: the same options, one row, every field of predict's JSON
    if fmt != "json":
        sweep_rc, sweep_out = keeps_the_promise(capsys, "sweep", "--format", "json",
                                                *_args(shared))
    assert sweep_rc == 0, shared
    rows = json.loads(sweep_out)
    assert len(rows) == 1
    # what predict runs, sweep does not call invalid (it may not fit: a row, not an error)
    assert rows[0]["infeasible"] is None or rows[0]["infeasible"].startswith("does not fit"), (
        shared, rows[0]["infeasible"])
    expected = flatten(json.loads(out))
    diffs = {k: (v, rows[0].get(k, "absent")) for k, v in expected.items()
             if not k.startswith("chosen") and k not in ("notes", "advice", "fit_advice")
             and not _same(v, rows[0].get(k))}
    assert not diffs, (shared, diffs)


# -- 2. every field of a config.json ---------------------------------------------------------------
_JSON_GARBAGE = st.one_of(
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e300, 1e-300, 10**400,
                     "__5000_DIGITS__", -1, 0, 0.5, 4.5, True, False, None, "64", "", [], {}, [64],
                     {"a": 1}, 2**20, 2**20 + 1, 2**14, 2**14 + 1, 2**16, 2**24, 2**31]),
    st.integers(-2, 2**21), st.floats(allow_nan=True, allow_infinity=True), _WORD)
_HF_BASE = {
    "llama": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100,
              "max_position_embeddings": 2048, "tie_word_embeddings": False, "head_dim": 16,
              "attention_bias": False, "mlp_bias": False},
    "mistral": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 1, "intermediate_size": 128, "vocab_size": 100},
    "mixtral": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                "intermediate_size": 128, "vocab_size": 100, "num_local_experts": 4,
                "num_experts_per_tok": 2},
    "qwen2": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 128, "vocab_size": 100},
    "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 1024,
             "n_inner": None, "tie_word_embeddings": True},
    "gpt_neox": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "intermediate_size": 256, "vocab_size": 100, "attention_bias": True},
    "mpt": {"d_model": 64, "n_heads": 4, "n_layers": 2, "vocab_size": 100, "max_seq_len": 2048,
            "expansion_ratio": 4, "no_bias": False, "norm_type": "low_precision_layernorm",
            "learned_pos_emb": True,
            "attn_config": {"attn_type": "grouped_query_attention", "kv_n_heads": 2,
                            "alibi": False, "rope": False},
            "ffn_config": {"ffn_type": "mptmlp", "ffn_hidden_size": 256}},
    "qwen3": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
              "vocab_size": 100, "use_sliding_window": True, "sliding_window": 8,
              "max_window_layers": 1},
    "qwen3_moe": {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
                  "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2,
                  "vocab_size": 100, "decoder_sparse_step": 1, "mlp_only_layers": [0]},
    "deepseek_v3": {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
                    "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 100,
                    "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
                    "qk_rope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "n_shared_experts": 1, "moe_intermediate_size": 32,
                    "first_k_dense_replace": 1, "num_nextn_predict_layers": 1,
                    "topk_method": "noaux_tc"},
    "kimi_k2": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                "intermediate_size": 128, "vocab_size": 100, "q_lora_rank": None,
                "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
                "v_head_dim": 8, "n_routed_experts": 8, "num_experts_per_tok": 2,
                "n_shared_experts": 1, "moe_intermediate_size": 32, "first_k_dense_replace": 0},
    "gpt_oss": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64,
                "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 100,
                "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"]},
    "llama4": {"tie_word_embeddings": False,
               "text_config": {"hidden_size": 64, "num_hidden_layers": 4,
                               "num_attention_heads": 4, "num_key_value_heads": 2,
                               "head_dim": 16, "intermediate_size": 32,
                               "intermediate_size_mlp": 128, "num_local_experts": 4,
                               "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
                               "attention_chunk_size": 16, "vocab_size": 100}},
}


@st.composite
def hf_configs(draw):
    model_type = draw(st.sampled_from(sorted(_HF_BASE) + ["t5", ""]))
    config = json.loads(json.dumps(_HF_BASE.get(model_type, _HF_BASE["llama"])))
    config["model_type"] = model_type
    for _ in range(draw(st.integers(0, 3))):
        tables = [config] + [v for v in config.values() if isinstance(v, dict)]
        table = draw(st.sampled_from(tables))
        key = draw(st.sampled_from(sorted(table) + ["expansion_ratio", "bogus"]))
        if draw(st.integers(0, 9)) == 0:
            table.pop(key, None)
        else:
            table[key] = copy.deepcopy(draw(_JSON_GARBAGE))  # (strategy values are shared)
    return config


@fuzz_settings(150)
@given(config=hf_configs(), num_gpus=st.sampled_from(["1", "8", "64", "4096"]),
       fmt=st.sampled_from(["json", "csv", "table"]))
def test_fuzz_config_json(capsys, config, num_gpus, fmt):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        # (an integer beyond Python's 4,300-digit conversion limit is written by hand)
        path.write_text(json.dumps(config).replace('"__5000_DIGITS__"', "1" + "0" * 5000))
        keeps_the_promise(capsys, "model", "show", str(path), "--format", fmt)
        keeps_the_promise(capsys, "predict", "--model", str(path), "--num-gpus", num_gpus,
                          "--format", fmt)


# -- 3. catalog overlays ---------------------------------------------------------------------------
_TOML_GARBAGE = st.sampled_from(["nan", "inf", "-inf", "1e400", "0", "-1", "1e-300", "1e300",
                                 "1" + "0" * 40, '"80"', "true", "[]", "[1, 2]", "{a = 1}",
                                 "2026-11-30", '""', '"x"', "1.5", "4096"])


def _edges(field: Field) -> list[str]:
    lo, hi = field.lo, field.hi
    values = [lo, hi, lo * 1.0001 if lo else 1e-9, hi * 1.0001, lo * 0.9999 if lo else -1e-9]
    if field.types is int:
        return [str(int(v)) for v in (lo, hi, hi + 1, lo - 1)]
    return [repr(float(v)) for v in values]


ENTRIES = {
    "accelerator": '''[[accelerator]]
id = "fz-gpu"
name = "Fuzz GPU"
vendor = "Test"
memory_gib = 80
hbm_bandwidth_tb_per_s = 3.0
runtime_reserved_gib = 1.0
allocator_fraction = 0.05
tdp_w = 700
rent_usd_per_hour = 2.0
source = "fuzz"
retrieved = 2026-11-30

[accelerator.peak_dense_tflops]
bf16 = 1000
fp8 = 2000

[accelerator.intra_node_link]
kind = "nvlink4"
gb_per_s_per_direction = 450
latency_us = 1.0
topology = "switch"

[accelerator.efficiency]
matmul_fraction = 0.8
matmul_half_gflop = 4.0
attention_fraction = 0.45
hbm_fraction = 0.85
link_fraction = 0.8
kernel_overhead_us = 5.0
comm_compute_slowdown = 0.05
source = "fuzz"
''',
    "network": '''[[network]]
id = "fz-net"
name = "Fuzz net"
source = "fuzz"
retrieved = 2026-11-30
kind = "infiniband"
gbit_per_s_per_nic = 400
latency_us = 5.0
achievable_fraction = 0.8
fraction_source = "fuzz"
''',
    "node": '''[[node]]
id = "fz-node"
name = "Fuzz node"
accelerator = "fz-gpu"
gpus_per_node = 8
nics_per_node = 8
network = "fz-net"
source = "fuzz"
retrieved = 2026-11-30
''',
    "cluster": '''[[cluster]]
id = "fz-cluster"
name = "Fuzz cluster"
node = "fz-node"
num_nodes = 16
topology = "fat-tree"
source = "fuzz"
retrieved = 2026-11-30
''',
    # An override of the library every default prediction uses, so garbage reaches predict.
    "collectives": '''[[collectives]]
id = "nccl-2.30"
override = true
net_overhead_us = 1.0

[collectives.simple]
ring_net_hop_us = 14.0
''',
}
#: Every numeric key of every kind, with the table it lives in.
_NUMERIC_KEYS = [(kind, table, key, field)
                 for kind, schema in SCHEMAS.items()
                 for table, fields in [("", schema)] + [(k, v) for k, v in schema.items()
                                                         if isinstance(v, dict)]
                 for key, field in fields.items()
                 if isinstance(field, Field) and field.lo is not None]


def _set_key(text: str, table: str, key: str, value: str) -> str:
    """``key = value`` in ``[table]`` (or the entry's own keys) of an entry's TOML text."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().endswith(f".{table}]")),
                 None) if table else 0
    if table and start is None:
        lines += ["", f"[{text.split(']]')[0].strip('[')}.{table}]"]
        start = len(lines) - 1
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    for i in range(start + 1, end):
        if lines[i].split(" = ")[0] == key:
            lines[i] = f"{key} = {value}"
            return "\n".join(lines) + "\n"
    lines.insert(end if table else start + 2, f"{key} = {value}")
    return "\n".join(lines) + "\n"


@st.composite
def overlays(draw):
    entries = dict(ENTRIES)
    for _ in range(draw(st.integers(0, 4))):
        kind, table, key, field = draw(st.sampled_from(_NUMERIC_KEYS))
        value = draw(st.one_of(st.sampled_from(_edges(field)), _TOML_GARBAGE))
        entries[kind] = _set_key(entries[kind], table, key, value)
    text = "\n".join(entries.values())
    extra = draw(st.sampled_from([
        "", "", "",
        '[[accelerator]]\nid = "h100-sxm5-80gb"\noverride = true\nmemory_gib = 4096\n',
        '[[accelerator]]\nid = "h100-sxm5-80gb"\noverride = true\n[accelerator.efficiency]\n'
        'matmul_fraction = 0.05\nkernel_overhead_us = 100\n',
        '[[network]]\nid = "ib-ndr-400"\noverride = true\ngbit_per_s_per_nic = 0.01\n',
        '[[node]]\nid = "dgx-h100"\noverride = true\ngpus_per_node = 1024\nnics_per_node = 0.25\n',
        '[[network]]\nid = "ib-ndr-400"\noverride = true\nscale_decay_per_doubling = 0.5\n'
        'scale_decay_floor = 0.05\n',
        ENTRIES["network"],  # the same id twice in one overlay
        "[project]\nname = 'not a catalog'\n",
    ]))
    return text + "\n" + extra


@pytest.mark.slow
@fuzz_settings(100)
@given(overlay=overlays(),
       hardware=st.sampled_from([("--cluster", "fz-cluster"), ("--cluster", "fz-node"),
                                 ("--gpu", "fz-gpu"), ("--gpu", "h100"),
                                 ("--cluster", "dgx-h100")]),
       num_gpus=st.sampled_from(["8", "64", "128", "256"]),
       precision=st.sampled_from(["bf16", "fp8"]),
       fmt=st.sampled_from(["json", "csv", "table"]))
def test_fuzz_catalog_overlay(capsys, overlay, hardware, num_gpus, precision, fmt):
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "overlay.toml").write_text(overlay)
        common = ("--catalog", folder)
        keeps_the_promise(capsys, *common, "catalog", "list", "--format", fmt)
        keeps_the_promise(capsys, *common, "predict", *hardware, "--num-gpus", num_gpus,
                          "--precision", precision, "--format", fmt)
        keeps_the_promise(capsys, *common, "sweep", *hardware, "--num-gpus", num_gpus,
                          "--precision", precision, "--best", "--format", fmt)


# -- 4. grid TOML ----------------------------------------------------------------------------------
_GRID_VALUES = {
    "model": ['"llama3-8b"', '["llama3-8b", "gpt3-125m"]', '"llama3-8b,llama3-8b"', '"nope"'],
    "model-sizes": ['"7b"', '"1b..10b"', '["1e6"]', '"1e16"', "7e9"],
    "gpu": ['"h100"', '["h100", "v100"]', '"h100,mi300x"', '""', "[]"],
    "cluster": ['"eos"', '["dgx-h100", "p4d"]', '"h100"'],
    "gpus-per-node": ["8", '"4..16"', "4194304", "0"],
    "network": ['"ib-hdr-200"', '["efa-v1", "roce-100"]'],
    "inter-node-gbps-per-gpu": ["0.001", "[50, 400]", '"100,200"', "1e-4", "100000"],
    "power-cap-w": ["500", "[400, 700]", "700.0001", "69"],
    "placement": ['"packed"', '["packed", "fragmented"]', '"random"', "1"],
    "shard-group-size": ["8", "16", "48", '"8,16"', "0"],
    "num-gpus": ["8", '"8..64"', "[8, 4608, 8192]", '"1..4194304"', "4194305"],
    "seq-len": ["4096", '"1k..8k"', '"16m"', "16777217"],
    "micro-batch": ['"auto"', "[1, 2]", '"1..8"', "2147483648"],
    "global-batch": ['"none"', "[64, 512]", '"none,96"', "2147483648"],
    "sharding": ['"auto"', '["full", "none"]', '"hybrid"', '"zero3"'],
    "recompute": ['"auto"', '"full"', '["none", "selective"]'],
    "precision": ['"bf16"', '["fp8", "fp16"]', '"fp32"'],
    "best": ["true", "false", '"yes"', "1"],
    "free-batch": ["true", "false", '"yes"'],
    "price": ['"h100=2.5/h"', '{h100 = 3}', '{h100 = "nan"}', '"a100=1e5"'],
    "pue": ["1.2", "10", "0.5", '"1.1"'],
    "tokens": ['"15t"', "1e19", "1e20", '"1k"'],
    "gpu-mtbf-hours": ["50677", "1", '"1e9"', "0"],
    "checkpoint-gb-per-s": ["2000", "0.001", '"1e7"', "0"],
    "restart-min": ["10", "0", '"10080"', "-1"],
    "ceilings": ["true", "false"],
    "grad-sync": ['"every"', '"last"', '"every,last"', '"sometimes"'],
    "keep-params-gathered": ["true", "false"],
    "tp": ["1", "[1, 2]", '"2,4"', "3", "4194305"],
    "pp": ["1", "[1, 2]", '"4"', "0"],
    "cp": ["1", "2", '"1,2"'],
    "vpp": ["1", "2", '"auto"', "1025"],
    "pp-schedule": ['"1f1b"', '"gpipe"', '"interleaved"', '"zb-h1"', '"dualpipe"'],
    "cp-kind": ['"ring"', '"all2all"', '"ring,all2all"'],
    "sequence-parallel": ["true", "false"],
    "tp-overlap": ["true", "false"],
    "recompute-layers": ["0", "2", '"1.5"', "16385"],
    "ep": ["1", "8", '"2"', "[1, 2]", "3", "0"],
    "etp": ["1", "2", "0"],
    "ep-overlap": ["true", "false"],
    "moe-capacity-factor": ["1.0", '"none"', "0", "1e9"],
    "moe-imbalance": ["1.2", "0.5", '"x"'],
    "moe-fp8-dispatch": ["true", "false", '"x"'],
    "moe-dispatcher": ['"deepep"', '"alltoall"', '"nccl"', "3", '["deepep", "alltoall"]'],
    "fp8-attention": ["true", "false", '"yes"'],
    "fp8-lm-head": ["true", "false", '"yes"'],
    "recompute-modules": ['"mla_up_proj,moe_act"', '"mlp"', '"attn"', "3", '["mlp", "moe_act"]'],
    "cuda-graphs": ['"full"', '"partial"', '"none"', '"always"', "2", '["full", "none"]'],
    "framework": ['"megatron"', '"torch"', '"deepspeed-zero3"', '"jax"', "3", '["fsdp1"]'],
    "zero": ["3", '"0,1,2,3"', "[1, 3]", "4", '"-1"', '"x"'],
    "optimizer": ['"sgd"', '"adamw"', '"adam"', "1", '["sgd", "adamw"]'],
}
assert set(_GRID_VALUES) == set(GRID_KEYS)


@fuzz_settings(100)
@given(keys=st.lists(st.sampled_from(sorted(GRID_KEYS)), max_size=5, unique=True),
       data=st.data(), fmt=st.sampled_from(["json", "csv", "table"]))
def test_fuzz_grid_toml(capsys, keys, data, fmt):
    lines = []
    for key in keys:
        value = data.draw(st.one_of(st.sampled_from(_GRID_VALUES[key]), _TOML_GARBAGE))
        lines.append(f"{key.replace('-', data.draw(st.sampled_from(['-', '_'])))} = {value}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "grid.toml"
        path.write_text("\n".join(lines) + "\n")
        keeps_the_promise(capsys, "sweep", "--grid", str(path), "--format", fmt)


# -- 5. measurement CSVs ---------------------------------------------------------------------------
_SCHEMA = {"id": "r", "model": "llama3-8b", "gpu": "h100", "n_gpus": 16, "gpus_per_node": 8,
           "inter_node_gbps_per_gpu": 400, "seq_len": 4096, "micro_batch": 2, "grad_accum": 1,
           "sharding": "full", "recompute": "none", "tokens_per_s_per_gpu": 8000,
           "network": "ib-ndr-400", "precision": "bf16", "power_cap_w": "",
           "reduce_dtype": "fp32", "global_batch_seqs": ""}
_ARCH = {"model": "tiny", "n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 4,
         "ffn_size": 256, "vocab": 100, "arch": "gpt"}
_PUBLISHED = {"id": "p", "source_key": "fuzz", "model": "MPT-7b", "n_layers": 32,
              "d_model": 4096, "n_heads": 32, "vocab": 50368, "seq_len": 2048, "gpu": "A100 80GB",
              "n_gpus": 64, "gpus_per_node": 8,
              "inter_node_interconnect": "1600 Gbps per node RoCE",
              "framework": "Composer + PyTorch FSDP", "tp": 1, "pp": 1, "cp": 1,
              "sharding": "FULL_SHARD", "micro_batch": 8, "grad_accum": "",
              "global_batch_seqs": 512, "activation_checkpointing": "false",
              "precision": "amp_bf16", "tokens_per_s_per_gpu": 3000, "tflops_per_gpu": ""}
_VTRAIN = {"# GPUs": 8, "tensor parallelism": 1, "pipeline parallelism": 1,
           "data parallelism": 8, "micro batch": 4, "global batch": 64, "sequence length": 2048,
           "hidden size": 2048, "# layers": 24, "attention heads": 16,
           "iteration time (ms)": 900.0}
_CELL = st.one_of(_GARBAGE, st.sampled_from(["", "8", "64", "1e9", "1e10", "2147483648",
                                             "4194305", "16777217", "full", "h100", "auto",
                                             "none", "80 (assumed)", "1e-3", "0.0009"]),
                  st.integers(-2, 10**6).map(str), _WORD)


#: Free-text columns of the measurement layouts: shown back as given (a label "inf" is text).
_LABELS = {"id", "model", "gpu", "arch", "sharding", "recompute", "network", "precision",
           "reduce_dtype", "framework", "source_key", "inter_node_interconnect",
           "activation_checkpointing"}


@st.composite
def measurement_csvs(draw):
    layout = draw(st.sampled_from(["schema", "arch", "published", "vtrain"]))
    base = {"schema": _SCHEMA, "arch": {**_SCHEMA, **_ARCH}, "published": _PUBLISHED,
            "vtrain": _VTRAIN}[layout]
    rows = []
    for i in range(draw(st.integers(1, 3))):
        row = dict(base)
        row[next(iter(row))] = f"{row[next(iter(row))]}{i}" if layout != "vtrain" else row[
            next(iter(row))]
        for key in draw(st.lists(st.sampled_from(sorted(base)), max_size=3, unique=True)):
            row[key] = draw(_CELL)
        rows.append(row)
    return pd.DataFrame(rows).to_csv(index=False)


@pytest.mark.slow
@fuzz_settings(100)
@given(text=measurement_csvs(), fmt=st.sampled_from(["json", "csv", "table"]),
       calibrate=st.integers(0, 9))
def test_fuzz_measurement_csv(capsys, text, fmt, calibrate):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.csv"
        path.write_text(text)
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
        echoes = {c: set(frame[c]) for c in frame.columns if c in _LABELS}
        keeps_the_promise(capsys, "validate", str(path), "--format", fmt, echoes=echoes)
        if calibrate == 0:
            keeps_the_promise(capsys, "calibrate", "--measurements", str(path), "--gpu", "h100",
                              "--framework", "", echoes=echoes)


@pytest.mark.parametrize("numbers", [
    '{"a": NaN}', '{"a": Infinity}', "1e46", "-1e-46", '"x,1e99"'])
def test_the_checker_itself_catches_bad_numbers(numbers):
    with pytest.raises(AssertionError):
        _check_json(numbers) if not numbers.startswith('"') else _check_csv("a,b\n" + numbers[1:-1])
