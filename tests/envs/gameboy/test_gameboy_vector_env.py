"""GameBoy-v0 vector env: registration, spaces, stepping, auto-reset, determinism, torch views, tasks."""

from __future__ import annotations

import os
import re

import gymnasium as gym
import numpy as np
import pytest
import torch

import worldgym  # noqa: F401  (registers GameBoy-v0)
from worldgym.envs.gameboy import homebrew
from worldgym.envs.gameboy.rom_builder import build_rom
from worldgym.envs.gameboy.tasks import ACTIONS, ExitOakTask, SpriteGoalTask, StandingStillTask
from worldgym.envs.gameboy.vector_env import GameBoyEnvConfig, GameBoyVecEnv

POKEMON_ROM = os.environ.get("WORLDGYM_POKEMON_RED_ROM")


def _rollout(env: GameBoyVecEnv, seed: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    observations, rewards = [obs], []
    for _ in range(steps):
        obs, reward, _, _, _ = env.step(rng.integers(0, len(ACTIONS), env.num_envs))
        observations.append(obs)
        rewards.append(reward)
    return np.stack(observations), np.stack(rewards)


def test_make_vec_builds_the_native_vector_env() -> None:
    env = gym.make_vec("GameBoy-v0", num_envs=3)
    assert isinstance(env, GameBoyVecEnv)
    assert env.single_observation_space == gym.spaces.Box(0, 3, (72, 80), np.uint8)
    assert env.action_space == gym.spaces.MultiDiscrete([len(ACTIONS)] * 3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 72, 80) and env.observation_space.contains(obs)
    obs, reward, terminated, truncated, _info = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs)
    assert reward.dtype == np.float32 and terminated.shape == truncated.shape == (3,)
    env.close()


def test_same_seed_gives_same_trajectories_and_different_seeds_differ() -> None:
    first = _rollout(GameBoyVecEnv(num_envs=2), seed=7, steps=6)
    second = _rollout(GameBoyVecEnv(num_envs=2), seed=7, steps=6)
    third = _rollout(GameBoyVecEnv(num_envs=2), seed=8, steps=6)
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])
    assert not np.array_equal(first[0], third[0])


def test_moving_toward_the_goal_is_rewarded_and_reaching_it_terminates() -> None:
    env = GameBoyVecEnv(num_envs=1, task=SpriteGoalTask(randomize_start=False))
    env.reset(seed=0)
    right, down = ACTIONS.index("right"), ACTIONS.index("down")
    _, reward, _, _, _ = env.step(np.array([right]))
    assert reward[0] == pytest.approx(-0.01 + 0.08)
    total_steps, terminated = 1, np.array([False])
    dy = homebrew.GOAL_POSITION[0] - homebrew.START_POSITION[0]
    dx = homebrew.GOAL_POSITION[1] - homebrew.START_POSITION[1] - 8
    plan = [down] * (dy // 8) + [right] * (dx // 8)
    for action in plan:
        _obs, reward, terminated, _truncated, info = env.step(np.array([action]))
        total_steps += 1
        if terminated[0]:
            break
    assert terminated[0] and reward[0] > 9.0
    assert info["_final_obs"][0] and info["final_obs"].shape == (1, 72, 80)
    assert info["_success"][0] and info["success"][0]  # the success contract: goal reached
    assert env._steps[0] == 0  # auto-reset in the same step


def test_truncation_resets_only_finished_envs() -> None:
    env = GameBoyVecEnv(num_envs=2, max_episode_steps=3)
    env.reset(seed=1)
    env._steps[1] = 1  # env 1 is one step further into its episode
    env.step(np.zeros(2, dtype=np.int64))
    _, _, _, truncated, info = env.step(np.zeros(2, dtype=np.int64))
    assert truncated.tolist() == [False, True] and info["_final_obs"].tolist() == [False, True]
    assert info["_success"].tolist() == [False, True] and not info["success"][1]  # truncated: no success
    assert env._steps.tolist() == [2, 0]
    _, _, _, truncated, _ = env.step(np.zeros(2, dtype=np.int64))
    assert truncated.tolist() == [True, False] and env._steps.tolist() == [0, 1]


def test_packed_observations_hold_four_pixels_per_byte() -> None:
    plain = GameBoyVecEnv(num_envs=1)
    packed = GameBoyVecEnv(num_envs=1, packed_obs=True)
    obs, _ = plain.reset(seed=3)
    packed_obs, _ = packed.reset(seed=3)
    assert packed_obs.shape == (1, 72, 20)
    unpacked = np.stack([(packed_obs >> (6 - 2 * k)) & 3 for k in range(4)], axis=-1).reshape(1, 72, 80)
    assert np.array_equal(unpacked, obs)


def test_observation_tensor_is_a_zero_copy_torch_view() -> None:
    env = GameBoyVecEnv(num_envs=2)
    obs, _ = env.reset(seed=0)
    view = env.observation_tensor
    assert isinstance(view, torch.Tensor) and view.shape == (2, 72, 80)
    pointer = view.data_ptr()
    obs, *_ = env.step(np.array([ACTIONS.index("right")] * 2))
    assert view.data_ptr() == pointer and np.array_equal(view.numpy(), obs)


def test_start_savestate_and_full_state_round_trip(tmp_path) -> None:
    env = GameBoyVecEnv(num_envs=2, task=SpriteGoalTask(randomize_start=False))
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.array([ACTIONS.index("down")] * 2))
    start = env.save_start_state(tmp_path / "start.npz")
    resumed = GameBoyVecEnv(num_envs=2, savestate=start, task=SpriteGoalTask(randomize_start=False))
    resumed.reset(seed=0)
    assert resumed.emulator.read(homebrew.PLAYER_Y) == homebrew.START_POSITION[0] + 24
    env.save_state(tmp_path / "full.npz")
    after_save = env.step(np.array([1, 2]))[0]
    env.load_state(tmp_path / "full.npz")
    assert np.array_equal(env.step(np.array([1, 2]))[0], after_save)


def test_gathering_only_task_bytes_gives_the_same_rollout() -> None:
    # The device path copies only task.ram_addresses to the host; exercise it on CPU.
    gathered = GameBoyVecEnv(num_envs=3)
    gathered._gather_task_bytes = True
    reference = _rollout(GameBoyVecEnv(num_envs=3), seed=5, steps=8)
    result = _rollout(gathered, seed=5, steps=8)
    assert np.array_equal(reference[0], result[0]) and np.array_equal(reference[1], result[1])


def test_render_returns_rgb_frames() -> None:
    env = GameBoyVecEnv(num_envs=1, render_mode="rgb_array")
    env.reset(seed=0)
    frames = env.render()
    assert frames.shape == (1, 144, 160, 3) and frames.dtype == np.uint8


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"task": "chess"}, "task='chess' is invalid: use one of"),
        ({"frames_per_step": 0}, "frames_per_step=0 is invalid: use an integer >= 1"),
        ({"press_frames": 30}, "press_frames=30 is invalid: use a number in [0, 24]"),
        ({"task": "exit_oak"}, "pass rom_path"),
    ],
)
def test_config_rejects_bad_settings(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        GameBoyEnvConfig(**settings)


def test_step_rejects_out_of_range_actions() -> None:
    env = GameBoyVecEnv(num_envs=1)
    env.reset(seed=0)
    expected = ("actions must be integers (dtype int64; any integer dtype is accepted) of shape (1,) in "
                f"[0, {len(ACTIONS)})")
    with pytest.raises(ValueError, match=re.escape(expected)):
        env.step(np.array([len(ACTIONS)]))


def test_exit_oak_scores_leaving_the_lab_from_ram() -> None:
    task = ExitOakTask(goal_image=np.zeros((72, 80), dtype=np.uint8))
    memory = np.zeros((2, 0x8000), dtype=np.uint8)
    memory[:, 0xD35E - 0x8000] = 0x28
    observations = np.zeros((2, 72, 80), dtype=np.uint8)
    task.on_reset(memory, np.ones(2, dtype=bool), np.random.default_rng(0))
    memory[1, 0xD35E - 0x8000] = 0x00  # env 1 walks out of the lab
    reward, terminated = task.evaluate(memory, observations)
    assert terminated.tolist() == [False, True]
    assert reward.tolist() == pytest.approx([-0.01, 9.99])


@pytest.mark.skipif(POKEMON_ROM is None, reason="set WORLDGYM_POKEMON_RED_ROM to a Pokémon Red ROM you own")
def test_pokemon_red_tasks_run_on_a_user_supplied_rom() -> None:
    for task in (StandingStillTask(max_steps=4), ExitOakTask(max_steps=4)):
        env = GameBoyVecEnv(num_envs=2, rom_path=POKEMON_ROM, task=task, boot_frames=60)
        env.reset(seed=0)
        for _ in range(4):
            _obs, _reward, terminated, truncated, _ = env.step(np.zeros(2, dtype=np.int64))
        assert truncated.all() or terminated.all()


# ------------------------------------------------------------------ envs are independent of their neighbours

RIGHT, DOWN = ACTIONS.index("right"), ACTIONS.index("down")


def _small_env(num_envs: int, **settings) -> GameBoyVecEnv:
    """Short steps with the button held to the end, so the screen is still changing when a step ends."""
    settings = {"task": SpriteGoalTask(randomize_start=False), "frames_per_step": 4, "press_frames": 4, **settings}
    return GameBoyVecEnv(num_envs=num_envs, **settings)


def _assert_same_emulator(env: GameBoyVecEnv, row: int, other: GameBoyVecEnv, other_row: int) -> None:
    ours, theirs = env.emulator.snapshot(row), other.emulator.snapshot(other_row)
    for name in ours:
        assert np.array_equal(ours[name], theirs[name]), f"emulator array {name!r} differs"


def test_a_sibling_auto_reset_does_not_advance_a_live_env() -> None:
    env = _small_env(2, max_episode_steps=2)
    reference = _small_env(1, max_episode_steps=2)
    env.reset(seed=0)
    reference.reset(seed=0)
    env.step(np.array([RIGHT, RIGHT]))
    reference.step(np.array([RIGHT]))
    env.reset(options={"reset_mask": [False, True]})  # env 1 now finishes one step after env 0
    before = env.emulator.cycles()
    obs, *_, truncated, info = env.step(np.array([RIGHT, RIGHT]))
    reference_obs, *_ = reference.step(np.array([RIGHT]))
    assert truncated.tolist() == [True, False] and info["_final_obs"].tolist() == [True, False]
    live_cycles = env.emulator.cycles()[1] - before[1]
    assert live_cycles == 4 * 70224  # its own 4 frames, not a fifth one for env 0's reset
    _assert_same_emulator(env, 0, reference, 0)
    assert np.array_equal(obs[0], reference_obs[0])


def test_reset_mask_leaves_the_other_envs_untouched() -> None:
    env = _small_env(2)
    env.reset(seed=0)
    obs, *_ = env.step(np.array([RIGHT, DOWN]))
    untouched = env.emulator.snapshot(0)
    reset_obs, _ = env.reset(options={"reset_mask": [False, True]})
    for name, value in env.emulator.snapshot(0).items():
        assert np.array_equal(value, untouched[name]), f"emulator array {name!r} of env 0 changed"
    assert np.array_equal(reset_obs[0], obs[0])
    assert env._steps.tolist() == [1, 0]


def test_an_env_gives_the_same_results_alone_and_beside_envs_with_other_episode_ends() -> None:
    batch = _small_env(3, max_episode_steps=3)
    alone = _small_env(1, max_episode_steps=3)
    batch.reset(seed=0)
    alone.reset(seed=0)
    rng = np.random.default_rng(0)
    for t in range(10):
        if t in (1, 2):  # desynchronise the siblings' episodes: env 1 restarts at t=1, env 2 at t=2
            batch.reset(options={"reset_mask": [False, t == 1, t == 2]})
        actions = rng.integers(0, len(ACTIONS), 3)
        result = batch.step(actions)
        expected = alone.step(actions[:1])
        for got, want in zip(result[:4], expected[:4], strict=True):
            assert np.array_equal(got[0], want[0]), f"step {t}"
        assert ("_final_obs" in expected[4]) == bool(result[4].get("_final_obs", [False])[0])
        if "_final_obs" in expected[4]:
            assert np.array_equal(result[4]["final_obs"][0], expected[4]["final_obs"][0])
        _assert_same_emulator(batch, 0, alone, 0)


# Changes the background shade every frame (BGP += 1 in the VBlank handler), so any extra frame shows.
PALETTE_CYCLER = """
.org $40
    jp vblank
.org $150
main:
    ld a, $01
    ldh ($FF), a
    ei
loop:
    halt
    nop
    jr loop
vblank:
    ldh a, ($47)
    inc a
    ldh ($47), a
    reti
"""


def test_observation_tensor_matches_the_returned_observations_after_an_auto_reset(tmp_path) -> None:
    rom = tmp_path / "cycler.gb"
    rom.write_bytes(build_rom(PALETTE_CYCLER, title="CYCLER"))
    env = GameBoyVecEnv(num_envs=2, rom_path=rom, task="standing_still", frames_per_step=3, press_frames=0,
                        max_episode_steps=2)
    env.reset(seed=0)
    env.step(np.zeros(2, dtype=np.int64))
    env.reset(options={"reset_mask": [False, True]})
    obs, *_, truncated, _ = env.step(np.zeros(2, dtype=np.int64))
    assert truncated.tolist() == [True, False]
    assert np.array_equal(env.observation_tensor.numpy(), obs)


# ------------------------------------------------------------------ save/load and seeding


def test_rewards_after_load_state_match_the_uninterrupted_run(tmp_path) -> None:
    env = _small_env(2, task=SpriteGoalTask(), max_episode_steps=4)  # random starts: the RNG is saved too
    env.reset(seed=3)
    env.step(np.array([RIGHT, DOWN]))
    env.save_state(tmp_path / "state.npz")
    actions = [np.array([RIGHT, DOWN]), np.array([DOWN, RIGHT]), np.array([RIGHT, RIGHT]), np.array([0, DOWN])]
    uninterrupted = [env.step(a)[:4] for a in actions]  # crosses an auto-reset (max_episode_steps=4)
    assert uninterrupted[2][3].all()
    for resumed in (env, _small_env(2, task=SpriteGoalTask(), max_episode_steps=4)):
        resumed.load_state(tmp_path / "state.npz")
        assert np.array_equal(resumed.observation_tensor.numpy(), resumed.emulator.screens()[:, ::2, ::2])
        for action, expected in zip(actions, uninterrupted, strict=True):
            for got, want in zip(resumed.step(action)[:4], expected, strict=True):
                assert np.array_equal(got, want)


def test_exit_oak_task_state_round_trips() -> None:
    task = ExitOakTask(goal_image=np.zeros((72, 80), dtype=np.uint8))
    memory = np.zeros((2, 0x8000), dtype=np.uint8)
    memory[:, 0xD35E - 0x8000] = 0x28
    task.on_reset(memory, np.ones(2, dtype=bool), np.random.default_rng(0))
    task.evaluate(memory, np.full((2, 72, 80), 3, dtype=np.uint8))
    task.on_reset(memory, np.array([False, True]), np.random.default_rng(0))
    copy = ExitOakTask(goal_image=task.goal_image)
    copy.load_state_dict(task.state_dict())
    observations = np.zeros((2, 72, 80), dtype=np.uint8)
    expected, _ = task.evaluate(memory, observations)
    got, _ = copy.evaluate(memory, observations)
    assert got.tolist() == pytest.approx(expected.tolist()) and expected[0] > expected[1]


def test_task_randomness_comes_from_np_random() -> None:
    env = GameBoyVecEnv(num_envs=4)
    env.reset(seed=0)
    state = env.np_random.bit_generator.state
    env.reset()
    starts = env.emulator.machines.mem.numpy()[:, homebrew.PLAYER_Y - 0x8000 : homebrew.PLAYER_X - 0x8000 + 1]
    starts = starts.copy()
    env.np_random.bit_generator.state = state
    env.reset()
    again = env.emulator.machines.mem.numpy()[:, homebrew.PLAYER_Y - 0x8000 : homebrew.PLAYER_X - 0x8000 + 1]
    assert np.array_equal(starts, again)
