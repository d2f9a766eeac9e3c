"""Episode rewards for GRPO: the env's task reward, optionally shaped by DAPO's soft overlong penalty."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from worldgym.agents.llm.losses import overlong_penalty
from worldgym.agents.llm.rollout import Episode
from worldgym.envs.math_qa.reward import MathRewardModel

__all__ = ["EpisodeRewardFn", "MathRewardModel", "episode_rewards"]

# A training reward computed from a finished episode (its turns' infos, success, env reward): reward shaping.
EpisodeRewardFn = Callable[[Episode], float]


def episode_rewards(
    episodes: Sequence[Episode],
    max_response_tokens: int,
    overlong_buffer: int = 0,
    overlong_penalty_value: float = 1.0,
    reward_fn: EpisodeRewardFn | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(task_rewards, shaped_rewards)`` as ``[B]`` tensors.

    The task reward is what the env paid over the episode (MathQA-v1 grades with :class:`MathRewardModel`).
    The shaped reward, which training uses, is ``reward_fn(episode)`` when given (else the task reward),
    plus, with ``overlong_buffer > 0``, the penalty for model tokens beyond
    ``max_response_tokens - overlong_buffer``.
    """
    task = torch.tensor([episode.reward for episode in episodes], dtype=torch.float32)
    shaped = (
        torch.tensor([float(reward_fn(episode)) for episode in episodes], dtype=torch.float32)
        if reward_fn is not None
        else task.clone()
    )
    if overlong_buffer <= 0:
        return task, shaped
    lengths = torch.tensor([episode.num_model_tokens for episode in episodes])
    return task, shaped + overlong_penalty(
        lengths, max_response_tokens, overlong_buffer, overlong_penalty_value
    )
