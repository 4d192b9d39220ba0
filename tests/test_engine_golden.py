"""tp = pp = cp = 1 reproduces the pre-hybrid engine exactly.

``tests/data/engine_golden.json`` was written by ``tools/make_engine_golden.py`` with the
data-parallel engine: 400 seeded random
data-parallel configurations (12 models, 8 GPUs, 1-1,024 GPUs, every sharding strategy and
accumulation knob, bf16/fp16/fp8, eager and flash attention) and every modelled row of the
MosaicML and vTrain single-node calibration files. Each is rebuilt here through today's public
objects and must give the same numbers (relative tolerance 1e-12: the same formulas may be
evaluated in another order).
The calibration rows' part (``measurements``) follows intended physics changes of the
model (``tools/make_engine_golden.py`` rewrites it; the root's tensor-parallel all-reduces are
costed each at its own size); the grid part is never regenerated.

Dense models only: the snapshot's mixture-of-experts cases (Mixtral 8x7B) differ on purpose
from the layered engine (experts as grouped GEMMs on their per-expert shapes, the router's
GEMM, the busiest rank's load, expert states over the expert data-parallel group); they are
not compared, and the snapshot is not regenerated.

Utilisation differs on purpose (one convention for MFU and HFU): MFU of
an FP8 run is measured against the 16-bit dense peak (the snapshot's ``mfu``, against the FP8
peak, is today's ``mfu_native``), and HFU counts attention over the full square like MFU
(the snapshot's ``hardware_flops_per_step`` discounted FlashAttention's causal half). The
snapshot's ``mfu`` is compared with ``mfu_native``; HFU and hardware FLOPs are checked against
the new convention (equal to the model's without recompute or FlashAttention, above otherwise).

The LM head runs in the 16-bit type under FP8 (Megatron-Core's output layer is
outside Transformer Engine's FP8 autocast; torchtitan filters it out of its FP8 conversion): the
snapshot ran it at the FP8 rate, so its FP8 cases are rebuilt with ``fp8_lm_head`` (which
restores that rate exactly).

Catalog factors recalibrated on purpose after the snapshot are pinned to its values with a
catalog overlay (:data:`SNAPSHOT_FACTORS`): the V100 parts (fitted to the DLPerf rows of
``hybrid_calibration.csv``: matmul fraction, HBM fraction from Jia et al. 2018), H100, H200
and B200 (refitted on the dense rows; B200 with GB200's matmul fraction) and the per-precision
PyTorch tables.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.model.presets import get_model

GOLDEN = Path(__file__).resolve().parent / "data" / "engine_golden.json"
TOOLS = Path(__file__).resolve().parents[1] / "tools"


#: Outputs whose definition changed on purpose (module docstring), checked separately.
CHANGED = {"hfu", "hardware_flops_per_step"}


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def tool():
    from conftest import load_script

    return load_script(TOOLS / "make_engine_golden.py", "make_engine_golden")


def _same(a: float, b: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b)
    if math.isinf(a) or math.isinf(b) or math.isnan(a) or math.isnan(b):
        return (math.isnan(a) and math.isnan(b)) or a == b
    # abs_tol: a difference of a few ulps of the step time on a quantity that is 0 (exposed
    # communication when compute hides it) is the order of evaluation, not physics.
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def test_golden_cases_are_the_tools_cases(golden, tool):
    """The snapshot was made from the tool's seeded cases (a changed seed would test nothing)."""
    assert [row["case"] for row in golden["grid"]] == tool.cases()


def _AS_BEFORE(matmul_fraction: float) -> dict:
    """A split PyTorch 16-bit table (fsdpsim.hardware.efficiency) holding the one set the snapshot had."""
    return {"matmul_fraction": matmul_fraction, "source": "engine_golden snapshot"}


#: Efficiency factors as they stood when the snapshot was written, for accelerators
#: recalibrated since (module docstring); their 16-bit PyTorch tables
#: (``[efficiency.bf16.pytorch]``) hold the same one set.
SNAPSHOT_FACTORS = {
    "v100-sxm2-16gb": {"matmul_fraction": 0.695, "matmul_half_gflop": 0.43, "hbm_fraction": 0.6},
    "v100-sxm2-32gb": {"matmul_fraction": 0.695, "matmul_half_gflop": 0.43, "hbm_fraction": 0.6},
    "h100-sxm5-80gb": {"matmul_fraction": 0.790, "matmul_half_gflop": 3.91,
                       "fused_attention_fraction": 0.329, "bf16.pytorch": _AS_BEFORE(0.790)},
    "h200-sxm-141gb": {"matmul_fraction": 0.790, "matmul_half_gflop": 3.91,
                       "fused_attention_fraction": 0.329, "bf16.pytorch": _AS_BEFORE(0.790)},
    "b200": {"matmul_fraction": 0.674, "matmul_half_gflop": 7.58,
             "fused_attention_fraction": 0.321,
             "bf16.pytorch": {**_AS_BEFORE(0.674), "attention_fraction": 0.24}},
    "mi300x": {"bf16.pytorch": _AS_BEFORE(0.447)},
}


@pytest.fixture(scope="module")
def snapshot_catalog(tmp_path_factory):
    from conftest import overlay_catalog

    return overlay_catalog(tmp_path_factory.mktemp("snapshot_catalog"), SNAPSHOT_FACTORS)


def test_snapshot_overlay_differs_from_today(snapshot_catalog):
    """The overlay pins something (else it would hide nothing and test nothing)."""
    today = load_catalog((), use_env=False)
    from fsdpsim.hardware.efficiency import resolve

    for gpu, factors in SNAPSHOT_FACTORS.items():
        if "matmul_fraction" in factors:
            pinned, now = (c.accelerator(gpu).efficiency for c in (snapshot_catalog, today))
            assert pinned.matmul_fraction == factors["matmul_fraction"]
            assert now.matmul_fraction != factors["matmul_fraction"]
        if "bf16.pytorch" in factors:
            pinned, now = (resolve(c.accelerator(gpu), "bf16", "pytorch").values
                           for c in (snapshot_catalog, today))
            want = factors["bf16.pytorch"]["matmul_fraction"]
            assert pinned["matmul_fraction"] == want and now["matmul_fraction"] != want


def test_data_parallel_grid_unchanged(golden, tool, snapshot_catalog):
    catalog = snapshot_catalog
    compared = 0
    for row in golden["grid"]:
        if get_model(row["case"]["model"]).is_moe:  # changed on purpose (module docstring)
            continue
        if "error" in row:
            with pytest.raises(ConfigError):
                tool.run_case(row["case"], catalog)
            continue
        case = {**row["case"], "fp8_lm_head": row["case"]["precision"] == "fp8"}
        values = dict(tool.run_case(case, catalog).values)
        values["mfu"] = values["mfu_native"]  # the snapshot's MFU: against the native peak
        diff = {k: (v, values.get(k)) for k, v in row["values"].items()
                if k not in CHANGED and (k not in values or not _same(v, values[k]))}
        assert not diff, (row["case"], diff)
        case = row["case"]
        executed, model = values["hardware_flops_per_step"], values["model_flops_per_step"]
        if case["recompute"] == "none" and not case["flash_attention"]:
            assert math.isclose(executed, model, rel_tol=1e-12), case
        else:
            assert executed > model, case
        assert values["hfu"] >= values["mfu"] * (1 - 1e-12), case
        compared += 1
    assert compared >= 300


@pytest.mark.slow
def test_calibration_rows_unchanged(golden, tool):
    data = Path(__file__).resolve().parents[1] / "validation" / "data"
    now = tool.measurement_predictions(data)
    for name, rows in golden["measurements"].items():
        # every row modelled then is modelled now (hybrid rows modelled since may be added)
        assert rows.keys() <= now[name].keys(), name
        for i, v in rows.items():
            assert math.isclose(now[name][i], v, rel_tol=1e-12), (name, i, now[name][i], v)
