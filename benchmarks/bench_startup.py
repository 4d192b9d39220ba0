"""Start-up time of the ``fsdpsim`` command: import overhead above a bare interpreter.

The ceiling is 0.2 s of import overhead for ``fsdpsim --version`` and for a table
``predict``: every command imports pandas and matplotlib only when it needs them (a sweep, CSV
output, a plot), numpy and click always.

Each case runs in a fresh interpreter (``sys.executable``, in this checkout, which is first on
``sys.path``),
``--runs`` times (default 9), next to a bare interpreter (``python -c pass``), so the
difference is what fsdpsim adds. Wall time is reported as the median and the best of the runs;
as ``bench_sweep.py`` takes the best of 3, the ceiling is judged on the best (on a shared
machine the others include time the scheduler gives other processes; the load average is
printed). CPU time (the child's user + system time, median) is shown too: it counts numpy's
OpenBLAS threads starting on other cores, so it can exceed wall time.

* ``import fsdpsim.cli``: the command-line module and everything it imports;
* ``fsdpsim --version``: the same plus click's parsing;
* ``predict's imports``: everything a table ``predict`` imports (numpy, the engine, the model
  presets, the cost and failure models): the import overhead the ceiling is about;
* ``fsdpsim predict`` (table): the whole command: those imports, reading the catalogs (their
  checked entries from the per-user disk cache, :mod:`fsdpsim.util.disk_cache`), one
  prediction and its table.

Each case runs once unmeasured first, so the measured runs find this checkout's bytecode and
the catalog cache as an installed fsdpsim's second command does (``PYTHONDONTWRITEBYTECODE`` is
dropped from the children's environment).

``--importtime`` also prints the ten slowest imports of ``import fsdpsim.cli`` (``python -X
importtime``, cumulative microseconds).

Run: ``python benchmarks/bench_startup.py [--runs 9] [--importtime]``
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The ceiling on import overhead [s].
CEILING_S = 0.2
CASES = {
    "import fsdpsim.cli": "import fsdpsim.cli",
    "fsdpsim --version": ("import sys\nfrom fsdpsim.cli import main\n"
                          "sys.argv = ['fsdpsim', '--version']\nmain(['--version'])"),
    # everything a table predict imports (the CLI, numpy, the engine, presets, procurement)
    "predict's imports": ("import fsdpsim.cli, fsdpsim.cli.predict, fsdpsim.drivers.predict, "
                          "fsdpsim.model.presets, fsdpsim.hardware.system, fsdpsim.drivers.procurement, "
                          "fsdpsim.costs.goodput"),
    "fsdpsim predict (table)": ("from fsdpsim.cli import main\n"
                                "main(['predict', '--model', 'llama3-8b', '--num-gpus', '64'])"),
}
#: The cases the ceiling applies to (import overhead); the others are shown for context.
CEILING_CASES = ("fsdpsim --version", "predict's imports")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in
                                                      env.get("PYTHONPATH", "").split(os.pathsep)
                                                      if p])
    env.pop("FSDPSIM_CATALOG", None)
    # Bytecode as an installed fsdpsim has it (pip compiles it at install; a checkout's first
    # run writes it): with PYTHONDONTWRITEBYTECODE set, every run would compile each module of
    # this checkout again, about as much time as the imports themselves.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(code: str, runs: int) -> tuple[float, float, float]:
    """Median wall, best wall and median CPU time (user + system, the child's) of
    ``python -c code`` over ``runs`` fresh interpreters [s]."""
    walls, cpus = [], []
    subprocess.run([sys.executable, "-c", code], env=_env(), check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # warm-up: bytecode, caches
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=_env(), check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), min(walls), statistics.median(cpus)


def slowest_imports(count: int = 10) -> list[tuple[int, str]]:
    """The ``count`` imports of ``import fsdpsim.cli`` with the largest cumulative time [us]."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import fsdpsim.cli"],
                         env=_env(), check=True, capture_output=True, text=True,
                         cwd=ROOT).stderr
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].strip()))
    return sorted(rows, reverse=True)[:count]


def measure(runs: int) -> dict[str, tuple[float, float, float]]:
    """(median wall, best wall, median CPU) of a bare interpreter and of each case [s]."""
    out = {"bare interpreter": timed("pass", runs)}
    for name, code in CASES.items():
        out[name] = timed(code, runs)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="fresh interpreters per case")
    parser.add_argument("--importtime", action="store_true",
                        help="also list the slowest imports of fsdpsim.cli")
    args = parser.parse_args(argv)
    times = measure(max(1, args.runs))
    bare = times["bare interpreter"]
    print(f"{args.runs} fresh interpreters each ({sys.executable}, load average "
          f"{os.getloadavg()[0]:.2f}); overhead = time - the bare interpreter's; the ceiling "
          "is judged on the best wall time")
    print(f"  {'':<24} {'wall median':>12} {'wall best':>10} {'CPU median':>11}   "
          f"{'overhead: best (median)':>24}")
    for name, (median, best, cpu) in times.items():
        row = f"  {name:<24} {1e3 * median:9.1f} ms {1e3 * best:7.1f} ms {1e3 * cpu:8.1f} ms"
        if name != "bare interpreter":
            extra = best - bare[1]
            row += f"   {1e3 * extra:10.1f} ms ({1e3 * (median - bare[0]):6.1f} ms)"
            if name in CEILING_CASES:
                row += (f"  {'within' if extra < CEILING_S else 'ABOVE'} the {CEILING_S:g} s "
                        "ceiling")
        print(row)
    if args.importtime:
        print("slowest imports of fsdpsim.cli (cumulative):")
        for micros, module in slowest_imports():
            print(f"  {micros / 1e3:8.1f} ms  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
