"""ZTokenDigits-v1's scripted behaviour policy: the episodes the Z-token agent's warm start learns from."""

from __future__ import annotations

import numpy as np

__all__ = ["ScriptedZPolicy"]


class ScriptedZPolicy:
    """Acts on ``num_envs`` batched ZTokenDigits envs: each episode emits ``k ~ U{z_min..z_max}`` tokens
    ``<Z_0>, <Z_1>, ...`` and then ``<ANSWER>`` (digits all 0: a warm start takes the true digits from the env's
    reward breakdown, ``info["digit_true"]``).

    Call :meth:`begin` before a batch of episodes (it draws every env's ``k``), :meth:`act` for the batch's
    actions and :meth:`advance` after each step (a finished env draws a new ``k``). ``rng`` (else one seeded by
    ``seed``) draws every ``k``.

    >>> policy = ScriptedZPolicy(num_envs=2, num_z=4, z_min=1, z_max=1, seed=0)
    >>> policy.begin()
    >>> policy.act()["token"].tolist(), policy.advance([False, False]), policy.act()["token"].tolist()
    ([0, 0], None, [4, 4])
    """

    def __init__(self, num_envs: int, num_z: int, z_min: int, z_max: int, seed: int = 0,
                 rng: np.random.Generator | None = None) -> None:
        self.num_envs, self.num_z, self.z_min, self.z_max = num_envs, num_z, z_min, z_max
        self.rng = rng if rng is not None else np.random.default_rng(seed)
        self._targets = np.zeros(num_envs, dtype=np.int64)
        self._emitted = np.zeros(num_envs, dtype=np.int64)

    def begin(self) -> None:
        """Draw every env's number of Z tokens; none emitted yet."""
        self._targets = self.rng.integers(self.z_min, self.z_max + 1, size=self.num_envs)
        self._emitted = np.zeros(self.num_envs, dtype=np.int64)

    def act(self) -> dict[str, np.ndarray]:
        """The next token of every env (``<ANSWER>``, id ``num_z``, once its Z tokens are out), digits 0."""
        tokens = np.where(self._emitted >= self._targets, self.num_z, self._emitted % self.num_z)
        return {"token": tokens, "digits": np.zeros((self.num_envs, 5), dtype=np.int64)}

    def advance(self, done: np.ndarray | list[bool]) -> None:
        """One token more for every env; a finished env starts over with a newly drawn number."""
        self._emitted[:] += 1
        for i in np.flatnonzero(done):
            self._targets[i], self._emitted[i] = self.rng.integers(self.z_min, self.z_max + 1), 0
