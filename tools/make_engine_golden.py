"""Snapshot the engine's outputs on a seeded random grid of data-parallel configurations.

The hybrid-parallelism reshape must reproduce today's FSDP/ZeRO/DDP/HSDP numbers
exactly when tp = pp = cp = 1. This script records, for a seeded random set of configurations
built through the public objects (ModelSpec preset, resolve_system, ParallelPlan,
TrainingConfig) and :func:`fsdpsim.drivers.predict.predict` with every knob given, the flat engine
outputs. ``tests/test_engine_golden.py`` rebuilds the same configurations with the current code
and compares. Regenerate only when a physics change is intended, and say so in the commit.

    python tools/make_engine_golden.py tests/data/engine_golden.json
"""

from __future__ import annotations

import json
import sys

import numpy as np

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.util.errors import ConfigError

MODELS = ("gpt3-125m", "gpt3-1.3b", "gpt3-13b", "llama2-7b", "llama3-8b", "llama3-70b",
          "mistral-7b", "mixtral-8x7b", "mpt-7b", "mpt-30b", "gpt-1.7b", "qwen2.5-7b")
GPUS = ("a100-80gb", "a100-40gb", "h100", "h200", "b200", "mi300x", "v100-32gb", "l40s")
WORLDS = (1, 2, 4, 8, 16, 32, 64, 256, 1024)
SHARDINGS = ("full", "grad_op", "optimizer", "none", "hybrid")
N_CASES = 400


def cases(seed: int = 20261201, n: int = N_CASES):
    """The seeded configurations, as plain dicts of predict options."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        sharding = str(rng.choice(SHARDINGS))
        sharded = sharding in ("full", "grad_op", "hybrid")
        c = {
            "model": str(rng.choice(MODELS)), "gpu": str(rng.choice(GPUS)),
            "num_gpus": int(rng.choice(WORLDS)), "sharding": sharding,
            "reshard_after_forward": bool(rng.random() < 0.8),
            "keep_gathered": bool(sharded and rng.random() < 0.15),
            "grad_sync": "last" if sharded and rng.random() < 0.15 else "every",
            "seq_len": int(rng.choice((512, 2048, 4096, 8192))),
            "micro_batch": int(rng.choice((1, 2, 4, 8))),
            "grad_accum": int(rng.choice((1, 1, 2, 4))),
            "recompute": str(rng.choice(("none", "selective", "full"))),
            "precision": str(rng.choice(("bf16", "bf16", "fp16", "fp8"))),
            "optimizer": str(rng.choice(("adamw", "adamw", "sgd"))),
            "flash_attention": bool(rng.random() < 0.85),
            "reduce_dtype": str(rng.choice(("fp32", "bf16"))),
            "network": str(rng.choice(("ib-ndr-400", "ib-hdr-200", "roce-100"))),
        }
        out.append(c)
    return out


def run_case(c: dict, catalog):
    from fsdpsim.plan.parallel import ParallelPlan, TrainingConfig
    from fsdpsim.drivers.predict import predict
    from fsdpsim.model.presets import get_model
    from fsdpsim.hardware.system import resolve_system

    system = resolve_system(catalog, gpu=c["gpu"], network=c["network"])
    plan = ParallelPlan(num_gpus=c["num_gpus"], gpus_per_node=system.gpus_per_node,
                        sharding=c["sharding"], reshard_after_forward=c["reshard_after_forward"],
                        keep_gathered=c["keep_gathered"], grad_sync=c["grad_sync"])
    training = TrainingConfig(seq_len=c["seq_len"], micro_batch=c["micro_batch"],
                              global_batch=c["micro_batch"] * c["grad_accum"] * plan.dp,
                              recompute=c["recompute"], precision=c["precision"],
                              reduce_dtype=c["reduce_dtype"], optimizer=c["optimizer"],
                              flash_attention=c["flash_attention"],
                              fp8_lm_head=c.get("fp8_lm_head", False))
    return predict(get_model(c["model"]), system, plan, training)


#: Measurement files (validation/data/) whose every modelled row is part of the snapshot.
MEASUREMENT_FILES = ("published_calibration.csv", "vtrain_ground_truth_single.csv")


def measurement_predictions(data_dir) -> dict[str, dict[str, float]]:
    """Predicted tokens/s per GPU of every modelled row of :data:`MEASUREMENT_FILES`, by id."""
    from pathlib import Path

    from fsdpsim.measured.validate import load_measurements, predict_measurements

    catalog = load_catalog((), use_env=False)
    out = {}
    for name in MEASUREMENT_FILES:
        result = predict_measurements(load_measurements(Path(data_dir) / name, catalog), catalog)
        out[name] = {str(i): float(v) for i, v in
                     zip(result["id"], result["predicted_tokens_per_s_per_gpu"])}
    return out


def snapshot() -> list[dict]:
    catalog = load_catalog((), use_env=False)
    rows = []
    for c in cases():
        try:
            p = run_case(c, catalog)
        except ConfigError as exc:
            rows.append({"case": c, "error": str(exc)})
            continue
        rows.append({"case": c, "values": {k: v for k, v in p.values.items()}})
    return rows


if __name__ == "__main__":
    from pathlib import Path

    rows = snapshot()
    data = Path(__file__).resolve().parents[1] / "validation" / "data"
    with open(sys.argv[1], "w") as f:
        json.dump({"grid": rows, "measurements": measurement_predictions(data)}, f, indent=0,
                  sort_keys=True)
    print(f"{len(rows)} cases, {sum('error' in r for r in rows)} rejected")
