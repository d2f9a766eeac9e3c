"""GameBoyEnv: one Game Boy as a plain ``gymnasium.Env`` (``gym.make("GameBoy-v0")``), run by GameBoyVecEnv."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded

from worldgym.action_checks import integer_action
from worldgym.config import check_choice
from worldgym.envs.gameboy.tasks import ACTIONS, unpack_shades
from worldgym.envs.gameboy.vector_env import GameBoyEnvConfig, GameBoyVecEnv

FRAMES_PER_SECOND = 59.7275  # the DMG's frame rate (4194304 Hz / 70224 T-cycles per frame)
_RGB_SHADES = np.array([255, 170, 85, 0], dtype=np.uint8)  # GameBoyVecEnv.render's palette


class GameBoyEnv(gym.Env[np.ndarray, np.integer]):
    """A single Game Boy with GameBoy-v0's tasks and settings, for single-env clients (SB3, sheeprl, ...).

    ## Description
    A one-emulator :class:`GameBoyVecEnv` does the work, so the emulator, tasks, rewards and settings
    (:class:`GameBoyEnvConfig`) are the vector env's; see its docstring. ``gym.make("GameBoy-v0", ...)`` builds
    this env and ``gym.make_vec("GameBoy-v0", num_envs=N)`` the batched vector env.

    ## Spaces
    Those of one sub-env of the vector env: ``Discrete(len(ACTIONS))`` actions and ``Box(0, 3, (72, 80),
    uint8)`` shades (``Box(0, 255, (72, 20), uint8)`` with ``packed_obs=True``).

    ## Actions
    An integer in ``[0, len(ACTIONS))`` of any integer dtype (Python int, numpy scalar or 0-d array); other
    types raise ``TypeError``, other values or shapes ``ValueError`` (see :mod:`worldgym.action_checks`).

    ## Episode end
    The vector env resets a finished emulator in the same step; this env hides that: the finishing step
    returns the episode's last observation, ``render()`` then shows that observation scaled back up to
    144x160 (the screen itself already shows the next start), and ``step`` raises
    ``gymnasium.error.ResetNeeded`` until ``reset()`` is called. The final step's ``info["success"]`` says whether the goal was reached (earlier
    steps report ``False``). With the same seed and actions, this env follows the same trajectory as
    ``GameBoyVecEnv(num_envs=1)`` (the task draws from this env's ``np_random``).

    ## Arguments
    render_mode: None or "rgb_array" (the screen, 144x160 RGB).
    config: a :class:`GameBoyEnvConfig`; or pass its fields as keyword arguments (below), not both.

    ## Version History
    * v0: initial version (``gym.make`` used to fail: GameBoy-v0 had only a vector entry point).
    """

    # render_fps: steps per second at the default 24 frames a step; __init__ sets it from frames_per_step
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 2}

    def __init__(
        self,
        render_mode: Literal["rgb_array"] | None = None,
        config: GameBoyEnvConfig | None = None,
        **settings: Any,
    ) -> None:
        check_choice("render_mode", render_mode, [None, "rgb_array"])
        self.vector_env = GameBoyVecEnv(num_envs=1, render_mode=render_mode, config=config, **settings)
        self.config = self.vector_env.config
        self.render_mode = render_mode
        self.observation_space = self.vector_env.single_observation_space
        self.action_space = self.vector_env.single_action_space
        fps = max(1, round(FRAMES_PER_SECOND / self.config.frames_per_step))
        self.metadata = {**type(self).metadata, "render_fps": fps}
        self._needs_reset = True
        self._final_obs: np.ndarray | None = None  # the last observation of a finished episode

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode from the start snapshot (the task may randomize it from ``np_random``)."""
        if options and "reset_mask" in options:
            raise ValueError("options['reset_mask'] is for the vector env; a single GameBoyEnv always resets")
        super().reset(seed=seed)
        self.vector_env.np_random = self.np_random  # one generator: the task draws from this env's
        observations, _ = self.vector_env.reset(options=options)
        self._needs_reset = False
        self._final_obs = None
        return observations[0], {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Press the action's button for ``press_frames`` of ``frames_per_step`` frames and score the result."""
        if self._needs_reset:
            raise ResetNeeded("GameBoyEnv.step needs reset() first: at the start and after an episode ends")
        actions = integer_action(action, "action", (), len(ACTIONS)).reshape(1)
        observations, rewards, terminated, truncated, infos = self.vector_env.step(actions)
        done = bool(terminated[0] or truncated[0])
        observation = infos["final_obs"][0] if done else observations[0]
        self._needs_reset = done
        self._final_obs = observation if done else None
        info = {"success": bool(terminated[0])}
        return observation, float(rewards[0]), bool(terminated[0]), bool(truncated[0]), info

    def render(self) -> np.ndarray | None:
        """The RGB frame (144, 160, 3) of the last step when ``render_mode="rgb_array"``, else None.

        After the final step of an episode: its last observation, each pixel repeated 2x2."""
        if self.render_mode != "rgb_array":
            return None
        if self._final_obs is None:
            return self.vector_env.render()[0]
        shades = unpack_shades(self._final_obs[None])[0].repeat(2, axis=0).repeat(2, axis=1)
        return np.repeat(_RGB_SHADES[shades][..., None], 3, axis=-1)

    def close(self) -> None:
        """Release the emulator."""
        self.vector_env.close()
        super().close()
