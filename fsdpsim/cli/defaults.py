"""What a command does where its options leave a choice open: the one default global batch of
every command (:func:`fsdpsim.plan.training.default_global_batch`) and a framework's plan
defaults (:func:`fsdpsim.plan.frameworks.plan_defaults`), each with the note that states it."""

from __future__ import annotations

from dataclasses import replace

import click

from fsdpsim.plan.knobs import PLAN_SWITCHES, count_rule, option_default, plan_knobs
from fsdpsim.util.numbers import read_number
from fsdpsim.util.units import million_tokens_text

#: The plan options of predict (search and compare read the same), with their defaults: the
#: knobs of a plan (:func:`fsdpsim.plan.knobs.plan_knobs`, the plan switches among them).
PLAN_OPTIONS = {k.name: option_default(k.name) for k in plan_knobs()}


def auto_int(value: str | None, what: str) -> int | None:
    """A count option (fsdpsim.util.numbers: the one number reader), or None for ``auto``."""
    if value is None or str(value).strip().lower() == "auto":
        return None
    return read_number(value, what, replace(count_rule(what), also="auto"))


def default_batch(value: str | None, seq_len: int, dp: int = 1) -> tuple[int, str | None]:
    """``--global-batch``, or the default of every command
    (:func:`fsdpsim.plan.training.default_global_batch`: about 4M tokens as a power of two
    sequences, the nearest multiple of ``dp`` where ``dp`` does not divide it) with the note
    that says so (None when the batch was given)."""
    from fsdpsim.plan.training import DEFAULT_BATCH_RULE, default_global_batch

    stated = auto_int(value, "--global-batch") if value else None
    if stated:
        return stated, None
    base, batch = default_global_batch(seq_len), default_global_batch(seq_len, dp)
    moved = (f"; {base:,} is not a multiple of dp x micro-batch ({dp:,}), so the nearest one"
             if batch != base else "")
    tokens = million_tokens_text(batch * seq_len)
    return batch, (f"global batch {batch:,} sequences ({tokens} tokens per step): the default "
                   f"of every command, {DEFAULT_BATCH_RULE}{moved}; --global-batch sets another")


def global_batch_or_default(value: str | None, seq_len: int, dp: int = 1) -> int:
    """``--global-batch``, or the default of every command (:func:`default_batch`)."""
    return default_batch(value, seq_len, dp)[0]


def given(o: dict, name: str) -> bool:
    """Whether option ``name`` was given on the command line (not its default); options built
    outside a command (a caller's dict) state every value."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and name in ctx.params and ctx.params[name] == o.get(name):
        source = ctx.get_parameter_source(name)
        return source not in (click.core.ParameterSource.DEFAULT,
                              click.core.ParameterSource.DEFAULT_MAP)
    return True


def framework_plan_defaults(o: dict) -> tuple[dict, str | None]:
    """``o`` with the ``--framework`` profile's sharding and overlap where none was given
    (:func:`fsdpsim.plan.frameworks.plan_defaults`), and the note that says which: for a
    hybrid plan (tp, pp or cp > 1) or where they differ from the flags' defaults; else None."""
    from fsdpsim.plan.frameworks import plan_defaults

    stated = tuple(k for k in ("reshard_after_forward", *PLAN_SWITCHES) if given(o, k))
    if any(given(o, k) for k in ("sharding", "zero", "dp_shard", "dp_replicate",
                                  "shard_group_size")):
        stated += ("sharding",)
    chosen, note = plan_defaults(o.get("framework") or "fsdp2", tp=o.get("tp") or 1,
                                 pp=o.get("pp") or 1, cp=o.get("cp") or 1, given=stated)
    chosen = {k: v for k, v in chosen.items() if k not in stated}
    changed = {k: v for k, v in chosen.items() if v != PLAN_OPTIONS[k]}
    hybrid = max(o.get("tp") or 1, o.get("pp") or 1, o.get("cp") or 1) > 1
    return {**o, **chosen}, (note if note and (changed or hybrid and chosen) else None)


__all__ = ["default_batch", "global_batch_or_default", "given", "framework_plan_defaults"]
