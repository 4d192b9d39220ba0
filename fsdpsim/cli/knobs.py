"""The click options of the knobs of :mod:`fsdpsim.plan.knobs`: each command's option of a knob
is made here from its one declaration (spelling, type, default, help), so every command that
takes a knob parses it the same way and says the same about it."""

from __future__ import annotations

import click

from fsdpsim.plan.knobs import KNOBS, LIST, Knob, option_default
from fsdpsim.util.numbers import option_type


class _NumberOrWord(click.ParamType):
    """A number (:func:`fsdpsim.util.numbers.read_number` with the knob's rule), or the rule's
    other word (``none``), which gives None."""

    def __init__(self, rule):
        self.inner, self.word = option_type(rule), rule.also
        self.name = f"number|{self.word}"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.strip().lower() == self.word:
            return None
        return self.inner.convert(value, param, ctx)


def _type(k: Knob):
    if k.kind == "choice":
        return click.Choice(k.choices, case_sensitive=k.case_sensitive)
    if k.kind == "number":
        return _NumberOrWord(k.rule) if k.rule.also else option_type(k.rule)
    return None


def knob_option(name: str, command: str):
    """The click option of knob ``name`` in ``command`` (a decorator): one typed value, or for
    ``sweep`` the text its grid reads (a list, or one value for the whole grid)."""
    k = KNOBS[name]
    form = k.commands[command]
    text = k.help_of(command) or None
    names = (f"{k.option}/{k.off_option}",) if k.kind == "flag" else (k.option,)
    if form != "one":  # sweep: the grid reads the text, its defaults are the grid's
        if k.kind == "flag":
            return click.option(*names, k.name, default=None, help=text)
        return click.option(*names, k.name, multiple=form == LIST, default=None, help=text,
                            metavar=k.metavar)
    default = option_default(name)
    return click.option(*names, k.name, type=_type(k), default=default,
                        show_default=default is not None, help=text, metavar=k.metavar)


def knob_options(command: str, *names: str) -> list:
    """:func:`knob_option` of each of ``names``."""
    return [knob_option(n, command) for n in names]


__all__ = ["knob_option", "knob_options"]
