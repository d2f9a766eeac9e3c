"""FlattenTokenDigitsAction: the Dict {token, digits} action as one MultiDiscrete, for flat-action clients."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from worldgym.action_checks import integer_action


class FlattenTokenDigitsAction(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """Turn ``Dict(token: Discrete(n), digits: MultiDiscrete([10]*5))`` into ``MultiDiscrete([n, 10, ...])``.

    This is what Stable-Baselines3 (which has no Dict action spaces) needs; the observation, a
    ``MultiDiscrete`` of token ids, is already one SB3 one-hot encodes. Actions are checked by
    :func:`worldgym.action_checks.integer_action`: integers of any integer dtype (array, list or tuple) of
    shape ``(6,)`` within ``nvec``; floats, bools, strings or ``None`` raise ``TypeError``, a wrong shape or
    range ``ValueError``, before the wrapped env is stepped.

    >>> import gymnasium as gym, worldgym
    >>> env = FlattenTokenDigitsAction(gym.make("ZTokenDigits-v1", num_z_tokens=4))
    >>> env.action_space
    MultiDiscrete([ 5 10 10 10 10 10])
    >>> env.action(np.array([4, 0, 0, 1, 2, 3]))["digits"].tolist()
    [0, 0, 1, 2, 3]
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ActionWrapper.__init__(self, env)
        inner = env.action_space
        if not (isinstance(inner, spaces.Dict) and set(inner.spaces) == {"token", "digits"}):
            raise TypeError(f"FlattenTokenDigitsAction needs a Dict(token, digits) action space, got {inner}")
        token_space, digit_space = inner["token"], inner["digits"]
        if not isinstance(token_space, spaces.Discrete) or not isinstance(digit_space, spaces.MultiDiscrete):
            raise TypeError(f"expected token: Discrete and digits: MultiDiscrete, got {inner}")
        self.action_space = spaces.MultiDiscrete(
            np.concatenate([[int(token_space.n)], digit_space.nvec]).astype(np.int64)
        )

    def action(self, action: np.ndarray) -> dict[str, Any]:
        """Split ``[token, d0, ..., d4]`` into the env's Dict action."""
        space = self.action_space
        flat = integer_action(action, "action", space.shape, space.nvec)
        return {"token": int(flat[0]), "digits": flat[1:].copy()}
