"""The model catalog: the only code that reads model TOML files.

A model file holds entries as arrays of tables, like the hardware catalog
(:mod:`fsdpsim.hardware.catalog`)::

    [[family]]                    # defaults shared by the models that name it
    id = "llama"
    source = "Touvron et al. 2023, arXiv:2302.13971, Sec. 2.2"
    ffn_kind = "swiglu"
    ...

    [[model]]
    id = "llama3-8b"
    family = "llama"
    source = "Llama Team 2024, arXiv:2407.21783, Table 3"
    aliases = ["llama-3-8b"]
    n_layers = 32
    ...

Every other key of an entry is a field of :class:`~fsdpsim.model.spec.ModelSpec` under its own
name (the model's ``name`` is its ``id``); the accepted keys and their types are read from the
dataclass itself, so a new field is accepted here without a second declaration. A family may
give ``ffn_size_per_d_model`` (GPT's MLP of width ``4 d``) instead of a fixed ``ffn_size``.
A model takes its family's keys and overrides any of them.

Loading is strict: an unknown key or table, a wrong type, a missing field, an unknown family or
an alias given twice is one :class:`~fsdpsim.util.errors.ConfigError` naming the file, the entry
and the key; a value :class:`~fsdpsim.model.spec.ModelSpec` refuses is its own message prefixed
with the file and entry.

The built-in catalog is ``model_catalog/`` (shipped as the data package
``fsdpsim.model_catalog``); files are read in name order, entries in file order, on first use.
User folders (``fsdpsim --catalog DIR``, ``FSDPSIM_CATALOG``) may hold ``[[model]]`` and
``[[family]]`` entries beside hardware ones; they add models (a built-in id cannot be
replaced) and are read only when a name is not a built-in id or alias.
"""

from __future__ import annotations

import functools
import os
import types
import typing
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from fsdpsim.hardware.catalog_schema import KINDS as HARDWARE_KINDS
from fsdpsim.hardware.catalog_schema import MODEL_KINDS as KINDS
from fsdpsim.model.spec import ModelSpec
from fsdpsim.util.errors import ConfigError, shown, suggest
from fsdpsim.util.files import package_data_dir, read_toml


@dataclass(frozen=True)
class Key:
    """One accepted key: its TOML type (``list`` with ``item`` for a tuple field), the words it
    accepts, and whether a model must end up with it (after its family's keys)."""

    types: tuple[type, ...]
    item: type | None = None
    choices: tuple[str, ...] = ()
    required: bool = False

    def describe(self) -> str:
        names = {str: "text", int: "integer", bool: "true/false", list: "list"}
        if self.item is not None:
            inner = ("one of " + ", ".join(self.choices)) if self.choices else names[self.item]
            return f"a list of {inner}"
        if self.choices:
            return "one of " + ", ".join(self.choices)
        return " or ".join(names[t] for t in self.types)


def _key_of(annotation: Any, required: bool) -> Key:
    """The TOML key for a ModelSpec field's annotation: ``int``, ``int | None`` (None: leave
    the key out), ``bool``, a ``Literal`` of words, or a ``tuple[..., ...]`` of either."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return Key((str,), choices=tuple(args), required=required)
    if origin is tuple:
        inner = _key_of(args[0], False)
        return Key((list,), item=inner.types[0], choices=inner.choices, required=required)
    if origin in (typing.Union, types.UnionType):
        (real,) = [a for a in args if a is not type(None)]
        return _key_of(real, required)
    if annotation in (int, bool, str):
        return Key((annotation,), required=required)
    raise TypeError(f"ModelSpec field type {annotation!r} has no TOML form")  # a new field kind


@functools.cache
def spec_keys() -> dict[str, Key]:
    """Every ModelSpec field but ``name`` (an entry's ``id``), with its TOML type."""
    hints = typing.get_type_hints(ModelSpec)
    return {f.name: _key_of(hints[f.name], f.default is MISSING and
                            f.default_factory is MISSING)
            for f in fields(ModelSpec) if f.name != "name"}


#: Keys that describe an entry rather than the architecture.
_ENTRY_KEYS = {
    "family": {"id": Key((str,), required=True), "source": Key((str,), required=True),
               "notes": Key((str,)), "ffn_size_per_d_model": Key((int,))},
    "model": {"id": Key((str,), required=True), "source": Key((str,), required=True),
              "notes": Key((str,)), "family": Key((str,)), "aliases": Key((list,), item=str)},
}


def accepted_keys(kind: str) -> dict[str, Key]:
    """The keys an entry of ``kind`` (``family`` or ``model``) accepts."""
    return {**_ENTRY_KEYS[kind], **spec_keys()}


@dataclass(frozen=True)
class Entry:
    """One ``[[family]]`` or ``[[model]]`` table as written, with where it was read."""

    kind: str
    data: dict
    path: str

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def where(self) -> str:
        return f"{self.path}: [[{self.kind}]] {self.id!r}"


def _check_value(key: str, value: Any, spec: Key, where: str) -> None:
    ok = isinstance(value, spec.types) and not (isinstance(value, bool) and bool not in spec.types)
    if ok and spec.item is not None:
        ok = all(isinstance(v, spec.item) and (isinstance(v, bool) == (spec.item is bool))
                 for v in value)
    values = value if spec.item is not None and ok else [value]
    if ok and spec.choices and not all(v in spec.choices for v in values):
        raise ConfigError(f"{where}: key {key!r} = {shown(value)} is not accepted; accepted: "
                          f"{spec.describe()}")
    if not ok:
        raise ConfigError(f"{where}: key {key!r} = {shown(value)} has the wrong type; accepted: "
                          f"{spec.describe()}")


def _entries_of(path: Path, strict: bool) -> list[Entry]:
    """The family and model entries of one file. ``strict`` (the built-in folder): any other
    table is an error; a user folder also holds hardware tables, left to the hardware
    catalog."""
    doc = read_toml(path, "model catalog file")
    out = []
    for kind, tables in doc.items():
        if kind not in KINDS:
            if strict or kind not in HARDWARE_KINDS and isinstance(tables, list):
                accepted = KINDS if strict else KINDS + HARDWARE_KINDS
                raise ConfigError(f"{path}: unknown table [[{kind}]]{suggest(kind, accepted)}; "
                                  f"accepted: {', '.join(f'[[{k}]]' for k in accepted)}")
            continue
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            raise ConfigError(f"{path}: [{kind}] must be an array of tables, written [[{kind}]]")
        for i, data in enumerate(tables):
            ident = data.get("id")
            if not isinstance(ident, str) or not ident or ident != ident.lower() or " " in ident:
                raise ConfigError(f"{path}: [[{kind}]] entry #{i + 1} needs an 'id': lowercase "
                                  f"text without spaces (e.g. 'llama3-8b'), not {ident!r}")
            entry = Entry(kind, data, str(path))
            schema = accepted_keys(kind)
            for key, value in data.items():
                if key not in schema:
                    raise ConfigError(f"{entry.where}: unknown key {key!r}"
                                      f"{suggest(key, schema)}; accepted keys: "
                                      f"{', '.join(schema)}")
                _check_value(key, value, schema[key], entry.where)
            for key in [k for k, spec in _ENTRY_KEYS[kind].items() if spec.required]:
                if not str(data.get(key, "")).strip():
                    raise ConfigError(f"{entry.where}: missing required key {key!r} (non-empty "
                                      "text: the paper, model card or config.json the numbers "
                                      "come from)")
            out.append(entry)
    return out


class _Specs(Mapping):
    """Model id -> ModelSpec, in the catalog's order; an entry added unbuilt is built when
    first read (a command reads one or two of the built-in catalog's ~50 models: building them
    all was ~3 ms of every command's start-up)."""

    def __init__(self, build, base: _Specs | None = None):
        self._build = build
        self._entries: dict[str, Entry] = dict(base._entries) if base else {}
        self._specs: dict[str, ModelSpec] = dict(base._specs) if base else {}
        self._builds = dict(base._builds) if base else {}

    def add(self, entry: Entry, built: bool) -> None:
        """``entry``'s model, built now or (``built`` False) when first read."""
        self._entries[entry.id] = entry
        self._builds[entry.id] = self._build
        if built:
            self._specs[entry.id] = self._build(entry)

    def __getitem__(self, ident: str) -> ModelSpec:
        spec = self._specs.get(ident)
        if spec is None:
            spec = self._specs[ident] = self._builds[ident](self._entries[ident])
        return spec

    def __contains__(self, ident: object) -> bool:
        return ident in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _toml_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.toml") if p.is_file())


class ModelCatalog:
    """Families and models of some folders, built into ModelSpec objects once."""

    def __init__(self, entries: Iterable[Entry], base: ModelCatalog | None = None,
                 checked: bool = False):
        """``entries`` added to those of ``base`` (the built-in catalog under user folders).
        ``checked``: the entries are known to build (the built-in catalog, whose every model
        the tests build), so each is built when first read; otherwise all are built here and
        a bad entry is an error at once."""
        self.families: dict[str, Entry] = dict(base.families) if base else {}
        self.entries: dict[str, Entry] = dict(base.entries) if base else {}
        self.aliases: dict[str, str] = dict(base.aliases) if base else {}
        self.specs = _Specs(self._build, base.specs if base else None)
        self._checked = checked
        entries = list(entries)
        for entry in entries:
            if entry.kind == "family":
                if entry.id in self.families:
                    raise ConfigError(f"{entry.where}: family {entry.id!r} is also given in "
                                      f"{self.families[entry.id].path}; give each family once")
                self.families[entry.id] = entry
        for entry in entries:
            if entry.kind == "model":
                self._add(entry)

    def _add(self, entry: Entry) -> None:
        if entry.id in self.specs or entry.id in self.aliases:
            first = self.entries[self.resolve(entry.id)]
            raise ConfigError(f"{entry.where}: id {entry.id!r} is already a model or alias "
                              f"({first.where}); give a new id")
        for alias in entry.data.get("aliases", []):
            if alias != alias.lower() or " " in alias or not alias:
                raise ConfigError(f"{entry.where}: key 'aliases': {alias!r} must be lowercase "
                                  "without spaces (lookups are case-insensitive)")
            if alias in self.specs or alias in self.aliases or alias == entry.id:
                raise ConfigError(f"{entry.where}: alias {alias!r} is already the id or alias "
                                  f"of {self.aliases.get(alias, alias)!r}; give it once")
        self.specs.add(entry, built=not self._checked)
        self.entries[entry.id] = entry
        for alias in entry.data.get("aliases", []):
            self.aliases[alias] = entry.id

    def _build(self, entry: Entry) -> ModelSpec:
        values: dict[str, Any] = {}
        family = entry.data.get("family")
        if family is not None:
            if family not in self.families:
                raise ConfigError(f"{entry.where}: key 'family' = {family!r} is not a family"
                                  f"{suggest(family, self.families)}; accepted: "
                                  f"{', '.join(self.families) or 'none is defined'}")
            values.update(self.families[family].data)
        values.update(entry.data)
        per_d = values.pop("ffn_size_per_d_model", None)
        if per_d is not None and "ffn_size" not in entry.data and isinstance(
                values.get("d_model"), int):
            values["ffn_size"] = per_d * values["d_model"]
        keys = spec_keys()
        missing = [k for k, spec in keys.items() if spec.required and k not in values]
        if missing:
            raise ConfigError(f"{entry.where}: missing required key {missing[0]!r} "
                              f"({keys[missing[0]].describe()}; also missing: "
                              f"{', '.join(missing[1:]) or 'none'})")
        arguments = {k: tuple(v) if isinstance(v, list) else v
                     for k, v in values.items() if k in keys}
        try:
            return ModelSpec(name=entry.id, **arguments)
        except ConfigError as exc:
            raise ConfigError(f"{entry.where}: {exc}") from None

    def resolve(self, name: str) -> str | None:
        """The id of a model id or alias (already lowercase), or None."""
        key = self.aliases.get(name, name)
        return key if key in self.specs else None

    def source(self, name: str) -> str:
        """Where a model's numbers come from (its entry's ``source``)."""
        return self.entries[self.resolve(name)].data["source"]


def builtin_dir() -> Path:
    """The built-in model catalog (``model_catalog/`` in the source tree; the data package
    ``fsdpsim.model_catalog`` in a wheel). It sits at the repository root beside
    ``hardware_catalog/`` so that both catalogs are data folders found, packaged and extended
    (``--catalog``) the same way, and a source checkout reads its own (package_data_dir)."""
    return package_data_dir("model_catalog", "fsdpsim.model_catalog")


@functools.cache
def builtin() -> ModelCatalog:
    """The presets shipped with fsdpsim, read once; the checked entries are kept in the
    per-user disk cache (:mod:`fsdpsim.util.disk_cache`) keyed by the files' bytes and this
    code."""
    from fsdpsim.util.disk_cache import cached

    files = _toml_files(builtin_dir())
    here = Path(__file__).resolve().parent
    entries = cached("model-catalog", files, [here, here.parent / "util"],
                     lambda: [e for p in files for e in _entries_of(p, True)])
    return ModelCatalog(entries, checked=True)


#: Folders given by ``fsdpsim --catalog`` for this process (see :func:`use_folders`).
_cli_folders: tuple[str, ...] = ()


def use_folders(folders: Iterable[str | os.PathLike]) -> None:
    """Make ``get_model`` also read these catalog folders (after ``FSDPSIM_CATALOG``'s): the
    CLI's ``--catalog``, which names them once for every command."""
    global _cli_folders
    _cli_folders = tuple(str(f) for f in folders)


def user_folders() -> tuple[str, ...]:
    """``FSDPSIM_CATALOG``'s folders, then ``--catalog``'s."""
    from fsdpsim.hardware.catalog import user_dirs_from_env

    return user_dirs_from_env() + _cli_folders


@functools.lru_cache(maxsize=8)
def with_folders(folders: tuple[str, ...]) -> ModelCatalog:
    """The built-in models and those of user catalog folders (their files and those of their
    direct subfolders, as the hardware catalog reads them)."""
    from fsdpsim.hardware.catalog import _catalog_files

    if not folders:
        return builtin()
    entries = []
    for folder in folders:
        seen: dict[tuple[str, str], Entry] = {}
        for path in _catalog_files(folder):
            for entry in _entries_of(path, False):
                first = seen.setdefault((entry.kind, entry.id), entry)
                if first is not entry:
                    raise ConfigError(f"{entry.where} is also given in {first.path}; give each "
                                      "id once per folder")
                entries.append(entry)
    return ModelCatalog(entries, builtin())


def lookup(name: str) -> ModelSpec | None:
    """The model of a lowercase id or alias: built-in, else from the user folders; None if
    neither has it."""
    ident = builtin().resolve(name)
    if ident is not None:
        return builtin().specs[ident]
    folders = user_folders()
    if not folders:
        return None
    catalog = with_folders(folders)
    ident = catalog.resolve(name)
    return None if ident is None else catalog.specs[ident]


def known_names() -> list[str]:
    """Ids and aliases of every model :func:`lookup` finds (for suggestions)."""
    catalog = with_folders(user_folders())
    return list(catalog.specs) + list(catalog.aliases)


__all__ = ["KINDS", "ModelCatalog", "accepted_keys", "builtin", "builtin_dir", "known_names",
           "lookup", "spec_keys", "use_folders", "user_folders", "with_folders"]
