"""Shared fixtures. Tests import fsdpsim from the source tree (the repository root)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared"
VALIDATION_CSV = SHARED / "validation" / "published_calibration.csv"
