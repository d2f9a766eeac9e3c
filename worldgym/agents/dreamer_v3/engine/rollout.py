"""Env side of every engine: steps a Gymnasium vector env and emits transition-aligned replay rows."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch

ObsTransform = Callable[[np.ndarray], torch.Tensor]


def default_obs_transform(obs: np.ndarray) -> torch.Tensor:
    """Vector obs as float32 tensors; uint8 (packed pixel) obs kept as uint8."""
    array = np.asarray(obs)
    if array.dtype == np.uint8:
        return torch.from_numpy(array.copy())
    return torch.from_numpy(array.astype(np.float32))


@runtime_checkable
class SavesState(Protocol):
    """A vector env that writes its whole state to a file and loads it back (GameBoy-v0's save states)."""

    def save_state(self, path: str | os.PathLike[str]) -> Path: ...

    def load_state(self, path: str | os.PathLike[str]) -> None: ...


def state_saving_env(env: gym.vector.VectorEnv) -> SavesState | None:
    """The unwrapped ``env`` if it saves and loads its state (:class:`SavesState`), else None.

    Only the unwrapped env's state is saved: wrappers must keep none of their own (``FixedAction`` keeps none).
    Gymnasium's own vector envs (CartPole-v1, ...) have no such methods: their state lives in each sub-env's
    attributes, which only pickling the envs would capture.
    """
    unwrapped = env.unwrapped
    return unwrapped if isinstance(unwrapped, SavesState) else None


@dataclass
class EpisodeStats:
    """Returns and lengths of the episodes that ended during one env step."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)


class EnvRunner:
    """Keeps the current row of every env of a ``NEXT_STEP``- or ``SAME_STEP``-autoreset vector env.

    Row ``t`` of env ``i``: the obs the env returned, whether it starts an episode, the reward and the
    continue flag (0 only on ``terminated``) returned with it, its episode id, and the action then taken.
    After a terminal or truncated row, the next ``step`` resets that env (the action is ignored by Gymnasium).

    ``SAME_STEP`` envs (e.g. GameBoy-v0) reset inside the finishing step and return the final obs in
    ``info["final_obs"]``; the runner stores that final obs (so terminal rewards and ``cont = 0`` reach the
    replay) and starts the next episode at the obs after the following step: the reset obs itself is not
    stored, and the reward of that first step is not counted in episode returns.

    If ``obs_transform`` has a ``read_view()`` method returning a tensor (see
    :class:`~worldgym.agents.dreamer_v3.pixels.PackedFrames`), the current obs are read from the env's own
    buffer through it (on the env's device) whenever they equal the step's returned obs, i.e. after a reset
    and after steps in which no env finished.

    Args:
        env (gym.vector.VectorEnv): a vector env with discrete actions and ``NEXT_STEP`` or ``SAME_STEP``
            autoreset.
        obs_transform (ObsTransform): numpy batch -> tensor stored in replay.
    """

    def __init__(
        self, env: gym.vector.VectorEnv, obs_transform: ObsTransform = default_obs_transform
    ) -> None:
        mode = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
        supported = (gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP)
        if mode not in supported:
            raise ValueError(f"EnvRunner needs autoreset_mode NEXT_STEP or SAME_STEP, env has {mode}")
        self.same_step = mode == gym.vector.AutoresetMode.SAME_STEP
        if not isinstance(env.single_action_space, gym.spaces.Discrete):
            raise TypeError(f"Dreamer here supports Discrete actions, got {env.single_action_space}")
        self.env = env
        self.num_envs = env.num_envs
        self.action_dim = int(env.single_action_space.n)
        self.obs_transform = obs_transform
        self._next_episode = 0
        self.obs = torch.empty(0)
        self.is_first = torch.ones(self.num_envs)
        self.reward = torch.zeros(self.num_envs)
        self.cont = torch.ones(self.num_envs)
        self.episode_id = torch.zeros(self.num_envs, dtype=torch.int64)
        self._done = np.zeros(self.num_envs, dtype=bool)
        self._return = np.zeros(self.num_envs)
        self._length = np.zeros(self.num_envs, dtype=np.int64)

    def _new_episodes(self, mask: np.ndarray) -> None:
        count = int(mask.sum())
        ids = torch.arange(self._next_episode, self._next_episode + count, dtype=torch.int64)
        self.episode_id[torch.from_numpy(mask)] = ids
        self._next_episode += count
        self._return[mask] = 0.0
        self._length[mask] = 0

    def reset(self, seed: int) -> None:
        """Reset every env (seeded) and start new episodes."""
        obs, _ = self.env.reset(seed=seed)
        self.obs = self._observe(obs, {}, np.zeros(self.num_envs, dtype=bool))
        self.is_first.fill_(1.0)
        self.reward.zero_()
        self.cont.fill_(1.0)
        self._done[:] = False
        self._new_episodes(np.ones(self.num_envs, dtype=bool))

    def _observe(self, obs: np.ndarray, info: dict, finished: np.ndarray) -> torch.Tensor:
        """The obs to store for this step: final obs of envs a ``SAME_STEP`` env just reset, else ``obs``."""
        if self.same_step and finished.any():
            final, mask = info["final_obs"], info.get("_final_obs", finished)
            obs = np.array(obs, copy=True)
            for i in np.flatnonzero(mask):
                obs[i] = final[i]
            return self.obs_transform(obs)
        read_view = getattr(self.obs_transform, "read_view", None)
        frames = read_view() if read_view is not None else None
        return frames if frames is not None else self.obs_transform(obs)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The current row of every env and the return and length of its episode so far (for a checkpoint
        that also holds the env's own state: :meth:`load_state_dict` then continues the episodes)."""
        return {
            "obs": self.obs.clone(),  # may be a view of the env's frame buffer, which the next step rewrites
            "is_first": self.is_first,
            "reward": self.reward,
            "cont": self.cont,
            "episode_id": self.episode_id,
            "done": torch.from_numpy(self._done),
            "return": torch.from_numpy(self._return),
            "length": torch.from_numpy(self._length),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state_dict` (after loading the env's state saved with it)."""
        self.obs = state["obs"].clone()
        self.is_first, self.reward = state["is_first"].clone(), state["reward"].clone()
        self.cont, self.episode_id = state["cont"].clone(), state["episode_id"].clone()
        self._done = state["done"].numpy().copy()
        self._return = state["return"].numpy().copy()
        self._length = state["length"].numpy().copy()

    def row(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        """The replay row of the current obs with the chosen ``actions [N]``."""
        return {
            "obs": self.obs,
            "action": actions.to(torch.int64).cpu(),
            "reward": self.reward.clone(),
            "is_first": self.is_first.clone(),
            "cont": self.cont.clone(),
            "episode_id": self.episode_id.clone(),
        }

    def step(self, actions: torch.Tensor) -> EpisodeStats:
        """Step every env; returns the stats of the episodes that ended with this step."""
        obs, reward, terminated, truncated, info = self.env.step(actions.cpu().numpy())
        was_done = self._done
        self.obs = self._observe(obs, info, np.logical_or(terminated, truncated))
        self.reward = torch.as_tensor(np.where(was_done, 0.0, reward), dtype=torch.float32)
        self.cont = torch.as_tensor(1.0 - terminated.astype(np.float32))
        self.is_first = torch.as_tensor(was_done.astype(np.float32))
        if was_done.any():
            self._new_episodes(was_done)
        self._return += np.where(was_done, 0.0, reward)
        self._length += ~was_done
        self._done = np.logical_or(terminated, truncated)
        stats = EpisodeStats()
        for i in np.flatnonzero(self._done):
            stats.returns.append(float(self._return[i]))
            stats.lengths.append(int(self._length[i]))
        return stats
