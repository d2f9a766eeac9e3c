"""GameBoy-v0 as a single env (``gym.make``): check_env, same trajectory as a 1-emulator vector env, no auto-reset."""

from __future__ import annotations

import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

import worldgym  # noqa: F401  (registers GameBoy-v0)
from worldgym.envs.gameboy import homebrew
from worldgym.envs.gameboy.single_env import GameBoyEnv
from worldgym.envs.gameboy.tasks import ACTIONS, SpriteGoalTask
from worldgym.envs.gameboy.vector_env import GameBoyVecEnv

RIGHT, DOWN = ACTIONS.index("right"), ACTIONS.index("down")


def _goal_plan() -> list[int]:
    """Moves that take the non-randomized block onto the ring (as in the vector env's goal test)."""
    dy = homebrew.GOAL_POSITION[0] - homebrew.START_POSITION[0]
    dx = homebrew.GOAL_POSITION[1] - homebrew.START_POSITION[1]
    return [DOWN] * (dy // 8) + [RIGHT] * (dx // 8 + 1)


def test_make_builds_the_single_env_and_make_vec_the_batched_one() -> None:
    env = gym.make("GameBoy-v0", max_episode_steps=16)
    vector_env = gym.make_vec("GameBoy-v0", num_envs=3, max_episode_steps=16)
    assert isinstance(env.unwrapped, GameBoyEnv) and isinstance(vector_env, GameBoyVecEnv)
    assert vector_env.num_envs == 3 and env.unwrapped.vector_env.num_envs == 1
    assert (
        env.observation_space
        == vector_env.single_observation_space
        == gym.spaces.Box(0, 3, (72, 80), np.uint8)
    )
    assert env.action_space == vector_env.single_action_space == gym.spaces.Discrete(len(ACTIONS))
    packed = gym.make("GameBoy-v0", packed_obs=True)
    assert packed.observation_space == gym.spaces.Box(0, 255, (72, 20), np.uint8)
    for each in (env, vector_env, packed):
        each.close()


def test_passes_gymnasium_check_env_with_rendering() -> None:
    env = gym.make("GameBoy-v0", render_mode="rgb_array")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # check_env's warnings count as failures too
        check_env(env.unwrapped)
    env.close()


def test_follows_the_trajectory_of_a_one_emulator_vector_env() -> None:
    env = GameBoyEnv(max_episode_steps=5)
    vector_env = GameBoyVecEnv(num_envs=1, max_episode_steps=5)
    obs, _ = env.reset(seed=11)
    vector_obs, _ = vector_env.reset(seed=11)
    assert np.array_equal(obs, vector_obs[0])
    actions = np.random.default_rng(0).integers(0, len(ACTIONS), 5)
    for step, action in enumerate(actions):
        obs, reward, terminated, truncated, info = env.step(int(action))
        vector_obs, vector_reward, _, vector_truncated, vector_info = vector_env.step(np.array([action]))
        assert reward == vector_reward[0] and isinstance(reward, float) and not terminated
        assert truncated == vector_truncated[0] == (step == 4)
        expected = vector_info["final_obs"][0] if truncated else vector_obs[0]
        assert np.array_equal(obs, expected) and info == {"success": False}
    assert not np.array_equal(obs, vector_obs[0])  # the vector env already shows the next start; this env not


def test_never_resets_by_itself_and_reports_success_on_the_goal_step() -> None:
    env = gym.make("GameBoy-v0", task=SpriteGoalTask(randomize_start=False), render_mode="rgb_array")
    env.reset(seed=0)
    for action in _goal_plan():
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated:
            break
    assert terminated and not truncated and reward > 9.0 and info == {"success": True}
    frame = env.render()
    assert frame.shape == (144, 160, 3)
    assert np.array_equal(frame[::2, ::2, 0], np.array([255, 170, 85, 0], np.uint8)[obs])  # the final screen
    with pytest.raises(ResetNeeded, match="needs reset"):
        env.step(RIGHT)
    obs, _ = env.reset()
    assert obs.shape == (72, 80) and env.step(RIGHT)[4] == {"success": False}


def test_reset_needed_before_the_first_step_and_bad_input_is_rejected_unchanged() -> None:
    env = GameBoyEnv()
    with pytest.raises(ResetNeeded):
        env.step(0)
    env.reset(seed=3)
    expected = env.step(RIGHT)[0]
    env.reset(seed=3)
    with pytest.raises(TypeError, match=re.escape("action must be integers")):
        env.step(1.0)
    with pytest.raises(ValueError, match=re.escape(f"in [0, {len(ACTIONS)})")):
        env.step(len(ACTIONS))
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.array([True])})
    with pytest.raises(ValueError, match="render_mode"):
        GameBoyEnv(render_mode="human")
    assert np.array_equal(env.step(np.int8(RIGHT))[0], expected)  # any integer dtype; nothing had changed
    assert env.render() is None
