"""``fsdpsim search``: the fastest plan that fits, and the plan in the frameworks' words."""
