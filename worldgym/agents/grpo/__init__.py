"""GRPO / DAPO / Dr.GRPO trainer for LLM agents on worldgym text envs."""

from worldgym.agents.grpo.config import GRPOConfig
from worldgym.agents.grpo.presets import CSR_PRESETS, CSRPreset
from worldgym.agents.grpo.rewards import EpisodeRewardFn, MathRewardModel, episode_rewards
from worldgym.agents.grpo.trainer import GRPOTrainer

__all__ = [
    "CSR_PRESETS",
    "CSRPreset",
    "EpisodeRewardFn",
    "GRPOConfig",
    "GRPOTrainer",
    "MathRewardModel",
    "episode_rewards",
]
