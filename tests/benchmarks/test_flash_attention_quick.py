"""``benchmarks/flash_attention.py --quick`` end to end, into ``tmp_path``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import absolute_paths
from worldgym.agents.llm.engines.native_kernel import native_kernel

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(native_kernel("flash_attention") is None, reason="the native flash attention cannot be built here")
def test_flash_attention(tmp_path: Path) -> None:
    command = [sys.executable, str(REPO / "benchmarks" / "flash_attention.py"), "--quick", "--results-dir",
               str(tmp_path)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    data = json.loads((tmp_path / "flash_attention.json").read_text())
    assert absolute_paths(data) == [] and data["quick"] is True and data["threads"] == 1
    assert set(data["training"]) == {"96"}
    for kernel in ("sdpa", "native"):
        layer = data["training"]["96"][kernel]
        assert layer["forward_ms"] > 0 and layer["backward_ms"] > 0
        assert data["prefill"][kernel] > 0
        learner = data["learner"][kernel]
        assert learner["seconds"] > 0 and 0 <= learner["gradient_error"] < 0.1  # bf16 against float32
    assert abs(data["learner"]["sdpa"]["loss"] - data["learner"]["native"]["loss"]) < 0.05
