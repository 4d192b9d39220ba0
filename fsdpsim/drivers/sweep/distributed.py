"""Sweeps on a Dask cluster: the grid cut into chunks of points, each chunk evaluated on a worker
of an existing ``dask.distributed`` cluster, written as one Parquet partition.

Each chunk is a pure function of the grid and its point range (:func:`evaluate_chunk` runs the
same :func:`fsdpsim.drivers.sweep.run.iter_sweep` code on those points), so a chunk that Dask
recomputes after losing a worker gives the same rows. The client writes chunk ``i`` to
``part-{i:06d}.parquet`` (to a temporary name first, then renamed), once per chunk: no row is
lost or written twice, and reading the folder in name order (``pandas.read_parquet(DIR)``)
gives exactly the rows, in the order, of the single-process sweep.

Needs the optional extra ``pip install 'fsdpsim[dask]'`` (dask.distributed and pyarrow); the
rest of fsdpsim never imports it.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from fsdpsim.drivers.sweep.grid import Grid
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.output import write_parquet

#: Seconds to wait for the scheduler before giving up with one line.
CONNECT_TIMEOUT_S = 10
#: Sub-grid tables kept per worker process (one sweep's gradient-sync blocks at a time).
_CACHE_SIZE = 4
_TABLES: dict[tuple[str, int], Any] = {}


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Points ``start:stop`` of the sub-grid of gradient sync ``sync`` (the single-process
    sweep writes one block of rows per sync, in this order)."""

    index: int
    sync: int
    start: int
    stop: int


def sub_grids(grid: Grid) -> list[Grid]:
    """The grids :func:`~fsdpsim.drivers.sweep.run.iter_sweep` walks one after the other."""
    if len(grid.grad_syncs) == 1:
        return [grid]
    return [dataclasses.replace(grid, grad_syncs=(s,)) for s in grid.grad_syncs]


def default_chunk_points(grid: Grid) -> int:
    """Points per chunk: about :data:`~fsdpsim.drivers.sweep.run.CANDIDATES_PER_CHUNK`
    candidate configurations (~1 GiB of temporaries at most, a few seconds of one core)."""
    from fsdpsim.drivers.sweep.run import CANDIDATES_PER_CHUNK, estimated_candidates

    per_point = max(estimated_candidates(sub_grids(grid)[0]) / max(grid.n_points, 1), 1.0)
    return max(1, int(CANDIDATES_PER_CHUNK // per_point))


def chunks(grid: Grid, chunk_points: int) -> list[Chunk]:
    """Every chunk of the sweep, in the order of its rows."""
    if chunk_points < 1:
        raise ConfigError(f"--chunk-points {chunk_points}: give a whole number of at least 1")
    out = []
    for s, sub in enumerate(sub_grids(grid)):
        for start in range(0, sub.n_points, chunk_points):
            out.append(Chunk(len(out), s, start, min(start + chunk_points, sub.n_points)))
    return out


def evaluate_chunk(grid: Grid, token: str, chunk: Chunk):
    """The rows of one chunk as a DataFrame (runs on a worker). The sub-grid's input tables are
    built once per worker process and sweep (``token``) and reused by its later chunks."""
    import numpy as np

    from fsdpsim.drivers.sweep.run import EVAL_CHUNK, _frame, _sweep_points
    from fsdpsim.drivers.sweep.tables import _Tables

    sub = sub_grids(grid)[chunk.sync]
    key = (token, chunk.sync)
    tables = _TABLES.get(key)
    if tables is None:
        while len(_TABLES) >= _CACHE_SIZE:
            _TABLES.pop(next(iter(_TABLES)))
        tables = _TABLES[key] = _Tables(sub)
    return _frame(_sweep_points(sub, tables, np.arange(chunk.start, chunk.stop), EVAL_CHUNK))


def check_folder(output: str | None) -> Path:
    """The output folder of a distributed sweep: new or empty, its parent existing."""
    if output is None or output == "-" or not output.strip():
        raise ConfigError("--scheduler writes Parquet partitions to a folder: give --output "
                          "DIR.parquet")
    path = Path(output)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ConfigError(f"--output {output!r}: give a new or empty folder (a distributed "
                          "sweep writes one part-NNNNNN.parquet file per chunk)")
    if not path.resolve().parent.is_dir():
        raise ConfigError(f"--output {output!r}: folder {str(path.resolve().parent)!r} does "
                          "not exist")
    return path


def _dask_distributed():
    """``dask.distributed``, or one line saying how to install it (an optional extra)."""
    try:
        import dask.distributed
    except ImportError:
        raise ConfigError("--scheduler needs dask.distributed and pyarrow, which are not "
                          "installed: pip install 'fsdpsim[dask]'") from None
    return dask.distributed


@contextmanager
def client_for(scheduler: str) -> Iterator[Any]:
    """A client of the cluster at ``scheduler``; ``local`` or ``local:N`` starts a
    ``LocalCluster`` of N worker processes here (default: one per core) for the sweep."""
    if scheduler == "local" or scheduler.startswith("local:"):
        workers = scheduler.partition(":")[2]
        if workers and not (workers.isdigit() and int(workers) >= 1):
            raise ConfigError(f"--scheduler {scheduler!r}: give local or local:N with N a "
                              "whole number of worker processes, at least 1")
        dd = _dask_distributed()
        Client, LocalCluster = dd.Client, dd.LocalCluster
        n = int(workers) if workers else (os.cpu_count() or 1)
        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            yield client
        return
    client = connect(scheduler)
    try:
        yield client
    finally:
        client.close()


def connect(scheduler: str):
    """A ``dask.distributed`` client of the cluster at ``scheduler`` (one line if it fails)."""
    Client = _dask_distributed().Client
    try:
        return Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise ConfigError(f"--scheduler {scheduler!r}: cannot reach a Dask scheduler there "
                          f"({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:120] if str(exc) else 'no answer'})"
                          "; give its address, e.g. tcp://HOST:8786") from None


def run_distributed(grid: Grid, client, output: str, *, chunk_points: int | None = None,
                    progress: Callable[[int], None] | None = None) -> tuple[int, int]:
    """Evaluate the sweep of ``grid`` on the workers of ``client`` and write one Parquet
    partition per chunk into the folder ``output``. Returns (rows, feasible rows).

    ``progress`` is called with the number of points finished as chunks complete (in any
    order)."""
    from dask.distributed import as_completed

    folder = check_folder(output)
    folder.mkdir(exist_ok=True)
    todo = chunks(grid, chunk_points or default_chunk_points(grid))
    token = uuid.uuid4().hex
    grid_future = client.scatter(grid, broadcast=True)
    futures = {client.submit(evaluate_chunk, grid_future, token, c, pure=False,
                             retries=2, key=f"fsdpsim-sweep-{token}-{c.index}"): c for c in todo}
    rows = feasible = 0
    written: set[int] = set()
    for future, frame in as_completed(futures, with_results=True):
        chunk = futures.pop(future)
        if chunk.index not in written:
            _write_partition(folder, chunk.index, frame)
            written.add(chunk.index)
            rows += len(frame)
            feasible += int(frame["infeasible"].isna().sum())
            if progress is not None:
                progress(chunk.stop - chunk.start)
        future.release()
    missing = sorted({c.index for c in todo} - written)
    if missing:  # as_completed yields every future once; this guards the invariant
        raise RuntimeError(f"chunks {missing[:5]} were not written")
    return rows, feasible


def _write_partition(folder: Path, index: int, frame) -> None:
    final = folder / f"part-{index:06d}.parquet"
    tmp = folder / f".part-{index:06d}.{os.getpid()}.tmp"
    try:
        write_parquet(frame, tmp)
        os.replace(tmp, final)
    except OSError as exc:
        raise ConfigError(f"cannot write {str(final)!r}: {exc.strerror or exc}") from None


def partitions(output: str | os.PathLike) -> Iterator[Path]:
    """The partition files of a distributed sweep's folder, in the order of their rows."""
    yield from sorted(Path(output).glob("part-*.parquet"))


__all__ = ["Chunk", "chunks", "client_for", "connect", "default_chunk_points", "evaluate_chunk",
           "partitions", "run_distributed", "sub_grids"]
