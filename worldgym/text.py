"""Unicode text for observations and actions: a ``Text`` space that holds any string, and the one documented
change an env may make to observation text (a length limit; lone surrogates replaced), reported in ``info``.

Text envs carry a user's data unchanged: ``Janet’s``, ``€``, ``¾``, non-breaking spaces and text in any script
reach the agent as they are in the file. :class:`UnicodeText` admits every ``str`` up to its length; its
``sample()`` draws from :data:`SAMPLE_CHARSET`, so Gymnasium's ``check_env`` and fuzzers still work.

>>> space = UnicodeText(8)
>>> space.contains("Janet’s"), space.contains("¾ of 12"), space.contains("x" * 9), space.contains(b"ab")
(True, True, False, False)
>>> fit_observation_text("a" * 40, 20)
('aaaaa ...[truncated]', {'truncated_from': 40})
>>> fit_observation_text("caf\\u00e9 \\ud800", 20)
('café \\ufffd', {'surrogates_replaced': 1})
>>> stored_action_text("b" * 40, 20)
'bbbbb ...[truncated]'
"""

from __future__ import annotations

import re
import string
from typing import Any

from gymnasium import spaces

__all__ = ["MAX_STORED_ACTION_CHARS", "OBSERVATION_CHANGES", "SAMPLE_CHARSET", "TRUNCATION_MARKER", "UnicodeText",
           "fit_observation_text", "stored_action_text"]

# What ``UnicodeText.sample`` draws from: printable ASCII plus letters, punctuation, currency, fractions and
# spaces from real data (GSM8K's questions hold each of these), a few other scripts and an emoji. Membership
# does not depend on it: ``contains`` admits any character.
SAMPLE_CHARSET = string.printable + "éñüßçøåÉÑ’‘“”–—…€£¢¥¾½³²°×÷\u00a0\u2028中文日本語한국어ΩπДж🙂"
# The ``info`` key that reports how an env changed an observation's text (absent when it is unchanged).
OBSERVATION_CHANGES = "observation_changes"
# Appended to an observation cut to its space's length.
TRUNCATION_MARKER = " ...[truncated]"
# The most characters of one action an env keeps for ``render()`` (what it keeps per episode stays bounded).
MAX_STORED_ACTION_CHARS = 2000
_SURROGATE = re.compile("[\ud800-\udfff]")


class UnicodeText(spaces.Text):
    """A ``Text`` space of any string of ``min_length`` to ``max_length`` characters (code points).

    Unlike Gymnasium's ``Text``, membership does not depend on a character set: ``contains(x)`` is True for
    every ``str`` whose length is in range, whatever its characters. ``sample()`` draws from ``charset``
    (:data:`SAMPLE_CHARSET` by default).

    Args:
        max_length: the longest string admitted.
        min_length: the shortest string admitted (default 0).
        charset: the characters ``sample()`` draws from.
        seed: the seed of the space's RNG.
    """

    def __init__(self, max_length: int, *, min_length: int = 0, charset: str = SAMPLE_CHARSET,
                 seed: int | None = None):
        super().__init__(max_length, min_length=min_length, charset=charset, seed=seed)

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a ``str`` of ``min_length`` to ``max_length`` characters (any characters)."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object, /) -> bool:
        return (isinstance(other, UnicodeText) and self.min_length == other.min_length
                and self.max_length == other.max_length)

    def __hash__(self) -> int:
        return hash((type(self), self.min_length, self.max_length))


def fit_observation_text(text: str, max_length: int) -> tuple[str, dict[str, int]]:
    """``text`` fitted to an observation space of ``max_length`` characters, and what was changed.

    Every character is kept except two documented changes: lone surrogates (``"\\ud800"``: not Unicode text,
    no UTF-8 encoder or tokenizer accepts them) become U+FFFD, and text longer than ``max_length`` is cut,
    ending with :data:`TRUNCATION_MARKER`. The second value reports them for ``info[OBSERVATION_CHANGES]``:
    ``surrogates_replaced`` (how many) and ``truncated_from`` (the length before the cut); empty when the
    text is unchanged.
    """
    changes: dict[str, int] = {}
    fitted, replaced = _SURROGATE.subn("\ufffd", text)
    if replaced:
        changes["surrogates_replaced"] = replaced
    if len(fitted) > max_length:
        changes["truncated_from"] = len(fitted)
        keep = max(0, max_length - len(TRUNCATION_MARKER))
        fitted = (fitted[:keep] + TRUNCATION_MARKER)[:max_length]
    return fitted, changes


def stored_action_text(text: str, max_length: int = MAX_STORED_ACTION_CHARS) -> str:
    """``text`` as an env keeps it after the step (for ``render()``): cut as :func:`fit_observation_text` cuts
    observations, so a client that sends megabytes per call does not grow the env by megabytes per call."""
    return fit_observation_text(text, max_length)[0]
