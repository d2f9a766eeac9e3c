"""Final-answer grading for math word problems: extract, normalise, compare (1.0 or 0.0)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from worldgym.config import check_range

__all__ = ["MathRewardModel", "extract_answer", "normalize_number"]

_NUMBER = r"-?\$?\s?\d[\d,]*(?:\.\d+)?"
# Ordered by how explicit the marker is: the first marker that matches wins (its last occurrence).
_MARKERS = (
    re.compile(r"####\s*(" + _NUMBER + ")"),
    re.compile(r"\\boxed\{\s*(" + _NUMBER + r")\s*\}"),
    re.compile(r"the (?:final )?answer is[:\s]*(" + _NUMBER + ")", re.IGNORECASE),
    re.compile(r"answer\s*[:=]\s*(" + _NUMBER + ")", re.IGNORECASE),
)
_ANY_NUMBER = re.compile(_NUMBER)


def extract_answer(text: str) -> str | None:
    """The final answer's text in a completion, or None when it holds no number.

    Looks for ``#### 42``, ``\\boxed{42}``, "the answer is 42", "Answer: 42" (in that order), else the last
    number.

    >>> extract_answer("3 + 4 = 7\\n#### 7")
    '7'
    >>> extract_answer("So the answer is $1,200.")
    '$1,200'
    >>> extract_answer("no digits here") is None
    True
    """
    for marker in _MARKERS:
        found = marker.findall(text)
        if found:
            return found[-1].strip()
    numbers = _ANY_NUMBER.findall(text)
    return numbers[-1].strip() if numbers else None


def normalize_number(text: str | None) -> float | None:
    """``text`` as a number, ignoring ``$``, thousands commas, spaces and a trailing period; None if not
    numeric.

    >>> normalize_number("$1,234.50")
    1234.5
    >>> normalize_number("12.")
    12.0
    """
    if text is None:
        return None
    cleaned = text.replace("$", "").replace(",", "").replace(" ", "").rstrip(".")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class MathRewardModel:
    """Scores a completion 1.0 when its extracted final answer equals the reference number, else 0.0.

    Args:
        tolerance: absolute tolerance for the comparison (answers like ``7.0`` and ``7`` match).

    >>> MathRewardModel()("Answer: 42", "42")
    1.0
    >>> MathRewardModel().score("What is 6 * 7?", "6 * 7 = 42", label="42")
    1.0
    """

    def __init__(self, tolerance: float = 1e-6):
        check_range("tolerance", tolerance, 0, None)
        self.tolerance = tolerance

    def __call__(self, completion: str, reference: str | float) -> float:
        """1.0 if ``completion``'s final answer equals ``reference`` (a number or its text), else 0.0."""
        expected = reference if isinstance(reference, (int, float)) else normalize_number(str(reference))
        predicted = normalize_number(extract_answer(completion))
        if expected is None or predicted is None:
            return 0.0
        return 1.0 if abs(predicted - float(expected)) <= self.tolerance else 0.0

    def score(self, prompt: str, response: str, label: str | float) -> float:
        """The reward-model call of the GRPO design: ``response`` graded against ``label`` (the reference
        answer). The grade depends on the answer alone, so ``prompt`` is accepted and not read."""
        return self(response, label)

    def batch(self, completions: Sequence[str], references: Sequence[str | float | int]) -> list[float]:
        """Scores of many completions against their references."""
        if len(completions) != len(references):
            raise ValueError(f"got {len(completions)} completions but {len(references)} references")
        return [self(c, r) for c, r in zip(completions, references)]
