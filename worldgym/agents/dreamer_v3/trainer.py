"""``DreamerTrainer``: the agent's entry point (the agent shape of :mod:`worldgym.agents.base`), and
:func:`evaluate_learner`, which plays episodes with a learner's current weights."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from worldgym.agents.dreamer_v3.config import DreamerConfig
from worldgym.agents.dreamer_v3.engine.async_engine import AsyncEngine
from worldgym.agents.dreamer_v3.engine.cpu import CPUEngine
from worldgym.agents.dreamer_v3.engine.rollout import EnvRunner, ObsTransform, default_obs_transform
from worldgym.agents.dreamer_v3.learner import DreamerLearner
from worldgym.agents.dreamer_v3.pixels import pack_frames
from worldgym.agents.dreamer_v3.policy import DreamerPolicy
from worldgym.checkpointing import load_latest
from worldgym.jsonl import read_jsonl, truncate_jsonl

__all__ = ["DreamerTrainer", "EnvFactory", "evaluate_learner", "gym_env_factory"]

# num_envs -> (vector env, the transform that stores its observations in the replay)
EnvFactory = Callable[[int], tuple[gym.vector.VectorEnv, ObsTransform]]


def gym_env_factory(config: DreamerConfig) -> EnvFactory:
    """``gym.make_vec(config.env_id)`` (sync, NEXT_STEP autoreset); pixel envs' 2-bit frames are stored packed."""
    transform = pack_frames if config.obs_kind == "pixels" else default_obs_transform

    def make(num_envs: int) -> tuple[gym.vector.VectorEnv, ObsTransform]:
        return gym.make_vec(config.env_id, num_envs=num_envs, vectorization_mode="sync"), transform

    return make


class DreamerTrainer:
    """Dreamer v3 on a vector env, run by the CPU reference engine or the async actor/learner engine
    (``config.engine``; the engines stay internal).

    Args:
        config: the run.
        make_env: builds the vector env and its replay transform for a number of envs (default:
            :func:`gym_env_factory`); also builds the evaluation env (one env) when :meth:`evaluate` gets none.

    >>> from worldgym.agents.dreamer_v3 import ReplayConfig, ScheduleConfig, model_size
    >>> config = DreamerConfig(num_steps=64, model=model_size("tiny"), progress=False, log_every=32,
    ...     replay=ReplayConfig(capacity=256, seq_len=8, batch_size=2, min_ready_steps=8, safety_margin=8),
    ...     schedule=ScheduleConfig(replay_ratio=0.1, learning_starts=16), output_dir="/tmp/wg_dreamer_doctest")
    >>> trainer = DreamerTrainer(config)
    >>> [row["step"] for row in trainer.train()]
    [32, 64]
    >>> trainer.close()
    """

    def __init__(self, config: DreamerConfig, make_env: EnvFactory | None = None) -> None:
        self.config = config
        self.make_env = make_env or gym_env_factory(config)
        self.env, self.obs_transform = self.make_env(config.num_envs)
        engine_class = CPUEngine if config.engine == "cpu" else AsyncEngine
        self.engine: CPUEngine | AsyncEngine = engine_class(config, self.env, self.obs_transform)
        self.history: list[dict[str, Any]] = []

    @property
    def learner(self) -> DreamerLearner:
        """The world model, actor and critic."""
        return self.engine.core.learner

    @property
    def metrics_path(self) -> Path:
        return self.engine.core.metrics_path

    def train(self) -> list[dict[str, Any]]:
        """Run until ``config.num_steps`` policy steps (continuing a loaded run); returns every logged row of the
        run (``metrics.jsonl``; ``step`` and ``policy_step``: policy steps so far). A fresh run replaces the logs an
        earlier run left in ``config.output_dir``."""
        core = self.engine.core
        if core.counters.iter_num == 0:
            truncate_jsonl(core.metrics_path, "policy_step", 0)
            truncate_jsonl(core.episodes_path, "policy_step", 0)
        self.engine.run(progress=self.config.progress)
        self.history = read_jsonl(self.metrics_path)
        return self.history

    def evaluate(self, env: gym.vector.VectorEnv | None = None, episodes: int | None = None) -> dict[str, float]:
        """Greedy episodes (``config.eval_episodes``) on ``env`` (default: a fresh one-env copy of the training
        env), seeded ``config.seed + 10_000``."""
        own = env is None
        if own:
            env, transform = self.make_env(1)
        else:
            transform = self.obs_transform
        try:
            return evaluate_learner(self.learner, env, episodes or self.config.eval_episodes,
                                    seed=self.config.seed + 10_000, obs_transform=transform)
        finally:
            if own:
                env.close()

    def save(self, path: str | Path) -> Path:
        """Networks, optimisers, replay, replay-ratio state, generators and (where the env saves one) its state."""
        return self.engine.core.save(path)

    def load(self, path: str | Path) -> None:
        """Continue the run saved at ``path`` (a :class:`~worldgym.errors.CheckpointError` names a mismatch)."""
        self.engine.core.resume(path)
        self.history = read_jsonl(self.metrics_path)

    def resume_latest(self) -> Path | None:
        """Load the run's newest checkpoint (:func:`~worldgym.checkpointing.latest_checkpoint`);
        returns its path, or None when there is none yet."""
        return load_latest(self.config.output_dir, self.load)

    def close(self) -> None:
        """Close the training env and the trackers."""
        self.env.close()
        if self.engine.core.tracker is not None:
            self.engine.core.tracker.close()
            self.engine.core.tracker = None


@torch.no_grad()
def evaluate_learner(
    learner: DreamerLearner,
    env: gym.vector.VectorEnv,
    episodes: int = 10,
    seed: int = 0,
    greedy: bool = True,
    obs_transform: ObsTransform = default_obs_transform,
) -> dict[str, float]:
    """Play ``episodes`` episodes with the learner's current weights; returns mean/std return and length."""
    if episodes < 1:
        raise ValueError(f"episodes={episodes} is invalid: must be >= 1")
    device = next(learner.parameters()).device
    policy = DreamerPolicy(learner, env.num_envs).to(device)
    runner = EnvRunner(env, obs_transform)
    runner.reset(seed=seed)
    generator = torch.Generator(device=device).manual_seed(seed)
    returns: list[float] = []
    lengths: list[int] = []
    while len(returns) < episodes:
        actions = policy.act(runner.obs.to(device), runner.is_first.to(device), generator, greedy=greedy)
        stats = runner.step(actions)
        returns += stats.returns
        lengths += stats.lengths
    returns, lengths = returns[:episodes], lengths[:episodes]
    return {
        "eval/return_mean": float(np.mean(returns)),
        "eval/return_std": float(np.std(returns)),
        "eval/length_mean": float(np.mean(lengths)),
        "eval/episodes": float(episodes),
    }
