"""The ``fsdpsim`` command line: every command in every format, and the error contract.

Bad input must give exactly one line on stderr that starts with ``fsdpsim: error:``, nothing on
stdout, exit status 2 and never a traceback; that contract lives in :func:`fsdpsim.cli.main`, so
the error tests go through ``main`` (with capsys), the output tests through click's
``CliRunner``, and two tests run ``python -m fsdpsim.cli`` as a real process.
"""

from __future__ import annotations

from conftest import run, invoke, assert_one_line_error

import csv
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsdpsim import __version__
from fsdpsim.hardware.catalog import ENV_VAR, KINDS, load_catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.plan.parallel import SHARDINGS
from fsdpsim.model.presets import PRESETS, get_model

ROOT = Path(__file__).resolve().parent.parent
PARAM_COMPONENTS = ("embedding", "position_embedding", "attention", "mlp", "norms", "lm_head")
MEMORY_PARTS = ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes")
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
THRESHOLDS = ("min_inter_node_gbps_per_gpu", "critical_tokens_per_gpu", "max_micro_batch",
              "max_seq_len")

# A small Llama config.json, counted by hand (d=64, L=2, 4 heads of 16, 2 KV heads, ffn 128,
# vocab 1000, untied):
#   embedding = lm_head = 1000·64                      = 64,000 each
#   attention per layer = 64·64 (q) + 2·64·32 (k, v) + 64·64 (o) = 12,288
#   mlp per layer       = 3·64·128 (gate, up, down)     = 24,576
#   norms               = 2 layers · 2 · 64 + final 64   = 320
#   total               = 128,000 + 2·(12,288 + 24,576) + 320 = 202,048
TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
    "vocab_size": 1000, "max_position_embeddings": 256, "tie_word_embeddings": False,
}
TINY_LLAMA_PARAMS = {"embedding": 64_000, "position_embedding": 0, "attention": 24_576,
                     "mlp": 49_152, "norms": 320, "lm_head": 64_000}


def predict_json(*args: str) -> dict:
    return json.loads(invoke("predict", "--format", "json", *args))


def csv_rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def write_tiny_llama(folder: Path) -> Path:
    path = folder / "config.json"
    path.write_text(json.dumps(TINY_LLAMA, indent=2))
    return path


# -- version, help -------------------------------------------------------------------------------
def test_version(capsys):
    rc, out, err = run(capsys, "--version")
    assert rc == 0 and err == ""
    assert out.strip() == f"fsdpsim, version {__version__}"


def test_help_exits_zero(capsys):
    rc, out, err = run(capsys, "predict", "--help")
    assert rc == 0 and err == ""
    assert "--num-gpus" in out and "--shard-group-size" in out


@pytest.mark.skipif(not hasattr(click.exceptions, "NoArgsIsHelpError"),
                    reason="click < 8.2 prints the help and exits 0 for a bare group")
@pytest.mark.parametrize("args", [(), ("catalog",), ("model",)])
def test_missing_command_is_one_line(capsys, args):
    line = assert_one_line_error(*run(capsys, *args))
    assert "missing command" in line


# -- catalog -------------------------------------------------------------------------------------
def test_catalog_list_table_has_every_kind():
    out = invoke("catalog", "list")
    cat = load_catalog()
    for kind in KINDS:
        title = kind if kind.endswith("s") else f"{kind}s"
        assert f"{title} ({len(cat.ids(kind))})" in out


@pytest.mark.parametrize("kind", KINDS)
def test_catalog_list_json_one_kind(kind):
    rows = json.loads(invoke("catalog", "list", "--kind", kind, "--format", "json"))
    # every row says its catalog kind (a network's own `kind` field must not overwrite it)
    assert {r["kind"] for r in rows} == {kind}
    assert [r["id"] for r in rows] == load_catalog().ids(kind)


@pytest.mark.parametrize("kind", KINDS)
def test_catalog_list_table_one_kind(kind):
    out = invoke("catalog", "list", "--kind", kind)
    assert out.startswith(f"{kind if kind.endswith('s') else kind + 's'} (")
    assert all(f"{k}s (" not in out for k in KINDS if k != kind)


def test_catalog_list_csv_all_kinds():
    rows = csv_rows(invoke("catalog", "list", "--format", "csv"))
    header, body = rows[0], rows[1:]
    assert header[:2] == ["kind", "id"]
    cat = load_catalog()
    assert len(body) == sum(len(cat.ids(k)) for k in KINDS)
    assert {r[0] for r in body} == set(KINDS)


@pytest.mark.parametrize("entry, kind, ident", [
    ("h100-sxm5-80gb", "accelerator", "h100-sxm5-80gb"),
    ("h100", "accelerator", "h100-sxm5-80gb"),            # alias
    ("H100", "accelerator", "h100-sxm5-80gb"),            # lookups are case-insensitive
    ("ib-ndr-400", "network", "ib-ndr-400"),
    ("dgx-h100", "node", "dgx-h100"),
    ("juwels-booster", "cluster", "juwels-booster"),
])
def test_catalog_show(entry, kind, ident):
    data = json.loads(invoke("catalog", "show", entry, "--format", "json"))
    assert data["kind"] == kind and data["id"] == ident
    assert data["entry"]["id"] == ident
    assert data["entry"]["source"] and data["entry"]["retrieved"]
    assert data["files"] and all(Path(f).is_file() for f in data["files"])

    table = invoke("catalog", "show", entry)
    assert table.splitlines()[0] == f"{kind} {ident}"
    assert "files" in table

    rows = csv_rows(invoke("catalog", "show", entry, "--format", "csv"))
    assert len(rows) == 2
    assert dict(zip(*rows))["kind"] == kind


def test_catalog_show_network_keeps_its_own_kind_field():
    data = json.loads(invoke("catalog", "show", "ib-ndr-400", "--format", "json"))
    assert data["kind"] == "network" and data["entry"]["kind"] == "infiniband"


# -- model ---------------------------------------------------------------------------------------
def test_model_list_all_formats():
    rows = json.loads(invoke("model", "list", "--format", "json"))
    assert {r["id"] for r in rows} == set(PRESETS)
    assert [r["n_params"] for r in rows] == sorted(r["n_params"] for r in rows)
    table = invoke("model", "list")
    assert "llama3-70b" in table and "gpt3-175b" in table
    assert len(csv_rows(invoke("model", "list", "--format", "csv"))) == len(PRESETS) + 1


def test_model_show_llama3_70b_json():
    data = json.loads(invoke("model", "show", "llama3-70b", "--format", "json"))
    # Meta-Llama-3-70B on the Hugging Face hub: 70,553,706,496 parameters.
    assert data["n_params"] == 70_553_706_496 == get_model("llama3-70b").n_params
    assert tuple(data["params"]) == PARAM_COMPONENTS
    assert sum(data["params"].values()) == data["n_params"]
    assert data["params"]["position_embedding"] == 0      # rotary
    assert data["params"]["embedding"] == data["params"]["lm_head"] == 128_256 * 8192
    assert data["spec"]["n_layers"] == 80 and data["spec"]["n_kv_heads"] == 8


def test_model_show_llama3_70b_table_and_csv():
    table = invoke("model", "show", "llama3-70b")
    assert table.splitlines()[0] == "model llama3-70b"
    assert "70,553,706,496" in table and "100.00 %" in table
    for component in PARAM_COMPONENTS:
        assert component in table
    rows = csv_rows(invoke("model", "show", "llama3-70b", "--format", "csv"))
    assert len(rows) == 2
    row = dict(zip(*rows))
    assert int(row["n_params"]) == 70_553_706_496
    assert sum(int(row[f"params.{c}"]) for c in PARAM_COMPONENTS) == 70_553_706_496


def test_model_show_config_json(tmp_path):
    path = write_tiny_llama(tmp_path)
    data = json.loads(invoke("model", "show", str(path), "--format", "json"))
    assert data["params"] == TINY_LLAMA_PARAMS
    assert data["n_params"] == 202_048 == sum(TINY_LLAMA_PARAMS.values())
    # a folder that holds config.json works too, and predict takes the same path
    assert json.loads(invoke("model", "show", str(tmp_path), "--format", "json")) == data
    p = predict_json("--model", str(path), "--num-gpus", "8", "--seq-len", "256")
    assert p["fits"] is True and p["step_time_s"] > 0


# -- predict: output -----------------------------------------------------------------------------
def test_predict_table_has_headline_sections():
    out = invoke("predict", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "64")
    assert out.startswith("fsdpsim predict: llama3-8b on 64 GPUs")
    for section in ("throughput", "step time", "tokens/s per GPU", "MFU / HFU", "bottleneck",
                    "memory per GPU", "peak", "time per step", "all-gather", "reduce-scatter",
                    "exposed comm", "thresholds", "largest micro-batch that fits"):
        assert section in out, section
    # the bandwidth threshold is shown beside what the GPU has (1x 400 Gb/s NIC per GPU)
    assert "(have 400 Gb/s)" in out


def test_predict_json_keys_and_consistency():
    d = predict_json("--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "64")
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu",
                "model_flops_per_step", "fits", "bottleneck", "memory", "comm", "thresholds"):
        assert key in d, key
    m, c, th, tr = d["memory"], d["comm"], d["thresholds"], d["training"]
    assert {"peak_bytes", "capacity_bytes", *MEMORY_PARTS} <= set(m)
    for name in COLLECTIVES:
        assert c[f"{name}_bytes"] >= 0 and c[f"{name}_s"] >= 0
    assert "exposed_s" in c or "exposed_comm_s" in c
    assert set(THRESHOLDS) <= set(th)

    assert isinstance(d["fits"], bool) and d["fits"] == (m["peak_bytes"] <= m["capacity_bytes"])
    assert d["bottleneck"] in ("compute", "hbm_bandwidth", "intra_node_link", "inter_node_link")
    assert 0 < d["mfu"] <= 1 and 0 < d["hfu"] <= 1
    tokens_per_step = tr["global_batch"] * tr["seq_len"]
    assert tr["global_batch"] == tr["micro_batch"] * tr["grad_accum"] * 64
    assert d["tokens_per_s"] * d["step_time_s"] == pytest.approx(tokens_per_step, rel=1e-9)
    assert d["tokens_per_s"] == pytest.approx(64 * d["tokens_per_s_per_gpu"], rel=1e-9)
    assert m["capacity_bytes"] == load_catalog().accelerator("h100").memory_bytes
    # full sharding: gradients are reduce-scattered, never all-reduced
    assert c["all_reduce_bytes"] == 0 and c["all_gather_bytes"] > 0


def test_predict_csv_is_one_header_and_one_row():
    args = ("--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "64")
    rows = csv_rows(invoke("predict", "--format", "csv", *args))
    assert len(rows) == 2 and len(rows[0]) == len(rows[1])
    row = dict(zip(*rows))
    d = predict_json(*args)
    assert float(row["step_time_s"]) == pytest.approx(d["step_time_s"], rel=1e-12)
    assert float(row["memory.peak_bytes"]) == pytest.approx(d["memory"]["peak_bytes"])
    assert "comm.all_gather_bytes" in row and "thresholds.max_seq_len" in row


@pytest.mark.parametrize("cluster, gpu_id, per_node", [
    ("dgx-h100", "h100-sxm5-80gb", 8),
    ("juwels-booster", "a100-sxm4-40gb", 4),
])
def test_predict_on_a_cluster(cluster, gpu_id, per_node):
    d = predict_json("--cluster", cluster, "--num-gpus", "64")
    assert d["system"].startswith(cluster) and gpu_id in d["system"]
    assert d["plan"]["gpus_per_node"] == per_node
    assert d["step_time_s"] > 0


def test_predict_inter_node_bandwidth_override_is_monotone():
    base = predict_json("--num-gpus", "64")
    slow = predict_json("--num-gpus", "64", "--inter-node-gbps-per-gpu", "100")
    assert "100 Gb/s per GPU" in slow["system"]
    assert slow["step_time_s"] >= base["step_time_s"]
    assert slow["comm"]["all_gather_s"] > base["comm"]["all_gather_s"]
    assert slow["comm"]["all_gather_bytes"] == base["comm"]["all_gather_bytes"]


def test_predict_hybrid_sharding():
    d = predict_json("--num-gpus", "64", "--sharding", "hybrid", "--shard-group-size", "8")
    assert d["plan"]["sharding"] == "hybrid"
    assert (d["plan"]["dp_shard"], d["plan"]["dp_replicate"]) == (8, 8)
    assert d["comm"]["all_reduce_bytes"] > 0        # gradients are all-reduced across replicas


def test_predict_no_reshard_after_forward():
    pinned = ("--num-gpus", "64", "--micro-batch", "1", "--recompute", "full")
    keep = predict_json(*pinned, "--no-reshard-after-forward")
    free = predict_json(*pinned)
    assert keep["plan"]["reshard_after_forward"] is False
    assert free["plan"]["reshard_after_forward"] is True
    # without the backward re-gather there is one all-gather per step instead of two,
    # and the gathered parameters stay in memory
    assert keep["comm"]["all_gather_bytes"] < free["comm"]["all_gather_bytes"]
    assert keep["memory"]["peak_bytes"] > free["memory"]["peak_bytes"]


def test_predict_full_recompute():
    d = predict_json("--num-gpus", "64", "--recompute", "full")
    assert d["training"]["recompute"] == "full"
    assert d["time"]["recompute_s"] > 0
    assert d["hfu"] > d["mfu"]          # the forward runs twice


def test_predict_mfu_conventions_bf16_and_fp8():
    """Without recompute HFU >= MFU (one attention convention); the table
    names the peak; FP8 is measured against the BF16 dense peak (published tables) with the
    FP8 peak's MFU beside it, in the table and the JSON."""
    base = ("--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "8", "--micro-batch", "1",
            "--recompute", "none")
    bf16 = predict_json(*base)
    fp8 = predict_json(*base, "--precision", "fp8")
    peaks = load_catalog().accelerator("h100").peak_flops_per_s
    for d in (bf16, fp8):
        assert d["hfu"] >= d["mfu"] > 0
        assert d["utilisation"]["peak_precision"] == "bf16"
        assert d["utilisation"]["peak_flops_per_s_per_gpu"] == peaks["bf16"]
        per_gpu = d["model_flops_per_step"] / d["step_time_s"] / 8
        assert d["mfu"] == pytest.approx(per_gpu / peaks["bf16"], rel=1e-9)
    assert bf16["mfu_native"] == bf16["mfu"]
    assert fp8["utilisation"]["native_precision"] == "fp8"
    assert fp8["mfu_native"] == pytest.approx(fp8["mfu"] * peaks["bf16"] / peaks["fp8"],
                                              rel=1e-9)
    # faster in FP8 means a higher MFU against the same (BF16) peak
    assert fp8["tokens_per_s"] > bf16["tokens_per_s"] and fp8["mfu"] > bf16["mfu"]
    table = invoke("predict", *base, "--precision", "fp8")
    assert "of the BF16 dense peak, 989 TFLOP/s per GPU" in table
    assert "MFU of FP8 peak" in table and "MFU of FP8" not in invoke("predict", *base)
    assert max(len(line) for line in table.splitlines() if "MFU" in line) <= 100


def test_predict_micro_and_global_batch():
    d = predict_json("--num-gpus", "64", "--micro-batch", "2", "--global-batch", "256")
    tr = d["training"]
    assert (tr["micro_batch"], tr["grad_accum"], tr["global_batch"]) == (2, 2, 256)


def test_predict_model_that_does_not_fit_is_not_an_error(capsys):
    args = ("predict", "--model", "llama3-405b", "--gpu", "a100-sxm4-40gb", "--num-gpus", "8",
            "--micro-batch", "1", "--recompute", "none")
    rc, out, err = run(capsys, *args, "--format", "json")
    assert rc == 0 and err == ""
    d = json.loads(out)
    m = d["memory"]
    assert d["fits"] is False and d["bottleneck"] == "memory_capacity"
    over_gib = (m["peak_bytes"] - m["capacity_bytes"]) / 2**30
    assert over_gib > 0
    note = next(n for n in d["notes"] if n.startswith("does not fit"))
    assert f"{over_gib:.1f} GiB more" in note
    assert d["thresholds"]["max_micro_batch"] == 0

    rc, out, err = run(capsys, *args)
    assert rc == 0 and err == ""
    assert f"DOES NOT FIT, {over_gib:,.2f} GiB over" in out
    assert "none: even micro-batch 1 does not fit" in out


# -- bad input: one line, exit 2 -----------------------------------------------------------------
BAD_INPUT = [
    (("predict", "--gpu", "h10"), ["'h10'", "h100"]),
    (("predict", "--model", "llama3-7b"), ["'llama3-7b'", "llama3-8b"]),
    (("predict", "--cluster", "no-such-cluster"), ["'no-such-cluster'"]),
    (("predict", "--cluster", "h100"), ["node or cluster"]),
    (("predict", "--num-gpus", "12", "--gpus-per-node", "8"), ["12", "8"]),
    (("predict", "--sharding", "hybrid", "--shard-group-size", "3", "--num-gpus", "16"),
     ["3", "16"]),
    (("predict", "--global-batch", "100", "--num-gpus", "64"), ["100", "64"]),
    (("predict", "--micro-batch", "3", "--global-batch", "128", "--num-gpus", "64"),
     ["128", "3"]),
    (("predict", "--precision", "fp8", "--gpu", "a100"), ["fp8", "a100"]),
    (("predict", "--precision", "bf16", "--gpu", "v100"), ["bf16", "v100", "fp16"]),
    (("predict", "--no-such-option"), ["--no-such-option"]),
    (("predict", "--sharding", "fsdp"), ["'fsdp'", "hybrid"]),
    (("predict", "--recompute", "some"), ["'some'", "selective"]),
    (("predict", "--format", "xml"), ["'xml'", "json"]),
    (("predict", "--num-gpus", "0"), ["--num-gpus"]),
    (("predict", "--num-gpus", "eight"), ["--num-gpus", "eight"]),
    (("predict", "--num-gpus", str(2**40)), ["--num-gpus"]),
    (("predict", "--seq-len", "abc"), ["--seq-len", "'abc'"]),
    (("predict", "--seq-len", "0"), ["--seq-len"]),
    (("predict", "--seq-len", "1.5"), ["--seq-len", "'1.5'"]),
    (("predict", "--seq-len", "nan"), ["--seq-len", "'nan'"]),
    (("predict", "--seq-len", "inf"), ["--seq-len", "'inf'"]),
    (("predict", "--micro-batch", "1e400"), ["--micro-batch", "'1e400'"]),
    (("predict", "--micro-batch", "1e30"), ["--micro-batch"]),
    (("predict", "--global-batch", "-8"), ["--global-batch"]),
    (("predict", "--inter-node-gbps-per-gpu", "-1"), ["--inter-node-gbps-per-gpu"]),
    (("predict", "--inter-node-gbps-per-gpu", "nan"), ["--inter-node-gbps-per-gpu"]),
    (("--catalog", "/nonexistent", "catalog", "list"), ["/nonexistent"]),
    (("catalog", "show", "nothing-like-this"), ["'nothing-like-this'"]),
    (("catalog", "list", "--kind", "gpu"), ["'gpu'", "accelerator"]),
    (("model", "show", "no-such-model"), ["'no-such-model'"]),
    (("model", "show", "/nonexistent/config.json"), ["/nonexistent/config.json"]),
    (("model", "show"), ["MODEL_NAME"]),
    (("no-such-command",), ["no-such-command"]),
]


@pytest.mark.parametrize("args, named", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(capsys, args, named):
    line = assert_one_line_error(*run(capsys, *args))
    for text in named:
        assert text in line, (text, line)


def test_catalog_dir_with_malformed_toml(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[network]]\nid = "my-net"\nname = \n')
    line = assert_one_line_error(*run(capsys, "--catalog", str(tmp_path), "catalog", "list"))
    assert str(bad) in line and "line 3" in line


def test_env_catalog_with_unknown_key(capsys, tmp_path, monkeypatch):
    (tmp_path / "net.toml").write_text(
        '[[network]]\nid = "my-net"\nname = "x"\nsource = "s"\nretrieved = 2025-01-01\n'
        'kind = "infiniband"\ngbit_per_s_per_nic = 400\nlatency_us = 1.0\n'
        'achievable_fraction = 0.9\nfraction_source = "s"\nbandwidth_gbps = 400\n')
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    line = assert_one_line_error(*run(capsys, "predict", "--gpu", "h100"))
    assert str(tmp_path / "net.toml") in line and "'bandwidth_gbps'" in line
    assert "gbit_per_s_per_nic" in line                   # what is accepted


def test_env_catalog_entry_is_used(capsys, tmp_path, monkeypatch):
    """A valid FSDPSIM_CATALOG folder extends the built-in catalog."""
    (tmp_path / "net.toml").write_text(
        '[[network]]\nid = "my-net"\nname = "Mine"\nsource = "s"\nretrieved = 2025-01-01\n'
        'kind = "ethernet"\ngbit_per_s_per_nic = 25\nlatency_us = 10.0\n'
        'achievable_fraction = 0.8\nfraction_source = "s"\n')
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    rc, out, err = run(capsys, "catalog", "show", "my-net", "--format", "json")
    assert rc == 0 and err == ""
    assert json.loads(out)["files"] == [str(tmp_path / "net.toml")]


def test_model_show_malformed_config_json(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "llama",\n  "hidden_size": 64,,\n}\n')
    line = assert_one_line_error(*run(capsys, "model", "show", str(path)))
    assert str(path) in line and "line 3" in line


def test_model_show_config_json_missing_key(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in TINY_LLAMA.items() if k != "hidden_size"}))
    line = assert_one_line_error(*run(capsys, "model", "show", str(path)))
    assert str(path) in line and "'hidden_size'" in line


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary", b'{"model_type": ["llama"]}'])
def test_model_show_unreadable_config_json(capsys, tmp_path, content):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    assert_one_line_error(*run(capsys, "model", "show", str(path)))


def test_multi_line_messages_are_folded_to_one_line(capsys, monkeypatch):
    def boom(name):
        raise ConfigError("first line\nsecond line")

    monkeypatch.setattr("fsdpsim.model.presets.get_model", boom)
    line = assert_one_line_error(*run(capsys, "model", "show", "llama3-8b"))
    assert line == "fsdpsim: error: first line; second line"


# -- a real process, end to end ------------------------------------------------------------------
def _run_process(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                      os.environ.get("PYTHONPATH")]))}
    env.pop(ENV_VAR, None)
    return subprocess.run([sys.executable, "-m", "fsdpsim.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120)


def test_process_bad_input_has_no_traceback():
    proc = _run_process("predict", "--gpu", "h10", "--num-gpus", "64")
    line = assert_one_line_error(proc.returncode, proc.stdout, proc.stderr)
    assert "h100" in line


def test_process_predict_json():
    proc = _run_process("predict", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "16",
                        "--format", "json")
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads(proc.stdout)["plan"]["num_gpus"] == 16


# -- random option values ------------------------------------------------------------------------
_WORD = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=10)
_NUMBERISH = st.sampled_from(["auto", "AUTO", "32k", "1.5", "4096.0", "nan", "inf", "-inf",
                              "1e400", "1e-400", "0", "-1", "0x10", "", " 8 ", "1_024", "2b"])


def _count(lo: int, hi: int):
    return st.one_of(st.integers(lo, hi).map(str), _NUMBERISH, _WORD)


_OPTIONS = {
    "--gpu": st.one_of(st.sampled_from(["h100", "a100", "a100-sxm4-40gb", "v100", "mi300x",
                                        "tpu-v5p", "b200", "gaudi3", "h10", "H100"]), _WORD),
    "--model": st.one_of(st.sampled_from(sorted(PRESETS)), _WORD),
    "--num-gpus": _count(-2, 1024),
    "--seq-len": _count(-2, 70_000),
    "--micro-batch": _count(-1, 64),
    # small: predict.py enumerates every divisor of the per-GPU batch (see the report)
    "--global-batch": _count(-1, 8192),
    "--sharding": st.one_of(st.sampled_from(SHARDINGS), st.sampled_from(["FULL", "hsdp", ""])),
    "--shard-group-size": _count(-1, 64),
}


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.fixed_dictionaries({}, optional=_OPTIONS))
def test_predict_random_options(capsys, options):
    args = ["predict", "--format", "json"] + [f"{k}={v}" for k, v in options.items()]
    rc, out, err = run(capsys, *args)
    assert rc in (0, 2), (args, rc, err)
    if rc == 2:
        assert_one_line_error(rc, out, err)
        return
    d = json.loads(out)
    assert isinstance(d["fits"], bool)
    assert d["step_time_s"] is None or d["step_time_s"] > 0
    assert math.isfinite(d["memory"]["peak_bytes"])


def test_catalog_list_fits_100_columns_and_csv_keeps_everything():
    """The table view shortens headers and long names and leaves out the columns that do not
    fit (naming them); CSV keeps every column and every character."""
    out = invoke("catalog", "list")
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "GiB" in out and "BF16 TF/s" in out
    csv = invoke("catalog", "list", "--format", "csv")
    assert "memory_gib" in csv.splitlines()[0] and "aliases" in csv.splitlines()[0]
    assert "NVIDIA A100 SXM4 64GB (custom, CINECA Leonardo)" in csv
