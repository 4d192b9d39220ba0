"""``python -m fsdpsim.cli``: the command line."""

import sys

from fsdpsim.cli import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
