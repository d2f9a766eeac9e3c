"""Smoke-run examples/train_ztoken_ppo.py with tiny settings, then resume it."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_ztoken_ppo.py"
TINY_ARGS = ["--operand-digits", "1", "--num-z-tokens", "4", "--max-new-tokens", "4", "--warm-steps", "3",
             "--episodes-per-rollout", "16", "--eval-episodes", "16"]  # fmt: skip


def _run(monkeypatch, args: list[str]) -> None:
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), *args])
    runpy.run_path(str(EXAMPLE), run_name="__main__")


def test_example_trains_then_resumes(monkeypatch, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    _run(monkeypatch, [*TINY_ARGS, "--output-dir", str(out), "--rollouts", "1"])
    assert "warm start" in capsys.readouterr().out
    _run(monkeypatch, [*TINY_ARGS, "--output-dir", str(out), "--rollouts", "2", "--resume"])
    lines = (out / "ppo" / "metrics.jsonl").read_text().splitlines()
    rollouts = [json.loads(line)["rollout"] for line in lines]
    assert rollouts == [0, 1, 2]
    assert (out / "warm_start" / "policy.safetensors").is_file()
    assert len((out / "warm_start.jsonl").read_text().splitlines()) == 3
    _run(monkeypatch, [*TINY_ARGS, "--output-dir", str(out), "--rollouts", "2", "--resume"])
    assert "already finished" in capsys.readouterr().out
    assert (out / "ppo" / "metrics.jsonl").read_text().splitlines() == lines


def test_example_resume_without_a_run_fails_clearly(monkeypatch, tmp_path) -> None:
    from worldgym.agents.ztoken_ppo import CheckpointError

    with pytest.raises(CheckpointError, match="is not a ztoken_ppo checkpoint"):
        _run(monkeypatch, [*TINY_ARGS, "--output-dir", str(tmp_path), "--resume"])
