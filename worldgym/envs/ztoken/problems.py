"""Arithmetic problems with answers of at most 5 digits, split into disjoint seeded train/test sets."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import numpy as np

from worldgym.config import check_choice, check_field, check_range

NUM_DIGITS = 5
MAX_ANSWER = 10**NUM_DIGITS - 1

Operator = Literal["+", "*"]
Split = Literal["train", "test"]


@dataclass(frozen=True)
class ArithmeticProblem:
    """One problem ``left op right``; the answer is written as 5 digits, most significant first.

    >>> ArithmeticProblem(12, 34, "*").digits
    (0, 0, 4, 0, 8)
    """

    left: int
    right: int
    op: Operator

    @property
    def question(self) -> str:
        """The question text, e.g. ``"12*34="``."""
        return f"{self.left}{self.op}{self.right}="

    @property
    def answer(self) -> int:
        """The integer answer."""
        return self.left + self.right if self.op == "+" else self.left * self.right

    @property
    def digits(self) -> tuple[int, ...]:
        """The answer as 5 digits, most significant first, with leading zeros."""
        return tuple(int(ch) for ch in f"{self.answer:0{NUM_DIGITS}d}")


def split_of(problem: ArithmeticProblem, split_seed: int, test_fraction: float) -> Split:
    """Assign a problem to a split by a stable hash of its text and ``split_seed`` (no RNG state involved)."""
    digest = hashlib.blake2b(f"{split_seed}:{problem.question}".encode(), digest_size=8).digest()
    unit = int.from_bytes(digest, "big") / 2**64
    return "test" if unit < test_fraction else "train"


@dataclass(frozen=True)
class ProblemSampler:
    """Draws problems of one split; difficulty is the maximum number of digits per operand.

    Each operand first draws its digit count uniformly from ``1..operand_digits``, then its value; problems
    whose answer needs more than 5 digits or that belong to the other split are redrawn.
    """

    ops: tuple[Operator, ...] = ("+", "*")
    operand_digits: int = 2
    split: Split = "train"
    split_seed: int = 0
    test_fraction: float = 0.2
    max_tries: int = 10_000

    def __post_init__(self) -> None:
        check_field(bool(self.ops) and all(op in ("+", "*") for op in self.ops), "ops", self.ops,
                    "use a non-empty tuple of '+' and '*'")
        check_field(isinstance(self.operand_digits, int) and 1 <= self.operand_digits <= 4, "operand_digits",
                    self.operand_digits, "use an integer in [1, 4]")
        check_choice("split", self.split, ["train", "test"])
        check_range("test_fraction", self.test_fraction, 0, 1, low_open=True, high_open=True)

    @property
    def max_question_length(self) -> int:
        """Longest possible question text: two operands, an operator and ``=``."""
        return 2 * self.operand_digits + 2

    def _operand(self, rng: np.random.Generator) -> int:
        num_digits = int(rng.integers(1, self.operand_digits + 1))
        low = 0 if num_digits == 1 else 10 ** (num_digits - 1)
        return int(rng.integers(low, 10**num_digits))

    def sample(self, rng: np.random.Generator) -> ArithmeticProblem:
        """Draw one problem of this sampler's split."""
        for _ in range(self.max_tries):
            op = self.ops[int(rng.integers(len(self.ops)))]
            problem = ArithmeticProblem(self._operand(rng), self._operand(rng), op)
            if (
                problem.answer <= MAX_ANSWER
                and split_of(problem, self.split_seed, self.test_fraction) == self.split
            ):
                return problem
        raise RuntimeError(
            f"no {self.split} problem found in {self.max_tries} draws; raise test_fraction or digits"
        )
