"""Registers every worldgym env id with Gymnasium, using string entry points so nothing heavy is imported."""

from __future__ import annotations

import gymnasium as gym

# One line per environment: id -> keyword arguments for ``gymnasium.register``. A change of an env's
# observations, rewards or dynamics bumps its version; the old id is left unregistered, so ``gym.make`` of it
# raises Gymnasium's ``DeprecatedEnv`` naming the new id (CSRPhone-v0, MathQA-v0, ZTokenDigits-v0).
ENV_SPECS: dict[str, dict] = {
    "ZTokenDigits-v1": {"entry_point": "worldgym.envs.ztoken.env:ZTokenDigitsEnv", "max_episode_steps": None},
    "CSRPhone-v1": {"entry_point": "worldgym.envs.csr_phone.env:CSRPhoneEnv", "max_episode_steps": None},
    "MathQA-v1": {"entry_point": "worldgym.envs.math_qa.env:MathQAEnv", "max_episode_steps": None},
    "LongHealthQA-v0": {"entry_point": "worldgym.envs.longhealth.env:LongHealthQAEnv"},  # one-step episodes
    "GameBoy-v0": {
        "entry_point": "worldgym.envs.gameboy.single_env:GameBoyEnv",
        "vector_entry_point": "worldgym.envs.gameboy.vector_env:GameBoyVecEnv",
        "max_episode_steps": None,  # the env truncates itself (the task's max_steps or max_episode_steps)
    },
}
# Ids whose entry points need the `interop` extra (reasoning-gym, openenv-core); registered like the others.
INTEROP_ENV_SPECS: dict[str, dict] = {
    "ReasoningGym-v0": {"entry_point": "worldgym.envs.reasoning_gym.env:ReasoningGymEnv"},  # one-step episodes
    "worldgym/OpenEnv-v0": {"entry_point": "worldgym.wrappers.openenv:OpenEnvGym", "max_episode_steps": None},
}


def register_envs() -> None:
    """Register all worldgym ids; safe to call more than once."""
    for env_id, kwargs in {**ENV_SPECS, **INTEROP_ENV_SPECS}.items():
        if env_id in gym.registry:
            continue
        gym.register(id=env_id, **kwargs)
