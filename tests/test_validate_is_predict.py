"""``validate`` predicts each measured row as ``predict`` predicts the same run from flags.

For every calibration file (``validation/data/*.csv``) the rows are read as ``validate`` reads
them, and for each modelled row the ``predict`` call is built from the row's stated fields:
the options dict ``fsdpsim predict`` parses from its flags (a cell the row leaves empty is a
flag not given, so the framework profile's default applies on both sides), resolved by the
CLI's own builders (:func:`fsdpsim.cli.predict.build_system`, ``build_plan``, ``kernel_knobs``
in :func:`fsdpsim.cli.predict.build_prediction`). The model is the row's (a preset, or the
architecture columns ``validate`` turns into a model), given to predict's builder as an object.
The two code paths differ (the engine evaluated over all rows at once against one ``predict``
per row), so any fact read by one and not the other shows up as a different number.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.cli.predict import build_prediction, build_system
from fsdpsim.hardware.system import BUSBW_COLUMNS
from fsdpsim.measured.rows import is_empty, spec_for_row, truthy
from fsdpsim.measured.validate import load_measurements, predict_measurements

DATA = Path(__file__).resolve().parents[1] / "validation" / "data"
FILES = sorted(DATA.glob("*.csv"))
#: Rows compared per file: all of them, except the 1,440-row vTrain single-node file.
SAMPLE = 120
CATALOG = load_catalog(use_env=False)


def _given(row: pd.Series, column: str):
    """The row's cell, or None (a flag not given) where it is empty or absent."""
    value = row.get(column)
    return None if is_empty(value) else value


def _whole(row: pd.Series, column: str) -> int | None:
    value = _given(row, column)
    return None if value is None else int(float(value))


def _number(row: pd.Series, column: str) -> float | None:
    value = _given(row, column)
    return None if value is None else float(value)


def _switch(row: pd.Series, column: str) -> bool | None:
    value = _given(row, column)
    return None if value is None else truthy(value)


def predict_options(row: pd.Series) -> dict:
    """``fsdpsim predict``'s parsed options for the run one measurement row states."""
    tp, pp, cp = (_whole(row, k) or 1 for k in ("tp", "pp", "cp"))
    n_gpus = int(row["n_gpus"])
    dp = n_gpus // (tp * pp * cp)
    mb, ga = int(row["micro_batch"]), int(row["grad_accum"])
    layers = _given(row, "pp_layers")
    return {
        "model": None, "gpu": str(row["gpu"]), "cluster": None, "num_gpus": n_gpus,
        "gpus_per_node": int(row["gpus_per_node"]), "network": _given(row, "network"),
        "inter_node_gbps_per_gpu": _number(row, "inter_node_gbps_per_gpu"),
        "power_cap_w": _number(row, "power_cap_w"), "placement": "packed",
        "seq_len": str(int(row["seq_len"])), "micro_batch": str(mb),
        "global_batch": str(mb * ga * dp), "sharding": str(row["sharding"]),
        "shard_group_size": _whole(row, "shard_group_size"),
        "reshard_after_forward": True, "keep_params_gathered": False, "grad_sync": "every",
        "recompute": str(row["recompute"]), "recompute_layers": _whole(row, "recompute_layers"),
        "zero": None, "dp_shard": None, "dp_replicate": None,
        "tp": tp, "pp": pp, "cp": cp, "vpp": _whole(row, "vpp") or 1,
        "sequence_parallel": _switch(row, "sequence_parallel"),
        "tp_overlap": bool(_switch(row, "tp_overlap")),
        "pp_schedule": _given(row, "pp_schedule"),
        "pp_first_layers": _whole(row, "pp_first_layers"),
        "pp_last_layers": _whole(row, "pp_last_layers"),
        "pp_layers": None if layers is None else str(layers),
        "cp_kind": _given(row, "cp_kind") or "ring",
        "framework": _given(row, "recipe") or "fsdp2", "mesh_order": None,
        "precision": _given(row, "precision") or "bf16",
        "reduce_dtype": _given(row, "reduce_dtype"), "optimizer": "adamw",
        "flash_attention": _switch(row, "flash_attention") is not False,
        "dropout": bool(_switch(row, "dropout")),
        "ep": _whole(row, "ep") or 1, "etp": _whole(row, "etp"),
        "ep_overlap": _switch(row, "ep_overlap"),
        "moe_capacity_factor": _number(row, "moe_capacity_factor"),
        "moe_imbalance": _number(row, "moe_imbalance"), "moe_fp8_dispatch": False,
        "moe_dispatcher": _given(row, "moe_dispatcher"),
        "fp8_attention": _switch(row, "fp8_attention"),
        "recompute_modules": _given(row, "recompute_modules"),
        "fp8_lm_head": _switch(row, "fp8_lm_head"), "cuda_graphs": _given(row, "cuda_graphs"),
        "fused_loss": _switch(row, "fused_loss"), "bf16_layers": _whole(row, "bf16_layers"),
        **{column: _number(row, column) for column in BUSBW_COLUMNS},
    }


def _sample(frame: pd.DataFrame) -> pd.DataFrame:
    if len(frame) <= SAMPLE:
        return frame
    return frame.iloc[np.linspace(0, len(frame) - 1, SAMPLE).round().astype(int)]


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_validate_gives_what_predict_gives_from_the_rows_flags(path):
    assert len(FILES) >= 4  # every calibration file is covered
    validated = predict_measurements(load_measurements(path, CATALOG), CATALOG)
    ctx = SimpleNamespace(obj={"catalog_dirs": ()})
    rows = _sample(validated)
    assert len(rows) >= min(len(validated), 100)
    for _, row in rows.iterrows():
        options = predict_options(row)
        system = build_system(ctx, **options)
        predicted = build_prediction(ctx, system=system, spec=spec_for_row(row), advice=False,
                                     **options)
        assert predicted.values["tokens_per_s_per_gpu"] == pytest.approx(
            row["predicted_tokens_per_s_per_gpu"], rel=1e-9), (path.stem, row["id"])


def test_an_empty_knob_cell_is_the_framework_default_a_stated_one_is_the_flag():
    """The hybrid file's DeepSeek-V3 rows: a stated cell reaches predict as its flag (and moves
    the number), an empty one is the megatron profile's default on both sides."""
    frame = load_measurements(DATA / "hybrid_calibration.csv", CATALOG)
    row = frame.set_index("id").loc["mbridge-2608-001"].copy()
    row["id"] = "mbridge-2608-001"
    assert (row["cuda_graphs"], row["ep_overlap"], row["recipe"]) == ("full", True, "megatron")
    ctx = SimpleNamespace(obj={"catalog_dirs": ()})

    def tokens(r):
        options = predict_options(r)
        system = build_system(ctx, **options)
        return build_prediction(ctx, system=system, spec=spec_for_row(r), advice=False,
                                **options).values["tokens_per_s_per_gpu"]

    stated = tokens(row)
    emptied = row.copy()
    emptied[["cuda_graphs", "ep_overlap"]] = [float("nan"), float("nan")]
    options = predict_options(emptied)
    assert options["cuda_graphs"] is None and options["ep_overlap"] is None
    unset = tokens(emptied)
    explicit = row.copy()
    explicit[["cuda_graphs", "ep_overlap"]] = ["none", False]
    assert unset == pytest.approx(tokens(explicit), rel=1e-12)  # megatron: none, no overlap
    assert abs(stated / unset - 1) > 0.01
    validated = predict_measurements(pd.DataFrame([emptied]), CATALOG)
    assert validated["predicted_tokens_per_s_per_gpu"].iloc[0] == pytest.approx(unset,
                                                                                rel=1e-9)


def test_megatron_defaults_of_bf16_layers_and_the_fused_loss_on_both_sides():
    """An NVFP4 Megatron-Bridge row with its bf16_layers and fused_loss cells emptied: validate
    and predict (flags not given) both take the megatron profile's defaults (no BF16 layers,
    fused cross-entropy), which differ from the generic ones (NVFP4's 15 % BF16 layers,
    unfused loss) that --framework fsdp2 takes."""
    frame = load_measurements(DATA / "hybrid_calibration.csv", CATALOG)
    row = frame.set_index("id").loc["mbridge-260401-003"].copy()
    row["id"] = "mbridge-260401-003"
    assert (row["precision"], row["recipe"], row["bf16_layers"], row["fused_loss"]) == \
        ("nvfp4", "megatron", 0, True)
    emptied = row.copy()
    emptied[["bf16_layers", "fused_loss"]] = [float("nan"), float("nan")]
    validated = predict_measurements(pd.DataFrame([row, emptied]), CATALOG)
    a, b = validated["predicted_tokens_per_s_per_gpu"]
    assert a == pytest.approx(b, rel=1e-12)
    ctx = SimpleNamespace(obj={"catalog_dirs": ()})
    options = predict_options(emptied)
    assert options["bf16_layers"] is None and options["fused_loss"] is None
    system = build_system(ctx, **options)
    spec = spec_for_row(emptied)
    megatron = build_prediction(ctx, system=system, spec=spec, advice=False, **options)
    assert megatron.values["tokens_per_s_per_gpu"] == pytest.approx(b, rel=1e-9)
    generic = build_prediction(ctx, system=system, spec=spec, advice=False,
                               **{**options, "framework": "fsdp2"})
    assert abs(generic.values["tokens_per_s_per_gpu"] / b - 1) > 0.005
    as_fsdp2 = emptied.copy()
    as_fsdp2["recipe"] = "fsdp2"
    fsdp2 = predict_measurements(pd.DataFrame([as_fsdp2]), CATALOG)
    assert fsdp2["predicted_tokens_per_s_per_gpu"].iloc[0] == pytest.approx(
        generic.values["tokens_per_s_per_gpu"], rel=1e-9)


@pytest.mark.parametrize("column, value, reason", [
    ("ep_overlap", "maybe", "column ep_overlap: 'maybe' is not accepted"),
    ("cuda_graphs", "sometimes", "cuda_graphs 'sometimes' is not accepted"),
    ("moe_dispatcher", "carrier-pigeon", "moe_dispatcher 'carrier-pigeon' is not accepted"),
    ("etp", "x", "column etp: 'x' is not accepted"),
    ("recompute_modules", "attn", "recompute_modules 'attn' not accepted"),
    ("recompute", "bogus", "column recompute: 'bogus' is not accepted")])
def test_a_bad_stated_cell_of_a_published_row_is_its_skip_reason(tmp_path, column, value,
                                                                  reason):
    raw = pd.read_csv(DATA / "hybrid_calibration.csv", dtype=str)
    raw = raw[raw["id"].isin(["mbridge-2602-016", "mbridge-2606-003"])].copy()
    raw.loc[raw["id"] == "mbridge-2602-016", column] = value
    path = tmp_path / "rows.csv"
    raw.to_csv(path, index=False)
    frame = load_measurements(path, CATALOG).set_index("id")
    assert reason in frame.loc["mbridge-2602-016", "skip"]
    assert frame.loc["mbridge-2606-003", "skip"] == ""
