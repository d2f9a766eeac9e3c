"""Dreamer v3: RSSM world model, imagination actor-critic, replay ring, replay-ratio scheduler and engines.

>>> from worldgym.agents.dreamer_v3 import DreamerConfig, model_size
>>> DreamerConfig(model=model_size("tiny")).model.recurrent_size
32
"""

from worldgym.agents.dreamer_v3.config import (
    SMALL_CONTROL_MODEL,
    SMALL_CONTROL_OPTIM,
    DreamerConfig,
    LossConfig,
    ModelConfig,
    OptimConfig,
    ReplayConfig,
    ScheduleConfig,
    model_size,
)
from worldgym.agents.dreamer_v3.engine import AsyncEngine, CPUEngine
from worldgym.agents.dreamer_v3.scheduler import Ratio, TrainSchedule
from worldgym.agents.dreamer_v3.trainer import DreamerTrainer, evaluate_learner, gym_env_factory

__all__ = [
    "SMALL_CONTROL_MODEL",
    "SMALL_CONTROL_OPTIM",
    "AsyncEngine",
    "CPUEngine",
    "DreamerConfig",
    "DreamerTrainer",
    "LossConfig",
    "ModelConfig",
    "OptimConfig",
    "Ratio",
    "ReplayConfig",
    "ScheduleConfig",
    "TrainSchedule",
    "evaluate_learner",
    "gym_env_factory",
    "model_size",
]
