"""The questions users ask, each over the one engine: predict, sweep, search, compare,
procurement."""
