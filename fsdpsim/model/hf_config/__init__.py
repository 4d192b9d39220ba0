"""Offline import of a Hugging Face ``config.json`` into a :class:`~fsdpsim.model.spec.ModelSpec`.

Only the file is read (no network, no ``transformers``). Field meanings and defaults follow the
configuration classes and modeling files of Hugging Face ``transformers`` and, for ``mpt``,
MosaicML llm-foundry's ``MPTConfig`` (the code that ``trust_remote_code`` MPT checkpoints run).
Sizes that decide the parameter count are required; switches with a well-known default
(biases, tying, layer patterns) fall back to that model type's default.

One reader per model type: dense types in :mod:`fsdpsim.model.hf_config.dense` (llama, mistral,
qwen2, qwen3, gpt2, gpt_neox, mpt, nemotron), mixture-of-experts types in
:mod:`fsdpsim.model.hf_config.moe` (mixtral, qwen3_moe, deepseek_v3, kimi_k2, gpt_oss, llama4); the
typed key access is
:mod:`fsdpsim.model.hf_config.reader`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fsdpsim.util.errors import ConfigError, suggest
from fsdpsim.util.files import MAX_TEXT_BYTES, read_text
from fsdpsim.model.hf_config import dense, moe, reader
from fsdpsim.model.hf_config.reader import Config
from fsdpsim.model.spec import ModelSpec, check_plausible_size

_READERS: dict[str, Callable[[Config], dict[str, Any]]] = {**dense.READERS, **moe.READERS}
#: Keys without which each model type cannot be counted.
REQUIRED: dict[str, tuple[str, ...]] = {**dense.REQUIRED, **moe.REQUIRED}
assert set(REQUIRED) == set(_READERS)

#: model_type values :func:`spec_from_hf_config` understands.
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_READERS)
#: Kept for callers of the old single module.
SIZE_RULES = reader.SIZE_RULES


class _HugeInteger(float):
    """An integer of more digits than Python converts (4,300): infinite, named by its size."""

    def __new__(cls, digits: int):
        obj = super().__new__(cls, "inf")
        obj.digits = digits
        return obj

    def __repr__(self) -> str:
        return f"an integer of {self.digits:,} digits"


def _json_int(text: str) -> int | float:
    return int(text) if len(text) <= 1000 else _HugeInteger(len(text.lstrip("-")))


def spec_from_hf_config(path: str | os.PathLike[str], *, name: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` (a file or a directory
    that holds one), offline.

    Parameters
    ----------
    path
        The ``config.json`` file, or the model directory containing it.
    name
        Name for the spec; default ``_name_or_path`` from the file, else the file's name
        without ``.json`` (when it is not ``config.json``), else the directory name.

    Raises
    ------
    ConfigError
        Missing or malformed file (with line and column), unsupported ``model_type``, a missing
        required key, or values that make an invalid spec; the message names the file.
    """
    path = Path(path)
    try:
        if path.is_dir():
            path = path / "config.json"
    except (OSError, ValueError):  # a name too long for the file system: read_text says so
        pass
    text = read_text(path, "model config file", MAX_TEXT_BYTES, expected="a config.json",
                     regular_only=True)
    try:
        data = json.loads(text, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: line {exc.lineno}, column {exc.colno}: malformed JSON ({exc.msg})"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: JSON nested too deeply to read (a config.json is one flat "
                          "object with a few nested ones)") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise ConfigError(f"{path}: cannot read as JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a JSON object, got {type(data).__name__}")

    model_type = data.get("model_type")
    accepted = ", ".join(SUPPORTED_MODEL_TYPES)
    if model_type is None:
        raise ConfigError(f"{path}: missing key 'model_type' (accepted: {accepted})")
    if not isinstance(model_type, str) or model_type not in _READERS:
        hint = suggest(str(model_type), SUPPORTED_MODEL_TYPES)
        raise ConfigError(
            f"{path}: model_type {model_type!r} is not supported{hint} (accepted: {accepted})"
        )

    fields = _READERS[model_type](Config(path, data, model_type, REQUIRED[model_type]))
    if name is None:  # a file not called config.json names itself (two in one folder differ)
        name = (data.get("_name_or_path")
                or (path.stem if path.name.lower() != "config.json" else "")
                or path.resolve().parent.name or str(path))
    try:
        spec = ModelSpec(name=str(name)[:200], **fields)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return check_plausible_size(spec, str(path))
