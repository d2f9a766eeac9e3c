"""Episode rewards for GRPO: the env's task reward, optionally shaped by DAPO's soft overlong penalty."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from worldgym.agents.llm.losses import overlong_penalty
from worldgym.agents.llm.rollout import Episode
from worldgym.envs.math_qa.reward import MathRewardModel

__all__ = ["MathRewardModel", "episode_rewards"]


def episode_rewards(
    episodes: Sequence[Episode],
    max_response_tokens: int,
    overlong_buffer: int = 0,
    overlong_penalty_value: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(task_rewards, shaped_rewards)`` as ``[B]`` tensors.

    The task reward is what the env paid over the episode (MathQA-v0 grades with :class:`MathRewardModel`).
    With ``overlong_buffer > 0`` the shaped reward adds the penalty for model tokens beyond
    ``max_response_tokens - overlong_buffer``.
    """
    task = torch.tensor([episode.reward for episode in episodes], dtype=torch.float32)
    if overlong_buffer <= 0:
        return task, task.clone()
    lengths = torch.tensor([episode.num_model_tokens for episode in episodes])
    return task, task + overlong_penalty(
        lengths, max_response_tokens, overlong_buffer, overlong_penalty_value
    )
