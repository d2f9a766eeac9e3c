"""Replay-ratio scheduling shared by every engine: the ``Ratio`` counter and the per-iteration training plan.

``Ratio`` has the semantics of ``sheeprl.utils.utils.Ratio`` (sheeprl 0.8.4, after Hafner's ``when.Ratio``)
and :class:`TrainSchedule` those of ``sheeprl.utils.utils.off_policy_schedule``; both are checked against
recorded sheeprl outputs in the tests. An *iteration* plays one step of every env (``steps_per_iter =
num_envs`` policy steps); iterations are numbered from 1.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any


class Ratio:
    """Gradient steps owed for the policy steps played so far, at ``ratio`` gradient steps per policy step.

    The first call returns ``int(step * ratio)`` and remembers ``step``; later calls return
    ``int((step - prev) * ratio)`` and advance ``prev`` by ``repeats / ratio``, so fractions carry over.

    >>> ratio = Ratio(0.5)
    >>> [ratio(s) for s in (1, 2, 3, 4, 5)]
    [0, 0, 1, 0, 1]
    """

    def __init__(self, ratio: float) -> None:
        if ratio < 0:
            raise ValueError(f"ratio={ratio!r} is invalid: use a value >= 0")
        self._ratio = float(ratio)
        self._prev: float | None = None

    def __call__(self, step: float) -> int:
        if self._ratio == 0:
            return 0
        if self._prev is None:
            self._prev = step
            return int(step * self._ratio)
        repeats = int((step - self._prev) * self._ratio)
        self._prev += repeats / self._ratio
        return repeats

    def realign(self, step: float) -> None:
        """Continue from ``step`` (the last call's step before saving) if the saved state drifted from it."""
        if self._ratio == 0 or self._prev is None:
            return
        behind = step - self._prev
        if -1e-6 <= behind < 1 / self._ratio + 1e-6:
            return
        warnings.warn(
            f"the saved replay ratio counted {self._prev} steps but the run resumes after {step}: continuing "
            f"from {step} instead of doing {int(max(behind, 0) * self._ratio)} gradient steps at once",
            stacklevel=2,
        )
        self._prev = step

    def state_dict(self) -> dict[str, Any]:
        return {"_ratio": self._ratio, "_prev": self._prev}

    def load_state_dict(self, state: dict[str, Any]) -> Ratio:
        """Restore from :meth:`state_dict` (sheeprl's key names, so its checkpoints load too)."""
        try:
            ratio, prev = float(state["_ratio"]), state["_prev"]
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"invalid Ratio state {state!r}: need keys '_ratio' and '_prev'") from err
        if ratio < 0 or (prev is not None and not math.isfinite(float(prev))):
            raise ValueError(f"invalid Ratio state {state!r}: ratio must be >= 0 and _prev finite or None")
        self._ratio, self._prev = ratio, prev
        return self


@dataclass(frozen=True)
class IterationPlan:
    """What one iteration does: play random actions or the policy, and how many gradient steps follow."""

    random_actions: bool
    gradient_steps: int


class TrainSchedule:
    """Random prefill, first training iteration, pretraining and the replay ratio of one run.

    Args:
        replay_ratio (float): gradient steps per policy step.
        learning_starts (int): policy steps of random actions (rounded down to whole iterations).
        pretrain_steps (int): extra gradient steps at the first training.
        seq_len (int): sampled sequence length; training waits until every env played that many steps.
        steps_per_iter (int): policy steps per iteration (``num_envs``).
    """

    def __init__(
        self,
        replay_ratio: float,
        learning_starts: int,
        pretrain_steps: int,
        seq_len: int,
        steps_per_iter: int,
    ) -> None:
        if pretrain_steps < 0:
            raise ValueError(f"pretrain_steps={pretrain_steps} is invalid: use a value >= 0")
        if steps_per_iter < 1:
            raise ValueError(f"steps_per_iter={steps_per_iter} is invalid: must be >= 1")
        self.steps_per_iter = steps_per_iter
        self.learning_starts = learning_starts // steps_per_iter
        self.pretrain_steps = pretrain_steps
        self.train_starts = max(self.learning_starts, seq_len, 1)
        self.ratio = Ratio(replay_ratio)

    def plan(self, iter_num: int) -> IterationPlan:
        """Plan iteration ``iter_num`` (1-based), called once per iteration after its env step."""
        random_actions = iter_num <= self.learning_starts
        if iter_num < self.train_starts:
            return IterationPlan(random_actions, 0)
        policy_step = iter_num * self.steps_per_iter
        steps = self.ratio(policy_step - (self.train_starts - 1) * self.steps_per_iter)
        if iter_num == self.train_starts:
            steps += self.pretrain_steps
        return IterationPlan(random_actions, steps)

    def state_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio.state_dict()}

    def load_state_dict(self, state: dict[str, Any], last_iter: int) -> None:
        """Restore the ratio saved after iteration ``last_iter`` and realign it to that iteration."""
        self.ratio.load_state_dict(state["ratio"])
        self.ratio.realign((last_iter + 1 - self.train_starts) * self.steps_per_iter)
