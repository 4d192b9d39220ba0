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
