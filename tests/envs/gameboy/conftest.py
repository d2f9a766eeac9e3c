"""Shared fixtures for the Game Boy tests: a per-session Warp kernel cache directory and a repro dir."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Tests share one kernel cache (a cold compile takes seconds); CI may point it elsewhere or start empty.
os.environ.setdefault("WORLDGYM_WARP_CACHE", str(Path.home() / ".cache" / "worldgym" / "warp"))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Helper modules (program generators) live beside the tests; pytest runs with --import-mode=importlib.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def repro_dir(tmp_path: Path) -> Path:
    """Where lockstep mismatches write their repro bundles."""
    return tmp_path
