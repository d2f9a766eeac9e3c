"""SB3VecEnv: Gymnasium vector envs as Stable-Baselines3 VecEnvs, step for step like SB3's DummyVecEnv, and
SB3 PPO training on GameBoy-v0 (CnnPolicy) and ZTokenDigits-v1 (MlpPolicy)."""

from __future__ import annotations

import importlib
import os
import re
import sys
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("WORLDGYM_WARP_CACHE", str(Path.home() / ".cache" / "worldgym" / "warp"))

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import TimeLimit
from gymnasium.wrappers.vector import RecordEpisodeStatistics
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

import worldgym  # registers the ids
from worldgym.envs.gameboy.vector_env import GameBoyVecEnv
from worldgym.envs.ztoken import ArithmeticProblem, FlattenTokenDigitsAction
from worldgym.wrappers import SB3VecEnv
from worldgym.wrappers.sb3 import unbatch_info

CARTPOLE_LIMITS = (4, 7, 60)  # truncation in two envs, termination (the pole falls) in the third
ZTOKEN = {"num_z_tokens": 4, "max_new_tokens": 3}


def _cartpoles() -> list:
    return [partial(gym.make, "CartPole-v1", max_episode_steps=limit) for limit in CARTPOLE_LIMITS]


def _ztokens(count: int) -> list:
    return [lambda: FlattenTokenDigitsAction(gym.make("ZTokenDigits-v1", **ZTOKEN))] * count


def _same(a: Any, b: Any) -> bool:
    """Equal values, numpy arrays and containers of them included."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return type(a) is type(b) and a == b


# ------------------------------------------------------------------------------------ info conversion


def test_unbatch_info_honours_masks_and_nested_dicts() -> None:
    info = {
        "x": np.array([1, 2, 3]),
        "_x": np.array([True, False, True]),
        "all": np.array([7, 8, 9]),
        "final": {"y": np.array(["a", "b", "c"], dtype=object), "_y": np.array([False, True, False])},
        "_final": np.array([False, True, False]),
        "final_obs": np.zeros(3),
        "_final_obs": np.ones(3, bool),
    }
    per_env = unbatch_info(info, 3)
    assert per_env == [{"x": 1, "all": 7}, {"all": 8, "final": {"y": "b"}}, {"x": 3, "all": 9}]
    assert type(per_env[0]["x"]) is int  # numpy scalars become Python ones


@pytest.mark.parametrize("mode", list(AutoresetMode))
@pytest.mark.parametrize("envs", ["cartpole", "ztoken"])
def test_matches_sb3_dummy_vec_env_step_for_step(mode: AutoresetMode, envs: str) -> None:
    """Observations, rewards, dones, infos (terminal_observation, TimeLimit.truncated, masked keys) and
    reset_infos equal those of SB3's own DummyVecEnv over the same sub-envs, in every autoreset mode."""
    make = _cartpoles() if envs == "cartpole" else _ztokens(3)
    ours, reference = SB3VecEnv(SyncVectorEnv(make, autoreset_mode=mode)), DummyVecEnv(make)
    ours.seed(5)
    reference.seed(5)
    assert np.array_equal(ours.reset(), reference.reset()) and _same(ours.reset_infos, reference.reset_infos)
    ours.action_space.seed(0)
    terminations = truncations = 0
    for _ in range(40):
        actions = np.stack([ours.action_space.sample() for _ in range(3)])
        observations, rewards, dones, infos = ours.step(actions)
        expected = reference.step(actions)
        assert np.array_equal(observations, expected[0]) and rewards.dtype == np.float32
        assert np.array_equal(rewards, expected[1]) and np.array_equal(dones, expected[2])
        assert _same(infos, expected[3]) and _same(ours.reset_infos, reference.reset_infos)
        for done, info in zip(dones, infos, strict=True):
            assert ("terminal_observation" in info) == done
            truncations += info["TimeLimit.truncated"]
            terminations += done and not info["TimeLimit.truncated"]
    assert truncations > 0 and terminations > 0


def test_vector_episode_statistics_feed_sb3_episode_infos() -> None:
    ours = SB3VecEnv(
        RecordEpisodeStatistics(SyncVectorEnv(_cartpoles(), autoreset_mode=AutoresetMode.SAME_STEP))
    )
    reference = DummyVecEnv([lambda make=make: Monitor(make()) for make in _cartpoles()])
    ours.seed(1)
    reference.seed(1)
    ours.reset()
    reference.reset()
    episodes = 0
    for step in range(30):
        actions = np.array([step % 2] * 3)
        _, _, dones, infos = ours.step(actions)
        expected = reference.step(actions)[3]
        for done, info, reference_info in zip(dones, infos, expected, strict=True):
            assert ("episode" in info) == done
            if done:
                episodes += 1
                assert info["episode"]["r"] == reference_info["episode"]["r"]
                assert info["episode"]["l"] == reference_info["episode"]["l"]
    assert episodes >= 3
    with pytest.warns(UserWarning, match="RecordEpisodeStatistics on a NEXT_STEP vector env"):
        SB3VecEnv(RecordEpisodeStatistics(SyncVectorEnv(_cartpoles())))


def test_seed_options_and_bad_arguments() -> None:
    env = SB3VecEnv(SyncVectorEnv(_ztokens(2)))
    env.set_options({"problem": ArithmeticProblem(12, 34, "*")})
    env.reset()
    assert [info["question"] for info in env.reset_infos] == ["12*34="] * 2
    with pytest.raises(ValueError, match="one options dict for all envs"):
        env.set_options([{}, {"problem": ArithmeticProblem(1, 2, "+")}])
    assert env._options == [{}, {}]  # the rejected options are not used at the next reset
    env.seed(3)
    first = env.reset()
    env._seeds = [3, 4]  # what seed(3) set, given as a list
    assert np.array_equal(env.reset(), first)
    env._seeds = [4, 3]  # not consecutive: passed on as a list
    assert np.array_equal(env.reset(), first[::-1])
    with pytest.raises(TypeError, match="needs a gymnasium.vector.VectorEnv, got CartPoleEnv"):
        SB3VecEnv(gym.make("CartPole-v1").unwrapped)
    bogus = SyncVectorEnv(_cartpoles())
    bogus.metadata["autoreset_mode"] = "Bogus"
    with pytest.raises(ValueError, match=re.escape("unknown autoreset_mode 'Bogus'")):
        SB3VecEnv(bogus)
    with pytest.raises(RuntimeError, match="needs step_async"):
        env.step_wait()


def test_import_without_stable_baselines3_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in sys.modules if name.split(".")[0] == "stable_baselines3"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "worldgym.wrappers.sb3")
    message = re.escape(
        "needs stable-baselines3: `pip install stable-baselines3` (or install worldgym with the `dev`"
    )
    with pytest.raises(ImportError, match=message):
        importlib.import_module("worldgym.wrappers.sb3")
    with pytest.raises(ImportError, match=message):
        worldgym.wrappers.SB3VecEnv  # noqa: B018


# ------------------------------------------------------------------------------------ sub-env access


def test_sub_env_access_on_a_sync_vector_env() -> None:
    env = SB3VecEnv(SyncVectorEnv(_cartpoles()))
    assert env.get_attr("render_mode") == [None] * 3 and env.render_mode is None
    assert [spec.max_episode_steps for spec in env.get_attr("spec", indices=[2, 0])] == [60, 4]
    env.set_attr("note", "x", indices=[0, 2])
    assert env.get_attr("note", indices=[0, 2]) == ["x", "x"]
    with pytest.raises(AttributeError):
        env.get_attr("note", indices=1)
    assert env.env_method("get_wrapper_attr", "gravity", indices=[1]) == [9.8]
    assert env.env_is_wrapped(TimeLimit) == [True] * 3 and env.env_is_wrapped(Monitor, indices=[0]) == [False]
    env.close()
    assert env.env.closed


def test_sub_env_access_on_an_async_vector_env() -> None:
    env = SB3VecEnv(AsyncVectorEnv(_cartpoles()[:2]))
    try:
        assert [spec.max_episode_steps for spec in env.get_attr("spec", indices=[1])] == [7]
        env.set_attr("note", "y")
        assert env.get_attr("note") == ["y", "y"]
        with pytest.raises(
            ValueError, match=re.escape("set_attr on AsyncVectorEnv acts on all envs at once")
        ):
            env.set_attr("note", "z", indices=[0])
        assert env.env_method("get_wrapper_attr", "gravity") == [9.8, 9.8]
        with pytest.raises(NotImplementedError, match="VecMonitor"):
            env.env_is_wrapped(Monitor)
    finally:
        env.close()


def test_sub_env_access_on_the_batched_gameboy_env(tmp_path: Path) -> None:
    vector_env = gym.make_vec("GameBoy-v0", num_envs=2)
    env = SB3VecEnv(RecordEpisodeStatistics(vector_env))
    assert env.get_attr("max_episode_steps") == [128, 128] and env.get_attr("num_envs", indices=1) == [2]
    with pytest.raises(AttributeError, match="GameBoyVecEnv has no attribute 'nope'"):
        env.get_attr("nope")
    with pytest.raises(ValueError, match=re.escape("set_attr on GameBoyVecEnv acts on all envs at once")):
        env.set_attr("max_episode_steps", 5, indices=[0])
    env.set_attr("max_episode_steps", 5)
    assert vector_env.max_episode_steps == 5
    assert env.env_method("save_start_state", tmp_path / "start.npz") == [tmp_path / "start.npz"] * 2
    assert env.env_is_wrapped(Monitor) == [False, False]
    assert env.env_is_wrapped(RecordEpisodeStatistics, indices=[1]) == [True]
    rendered = SB3VecEnv(gym.make_vec("GameBoy-v0", num_envs=2, render_mode="rgb_array"))
    rendered.reset()
    frames = rendered.get_images()
    assert len(frames) == 2 and frames[1].shape == (144, 160, 3)
    assert rendered.render().shape == (288, 160, 3)  # SB3 tiles the frames


# ------------------------------------------------------------------------------------ CNN images


class _ColourImages(gym.Env):
    """Random (H, W, C) colour images with per-channel bounds."""

    observation_space = gym.spaces.Box(np.zeros((6, 5, 3), np.uint8), np.array([255, 15, 255] * 30, np.uint8)
                                       .reshape(6, 5, 3), dtype=np.uint8)  # fmt: skip
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self._image(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        return self._image(), 0.0, True, False, {}

    def _image(self) -> np.ndarray:
        high = self.observation_space.high.astype(np.int64) + 1
        return self.np_random.integers(0, high, dtype=np.int64).astype(np.uint8)


def test_cnn_images_are_channel_first_uint8_over_the_full_range() -> None:
    raw = GameBoyVecEnv(num_envs=2, max_episode_steps=2)
    env = SB3VecEnv(GameBoyVecEnv(num_envs=2, max_episode_steps=2), cnn_images=True)
    assert env.observation_space == gym.spaces.Box(0, 255, (1, 72, 80), np.uint8)
    raw_obs, _ = raw.reset(seed=4)
    env.seed(4)
    assert np.array_equal(env.reset(), raw_obs[:, None] * 85)
    for _ in range(2):
        raw_obs, _, _, _, raw_info = raw.step(np.array([8, 5]))
        observations, _, dones, infos = env.step(np.array([8, 5]))
        assert np.array_equal(observations, raw_obs[:, None] * 85) and observations.dtype == np.uint8
    assert dones.all() and all(info["TimeLimit.truncated"] for info in infos)
    for index, info in enumerate(infos):
        assert info["terminal_observation"].shape == (1, 72, 80)
        assert np.array_equal(info["terminal_observation"][0], raw_info["final_obs"][index] * 85)

    colour = SB3VecEnv(SyncVectorEnv([_ColourImages] * 2), cnn_images=True)
    assert colour.observation_space.shape == (3, 6, 5)
    colour.seed(0)
    images = colour.reset()
    reference = SyncVectorEnv([_ColourImages] * 2).reset(seed=0)[0]
    assert np.array_equal(images[:, 0], reference[..., 0]) and np.array_equal(images[:, 2], reference[..., 2])
    assert np.array_equal(images[:, 1], reference[..., 1].astype(np.int32) * 17)  # 0..15 stretched
    with pytest.raises(TypeError, match=re.escape("cnn_images=True needs a uint8 Box observation")):
        SB3VecEnv(SyncVectorEnv(_cartpoles()), cnn_images=True)


# ------------------------------------------------------------------------------------ SB3 training


class _Episodes(BaseCallback):
    """Counts steps and collects the terminal observations SB3 sees during rollouts."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0
        self.terminal: list[np.ndarray] = []

    def _on_step(self) -> bool:
        self.steps += self.training_env.num_envs
        for done, info in zip(self.locals["dones"], self.locals["infos"], strict=True):
            if done:
                self.terminal.append(info["terminal_observation"])
        return True


def _parameters(model: PPO) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.policy.parameters()])


def test_ppo_cnn_policy_trains_on_the_batched_gameboy_env() -> None:
    torch.set_num_threads(1)
    env = SB3VecEnv(gym.make_vec("GameBoy-v0", num_envs=4), cnn_images=True)
    model = PPO("CnnPolicy", env, n_steps=128, batch_size=128, n_epochs=1, seed=0, device="cpu",
                policy_kwargs={"features_extractor_kwargs": {"features_dim": 32}, "net_arch": []})  # fmt: skip
    before, episodes = _parameters(model), _Episodes()
    model.learn(2048, callback=episodes)
    assert model.num_timesteps == episodes.steps == 2048
    assert len(episodes.terminal) >= 4 * 3  # SpriteGoal truncates at 128 steps: >= 3 episodes per env
    assert all(obs.shape == (1, 72, 80) and obs.dtype == np.uint8 for obs in episodes.terminal)
    assert not torch.equal(before, _parameters(model))
    actions, _ = model.predict(env.reset(), deterministic=True)
    assert actions.shape == (4,) and all(env.action_space.contains(int(action)) for action in actions)
    env.close()


def _ztoken_ppo(seed: int, steps: int) -> tuple[PPO, _Episodes]:
    env = SB3VecEnv(gym.make_vec("ZTokenDigits-v1", num_envs=4, vectorization_mode="sync",
                                 wrappers=[FlattenTokenDigitsAction], **ZTOKEN))  # fmt: skip
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=2, seed=seed, device="cpu",
                policy_kwargs={"net_arch": [16]})  # fmt: skip
    episodes = _Episodes()
    model.learn(steps, callback=episodes)
    return model, episodes


def test_ppo_mlp_policy_trains_on_ztoken_digits_deterministically() -> None:
    torch.set_num_threads(1)
    model, episodes = _ztoken_ppo(seed=0, steps=2048)
    assert model.num_timesteps == episodes.steps == 2048
    assert len(episodes.terminal) >= 2048 // 4  # an episode lasts at most 4 steps
    length = model.env.observation_space.shape
    assert all(obs.shape == length and model.env.observation_space.contains(obs) for obs in episodes.terminal)
    actions, _ = model.predict(model.env.reset())
    assert actions.shape == (4, 6) and all(model.env.action_space.contains(action) for action in actions)
    assert len(model.ep_info_buffer) == 0  # no Monitor: SB3 gets episode stats only from the env's infos
    first, second = _ztoken_ppo(seed=1, steps=512)[0], _ztoken_ppo(seed=1, steps=512)[0]
    assert torch.equal(_parameters(first), _parameters(second))


def test_sb3_single_env_path_on_gym_make_gameboy() -> None:
    sb3_check_env(gym.make("GameBoy-v0"), warn=False)
    model = PPO("MlpPolicy", gym.make("GameBoy-v0", max_episode_steps=16), n_steps=64, batch_size=64, n_epochs=1,
                seed=0, device="cpu", policy_kwargs={"net_arch": [8]})  # fmt: skip
    episodes = _Episodes()
    model.learn(128, callback=episodes)
    assert model.num_timesteps == 128 and len(episodes.terminal) == 128 // 16
    assert all(obs.shape == (72, 80) for obs in episodes.terminal)
