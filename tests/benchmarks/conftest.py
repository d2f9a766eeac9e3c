"""The benchmark tests import the repository's ``benchmarks`` package (not installed: it lives beside ``tests``)."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
