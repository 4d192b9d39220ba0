"""``fsdpsim search --fix NAME=VALUE``: the settings every searched plan must have, read and
checked (one clear error per bad item naming what is accepted)."""

from __future__ import annotations

from typing import Any

from fsdpsim.plan.knob import flag_of
from fsdpsim.plan.knobs import fixable
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.numbers import read_number

#: The settings ``--fix`` holds, by the name it reads (:attr:`~fsdpsim.plan.knob.Knob.key`):
#: every knob declared with ``search`` :data:`~fsdpsim.plan.knob.FIX`
#: (:func:`fsdpsim.plan.knobs.fixable`), each read as its declaration types it.
FIXABLE = fixable()
#: Other spellings of a name: the short ones and each knob's own name (``keep_params_gathered``).
_ALIASES = {"schedule": "pp_schedule", "sp": "sequence_parallel", "mb": "micro_batch",
            **{k.name: key for key, k in FIXABLE.items() if k.name != key}}
_ZERO = {0: "none", 1: "optimizer", 2: "grad_op", 3: "full"}


def parse_fix(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``["tp=8", "sharding=full"]`` → ``{"tp": 8, "sharding": "full"}``; one clear error per
    bad item naming what is accepted."""
    out: dict[str, Any] = {}
    accepted = ", ".join(sorted(FIXABLE))
    for item in items:
        parts = [part.strip() for part in str(item).split(",")]
        if "" in parts and len(parts) > 1:
            raise ConfigError(f"--fix {str(item)!r}: an empty item; accepted: comma-separated "
                              "NAME=VALUE items, none of them empty")
        for part in filter(None, parts):
            if "=" not in part:
                raise ConfigError(f"--fix {part!r} is not NAME=VALUE; accepted names: {accepted}")
            name, value = (s.strip() for s in part.split("=", 1))
            name = name.replace("-", "_")
            name = _ALIASES.get(name, name)
            if name not in FIXABLE:
                raise ConfigError(f"--fix {name!r} is not accepted; accepted names: {accepted}")
            value = _fix_value(name, value)
            if name in out and out[name] != value:
                raise ConfigError(f"--fix {name} is fixed twice, to {out[name]} and {value}; "
                                  f"accepted: one value of {name}")
            out[name] = value
    if "zero" in out:
        if "sharding" in out and out["sharding"] != _ZERO[out["zero"]]:
            raise ConfigError(f"--fix zero={out['zero']} and sharding={out['sharding']} "
                              "contradict each other")
        out["sharding"] = _ZERO[out.pop("zero")]
    return out


def _fix_value(name: str, text: str) -> Any:
    """One ``--fix`` value read as its knob's declaration types it (a flag true or false, a
    choice one of its choices but ``auto``, a number by its rule); a clear error naming what
    is accepted."""
    knob = FIXABLE[name]
    if knob.kind == "flag":
        flag = flag_of(text)
        if flag is None:
            raise ConfigError(f"--fix {name}={text!r} is not accepted; accepted: true or false")
        return flag
    if knob.kind == "choice":
        choices = tuple(c for c in knob.choices if c != "auto")  # auto: not a fixed value
        if text not in choices:
            raise ConfigError(f"--fix {name}={text!r} is not accepted; accepted: "
                              f"{', '.join(choices)}")
        return text
    return read_number(text, f"--fix {name}", knob.rule)
