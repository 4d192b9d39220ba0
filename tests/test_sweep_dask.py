"""``fsdpsim sweep --scheduler``: the grid's chunks on a Dask cluster (a LocalCluster of two
worker processes here) give exactly the rows of the single-process sweep, as Parquet
partitions, even when a worker dies mid-sweep."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow
distributed = pytest.importorskip("dask.distributed")
pytest.importorskip("pyarrow")

from fsdpsim.drivers.sweep import distributed as dsweep  # noqa: E402
from fsdpsim.drivers.sweep.grid import build_grid  # noqa: E402
from fsdpsim.drivers.sweep.run import run_sweep  # noqa: E402
from fsdpsim.hardware.catalog import load_catalog  # noqa: E402
from fsdpsim.util.errors import ConfigError  # noqa: E402
from fsdpsim.util.output import write_parquet  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = {"model": ["llama3-8b,llama3-70b"], "gpu": ["h100,b200"], "num-gpus": ["8..256"],
           "seq-len": ["4096,8192"], "grad-sync": ["every,last"]}


@pytest.fixture(scope="module")
def grid():
    return build_grid(load_catalog(()), OPTIONS)


@pytest.fixture(scope="module")
def single(grid, tmp_path_factory):
    """The single-process sweep as its Parquet file reads back."""
    path = tmp_path_factory.mktemp("single") / "rows.parquet"
    write_parquet(run_sweep(grid), path)
    return pd.read_parquet(path)


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as c:
        yield c


def test_chunks_cover_every_point_once_in_row_order(grid):
    cs = dsweep.chunks(grid, 5)
    assert [c.index for c in cs] == list(range(len(cs)))
    for sync in range(len(grid.grad_syncs)):
        spans = [(c.start, c.stop) for c in cs if c.sync == sync]
        assert spans[0][0] == 0 and spans[-1][1] == dsweep.sub_grids(grid)[sync].n_points
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    with pytest.raises(ConfigError, match="chunk-points"):
        dsweep.chunks(grid, 0)


def test_cluster_rows_equal_the_single_process_rows(grid, single, cluster, tmp_path):
    out = tmp_path / "sweep.parquet"
    with distributed.Client(cluster) as client:
        rows, feasible = dsweep.run_distributed(grid, client, str(out), chunk_points=7)
    assert rows == len(single) and feasible == int(single["infeasible"].isna().sum())
    assert len(list(dsweep.partitions(out))) == len(dsweep.chunks(grid, 7))
    pd.testing.assert_frame_equal(pd.read_parquet(out), single, check_categorical=False)


def test_a_worker_lost_mid_sweep_loses_and_duplicates_no_row(grid, single, cluster, tmp_path):
    out = tmp_path / "sweep.parquet"
    killed = []
    with distributed.Client(cluster) as client:
        def kill_one_worker(_points: int) -> None:
            if not killed:  # after the first chunk: one worker process exits abruptly
                victim = sorted(client.scheduler_info()["workers"])[0]
                killed.append(victim)
                try:
                    client.run(os._exit, 1, workers=[victim])
                except Exception:  # the worker dies before it answers
                    pass

        rows, _ = dsweep.run_distributed(grid, client, str(out), chunk_points=2,
                                         progress=kill_one_worker)
    assert killed
    assert rows == len(single)
    pd.testing.assert_frame_equal(pd.read_parquet(out), single, check_categorical=False)


def test_cli_writes_the_same_rows_as_the_single_process_sweep(single, cluster, tmp_path):
    out = tmp_path / "cli.parquet"
    args = [a for k, v in OPTIONS.items() for a in (f"--{k}", v[0])]
    proc = subprocess.run([sys.executable, "-m", "fsdpsim.cli", "sweep", *args, "--scheduler",
                           cluster.scheduler_address, "--chunk-points", "9", "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"fsdpsim sweep: {len(single)} rows")
    pd.testing.assert_frame_equal(pd.read_parquet(out), single, check_categorical=False)


@pytest.mark.parametrize("extra, message", [
    (["--scheduler", "local", "--format", "csv"], "--format csv with --scheduler"),
    (["--chunk-points", "4"], "give --scheduler too"),
    (["--scheduler", "local:0"], "local:N"),
    (["--scheduler", "local", "--chunk-points", "0"], "--chunk-points"),
    (["--scheduler", "local", "-o", "rows.csv"], "'rows.csv' with --scheduler"),
])
def test_bad_distributed_options_are_one_line(extra, message, tmp_path):
    from conftest import assert_one_line_error

    output = [] if "-o" in extra else ["-o", str(tmp_path / "x.parquet")]
    proc = subprocess.run([sys.executable, "-m", "fsdpsim.cli", "sweep", "--num-gpus", "8",
                           *extra, *output],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert message in assert_one_line_error(proc.returncode, proc.stdout, proc.stderr)


def test_a_used_folder_is_refused_before_any_work(tmp_path):
    (tmp_path / "old.parquet").mkdir()
    (tmp_path / "old.parquet" / "part-000000.parquet").write_text("x")
    with pytest.raises(ConfigError, match="new or empty folder"):
        dsweep.check_folder(str(tmp_path / "old.parquet"))
