"""Cost, energy and time to train on the command line: the options ``predict``, ``sweep``,
``search`` and ``compare`` share (their words: :mod:`fsdpsim.report.procurement`)."""

from __future__ import annotations

import click

from fsdpsim.drivers.procurement import (DEFAULT_GPU_MTBF_S, DEFAULT_PUE, DEFAULT_RESTART_S,
                                         DEFAULT_STORAGE_BYTES_PER_S_PER_GPU)


def run_options(f):
    """``--tokens``, ``--pue``, ``--gpu-mtbf-hours``, ``--checkpoint-gb-per-s`` and
    ``--restart-min``: read by :func:`fsdpsim.drivers.procurement.read_run_options` in both
    commands."""
    opts = [
        click.option("--tokens", default=None,
                     help="Tokens of a training run (e.g. 15t): adds days, GPU-hours, cost and "
                          "energy to train them, without and with failures."),
        click.option("--pue", default=None,
                     help=f"Facility PUE for energy (default {DEFAULT_PUE:g}: Uptime Institute "
                          "2024 industry average; 1 = GPUs only)."),
        click.option("--gpu-mtbf-hours", default=None,
                     help=f"Mean time between job-stopping failures per GPU, hours (default "
                          f"{DEFAULT_GPU_MTBF_S / 3600:,.0f}: Llama 3's 419 interruptions in 54 "
                          "days on 16,384 H100)."),
        click.option("--checkpoint-gb-per-s", default=None,
                     help=f"Checkpoint write bandwidth of the whole job, GB/s (default "
                          f"{DEFAULT_STORAGE_BYTES_PER_S_PER_GPU / 1e9:.3f} per GPU: Llama 3's "
                          "2 TB/s storage over 16,384 GPUs)."),
        click.option("--restart-min", default=None,
                     help=f"Minutes from a failure until training runs again (default "
                          f"{DEFAULT_RESTART_S / 60:g}: synchronous training at scale, "
                          "arXiv 2602.00277)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


__all__ = ["run_options"]
