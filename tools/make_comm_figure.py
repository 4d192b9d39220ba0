"""The README's communication-at-scale figure: bus bandwidth of one collective against message
size and scale, from fsdpsim's collective model, with measured points.

Left: all-gather bus bandwidth on DGX H100 (8x NDR400 InfiniBand) against message size for
64 to 16,384 GPUs (NCCL 2.30 constants, the catalog's fabric decay), with the band the network's
uncertainty gives. Right: reduce-scatter at 8 GiB against GPU count, the model beside the
measurements of NVIDIA/nccl#1229 (network_at_scale.md §2).

    python tools/make_comm_figure.py docs/figures/comm_at_scale.png
"""

from __future__ import annotations

import sys

import numpy as np
from matplotlib.figure import Figure

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.costs import nccl
from fsdpsim.engine import layers
from fsdpsim.engine.collectives import bus_bandwidth
from fsdpsim.drivers.predict import system_inputs
from fsdpsim.hardware.system import resolve_system

MEASURED_RS_8GIB = {32: 360, 64: 345, 128: 320, 256: 300, 512: 280, 1024: 260}  # nccl#1229


def busbw_gb_per_s(g, n, sizes, fraction_scale=1.0):
    g = {**g, "nic_fraction": g["nic_fraction"] * fraction_scale}
    bw = bus_bandwidth(g, layers.rates(g), float(n), 8.0)
    cands = nccl.candidates(g, float(n), 8.0, bw, True, False)
    return nccl.bus_bandwidth_bytes_per_s(np.asarray(sizes, dtype=float), float(n), cands) / 1e9


def main(path: str) -> None:
    catalog = load_catalog(use_env=False)
    system = resolve_system(catalog, cluster="dgx-h100")
    g = {k: np.asarray(v, dtype=float) for k, v in system_inputs(system, "bf16").items()}
    u = system.network.bandwidth_uncertainty
    sizes = np.logspace(20, 34, 57, base=2.0)  # 1 MiB .. 16 GiB
    fig = Figure(figsize=(11.0, 4.4), layout="constrained")
    left, right = fig.subplots(1, 2)
    for n in (64, 512, 4096, 16384):
        mid = busbw_gb_per_s(g, n, sizes)
        line = left.plot(sizes, mid, label=f"{n:,} GPUs", linewidth=1.8)
        left.fill_between(sizes, busbw_gb_per_s(g, n, sizes, 1 - u),
                          busbw_gb_per_s(g, n, sizes, min(1 + u, 1 / g["nic_fraction"])),
                          color=line[0].get_color(), alpha=0.15, linewidth=0)
    left.set_xscale("log", base=2)
    left.set_xticks([2**20, 2**24, 2**27, 2**30, 2**33])
    left.set_xticklabels(["1 MiB", "16 MiB", "128 MiB", "1 GiB", "8 GiB"])
    left.set_xlabel("all-gather size (whole gathered buffer)")
    left.set_ylabel("bus bandwidth [GB/s]")
    left.set_title("All-gather on DGX H100, 8x NDR400 (NCCL 2.30 model)", fontsize=10)
    left.legend(fontsize=8, title="ring over", title_fontsize=8)
    left.grid(alpha=0.3)
    gpus = np.array(sorted(MEASURED_RS_8GIB))
    model = [float(busbw_gb_per_s(g, n, [8 * 2**30])[0]) for n in gpus]
    right.plot(gpus, model, marker="o", label="fsdpsim (latency + fabric decay)")
    right.plot(gpus, [MEASURED_RS_8GIB[n] for n in gpus], marker="s", linestyle="",
               color="black", label="measured, NVIDIA/nccl#1229")
    right.set_xscale("log", base=2)
    right.set_xticks(gpus)
    right.set_xticklabels([f"{n:,}" for n in gpus])
    right.set_ylim(0, 420)
    right.set_xlabel("GPUs (8 per node)")
    right.set_ylabel("bus bandwidth [GB/s]")
    right.set_title("Reduce-scatter of 8 GiB on H100 against scale", fontsize=10)
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/figures/comm_at_scale.png")
