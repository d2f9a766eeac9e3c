"""GSM8K-style word problems generated offline from templates: computed answers, splits, difficulty."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from worldgym.config import check_choice, check_field, check_positive_int
from worldgym.errors import ConfigError

__all__ = ["TEMPLATES", "MathProblem", "Split", "generate_problems", "split_of"]

Split = Literal["train", "test"]

_NAMES = ("Tom", "Ana", "Ben", "Mia", "Sam", "Lea", "Max", "Zoe", "Leo", "Ivy")
_ITEMS = ("apples", "pens", "books", "cards", "shells", "coins", "stickers", "marbles")
_MAX_MISSES = 2000
_TEST_FRACTION_MOD = 5  # one question in five (by hash) belongs to the test split


@dataclass(frozen=True)
class MathProblem:
    """One word problem: the question, a worked solution ending in ``#### answer``, the answer, its
    difficulty."""

    question: str
    solution: str
    answer: float
    difficulty: int
    source: str = "template"

    @property
    def answer_text(self) -> str:
        """The answer as a GSM8K writes it (an integer without ``.0`` when it is one)."""
        return str(int(self.answer)) if float(self.answer).is_integer() else f"{self.answer:g}"


def split_of(question: str) -> Split:
    """The split a question belongs to, from a stable hash of its text, so train and test never share a
    question."""
    return "test" if zlib.crc32(question.encode()) % _TEST_FRACTION_MOD == 0 else "train"


# Each template draws numbers from ``rng`` and returns (question, solution steps, answer).
Template = Callable[[np.random.Generator, int], tuple[str, list[str], int]]


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _n(rng: np.random.Generator, scale: int, low: int = 1) -> int:
    """A number whose range grows with difficulty: 1-9, 2-30, 5-200 for scale 1, 2, 3."""
    high = {1: 9, 2: 30, 3: 200}[scale]
    return int(rng.integers(max(low, 1), high + 1))


def _buy_more(rng: np.random.Generator, scale: int) -> tuple[str, list[str], int]:
    name, item, a, b = _pick(rng, _NAMES), _pick(rng, _ITEMS), _n(rng, scale), _n(rng, scale)
    return (
        f"{name} has {a} {item}. {name} gets {b} more. How many {item} does {name} have now?",
        [f"{a} + {b} = {a + b}"],
        a + b,
    )


def _give_away(rng: np.random.Generator, scale: int) -> tuple[str, list[str], int]:
    name, item, b = _pick(rng, _NAMES), _pick(rng, _ITEMS), _n(rng, scale)
    a = b + _n(rng, scale)
    return (
        f"{name} had {a} {item} and gave {b} to a friend. How many {item} are left?",
        [f"{a} - {b} = {a - b}"],
        a - b,
    )


def _boxes(rng: np.random.Generator, scale: int) -> tuple[str, list[str], int]:
    item, boxes, per = _pick(rng, _ITEMS), _n(rng, max(scale - 1, 1), 2), _n(rng, scale)
    return (
        f"There are {boxes} boxes with {per} {item} in each box. How many {item} are there in total?",
        [f"{boxes} * {per} = {boxes * per}"],
        boxes * per,
    )


def _share(rng: np.random.Generator, scale: int) -> tuple[str, list[str], int]:
    name, item, kids, each = _pick(rng, _NAMES), _pick(rng, _ITEMS), _n(rng, 1, 2), _n(rng, scale)
    total = kids * each
    return (
        f"{name} shares {total} {item} equally among {kids} children. How many {item} does each child get?",
        [f"{total} / {kids} = {each}"],
        each,
    )


def _buy_then_eat(rng: np.random.Generator, scale: int) -> tuple[str, list[str], int]:
    name, item, a, b = _pick(rng, _NAMES), _pick(rng, _ITEMS), _n(rng, scale), _n(rng, scale)
    c = int(rng.integers(1, a + b + 1))
    return (
        f"{name} has {a} {item}, finds {b} more and then loses {c}. How many {item} does {name} have?",
        [f"{a} + {b} = {a + b}", f"{a + b} - {c} = {a + b - c}"],
        a + b - c,
    )


def _price(rng: np.random.Generator, scale: int) -> tuple[str, list[str], int]:
    name, item, count, price = _pick(rng, _NAMES), _pick(rng, _ITEMS), _n(rng, scale), _n(rng, scale)
    fee = _n(rng, scale)
    cost = count * price
    return (
        (f"{name} buys {count} {item} at ${price} each and pays a ${fee} delivery fee. "
         f"How many dollars does {name} pay in total?"),
        [f"{count} * {price} = {cost}", f"{cost} + {fee} = {cost + fee}"],
        cost + fee,
    )


def _weeks(rng: np.random.Generator, scale: int) -> tuple[str, list[str], int]:
    name, per_day, days, weeks = _pick(rng, _NAMES), _n(rng, scale), int(rng.integers(2, 8)), _n(rng, 1, 2)
    week = per_day * days
    return (
        (f"{name} reads {per_day} pages a day, {days} days a week. How many pages does {name} read in "
         f"{weeks} weeks?"),
        [f"{per_day} * {days} = {week}", f"{week} * {weeks} = {week * weeks}"],
        week * weeks,
    )


def _savings(rng: np.random.Generator, scale: int) -> tuple[str, list[str], int]:
    name, start, weekly, weeks = _pick(rng, _NAMES), _n(rng, scale), _n(rng, scale), _n(rng, 1, 2)
    spent = int(rng.integers(1, start + weekly * weeks + 1))
    saved, total = weekly * weeks, start + weekly * weeks
    return (
        (f"{name} has ${start}, saves ${weekly} every week for {weeks} weeks and then spends ${spent}. "
         f"How many dollars are left?"),
        [
            f"{weekly} * {weeks} = {saved}",
            f"{start} + {saved} = {total}",
            f"{total} - {spent} = {total - spent}",
        ],
        total - spent,
    )


# Templates by difficulty: 1 = one operation on small numbers; 2 = two operations; 3 = up to three, larger
# numbers.
TEMPLATES: dict[int, tuple[Template, ...]] = {
    1: (_buy_more, _give_away, _boxes, _share),
    2: (_buy_then_eat, _price, _weeks, _boxes, _share),
    3: (_price, _weeks, _savings, _buy_then_eat),
}


def generate_problems(
    num_problems: int, split: Split = "train", difficulty: int | Sequence[int] = 1, seed: int = 0
) -> list[MathProblem]:
    """``num_problems`` distinct problems of ``split`` at the given difficulty level(s), reproducible from
    ``seed``.

    Questions are drawn until enough land in the requested split (see :func:`split_of`); duplicates are
    skipped.

    >>> problem = generate_problems(1, seed=0)[0]
    >>> problem.solution.endswith(f"#### {problem.answer_text}")
    True
    """
    check_positive_int("num_problems", num_problems)
    check_choice("split", split, ["train", "test"])
    levels = [difficulty] if isinstance(difficulty, int) else list(difficulty)
    bad = [level for level in levels if level not in TEMPLATES]
    check_field(bool(levels) and not bad, "difficulty", difficulty,
                f"use one of {sorted(TEMPLATES)} or a list of them")
    rng = np.random.default_rng([seed, 0 if split == "train" else 1])
    problems: dict[str, MathProblem] = {}
    misses = 0  # consecutive draws that gave nothing new: the space of distinct questions is exhausted
    while len(problems) < num_problems and misses < _MAX_MISSES:
        misses += 1
        level = levels[int(rng.integers(len(levels)))]
        template = TEMPLATES[level][int(rng.integers(len(TEMPLATES[level])))]
        question, steps, answer = template(rng, level)
        if question in problems or split_of(question) != split:
            continue
        solution = "\n".join([*steps, f"#### {answer}"])
        problems[question] = MathProblem(question, solution, float(answer), level)
        misses = 0
    if len(problems) < num_problems:
        raise ConfigError(
            f"num_problems={num_problems} is invalid: only {len(problems)} distinct {split} problems exist at "
            f"difficulty {difficulty!r}; ask for fewer or add difficulty levels"
        )
    return list(problems.values())
