"""What a knob is (:class:`Knob`): the one declaration :mod:`fsdpsim.plan.knobs` lists for
every knob a user states, and how a command takes it (:data:`ONE`, :data:`LIST`,
:data:`GRID`, :data:`FIX`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from fsdpsim.util.numbers import Rule

#: A command takes one value of the knob (typed and checked by its option).
ONE = "one"
#: ``sweep`` takes a list (comma-separated, repeatable; read by :mod:`fsdpsim.drivers.sweep`).
LIST = "list"
#: ``sweep`` takes one value for the whole grid, as text (read by the grid).
GRID = "grid"
#: ``search`` takes it as a ``--fix KEY=VALUE`` item (:attr:`Knob.key`): a setting every
#: searched plan has (read by :mod:`fsdpsim.drivers.search.fix`).
FIX = "fix"
#: The default of a knob not given is the ``--framework`` profile's (``KNOB_DEFAULTS``).
FRAMEWORK = "the framework's default"
#: Kinds of knob.
KINDS = ("flag", "choice", "number", "text")
#: Every command an option can come from (``sweep``'s options are also ``plot``'s).
COMMANDS = ("predict", "search", "compare", "sweep")
#: A flag knob's value as a grid file or ``--fix`` writes it (any case, spaces around).
FLAG_WORDS = {"true": True, "yes": True, "1": True, "on": True,
              "false": False, "no": False, "0": False, "off": False}


def flag_of(text: str) -> bool | None:
    """The flag ``text`` spells (:data:`FLAG_WORDS`), or None where it spells none."""
    return FLAG_WORDS.get(text.strip().lower())


@dataclass(frozen=True)
class Knob:
    """One knob (:mod:`fsdpsim.plan.knobs`' docstring)."""

    name: str
    """Its Python name: the option's parameter, ``--name`` with ``-`` for ``_``."""
    kind: str
    """One of :data:`KINDS`."""
    help: str
    """Help of the one-value option (``predict``, ``search``, ``compare``)."""
    commands: Mapping[str, str]
    """Command -> :data:`ONE`, :data:`LIST`, :data:`GRID` (``sweep``) or :data:`FIX`
    (``search``)."""
    default: Any = None
    """The value when not given; None: none (the option is optional), :data:`FRAMEWORK`."""
    choices: tuple[str, ...] = ()
    rule: Rule | None = None
    """What a number accepts (range, whole, unit); of a text knob that is a number or a word
    (``micro_batch``: a count or auto), what its number accepts."""
    units: str = ""
    grid_help: str = ""
    """Help of ``sweep``'s form (a list, or one value for the whole grid)."""
    help_for: Mapping[str, str] = field(default_factory=dict)
    """A command whose option means something else where not given (its own help)."""
    off: str = ""
    """A flag's off spelling (default ``no-NAME``)."""
    flag: str = ""
    """The option's spelling where it is not ``--name`` with dashes."""
    metavar: str | None = None
    case_sensitive: bool = True
    field: str | None = None
    """Its key in predict's JSON (dotted) and sweep's CSV; None: not a field of its own."""
    column: str | None = None
    """Its column in a measurement file (``measured/``); None: the file does not state it."""
    words: str = ""
    """How a report says the knob is set where its value is not :meth:`plain`: a format of the
    value (``{}``; a list joined by commas); empty: reports do not name it."""
    dim: str = ""
    """A plan switch's mesh dimension (:data:`PLAN_SWITCHES`): the switch means something only
    where that degree is > 1, and the plan line spells it in that dimension's parentheses."""
    spelled: Mapping[Any, str] = dataclasses.field(default_factory=dict)
    """A plan switch's word in the plan line for each value that is written; a line without
    one of them means the :attr:`plain_value` (``tp4(sp,overlap)``, ``cp2(a2a)``)."""
    label: str = ""
    """A plan switch's name in a report's few words (what search's runner-up gives up:
    ``tp overlap on``)."""

    @property
    def key(self) -> str:
        """Its attribute in the plan or training settings, the last part of :attr:`field`
        (``keep_gathered`` of ``plan.keep_gathered``), else its name: what ``search --fix``
        and the search's plans call it."""
        return self.field.rpartition(".")[2] if self.field else self.name

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def off_option(self) -> str:
        return "--" + (self.off or "no-" + self.name.replace("_", "-"))

    def help_of(self, command: str) -> str:
        if command in self.help_for:
            return self.help_for[command]
        return self.grid_help if self.commands.get(command) in (LIST, GRID) else self.help

    def is_option_of(self, command: str) -> bool:
        """Whether ``command`` has an option of the knob (``search`` takes a :data:`FIX` knob
        as a ``--fix`` item instead)."""
        return self.commands.get(command, FIX) != FIX

    @property
    def plain_value(self) -> Any:
        """The value that sets nothing: a flag off, a choice its first (``none``,
        ``alltoall``), a text empty, a number none; what a framework profile without a
        default of its own takes (:func:`knob_default`)."""
        if self.kind == "flag":
            return False
        if self.kind == "choice":
            return self.choices[0]
        return "" if self.kind == "text" else None

    def plain(self, value: Any) -> bool:
        """Whether ``value`` (an option value, or a TrainingConfig or report one) sets
        nothing (:attr:`plain_value`)."""
        return self.value(value) == self.value(self.plain_value)

    def value(self, given: Any) -> Any:
        """The TrainingConfig value of a given (or defaulted) option value: a flag as a bool,
        a whole number as an int (None stays None), a list as a tuple (none: empty), a choice as
        it is."""
        if self.kind == "flag":
            return bool(given)
        if self.kind == "number" and self.rule is not None and self.rule.whole:
            return None if given is None else int(given)
        if self.kind == "text":
            return given or ()
        return given
