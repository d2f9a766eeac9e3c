"""Held-out evaluation: exact match, per-digit accuracy and Z-trace length on the env's test split."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from worldgym.agents.ztoken_ppo.encoding import ObservationEncoder
from worldgym.agents.ztoken_ppo.model import Decoding, ZTokenPolicy
from worldgym.agents.ztoken_ppo.rollout import ZTokenEpisode, collect_episodes, ztoken_vector_env


def episode_metrics(episodes: list[ZTokenEpisode], prefix: str) -> dict[str, float]:
    """Exact match, digit accuracy (all 5 positions), per-position accuracy, Z length, truncation, reward."""
    pred = np.array([e.breakdown["digit_pred"] for e in episodes])
    true = np.array([e.breakdown["digit_true"] for e in episodes])
    answered = np.array([e.breakdown["terminated_by"] == "answer" for e in episodes])
    correct = (pred == true) & answered[:, None]
    metrics = {
        f"{prefix}/exact_match": float(correct.all(1).mean()),
        f"{prefix}/digit_accuracy": float(correct.mean()),
        f"{prefix}/z_len_mean": float(np.mean([e.num_z for e in episodes])),
        f"{prefix}/truncation_rate": float(1.0 - answered.mean()),
        f"{prefix}/reward_mean": float(np.mean([e.reward for e in episodes])),
    }
    metrics.update(
        {f"{prefix}/digit{pos}_accuracy": float(correct[:, pos].mean()) for pos in range(pred.shape[1])}
    )
    return metrics


def evaluate_policy(
    policy: ZTokenPolicy,
    encoder: ObservationEncoder,
    env_id: str = "ZTokenDigits-v1",
    env_kwargs: dict[str, Any] | None = None,
    num_episodes: int = 256,
    num_envs: int = 8,
    seed: int = 1234,
    token_decoding: Decoding = "greedy",
    envs: gym.vector.VectorEnv | None = None,
) -> dict[str, float]:
    """Play ``num_episodes`` held-out (``split="test"``) episodes with argmax digits; return ``eval/*``.

    A truncated episode counts as wrong on every digit. ``seed`` fixes the problems (and sampled tokens).
    ``envs``, when given, is played instead of ``num_envs`` test-split copies of ``env_id`` (its sub-envs must
    autoreset in the step that ends an episode, as :func:`ztoken_vector_env` builds them; it is not closed).
    """
    num_envs = num_envs if envs is None else envs.num_envs
    if num_episodes % num_envs:
        raise ValueError(f"num_episodes={num_episodes} must be a multiple of num_envs={num_envs}")
    own_envs = envs is None
    if envs is None:
        envs = ztoken_vector_env(env_id, {**(env_kwargs or {}), "split": "test"}, num_envs)
    generator = torch.Generator(device=policy.device).manual_seed(seed)
    episodes, _ = collect_episodes(
        policy,
        encoder,
        envs,
        num_episodes // num_envs,
        seed,
        generator,
        token_decoding=token_decoding,
        digit_decoding="greedy",
        id_prefix="eval",
    )
    if own_envs:
        envs.close()
    return episode_metrics(episodes, "eval")
