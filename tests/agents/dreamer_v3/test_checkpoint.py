"""Dreamer v3 checkpoints: damage raises a CheckpointError naming the file; partial saves are skipped."""

from __future__ import annotations

import shutil

import pytest

from worldgym.agents.dreamer_v3.checkpoint import CheckpointError, load_checkpoint
from worldgym.agents.dreamer_v3.engine.cpu import CPUEngine
from worldgym.checkpointing import latest_checkpoint


@pytest.fixture
def saved(tmp_path, make_config):
    """A fresh CartPole engine and the checkpoint it saved at iteration 0."""
    engine = CPUEngine(make_config(tmp_path))
    return engine.core, engine.core.save()


def _load(core, path) -> dict:
    return load_checkpoint(path, core.learner, core.replay, core.generators)


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("truncated", "model.safetensors"),
        ("truncated", "state.json"),
        ("flipped_byte", "model.safetensors"),
        ("missing", "rng.safetensors"),
        ("wrong_version", "manifest.json"),
    ],
)
def test_damaged_checkpoint_names_the_file(saved, damage, kind, name):
    core, path = saved
    assert _load(core, path)["iter_num"] == 0
    message = damage(path, name, kind)
    with pytest.raises(CheckpointError, match=message):
        _load(core, path)


def test_latest_checkpoint_skips_partial_saves_and_finds_an_interrupted_replacement(saved):
    core, path = saved
    assert path == core.run_dir / "checkpoint-0"
    shutil.copytree(path, core.run_dir / "checkpoint-7.tmp")  # a save killed before its rename
    shutil.copytree(path, core.run_dir / "checkpoint-9")
    (core.run_dir / "checkpoint-9" / "manifest.json").unlink()  # not written last by a save: incomplete
    with pytest.warns(UserWarning, match="checkpoint-9 is not a complete checkpoint"):
        assert latest_checkpoint(core.run_dir) == path
    shutil.rmtree(core.run_dir / "checkpoint-9")
    path.rename(core.run_dir / "checkpoint-0.old")  # killed between moving it aside and renaming the new one in
    assert latest_checkpoint(core.run_dir) == core.run_dir / "checkpoint-0.old"
    assert _load(core, latest_checkpoint(core.run_dir))["iter_num"] == 0


def test_game_boy_checkpoints_hold_the_env_state_and_cartpole_ones_do_not(tmp_path, make_config, damage):
    """A run on an env with save states checkpoints it (checked like every file); CartPole's resets instead."""
    from worldgym.agents.dreamer_v3.gameboy import gameboy_config, make_gameboy_env

    cartpole = CPUEngine(make_config(tmp_path / "cartpole", num_steps=8, checkpoint_every=8))
    cartpole.run(progress=False)
    assert not (latest_checkpoint(cartpole.core.run_dir) / "env_state.npz").exists()
    env, transform = make_gameboy_env(2, max_episode_steps=5)
    settings = {k: v for k, v in make_config(tmp_path).__dict__.items() if k not in ("env_id", "obs_kind")}
    config = gameboy_config(**settings | {"num_steps": 8, "checkpoint_every": 8})
    engine = CPUEngine(config, env=env, obs_transform=transform)
    engine.run(progress=False)
    path = latest_checkpoint(engine.core.run_dir)
    assert {"env_state.npz", "actor.safetensors"} <= {p.name for p in path.iterdir()}
    message = damage(path, "env_state.npz", "flipped_byte")
    with pytest.raises(CheckpointError, match=message):
        engine.core.resume(path)
