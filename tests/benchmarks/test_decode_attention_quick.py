"""``benchmarks/decode_attention.py --quick`` end to end, into ``tmp_path``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.common import absolute_paths
from worldgym.agents.llm.engines.native_kernel import native_kernel

REPO = Path(__file__).resolve().parents[2]

VARIANTS = {"hf_sdpa", "sdpa_gqa", "sdpa_folded", "sdpa_contiguous", "matmul", "matmul_contiguous", "fast", "read",
            "mask_build"}


def run_quick(results: Path) -> dict[str, Any]:
    """``python benchmarks/decode_attention.py --quick --results-dir <results>``; the JSON it wrote."""
    command = [sys.executable, str(REPO / "benchmarks" / "decode_attention.py"), "--quick", "--results-dir",
               str(results)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    data = json.loads((results / "decode_attention.json").read_text())
    assert absolute_paths(data) == []
    return data


def test_decode_attention(tmp_path: Path) -> None:
    data = run_quick(tmp_path)
    assert data["quick"] is True and data["threads"] == 1 and data["torch"] and data["finding"]
    assert [(row["dtype"], row["positions"]) for row in data["layers"]] == [("float32", 64), ("bfloat16", 64)]
    expected = VARIANTS | ({"native"} if native_kernel() is not None else set())  # where the C++ kernel builds
    for row in data["layers"]:
        for masked in ("mask", "nomask"):
            assert set(row[masked]) == expected and all(ms > 0 for ms in row[masked].values())
            tolerance = 1e-5 if row["dtype"] == "float32" else 2e-2
            assert all(diff <= tolerance for diff in row[f"{masked}_max_abs_diff"].values())
    step = data["whole_model_step"]
    assert step["model"] == "tiny"
    for dtype in ("float32", "bfloat16"):
        floor = step[dtype].pop("floor")  # the products and one read of the cache: a positive floor
        assert floor["ms"] > 0 and floor["kv_read_ms"] > 0
        assert set(step[dtype]) - {"native"} == {"sdpa", "fast", "no_attention", "linear_layers"}  # no compiling
        assert all(ms > 0 for figures in step[dtype].values() for ms in figures.values())
        linear = step[dtype]["linear_layers"]
        assert linear["gflops_per_s"] == pytest.approx(linear["gflop"] / linear["ms"] * 1e3, rel=0.05)
        assert step[dtype]["no_attention"]["nomask"] < step[dtype]["sdpa"]["nomask"] * 5  # a floor, not a stall
