"""The hardware catalog: the only code that reads catalog files (the files themselves are read
and checked by :mod:`fsdpsim.hardware.catalog_files`).

Catalog files are TOML. A file holds any number of entries as arrays of tables named by kind::

    [[accelerator]]
    id = "h100-sxm5-80gb"
    ...

    [[network]]
    id = "ib-ndr-400"
    ...

Kinds are ``accelerator``, ``network``, ``node`` and ``cluster``. Keys carry datasheet units and
direction (``hbm_bandwidth_tb_per_s``, ``gb_per_s_per_direction``); the loader converts them to
SI once. Loading is strict: an unknown key, a missing required field, a wrong type or a value
outside its plausible range is a :class:`~fsdpsim.util.errors.ConfigError` naming the file, the
entry, the key and the accepted range.

User folders (``--catalog DIR``, or ``FSDPSIM_CATALOG`` with ``os.pathsep``-separated folders)
are read after the built-in catalog. An entry whose id already exists replaces it; with
``override = true`` it is merged into the existing entry instead (only the keys it gives
change), which is how ``fsdpsim calibrate`` writes its overlays.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from fsdpsim.hardware.catalog_files import (_Raw, _catalog_files, _check_table,  # noqa: F401
                                            _deep_merge, _no_duplicates, _read_file,
                                            builtin_dir, is_catalog_document)
from fsdpsim.hardware.efficiency import check_tables, fit_span_of, tables_of
from fsdpsim.util.errors import ConfigError, shown, suggest
from fsdpsim.hardware.spec import (Accelerator, Cluster, CollectiveLibrary, Efficiency, Link,
                                   Network, Node)
from fsdpsim.util.units import (
    GB_PER_S_BYTES_PER_S,
    GBIT_PER_S_BYTES_PER_S,
    GIB_BYTES,
    TB_PER_S_BYTES_PER_S,
    TFLOPS_FLOPS_PER_S,
    US_S,
)

from fsdpsim.hardware.catalog_schema import (  # re-exported: the schema lives in its own module
    DEFAULT_ATTENTION_HALF_KV,
    DEFAULT_MATMUL_HALF_K,
    ENV_VAR,
    KINDS,
    MODEL_KINDS,
    SCHEMAS,
    UNCALIBRATED_INTERVAL,
    Field,
)


def user_dirs_from_env() -> tuple[str, ...]:
    """Folders named by ``FSDPSIM_CATALOG`` (``os.pathsep``-separated), in order; empty items
    (an empty or unset variable) name no folder."""
    value = os.environ.get(ENV_VAR, "")
    return tuple(p for p in value.split(os.pathsep) if p)


class Catalog:
    """All entries of all kinds, resolved into hardware objects, with alias lookup."""

    def __init__(self, raws: Iterable[_Raw]):
        merged: dict[tuple[str, str], _Raw] = {}
        for raw in raws:
            key = (raw.kind, raw.id)
            if raw.data.get("override"):
                if key not in merged:
                    raise ConfigError(f"{raw.where}: [[{raw.kind}]] {raw.id!r} has override = true "
                                      f"but no earlier entry with that id exists"
                                      + suggest(raw.id, [k[1] for k in merged
                                                         if k[0] == raw.kind]))
                old = merged[key]
                data = _deep_merge(old.data, raw.data)
                _check_table(data, SCHEMAS[raw.kind], f"{raw.where}: [[{raw.kind}]] {raw.id!r}",
                             partial=False)
                merged[key] = _Raw(raw.kind, data, old.origins + raw.origins)
            else:
                merged[key] = raw
        self._raw: dict[str, dict[str, _Raw]] = {k: {} for k in KINDS}
        for (kind, ident), raw in merged.items():
            self._raw[kind][ident] = raw
        self._aliases: dict[str, dict[str, str]] = {k: {} for k in KINDS}
        for kind in KINDS:
            for ident, raw in self._raw[kind].items():
                for alias in raw.data.get("aliases", []):
                    other = self._aliases[kind].get(alias)
                    if alias in self._raw[kind] or (other and other != ident):
                        holder = other or alias
                        raise ConfigError(f"{raw.where}: alias {alias!r} of {ident!r} is already "
                                          f"the id or alias of {holder!r} "
                                          f"({self._raw[kind][holder].where})")
                    self._aliases[kind][alias] = ident
        self._objects: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
        for kind in KINDS:
            for ident in self._raw[kind]:
                self.get(kind, ident)
        for ident in self._raw["accelerator"]:
            self._check_default_node(ident)

    def _check_default_node(self, ident: str) -> None:
        """An accelerator's ``default_node`` is the id (not an alias) of a node of that
        accelerator, or the catalog is refused."""
        raw = self._raw["accelerator"][ident]
        name = raw.data.get("default_node")
        if name is None:
            return
        where = f"{raw.where}: [[accelerator]] {ident!r}: default_node"
        node = _ref(self, "node", name, raw)
        if node.accelerator.id != ident:
            raise ConfigError(f"{where} {name!r} is a node of {node.accelerator.id}; accepted: "
                              f"a node whose accelerator is {ident}")
        if node.id != name:
            raise ConfigError(f"{where} {name!r} is an alias; give the node's id {node.id!r}")

    # -- lookup -------------------------------------------------------------------------------
    def ids(self, kind: str) -> list[str]:
        return sorted(self._raw[kind])

    def resolve_id(self, kind: str, name: str) -> str:
        """Canonical id for an id or alias of ``kind``; a clear error with suggestions if none."""
        key = str(name).strip().lower()
        if not key:
            raise ConfigError(f"{kind} id {shown(name)} is empty; see `fsdpsim catalog list "
                              f"--kind {kind}`")
        if key in self._raw[kind]:
            return key
        if key in self._aliases[kind]:
            return self._aliases[kind][key]
        choices = list(self._raw[kind]) + list(self._aliases[kind])
        raise ConfigError(f"unknown {kind} {shown(name)}{suggest(key, choices)}; "
                          f"see `fsdpsim catalog list --kind {kind}`")

    def get(self, kind: str, name: str):
        ident = self.resolve_id(kind, name)
        obj = self._objects[kind].get(ident)
        if obj is None:
            obj = _BUILDERS[kind](self, self._raw[kind][ident])
            self._objects[kind][ident] = obj
        return obj

    def accelerator(self, name: str) -> Accelerator:
        return self.get("accelerator", name)

    def network(self, name: str) -> Network:
        return self.get("network", name)

    def node(self, name: str) -> Node:
        return self.get("node", name)

    def cluster(self, name: str) -> Cluster:
        return self.get("cluster", name)

    def collectives(self, name: str) -> CollectiveLibrary:
        return self.get("collectives", name)

    def find(self, name: str) -> tuple[str, str]:
        """(kind, id) of ``name`` in any kind; a clear error with suggestions across kinds."""
        key = str(name).strip().lower()
        if not key:
            raise ConfigError(f"catalog id {shown(name)} is empty; see `fsdpsim catalog list`")
        for kind in KINDS:
            if key in self._raw[kind] or key in self._aliases[kind]:
                return kind, self.resolve_id(kind, key)
        choices = [i for k in KINDS for i in list(self._raw[k]) + list(self._aliases[k])]
        raise ConfigError(f"unknown catalog id {shown(name)}{suggest(key, choices)}; "
                          "see `fsdpsim catalog list`")

    def raw(self, kind: str, name: str) -> Mapping[str, Any]:
        """The entry as written (datasheet units), merged over overlays, read-only."""
        return MappingProxyType(self._raw[kind][self.resolve_id(kind, name)].data)

    def origins(self, kind: str, name: str) -> tuple[str, ...]:
        return self._raw[kind][self.resolve_id(kind, name)].origins


# -- builders: datasheet units -> SI, once -------------------------------------------------------
def _text_date(value: Any) -> str:
    return value.isoformat() if isinstance(value, _dt.date) else str(value)


def _link(d: Mapping, where: str) -> Link:
    per_peer = d.get("per_peer_gb_per_s_per_direction")
    return Link(
        kind=d["kind"],
        bandwidth_bytes_per_s=d["gb_per_s_per_direction"] * GB_PER_S_BYTES_PER_S,
        latency_s=d["latency_us"] * US_S,
        topology=d["topology"],
        per_peer_bandwidth_bytes_per_s=(None if per_peer is None
                                        else per_peer * GB_PER_S_BYTES_PER_S),
        domain_size=d.get("domain_size"),
    )


def _build_accelerator(cat: Catalog, raw: _Raw) -> Accelerator:
    d = raw.data
    peaks = {p: v * TFLOPS_FLOPS_PER_S for p, v in d.get("peak_dense_tflops", {}).items()}
    if not ({"bf16", "fp16", "fp32"} & set(peaks)):
        raise ConfigError(f"{raw.where}: [[accelerator]] {raw.id!r}: [peak_dense_tflops] needs at "
                          "least one of bf16, fp16, fp32")
    e = d["efficiency"]
    check_tables(e, f"{raw.where}: [[accelerator]] {raw.id!r}")
    eff = Efficiency(
        matmul_fraction=e["matmul_fraction"],
        matmul_half_flops=e["matmul_half_gflop"] * 1e9,
        matmul_half_k=e.get("matmul_half_k", DEFAULT_MATMUL_HALF_K),
        attention_half_kv=e.get("attention_half_kv", DEFAULT_ATTENTION_HALF_KV),
        throughput_ratio_p05=e.get("throughput_ratio_p05", UNCALIBRATED_INTERVAL[0]),
        throughput_ratio_p95=e.get("throughput_ratio_p95", UNCALIBRATED_INTERVAL[1]),
        calibrated="throughput_ratio_p05" in e and "throughput_ratio_p95" in e,
        attention_fraction=e["attention_fraction"],
        fused_attention_fraction=e.get("fused_attention_fraction", e["attention_fraction"]),
        hbm_fraction=e["hbm_fraction"],
        link_fraction=e["link_fraction"],
        ep_link_fraction=e.get("ep_link_fraction"),
        kernel_overhead_s=e["kernel_overhead_us"] * US_S,
        comm_compute_slowdown=e["comm_compute_slowdown"],
        source=e["source"], tables=tables_of(e), fit_span=fit_span_of(e),
    )
    memory_gib = d.get("memory_usable_gib", d["memory_gib"])
    return Accelerator(
        id=raw.id, name=d["name"], vendor=d["vendor"],
        memory_bytes=memory_gib * GIB_BYTES,
        hbm_bandwidth_bytes_per_s=d["hbm_bandwidth_tb_per_s"] * TB_PER_S_BYTES_PER_S,
        peak_flops_per_s=MappingProxyType(peaks),
        link=_link(d["intra_node_link"], raw.where),
        efficiency=eff,
        runtime_reserved_bytes=d["runtime_reserved_gib"] * GIB_BYTES,
        allocator_fraction=d["allocator_fraction"],
        source=d["source"], retrieved=_text_date(d["retrieved"]),
        tdp_w=d.get("tdp_w"), year=d.get("year"), price_usd=d.get("price_usd"),
        rent_usd_per_hour=d.get("rent_usd_per_hour"), **_price_fields(d),
        notes=d.get("notes", ""), aliases=tuple(d.get("aliases", ())),
        default_node=d.get("default_node"),
    )


def _price_fields(d: Mapping[str, Any]) -> dict[str, str]:
    """``price_kind``/``price_source``/``price_retrieved`` of an entry with a rent; a rent given
    without them is an estimate from the entry's own source and date."""
    return {"price_kind": d.get("price_kind", "estimate"),
            "price_source": d.get("price_source", d["source"]),
            "price_retrieved": _text_date(d.get("price_retrieved", d["retrieved"]))}


def _build_network(cat: Catalog, raw: _Raw) -> Network:
    d = raw.data
    return Network(
        id=raw.id, name=d["name"], kind=d["kind"],
        nic_bandwidth_bytes_per_s=d["gbit_per_s_per_nic"] * GBIT_PER_S_BYTES_PER_S,
        latency_s=d["latency_us"] * US_S,
        achievable_fraction=d["achievable_fraction"],
        source=d["source"], retrieved=_text_date(d["retrieved"]), notes=d.get("notes", ""),
        aliases=tuple(d.get("aliases", ())),
        scale_decay_per_doubling=d.get("scale_decay_per_doubling", 0.0),
        scale_decay_from_nodes=d.get("scale_decay_from_nodes", 4.0),
        scale_decay_floor=d.get("scale_decay_floor", 1.0),
        scale_source=d.get("scale_source", ""),
        bandwidth_uncertainty=d.get("bandwidth_uncertainty", 0.1),
    )


def _build_collectives(cat: Catalog, raw: _Raw) -> CollectiveLibrary:
    d = raw.data
    return CollectiveLibrary(
        id=raw.id, name=d["name"], library=d["library"], version=d["version"],
        latency_us=MappingProxyType({p: MappingProxyType(dict(d[p]))
                                     for p in ("ll", "ll128", "simple")}),
        net_overhead_s=d["net_overhead_us"] * US_S,
        ll_multi_node_hop_factor=d["ll_multi_node_hop_factor"],
        ll_bandwidth_fraction=d["ll_bandwidth_fraction"],
        ll128_bandwidth_fraction=d["ll128_bandwidth_fraction"],
        tree_bandwidth_fraction=d["tree_bandwidth_fraction"],
        ll_max_bytes_per_s=tuple(d[f"ll_max_gb_per_s_{k}"] * GB_PER_S_BYTES_PER_S
                                 for k in ("one_node", "two_nodes", "more_nodes")),
        ll128_channel_bytes_per_s=d["ll128_channel_gb_per_s"] * GB_PER_S_BYTES_PER_S,
        tree_channel_bytes_per_s=d["tree_channel_gb_per_s"] * GB_PER_S_BYTES_PER_S,
        pat=d["pat"], source=d["source"], retrieved=_text_date(d["retrieved"]),
        notes=d.get("notes", ""), aliases=tuple(d.get("aliases", ())),
    )


def _ref(cat: Catalog, kind: str, name: str, raw: _Raw):
    try:
        return cat.get(kind, name)
    except ConfigError as exc:
        raise ConfigError(f"{raw.where}: [[{raw.kind}]] {raw.id!r}: {exc}") from None


def _build_node(cat: Catalog, raw: _Raw) -> Node:
    d = raw.data
    acc: Accelerator = _ref(cat, "accelerator", d["accelerator"], raw)
    link = acc.link
    if d.get("intra_node_link"):
        base = {
            "kind": link.kind,
            "gb_per_s_per_direction": link.bandwidth_bytes_per_s / GB_PER_S_BYTES_PER_S,
            "latency_us": link.latency_s / US_S,
            "topology": link.topology,
        }
        if link.per_peer_bandwidth_bytes_per_s is not None:
            base["per_peer_gb_per_s_per_direction"] = (
                link.per_peer_bandwidth_bytes_per_s / GB_PER_S_BYTES_PER_S)
        if link.domain_size is not None:
            base["domain_size"] = link.domain_size
        link = _link({**base, **d["intra_node_link"]}, raw.where)
    return Node(
        id=raw.id, name=d["name"], accelerator=acc, gpus_per_node=d["gpus_per_node"],
        nics_per_node=d["nics_per_node"], network=_ref(cat, "network", d["network"], raw),
        link=link, source=d["source"], retrieved=_text_date(d["retrieved"]),
        power_kw=d.get("power_kw"), price_usd=d.get("price_usd"),
        rent_usd_per_node_hour=d.get("rent_usd_per_node_hour"), **_price_fields(d),
        notes=d.get("notes", ""), aliases=tuple(d.get("aliases", ())),
    )


def _build_cluster(cat: Catalog, raw: _Raw) -> Cluster:
    d = raw.data
    return Cluster(
        id=raw.id, name=d["name"], node=_ref(cat, "node", d["node"], raw),
        num_nodes=d.get("num_nodes"), topology=d["topology"], source=d["source"],
        retrieved=_text_date(d["retrieved"]), oversubscription=d.get("oversubscription", 1.0),
        pod_gpus=d.get("pod_gpus"),
        notes=d.get("notes", ""), aliases=tuple(d.get("aliases", ())),
    )


_BUILDERS = {"accelerator": _build_accelerator, "network": _build_network,
             "node": _build_node, "cluster": _build_cluster, "collectives": _build_collectives}


@functools.lru_cache(maxsize=16)
def _load_cached(dirs: tuple[str, ...]) -> Catalog:
    raws: list[_Raw] = list(_builtin_raws())
    for folder in dirs:
        overlay = _read_folder(folder)
        raws.extend(overlay)
    return Catalog(raws)


def _read_folder(folder: str, files: list[Path] | None = None) -> list[_Raw]:
    files = _catalog_files(folder) if files is None else files
    overlay = [raw for path in files for raw in _read_file(path)]
    _no_duplicates(overlay, folder)
    return overlay


def _builtin_raws() -> list[_Raw]:
    """The built-in folder's checked entries, kept in the per-user disk cache
    (:mod:`fsdpsim.util.disk_cache`) keyed by the files' bytes and this code."""
    from fsdpsim.util.disk_cache import cached

    folder = str(builtin_dir())
    files = _catalog_files(folder)
    here = Path(__file__).resolve().parent
    return cached("hardware-catalog", files, [here, here.parent / "util"],
                  lambda: _read_folder(folder, files))


def load_catalog(extra_dirs: Iterable[str | os.PathLike] = (), *, use_env: bool = True) -> Catalog:
    """The built-in catalog, extended by ``FSDPSIM_CATALOG`` folders and then ``extra_dirs``.

    Results are cached per list of folders; files are read on first use, never at import.
    """
    dirs = (user_dirs_from_env() if use_env else ()) + tuple(
        str(Path(d)) if str(d).strip() else "" for d in extra_dirs)  # '' is refused, not '.'

    return _load_cached(dirs)
