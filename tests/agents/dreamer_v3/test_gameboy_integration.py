"""Dreamer v3 on GameBoy-v0: packed frames stored as-is, SAME_STEP resets, training, StandingStill."""

from __future__ import annotations

import json
import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from worldgym.agents.dreamer_v3 import (
    SMALL_CONTROL_MODEL,
    SMALL_CONTROL_OPTIM,
    CPUEngine,
    DreamerConfig,
    LossConfig,
    OptimConfig,
    ReplayConfig,
    ScheduleConfig,
    model_size,
)
from worldgym.agents.dreamer_v3.engine.rollout import EnvRunner
from worldgym.agents.dreamer_v3.gameboy import FixedAction, gameboy_config, make_gameboy_env
from worldgym.agents.dreamer_v3.pixels import PackedFrames, unpack_2bit

# Same shared Warp kernel cache as the Game Boy env tests (a cold kernel build takes seconds).
os.environ.setdefault("WORLDGYM_WARP_CACHE", str(Path.home() / ".cache" / "worldgym" / "warp"))
POKEMON_ROM = os.environ.get("WORLDGYM_POKEMON_RED_ROM")


def tiny_gameboy_config(root: Path, **overrides) -> DreamerConfig:
    """Two emulators, tiny networks, short sequences: a few gradient steps in seconds on one core."""
    base = dict(
        num_envs=2,
        num_steps=64,
        seed=1,
        model=model_size("tiny"),
        replay=ReplayConfig(
            capacity=128, seq_len=8, batch_size=4, min_ready_steps=8, safety_margin=8, commit_stride=4
        ),
        schedule=ScheduleConfig(replay_ratio=0.5, learning_starts=16, pretrain_steps=1, rollout_window=4),
        loss=LossConfig(horizon=4),
        optim=OptimConfig(world_learning_rate=1e-3),
        log_every=16,
        output_dir=str(root / "run"),
    )
    return gameboy_config(**(base | overrides))


def observation_losses(run_dir: str) -> list[float]:
    records = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [r["loss/world_observation_loss"] for r in records if r.get("loss/world_observation_loss")]


def test_env_packed_frames_use_the_replay_bit_order() -> None:
    """GameBoy-v0's packed bytes unpack (Dreamer's order) to exactly its unpacked shades: no re-packing."""
    packed_env, transform = make_gameboy_env(2, max_episode_steps=5)
    shades_env = gym.make_vec("GameBoy-v0", num_envs=2, max_episode_steps=5)
    packed, _ = packed_env.reset(seed=4)
    shades, _ = shades_env.reset(seed=4)
    for step in range(7):
        assert torch.equal(unpack_2bit(transform(packed))[:, 0], torch.from_numpy(shades))
        assert torch.equal(transform.read_view(), transform(packed))  # device buffer == host copy
        actions = np.array([step % 9, 8 - step % 9])
        packed, *_ = packed_env.step(actions)
        shades, *_ = shades_env.step(actions)
    assert int(unpack_2bit(transform(packed)).max()) == 3


class Countdown(gym.Env):
    """obs = steps taken; reward 1 per step and 10 on termination after ``length`` steps."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int) -> None:
        self.length = length

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        return np.array([self.t], np.float32), 10.0 if done else 1.0, done, False, {}


def test_same_step_runner_stores_final_obs_then_starts_the_next_episode() -> None:
    env = gym.vector.SyncVectorEnv(
        [lambda: Countdown(3), lambda: Countdown(5)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    runner = EnvRunner(env)
    runner.reset(seed=0)
    rows, returns = [], []
    for _ in range(8):
        rows.append(runner.row(torch.zeros(2, dtype=torch.int64)))
        returns += runner.step(torch.zeros(2, dtype=torch.int64)).returns
    env0 = [(r["obs"][0, 0].item(), r["reward"][0].item(), r["cont"][0].item(), r["is_first"][0].item(),
             r["episode_id"][0].item()) for r in rows]  # fmt: skip
    # obs 3 is the final obs (terminal reward, cont 0); the next episode's first stored obs is 1
    assert env0 == [
        (0, 0, 1, 1, 0), (1, 1, 1, 0, 0), (2, 1, 1, 0, 0), (3, 10, 0, 0, 0),
        (1, 0, 1, 1, 2), (2, 1, 1, 0, 2), (3, 10, 0, 0, 2), (1, 0, 1, 1, 4),
    ]  # fmt: skip
    assert returns[:2] == [12.0, 14.0]


def test_cpu_engine_trains_on_gameboy_homebrew(tmp_path: Path) -> None:
    env, transform = make_gameboy_env(2, task="sprite_goal", max_episode_steps=12)
    cfg = tiny_gameboy_config(tmp_path)
    engine = CPUEngine(cfg, env=env, obs_transform=transform)
    assert engine.core.runner.action_dim == 9
    params_before = [p.detach().clone() for p in engine.core.learner.parameters()]
    record = engine.run(progress=False)
    assert record["gradient_steps"] >= 5
    losses = {k: v for k, v in record.items() if k.startswith("loss/")}
    assert losses and all(np.isfinite(v) for v in losses.values())
    changed = [not torch.equal(a, b) for a, b in zip(params_before, engine.core.learner.parameters())]
    assert sum(changed) > len(changed) // 2
    replay = engine.core.replay
    assert replay.storage["obs"].shape == (128, 2, 1, 72, 20) and replay.storage["obs"].dtype == torch.uint8
    committed = slice(0, replay.committed_t)
    # 12-step episodes: row 12 holds the final obs, the env reset inside that step, row 13 starts anew
    assert replay.storage["is_first"][committed, 0].nonzero().flatten().tolist() == [0, 13, 25]
    assert replay.storage["episode_id"][committed, 0].unique().tolist() == [0, 2, 4]
    assert int(unpack_2bit(replay.storage["obs"][committed]).max()) == 3


def test_device_buffer_reads_match_host_copies(tmp_path: Path) -> None:
    """Frames read from the env's zero-copy buffer fill the replay exactly like the host observations."""
    storages = []
    for read_buffer in (True, False):
        env, transform = make_gameboy_env(2, max_episode_steps=6, read_device_buffer=read_buffer)
        assert (transform.view is not None) == read_buffer
        no_training = ScheduleConfig(learning_starts=64, rollout_window=4)
        cfg = tiny_gameboy_config(tmp_path / str(read_buffer), num_steps=40, schedule=no_training)
        engine = CPUEngine(cfg, env=env, obs_transform=transform)
        engine.run(progress=False)
        storages.append(engine.core.replay.storage)
    for name in storages[0]:
        assert torch.equal(storages[0][name], storages[1][name]), name


def test_fixed_action_wrapper_and_rom_checks() -> None:
    env, _ = make_gameboy_env(1)
    with pytest.raises(ValueError, match="action=9 is invalid"):
        FixedAction(env, 9)
    with pytest.raises(ValueError, match="needs rom_path"):
        make_gameboy_env(1, task="standing_still")
    with pytest.raises(ValueError, match="task='tetris' is invalid"):
        make_gameboy_env(1, task="tetris")
    with pytest.raises(ValueError, match="needs packed uint8 frames|expected packed uint8"):
        PackedFrames()(np.zeros((1, 72, 80), np.float32))


@pytest.fixture
def example(load_example):
    return load_example("train_dreamer")


def test_example_config_uses_the_benchmarked_setting_by_default_and_the_paper_for_xs(example) -> None:
    from worldgym.cli import parse_run

    small = parse_run(example.PRESETS, ["cartpole"]).run.resolved_config()
    xs = parse_run(example.PRESETS, ["cartpole", "--size", "XS"]).run.resolved_config()
    assert (small.model, small.optim) == (SMALL_CONTROL_MODEL, SMALL_CONTROL_OPTIM)
    assert (xs.model, xs.optim) == (model_size("XS"), OptimConfig())


STANDING_STILL_ARGS = [
    "gameboy-standing-still", "--dreamer.num-steps", "160", "--dreamer.num-envs", "2",
    "--dreamer.schedule.learning-starts", "32", "--dreamer.schedule.replay-ratio", "0.5",
    "--dreamer.replay.batch-size", "4", "--dreamer.replay.seq-len", "8", "--dreamer.replay.min-ready-steps", "8",
    "--dreamer.replay.safety-margin", "8", "--dreamer.replay.capacity", "256", "--dreamer.log-every", "16",
    "--dreamer.checkpoint-every", "0", "--dreamer.eval-episodes", "1", "--gameboy.max-episode-steps", "32",
    "--dreamer.no-progress",
]  # fmt: skip


def test_standing_still_homebrew_reconstruction_loss_falls(example, tmp_path: Path) -> None:
    """Constant no-op on the homebrew ROM: only the world model learns, and its observation loss falls."""
    run_dir = tmp_path / "still"
    result = example.main([*STANDING_STILL_ARGS, "--dreamer.output-dir", str(run_dir)])
    assert json.loads((run_dir / "config.json").read_text())["gameboy"]["fixed_action"] == 0
    losses = observation_losses(str(run_dir))
    assert result["train"]["gradient_steps"] >= 50 and len(losses) >= 5
    assert all(np.isfinite(losses)) and losses[-1] < 0.5 * losses[0]
    assert result["observation_loss"] == (losses[0], losses[-1])


@pytest.mark.skipif(POKEMON_ROM is None, reason="set WORLDGYM_POKEMON_RED_ROM to a Pokémon Red ROM you own")
def test_pokemon_standing_still_reconstruction_loss_falls(example, tmp_path: Path) -> None:
    run_dir = tmp_path / "pokemon"
    args = [*STANDING_STILL_ARGS, "--gameboy.task", "standing_still", "--gameboy.rom", POKEMON_ROM,
            "--dreamer.output-dir", str(run_dir)]
    example.main(args)
    losses = observation_losses(str(run_dir))
    assert all(np.isfinite(losses)) and losses[-1] < 0.5 * losses[0]


@pytest.mark.gpu(warp=True)  # the CPU path is tested above
def test_cuda_env_writes_frames_to_a_device_replay(tmp_path: Path) -> None:
    env, transform = make_gameboy_env(4, device="cuda", max_episode_steps=10)
    assert transform.view is not None and transform.view.is_cuda
    cfg = tiny_gameboy_config(tmp_path, num_envs=4, device="cuda", num_steps=128)
    engine = CPUEngine(cfg, env=env, obs_transform=transform)
    record = engine.run(progress=False)
    replay = engine.core.replay
    assert replay.storage["obs"].is_cuda and record["gradient_steps"] > 0
    assert np.isfinite(record["loss/world_observation_loss"])
    committed = replay.storage["obs"][: replay.committed_t]
    assert int(unpack_2bit(committed).max()) == 3
