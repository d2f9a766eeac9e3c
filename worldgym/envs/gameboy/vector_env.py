"""GameBoyVecEnv: N Game Boys run by batched Warp kernels, as a Gymnasium vector env (GameBoy-v0)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

from worldgym.action_checks import bool_mask, integer_action
from worldgym.config import check_field, check_positive_int, check_range
from worldgym.envs.gameboy import layout as L
from worldgym.envs.gameboy.emulator import GameBoyEmulator
from worldgym.envs.gameboy.tasks import ACTIONS, TASKS, SpriteGoalTask, Task

OBS_H, OBS_W = 72, 80
_TASK_PREFIX = "task."  # save_state keys of the task's state arrays
_ACTION_BUTTONS = np.array([0] + [1 << L.BUTTON_BITS[name] for name in ACTIONS[1:]], dtype=np.int32)


@dataclass
class GameBoyEnvConfig:
    """Settings of GameBoyVecEnv (validated on construction).

    Args:
        rom_path: ROM file; None uses the task's own ROM (the homebrew task assembles one).
        task: A task name (``"sprite_goal"``, ``"standing_still"``, ``"exit_oak"``) or a Task object.
        savestate: Optional ``.npz`` written by ``GameBoyVecEnv.save_start_state`` to start episodes from.
        frames_per_step: Frames emulated per env step (24 as in the Pokémon Red RL setups).
        press_frames: Frames the chosen button is held at the start of a step (then released).
        boot_frames: Frames run after power-on to build the start snapshot when no savestate is given.
        packed_obs: Return observations packed 4 pixels per byte, shape (72, 20), instead of (72, 80).
        device: Warp device (``"cpu"`` or ``"cuda:0"``).
        max_episode_steps: Truncation limit; None uses the task's ``max_steps``.
    """

    rom_path: str | os.PathLike[str] | None = None
    task: str | Task = "sprite_goal"
    savestate: str | os.PathLike[str] | None = None
    frames_per_step: int = 24
    press_frames: int = 8
    boot_frames: int = 10
    packed_obs: bool = False
    device: str = "cpu"
    max_episode_steps: int | None = None

    def __post_init__(self) -> None:
        check_field(not isinstance(self.task, str) or self.task in TASKS, "task", self.task,
                    f"use one of {sorted(TASKS)} or pass a Task object")
        check_positive_int("frames_per_step", self.frames_per_step)
        check_range("press_frames", self.press_frames, 0, self.frames_per_step)
        check_range("boot_frames", self.boot_frames, 0, None)
        if self.max_episode_steps is not None:
            check_positive_int("max_episode_steps", self.max_episode_steps)
        ships_rom = self.task == "sprite_goal" or isinstance(self.task, SpriteGoalTask)
        check_field(self.rom_path is not None or ships_rom, "task", self.task,
                    "pass rom_path (a ROM you own) with it; only sprite_goal ships its ROM")


class GameBoyVecEnv(VectorEnv):
    """Batched Game Boy environment.

    ## Description
    ``num_envs`` emulators share one ROM. A step advances all of them by ``frames_per_step`` frames in one
    launch of the emulator kernel; in a step where some envs finish, a second launch runs one frame for just
    those envs after their reset (to render their first observation), leaving the others untouched. An action
    presses one button (``ACTIONS``) for ``press_frames`` frames out of ``frames_per_step``.

    ## Actions and reset masks
    ``step`` takes integers of shape ``(num_envs,)`` in ``[0, len(ACTIONS))``, of any integer dtype (array,
    list or CPU tensor); ``reset(options={"reset_mask": m})`` takes booleans of shape ``(num_envs,)``. Floats,
    bools as actions, integers as a mask, strings or ``None`` raise ``TypeError``; a wrong shape or range
    ``ValueError`` (see :mod:`worldgym.action_checks`). Both are checked before anything changes, so a
    rejected call leaves every emulator, counter and the RNG as they were.

    ## Observation
    The last frame of each step, downsampled to 72x80 shades 0 (white) to 3 (black), uint8; or packed
    (72, 20) bytes, 4 pixels per byte, first pixel in the high bits. ``observation_tensor`` is a zero-copy
    torch view of the same buffer (on the emulator's device).

    ## Rewards and episode end
    From the task object (see ``tasks.py``). Finished envs are reset in the same step from the cached start
    snapshot (``AutoresetMode.SAME_STEP``); their last observation is in ``info["final_obs"]`` and
    ``info["success"]`` says whether they reached the task's goal (terminated, not truncated). An env's
    trajectory never depends on its neighbours or on ``num_envs`` (task randomness aside: all envs draw from
    one ``np_random``).

    ## State
    ``save_state``/``load_state`` cover the emulators, step counters, ``np_random`` and the task's own state
    (tasks with ``state_dict``/``load_state_dict``), so a loaded run continues exactly as the saved one would.

    ## Version History
    * v0: initial version. Later fix, same id: float actions and integer or float reset masks raise
      ``TypeError`` (they used to be cast), and actions must have shape ``(num_envs,)`` (any shape with
      ``num_envs`` entries used to be flattened).
    """

    metadata: ClassVar[dict[str, Any]] = {
        "autoreset_mode": AutoresetMode.SAME_STEP,
        "render_modes": ["rgb_array"],
    }

    def __init__(
        self,
        num_envs: int = 1,
        render_mode: Literal["rgb_array"] | None = None,
        config: GameBoyEnvConfig | None = None,
        **settings: Any,
    ) -> None:
        check_field(config is None or not settings, "config", config,
                    f"pass either config or keyword settings ({sorted(settings)}), not both")
        check_positive_int("num_envs", num_envs)
        config = config or GameBoyEnvConfig(**settings)
        self.config = config
        self.num_envs = num_envs
        self.render_mode = render_mode
        self.task: Task = TASKS[config.task]() if isinstance(config.task, str) else config.task
        rom = Path(config.rom_path) if config.rom_path is not None else SpriteGoalTask.rom()
        self.emulator = GameBoyEmulator(rom, num_envs=num_envs, device=config.device)
        self.max_episode_steps = config.max_episode_steps or self.task.max_steps
        self._build_spaces()
        self._start = self._load_start_snapshot()
        self._steps = np.zeros(num_envs, dtype=np.int64)
        # On a GPU, tasks get only their ram_addresses copied to the host (not N x 32 KiB per step).
        self._gather_task_bytes = config.device != "cpu"
        self._buttons = self.emulator._wp.zeros(num_envs, dtype=self.emulator._wp.int32, device=config.device)

    # -------------------------------------------------------------------------------------------- setup

    def _build_spaces(self) -> None:
        wp = self.emulator._wp
        width = OBS_W // 4 if self.config.packed_obs else OBS_W
        high = 255 if self.config.packed_obs else 3
        self.single_observation_space = gym.spaces.Box(0, high, (OBS_H, width), np.uint8)
        self.single_action_space = gym.spaces.Discrete(len(ACTIONS))
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self._obs = wp.zeros((self.num_envs, OBS_H, width), dtype=wp.uint8, device=self.config.device)
        self.observation_tensor = wp.to_torch(self._obs)

    def _load_start_snapshot(self) -> dict[str, np.ndarray]:
        if self.config.savestate is not None:
            with np.load(self.config.savestate) as data:
                snapshot = {name: data[name] for name in data.files}
            self.emulator.restore(snapshot)
            return snapshot
        self.emulator.power_on()
        if self.config.boot_frames:
            self.emulator.run_frames(self.config.boot_frames)
        return self.emulator.snapshot(0)

    def save_start_state(self, path: str | os.PathLike[str], env: int = 0) -> Path:
        """Save env ``env``'s current emulator state as a ``.npz`` usable as ``savestate``."""
        path = Path(path)
        np.savez_compressed(path, **self.emulator.snapshot(env))
        return path

    # -------------------------------------------------------------------------------------------- API

    def _memory(self) -> np.ndarray:
        """Host view of 0x8000-0xFFFF for the task: zero-copy on CPU; on a GPU only ``task.ram_addresses``."""
        if not self._gather_task_bytes:
            return self.emulator.machines.mem.numpy()
        host = np.zeros((self.num_envs, L.MEM_SIZE), dtype=np.uint8)
        columns = self._task_columns()
        host[:, columns] = self.emulator.memory_tensor[:, columns].cpu().numpy()
        return host

    def _task_columns(self) -> np.ndarray:
        addresses = getattr(self.task, "ram_addresses", None)
        if addresses is None:
            return np.arange(L.MEM_SIZE)
        return np.asarray(addresses, dtype=np.int64) - L.MEM_BASE

    def _observe(self) -> np.ndarray:
        wp = self.emulator._wp
        wp.launch(self.emulator._core.downsample, dim=(self.num_envs, OBS_H, OBS_W),
                  inputs=[self.emulator.machines.screen, self._obs, int(self.config.packed_obs)],
                  device=self.config.device)  # fmt: skip
        return self._obs.numpy()

    def _reset_envs(self, mask: np.ndarray) -> None:
        self.emulator.restore(self._start, mask)
        memory = self._memory()
        self.task.on_reset(memory, mask, self.np_random)
        if self._gather_task_bytes:  # write the task's bytes back to the device
            columns = self._task_columns()
            rows = np.flatnonzero(mask)
            tensor = self.emulator.memory_tensor
            values = torch.as_tensor(memory[np.ix_(rows, columns)], device=tensor.device)
            tensor[
                torch.as_tensor(rows, device=tensor.device)[:, None],
                torch.as_tensor(columns, device=tensor.device),
            ] = values
        self._steps[mask] = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict]:
        """Restore every env (or those in ``options["reset_mask"]``) from the start snapshot.

        Restored envs run one frame (to render their first observation) in a launch that skips the others,
        which are left untouched and return their last observation.
        """
        mask = np.ones(self.num_envs, dtype=bool)
        if options and "reset_mask" in options:  # checked before the RNG is reseeded
            mask = bool_mask(options["reset_mask"], "options['reset_mask']", (self.num_envs,))
        super().reset(seed=seed)  # seeds self.np_random, which the task draws from
        if seed is not None:
            self.action_space.seed(seed)
        self._reset_envs(mask)
        self.emulator.run_frames(1, render=True, env_mask=mask)
        observations = self._observe().copy()
        self.task.evaluate(self._memory(), observations)
        return observations, {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Press the chosen buttons, run ``frames_per_step`` frames in one launch, score, auto-reset.

        Finished envs are restored and run one more frame in a second launch that skips every other env.
        """
        actions = integer_action(actions, "actions", (self.num_envs,), len(ACTIONS))
        self._buttons.assign(_ACTION_BUTTONS[actions])
        self.emulator.run_frames(self.config.frames_per_step, buttons=self._buttons,
                                 press_frames=self.config.press_frames, render=True)  # fmt: skip
        observations = self._observe().copy()
        rewards, terminated = self.task.evaluate(self._memory(), observations)
        self._steps += 1
        truncated = (self._steps >= self.max_episode_steps) & ~terminated
        infos: dict[str, Any] = {}
        done = terminated | truncated
        if done.any():
            # success: the task's goal was reached (termination); a truncated episode did not succeed
            infos = {"final_obs": observations.copy(), "_final_obs": done.copy(), "success": terminated.copy(),
                     "_success": done.copy()}
            self._reset_envs(done)
            self.emulator.run_frames(1, render=True, env_mask=done)
            fresh = self._observe()  # live envs' screens are unchanged, so this matches observation_tensor
            observations[done] = fresh[done]
            # as in reset(): the task sees the new episodes' first observation (its progress baseline); a
            # second look at the live envs' unchanged memory and screens leaves their state as it is
            self.task.evaluate(self._memory(), observations)
        return observations, rewards, terminated, truncated, infos

    def render(self) -> np.ndarray | None:
        """RGB frames (N, 144, 160, 3) of the last step when ``render_mode="rgb_array"``."""
        if self.render_mode != "rgb_array":
            return None
        shades = np.array([255, 170, 85, 0], dtype=np.uint8)
        return np.repeat(shades[self.emulator.screens()][..., None], 3, axis=-1)

    def save_state(self, path: str | os.PathLike[str]) -> Path:
        """Save every emulator, the step counters, ``np_random`` and the task's state to a ``.npz``."""
        path = Path(path)
        state = self.emulator.save_state()
        task_state = getattr(self.task, "state_dict", dict)()
        state.update({_TASK_PREFIX + name: value for name, value in task_state.items()})
        np.savez_compressed(path, steps=self._steps, rng=np.frombuffer(
            repr(self.np_random.bit_generator.state).encode(), dtype=np.uint8), **state)  # fmt: skip
        return path

    def load_state(self, path: str | os.PathLike[str]) -> None:
        """Restore a state written by ``save_state`` (same num_envs and ROM)."""
        import ast

        with np.load(path) as data:
            state = {name: data[name] for name in data.files}
        self.emulator.load_state(state)
        self._steps = state["steps"].copy()
        self.np_random.bit_generator.state = ast.literal_eval(state["rng"].tobytes().decode())
        load_task_state = getattr(self.task, "load_state_dict", None)
        if load_task_state is not None:
            start = len(_TASK_PREFIX)
            load_task_state({k[start:]: v for k, v in state.items() if k.startswith(_TASK_PREFIX)})
        self._observe()  # observation_tensor shows the loaded screens
