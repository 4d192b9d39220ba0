"""Values of sweep options, as text, numbers or lists: counts and ``A..B`` ranges, names from
a set, model sizes, prices, flags (the readers :mod:`fsdpsim.drivers.sweep.grid` builds a grid
with, and the commands that take the same kinds of values)."""

from __future__ import annotations

from typing import Any, Mapping

from fsdpsim.hardware.catalog import Catalog
from fsdpsim.util.errors import ConfigError, shown
from fsdpsim.plan.knob import flag_of
from fsdpsim.plan.knobs import count_rule, option_knob
from fsdpsim.util.numbers import MODEL_SIZE, read_number, reject
from fsdpsim.drivers.procurement import read_price


def split_values(value: Any, what: str) -> list[str]:
    """Text items of an option value: comma-separated text, a number, or a list of those."""
    items = value if isinstance(value, (list, tuple)) else [value]
    out: list[str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise ConfigError(f"{what}: cannot read {shown(item)}; give text, a number or a list")
        if isinstance(item, int) and abs(item) >= 10**30:  # str() refuses > 4,300 digits
            raise reject(what, item, "a number of a plausible size")
        parts = [part.strip() for part in str(item).split(",")]
        if "" in parts and len(parts) > 1:
            raise ConfigError(f"{what} {shown(str(item))}: an empty item; accepted: "
                              "comma-separated values, none of them empty")
        out += [part for part in parts if part]
    if not out:
        raise ConfigError(f"{what}: no values given")
    return out


def read_count(text: str, what: str) -> int:
    return read_number(text, what, count_rule(what))


def parse_counts(value: Any, what: str) -> list[int]:
    """Whole numbers and ranges ``A..B`` (A, the powers of two strictly between, B)."""
    out: list[int] = []
    for item in split_values(value, what):
        if ".." in item:
            lo_text, hi_text = item.split("..", 1)
            lo, hi = read_count(lo_text, what), read_count(hi_text, what)
            if lo > hi:
                raise ConfigError(f"{what}: range {item!r} is empty; give the smaller value "
                                  f"first (e.g. {hi}..{lo})")
            between = [2**k for k in range(lo.bit_length(), hi.bit_length()) if lo < 2**k < hi]
            out += [lo, *between] + ([hi] if hi != lo else [])
        else:
            out.append(read_count(item, what))
    return list(dict.fromkeys(out))


def parse_choices(value: Any, what: str, choices: tuple[str, ...],
                  allow_auto: bool = False) -> tuple[str, ...] | None:
    """Names from ``choices`` (None for ``auto`` where allowed)."""
    items = [v.lower() for v in split_values(value, what)]
    if allow_auto and "auto" in items:
        if len(items) > 1:
            raise ConfigError(f"{what}: 'auto' cannot be combined with other values")
        return None
    for item in items:
        if item not in choices:
            extra = ", auto" if allow_auto else ""
            raise ConfigError(f"{what} {item!r} is not accepted; accepted: "
                              f"{', '.join(choices)}{extra}")
    return tuple(dict.fromkeys(items))


def one_choice(value: Any, what: str, choices: tuple[str, ...]) -> str:
    """One name from ``choices`` (not a list: an option the whole grid shares)."""
    names = parse_choices(value, what, choices)
    if len(names) != 1:
        raise ConfigError(f"{what} takes one value, got {', '.join(names)}; accepted: "
                          f"{', '.join(choices)}")
    return names[0]


def parse_sizes(value: Any) -> list[float]:
    """Model sizes: ``7b``, ``1.5t`` and 1-2-5 ranges ``1b..1t``."""
    out: list[float] = []
    for item in split_values(value, "--model-sizes"):
        if ".." in item:
            lo, hi = (read_number(t, "--model-sizes", MODEL_SIZE) for t in item.split("..", 1))
            from fsdpsim.model.ladder import series_125  # (numpy: not at start-up)

            out += series_125(lo, hi)
        else:
            out.append(read_number(item, "--model-sizes", MODEL_SIZE))
    return list(dict.fromkeys(out))


#: The key of :func:`parse_prices` for a price given without a GPU (every GPU's).
EVERY_GPU = "*"


def parse_prices(value: Any, catalog: Catalog) -> dict[str, float]:
    """``--price`` of every command: USD per GPU-hour by accelerator id. Items are
    comma-separated: ``GPU=USD/h`` (``h100=2.5/h``, ``b200=5``) for one GPU, or a price alone
    (``2.5``, ``$2.5/h``: :func:`fsdpsim.drivers.procurement.read_price`) for every GPU without
    its own (key :data:`EVERY_GPU`)."""
    if isinstance(value, Mapping):
        value = [f"{k}={v}" for k, v in value.items()]
    out = {}
    for item in split_values(value, "--price"):
        gpu, sep, price = item.partition("=")
        if not sep:
            if EVERY_GPU in out:
                raise ConfigError(f"--price {item!r}: a price without a GPU is given twice; "
                                  "accepted: one USD/h for every GPU, and GPU=USD/h items")
            out[EVERY_GPU] = read_price(item, "--price")
            continue
        try:
            acc = catalog.accelerator(gpu.strip())
        except ConfigError as exc:
            raise ConfigError(f"--price {item!r}: {exc}") from None
        out[acc.id] = read_price(price, f"--price {gpu.strip()}")
    return out


def price_of(prices: Mapping[str, float], accelerator_id: str) -> float | None:
    """The user's rent per GPU-hour of one accelerator (:func:`parse_prices`), None for the
    catalog's."""
    return prices.get(accelerator_id, prices.get(EVERY_GPU))


def one_price(value: Any, catalog: Catalog, accelerator_id: str) -> float | None:
    """``--price`` of a command that runs on one accelerator (predict, search): its price;
    prices that all name other GPUs are refused (they would be ignored)."""
    if value is None:
        return None
    prices = parse_prices(value, catalog)
    price = price_of(prices, accelerator_id)
    if price is None:
        raise ConfigError(f"--price {value!r} names {', '.join(prices)} only; the run is on "
                          f"{accelerator_id}: give its price, or one for every GPU")
    return price


def knob_counts(value: Any, what: str) -> tuple[int, ...] | None:
    """Counts, or None for ``auto``."""
    items = [v.lower() for v in split_values(value, what)]
    if "auto" in items:
        if len(items) > 1:
            raise ConfigError(f"{what}: 'auto' cannot be combined with other values")
        return None
    return tuple(parse_counts(items, what))


def read_flag(value: Any, what: str) -> bool:
    """A flag given as a bool or spelt in words (:data:`fsdpsim.plan.knob.FLAG_WORDS`)."""
    if isinstance(value, bool):
        return value
    flag = flag_of(str(value))
    if flag is None:
        raise ConfigError(f"{what}: cannot read {value!r} as true or false")
    return flag


def moe_number(value: Any, what: str) -> float | None:
    """One number (a capacity factor, an imbalance) as its knob's declared rule accepts it, or
    None for none/unset."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise ConfigError(f"{what} takes one number, got {value!r}")
        value = value[0]
    return float(read_number(value, what, option_knob(what).rule))


def one_count(value: Any, what: str) -> int:
    """One whole number (not a list) as the option's rule accepts it (:func:`count_rule`: a
    knob's declared rule)."""
    values = parse_counts(value, what)
    if len(values) != 1:
        raise ConfigError(f"{what} takes one whole number, got {value!r}; accepted: "
                          f"{count_rule(what).describe()}")
    return int(values[0])