"""ReasoningGym-v0's expert: the task's reference answer, the demonstrations a warm start imitates."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["NoisyReferenceExpert"]


class NoisyReferenceExpert:
    """Answers ``<answer>reference</answer>``; with probability ``noise`` another task's answer instead (right by
    chance only when the two tasks share an answer). ``seed`` draws the noise."""

    def __init__(self, seed: int = 0, noise: float = 0.0) -> None:
        self.noise = noise
        self._rng = np.random.default_rng(seed)

    def __call__(self, env: gym.Env, observation: str, info: dict[str, Any]) -> str:
        task = env.unwrapped
        answer = task.entry["answer"]
        if self._rng.random() < self.noise:
            answer = task.entries[int(self._rng.integers(len(task.entries)))]["answer"]
        return f"<answer>{answer}</answer>"
