"""The accuracy the README quotes (section "Accuracy", and ``docs/accuracy.md``'s floors) holds
as a ceiling: each quoted MAPE is recomputed by ``fsdpsim validate --format json`` (and the
cross-validated one by ``fsdpsim calibrate``), the commands the README's table names, and may
not exceed the quoted value by more than 0.1 percentage points. Each quoted figure is also read
from the README's table row, so a figure changed there without the model (or the reverse)
fails here.
"""

from __future__ import annotations

import contextlib
import io
import json
import re

import pandas as pd
import pytest

from conftest import ROOT, VALIDATION_DATA, run
from fsdpsim.cli import main

pytestmark = pytest.mark.slow  # about 20 s: every calibration file is predicted once

#: Slack over a quoted MAPE [percentage points]: the README rounds to 0.1.
SLACK_PP = 0.1
README = (ROOT / "README.md").read_text(encoding="utf-8")
_RUNS: dict[tuple[str, ...], dict] = {}


def _validate(*args: str) -> dict:
    """``fsdpsim validate ARGS --format json``, once per argument list."""
    if args not in _RUNS:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["validate", str(VALIDATION_DATA / args[0]), *args[1:], "--format",
                       "json"])
        assert rc == 0, err.getvalue()
        _RUNS[args] = json.loads(out.getvalue())
    return _RUNS[args]


def _mape_pct(errors) -> float:
    return 100 * float(pd.Series(errors, dtype=float).abs().mean())


def _rows(*args: str) -> pd.DataFrame:
    return pd.DataFrame(_validate(*args)["rows"])


def _moe_core(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[(frame["subset"] == "core") & frame["model"].str.contains("DeepSeek")
                 & (frame["skip"] == "")]


def _quoted(row_start: str, column: int, part: int = 0) -> float:
    """The MAPE (or the ``part``-th of ``a % / b %``) in column ``column`` (0-based, the
    command first) of the README's accuracy row that begins with ``row_start``."""
    rows = [line for line in README.splitlines() if line.startswith(f"| {row_start}")]
    assert len(rows) == 1, (row_start, rows)
    cells = [c.strip() for c in rows[0].strip().strip("|").split("|")]
    values = re.findall(r"(\d+(?:\.\d+)?) %", cells[column])
    return float(values[part])


_HYBRID = "hybrid_calibration.csv"
_PUBLISHED = "published_calibration.csv"
#: (README row start, MAPE column, part, how to recompute it)
CLAIMS = [
    ("`published_calibration.csv --framework fsdp`", 3, 0,
     lambda: 100 * _validate(_PUBLISHED, "--framework", "fsdp")["summary"]["mape"]),
    ("`... --framework fsdp --gpu a100-sxm4-40gb`", 3, 0,
     lambda: 100 * _validate(_PUBLISHED, "--framework", "fsdp", "--gpu",
                             "a100-sxm4-40gb")["summary"]["mape"]),
    ("`... --framework fsdp --gpu a100-sxm4-80gb`", 3, 0,
     lambda: 100 * _validate(_PUBLISHED, "--framework", "fsdp", "--gpu",
                             "a100-sxm4-80gb")["summary"]["mape"]),
    ("`vtrain_ground_truth_single.csv`", 3, 0,
     lambda: 100 * _validate("vtrain_ground_truth_single.csv")["summary"]["mape"]),
    ("`vtrain_ground_truth_multi.csv`", 3, 0,
     lambda: 100 * _validate("vtrain_ground_truth_multi.csv")["summary"]["mape"]),
    ("`published_calibration.csv --framework ptd-p`", 3, 0,
     lambda: 100 * _validate(_PUBLISHED, "--framework", "ptd-p")["summary"]["mape"]),
    ("`published_calibration.csv --framework deepspeed`", 3, 0,
     lambda: 100 * _validate(_PUBLISHED, "--framework", "deepspeed")["summary"]["mape"]),
    ("... Hopper FP8", 3, 0,
     lambda: 100 * _validate(_HYBRID)["by"]["generation"]["Hopper fp8"]["mape"]),
    ("... Blackwell FP8", 3, 0,
     lambda: 100 * _validate(_HYBRID)["by"]["generation"]["Blackwell fp8"]["mape"]),
    ("... Ampere BF16", 3, 0,
     lambda: 100 * _validate(_HYBRID)["by"]["generation"]["Ampere bf16"]["mape"]),
    ("... Volta FP16", 3, 0,
     lambda: 100 * _validate(_HYBRID)["by"]["generation"]["Volta fp16"]["mape"]),
    ("... Blackwell MXFP8 / NVFP4", 3, 0,
     lambda: 100 * _validate(_HYBRID)["by"]["generation"]["Blackwell mxfp8"]["mape"]),
    ("... Blackwell MXFP8 / NVFP4", 3, 1,
     lambda: 100 * _validate(_HYBRID)["by"]["generation"]["Blackwell nvfp4"]["mape"]),
    ("`hybrid_calibration.csv` DeepSeek-V3 `core` rows", 3, 0,
     lambda: _mape_pct(_moe_core(_rows(_HYBRID))["error"])),
]
#: The DeepSeek-V3 core rows per GPU: (README row start, part, catalog id).
for _start, _ids in (("... GB200 / GB300", ("gb200", "gb300")),
                     ("... B300 / B200 / H100", ("b300", "b200", "h100-sxm5-80gb"))):
    for _part, _gpu in enumerate(_ids):
        CLAIMS.append((_start, 3, _part, lambda g=_gpu: _mape_pct(
            _moe_core(_rows(_HYBRID)).query("gpu == @g")["error"])))


@pytest.mark.parametrize("row_start, column, part, computed", CLAIMS,
                         ids=[f"{c[0]}[{c[2]}]" for c in CLAIMS])
def test_quoted_mape_is_a_ceiling(row_start, column, part, computed):
    quoted = _quoted(row_start, column, part)
    got = computed()
    assert got <= quoted + SLACK_PP, f"{row_start}: {got:.2f} % > quoted {quoted} %"


def test_vtrain_single_node_split_quoted_in_the_row():
    """vTrain single-node: 240 data-parallel rows (the host-op calibration set) and 1,200
    TP/PP rows, each MAPE quoted in the row's text."""
    frame = _rows("vtrain_ground_truth_single.csv")
    dp = (frame["tp"] == 1) & (frame["pp"] == 1)
    row = next(line for line in README.splitlines()
               if line.startswith("| `vtrain_ground_truth_single.csv`"))
    quoted_dp = float(re.search(r"240 data-parallel rows \(.*?: (\d+\.\d) %\)", row).group(1))
    quoted_hybrid = float(re.search(r"1,200 TP/PP rows \((\d+\.\d) %\)", row).group(1))
    assert (int(dp.sum()), int((~dp).sum())) == (240, 1200)
    assert _mape_pct(frame.loc[dp, "error"]) <= quoted_dp + SLACK_PP
    assert _mape_pct(frame.loc[~dp, "error"]) <= quoted_hybrid + SLACK_PP


def test_cross_validated_a100_fit_quoted_in_the_row(capsys):
    """``fsdpsim calibrate`` at the A100 fit (the command of docs/accuracy.md): its 5-fold
    cross-validated MAPE."""
    rc, out, err = run(capsys, "calibrate", "--measurements",
                       str(VALIDATION_DATA / _PUBLISHED), "--gpu", "a100-sxm4-80gb",
                       "--gpu", "a100-sxm4-40gb")
    assert rc == 0, err
    got = float(re.search(r"5-fold cross-validated: \d+ rows, MAPE (\d+\.\d) %", out).group(1))
    assert got <= _quoted("`fsdpsim calibrate ...` (5-fold CV", 3) + SLACK_PP


@pytest.mark.parametrize("text, computed", [
    ("vTrain multi-node ≤ 12 % holds",
     lambda: 100 * _validate("vtrain_ground_truth_multi.csv")["summary"]["mape"]),
    ("SC21 PTD-P ≤ 10 % holds",
     lambda: 100 * _validate(_PUBLISHED, "--framework", "ptd-p")["summary"]["mape"]),
    ("SC21 DeepSpeed ZeRO-3 ≤ 25 % holds",
     lambda: 100 * _validate(_PUBLISHED, "--framework", "deepspeed")["summary"]["mape"]),
    ("MosaicML ≤ 7 % holds",
     lambda: 100 * _validate(_PUBLISHED, "--framework", "fsdp")["summary"]["mape"]),
    ("Hopper FP8",
     lambda: 100 * _validate(_HYBRID)["by"]["generation"]["Hopper fp8"]["mape"]),
    ("Blackwell NVFP4",
     lambda: 100 * _validate(_HYBRID)["by"]["generation"]["Blackwell nvfp4"]["mape"]),
    ("Blackwell FP8",
     lambda: 100 * _validate(_HYBRID)["by"]["generation"]["Blackwell fp8"]["mape"]),
    ("Ampere BF16",
     lambda: 100 * _validate(_HYBRID)["by"]["generation"]["Ampere bf16"]["mape"]),
    ("Volta FP16",
     lambda: 100 * _validate(_HYBRID)["by"]["generation"]["Volta fp16"]["mape"]),
    ("the DeepSeek-V3 core rows ≤ 15 % holds",
     lambda: _mape_pct(_moe_core(_rows(_HYBRID))["error"])),
])
def test_docs_floors_hold_as_quoted(text, computed):
    """docs/accuracy.md's summary of the floors (its first paragraph): the figure quoted in
    parentheses after each floor is a ceiling too."""
    docs = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
    summary = " ".join(docs.split("What the rows say")[0].split())
    found = re.search(re.escape(text) + r"[^(]*\((\d+\.\d) %", summary)
    assert found, text
    assert computed() <= float(found.group(1)) + SLACK_PP
