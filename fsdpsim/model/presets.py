"""Named model presets and the single entry point :func:`get_model`.

The presets are data: ``model_catalog/*.toml``, one ``[[model]]`` entry per preset with the
source its numbers come from, read by :mod:`fsdpsim.model.catalog` (which also documents the
format). Models of user catalog folders (``fsdpsim --catalog DIR``, ``FSDPSIM_CATALOG``) are
found by :func:`get_model` too; :data:`PRESETS` and :data:`ALIASES` are the built-in ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fsdpsim.util.errors import ConfigError, shown, suggest

if TYPE_CHECKING:
    from fsdpsim.model.spec import ModelSpec


def __getattr__(name: str):
    """``PRESETS`` (every built-in preset by lowercase id, in catalog order: files by name,
    entries in file order) and ``ALIASES`` (other spellings accepted by :func:`get_model`),
    read from the catalog on first use."""
    from fsdpsim.model.catalog import builtin

    if name == "PRESETS":
        return builtin().specs
    if name == "ALIASES":
        return builtin().aliases
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def list_models() -> list[str]:
    """Built-in preset ids in catalog order (``model_catalog/`` files by name, entries in file
    order)."""
    from fsdpsim.model.catalog import builtin

    return list(builtin().specs)


def _looks_like_path(text: str) -> bool:
    from fsdpsim.util.files import looks_like_file

    return text.endswith(".json") or "/" in text or "\\" in text or looks_like_file(text)


#: Ids of the size ladder (:mod:`fsdpsim.model.ladder`): ``ladder-<size>``, as sweep names them.
LADDER_PREFIX = "ladder-"


def get_model(name_or_path: str) -> ModelSpec:
    """The preset with id ``name_or_path`` (case-insensitive), a size-ladder model by the id
    ``sweep --model-sizes`` prints (``ladder-7b``), or a spec imported from a Hugging Face
    ``config.json`` (a file path, or a directory that holds one).

    Raises
    ------
    ConfigError
        Unknown id (with the closest preset ids), or an unreadable / unsupported config file.
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ConfigError(f"model {shown(name_or_path)} must be a preset id or a config.json path")
    from fsdpsim.model.catalog import known_names, lookup

    key = name_or_path.strip().lower()
    found = lookup(key)
    if found is not None:
        return found
    if key.startswith(LADDER_PREFIX) and not _looks_like_path(name_or_path):
        # the id `sweep --model-sizes` prints (ladder-7b): the same ladder model again
        from fsdpsim.model.ladder import ladder_model
        from fsdpsim.util.numbers import MODEL_SIZE, read_number

        size = read_number(key[len(LADDER_PREFIX):], f"model {shown(name_or_path)}", MODEL_SIZE)
        return ladder_model(size)
    if _looks_like_path(name_or_path):
        from fsdpsim.model.hf_config import spec_from_hf_config

        return spec_from_hf_config(name_or_path)
    raise ConfigError(
        f"unknown model {shown(name_or_path)}{suggest(key, known_names())}; give a "
        f"preset id or a path to a Hugging Face config.json (see `fsdpsim model list`)"
    )
