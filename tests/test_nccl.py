"""The collective model against NCCL's own model and measured bus bandwidth.

Each reference point names its source in ``tests/data/reference/network_at_scale.md`` (§1: NCCL
2.30's ``tuning.cc`` model, evaluated by hand there; §2: measured nccl-tests bus bandwidth).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdpsim.hardware.catalog import load_catalog
from fsdpsim.costs import nccl
from fsdpsim.engine import layers
from fsdpsim.engine.inputs import Prepared
from fsdpsim.engine.collectives import bus_bandwidth
from fsdpsim.drivers.predict import system_inputs
from fsdpsim.hardware.system import resolve_system

CATALOG = load_catalog(use_env=False)
GB = 1e9


def _group(cluster: str, n: int, *, library="nccl-2.30", nic_fraction=None, decay=True,
           per_node=8):
    system = resolve_system(CATALOG, cluster=cluster)
    x = system_inputs(system, "bf16")
    x.update(nccl.library_inputs(CATALOG.collectives(library)))
    if nic_fraction is not None:
        x["nic_fraction"] = nic_fraction
    if not decay:
        x["nic_decay_per_doubling"] = 0.0
    g = Prepared.of({k: np.asarray(v, dtype=float) for k, v in x.items()})
    bw = bus_bandwidth(g, layers.rates(g), float(n), float(per_node))
    return g, bw


def busbw_gb_per_s(cluster, n, message_bytes, *, all_reduce=False, **kw):
    """nccl-tests bus bandwidth of one collective of ``message_bytes`` over ``n`` ranks."""
    g, bw = _group(cluster, n, **kw)
    cands = nccl.candidates(g, float(n), 8.0, bw, True, all_reduce)
    return float(nccl.bus_bandwidth_bytes_per_s(message_bytes, float(n), cands, all_reduce)) / GB


# NCCL's own model for AllGather on DGX H100 (8x NDR400, Intel host), min over LL/LL128/Simple,
# busbw at S = 16 MB / 128 MB / 1 GB / 4 GB (network_at_scale.md §1 table, "Model").
NCCL_MODEL_H100 = {64: (81, 221, 347, 374), 512: (14, 85, 225, 316), 1536: (6.2, 35, 154, 239),
                   4096: (2.9, 14, 86, 183), 16384: (0.8, 5.1, 28, 86)}


@pytest.mark.parametrize("n", sorted(NCCL_MODEL_H100))
def test_reproduces_nccls_own_model_on_h100(n):
    """With NCCL's channel speed (0.96 of the NIC line rate) and no fabric decay, fsdpsim's
    candidates give NCCL's predicted bus bandwidth within 10 % at every size and scale."""
    for size, want in zip((16e6, 128e6, 1e9, 4e9), NCCL_MODEL_H100[n]):
        got = busbw_gb_per_s("dgx-h100", n, size, nic_fraction=0.96, decay=False)
        assert got == pytest.approx(want, rel=0.10), (n, size, got, want)


def test_large_message_busbw_of_dgx_a100_within_10_percent():
    """DGX A100 (8x HDR200) multi-node AllReduce at large messages: 192 GB/s (AddyLaddy,
    NVIDIA/nccl#1576, network_at_scale.md §2)."""
    assert busbw_gb_per_s("dgx-a100-80gb", 16, 2**31, all_reduce=True) == \
        pytest.approx(192, rel=0.10)


def test_large_message_busbw_of_dgx_h100_within_10_percent():
    """DGX H100 (8x NDR400) AllReduce on 32 GPUs, ring: 370-380 GB/s (GTC slides in
    ml-engineering, network_at_scale.md §2)."""
    assert busbw_gb_per_s("dgx-h100", 32, 16 * 2**30, all_reduce=True) == \
        pytest.approx(375, rel=0.10)


# Measured ReduceScatter bus bandwidth on H100 (NVIDIA/nccl#1229, "linear decline", ring) at the
# largest size (8 GiB, as network_at_scale.md §2 compares).
NCCL_1229 = {32: 360, 64: 345, 128: 320, 256: 300, 512: 280, 1024: 260}


@pytest.mark.parametrize("n", sorted(NCCL_1229))
def test_reduce_scatter_decay_with_scale_on_h100(n):
    """The catalog's InfiniBand decay on top of NCCL's ring latency reproduces each point
    within 10 % (and the whole decline: 32 -> 1,024 GPUs falls by more than a fifth)."""
    got = busbw_gb_per_s("dgx-h100", n, 8 * 2**30)
    assert got == pytest.approx(NCCL_1229[n], rel=0.10)


def test_the_decline_from_32_to_1024_gpus():
    first, last = (busbw_gb_per_s("dgx-h100", n, 8 * 2**30) for n in (32, 1024))
    assert last / first == pytest.approx(260 / 360, rel=0.10)


def test_protocol_choice_follows_message_size():
    """Small messages take LL (least latency), large ones Simple (full bandwidth)."""
    g, bw = _group("dgx-h100", 64)
    cands = nccl.candidates(g, 64.0, 8.0, bw, True, False)
    times = lambda m: [float(m * spb + lat) for spb, lat in cands]  # noqa: E731
    assert int(np.argmin(times(4096.0))) == nccl.PROTOCOLS.index("ll")
    assert int(np.argmin(times(8 * 2**30))) == nccl.PROTOCOLS.index("simple")


def test_tree_all_reduce_beats_the_ring_for_small_messages_at_scale():
    """Tree latency grows with log2(nodes), the ring's with the ranks: at 4,096 ranks a 1 MB
    all-reduce runs on the tree, many times faster than any ring protocol."""
    g, bw = _group("dgx-h100", 4096)
    cands = nccl.candidates(g, 4096.0, 8.0, bw, True, True)
    times = [float(2**20 * spb + lat) for spb, lat in cands]
    assert int(np.argmin(times)) >= len(nccl.PROTOCOLS)       # a tree candidate
    assert min(times[:3]) > 5 * min(times[3:])


def test_a_single_rank_costs_nothing():
    g, bw = _group("dgx-h100", 1)
    for all_reduce in (False, True):
        cands = nccl.candidates(g, 1.0, 8.0, bw, True, all_reduce)
        assert float(nccl.time_s(1e9, cands)) == 0.0


def test_nccl_2_10_is_slower_per_hop_on_the_network_than_its_simple_protocol_allows():
    """The 2021 release's Simple ring has a 9.6 us network hop (2.30: 14 us) and no network
    post overhead: its latency for a 1,536-rank ring is what its constants say."""
    g, bw = _group("dgx-a100-80gb", 1536, library="nccl-2.10")
    simple = nccl.candidates(g, 1536.0, 8.0, bw, True, False)[2]
    want = (8.4 + (1536 - 192) * 3.4 + (192 - 1) * 9.6) * 1e-6
    assert float(simple[1]) == pytest.approx(want, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(n=st.sampled_from([2, 8, 16, 64, 256, 2048]), small=st.floats(1e3, 1e8),
       factor=st.floats(1.01, 100.0), all_reduce=st.booleans())
def test_time_grows_with_bytes_and_ranks(n, small, factor, all_reduce):
    """More bytes never take less time, nor do more ranks at the same per-rank share."""
    g, bw = _group("dgx-h100", n)
    cands = nccl.candidates(g, float(n), 8.0, bw, True, all_reduce)
    assert float(nccl.time_s(small * factor, cands)) >= float(nccl.time_s(small, cands))
    g2, bw2 = _group("dgx-h100", 2 * n)
    more = nccl.candidates(g2, 2.0 * n, 8.0, bw2, True, all_reduce)
    assert float(nccl.time_s(2 * small, more)) >= float(nccl.time_s(small, cands)) * (1 - 1e-12)


def test_fabric_factor():
    f = nccl.fabric_factor(np.array([1, 4, 8, 32, 1024.0]), 0.04, 4.0, 0.85)
    assert f.tolist() == pytest.approx([1.0, 1.0, 0.96, 0.88, 0.85])


def test_broadcast_is_a_chain_through_the_ring_by_hand():
    """A ring broadcast of M bytes over n ranks on N nodes: the ring's hop latency as an
    all-gather's (n − 1 hops, N − 1 between nodes) and every byte at the protocol's bus
    bandwidth: by hand per protocol, and no PAT (NCCL runs Broadcast on the ring only)."""
    n, per_node = 1024.0, 8.0
    g, bw = _group("dgx-a100-80gb", int(n))
    ag = nccl.candidates(g, n, per_node, bw, True, False)
    bc = nccl.candidates(g, n, per_node, bw, True, False, broadcast=True)
    assert len(bc) == len(nccl.PROTOCOLS)
    for (ag_spb, ag_lat), (spb, lat) in zip(ag[:3], bc):
        assert lat == pytest.approx(float(ag_lat))
        assert spb == pytest.approx(float(ag_spb) * n / (n - 1.0))  # M, not (n − 1)/n · M
    simple = nccl.PROTOCOLS.index("simple")
    nodes = n / per_node
    hop = max(float(g.nccl_simple_ring_nvlink_hop_s), 3.0 * float(g.nccl_net_overhead_s))
    by_hand = (float(g.nccl_simple_ring_base_s) + (n - nodes) * hop
               + (nodes - 1.0) * float(g.nccl_simple_ring_net_hop_s))
    assert float(bc[simple][1]) == pytest.approx(by_hand)
    assert float(bc[simple][0]) == pytest.approx(1.0 / float(bw))
    one = nccl.candidates(g, 1.0, 1.0, bw, True, False, broadcast=True)
    assert float(nccl.time_s(1e9, one)) == 0.0


@pytest.mark.parametrize("per_node", [8.0, 1.0])
@pytest.mark.parametrize("all_reduce", [False, True])
def test_candidates_of_a_group_equal_each_rows_own(per_node, all_reduce):
    """Collective times over many rows whose flags hold on every row (inside one node, or all
    across nodes) or vary give each row the time of its own candidates, bit for bit."""
    g, _ = _group("dgx-h100", 64)
    for sizes in ((2.0, 4.0, 8.0), (16.0, 64.0, 256.0), (1.0, 8.0, 64.0)):
        n = np.resize(np.array(sizes), 3 * 64)
        bw = np.resize(np.array([300e9, 350e9, 450e9]), n.size)
        many = nccl.candidates(g, n, per_node, bw, True, all_reduce)
        for message in (1e3, 1e6, 1e9):
            times = nccl.time_s(message, many)
            for i in range(0, n.size, 17):
                one = nccl.candidates(g, np.float64(n[i]), per_node, np.float64(bw[i]), True,
                                      all_reduce)
                assert times[i].tobytes() == np.float64(nccl.time_s(message, one)).tobytes()
