"""``classify_reply``: the response type of a representative's reply, read back from its text.

Every reply the env speaks is an optional greeting followed by one paraphrase of its response type
(:mod:`worldgym.envs.csr_phone.phrases`). Each template becomes a regular expression whose slots (company,
department, agent, phone number, ...) match any text on one line, so a reply, the env's own or a model's
prediction of one, is classified exactly when it follows a template and is ``None`` otherwise.

``nearest_reply_type`` reads a reply more leniently, for a model's free text that paraphrases a template
loosely: the type of the template whose fixed words the reply covers best, in order.
"""

from __future__ import annotations

import re
import string
from difflib import SequenceMatcher
from functools import lru_cache

from worldgym.envs.csr_phone.phrases import GREETINGS, INVALID_NUMBER, PARAPHRASES

__all__ = ["NEAREST_MIN_COVERAGE", "classify_reply", "nearest_reply_type"]

NEAREST_MIN_COVERAGE = 0.75  # share of a template's fixed words a reply must hold, in order, to be read as it
_WORD = re.compile(r"[a-z0-9']+")
_SLOT = "[^\n]+?"  # a slot's value: any text on one line, as short as the rest of the template allows


def _template_pattern(template: str) -> str:
    """``template`` as a regular expression: its fixed text literal, each ``{slot}`` a lazy one-line match."""
    parts = []
    for literal, slot, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if slot is not None:
            parts.append(_SLOT)
    return "".join(parts)


@lru_cache(maxsize=1)
def _patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """One compiled pattern per (response type, paraphrase); greetings optional, none for recordings."""
    greeting = "(?:" + "|".join(_template_pattern(g) for g in GREETINGS if g) + ")?"
    compiled = []
    for response_type, family in PARAPHRASES.items():
        prefix = "" if response_type == INVALID_NUMBER else greeting
        for template in family:
            compiled.append((response_type, re.compile(prefix + _template_pattern(template), re.DOTALL)))
    return tuple(compiled)


def classify_reply(text: str) -> str | None:
    """The response type (one of :data:`~worldgym.envs.csr_phone.phrases.RESPONSE_TYPES`) whose paraphrase
    ``text`` is, with or without one of the env's greetings; ``None`` when it follows no template (or more than
    one type's). Leading and trailing whitespace is ignored.

    >>> classify_reply("Acme Billing, Dana speaking. Perfect, your request to cancel the plan is complete. "
    ...                "Thanks for calling!")
    'task_complete'
    >>> classify_reply("This number is not assigned. Please hang up and check the number.")
    'invalid_number'
    >>> classify_reply("I am not sure what you mean.") is None
    True
    """
    if not isinstance(text, str):
        raise TypeError(f"classify_reply needs a str, got {type(text).__name__}")
    text = text.strip()
    matches = {response_type for response_type, pattern in _patterns() if pattern.fullmatch(text)}
    return matches.pop() if len(matches) == 1 else None


def _words(text: str) -> list[str]:
    """Lower-case words of ``text`` (apostrophes kept: "can't" is one word)."""
    return _WORD.findall(text.lower())


@lru_cache(maxsize=1)
def _template_words() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each paraphrase's fixed words (its slots left out), with its response type."""
    return tuple((response_type, tuple(word for literal, _, _, _ in string.Formatter().parse(template)
                                       for word in _words(literal)))
                 for response_type, family in PARAPHRASES.items() for template in family)


def nearest_reply_type(text: str, min_coverage: float = NEAREST_MIN_COVERAGE) -> str | None:
    """The response type of ``text`` read leniently: :func:`classify_reply`'s type when the reply follows a
    template, else the type of the paraphrase whose fixed words ``text`` holds the largest share of, in order
    (words, not characters; slots and any greeting are free text), when that share is at least ``min_coverage``
    and no other type's paraphrase is covered as well. ``None`` otherwise.

    >>> nearest_reply_type("Great news, I was able to cancel the plan. Is there anything else I can do?")
    'task_complete'
    >>> nearest_reply_type("Thank you for calling, I can't access your account without your billing number.") is None
    True
    """
    if not 0.0 < min_coverage <= 1.0:
        raise ValueError(f"min_coverage must be in (0, 1], got {min_coverage}")
    exact = classify_reply(text)
    if exact is not None:
        return exact
    words = _words(text)
    best: dict[str, float] = {}
    for response_type, fixed in _template_words():
        matcher = SequenceMatcher(None, fixed, words, autojunk=False)
        covered = sum(block.size for block in matcher.get_matching_blocks()) / len(fixed)
        best[response_type] = max(best.get(response_type, 0.0), covered)
    top = max(best.values())
    winners = [response_type for response_type, covered in best.items() if covered == top]
    return winners[0] if top >= min_coverage and len(winners) == 1 else None
