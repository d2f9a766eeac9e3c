"""MathQA-v1's expert: the worked solution, the demonstrations a warm start imitates."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["NoisyMathExpert"]


class NoisyMathExpert:
    """Writes the problem's worked solution; with probability ``noise`` its final answer is wrong by 1 or 2 (the
    worked steps are kept), so a model imitating it leaves GRPO something to improve. ``seed`` draws the noise.

    >>> from worldgym.envs.math_qa import MathQAEnv
    >>> env = MathQAEnv(num_problems=4)
    >>> observation, info = env.reset(seed=0)
    >>> env.step(NoisyMathExpert()(env, observation, info))[1]
    1.0
    """

    def __init__(self, seed: int = 0, noise: float = 0.0) -> None:
        self.noise = noise
        self._rng = np.random.default_rng(seed)

    def __call__(self, env: gym.Env, observation: str, info: dict[str, Any]) -> str:
        problem = env.unwrapped.problem(info["index"])
        if self._rng.random() < self.noise:  # keep the worked steps, corrupt the final answer
            wrong = int(problem.answer) + int(self._rng.choice([-2, -1, 1, 2]))
            return problem.solution.rsplit("####", 1)[0] + f"#### {wrong}"
        return problem.solution
