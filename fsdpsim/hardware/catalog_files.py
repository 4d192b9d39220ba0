"""Reading catalog files: each TOML file's entries checked against the schema
(:mod:`fsdpsim.hardware.catalog_schema`) and kept as written (:class:`_Raw`), the files of a
folder found, and the same id defined twice refused; :mod:`fsdpsim.hardware.catalog` builds the
hardware objects from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from fsdpsim.hardware.catalog_schema import KINDS, MODEL_KINDS, SCHEMAS, Field
from fsdpsim.util.errors import SHOWN_PATH_CHARS, ConfigError, shown, suggest
from fsdpsim.util.files import package_data_dir, read_toml
from fsdpsim.util.numbers import read_number


@dataclass(frozen=True)
class _Raw:
    kind: str
    data: dict
    origins: tuple[str, ...]

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def where(self) -> str:
        return " + ".join(self.origins)


def builtin_dir() -> Path:
    """The catalog shipped with fsdpsim (``hardware_catalog/`` in the source tree).

    An installed wheel carries it as the data package ``fsdpsim.hardware_catalog``; a source
    checkout on ``sys.path`` has it beside the package, and that one wins: an editable install
    of another checkout (a git worktree, ``/work/main``) would otherwise pair this checkout's
    code with that checkout's catalog.
    """
    return package_data_dir("hardware_catalog", "fsdpsim.hardware_catalog")


def _check_value(key: str, value: Any, spec: Field, where: str) -> None:
    if isinstance(value, bool) and spec.types is not bool and bool not in (
        spec.types if isinstance(spec.types, tuple) else (spec.types,)
    ):
        raise ConfigError(f"{where}: key {key!r} = {value!r} has the wrong type; "
                          f"accepted: {spec.describe()}")
    if not isinstance(value, spec.types):
        raise ConfigError(f"{where}: key {key!r} = {value!r} has the wrong type; "
                          f"accepted: {spec.describe()}")
    if spec.choices and value not in spec.choices:
        raise ConfigError(f"{where}: key {key!r} = {value!r} is not accepted; "
                          f"accepted: {spec.describe()}")
    if spec.lo is not None:  # the one number reader: finite, within the plausible range
        read_number(value, f"{where}: key {key!r}", spec.rule(), text=False)
    if spec.types is list and not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: key {key!r} must be a list of text")


def _check_table(data: Mapping, schema: Mapping, where: str, partial: bool) -> None:
    for key, value in data.items():
        spec = schema.get(key)
        if spec is None:
            raise ConfigError(f"{where}: unknown key {key!r}{suggest(key, schema)}; accepted keys: "
                              f"{', '.join(schema)}")
        if isinstance(spec, dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: key {key!r} must be a table ([{key}])")
            _check_table(value, spec, f"{where} [{key}]", partial)
        else:
            _check_value(key, value, spec, where)
    if partial:
        return
    for key, spec in schema.items():
        if isinstance(spec, Field) and spec.required and key not in data:
            raise ConfigError(f"{where}: missing required key {key!r} ({spec.describe()})")
        if isinstance(spec, dict) and key not in data and any(
            isinstance(s, Field) and s.required for s in spec.values()
        ):
            raise ConfigError(f"{where}: missing required table [{key}]")


def _read_file(path: Path) -> list[_Raw]:
    doc = read_toml(path, "catalog file")
    if not is_catalog_document(doc):
        return []  # another tool's TOML (a pyproject.toml): not a catalog file
    out = []
    for kind, entries in doc.items():
        if kind in MODEL_KINDS:
            continue  # models beside hardware in a user folder: fsdpsim.model.catalog reads them
        if kind not in SCHEMAS:
            tables = (*KINDS, *MODEL_KINDS)
            raise ConfigError(f"{path}: unknown table [[{kind}]]{suggest(kind, tables)}; "
                              f"accepted: {', '.join(f'[[{k}]]' for k in tables)}")
        if not isinstance(entries, list):
            raise ConfigError(f"{path}: [{kind}] must be an array of tables, written [[{kind}]]")
        for i, data in enumerate(entries):
            if not isinstance(data, dict):
                raise ConfigError(f"{path}: [[{kind}]] entry #{i + 1} must be a table, written "
                                  f"[[{kind}]] followed by key = value lines")
            ident = data.get("id")
            if not isinstance(ident, str) or not ident:
                raise ConfigError(f"{path}: [[{kind}]] entry #{i + 1} has no text 'id'")
            if ident != ident.lower() or " " in ident:
                raise ConfigError(f"{path}: [[{kind}]] id {ident!r} must be lowercase without "
                                  "spaces (e.g. 'h100-sxm5-80gb')")
            where = f"{path}: [[{kind}]] {ident!r}"
            _check_table(data, SCHEMAS[kind], where, partial=bool(data.get("override")))
            for alias in data.get("aliases", []):
                if alias != alias.lower() or " " in alias or not alias:
                    raise ConfigError(f"{where}: key 'aliases': {alias!r} must be lowercase "
                                      "without spaces (lookups are case-insensitive)")
            out.append(_Raw(kind, data, (str(path),)))
    return out


def _deep_merge(base: dict, extra: Mapping) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        if key == "override":
            continue
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


def is_catalog_document(doc: Mapping[str, Any]) -> bool:
    """Whether parsed TOML is meant as a catalog file: it names a kind (``[[accelerator]]``,
    also misspelled ones) or holds any top-level array of tables. Other TOML (``[project]``
    of a pyproject.toml) is another tool's file and is skipped."""
    return any(key in SCHEMAS or (isinstance(value, list) and value
                                  and all(isinstance(v, dict) for v in value))
               for key, value in doc.items())


def _catalog_files(folder: str | Path) -> list[Path]:
    """The ``*.toml`` files of a catalog folder and of its direct subfolders (the built-in
    layout: ``accelerators/``, ``networks/`` ...); hidden folders are skipped. Deeper folders are
    not searched, so a project folder (or ``/``) is never walked."""
    if not str(folder).strip():
        raise ConfigError("catalog folder '' is an empty name; give a folder ('.' for the "
                          "current one)")
    path = Path(folder)
    try:
        if not path.is_dir():
            raise ConfigError(f"catalog folder {shown(str(folder), SHOWN_PATH_CHARS)} does not "
                              "exist or is not a folder")
        subfolders = [path] + sorted(p for p in path.iterdir()
                                     if p.is_dir() and not p.name.startswith("."))
        return sorted(p for d in subfolders for p in d.glob("*.toml") if p.is_file())
    except OSError as exc:
        raise ConfigError(f"catalog folder {shown(str(folder), SHOWN_PATH_CHARS)} cannot be read: "
                          f"{exc.strerror or type(exc).__name__}") from None
    except ValueError:  # a NUL byte in the name
        raise ConfigError(f"catalog folder {shown(str(folder), SHOWN_PATH_CHARS)} is not a "
                          "folder name") from None


def _no_duplicates(raws: list[_Raw], folder: str) -> None:
    """One folder (one overlay) gives each id of a kind once; two entries would leave which
    one wins to the file order."""
    seen: dict[tuple[str, str], _Raw] = {}
    for raw in raws:
        key = (raw.kind, raw.id)
        if key in seen:
            first = seen[key]
            raise ConfigError(f"{raw.where}: [[{raw.kind}]] {raw.id!r} is also given in "
                              f"{first.where} (catalog folder {folder!r}); give each id once "
                              "per folder (override = true merges into an entry of an earlier "
                              "folder)")
        seen[key] = raw
