"""ReasoningGym-v0: reasoning-gym's procedural tasks as a single-turn text env (needs the ``interop`` extra)."""

from worldgym.envs.reasoning_gym.env import SPLIT_SEED_OFFSET, ReasoningGymEnv, build_split

__all__ = ["SPLIT_SEED_OFFSET", "ReasoningGymEnv", "build_split"]
