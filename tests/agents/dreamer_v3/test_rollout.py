"""EnvRunner rows: is_first after resets, continue 0 only on termination, episode ids, rewards."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from worldgym.agents.dreamer_v3.engine.rollout import EnvRunner


class CountEnv(gym.Env):
    """obs = [steps so far]; reward = steps; terminates after ``end`` steps (or a TimeLimit truncates it)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, end: int) -> None:
        self.end, self.count = end, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.count += 1
        return np.array([self.count], np.float32), float(self.count), self.count >= self.end, False, {}


def make_runner() -> EnvRunner:
    env = gym.vector.SyncVectorEnv(
        [lambda: CountEnv(end=3), lambda: gym.wrappers.TimeLimit(CountEnv(end=100), max_episode_steps=2)]
    )
    return EnvRunner(env)


def test_rows_follow_the_transition_aligned_schema():
    runner = make_runner()
    runner.reset(seed=0)
    rows = []
    for _ in range(8):
        action = torch.zeros(2, dtype=torch.int64)
        rows.append(runner.row(action))
        runner.step(action)
    obs = torch.stack([r["obs"][:, 0] for r in rows])
    first = torch.stack([r["is_first"] for r in rows])
    cont = torch.stack([r["cont"] for r in rows])
    reward = torch.stack([r["reward"] for r in rows])
    episode = torch.stack([r["episode_id"] for r in rows])
    # Env 0 terminates after 3 steps: rows 0..3 are one episode, row 3 is the terminal obs (continue 0)
    assert obs[:, 0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert first[:, 0].tolist() == [1, 0, 0, 0, 1, 0, 0, 0]
    assert cont[:, 0].tolist() == [1, 1, 1, 0, 1, 1, 1, 0]
    assert reward[:, 0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    # Env 1 is truncated after 2 steps: continue stays 1
    assert obs[:, 1].tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    assert first[:, 1].tolist() == [1, 0, 0, 1, 0, 0, 1, 0]
    assert cont[:, 1].tolist() == [1] * 8
    # Episode ids increase on every reset and are unique across envs
    for env in range(2):
        ids = episode[:, env]
        assert bool((ids[1:] >= ids[:-1]).all())
        assert torch.equal(ids[1:] != ids[:-1], first[1:, env].bool())
    assert set(episode[:, 0].tolist()).isdisjoint(episode[:, 1].tolist())


def test_episode_stats_and_errors():
    runner = make_runner()
    runner.reset(seed=0)
    ended = [runner.step(torch.zeros(2, dtype=torch.int64)) for _ in range(3)]
    assert ended[1].returns == [3.0] and ended[1].lengths == [2]
    assert ended[2].returns == [6.0] and ended[2].lengths == [3]
    box_env = gym.vector.SyncVectorEnv([lambda: gym.make("MountainCarContinuous-v0")])
    with pytest.raises(TypeError, match="supports Discrete actions"):
        EnvRunner(box_env)
