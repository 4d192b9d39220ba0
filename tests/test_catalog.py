"""The hardware catalog: the built-in files, and the loader's strictness with user files.

Built-in checks: every file loads, every entry carries a source and a retrieval date, the ids the
rest of fsdpsim relies on exist, values are physically consistent (dense not sparse, per-GCD
MI250X, usable <= labelled memory, per-peer <= aggregate link bandwidth), and the per-GPU
inter-node bandwidth of every node is what the comment in its file says.

User-file checks: every kind of bad input raises ``ConfigError`` naming the file and the key,
and nothing else ever escapes the loader (hypothesis writes garbage and wrong values).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsdpsim.hardware.catalog import ENV_VAR, KINDS, SCHEMAS, _read_file, builtin_dir, load_catalog
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.units import GB_PER_S_BYTES_PER_S, GIB_BYTES, TB_PER_S_BYTES_PER_S, TFLOPS_FLOPS_PER_S

RETRIEVED = dt.date(2026, 11, 30)
FOLDER_KIND = {"accelerators": "accelerator", "networks": "network", "nodes": "node",
               "clusters": "cluster", "collectives": "collectives"}

ACCELERATOR_IDS = [
    "v100-sxm2-16gb", "v100-sxm2-32gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "a100-sxm4-64gb",
    "a100-pcie-40gb", "a100-pcie-80gb", "l4", "l40s", "h100-sxm5-80gb", "h100-pcie-80gb",
    "h200-sxm-141gb", "gh200-96gb", "gh200-144gb", "b200", "gb200", "gb300", "b300", "mi250x", "mi300x",
    "mi325x", "mi355x", "gaudi2", "gaudi3", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e",
]
NETWORK_IDS = [
    "ib-edr-100", "ib-hdr-200", "ib-hdr100", "ib-ndr-400", "ib-ndr200", "ib-xdr-800", "roce-100",
    "roce-200", "roce-400", "efa-v1", "efa-v2", "efa-v3", "efa-v4", "slingshot-11", "gcp-tcpx",
    "gcp-tcpxo", "gaudi-roce-100", "gaudi-roce-200",
]
CLUSTER_IDS = [
    "juwels-booster", "jupiter", "perlmutter", "frontier", "lumi-g", "leonardo", "selene", "eos",
    "llama3-roce", "llama3-ib", "mosaicml-a100-40gb", "mosaicml-a100-80gb",
]

# Line rate per GPU, one direction [Gb/s], worked out by hand from the node's NICs:
# nics_per_node x Gb/s per NIC / GPUs per node. Every built-in node must be listed here.
NODE_GBIT_PER_GPU = {
    "tpu-v5p-pod": 50.0,  # Google: DCN 50 Gb/s per chip
    "dgx-1-v100-16gb": 50,       # 4 x EDR 100 / 8
    "dgx-1-v100-32gb": 50,
    "dgx-a100-40gb": 200,        # 8 x HDR 200 / 8
    "dgx-a100-80gb": 200,
    "dgx-h100": 400,             # 8 x NDR 400 / 8
    "dgx-h200": 400,
    "dgx-b200": 400,
    "dgx-b300": 800,             # 8 x XDR 800 / 8
    "gb200-nvl72": 400,          # 72 x CX-7 400 / 72
    "gb300-nvl72": 800,          # 72 x CX-8 800 / 72
    "p4d": 50,                   # 4 x EFA 100 / 8
    "p5": 400,                   # 32 x EFA 100 / 8
    "p5e": 400,
    "p5en": 400,                 # 16 x EFA 200 / 8
    "p6-b200": 400,              # 8 x EFA 400 / 8
    "p6-b300": 800,              # 16 x EFA 400 / 8
    "nd-a100-v4": 200,           # 8 x HDR 200 / 8
    "nd-h100-v5": 400,           # 8 x NDR 400 / 8
    "a3-high": 100,              # 4 x 200 / 8
    "a3-mega": 200,              # 8 x 200 / 8
    "juwels-booster-node": 200,  # 4 x HDR200 / 4
    "jupiter-node": 200,         # 4 x NDR200 / 4
    "perlmutter-node": 200,      # 4 x Slingshot 200 / 4
    "frontier-node": 100,        # 4 x Slingshot 200 / 8 GCDs
    "lumi-g-node": 100,
    "leonardo-node": 100,        # 4 x HDR100 / 4
    "grand-teton-h100": 400,     # 8 x 400G / 8
    "grand-teton-h100-ib": 400,
    "gaudi2-hls": 300,           # 24 x 100 GbE / 8
    "gaudi3-node": 600,          # 24 x 200 GbE / 8
    "mi300x-node": 400,          # 8 x 400G / 8 (estimate)
    "mosaicml-a100-40gb-node": 200,  # 1,600 Gb/s per node / 8
    "mosaicml-a100-80gb-node": 200,
}


@pytest.fixture
def builtin(monkeypatch):
    """The built-in catalog alone, whatever FSDPSIM_CATALOG says in the caller's shell."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    return load_catalog()


def _builtin_files() -> list[Path]:
    return sorted(builtin_dir().rglob("*.toml"))


# ------------------------------------------------------------------------------------------------
# The built-in catalog
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", _builtin_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_builtin_file_loads_and_holds_its_folder_kind(path):
    raws = _read_file(path)
    assert raws, f"{path} holds no entries"
    assert {r.kind for r in raws} == {FOLDER_KIND[path.parent.name]}


def test_builtin_catalog_has_every_folder(builtin):
    folders = {p.parent.name for p in _builtin_files()}
    assert folders == set(FOLDER_KIND)


@pytest.mark.parametrize("kind,ident", [("accelerator", i) for i in ACCELERATOR_IDS]
                         + [("network", i) for i in NETWORK_IDS]
                         + [("node", i) for i in NODE_GBIT_PER_GPU]
                         + [("cluster", i) for i in CLUSTER_IDS])
def test_required_id_exists(builtin, kind, ident):
    assert ident in builtin.ids(kind)


@pytest.mark.parametrize("alias,ident", [
    ("a100", "a100-sxm4-80gb"), ("h100", "h100-sxm5-80gb"), ("h200", "h200-sxm-141gb"),
    ("a100-40gb", "a100-sxm4-40gb"), ("a100-80gb", "a100-sxm4-80gb"), ("v100", "v100-sxm2-32gb"),
    ("mi300", "mi300x"), ("gh200", "gh200-96gb"), ("H100", "h100-sxm5-80gb"),
])
def test_accelerator_aliases(builtin, alias, ident):
    assert builtin.resolve_id("accelerator", alias) == ident
    assert builtin.accelerator(alias).id == ident


def test_node_alias_dgx_a100_is_the_80gb_node(builtin):
    assert builtin.node("dgx-a100").id == "dgx-a100-80gb"


def test_no_name_is_used_by_two_kinds(builtin):
    """`Catalog.find` searches every kind, so an id or alias must be unique across kinds."""
    seen: dict[str, str] = {}
    for kind in KINDS:
        for ident in builtin.ids(kind):
            for name in [ident, *builtin.raw(kind, ident).get("aliases", [])]:
                assert name not in seen, f"{name!r} is both a {seen[name]} and a {kind}"
                seen[name] = kind


@pytest.mark.parametrize("kind", KINDS)
def test_every_entry_has_source_and_retrieved(builtin, kind):
    for ident in builtin.ids(kind):
        raw = builtin.raw(kind, ident)
        assert raw["source"].strip(), f"{kind} {ident} has an empty source"
        assert RETRIEVED <= raw["retrieved"] <= dt.date.today(), \
            f"{kind} {ident}: retrieved {raw['retrieved']}"
        if kind == "accelerator":
            assert raw["efficiency"]["source"].strip()
            assert raw["intra_node_link"].get("source", "").strip()
        if kind == "network":
            assert raw["fraction_source"].strip()


def _all_fields_in_range(data, schema, where):
    """Re-check every value against the schema (the loader did; this guards the schema)."""
    for key, value in data.items():
        spec = schema[key]
        if isinstance(spec, dict):
            _all_fields_in_range(value, spec, f"{where}[{key}]")
        elif spec.lo is not None:
            assert spec.lo <= value <= spec.hi, f"{where} {key} = {value}"
        elif spec.choices:
            assert value in spec.choices, f"{where} {key} = {value}"


@pytest.mark.parametrize("kind", KINDS)
def test_every_entry_passes_range_checks(builtin, kind):
    for ident in builtin.ids(kind):
        _all_fields_in_range(builtin.raw(kind, ident), SCHEMAS[kind], f"{kind} {ident}")


@pytest.mark.parametrize("ident", ACCELERATOR_IDS)
def test_accelerator_is_physically_consistent(builtin, ident):
    raw = builtin.raw("accelerator", ident)
    acc = builtin.accelerator(ident)
    peaks = raw["peak_dense_tflops"]
    half_precision = peaks.get("bf16", peaks.get("fp16"))
    assert half_precision is not None, "needs a bf16 or fp16 peak"
    # Dense figures: bf16 and fp16 run at the same rate; lower precisions are never slower.
    if "bf16" in peaks and "fp16" in peaks:
        assert peaks["bf16"] == peaks["fp16"]
    for low, high in [("fp32", "bf16"), ("fp32", "fp16"), ("tf32", "bf16"), ("bf16", "fp8"),
                      ("fp8", "fp4")]:
        if low in peaks and high in peaks:
            assert peaks[low] <= peaks[high], f"{low} {peaks[low]} > {high} {peaks[high]}"
    # Memory: usable never exceeds the label; reserves leave most of it free.
    if "memory_usable_gib" in raw:
        assert raw["memory_usable_gib"] <= raw["memory_gib"]
    assert raw["runtime_reserved_gib"] < 0.1 * raw["memory_gib"]
    # Link: a mesh or torus needs its per-peer rate, which cannot exceed the aggregate.
    link = raw["intra_node_link"]
    if link["topology"] in ("mesh", "torus"):
        assert "per_peer_gb_per_s_per_direction" in link
    if "per_peer_gb_per_s_per_direction" in link:
        assert link["per_peer_gb_per_s_per_direction"] <= link["gb_per_s_per_direction"]
    if link["topology"] == "pcie":
        assert link["kind"].startswith("pcie") and link["gb_per_s_per_direction"] <= 64
    # Efficiency: n_1/2 = matmul_fraction x half-precision peak x 5 us (stated in every file).
    eff = raw["efficiency"]
    expected_half_gflop = eff["matmul_fraction"] * half_precision * 1e12 * 5e-6 / 1e9
    assert eff["matmul_half_gflop"] == pytest.approx(expected_half_gflop, rel=0.03)
    assert eff["link_fraction"] <= 1.0
    assert acc.peak_for("bf16" if "bf16" in peaks else "fp16") == half_precision * 1e12


@pytest.mark.parametrize("ident,bf16_tflops,memory_gib,hbm_tb_per_s", [
    ("mi250x", 191.5, 64, 1.6384),          # per GCD = half the package
    ("gb200", 2500, 186, 8.0),              # per GPU of the superchip
    ("gb300", 2500, 279, 8.0),              # per GPU of the GB300 superchip
    ("h100-sxm5-80gb", 989.4, 80, 3.35),    # dense: 1,979 "with sparsity" / 2
    ("h100-pcie-80gb", 756, 80, 2.0),
    ("a100-sxm4-40gb", 312, 39.49, 1.555),  # CUDA-visible capacity
    ("l40s", 362.05, 48, 0.864),
    ("gaudi3", 1677, 128, 3.67),            # as shipped (1.6 GHz MME)
    ("tpu-v5p", 459, 95, 2.765),
])
def test_hand_checked_accelerator_values(builtin, ident, bf16_tflops, memory_gib, hbm_tb_per_s):
    acc = builtin.accelerator(ident)
    assert acc.peak_for("bf16") == pytest.approx(bf16_tflops * TFLOPS_FLOPS_PER_S)
    assert acc.memory_bytes == pytest.approx(memory_gib * GIB_BYTES)
    assert acc.hbm_bandwidth_bytes_per_s == pytest.approx(hbm_tb_per_s * TB_PER_S_BYTES_PER_S)


def test_v100_has_fp16_but_no_bf16(builtin):
    v100 = builtin.accelerator("v100")
    assert v100.peak_for("fp16") == pytest.approx(125e12)
    with pytest.raises(ConfigError, match="bf16"):
        v100.peak_for("bf16")


@pytest.mark.parametrize("ident,gb_per_s,per_peer,topology", [
    ("h100", 450, None, "switch"),          # 900 GB/s bidirectional / 2
    ("b200", 900, None, "switch"),
    ("mi300x", 448, 64, "mesh"),            # 7 x 128 bidirectional / 2; 64 per peer
    ("gaudi2", 262.5, 37.5, "mesh"),        # 21 x 100 Gb/s
    ("l4", 31, None, "pcie"),
    ("tpu-v6e", 400, 100, "torus"),
])
def test_hand_checked_links(builtin, ident, gb_per_s, per_peer, topology):
    link = builtin.accelerator(ident).link
    assert link.bandwidth_bytes_per_s == pytest.approx(gb_per_s * GB_PER_S_BYTES_PER_S)
    assert link.topology == topology
    if per_peer is None:
        assert link.per_peer_bandwidth_bytes_per_s is None
    else:
        assert link.per_peer_bandwidth_bytes_per_s == pytest.approx(per_peer * 1e9)


def test_gb200_nvlink_domain_is_the_rack(builtin):
    node = builtin.node("gb200-nvl72")
    assert node.gpus_per_node == 72 and node.link.domain_size == 72


def test_every_builtin_node_is_hand_checked(builtin):
    assert set(builtin.ids("node")) == set(NODE_GBIT_PER_GPU)


@pytest.mark.parametrize("ident,gbit", sorted(NODE_GBIT_PER_GPU.items()))
def test_node_inter_node_gbit_per_gpu(builtin, ident, gbit):
    assert builtin.node(ident).inter_node_gbit_per_s_per_gpu == pytest.approx(gbit)


def _node_comment_claims() -> dict[str, float]:
    """Per-GPU Gb/s as written in each node's nics_per_node comment ('-> 400 Gb/s per GPU')."""
    claims = {}
    for path in sorted((builtin_dir() / "nodes").glob("*.toml")):
        for block in path.read_text().split("[[node]]")[1:]:
            ident = re.search(r'^id = "([^"]+)"', block, re.M).group(1)
            line = re.search(r"^nics_per_node\s*=.*$", block, re.M).group(0)
            claim = re.search(r"->\s*([\d,.]+) Gb/s per (?:GPU|GCD|card)", line)
            assert claim, f"{path.name}: node {ident!r} has no '-> N Gb/s per GPU' comment"
            claims[ident] = float(claim.group(1).replace(",", ""))
    return claims


def test_node_bandwidth_is_what_the_file_says(builtin):
    claims = _node_comment_claims()
    assert set(claims) == set(builtin.ids("node"))
    for ident, gbit in claims.items():
        assert builtin.node(ident).inter_node_gbit_per_s_per_gpu == pytest.approx(gbit), ident


# -- the network a GPU gets when only the GPU is named ------------------------------------------
#: Each accelerator's usual node (``default_node``), hand-checked; the others fall back to one
#: ib-ndr-400 NIC per GPU.
DEFAULT_NODES = {
    "v100-sxm2-16gb": "dgx-1-v100-16gb", "v100-sxm2-32gb": "dgx-1-v100-32gb",
    "a100-sxm4-40gb": "dgx-a100-40gb", "a100-sxm4-80gb": "dgx-a100-80gb",
    "a100-sxm4-64gb": "leonardo-node", "h100-sxm5-80gb": "dgx-h100",
    "h200-sxm-141gb": "dgx-h200", "gh200-96gb": "jupiter-node", "b200": "dgx-b200",
    "b300": "dgx-b300", "gb200": "gb200-nvl72", "gb300": "gb300-nvl72",
    "mi250x": "frontier-node", "mi300x": "mi300x-node", "gaudi2": "gaudi2-hls",
    "gaudi3": "gaudi3-node", "tpu-v5p": "tpu-v5p-pod",
}


def test_tpu_v5p_joins_slices_over_its_50_gbps_per_chip_dcn(builtin):
    """TPU v5p: the pod's 8,960 chips on ICI; beyond it the data center network at Google's
    50 Gb/s per chip (docs.cloud.google.com/tpu/docs/v5p), not an InfiniBand NIC per chip."""
    from fsdpsim.hardware.system import resolve_system

    system = resolve_system(builtin, gpu="tpu-v5p")
    assert system.gpus_per_node == 8960 and system.network.id == "gcp-dcn-v5p"
    assert system.inter_node_bandwidth_bytes_per_s_per_gpu == pytest.approx(50e9 / 8)


def test_default_nodes_are_hand_checked(builtin):
    got = {i: builtin.accelerator(i).default_node for i in builtin.ids("accelerator")}
    assert {i: n for i, n in got.items() if n is not None} == DEFAULT_NODES


@pytest.mark.parametrize("ident", [
    "a100-pcie-40gb", "a100-sxm4-80gb", "b300", "gaudi3", "gb200", "h100-sxm5-80gb", "mi250x",
    "mi300x", "tpu-v5p", "v100-sxm2-32gb"])
def test_default_network_is_the_usual_nodes(builtin, ident):
    """Only --gpu named: the usual node's network and NICs per GPU (a catalogued network), the
    label and the note say it is the GPU's default; a given --network still wins (one NIC per
    GPU)."""
    from fsdpsim.hardware.system import DEFAULT_NETWORK, resolve_system

    acc = builtin.accelerator(ident)
    system = resolve_system(builtin, gpu=ident)
    node = builtin.node(acc.default_node) if acc.default_node else None
    net = node.network if node else builtin.network(DEFAULT_NETWORK)
    assert system.network.id == net.id and system.network.id in builtin.ids("network")
    per_gpu = (node.inter_node_bandwidth_bytes_per_s_per_gpu if node
               else net.nic_bandwidth_bytes_per_s)
    assert system.inter_node_bandwidth_bytes_per_s_per_gpu == pytest.approx(per_gpu)
    assert ("the GPU's default, as " + node.id if node
            else f"fsdpsim's default: no usual node of {acc.id}") in system.label
    assert f"the default for {ident}" in system.extra["notes"]
    given = resolve_system(builtin, gpu=ident, network="roce-200")
    assert given.network.id == "roce-200" and "default" not in given.label
    assert given.inter_node_bandwidth_bytes_per_s_per_gpu == pytest.approx(200e9 / 8)


def test_a100_defaults_to_hdr_200_and_h100_to_ndr_400(builtin):
    from fsdpsim.hardware.system import resolve_system

    for gpu, net, gbit in (("a100", "ib-hdr-200", 200), ("a100-40gb", "ib-hdr-200", 200),
                           ("h100", "ib-ndr-400", 400), ("v100", "ib-edr-100", 50),
                           ("mi250x", "slingshot-11", 100), ("gaudi3", "gaudi-roce-200", 600)):
        system = resolve_system(builtin, gpu=gpu)
        assert system.network.id == net, gpu
        assert system.inter_node_bandwidth_bytes_per_s_per_gpu == pytest.approx(gbit * 1e9 / 8)


def test_every_default_node_holds_its_accelerator(builtin):
    for ident in builtin.ids("accelerator"):
        node = builtin.accelerator(ident).default_node
        if node is not None:
            assert builtin.node(node).accelerator.id == ident
            assert builtin.raw("accelerator", ident).get("default_node_source"), ident


def test_a_default_node_of_another_gpu_is_refused(tmp_path):
    (tmp_path / "acc.toml").write_text(
        '[[accelerator]]\nid = "h100-sxm5-80gb"\noverride = true\n'
        'default_node = "dgx-a100-80gb"\n')
    with pytest.raises(ConfigError, match="default_node 'dgx-a100-80gb' is a node of "
                                          "a100-sxm4-80gb"):
        load_catalog([tmp_path], use_env=False)


def test_default_precision_is_the_16_bit_format(builtin):
    assert builtin.accelerator("v100").default_precision == "fp16"
    assert builtin.accelerator("h100").default_precision == "bf16"
    assert builtin.accelerator("tpu-v5p").default_precision == "bf16"


@pytest.mark.parametrize("ident,gpus_per_node,link_topology,per_peer", [
    ("juwels-booster-node", 4, "mesh", 100),   # NVLink3 direct, 4 links per pair
    ("perlmutter-node", 4, "mesh", 100),
    ("jupiter-node", 4, "mesh", 150),          # NVLink4 direct, 150 GB/s/dir per pair
    ("frontier-node", 8, "mesh", 50),          # 8 GCDs
    ("dgx-h100", 8, "switch", None),
])
def test_node_shape_and_link(builtin, ident, gpus_per_node, link_topology, per_peer):
    node = builtin.node(ident)
    assert node.gpus_per_node == gpus_per_node
    assert node.link.topology == link_topology
    if per_peer is not None:
        assert node.link.per_peer_bandwidth_bytes_per_s == pytest.approx(per_peer * 1e9)


def test_node_link_override_keeps_the_accelerator_fields_it_does_not_name(builtin):
    node = builtin.node("juwels-booster-node")
    assert node.link.kind == "nvlink3"
    assert node.link.latency_s == builtin.accelerator("a100-40gb").link.latency_s


def test_mosaicml_nodes_have_1600_gbit_per_node(builtin):
    for ident in ("mosaicml-a100-40gb", "mosaicml-a100-80gb"):
        node = builtin.cluster(ident).node
        assert node.gpus_per_node == 8
        assert node.inter_node_gbit_per_s_per_gpu * node.gpus_per_node == pytest.approx(1600)
        assert node.network.kind == "roce"


def test_clusters(builtin):
    assert builtin.cluster("juwels-booster").num_nodes == 936
    assert builtin.cluster("frontier").node.accelerator.id == "mi250x"
    for ident in ("llama3-roce", "llama3-ib"):
        cluster = builtin.cluster(ident)
        assert cluster.oversubscription == 7
        assert cluster.num_nodes * cluster.node.gpus_per_node == 24_576
        assert "pod" in cluster.notes
    assert builtin.cluster("juwels-booster").oversubscription == 1.0


def test_jureca_dc_is_absent_and_the_reason_is_written_down(builtin):
    assert not [i for i in builtin.ids("cluster") if "jureca" in i]
    texts = " ".join(p.read_text() for p in (builtin_dir() / "clusters").glob("*.toml"))
    assert "JURECA-DC" in texts


# ------------------------------------------------------------------------------------------------
# Bad user input: one error type, naming the file and the key
# ------------------------------------------------------------------------------------------------
ACCELERATOR = """\
[[accelerator]]
id = "test-gpu"
name = "Test GPU"
vendor = "Test"
aliases = ["tgpu"]
memory_gib = 80
hbm_bandwidth_tb_per_s = 3.0
runtime_reserved_gib = 1.0
allocator_fraction = 0.05
tdp_w = 700
source = "unit test"
retrieved = 2026-11-30

[accelerator.peak_dense_tflops]
bf16 = 1000

[accelerator.intra_node_link]
kind = "nvlink4"
gb_per_s_per_direction = 450
latency_us = 1.0
topology = "switch"

[accelerator.efficiency]
matmul_fraction = 0.8
matmul_half_gflop = 4.0
attention_fraction = 0.45
hbm_fraction = 0.85
link_fraction = 0.8
kernel_overhead_us = 5.0
comm_compute_slowdown = 0.05
source = "unit test"
"""

NODE = """\
[[node]]
id = "test-node"
name = "Test node"
accelerator = "h100"
gpus_per_node = 8
nics_per_node = 8
network = "ib-ndr-400"
source = "unit test"
retrieved = 2026-11-30
"""


def _write(folder: Path, text: str, name: str = "user.toml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def _error(folder: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_catalog([folder], use_env=False)
    return str(info.value)


def test_valid_user_accelerator_and_node_load(tmp_path):
    _write(tmp_path, ACCELERATOR + "\n" + NODE)
    cat = load_catalog([tmp_path], use_env=False)
    assert cat.accelerator("tgpu").memory_bytes == 80 * GIB_BYTES
    assert cat.node("test-node").inter_node_gbit_per_s_per_gpu == pytest.approx(400)


def test_malformed_toml_names_file_and_line(tmp_path):
    text = ACCELERATOR.replace("memory_gib = 80", "memory_gib = ")
    path = _write(tmp_path, text)
    line = text.splitlines().index("memory_gib = ") + 1
    msg = _error(tmp_path)
    assert str(path) in msg and "malformed TOML" in msg
    assert f"line {line}" in msg


def test_unknown_key_names_file_key_and_suggests(tmp_path):
    path = _write(tmp_path, ACCELERATOR.replace("memory_gib = 80", "memory_gb = 80"))
    msg = _error(tmp_path)
    assert str(path) in msg and "'memory_gb'" in msg
    assert "did you mean" in msg and "memory_gib" in msg


@pytest.mark.parametrize("old,new,key", [
    ("memory_gib = 80", 'memory_gib = "80"', "memory_gib"),
    ("memory_gib = 80", "memory_gib = true", "memory_gib"),
    ('name = "Test GPU"', "name = 5", "name"),
    ('aliases = ["tgpu"]', 'aliases = "tgpu"', "aliases"),
    ('aliases = ["tgpu"]', "aliases = [1, 2]", "aliases"),
    ("retrieved = 2026-11-30", "retrieved = 12:00:00", "retrieved"),
    ("bf16 = 1000", 'bf16 = "1000"', "bf16"),
])
def test_wrong_type_names_file_and_key(tmp_path, old, new, key):
    path = _write(tmp_path, ACCELERATOR.replace(old, new))
    msg = _error(tmp_path)
    assert str(path) in msg and repr(key) in msg


def test_gpus_per_node_must_be_an_integer(tmp_path):
    path = _write(tmp_path, NODE.replace("gpus_per_node = 8", "gpus_per_node = 8.0"))
    msg = _error(tmp_path)
    assert str(path) in msg and "'gpus_per_node'" in msg and "wrong type" in msg


@pytest.mark.parametrize("old,new,key", [
    ("tdp_w = 700", "tdp_w = 100000", "tdp_w"),
    ("memory_gib = 80", "memory_gib = 0", "memory_gib"),
    ("memory_gib = 80", "memory_gib = nan", "memory_gib"),
    ("hbm_bandwidth_tb_per_s = 3.0", "hbm_bandwidth_tb_per_s = inf", "hbm_bandwidth_tb_per_s"),
    ("matmul_fraction = 0.8", "matmul_fraction = 1.5", "matmul_fraction"),
    ("latency_us = 1.0", "latency_us = -1.0", "latency_us"),
    ('topology = "switch"', 'topology = "ring"', "topology"),
])
def test_value_outside_range_names_file_and_key(tmp_path, old, new, key):
    path = _write(tmp_path, ACCELERATOR.replace(old, new))
    msg = _error(tmp_path)
    assert str(path) in msg and repr(key) in msg
    assert "plausible range" in msg or "not accepted" in msg


def test_missing_required_key_names_file_and_key(tmp_path):
    path = _write(tmp_path, ACCELERATOR.replace("hbm_bandwidth_tb_per_s = 3.0\n", ""))
    msg = _error(tmp_path)
    assert str(path) in msg and "missing required key 'hbm_bandwidth_tb_per_s'" in msg


def test_missing_required_table_names_file_and_table(tmp_path):
    text = ACCELERATOR.split("[accelerator.efficiency]")[0]
    path = _write(tmp_path, text)
    msg = _error(tmp_path)
    assert str(path) in msg and "[efficiency]" in msg


def test_missing_peaks_is_a_config_error(tmp_path):
    text = ACCELERATOR.replace("[accelerator.peak_dense_tflops]\nbf16 = 1000\n", "")
    path = _write(tmp_path, text)
    msg = _error(tmp_path)
    assert str(path) in msg and "peak_dense_tflops" in msg


def test_unknown_table_kind_names_file_and_suggests(tmp_path):
    path = _write(tmp_path, ACCELERATOR.replace("[[accelerator]]", "[[acelerator]]", 1)
                  .split("\n[acc")[0])
    msg = _error(tmp_path)
    assert str(path) in msg and "[[acelerator]]" in msg and "did you mean: accelerator" in msg


def test_single_table_instead_of_array_is_a_config_error(tmp_path):
    path = _write(tmp_path, '[network]\nid = "x"\n')
    msg = _error(tmp_path)
    assert str(path) in msg and "[[network]]" in msg


def test_entry_that_is_not_a_table_is_a_config_error(tmp_path):
    path = _write(tmp_path, "accelerator = [1, 2]\n")
    msg = _error(tmp_path)
    assert str(path) in msg and "accelerator" in msg


def test_uppercase_id_is_a_config_error(tmp_path):
    path = _write(tmp_path, ACCELERATOR.replace('id = "test-gpu"', 'id = "Test-GPU"'))
    msg = _error(tmp_path)
    assert str(path) in msg and "'Test-GPU'" in msg and "lowercase" in msg


def test_uppercase_alias_is_a_config_error(tmp_path):
    path = _write(tmp_path, ACCELERATOR.replace('aliases = ["tgpu"]', 'aliases = ["TGPU"]'))
    msg = _error(tmp_path)
    assert str(path) in msg and "'aliases'" in msg and "'TGPU'" in msg


def test_non_utf8_file_is_a_config_error(tmp_path):
    path = tmp_path / "binary.toml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    msg = _error(tmp_path)
    assert str(path) in msg and "UTF-8" in msg


def test_missing_folder_is_a_config_error(tmp_path):
    msg = _error(tmp_path / "nope")
    assert str(tmp_path / "nope") in msg


def test_node_with_unknown_accelerator_names_file_and_suggests(tmp_path):
    path = _write(tmp_path, NODE.replace('accelerator = "h100"', 'accelerator = "h100-sxm6"'))
    msg = _error(tmp_path)
    assert str(path) in msg and "'test-node'" in msg
    assert "unknown accelerator 'h100-sxm6'" in msg and "did you mean" in msg


def test_node_with_unknown_network_names_file(tmp_path):
    path = _write(tmp_path, NODE.replace('network = "ib-ndr-400"', 'network = "ib-ndr-4000"'))
    msg = _error(tmp_path)
    assert str(path) in msg and "unknown network 'ib-ndr-4000'" in msg


def test_node_link_override_is_checked(tmp_path):
    text = NODE + '\n[node.intra_node_link]\ntopology = "ring"\n'
    path = _write(tmp_path, text)
    msg = _error(tmp_path)
    assert str(path) in msg and "'topology'" in msg


def test_node_link_override_keeps_the_accelerator_domain_size(tmp_path):
    text = (NODE.replace('accelerator = "h100"', 'accelerator = "gb200"')
            + "\n[node.intra_node_link]\nlatency_us = 2.0\n")
    _write(tmp_path, text)
    link = load_catalog([tmp_path], use_env=False).node("test-node").link
    assert link.latency_s == pytest.approx(2e-6)
    assert link.domain_size == 72 and link.topology == "switch"


def test_alias_colliding_with_a_builtin_alias(tmp_path):
    path = _write(tmp_path, ACCELERATOR.replace('aliases = ["tgpu"]', 'aliases = ["h100"]'))
    msg = _error(tmp_path)
    assert str(path) in msg and "alias 'h100'" in msg


def test_alias_colliding_with_a_builtin_id(tmp_path):
    path = _write(tmp_path, ACCELERATOR.replace('aliases = ["tgpu"]', 'aliases = ["b200"]'))
    msg = _error(tmp_path)
    assert str(path) in msg and "alias 'b200'" in msg


def test_alias_colliding_between_two_user_entries(tmp_path):
    second = ACCELERATOR.replace('id = "test-gpu"', 'id = "test-gpu-2"')
    _write(tmp_path, ACCELERATOR + "\n" + second)
    msg = _error(tmp_path)
    assert "alias 'tgpu'" in msg and "test-gpu" in msg


def test_user_entry_replaces_builtin(tmp_path, builtin):
    text = ACCELERATOR.replace('id = "test-gpu"', 'id = "h100-sxm5-80gb"').replace(
        'aliases = ["tgpu"]', 'aliases = ["h100"]').replace("memory_gib = 80", "memory_gib = 96")
    path = _write(tmp_path, text)
    cat = load_catalog([tmp_path], use_env=False)
    acc = cat.accelerator("h100")
    assert acc.memory_bytes == 96 * GIB_BYTES
    assert acc.name == "Test GPU"
    assert cat.origins("accelerator", "h100") == (str(path),)
    # The built-in catalog object is untouched.
    assert builtin.accelerator("h100").memory_bytes == 80 * GIB_BYTES
    # Nodes built on the replaced accelerator see the new one.
    assert cat.node("dgx-h100").accelerator.memory_bytes == 96 * GIB_BYTES


def test_partial_override_changes_only_the_given_key(tmp_path, builtin):
    path = _write(tmp_path, '[[accelerator]]\nid = "h100-sxm5-80gb"\noverride = true\n\n'
                            "[accelerator.efficiency]\nmatmul_fraction = 0.7\n")
    cat = load_catalog([tmp_path], use_env=False)
    new, old = cat.accelerator("h100"), builtin.accelerator("h100")
    assert new.efficiency.matmul_fraction == 0.7
    assert old.efficiency.matmul_fraction == builtin.raw("accelerator", "h100")["efficiency"][
        "matmul_fraction"] != 0.7
    assert new.efficiency.attention_fraction == old.efficiency.attention_fraction
    assert new.efficiency.source == old.efficiency.source
    assert new.memory_bytes == old.memory_bytes and new.link == old.link
    origins = cat.origins("accelerator", "h100")
    assert len(origins) == 2 and origins[1] == str(path)
    assert "override" not in cat.raw("accelerator", "h100")


def test_partial_override_value_is_range_checked(tmp_path):
    path = _write(tmp_path, '[[accelerator]]\nid = "h100-sxm5-80gb"\noverride = true\n\n'
                            "[accelerator.efficiency]\nmatmul_fraction = 2.0\n")
    msg = _error(tmp_path)
    assert str(path) in msg and "'matmul_fraction'" in msg


def test_override_without_base_entry_is_an_error(tmp_path):
    path = _write(tmp_path, '[[accelerator]]\nid = "h100-sxm5-80gbx"\noverride = true\n\n'
                            "[accelerator.efficiency]\nmatmul_fraction = 0.7\n")
    msg = _error(tmp_path)
    assert str(path) in msg and "override = true" in msg and "no earlier entry" in msg
    assert "h100-sxm5-80gb" in msg.split("no earlier entry")[1]  # suggestion


def test_env_var_folders_are_read(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    _write(first, ACCELERATOR)
    _write(second, '[[accelerator]]\nid = "test-gpu"\noverride = true\nmemory_gib = 40\n')
    monkeypatch.setenv(ENV_VAR, os.pathsep.join([str(first), str(second)]))
    cat = load_catalog()
    assert cat.accelerator("tgpu").memory_bytes == 40 * GIB_BYTES
    assert load_catalog(use_env=False).ids("accelerator") == sorted(ACCELERATOR_IDS)


def test_env_var_folder_with_bad_file_raises(tmp_path, monkeypatch):
    path = _write(tmp_path, ACCELERATOR.replace("tdp_w = 700", "tdp_w = 1e9"))
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(ConfigError) as info:
        load_catalog()
    assert str(path) in str(info.value) and "'tdp_w'" in str(info.value)


# ------------------------------------------------------------------------------------------------
# Property tests: whatever is written, only ConfigError comes out
# ------------------------------------------------------------------------------------------------
def _load_text_or_config_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "fuzz.toml").write_bytes(data)
        try:
            load_catalog([folder], use_env=False)
        except ConfigError as exc:
            assert str(Path(folder) / "fuzz.toml") in str(exc) or folder in str(exc)


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)
_TOML_PIECES = st.sampled_from([
    "[[accelerator]]", "[[node]]", "[[network]]", "[[cluster]]", "[accelerator.efficiency]",
    "[accelerator.peak_dense_tflops]", "[node.intra_node_link]", "[[bogus]]", "id = ",
    '"x"', '"h100"', "override = true", "aliases = ", "[", "]", "{", "}", ",", "=", "\n",
    "1", "1e400", "-3", "nan", "true", "2026-11-30", "memory_gib", "bf16 = ", "accelerator = ",
    "gpus_per_node = ", "network = ", '"ib-ndr-400"', "[]", "[1, 2]", "{a = 1}",
])


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_TEXT, st.lists(_TOML_PIECES, max_size=40).map(" ".join)))
def test_garbage_text_raises_only_config_error(text):
    _load_text_or_config_error(text.encode("utf-8"))


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(KINDS + ("bogus",)), value=st.deferred(lambda: _VALUES))
def test_top_level_kind_with_any_value_raises_only_config_error(kind, value):
    """``accelerator = [1, 2]`` and friends: a kind whose value is not an array of tables."""
    _load_text_or_config_error(f"{kind} = {_toml_literal(value)}\n".encode("utf-8"))


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_bytes_raise_only_config_error(data):
    _load_text_or_config_error(data)


def _toml_literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


_SCALARS = st.one_of(
    st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1), st.floats(),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=20), st.dates(),
    st.times(), st.sampled_from(["h100", "b200", "switch", "mesh", "pcie", "ib-ndr-400", "",
                                 "infiniband"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(["a", "id", "bf16", "kind"]), inner,
                                            max_size=2)),
    max_leaves=5,
)


def _value_lines(text: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines()) if re.match(r"^[a-z_0-9]+ = ", line)]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(template=st.sampled_from([ACCELERATOR, NODE]), data=st.data())
def test_random_wrong_values_raise_only_config_error(template, data):
    lines = template.splitlines()
    for index in data.draw(st.lists(st.sampled_from(_value_lines(template)), min_size=0,
                                    max_size=3)):
        key = lines[index].split(" = ")[0]
        lines[index] = f"{key} = {_toml_literal(data.draw(_VALUES))}"
    if data.draw(st.booleans()):  # sometimes drop a whole block (a table and its keys)
        blocks = "\n".join(lines).split("\n\n")
        del blocks[data.draw(st.integers(0, len(blocks) - 1))]
        lines = "\n\n".join(blocks).splitlines()
    if data.draw(st.booleans()):  # sometimes add a key, known to some kind or not
        extra = data.draw(st.sampled_from(["override", "domain_size", "fp8", "memory_gb",
                                           "oversubscription", "per_peer_gb_per_s_per_direction"]))
        lines.insert(2, f"{extra} = {_toml_literal(data.draw(_VALUES))}")
    _load_text_or_config_error(("\n".join(lines) + "\n").encode("utf-8"))
