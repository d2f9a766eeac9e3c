"""Smoke-run examples/train_grpo.py (SFT warm start + GRPO + curve files) with tiny settings on both envs."""

import json
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_grpo.py"


@pytest.mark.parametrize("env_id", ["MathQA-v0", "CSRPhone-v0"])
def test_example_runs_end_to_end(tmp_path, monkeypatch, env_id):
    if env_id == "CSRPhone-v0":
        pytest.importorskip("worldgym.envs.csr_phone.policies")
    out = tmp_path / "run"
    argv = [
        str(EXAMPLE),
        "--env",
        env_id,
        "--steps",
        "2",
        "--sft-episodes",
        "16",
        "--sft-epochs",
        "1",
        "--prompts-per-step",
        "2",
        "--group-size",
        "2",
        "--eval-every",
        "2",
        "--eval-episodes",
        "2",
        "--max-turns",
        "2",
        "--max-new-tokens",
        "16",
        "--output-dir",
        str(out),
        "--warm-start-dir",
        str(tmp_path / "warm_starts"),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    curve = json.loads((out / "curve.json").read_text())
    assert [step for step, _ in curve["eval_success"]] == [0, 2]
    assert (out / "curve.png").stat().st_size > 0 and (out / "checkpoint-last" / "manifest.json").is_file()
