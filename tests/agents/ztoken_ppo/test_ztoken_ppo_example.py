"""Smoke-run examples/train_ztoken_ppo.py with tiny settings, then resume it."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_ztoken_ppo.py"
TINY_ARGS = ["--ppo.env-kwargs.operand-digits", "1", "--ppo.env-kwargs.num-z-tokens", "4",
             "--ppo.env-kwargs.max-new-tokens", "4", "--warm-start.steps", "3", "--warm-start.z-max", "3",
             "--ppo.episodes-per-rollout", "16", "--ppo.eval-episodes", "16", "--ppo.no-progress"]  # fmt: skip


def _run(monkeypatch, args: list[str]) -> None:
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), *args])
    runpy.run_path(str(EXAMPLE), run_name="__main__")


def test_example_trains_then_resumes(monkeypatch, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    _run(monkeypatch, [*TINY_ARGS, "--output-dir", str(out), "--ppo.num-steps", "1"])
    assert "warm start" in capsys.readouterr().out
    _run(monkeypatch, ["--resume", str(out), "--ppo.num-steps", "2"])
    lines = (out / "ppo" / "metrics.jsonl").read_text().splitlines()
    rollouts = [json.loads(line)["step"] for line in lines]
    assert rollouts == [0, 1, 2]
    assert (out / "warm_start" / "policy.safetensors").is_file()
    assert len((out / "warm_start.jsonl").read_text().splitlines()) == 3
    _run(monkeypatch, ["--resume", str(out), "--ppo.num-steps", "2"])
    assert "already finished" in capsys.readouterr().out
    assert (out / "ppo" / "metrics.jsonl").read_text().splitlines() == lines


def test_example_resume_without_a_run_fails_clearly(monkeypatch, tmp_path) -> None:
    from worldgym.agents.ztoken_ppo import CheckpointError

    with pytest.raises(FileNotFoundError, match="config.json does not exist"):
        _run(monkeypatch, ["--resume", str(tmp_path)])
    (tmp_path / "config.json").write_text(json.dumps({"preset": "tiny", "output_dir": str(tmp_path)}))
    with pytest.raises(CheckpointError, match="is not a ztoken_ppo checkpoint"):  # killed before PPO's first save
        _run(monkeypatch, ["--resume", str(tmp_path)])


def test_example_rejects_a_warm_start_longer_than_the_episode(monkeypatch, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"warm_start.z_max=4 is invalid: use < max_new_tokens=4"):
        _run(monkeypatch, ["--ppo.env-kwargs.max-new-tokens", "4", "--output-dir", str(tmp_path)])
