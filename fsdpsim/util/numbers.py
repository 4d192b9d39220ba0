"""The one reader of numbers that users give: command-line options, TOML (catalog overlays, grid
files), JSON (``config.json``) and CSV cells (measurements).

Every numeric input goes through :func:`read_number` with a :class:`Rule` that says what is
accepted (whole or not, the range, the unit, which suffixes). Whatever the source, a value
fsdpsim cannot use is rejected with the same one-line message::

    {what}: {value} is not accepted; accepted: {rule}

Rejected everywhere: NaN and infinities (also ``1e400``, which reads as infinity), values
outside the rule's range (absurd sizes such as a 400-digit integer or ``1e-300`` Gb/s), booleans,
and text with non-ASCII characters (Python's ``float("٨")`` is 8.0; fsdpsim does not guess).

Suffixes are decimal (``k`` = 1e3, ``m`` = 1e6, ``b`` = ``g`` = 1e9, ``t`` = 1e12: ``15t``
tokens, ``7b`` parameters) except for sequence lengths, where ``k`` = 1,024 and ``m`` =
1,048,576, as users mean them (``32k`` = 32,768 tokens).
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Any, Mapping

from fsdpsim.util.errors import ConfigError, shown

#: No input fsdpsim reads (in datasheet or human units: GiB, Gb/s, us, fractions) is
#: meaningfully smaller than this; a nonzero value below it (``1e-300``) is refused.
TINY = 1e-9
DECIMAL = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
#: Sequence lengths: powers of two, as "32k context" is meant (32,768 tokens).
BINARY = {"k": 1024.0, "m": 1024.0**2}


def _fmt(x: float) -> str:
    """A bound for messages: ``2,147,483,648``, ``0.001``, ``1e+15``."""
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:,g}" if abs(x) >= 1e-4 else f"{x:g}"


@dataclass(frozen=True)
class Rule:
    """What one numeric input accepts."""

    lo: float
    """Smallest accepted value (excluded when ``lo_open``)."""
    hi: float
    """Largest accepted value (always finite: nothing unbounded is accepted)."""
    whole: bool = False
    """Only whole numbers (counts)."""
    unit: str = ""
    """Unit shown in messages (``Gb/s per GPU``, ``W``)."""
    suffixes: Mapping[str, float] | None = None
    """Text suffixes accepted (:data:`DECIMAL` or :data:`BINARY`); None: plain numbers."""
    lo_open: bool = False
    """``lo`` itself is not accepted (``> 0``)."""
    also: str = ""
    """Other accepted words, for the message (``auto``)."""

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        if self.lo_open:
            text = f"{kind} above {_fmt(self.lo)} and at most {_fmt(self.hi)}"
        else:
            text = f"{kind} from {_fmt(self.lo)} to {_fmt(self.hi)}"
        if self.unit:
            text += f" {self.unit}"
        if self.lo < TINY and self.hi > 0 and not self.whole:  # whole numbers have no tiny ones
            text += f" (0 or at least {TINY:g})" if self.lo <= 0 and not self.lo_open \
                else f" (at least {TINY:g})"
        if self.suffixes is BINARY:
            text += " (k = 1,024, m = 1,048,576: 32k = 32,768)"
        elif self.suffixes:
            text += " (k, m, b, t = 1e3, 1e6, 1e9, 1e12)"
        if self.also:
            text += f", or {self.also}"
        return text

    def contains(self, x: float | int) -> bool:
        above = x > self.lo if self.lo_open else x >= self.lo
        return bool(above and x <= self.hi and (x == 0 or abs(x) >= TINY))


def reject(what: str, value: Any, rule: Rule | str) -> ConfigError:
    """The one message for a number that is not accepted (``rule`` or a description)."""
    accepted = rule.describe() if isinstance(rule, Rule) else rule
    return ConfigError(f"{what}: {shown(value)} is not accepted; accepted: {accepted}")


def read_number(value: Any, what: str, rule: Rule, *, text: bool = True) -> float | int:
    """``value`` as a number that ``rule`` accepts, else :class:`ConfigError` (one message).

    Parameters
    ----------
    value
        A number (int, float, numpy scalar) or, with ``text``, a string such as ``"4096"``,
        ``" 32k "``, ``"1_024"`` or ``"2.5e3"``.
    what
        Where the value comes from, for the message: ``--seq-len``, ``grid.toml: key 'pue'``.
    rule
        What is accepted.
    text
        Accept strings (command line, CSV cells). TOML and JSON values are typed: a string
        there is a wrong type, not a number.

    Returns
    -------
    int for a whole-number rule, else float.
    """
    number: float | int
    if type(value) is float:  # the common value first (the abstract-class checks are slower)
        number = value
    elif isinstance(value, bool) or value is None:
        raise reject(what, value, rule)
    elif isinstance(value, numbers.Integral):
        number = int(value)  # exact: a 400-digit integer is compared, never converted to float
    elif isinstance(value, numbers.Real):
        number = float(value)
    elif isinstance(value, str) and text:
        number = _parse_text(value, what, rule)
    else:
        raise reject(what, value, rule)
    if isinstance(number, float) and not math.isfinite(number):
        raise reject(what, value, rule)
    if not rule.contains(number):
        raise reject(what, value, rule)
    if rule.whole:
        if number != int(number):
            raise reject(what, value, rule)
        return int(number)
    return float(number)


def _parse_text(value: str, what: str, rule: Rule) -> float:
    s = value.strip().lower().replace("_", "")
    if not s or not s.isascii():
        raise reject(what, value, rule)
    factor = 1.0
    if rule.suffixes and s[-1] in rule.suffixes:
        factor = rule.suffixes[s[-1]]
        s = s[:-1]
    try:
        return float(s) * factor
    except ValueError:
        raise reject(what, value, rule) from None


def option_type(rule: Rule, *, auto: bool = False):
    """A click parameter type that reads an option's value with :func:`read_number` (click's
    own ``int``/``float`` accept ``nan``, ``inf`` and non-ASCII digits); with ``auto`` the word
    ``auto`` gives None."""
    import click

    class _Number(click.ParamType):
        name = "integer" if rule.whole else "number"

        def convert(self, value, param, ctx):
            if value is None:
                return None
            if auto and isinstance(value, str) and value.strip().lower() == "auto":
                return None
            what = param.opts[0] if param is not None and param.opts else "value"
            return read_number(value, what, rule)

    return _Number()


_NUMBER_IN_TEXT = re.compile(r"[-+]?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


def number_in_text(value: Any) -> float:
    """The first number in a free-text cell of a published table ("8 (assumed: ...)",
    "1,600 Gbps"), NaN when there is none. Published tables are read by what they say and
    unusable cells become skip reasons, so this one does not raise; like :func:`read_number` it
    reads ASCII digits only (``re``'s ``\\d`` and ``float`` also take "٨") and gives NaN for
    an integer beyond float range."""
    if type(value) is float:  # the common cells (float, int) before the slower checks
        return value
    if isinstance(value, bool):
        return float(value)
    if type(value) is int or isinstance(value, numbers.Real):
        try:
            return float(value)
        except OverflowError:
            return float("nan")
    if value is None:
        return float("nan")
    match = _NUMBER_IN_TEXT.search(str(value).replace(",", ""))
    return float(match.group()) if match else float("nan")


# -- what fsdpsim accepts, in one place ----------------------------------------------------------
#: Largest count of sequences (micro-batch, global batch) and of most other things. Counts become
#: float64 inside the engine, and products such as micro_batch x num_gpus must stay exact
#: integers (< 2**53) so reports never show a rounded batch.
MAX_COUNT = 2**31
#: Largest GPU count: 4,194,304 (about 400x the largest clusters of 2026).
MAX_GPUS = 2**22
#: Most transformer layers: 16,384 (about 130x the deepest published models of 2026).
MAX_LAYERS = 2**14
#: Longest sequence: 16,777,216 tokens (the longest trained contexts are about 10M; the memory
#: ceiling solver searches up to the same bound).
MAX_SEQ_LEN = 2**24

GPUS = Rule(1, MAX_GPUS, whole=True)
#: Model chunks per pipeline rank (--vpp), predict and sweep alike.
VPP = Rule(1, 1024, whole=True)
COUNT = Rule(1, MAX_COUNT, whole=True)
#: A count given as text, with decimal suffixes (1k = 1,000): a micro-batch, a global batch.
COUNT_TEXT = Rule(1, MAX_COUNT, whole=True, suffixes=DECIMAL)
#: A count of layers (of a model, of a pipeline stage).
LAYERS = Rule(1, MAX_LAYERS, whole=True)
SEQ_LEN = Rule(1, MAX_SEQ_LEN, whole=True, unit="tokens", suffixes=BINARY)
#: A physical floor: below 1 Mb/s per GPU there is no network to speak of (and below ~1e-300
#: the arithmetic underflows to NaN). Above 100 Tb/s per GPU is no network either.
INTER_NODE_GBPS = Rule(0.001, 100_000, unit="Gb/s per GPU")
POWER_CAP_W = Rule(1, 10_000, unit="W")
PUE = Rule(1, 10)
PRICE_USD_PER_GPU_HOUR = Rule(0.0001, 10_000, unit="USD per GPU-hour")
#: Tokens of a training run: up to a million times Llama 3's 15T.
TRAIN_TOKENS = Rule(1, 1e19, unit="tokens", suffixes=DECIMAL)
#: Mean time between job-stopping failures per GPU: an hour to 100,000 years (Llama 3's H100s:
#: 50,677 hours, fsdpsim.drivers.procurement).
GPU_MTBF_HOURS = Rule(1, 1e9, unit="hours per GPU")
#: Checkpoint write bandwidth of a whole job: 1 MB/s to 10 PB/s (Llama 3's storage: 2,000).
CHECKPOINT_GB_PER_S = Rule(0.001, 1e7, unit="GB/s")
#: Time to restart after a failure: none to a week.
RESTART_MIN = Rule(0, 10_080, unit="minutes")
#: Model sizes of the ladder (--model-sizes): 1M to 1,000T parameters.
MODEL_SIZE = Rule(1e6, 1e15, unit="parameters", suffixes=DECIMAL)
#: Tokens per GPU per micro-batch (micro-batch x sequence length): k = 1,024 as for sequence
#: lengths, so 8k lands on 2 x 4,096.
TOKENS_PER_GPU = Rule(1, 1e12, unit="tokens per GPU", suffixes=BINARY)
#: A measured throughput: up to a billion tokens/s per GPU.
TOKENS_PER_S_PER_GPU = Rule(1e-6, 1e9, unit="tokens/s per GPU")


__all__ = ["Rule", "read_number", "reject", "number_in_text", "MAX_COUNT", "MAX_GPUS",
           "MAX_SEQ_LEN", "DECIMAL", "BINARY"]
