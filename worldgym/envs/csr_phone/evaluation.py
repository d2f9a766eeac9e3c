"""Run policies on CSRPhone-v1 and summarise success: the loop behind the demo, benchmark and tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym

from worldgym.envs.csr_phone.policies import CSRPolicy

__all__ = ["EpisodeResult", "PolicyStats", "evaluate_policy", "run_episode"]


@dataclass(frozen=True)
class EpisodeResult:
    """One episode: whether the task was completed, how many tool calls it took and the return."""

    success: bool
    turns: int
    episode_return: float


@dataclass(frozen=True)
class PolicyStats:
    """Aggregate over episodes."""

    episodes: int
    success_rate: float
    mean_turns: float
    mean_return: float

    def as_dict(self) -> dict[str, float]:
        """JSON-friendly form."""
        return {"episodes": self.episodes, "success_rate": self.success_rate, "mean_turns": self.mean_turns,
                "mean_return": self.mean_return}


def run_episode(env: gym.Env, policy: CSRPolicy, seed: int | None = None) -> EpisodeResult:
    """Play one episode of ``env`` with ``policy`` (which may emit ToolCalls or, via TextPolicy, text)."""
    observation, info = env.reset(seed=seed)
    policy.reset(observation, info)
    turns, total, success = 0, 0.0, False
    terminated = truncated = False
    while not (terminated or truncated):
        observation, reward, terminated, truncated, info = env.step(policy.act(observation, info))
        turns += 1
        total += float(reward)
        success = success or bool(info.get("success", False))
    return EpisodeResult(success, turns, total)


def evaluate_policy(env: gym.Env, make_policy: Callable[[], CSRPolicy], episodes: int, seed: int = 0,
                    progress: Callable[[int], None] | None = None) -> PolicyStats:
    """Success rate of a fresh policy per run over ``episodes`` episodes seeded ``seed, seed + 1, ...``."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    policy = make_policy()
    results = []
    for index in range(episodes):
        results.append(run_episode(env, policy, seed=seed + index))
        if progress is not None:
            progress(1)
    return PolicyStats(
        episodes=episodes,
        success_rate=sum(r.success for r in results) / episodes,
        mean_turns=sum(r.turns for r in results) / episodes,
        mean_return=sum(r.episode_return for r in results) / episodes,
    )
