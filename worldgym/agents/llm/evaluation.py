"""Evaluation of an LLM policy on a text env (greedy, or sampled): success rate, mean reward and the copy probe."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import gymnasium as gym
import numpy as np
from transformers import PreTrainedTokenizerBase

from worldgym.agents.llm.copy_probe import copy_probe
from worldgym.agents.llm.engines.base import GenerationEngine, SamplingParams
from worldgym.agents.llm.rollout import Episode, RolloutCollector

__all__ = ["VALIDATION_SEEDS_START", "episode_metrics", "evaluate_chat_policy", "tool_usage_metrics"]

# Validation episodes are seeded from here on; training seeds are drawn below 2**31 - 1 by the trainers'
# RNGs, so an overlap is possible but never systematic (and env splits keep tasks apart anyway).
VALIDATION_SEEDS_START = 10**6


def episode_metrics(episodes: Sequence[Episode], prefix: str = "eval/") -> dict[str, float]:
    """Success rate, mean reward and (where the tools mark copied arguments and some were written) the copy
    probe of finished episodes."""
    metrics = {
        f"{prefix}reward_mean": float(np.mean([e.reward for e in episodes])),
        f"{prefix}success_rate": float(np.mean([e.success for e in episodes])),
    }
    probe = copy_probe(episodes)
    if probe.arguments:
        metrics[f"{prefix}copy_probe"] = probe.rate
    return metrics | tool_usage_metrics(episodes, prefix)


def tool_usage_metrics(episodes: Sequence[Episode], prefix: str = "eval/") -> dict[str, float]:
    """Tool calls per episode (all, and by tool name) and the share of replies that were no valid call (the
    env's ``response_type == "invalid_call"``); empty for envs whose steps report no ``tool``."""
    turns = [turn for episode in episodes for turn in episode.turns]
    names = [turn.info["tool"] for turn in turns if turn.info.get("tool")]
    invalid = sum(turn.info.get("response_type") == "invalid_call" for turn in turns)
    if not names and not invalid:
        return {}
    metrics = {f"{prefix}tool_calls_per_episode": len(names) / len(episodes),
               f"{prefix}invalid_call_rate": invalid / max(len(turns), 1)}
    for name in sorted(set(names)):
        metrics[f"{prefix}tool/{name}_per_episode"] = names.count(name) / len(episodes)
    return metrics


def evaluate_chat_policy(
    engine: GenerationEngine,
    tokenizer: PreTrainedTokenizerBase,
    make_env: Callable[[], gym.Env],
    num_episodes: int,
    max_turns: int,
    max_new_tokens: int,
    decoding: Literal["free", "constrained"] = "free",
    first_seed: int = VALIDATION_SEEDS_START,
    max_episode_tokens: int = 4096,
    temperature: float = 0.0,
    sampling_seed: int = 0,
) -> tuple[dict[str, float], list[Episode]]:
    """Episodes on the seeds ``first_seed, first_seed + 1, ...``: :func:`episode_metrics` and the episodes
    themselves. Greedy by default; ``temperature > 0`` samples (reproducibly from ``sampling_seed``), e.g. to
    see how often a policy's training rollouts would succeed. ``max_episode_tokens``: an episode is truncated
    where its next reply could pass this (give a trainer's own ``config.max_episode_tokens`` to score what its
    validation scores)."""
    collector = RolloutCollector(engine, tokenizer, make_env, max_turns=max_turns, decoding=decoding,
                                 max_episode_tokens=max_episode_tokens)
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=sampling_seed)
    episodes = collector.collect(range(first_seed, first_seed + num_episodes), 1, params)
    return episode_metrics(episodes), episodes
