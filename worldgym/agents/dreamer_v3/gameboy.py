"""Connects GameBoy-v0 to Dreamer v3: packed-pixel env factory, fixed-action wrapper and a pixel config.

>>> env, transform = make_gameboy_env(num_envs=2, task="sprite_goal")  # doctest: +SKIP
>>> engine = CPUEngine(gameboy_config(num_envs=2), env=env, obs_transform=transform)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from worldgym.agents.dreamer_v3.config import DreamerConfig
from worldgym.agents.dreamer_v3.pixels import PackedFrames

GameBoyTask = Literal["sprite_goal", "standing_still", "exit_oak"]
GAMEBOY_TASKS: tuple[str, ...] = ("sprite_goal", "standing_still", "exit_oak")
ROM_ENV_VAR = "WORLDGYM_POKEMON_RED_ROM"


class FixedAction(gym.vector.VectorActionWrapper):
    """Every env always takes ``action``; the agent sees ``Discrete(1)`` so its recorded action is what ran.

    Used for StandingStill-style checks: with a constant action only the world model has something to learn.

    Args:
        env (gym.vector.VectorEnv): a vector env with a ``Discrete`` action space.
        action (int): the action every env takes on every step.
    """

    def __init__(self, env: gym.vector.VectorEnv, action: int) -> None:
        super().__init__(env)
        space = env.single_action_space
        if not isinstance(space, gym.spaces.Discrete):
            raise TypeError(f"FixedAction needs a Discrete action space, got {space}")
        if not 0 <= action < space.n:
            raise ValueError(f"action={action} is invalid: must be in [0, {space.n}) for {space}")
        self.single_action_space = gym.spaces.Discrete(1)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, env.num_envs)
        self._actions = np.full(env.num_envs, action, dtype=np.int64)

    def actions(self, actions: np.ndarray) -> np.ndarray:
        return self._actions.copy()


def warp_device(torch_device: str) -> str:
    """Warp's name for a torch device string (``"cuda"`` -> ``"cuda:0"``; ``"cpu"`` unchanged)."""
    device = torch.device(torch_device)
    if device.type == "cuda":
        return f"cuda:{0 if device.index is None else device.index}"
    if device.type != "cpu":
        raise ValueError(f"device={torch_device!r} is invalid for GameBoy-v0: use 'cpu' or 'cuda[:i]'")
    return "cpu"


def make_gameboy_env(
    num_envs: int,
    task: GameBoyTask = "sprite_goal",
    rom_path: str | os.PathLike[str] | None = None,
    fixed_action: int | None = None,
    device: str = "cpu",
    read_device_buffer: bool = True,
    **env_settings: Any,
) -> tuple[gym.vector.VectorEnv, PackedFrames]:
    """GameBoy-v0 with packed 2-bit observations and the matching Dreamer obs transform.

    Args:
        num_envs (int): emulators stepped together.
        task (GameBoyTask): ``sprite_goal`` (homebrew ROM built from source) or a Pokémon Red task.
        rom_path (str | os.PathLike[str] | None): a ROM you own (needed for the Pokémon tasks).
        fixed_action (int | None): if set, every step takes this button (``FixedAction``; 0 is no-op).
        device (str): torch device of the run; the emulators run on the same device.
        read_device_buffer (bool): let the transform read frames from the env's zero-copy buffer.
        **env_settings: further ``GameBoyEnvConfig`` fields (e.g. ``max_episode_steps``).

    Returns:
        The vector env and the :class:`PackedFrames` transform to pass to an engine.
    """
    if task not in GAMEBOY_TASKS:
        raise ValueError(f"task={task!r} is invalid: choose one of {GAMEBOY_TASKS}")
    if task != "sprite_goal" and rom_path is None:
        raise ValueError(
            f"task={task!r} needs rom_path: a Pokémon Red ROM you own (tests read it from ${ROM_ENV_VAR})"
        )
    env: gym.vector.VectorEnv = gym.make_vec(
        "GameBoy-v0",
        num_envs=num_envs,
        task=task,
        rom_path=None if rom_path is None else os.fspath(rom_path),
        packed_obs=True,
        device=warp_device(device),
        **env_settings,
    )
    view = getattr(env.unwrapped, "observation_tensor", None) if read_device_buffer else None
    if fixed_action is not None:
        env = FixedAction(env, fixed_action)
    return env, PackedFrames(view)


def gameboy_config(**overrides: Any) -> DreamerConfig:
    """A pixel :class:`DreamerConfig` for GameBoy-v0 (``env_id``, ``obs_kind`` set; the rest overridable)."""
    return DreamerConfig(**({"env_id": "GameBoy-v0", "obs_kind": "pixels"} | overrides))
