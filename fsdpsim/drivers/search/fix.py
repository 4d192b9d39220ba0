"""``fsdpsim search --fix NAME=VALUE``: the settings every searched plan must have, read and
checked (one clear error per bad item naming what is accepted)."""

from __future__ import annotations

from typing import Any

from fsdpsim.plan.knobs import KNOBS, PLAN_SWITCHES
from fsdpsim.plan.parallel import GRAD_SYNCS, PP_SCHEDULES, RECOMPUTES, SHARDINGS
from fsdpsim.util.errors import ConfigError

#: Degrees and choices ``--fix`` accepts, with the type of their value: every plan switch
#: (:data:`fsdpsim.plan.knobs.PLAN_SWITCHES`, a flag or a choice) among them.
FIXABLE = {"tp": int, "pp": int, "cp": int, "vpp": int, "ep": int, "etp": int,
           "dp_shard": int, "dp_replicate": int, "sharding": str, "pp_schedule": str,
           "micro_batch": int, "recompute": str, "recompute_layers": int,
           "grad_sync": str, "keep_gathered": bool, "zero": int,
           "pp_first_layers": int, "pp_last_layers": int,
           **{name: bool if KNOBS[name].kind == "flag" else str for name in PLAN_SWITCHES}}
_CHOICES = {"sharding": SHARDINGS, "pp_schedule": PP_SCHEDULES, "recompute": RECOMPUTES,
            "grad_sync": GRAD_SYNCS, **{name: KNOBS[name].choices for name in PLAN_SWITCHES
                                        if KNOBS[name].kind == "choice"}}
_ALIASES = {"schedule": "pp_schedule", "sp": "sequence_parallel", "mb": "micro_batch",
            "micro-batch": "micro_batch", "pp-schedule": "pp_schedule"}
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
            name = _ALIASES.get(name, name).replace("-", "_")
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
    """One ``--fix`` value read as its setting's type; a clear error naming what is accepted."""
    kind = FIXABLE[name]
    if kind is bool:
        low = text.lower()
        if low in ("1", "true", "on", "yes"):
            return True
        if low in ("0", "false", "off", "no"):
            return False
        raise ConfigError(f"--fix {name}={text!r} is not accepted; accepted: true or false")
    if kind is int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        low = 0 if name in ("zero", "recompute_layers") else 1
        if value < low or (name == "zero" and value > 3):
            what = "0, 1, 2 or 3" if name == "zero" else f"a whole number >= {low}"
            raise ConfigError(f"--fix {name}={text!r} is not accepted; accepted: {what}")
        return value
    if text not in _CHOICES[name]:
        raise ConfigError(f"--fix {name}={text!r} is not accepted; accepted: "
                          f"{', '.join(_CHOICES[name])}")
    return text
