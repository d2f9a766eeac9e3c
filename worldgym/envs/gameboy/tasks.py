"""Tasks for GameBoyVecEnv: reward and termination read from emulator RAM or the screen, one row per env.

A task sees the batched emulator state after every step as numpy views: ``memory`` (N, 0x8000) covering
0x8000-0xFFFF and ``observations`` (N, 72, 80) shades. Tasks never call into the emulator's kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from worldgym.config import check_field, check_positive_int
from worldgym.envs.gameboy import homebrew
from worldgym.envs.gameboy.layout import MEM_BASE

ACTIONS: tuple[str, ...] = ("noop", "a", "b", "start", "select", "up", "down", "left", "right")


class Task(Protocol):
    """What GameBoyVecEnv needs from a task."""

    name: str
    max_steps: int
    # WRAM/HRAM/IO addresses the task reads or writes; None means all of 0x8000-0xFFFF. On a GPU only these
    # bytes are copied to the host each step, and on_reset may only change these.
    ram_addresses: tuple[int, ...] | None

    def on_reset(self, memory: np.ndarray, env_mask: np.ndarray, rng: np.random.Generator) -> None:
        """Called after envs in ``env_mask`` were restored from the start snapshot; may edit their WRAM."""

    def evaluate(self, memory: np.ndarray, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (reward float32 (N,), terminated bool (N,)) for the state after a step.

        Also called after ``reset()`` and after each auto-reset (the new episodes' first observation sets any
        baseline), so a second call on unchanged memory and screens must leave the state as it is."""

    # A task that keeps state between steps (e.g. a reward baseline) also defines
    # ``state_dict() -> dict[str, np.ndarray]`` and ``load_state_dict(state)`` so that GameBoyVecEnv's
    # save_state/load_state continue the run exactly; the env treats a task without them as stateless.


def _arrays(**fields: np.ndarray | None) -> dict[str, np.ndarray]:
    """The fields that are set, as copies (a task's ``state_dict``)."""
    return {name: np.array(value) for name, value in fields.items() if value is not None}


def _optional(state: dict[str, np.ndarray], name: str) -> np.ndarray | None:
    return np.array(state[name]) if name in state else None


def _byte(memory: np.ndarray, addr: int) -> np.ndarray:
    return memory[:, addr - MEM_BASE].astype(np.int32)


def unpack_shades(observations: np.ndarray) -> np.ndarray:
    """(N, 72, 80) shades from observations that may be packed 4 pixels a byte, (N, 72, 20), first pixel high.

    >>> unpack_shades(np.array([[[0b00011011] * 20] * 72], dtype=np.uint8))[0, 0, :4].tolist()
    [0, 1, 2, 3]
    """
    if observations.shape[-1] == 80:
        return observations
    shifts = np.array([6, 4, 2, 0], dtype=np.uint8)
    shades = (observations[..., None] >> shifts) & 3
    return shades.reshape(*observations.shape[:-1], observations.shape[-1] * 4)


@dataclass
class SpriteGoalTask:
    """Homebrew task: move the block sprite onto the ring. Reward: -0.01 per step, +0.01 per pixel of
    Manhattan progress toward the goal, +10 on reaching it (distance <= ``tolerance``), which terminates.

    ``randomize_start`` places the block at a seeded random position on every reset.
    """

    name: str = "SpriteGoal"
    max_steps: int = 128
    ram_addresses: tuple[int, ...] | None = (
        homebrew.PLAYER_Y,
        homebrew.PLAYER_X,
        homebrew.GOAL_Y,
        homebrew.GOAL_X,
    )
    tolerance: int = 4
    randomize_start: bool = True
    _distance: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_positive_int("max_steps", self.max_steps)

    @staticmethod
    def rom() -> bytes:
        """The task's ROM, assembled from source."""
        return homebrew.sprite_goal_rom()

    def distance(self, memory: np.ndarray) -> np.ndarray:
        """Manhattan distance in pixels between the block and the ring, per env."""
        dy = _byte(memory, homebrew.PLAYER_Y) - _byte(memory, homebrew.GOAL_Y)
        dx = _byte(memory, homebrew.PLAYER_X) - _byte(memory, homebrew.GOAL_X)
        return np.abs(dy) + np.abs(dx)

    def on_reset(self, memory: np.ndarray, env_mask: np.ndarray, rng: np.random.Generator) -> None:
        rows = np.flatnonzero(env_mask)
        if self.randomize_start and rows.size:
            memory[rows, homebrew.PLAYER_Y - MEM_BASE] = rng.integers(16, 80, rows.size, dtype=np.uint8)
            memory[rows, homebrew.PLAYER_X - MEM_BASE] = rng.integers(8, 80, rows.size, dtype=np.uint8)
        distance = self.distance(memory)
        if self._distance is None or self._distance.shape != distance.shape:
            self._distance = distance
        self._distance[rows] = distance[rows]

    def evaluate(self, memory: np.ndarray, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        distance = self.distance(memory)
        previous = distance if self._distance is None else self._distance
        reached = distance <= self.tolerance
        reward = -0.01 + 0.01 * (previous - distance) + 10.0 * reached
        self._distance = distance
        return reward.astype(np.float32), reached

    def state_dict(self) -> dict[str, np.ndarray]:
        """The reward baseline (distance after the last step), for GameBoyVecEnv.save_state."""
        return _arrays(distance=self._distance)

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore what ``state_dict`` returned."""
        self._distance = _optional(state, "distance")


# Pokémon Red (user-supplied ROM) RAM addresses, from the public pret/pokered disassembly symbols.
POKEMON_CURRENT_MAP = 0xD35E
POKEMON_PLAYER_Y, POKEMON_PLAYER_X = 0xD361, 0xD362
OAKS_LAB_MAP = 0x28


@dataclass
class StandingStillTask:
    """Pokémon Red world-model check: the agent keeps pressing one button (``fixed_action``, default no-op)
    and the reward is always 0, so episodes end only by truncation after ``max_steps``.

    The env does not enforce the action; agents read ``fixed_action`` (Dreamer's ``--fixed-action``).
    """

    name: str = "StandingStill"
    max_steps: int = 128
    ram_addresses: tuple[int, ...] | None = ()
    fixed_action: int = 0

    def __post_init__(self) -> None:
        check_positive_int("max_steps", self.max_steps)
        check_field(
            self.fixed_action in range(len(ACTIONS)), "fixed_action", self.fixed_action,
            f"use an index into ACTIONS, 0..{len(ACTIONS) - 1}",
        )  # fmt: skip

    def on_reset(self, memory: np.ndarray, env_mask: np.ndarray, rng: np.random.Generator) -> None:
        return None

    def evaluate(self, memory: np.ndarray, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = memory.shape[0]
        return np.zeros(n, dtype=np.float32), np.zeros(n, dtype=bool)


@dataclass
class ExitOakTask:
    """Pokémon Red: leave Oak's lab. Reward -0.01 per step, + progress toward a goal image (decrease of the
    mean absolute shade difference, in [0, 1], scaled by ``progress_scale``), +10 and termination when the map
    id at 0xD35E (wCurMap) changes from Oak's lab (0x28) to another map. An env that has not been in the lab
    since its reset (e.g. a start state on the title screen, where wCurMap reads 0) never succeeds.

    ``goal_image`` is a (72, 80) array of shades 0-3 or a path to such a ``.npy`` file; None drops the
    progress term. Packed observations (``packed_obs=True``) are unpacked before the comparison.
    """

    goal_image: np.ndarray | str | Path | None = None
    name: str = "ExitOak"
    max_steps: int = 128
    ram_addresses: tuple[int, ...] | None = (POKEMON_CURRENT_MAP,)
    progress_scale: float = 1.0
    _difference: np.ndarray | None = field(default=None, repr=False)
    _fresh: np.ndarray | None = field(default=None, repr=False)
    _in_lab: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_positive_int("max_steps", self.max_steps)
        check_field(bool(np.isfinite(self.progress_scale)), "progress_scale", self.progress_scale,
                    "use a finite number")  # fmt: skip
        if isinstance(self.goal_image, (str, Path)):
            path = Path(self.goal_image)
            check_field(path.is_file(), "goal_image", str(path), "point it at an existing .npy file")
            self.goal_image = np.load(path)
        if self.goal_image is not None:
            goal = np.asarray(self.goal_image)
            check_field(goal.shape == (72, 80), "goal_image", f"<array of shape {goal.shape}>",
                        "use a (72, 80) array of shades (an unpacked GameBoy-v0 observation)")  # fmt: skip
            valid = np.issubdtype(goal.dtype, np.integer) and goal.min() >= 0 and goal.max() <= 3
            check_field(bool(valid), "goal_image", f"<{goal.dtype} array, values {goal.min()}..{goal.max()}>",
                        "use integer shades 0 (white) to 3 (black)")  # fmt: skip
            self.goal_image = goal.astype(np.uint8)

    def _image_difference(self, observations: np.ndarray) -> np.ndarray:
        if self.goal_image is None:
            return np.zeros(observations.shape[0], dtype=np.float32)
        shades = unpack_shades(observations).astype(np.float32)
        return np.abs(shades - self.goal_image.astype(np.float32)).mean(axis=(1, 2)) / 3.0

    def on_reset(self, memory: np.ndarray, env_mask: np.ndarray, rng: np.random.Generator) -> None:
        if self._fresh is None or self._fresh.shape != env_mask.shape:
            self._fresh = np.ones_like(env_mask, dtype=bool)
        self._fresh |= env_mask  # progress of these envs restarts from their next observation
        in_lab = _byte(memory, POKEMON_CURRENT_MAP) == OAKS_LAB_MAP
        if self._in_lab is None or self._in_lab.shape != in_lab.shape:
            self._in_lab = in_lab
        self._in_lab[env_mask] = in_lab[env_mask]

    def evaluate(self, memory: np.ndarray, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        difference = self._image_difference(observations)
        previous = difference if self._difference is None else self._difference
        if self._fresh is not None:
            previous = np.where(self._fresh, difference, previous)
            self._fresh[:] = False
        self._difference = difference
        in_lab = _byte(memory, POKEMON_CURRENT_MAP) == OAKS_LAB_MAP
        was_in_lab = in_lab if self._in_lab is None else self._in_lab
        left = was_in_lab & ~in_lab
        self._in_lab = in_lab | was_in_lab
        reward = -0.01 + self.progress_scale * (previous - difference) + 10.0 * left
        return reward.astype(np.float32), left

    def state_dict(self) -> dict[str, np.ndarray]:
        """Progress baseline, envs restarting it, envs that were in the lab (for GameBoyVecEnv.save_state)."""
        return _arrays(difference=self._difference, fresh=self._fresh, in_lab=self._in_lab)

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore what ``state_dict`` returned."""
        self._difference = _optional(state, "difference")
        self._fresh = _optional(state, "fresh")
        self._in_lab = _optional(state, "in_lab")


TASKS = {"sprite_goal": SpriteGoalTask, "standing_still": StandingStillTask, "exit_oak": ExitOakTask}
