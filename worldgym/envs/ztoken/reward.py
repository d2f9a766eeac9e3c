"""The env-owned digit reward: full credit, seeded keep-prob partial credit and a length penalty."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from worldgym.config import check_field, check_range
from worldgym.envs.ztoken.problems import NUM_DIGITS

TerminatedBy = Literal["answer", "max_new_tokens"]


@dataclass(frozen=True)
class RewardConfig:
    """Reward parameters.

    Attributes:
        partial_scale (float): scale of the partial credit ``correct / applied`` when some digit is wrong.
        keep_prob (tuple[float, ...]): per position (MSB first), probability that a position whose true digit
            is 0 counts towards partial credit; positions with a non-zero true digit always count.
        length_penalty (float): subtracted once per generated token (Z tokens and ``<ANSWER>``), on
            truncation as well.
    """

    partial_scale: float = 0.5
    keep_prob: tuple[float, ...] = (0.02, 0.05, 0.1, 0.5, 1.0)
    length_penalty: float = 0.0

    def __post_init__(self) -> None:
        check_range("partial_scale", self.partial_scale, 0, 1)
        check_field(len(self.keep_prob) == NUM_DIGITS and all(0.0 <= p <= 1.0 for p in self.keep_prob),
                    "keep_prob", self.keep_prob, f"use {NUM_DIGITS} probabilities in [0, 1]")
        check_range("length_penalty", self.length_penalty, 0, None)


@dataclass(frozen=True)
class RewardBreakdown:
    """Every term of one episode's reward; ``reward_final`` is what ``step`` returns.

    ``length_penalty`` is the total charged (``RewardConfig.length_penalty * num_generated``), on truncation
    too: a truncated episode's ``reward_final`` is ``-length_penalty``, whatever ``reward_full`` and
    ``reward_partial`` (logged for the digits it would have given) say.
    """

    terminated_by: TerminatedBy
    num_generated: int
    digit_pred: list[int]
    digit_true: list[int]
    reward_full: float
    partial_scale: float
    keep_prob: list[float]
    applied_mask: list[int]
    applied_count: int
    correct_count: int
    reward_partial: float
    length_penalty: float
    reward_final: float

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict."""
        return asdict(self)


def score_answer(
    digit_pred: np.ndarray,
    digit_true: tuple[int, ...],
    num_generated: int,
    terminated_by: TerminatedBy,
    config: RewardConfig,
    rng: np.random.Generator,
) -> RewardBreakdown:
    """Score predicted digits against the truth.

    ``reward_final = (1 if all digits match else partial_scale * correct / applied) - length_penalty * n``;
    ``applied == 0`` gives zero partial credit. Truncation (``terminated_by == "max_new_tokens"``) earns no
    credit but is charged the same penalty, ``reward_final = -length_penalty * n``, so it never beats a wrong
    answer of the same length (with the default penalty of 0 it is exactly 0). The full and partial terms
    are still filled in for logging. The keep-prob mask is drawn from ``rng`` (the env's seeded generator)
    on every call, so the RNG stream does not depend on the prediction.
    """
    pred = [int(d) for d in digit_pred]
    true = list(digit_true)
    keep_draw = rng.random(NUM_DIGITS)
    applied = [int(t != 0 or keep_draw[i] < config.keep_prob[i]) for i, t in enumerate(true)]
    applied_count = sum(applied)
    correct_count = sum(a and p == t for a, p, t in zip(applied, pred, true, strict=True))
    reward_full = float(pred == true)
    reward_partial = config.partial_scale * correct_count / applied_count if applied_count else 0.0
    penalty = config.length_penalty * num_generated
    if terminated_by == "max_new_tokens":
        reward_final = 0.0 - penalty  # not -penalty: keeps 0.0 (not -0.0) in the logs when the penalty is 0
    else:
        reward_final = (reward_full if reward_full == 1.0 else reward_partial) - penalty
    return RewardBreakdown(
        terminated_by=terminated_by,
        num_generated=num_generated,
        digit_pred=pred,
        digit_true=true,
        reward_full=reward_full,
        partial_scale=config.partial_scale,
        keep_prob=list(config.keep_prob),
        applied_mask=applied,
        applied_count=applied_count,
        correct_count=int(correct_count),
        reward_partial=float(reward_partial),
        length_penalty=penalty,
        reward_final=float(reward_final),
    )
