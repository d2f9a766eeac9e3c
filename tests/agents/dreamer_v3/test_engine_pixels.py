"""The pixel path end to end on synthetic Game Boy-sized frames: pack 2 bits/pixel, store, CNN world model."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from worldgym.agents.dreamer_v3.engine.cpu import CPUEngine
from worldgym.agents.dreamer_v3.pixels import pack_frames, unpack_2bit


class ShadesEnv(gym.Env):
    """72x80 frames of 4 shades: a bar whose row follows the last action; reward 1 for action 0."""

    observation_space = gym.spaces.Box(0, 3, (72, 80), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._frame(0), {}

    def _frame(self, action: int) -> np.ndarray:
        frame = self.np_random.integers(0, 2, (72, 80), dtype=np.uint8)
        frame[18 * action : 18 * action + 18, :] = 3
        return frame

    def step(self, action):
        self.t += 1
        return self._frame(int(action)), float(action == 0), self.t >= 12, False, {}


def test_cpu_engine_trains_on_packed_frames(tmp_path, make_config):
    env = gym.vector.SyncVectorEnv([ShadesEnv, ShadesEnv])
    cfg = make_config(tmp_path, obs_kind="pixels", num_steps=80, log_every=80)
    engine = CPUEngine(cfg, env=env, obs_transform=pack_frames)
    encoder_before = engine.core.learner.world_model.encoder.net[0].weight.detach().clone()
    record = engine.run(progress=False)
    stored = engine.core.replay.storage["obs"]
    assert stored.shape == (cfg.replay.capacity, 2, 1, 72, 20) and stored.dtype == torch.uint8
    frames = unpack_2bit(stored[: engine.core.replay.committed_t])
    assert int(frames.max()) == 3 and bool((frames == 3).float().mean() > 0.2)
    assert record["gradient_steps"] > 0 and np.isfinite(record["loss/world_observation_loss"])
    assert not torch.equal(engine.core.learner.world_model.encoder.net[0].weight, encoder_before)


def test_pixel_config_needs_packed_frames(tmp_path, make_config):
    env = gym.vector.SyncVectorEnv([ShadesEnv])
    with pytest.raises(ValueError, match="obs_kind='vector' needs 1-D observations"):
        CPUEngine(make_config(tmp_path, num_envs=1), env=env)
