"""Throughput of :func:`fsdpsim.engine.evaluate` in configurations per second, on one core.

The floor is 1,000,000 configurations/s for the sweep's cost function, data-parallel, hybrid
and MoE grids alike. This measures
the engine alone: a fixed set of ``n`` configurations (default 1,000,000) mixing 4 models,
3 GPUs (H100, B200, MI300X), 8 GPU counts, 5 sharding strategies, 5 sequence lengths,
micro-batches 1-8 and the 3 recompute modes, with **every input a full array of length n**
(the worst case: nothing broadcasts; the engine itself passes a column that holds one value as
that number, and evaluates the rows of each structure together: ``fsdpsim/engine/groups.py``),
memory ceilings off (``"ceilings": 0.0``), one thread. ``--models mixtral-8x7b`` measures an
MoE grid, ``--hybrid`` a hybrid one.
Building the inputs is not timed. Time is this process's CPU time (``time.process_time``):
single-threaded, it equals wall time on an idle core and does not count time the scheduler
gives other processes on a shared machine. Two numbers:

* ``single call``: one ``evaluate`` on all n configurations (the issue's measure);
* ``blocks of 65,536``: the same n in ``fsdpsim.drivers.sweep.run.EVAL_CHUNK``-sized calls, as
  ``fsdpsim sweep`` calls it (temporaries stay in cache).

Run: ``python benchmarks/bench_sweep.py [--n 1000000] [--repeat 3]``
"""

from __future__ import annotations

import os

# One core: no threaded BLAS/OpenMP (numpy's element-wise kernels are single-threaded anyway).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fsdpsim import engine  # noqa: E402
from fsdpsim.hardware.catalog import load_catalog  # noqa: E402
from fsdpsim.plan.parallel import SHARDINGS, ParallelPlan, TrainingConfig  # noqa: E402
from fsdpsim.drivers.predict import (model_inputs, plan_inputs, system_inputs,  # noqa: E402
                             training_inputs)
from fsdpsim.model.presets import get_model  # noqa: E402
from fsdpsim.hardware.system import resolve_system  # noqa: E402

FLOOR_CONFIGS_PER_S = 1_000_000
MODELS = ("gpt3-1.3b", "llama3-8b", "llama3-70b", "mixtral-8x7b")
GPUS = ("h100", "b200", "mi300x")
NUM_GPUS = (8, 16, 32, 64, 128, 256, 512, 1024)
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)


#: Model-parallel layouts (tp, pp, cp) of the hybrid mix (--hybrid).
LAYOUTS = tuple((tp, pp, cp) for tp in (1, 2, 4, 8) for pp in (1, 2, 4) for cp in (1, 2))


def _plans(num_gpus: int, hybrid: bool):
    if not hybrid:
        for sharding in SHARDINGS:
            yield ParallelPlan(num_gpus=num_gpus, gpus_per_node=8, sharding=sharding)
        return
    for tp, pp, cp in LAYOUTS:
        if num_gpus % (tp * pp * cp):
            continue
        for sharding in ("optimizer", "full"):
            yield ParallelPlan(num_gpus=num_gpus, gpus_per_node=8, sharding=sharding, tp=tp,
                               pp=pp, cp=cp)


def bench_inputs(n: int, seed: int = 0, hybrid: bool = False,
                 models: tuple[str, ...] = MODELS) -> dict[str, np.ndarray]:
    """``n`` configurations drawn from the mix above (``hybrid``: the data-parallel shardings
    crossed with :data:`LAYOUTS` instead of every sharding); every input a float array of
    length n."""
    cat = load_catalog(use_env=False)
    systems = [resolve_system(cat, gpu=g) for g in GPUS]
    rows = []
    for name in models:
        spec = get_model(name)
        for system in systems:
            for num_gpus in NUM_GPUS:
                for plan in _plans(num_gpus, hybrid):
                    x = {**model_inputs(spec, plan.shard_group, tp=plan.tp),
                         **system_inputs(system, "bf16"),
                         **plan_inputs(plan, spec.n_layers),
                         **training_inputs(TrainingConfig(seq_len=1))}
                    rows.append({k: float(v) for k, v in x.items()})
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(rows), n)
    x = {k: np.array([r[k] for r in rows])[pick] for k in rows[0]}
    x["seq_len"] = np.array(SEQ_LENS, dtype=float)[rng.integers(0, len(SEQ_LENS), n)]
    x["micro_batch"] = rng.integers(1, 9, n).astype(float)
    x["recompute"] = rng.integers(0, 3, n).astype(float)
    x["grad_accum"] = rng.integers(1, 5, n).astype(float)
    return x


def bench_evaluate(n: int = 1_000_000, repeat: int = 3, chunk: int | None = None,
                   seed: int = 0, inputs: dict[str, np.ndarray] | None = None) -> float:
    """Best-of-``repeat`` throughput of ``engine.evaluate`` on ``n`` configurations [1/s].

    ``chunk`` evaluates them in calls of that many configurations (None: one call).
    """
    x = bench_inputs(n, seed) if inputs is None else inputs
    n = len(x["seq_len"])
    step = chunk or n
    blocks = [{**{k: v[s:s + step] for k, v in x.items()}, "ceilings": 0.0}
              for s in range(0, n, step)]
    engine.evaluate(blocks[0])  # warm-up (imports, first-touch allocations)
    best = np.inf
    for _ in range(max(1, repeat)):
        start = time.process_time()
        for block in blocks:
            engine.evaluate(block)
        best = min(best, time.process_time() - start)
    return n / best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="configurations (default 1M)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the best counts")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated presets of the mix (default: %(default)s; "
                             "mixtral-8x7b takes the engine's layered MoE path)")
    parser.add_argument("--hybrid", action="store_true",
                        help="a mixed hybrid grid (tp 1-8, pp 1-4, cp 1-2, ZeRO-1/FSDP) instead "
                             "of the data-parallel one (the same floor)")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    from fsdpsim.drivers.sweep.run import EVAL_CHUNK

    models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    x = bench_inputs(args.n, hybrid=args.hybrid, models=models)
    single = bench_evaluate(repeat=args.repeat, inputs=x)
    blocked = bench_evaluate(repeat=args.repeat, chunk=EVAL_CHUNK, inputs=x)
    print(f"engine.evaluate, {args.n:,} {'hybrid' if args.hybrid else 'data-parallel'} "
          f"configurations of {', '.join(models)}, ceilings off, one core (CPU time), best of "
          f"{args.repeat}:")
    print(f"  single call          {single:>12,.0f} configs/s")
    print(f"  blocks of {EVAL_CHUNK:,}    {blocked:>12,.0f} configs/s")
    verdict = "meets" if max(single, blocked) >= FLOOR_CONFIGS_PER_S else "is below"
    print(f"  floor {FLOOR_CONFIGS_PER_S:,} configs/s: the faster mode {verdict} it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
