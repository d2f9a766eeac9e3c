"""GRPO / DAPO / Dr.GRPO trainer for LLM agents on worldgym text envs."""

from typing import Any

from worldgym.agents.grpo import presets as _presets
from worldgym.agents.grpo.config import GRPOConfig
from worldgym.agents.grpo.presets import GRPOPreset, grpo_preset, grpo_presets
from worldgym.agents.grpo.rewards import EpisodeRewardFn, MathRewardModel, episode_rewards
from worldgym.agents.grpo.trainer import GRPOTrainer

__all__ = [
    "EpisodeRewardFn",
    "GRPOConfig",
    "GRPOPreset",
    "GRPOTrainer",
    "MathRewardModel",
    "episode_rewards",
    "grpo_preset",
    "grpo_presets",
]


def __getattr__(name: str) -> Any:
    if name in ("CSR_PRESETS", "CSRPreset"):  # deprecated names (worldgym.agents.grpo.presets warns)
        return getattr(_presets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
