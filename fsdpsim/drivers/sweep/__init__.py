"""``fsdpsim sweep``: a grid of configurations through the one engine."""
