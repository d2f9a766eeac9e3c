"""The agent's public entry points: ``train(config) -> results`` and ``evaluate(learner, env) -> metrics``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from worldgym.agents.dreamer_v3.config import DreamerConfig
from worldgym.agents.dreamer_v3.engine.async_engine import AsyncEngine
from worldgym.agents.dreamer_v3.engine.cpu import CPUEngine
from worldgym.agents.dreamer_v3.engine.rollout import EnvRunner, ObsTransform, default_obs_transform
from worldgym.agents.dreamer_v3.learner import DreamerLearner
from worldgym.agents.dreamer_v3.policy import DreamerPolicy

EngineName = Literal["cpu", "async"]


def build_engine(
    cfg: DreamerConfig,
    engine: EngineName = "cpu",
    env: gym.vector.VectorEnv | None = None,
    obs_transform: ObsTransform = default_obs_transform,
) -> CPUEngine | AsyncEngine:
    """The CPU reference engine or the async (actor + learner) engine for ``cfg``."""
    if engine == "cpu":
        return CPUEngine(cfg, env, obs_transform)
    if engine == "async":
        return AsyncEngine(cfg, env, obs_transform)
    raise ValueError(f"engine={engine!r} is invalid: use 'cpu' or 'async'")


def train(
    cfg: DreamerConfig,
    engine: EngineName = "cpu",
    resume_from: str | Path | None = None,
    progress: bool = True,
) -> tuple[CPUEngine | AsyncEngine, dict[str, Any]]:
    """Train Dreamer v3; return the engine (``engine.core.learner`` has the networks) and the last metrics."""
    runner = build_engine(cfg, engine)
    return runner, runner.run(resume_from=resume_from, progress=progress)


@torch.no_grad()
def evaluate(
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
