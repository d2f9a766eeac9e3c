"""Greedy evaluation of an LLM policy on a text env: success rate, mean reward and the copy probe."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import gymnasium as gym
import numpy as np
from transformers import PreTrainedTokenizerBase

from worldgym.agents.llm.copy_probe import copy_probe
from worldgym.agents.llm.engines.base import GenerationEngine, SamplingParams
from worldgym.agents.llm.rollout import Episode, RolloutCollector

__all__ = ["VALIDATION_SEEDS_START", "episode_metrics", "evaluate_chat_policy"]

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
) -> tuple[dict[str, float], list[Episode]]:
    """Greedy episodes on the seeds ``first_seed, first_seed + 1, ...``: :func:`episode_metrics` and the
    episodes themselves."""
    collector = RolloutCollector(engine, tokenizer, make_env, max_turns=max_turns, decoding=decoding)
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    episodes = collector.collect(range(first_seed, first_seed + num_episodes), 1, params)
    return episode_metrics(episodes), episodes
