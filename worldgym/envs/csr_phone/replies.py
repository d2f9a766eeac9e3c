"""``classify_reply``: the response type of a representative's reply, read back from its text.

Every reply the env speaks is an optional greeting followed by one paraphrase of its response type
(:mod:`worldgym.envs.csr_phone.phrases`). Each template becomes a regular expression whose slots (company,
department, agent, phone number, ...) match any text on one line, so a reply, the env's own or a model's
prediction of one, is classified exactly when it follows a template and is ``None`` otherwise.
"""

from __future__ import annotations

import re
import string
from functools import lru_cache

from worldgym.envs.csr_phone.phrases import GREETINGS, INVALID_NUMBER, PARAPHRASES

__all__ = ["classify_reply"]

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
