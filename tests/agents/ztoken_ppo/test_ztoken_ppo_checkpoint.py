"""Z-token PPO checkpoints: damage gives a CheckpointError naming the file; kill -9 mid-save, then resume."""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from worldgym.agents.ztoken_ppo import CheckpointError, save_checkpoint
from worldgym.agents.ztoken_ppo.checkpoint import load_policy, load_training_state
from worldgym.checkpointing import CRASH_ENV

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_ztoken_ppo.py"
TINY_ARGS = ["--ppo.env-kwargs.operand-digits", "1", "--ppo.env-kwargs.num-z-tokens", "4",
             "--ppo.env-kwargs.max-new-tokens", "4", "--warm-start.steps", "3", "--warm-start.z-max", "3",
             "--ppo.episodes-per-rollout", "16", "--ppo.eval-episodes", "16", "--ppo.no-progress"]  # fmt: skip


def _full_checkpoint(path: Path, policy, encoder, num_z_tokens: int) -> Path:
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    policy.lm.get_input_embeddings().weight.sum().backward()
    optimizer.step()
    generator = torch.Generator().manual_seed(0)
    return save_checkpoint(path, policy, encoder, num_z_tokens, optimizer, generator, {"rollout_index": 3})


def _load_everything(path: Path) -> dict:
    policy, _, _ = load_policy(path)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    return load_training_state(path, optimizer, torch.Generator())


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("truncated", "policy.safetensors"),
        ("truncated", "trainer_state.json"),
        ("flipped_byte", "policy.safetensors"),
        ("flipped_byte", "optimizer.safetensors"),
        ("missing", "policy.safetensors"),
        ("missing", "trainer_state.json"),
        ("wrong_version", "manifest.json"),
    ],
)
def test_damaged_checkpoint_names_the_file(tiny_policy, env_kwargs, tmp_path, damage, kind, name) -> None:
    path = _full_checkpoint(tmp_path / "ckpt", *tiny_policy, env_kwargs["num_z_tokens"])
    assert _load_everything(path)["rollout_index"] == 3
    message = damage(path, name, kind)
    with pytest.raises(CheckpointError, match=message):
        _load_everything(path)


def test_checkpoint_without_a_manifest_is_refused(tiny_policy, env_kwargs, tmp_path) -> None:
    path = save_checkpoint(tmp_path / "ckpt", *tiny_policy, env_kwargs["num_z_tokens"])
    (path / "manifest.json").unlink()  # as format 1 checkpoints were
    with pytest.raises(CheckpointError, match="not a checkpoint in worldgym's checksummed format"):
        load_policy(path)


def _run_example(monkeypatch, args: list[str]) -> None:
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), *args])
    runpy.run_path(str(EXAMPLE), run_name="__main__")


@pytest.mark.slow
def test_kill_while_replacing_the_checkpoint_then_resume(monkeypatch, tmp_path) -> None:
    """SIGKILL a real training process between moving its old checkpoint aside and renaming the new one in
    (the window in which it used to have no checkpoint at all); ``--resume`` then continues the run."""
    out = tmp_path / "run"
    _run_example(monkeypatch, [*TINY_ARGS, "--output-dir", str(out), "--ppo.num-steps", "1"])
    env = {**os.environ, CRASH_ENV: "old_moved_aside", "OMP_NUM_THREADS": "1"}
    args = ["--resume", str(out), "--ppo.num-steps", "2"]
    command = [sys.executable, str(EXAMPLE), *args]
    killed = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (out / "ppo" / "checkpoint-last").exists() and (out / "ppo" / "checkpoint-last.old").is_dir()
    _run_example(monkeypatch, args)
    lines = (out / "ppo" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2]
    assert _load_everything(out / "ppo" / "checkpoint-last")["rollout_index"] == 2
    assert sorted(p.name for p in (out / "ppo").iterdir() if p.name.startswith("checkpoint-last")) == [
        "checkpoint-last"
    ]
