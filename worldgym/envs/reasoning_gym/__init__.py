"""ReasoningGym-v0: reasoning-gym's procedural tasks as a single-turn text env (needs the ``interop`` extra)."""

from worldgym.env_training import register_expert
from worldgym.envs.reasoning_gym.env import SPLIT_SEED_OFFSET, ReasoningGymEnv, build_split
from worldgym.envs.reasoning_gym.expert import NoisyReferenceExpert

register_expert("ReasoningGym-v0", NoisyReferenceExpert, options=("seed", "noise"))

__all__ = ["SPLIT_SEED_OFFSET", "NoisyReferenceExpert", "ReasoningGymEnv", "build_split"]
