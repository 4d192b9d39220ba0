"""The one error type users see.

Every problem with user input (an unknown catalog id, a malformed catalog file, a plan whose
degrees do not divide the GPU count, a dtype the GPU lacks) raises :class:`ConfigError` with a
message that names the offending value, where it came from and what is accepted. The CLI turns
it into one line on stderr and exit status 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """Bad user input: the message names the value, its origin and what is accepted."""


#: Longest text quoted in a message; a longer value is cut and its length given.
SHOWN_CHARS = 60
#: The same for file and folder names (PATH_MAX is 4,096 bytes on Linux).
SHOWN_PATH_CHARS = 1024


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``value`` for a one-line message: ``repr``, long text cut (``'aaa…' (300 characters)``),
    huge integers by their digit count."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        digits = int(abs(value).bit_length() * 0.30103) + 1  # str() refuses > 4,300 digits
        return f"an integer of about {digits:,} digits"
    text = repr(value)
    if len(text) > limit:
        length = len(value) if isinstance(value, str) else len(text)
        text = f"{text[:limit - 10]}…{text[-5:]} ({length:,} characters)"
    return text


def suggest(name: str, choices: Iterable[str], n: int = 3) -> str:
    """Return ``" (did you mean: a, b?)"`` for the closest ``choices`` to ``name``, or ``""``."""
    choices = list(choices)
    close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=n, cutoff=0.5)
    # Keep the original spelling of the matches.
    by_lower = {c.lower(): c for c in choices}
    close = [by_lower[c] for c in close]
    if not close:
        # Substring matches help with short aliases such as "h100" -> "h100-sxm5-80gb".
        close = [c for c in choices if name.lower() in c.lower()][:n]
    return f" (did you mean: {', '.join(close)}?)" if close else ""
