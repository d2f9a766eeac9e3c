"""CSRPhone-v1's scripted expert as a text policy: the demonstrations a warm start imitates."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from worldgym.env_training import Untrained
from worldgym.envs.csr_phone.policies import ExpertPolicy
from worldgym.wrappers import format_tool_call

__all__ = ["CSRTextExpert"]


class CSRTextExpert:
    """CSRPhone-v1's scripted expert writing Hermes text, name first (a model picks the tool, then writes its
    arguments); a new episode starts at every reset (``tools`` in info).

    ``mistake_rate``: the share of turns where a typical agent mistake (:meth:`ExpertPolicy.mistake`) is executed
    instead, as an :class:`~worldgym.env_training.Untrained` action: the chat then shows the expert recovering
    from it, the states a cloned policy's own slips lead to (DART-style noise, Laskey et al. 2017), and SFT
    learns only the recovery. ``seed`` draws the mistakes.
    """

    def __init__(self, mistake_rate: float = 0.0, seed: int = 0) -> None:
        self._policy = ExpertPolicy()
        self.mistake_rate = mistake_rate
        self._rng = np.random.default_rng(seed)

    def __call__(self, env: gym.Env, observation: str, info: dict[str, Any]) -> str:
        if "tools" in info:
            self._policy = ExpertPolicy()
            self._policy.reset(observation, info)
        call = self._policy.act(observation, info)
        if self.mistake_rate and self._rng.random() < self.mistake_rate:
            mistake = self._policy.mistake(call, self._rng)
            if mistake is not None:
                self._policy.executed(mistake)
                return Untrained(format_tool_call(mistake))
        return format_tool_call(call)
