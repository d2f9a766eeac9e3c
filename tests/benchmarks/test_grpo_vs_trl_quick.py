"""End-to-end smoke run of ``benchmarks/grpo_vs_trl.py --quick``: worldgym GRPO vs TRL, every setting and mode."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
import torch

from benchmarks.common import absolute_paths

pytest.importorskip(
    "trl", reason="benchmarks/grpo_vs_trl.py compares against TRL, which is not installed: pip install -e '.[bench]'"
)

BENCHMARK = Path(__file__).parents[2] / "benchmarks" / "grpo_vs_trl.py"
COMMITTED = BENCHMARK.parent / "results" / "grpo_vs_trl.json"
TRAINERS = ("worldgym", "worldgym_no_prompt_sharing", "trl")


def test_quick_run_covers_both_settings_and_finetune_modes(tmp_path):
    committed = COMMITTED.read_bytes() if COMMITTED.exists() else None
    threads = torch.get_num_threads()
    try:
        summary = runpy.run_path(str(BENCHMARK))["main"](["--quick", "--results-dir", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)  # the script sets its own thread count

    assert json.loads((tmp_path / "grpo_vs_trl.json").read_text()) == summary
    assert (tmp_path / "grpo_vs_trl.png").stat().st_size > 10_000
    assert (COMMITTED.read_bytes() if COMMITTED.exists() else None) == committed  # results left alone
    assert summary["command"] == "OMP_WAIT_POLICY=PASSIVE python benchmarks/grpo_vs_trl.py --quick"
    assert summary["quick"] is True
    assert absolute_paths(summary) == []
    assert set(summary["settings"]) == {"overhead", "compute"}
    for name, result in summary["settings"].items():
        for mode in ("full", "lora"):
            runs = result[mode]
            assert runs["command"] == (
                f"OMP_WAIT_POLICY=PASSIVE python benchmarks/grpo_vs_trl.py --setting {name} --finetune {mode} --quick"
            )
            for trainer in TRAINERS:
                run = runs[trainer]
                assert run["tokens"] > 0 and run["tokens_per_s"] > 0 and run["tokens_per_cpu_s"] > 0
                assert len(run["reward_curve"]) == result["setting"]["steps"]
                assert 0 <= run["eval_success"] <= 1  # TRL's LoRA model too: the evaluator needs no optimizer
            ratio = runs["worldgym"]["tokens_per_s"] / runs["trl"]["tokens_per_s"]
            assert runs["tokens_per_s_ratio"] == pytest.approx(ratio)
            cpu_ratio = runs["worldgym"]["tokens_per_cpu_s"] / runs["trl"]["tokens_per_cpu_s"]
            assert runs["tokens_per_cpu_s_ratio"] == pytest.approx(cpu_ratio)
            # both sides train the same tensors: every weight (full) or the same LoRA adapters
            trained = {runs[trainer]["trainable_parameters"] for trainer in TRAINERS}
            expected = {result["model_parameters"]} if mode == "full" else trained
            assert trained == expected and len(trained) == 1
        assert result["lora"]["trl"]["trainable_parameters"] < result["model_parameters"]
