"""Regression tests of 18 defects found by fuzzing 904 hostile inputs, one test (or a few) per
defect. The shared machinery they pin down: one number reader
(:mod:`fsdpsim.util.numbers`), one file reader (:mod:`fsdpsim.util.files`), one output writer
(:mod:`fsdpsim.util.output`). The property-based fuzz suite that keeps them out is test_fuzz.py.
"""

from __future__ import annotations

from conftest import ROOT, assert_one_line_error, invoke, run

import io
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fsdpsim.cli import sweep as cli_sweep

from fsdpsim.util import numbers

from fsdpsim.util import output
from fsdpsim.hardware.catalog import ENV_VAR, load_catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.drivers.sweep.grid import build_grid
from fsdpsim.util.numbers import Rule, read_number
from fsdpsim.drivers.least_memory import full_shard_peaks
from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
from fsdpsim.model.presets import get_model
from fsdpsim.report.render import to_json
from fsdpsim.report.sweep_table import with_predict_commands
from fsdpsim.drivers.sweep.run import run_sweep
from fsdpsim.hardware.system import resolve_system

TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}
SCHEMA_ROW = dict(id="x", model="llama3-8b", gpu="h100", n_gpus=16, gpus_per_node=8,
                  inter_node_gbps_per_gpu=400, seq_len=4096, micro_batch=2, grad_accum=1,
                  sharding="full", recompute="none", tokens_per_s_per_gpu=8000)


def _process(*args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop(ENV_VAR, None)
    return subprocess.run([sys.executable, "-m", "fsdpsim.cli", *args], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, timeout=300)


def _config(tmp_path: Path, text: str, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- the one number reader ----------------------------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "1e-400",
                                   "٨", "８", "8\u200b", "0x10", "", " ", "1" + "0" * 400,
                                   float("nan"), float("inf"), True, None, [8], 10**400],
                         ids=lambda v: repr(v)[:12])
def test_number_reader_rejects_with_one_message(value):
    rule = Rule(1, 2**31, whole=True)
    with pytest.raises(ConfigError) as info:
        read_number(value, "--thing", rule)
    message = str(info.value)
    assert message.startswith("--thing: ")
    assert "is not accepted; accepted: a whole number from 1 to 2,147,483,648" in message
    assert len(message) < 200  # a 400-digit value is shown by its size, not spelled out


def test_number_reader_reads_what_users_write():
    count = Rule(1, 2**31, whole=True, suffixes=numbers.DECIMAL)
    assert read_number(" 1_024 ", "x", count) == 1024
    assert read_number("2k", "x", count) == 2000
    assert read_number("4096.0", "x", count) == 4096
    assert isinstance(read_number(8.0, "x", count), int)
    assert read_number("32k", "--seq-len", numbers.SEQ_LEN) == 32768           # item 15
    assert read_number("1m", "--seq-len", numbers.SEQ_LEN) == 2**20
    assert read_number("2.5e3", "x", Rule(0, 1e4)) == 2500.0
    with pytest.raises(ConfigError):
        read_number("8", "x", count, text=False)  # TOML/JSON: a string is not a number
    assert read_number(np.int64(8), "x", count) == 8


# -- item 1: non-finite and absurd sizes in a config.json ----------------------------------------
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e300", "1" + "0" * 400,
                                   "1" + "0" * 5000, "-4", "4.5", '"64"', "true", "null"],
                         ids=lambda v: v[:12])
@pytest.mark.parametrize("command", ["model show", "predict --model"])
def test_1_config_json_sizes_are_read_by_the_number_reader(capsys, tmp_path, value, command):
    path = _config(tmp_path, json.dumps(TINY_LLAMA).replace('"hidden_size": 64',
                                                           f'"hidden_size": {value}'))
    line = assert_one_line_error(*run(capsys, *command.split(), path, "--format", "json"))
    assert path in line
    if value != "null":  # null: a missing required key
        assert "'hidden_size'" in line and "accepted" in line


def test_1_absurd_model_from_plausible_fields_is_refused(capsys, tmp_path):
    """Each field within its range, the product not: a 2^36-wide attention."""
    path = _config(tmp_path, json.dumps({**TINY_LLAMA, "num_attention_heads": 64,
                                         "head_dim": 2**20}))
    line = assert_one_line_error(*run(capsys, "model", "show", path))
    assert "attention width" in line and "accepted: at most 1,048,576" in line


# -- item 2: deep nesting ------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"model_type": "llama", "x": ' + "[" * 100_000 + "]" * 100_000
                                  + "}"])
def test_2_deeply_nested_json_is_one_line(capsys, tmp_path, text):
    path = _config(tmp_path, text)
    line = assert_one_line_error(*run(capsys, "model", "show", path))
    assert "nested too deeply" in line


def test_2_deeply_nested_toml_is_one_line(capsys, tmp_path):
    (tmp_path / "deep.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    line = assert_one_line_error(*run(capsys, "--catalog", str(tmp_path), "catalog", "list"))
    assert "nested too deeply" in line
    line = assert_one_line_error(*run(capsys, "sweep", "--grid", str(tmp_path / "deep.toml")))
    assert "nested too deeply" in line


# -- item 3: names too long for the file system --------------------------------------------------
@pytest.mark.parametrize("args", [("predict", "--model"), ("sweep", "--model"),
                                  ("model", "show")])
@pytest.mark.parametrize("name", ["a" * 300, "/tmp/" + "a" * 300 + ".json", "b" * 5000],
                         ids=["300", "path-300", "5000"])
def test_3_long_model_names_are_one_line(capsys, args, name):
    line = assert_one_line_error(*run(capsys, *args, name))
    assert len(line) < 1300  # shown cut, with its length


def test_3_long_model_name_in_a_measurement_cell(capsys, tmp_path):
    path = tmp_path / "m.csv"
    pd.DataFrame([{**SCHEMA_ROW, "model": "m" * 300}]).to_csv(path, index=False)
    line = assert_one_line_error(*run(capsys, "validate", str(path)))
    assert "(300 characters)" in line


# -- item 4: files read with a cap --------------------------------------------------------------
@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_4_dev_zero_is_refused_after_the_cap(capsys):
    line = assert_one_line_error(*run(capsys, "sweep", "--grid", "/dev/zero"))
    assert "'/dev/zero'" in line and "16 MiB" in line
    # a model config must be a regular file: a device is refused before it is read
    line = assert_one_line_error(*run(capsys, "predict", "--model", "/dev/zero"))
    assert "'/dev/zero'" in line and "a device; give a regular file" in line


@pytest.mark.parametrize("command, name, size_mib", [
    (("predict", "--model"), "big.json", 17), (("sweep", "--grid"), "big.toml", 17),
    (("validate",), "big.csv", 257), (("plot", "memory", "--input"), "big.csv", 4097)])
def test_4_big_files_are_refused_by_their_size(capsys, tmp_path, command, name, size_mib):
    big = tmp_path / name
    with big.open("wb") as fh:  # sparse: no disk used, and never read
        fh.truncate(size_mib * 2**20)
    extra = ["-o", str(tmp_path / "x.png")] if command[0] == "plot" else []
    line = assert_one_line_error(*run(capsys, *command, str(big), *extra))
    assert f"is {size_mib:,}.0 MiB, more than the" in line


def test_4_a_folder_is_not_a_file(tmp_path):
    from fsdpsim.util.files import read_text

    with pytest.raises(ConfigError, match="is a folder; give a file"):
        read_text(tmp_path, "grid file")


# -- item 5: empty measurement files -------------------------------------------------------------
@pytest.mark.parametrize("content", ["", "\n\n\n", None, ",".join(SCHEMA_ROW) + "\n"])
@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_5_empty_or_header_only_measurements(capsys, tmp_path, content, command):
    path = "/dev/null" if content is None else str(tmp_path / "m.csv")
    if content is not None:
        Path(path).write_text(content)
    args = (["validate", path] if command == "validate"
            else ["calibrate", "--measurements", path, "--gpu", "a100"])
    line = assert_one_line_error(*run(capsys, *args))
    assert ("only a header line" if content and content.strip() else "the file is empty") in line


def test_5_a_filter_that_matches_nothing_on_odd_columns(capsys, tmp_path):
    path = tmp_path / "m.csv"
    pd.DataFrame([SCHEMA_ROW, {**SCHEMA_ROW, "id": "y", "gpu": "a100"}]).assign(
        framework=[1, 2]).to_csv(path, index=False)
    line = assert_one_line_error(*run(capsys, "validate", str(path), "--framework", "fsdp"))
    assert "the file has GPUs" in line and "a100" in line


# -- items 6 and 7: bandwidths -------------------------------------------------------------------
@pytest.mark.parametrize("value", ["5e-324", "1e-300", "0", "0.0009", "-1", "inf", "1e400",
                                   "nan", "1e6"])
def test_6_7_bandwidth_outside_the_physical_range_is_the_same_error_everywhere(capsys, value):
    lines = {assert_one_line_error(*run(capsys, command, "--inter-node-gbps-per-gpu", value))
             for command in ("predict", "sweep")}
    assert len(lines) == 1, lines  # the same option means the same thing
    assert f"--inter-node-gbps-per-gpu: '{value}' is not accepted; accepted: a number from " \
        "0.001 to 100,000 Gb/s per GPU" in lines.pop()


def test_6_bandwidth_at_the_floor_gives_finite_numbers_and_no_warning(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning fails the test
        rc, out, err = run(capsys, "predict", "--model", "llama3.1-405b", "--num-gpus", "4096",
                           "--inter-node-gbps-per-gpu", "0.001", "--format", "json")
        assert rc == 0 and err == ""
        d = json.loads(out)
        assert 1e5 < d["step_time_s"] < 1e8 and d["tokens_per_s"] > 0 and d["mfu"] > 0
        assert d["bottleneck"] == "inter_node_link"
        rc, out, err = run(capsys, "sweep", "--model", "llama3.1-405b", "--num-gpus", "4096",
                           "--inter-node-gbps-per-gpu", "0.001", "--format", "csv")
        assert rc == 0 and err == "" and not re.search(r"(?<![a-z])(nan|inf)(?![a-z])",
                                                       out.lower())


def test_6_resolved_share_below_the_floor_is_refused(capsys):
    line = assert_one_line_error(*run(capsys, "predict", "--cluster", "dgx-h100",
                                      "--gpus-per-node", "4194304", "--num-gpus", "4194304"))
    assert "is not accepted; accepted: a number from 0.001" in line and "--gpus-per-node" in line


# -- item 8: the cluster's size ------------------------------------------------------------------
def test_8_predict_refuses_more_gpus_than_the_cluster_has_in_the_sweep_words(capsys, cat):
    line = assert_one_line_error(*run(capsys, "predict", "--cluster", "eos", "--num-gpus",
                                      "8192"))
    frame = run_sweep(build_grid(cat, {"cluster": "eos", "num-gpus": "8192"}))
    assert frame["infeasible"].iloc[0] in line and "(4608)" in line
    rc, _, _ = run(capsys, "predict", "--cluster", "eos", "--num-gpus", "4608")
    assert rc == 0


# -- items 9 and 16: what would fit --------------------------------------------------------------
@pytest.mark.parametrize("args", [("--sharding", "none"),
                                  ("--sharding", "hybrid", "--shard-group-size", "1")])
def test_9_advice_for_unsharded_plans_names_these_gpus_and_the_fewest(capsys, args):
    rc, out, err = run(capsys, "predict", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus",
                       "64", *args, "--format", "json")
    note = next(n for n in json.loads(out)["notes"] if n.startswith("does not fit"))
    assert "it fits on these 64 GPUs (and on as few as 2)" in note
    assert "128" not in note


def test_16_memory_per_gpu_stops_falling_past_a_few_thousand_gpus(cat):
    spec, system = get_model("llama3-8b"), resolve_system(cat, gpu="h100")
    worlds, peaks, fits = full_shard_peaks(spec, system, ParallelPlan(num_gpus=8, gpus_per_node=8),
                                           TrainingConfig(seq_len=4096))
    gib = dict(zip(worlds.astype(int), peaks / 2**30))
    assert int(worlds[np.argmin(peaks)]) == 8192 and gib[8192] == pytest.approx(11.43, abs=0.01)
    assert gib[2**22] == pytest.approx(977.1, abs=0.1)  # FSDP2 pads every parameter to 2^22
    assert list(worlds[:4]) == [1, 2, 4, 8]  # the advice looks below the plan's world too


@pytest.mark.slow
def test_16_advice_and_auto_know_about_padding(capsys):
    rc, out, _ = run(capsys, "predict", "--num-gpus", "4194304", "--format", "json")
    d = json.loads(out)
    note = next(n for n in d["notes"] if n.startswith("does not fit"))
    assert "it fits on 2 to 262,144 GPUs; past 8,192 GPUs memory per GPU grows again" in note
    rc, out, _ = run(capsys, "predict", "--model", "gpt-1t", "--gpu", "v100", "--precision",
                     "fp16", "--num-gpus", "8", "--format", "json")
    note = next(n for n in json.loads(out)["notes"] if n.startswith("does not fit"))
    assert "does not fit on 1 to 4,194,304 GPUs either: the least memory per GPU is" in note
    # --best leaves sharding free: at 2^22 GPUs full sharding does not fit, hybrid does (one
    # sequence per GPU: --free-batch, as the default ~4M-token batch does not split that far)
    rows = json.loads(invoke("sweep", "--num-gpus", "4194304", "--best", "--free-batch",
                             "--format", "json"))
    assert rows[0]["plan.sharding"] == "hybrid" and rows[0]["fits"] is True


# -- item 10: catalog folders --------------------------------------------------------------------
NETWORK = ('[[network]]\nid = "my-net"\nname = "Mine"\nsource = "s"\nretrieved = 2025-01-01\n'
           'kind = "ethernet"\ngbit_per_s_per_nic = 25\nlatency_us = 10.0\n'
           'achievable_fraction = 0.8\nfraction_source = "s"\n')


def test_10_empty_catalog_folder_name_is_refused(capsys):
    line = assert_one_line_error(*run(capsys, "--catalog", "", "catalog", "list"))
    assert "catalog folder '' is an empty name" in line


def test_10_empty_env_var_names_no_folder(capsys, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "")
    rc, out, err = run(capsys, "catalog", "list", "--kind", "network", "--format", "json")
    assert rc == 0 and err == ""


def test_10_other_toml_and_deep_folders_are_not_catalog_files(capsys, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.black]\nline = 1\n')
    (tmp_path / "net.toml").write_text(NETWORK)
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (deep / "broken.toml").write_text("this is not toml [")  # two levels down: never read
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.toml").write_text("not toml [")  # hidden: never read
    rc, out, err = run(capsys, "--catalog", str(tmp_path), "catalog", "show", "my-net")
    assert rc == 0 and err == ""
    other = tmp_path / "other"  # (a folder list is loaded once per process: a new folder)
    other.mkdir()
    (other / "typo.toml").write_text("[[acelerator]]\nid = 'x'\n")  # still checked
    line = assert_one_line_error(*run(capsys, "--catalog", str(other), "catalog", "list"))
    assert "did you mean: accelerator" in line


# -- item 11: output that cannot be written ------------------------------------------------------
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("args", [("predict",), ("catalog", "list"), ("model", "list"),
                                  ("search", "--num-gpus", "8"),
                                  ("sweep", "--num-gpus", "8..64", "--format", "csv"),
                                  ("sweep", "--num-gpus", "8..64", "-o", "/dev/full")])
def test_11_full_device_is_one_line_exit_2(args):
    with open("/dev/full", "w") as full:
        proc = _process(*args, stdout=full)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "No space left on device" in proc.stderr and proc.stderr.startswith("fsdpsim: error:")


def test_11_closed_pipe_is_quiet_exit_0():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "fsdpsim.cli", "sweep", "--num-gpus",
                             "8..4096", "--seq-len", "1k..32k", "--micro-batch", "1..64",
                             "--recompute", "full", "--format", "csv"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, env=env)
    assert proc.stdout.readline().startswith(b"model,")
    proc.stdout.close()  # like `| head -1`
    assert proc.wait(timeout=300) == 0
    assert proc.stderr.read() == b""


def test_11_writer_errors_in_process(monkeypatch, capsys):
    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sys.stdout, "write", full)
    with pytest.raises(output.OutputError, match="cannot write standard output: No space"):
        output.echo("x")
    monkeypatch.undo()

    def broken(*_a, **_k):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys.stdout, "write", broken)
    with pytest.raises(output.OutputClosed):
        output.echo("x")


# -- item 12: plot options -----------------------------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "1e400", "٦٤"])
def test_12_tokens_per_gpu_must_be_a_finite_count(capsys, tmp_path, value):
    line = assert_one_line_error(*run(capsys, "plot", "bandwidth", "--tokens-per-gpu", value,
                                      "-o", str(tmp_path / "x.png")))
    assert "--tokens-per-gpu" in line and "accepted" in line


# -- item 13: out of memory ----------------------------------------------------------------------
def test_13_a_sweep_out_of_memory_is_one_line(capsys, monkeypatch, tmp_path):
    def no_memory(*_a, **_k):
        raise MemoryError("Unable to allocate 7.28 TiB for an array")  # numpy's is a subclass

    monkeypatch.setattr("fsdpsim.drivers.sweep.run._sweep_points", no_memory)
    for args in (["sweep", "--num-gpus", "8..64"], ["sweep", "--format", "csv"],
                 ["plot", "memory", "-o", str(tmp_path / "x.png")]):
        line = assert_one_line_error(*run(capsys, *args))
        assert "ran out of memory" in line and "--format csv or json" in line


# -- item 14: messages that contradict themselves; empty ids; -o - -------------------------------
def test_14_power_cap_message_shows_the_value_given(capsys):
    line = assert_one_line_error(*run(capsys, "predict", "--power-cap-w", "700.0001"))
    assert "--power-cap-w 700.0001 is outside" in line and "TDP (700 W)" in line


@pytest.mark.parametrize("option", ["--network", "--gpu", "--cluster"])
def test_14_empty_ids_are_refused_everywhere(capsys, option):
    line = assert_one_line_error(*run(capsys, "predict", option, ""))
    assert f"{option} '' is empty" in line
    assert_one_line_error(*run(capsys, "sweep", option, ""))


def test_14_output_dash_is_stdout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = invoke("sweep", "--num-gpus", "8,16", "--format", "csv", "-o", "-")
    assert text.startswith("model,") and len(pd.read_csv(io.StringIO(text))) == 2
    assert not (tmp_path / "-").exists()


# -- item 15: non-ASCII digits; k for sequence lengths -------------------------------------------
@pytest.mark.parametrize("option", ["--num-gpus", "--gpus-per-node", "--seq-len", "--micro-batch",
                                    "--global-batch", "--shard-group-size",
                                    "--inter-node-gbps-per-gpu", "--power-cap-w"])
@pytest.mark.parametrize("digits", ["٨", "８", "۸", "𝟖"])
def test_15_non_ascii_digits_are_refused(capsys, option, digits):
    line = assert_one_line_error(*run(capsys, "predict", option, digits))
    assert f"{option}: {digits!r} is not accepted; accepted:" in line


def test_15_k_is_1024_for_sequence_lengths_and_says_so(capsys):
    d = json.loads(invoke("predict", "--seq-len", "32k", "--format", "json"))
    assert d["training"]["seq_len"] == 32768
    rows = json.loads(invoke("sweep", "--seq-len", "4k..16k", "--format", "json"))
    assert [r["training.seq_len"] for r in rows] == [4096, 8192, 16384]
    assert "k = 1,024 here (32k = 32,768)" in " ".join(invoke("predict", "--help").split())
    line = assert_one_line_error(*run(capsys, "predict", "--seq-len", "32x"))
    assert "(k = 1,024, m = 1,048,576: 32k = 32,768)" in line


# -- item 17: output streams ---------------------------------------------------------------------
def test_17_streamed_csv_and_json_equal_the_whole_frame(monkeypatch, cat):
    """Chunks of 7 points written in slices of 3 rows: the same text as the whole frame."""
    options = {"model": "llama3-8b,gpt3-1.3b", "gpu": "h100,v100", "num-gpus": "8,12,64",
               "best": True}
    frame = with_predict_commands(run_sweep(build_grid(cat, options)), options)  # as --best
    monkeypatch.setattr(cli_sweep, "STREAM_CANDIDATES", 7 * 135)
    monkeypatch.setattr(cli_sweep, "ROWS_PER_CHUNK", 3)
    args = ["sweep", "--model", "llama3-8b,gpt3-1.3b", "--gpu", "h100,v100", "--num-gpus",
            "8,12,64", "--best", "--format"]
    assert invoke(*args, "csv") == frame.to_csv(index=False)
    assert invoke(*args, "json") == to_json(cli_sweep.records(frame)) + "\n"


def test_17_big_tables_are_written_in_blocks(monkeypatch):
    monkeypatch.setattr(cli_sweep, "TABLE_BLOCK_ROWS", 5)
    monkeypatch.setattr(cli_sweep, "ROWS_PER_CHUNK", 4)
    text = invoke("sweep", "--num-gpus", "8..1024", "--seq-len", "2k,4k")
    assert text.startswith("fsdpsim sweep: 16 points") and "in blocks" in text.splitlines()[0]
    assert "16 rows, " in text and text.count("tok/s/GPU") == 4


@pytest.mark.slow
def test_17_memory_stays_flat_per_row(tmp_path):
    """Rows written 12,800 then 51,200 (chunks of 2,048 points): peak RSS grows by less than
    100 bytes per extra row (before the writer streamed: about 3,400 bytes per row)."""
    script = (
        "import resource, sys\n"
        "from fsdpsim.cli import sweep as cli_sweep\n"
        "from fsdpsim.cli import main\n"
        "cli_sweep.STREAM_CANDIDATES = 2048\n"
        "cli_sweep.ROWS_PER_CHUNK = 1024\n"
        "for n in (40, 160):\n"
        "    bw = ','.join(str(10 + i) for i in range(n))\n"
        "    assert main(['sweep', '--num-gpus', '8..4096', '--seq-len', '1k..8k', '--micro-batch',"
        " '1..128', '--recompute', 'full', '--inter-node-gbps-per-gpu', bw, '--format', 'csv',"
        f" '-o', {str(tmp_path / 'rows.csv')!r}]) == 0\n"
        "    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    small_kib, big_kib = (int(x) for x in proc.stderr.split())
    per_row = (big_kib - small_kib) * 1024 / (51_200 - 12_800)
    assert per_row < 100, per_row


# -- item 18: one id twice in one overlay --------------------------------------------------------
@pytest.mark.parametrize("two_files", [False, True])
def test_18_duplicate_id_in_one_overlay_is_refused(capsys, tmp_path, two_files):
    if two_files:
        (tmp_path / "a.toml").write_text(NETWORK)
        (tmp_path / "b.toml").write_text(NETWORK.replace("25", "50"))
    else:
        (tmp_path / "a.toml").write_text(NETWORK + "\n" + NETWORK.replace("25", "50"))
    line = assert_one_line_error(*run(capsys, "--catalog", str(tmp_path), "catalog", "list"))
    assert "'my-net' is also given in" in line and "give each id once per folder" in line


def test_18_the_same_id_in_a_later_folder_still_replaces(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    (first / "n.toml").write_text(NETWORK)
    (second / "n.toml").write_text(NETWORK.replace("= 25", "= 50"))
    cat = load_catalog([first, second], use_env=False)
    assert cat.network("my-net").nic_bandwidth_bytes_per_s == 50e9 / 8


# -- found by the fuzz suite (tests/test_fuzz.py) while it was written ---------------------------
def test_fuzz_find_calibrate_without_a_subset_column(capsys, tmp_path):
    path = tmp_path / "m.csv"
    pd.DataFrame([SCHEMA_ROW]).to_csv(path, index=False)
    line = assert_one_line_error(*run(capsys, "calibrate", "--measurements", str(path), "--gpu",
                                      "h100", "--framework", ""))
    assert "too few" in line


@pytest.mark.parametrize("column, value", [("tp", "٢"), ("tp", "1.5"), ("pp", "1e400"),
                                           ("recompute_layers", "-1"), ("vpp", "nan x"),
                                           ("arch", "inf"), ("fused_loss", "maybe"),
                                           ("n_layers", "1" + "0" * 400)])
def test_fuzz_find_every_numeric_cell_is_read_by_the_number_reader(capsys, tmp_path, column,
                                                                    value):
    row = {**SCHEMA_ROW, "model": "tiny", "n_layers": 2, "d_model": 64, "n_heads": 4,
           "ffn_size": 256, "vocab": 100, "arch": "gpt", column: value}
    path = tmp_path / "m.csv"
    pd.DataFrame([row]).to_csv(path, index=False)
    line = assert_one_line_error(*run(capsys, "validate", str(path)))
    assert f"column {column}" in line and "is not accepted; accepted:" in line


def test_fuzz_find_labels_stay_text(tmp_path):
    path = tmp_path / "m.csv"
    pd.DataFrame([{**SCHEMA_ROW, "id": "inf"}, {**SCHEMA_ROW, "id": ""}]).to_csv(path,
                                                                                 index=False)
    rows = json.loads(invoke("validate", str(path), "--format", "json"))["rows"]
    assert [r["id"] for r in rows] == ["inf", "row-2"]


def test_fuzz_find_tiny_catalog_values_are_refused(capsys, tmp_path):
    (tmp_path / "o.toml").write_text('[[accelerator]]\nid = "h100-sxm5-80gb"\noverride = true\n'
                                     "runtime_reserved_gib = 1e-300\n")
    line = assert_one_line_error(*run(capsys, "--catalog", str(tmp_path), "predict"))
    assert "'runtime_reserved_gib': 1e-300 is not accepted; accepted: a number from 0 to 32 GiB "\
        "(0 or at least 1e-09)" in line


def test_fuzz_find_layout_larger_than_the_job_has_no_warning(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rc, out, err = run(capsys, "sweep", "--num-gpus", "1", "--tp", "2", "--format", "json")
    assert rc == 0 and err == ""
    assert "does not divide num_gpus(1)" in json.loads(out)[0]["infeasible"]


def test_fuzz_find_plot_from_sweep_rows_warns_nothing(capsys, tmp_path):
    rows = tmp_path / "rows.csv"
    invoke("sweep", "--model", "llama3-70b", "--gpu", "a100-40gb,h100", "--num-gpus", "64..256",
           "--global-batch", "2048", "--tokens", "1t", "--best", "--format", "csv", "-o",
           str(rows))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pandas' PerformanceWarning went to stderr
        rc, out, err = run(capsys, "plot", "pareto", "--input", str(rows), "-o",
                           str(tmp_path / "p.png"))
    assert rc == 0 and err == ""


def test_whole_number_rules_do_not_mention_tiny_numbers(capsys):
    """A whole-number option's message names its range only: "(0 or at least 1e-09)" is for
    real numbers (regression: ``--bf16-layers -1`` said it)."""
    line = assert_one_line_error(*run(capsys, "predict", "--precision", "nvfp4", "--gpu", "gb200",
                                      "--bf16-layers", "-1"))
    assert line.endswith("accepted: a whole number from 0 to 16,384"), line


def test_a_row_with_more_bf16_layers_than_its_model_is_named(capsys, tmp_path):
    """A measurement row's ``bf16_layers`` beyond its model's layers: one line naming the row,
    as every other row check does."""
    path = tmp_path / "m.csv"
    pd.DataFrame([{**SCHEMA_ROW, "precision": "fp8", "bf16_layers": 999}]).to_csv(path,
                                                                               index=False)
    line = assert_one_line_error(*run(capsys, "validate", str(path)))
    assert "row 'x': bf16_layers 999 exceeds the model's 32 layers" in line
