"""``benchmarks/precision_agents.py --quick``: float32 vs bf16 step times and gaps of both agents, into ``tmp_path``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.common import absolute_paths
from benchmarks.precision_agents import main


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """The script sets one thread itself; the shared fixture restores the count afterwards."""


def test_quick_run_writes_both_agents_side_by_side(tmp_path: Path) -> None:
    report = main(["--quick", "--results-dir", str(tmp_path)])
    data = json.loads((tmp_path / "precision_agents.json").read_text())
    assert absolute_paths(data) == [] and data["quick"] is True and data["torch_threads"] == 1
    assert set(data["ztoken_ppo"]) == {"default"} and set(data["cartridge"]) == {"tiny"}
    for entry in (data["ztoken_ppo"]["default"], data["cartridge"]["tiny"]):
        assert set(entry["median_s"]) == {"float32", "bfloat16"}
        assert all(len(steps) == 2 and min(steps) > 0 for steps in entry["steps_s"].values())
        ratio = entry["float32_over_bfloat16"]["step_s"]
        assert ratio == pytest.approx(entry["median_s"]["float32"]["step_s"] / entry["median_s"]["bfloat16"]["step_s"])
    ppo = data["ztoken_ppo"]["default"]
    assert ppo["losses_finite"] is True
    assert 0 <= ppo["rollout_vs_recomputed_logprob_gap"]["mean"] <= ppo["rollout_vs_recomputed_logprob_gap"]["max"]
    assert 0 < ppo["bf16_vs_float32_logprob_gap"]["max"] < 0.1  # bf16 rounds, but only a little
    cartridge = data["cartridge"]["tiny"]
    assert all(math.isfinite(kl) for kls in cartridge["kl_per_step"].values() for kl in kls)
    assert cartridge["kl_relative_gap_max"] < 0.05
    assert 0 < cartridge["bf16_vs_float32_documents_logprob_gap"]["max"] < 0.1
    assert report["seconds"] < 60
