"""Read which option a model's reply chose: an ``<answer>`` tag, a stated letter, or the closest option text.

The rules, tried in order (the first that decides wins; ``method`` records which):

1. ``"tag"``: the last ``<answer>...</answer>`` (case-insensitive; a reply that ends inside an unclosed tag
   counts) holds an option's text (ignoring case, spacing and a final period) or a letter (``C``, ``(C)``,
   ``C: text``, ``Option C``).
2. ``"tag_closest_text"``: the tag holds other text; the option whose text is most similar by
   :class:`difflib.SequenceMatcher` wins, if its ratio reaches ``cutoff``.
3. ``"letter"``: no usable tag; the reply states a letter ("The correct answer is C", "Answer: (C)",
   "option C", or the reply is a bare letter). The last statement counts.
4. ``"option_text"``: the reply contains exactly one option's full text.
5. ``"closest_text"``: the whole reply is similar enough (``cutoff``) to one option's text.
6. ``"none"``: nothing matched; the answer is wrong.

Letters outside the question's options (F when there is no F) never match.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["PARSE_METHODS", "ParsedAnswer", "parse_answer"]

PARSE_METHODS = ("tag", "tag_closest_text", "letter", "option_text", "closest_text", "none")
_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.IGNORECASE | re.DOTALL)
# A letter in a tag: "C", "(C)", "C: text", "C) text", "Option C"; a lower-case letter only on its own ("c").
_TAG_LETTER = re.compile(
    r"^\s*(?:(?i:option)\s+)?[(\[]?([A-Z])[)\]]?\s*(?:[.:)\-].*)?$"
    r"|^\s*[(\[]?([a-z])[)\]]?[.:]?\s*$", re.DOTALL)
_STATED_LETTER = re.compile(
    r"(?i:answer\s+is|answer\s*[:=]|option|choice)\s*[:\-]?\s*[(\[]?\b([A-Z])\b[)\]]?")
_BARE_LETTER = re.compile(r"^\s*[(\[]?([A-Z])[)\]]?[.:]?\s*$")
_SPACES = re.compile(r"\s+")
_MAX_COMPARED = 2000  # characters of a reply compared by difflib (keeps hostile megabyte replies cheap)


@dataclass(frozen=True)
class ParsedAnswer:
    """The option a reply chose (None when none) and the rule that decided (one of :data:`PARSE_METHODS`)."""

    letter: str | None
    method: str


def parse_answer(text: str, options: Mapping[str, str], cutoff: float = 0.6) -> ParsedAnswer:
    """Which of ``options`` (letter -> text) ``text`` chose; see the module docstring for the rules.

    >>> options = {"A": "aspirin", "B": "heparin", "C": "morphine", "D": "insulin", "E": "warfarin"}
    >>> parse_answer("I think <answer>C</answer>", options)
    ParsedAnswer(letter='C', method='tag')
    >>> parse_answer("<answer>heparine</answer>", options)
    ParsedAnswer(letter='B', method='tag_closest_text')
    >>> parse_answer("The correct answer is D: insulin.", options)
    ParsedAnswer(letter='D', method='letter')
    >>> parse_answer("No idea.", options)
    ParsedAnswer(letter=None, method='none')
    """
    normal = {letter: _normal(option) for letter, option in options.items()}
    tags = [t for t in _TAG.findall(text) if t.strip()]
    if tags:
        content = tags[-1]
        exact = [letter for letter, option in normal.items() if option == _normal(content)]
        if len(exact) == 1:
            return ParsedAnswer(exact[0], "tag")
        found = _TAG_LETTER.match(content)
        letter = (found.group(1) or found.group(2)).upper() if found else None
        if letter in options:
            return ParsedAnswer(letter, "tag")
        closest = _closest(content, normal, cutoff)
        if closest is not None:
            return ParsedAnswer(closest, "tag_closest_text")
    stated = [letter.upper() for letter in _STATED_LETTER.findall(text) if letter.upper() in options]
    bare = _BARE_LETTER.match(text)
    if stated or (bare and bare.group(1) in options):
        return ParsedAnswer(stated[-1] if stated else bare.group(1), "letter")  # type: ignore[union-attr]
    reply = _normal(text)
    contained = [letter for letter, option in normal.items() if option and option in reply]
    if len(contained) == 1:
        return ParsedAnswer(contained[0], "option_text")
    closest = _closest(text, normal, cutoff)
    return ParsedAnswer(closest, "closest_text") if closest is not None else ParsedAnswer(None, "none")


def _closest(text: str, normal: Mapping[str, str], cutoff: float) -> str | None:
    """The letter whose option text is most similar to ``text`` (ratio >= ``cutoff``; a tie is no match)."""
    reply = _normal(text[:_MAX_COMPARED])
    if not reply:
        return None
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(reply)
    scores = []
    for letter, option in normal.items():
        matcher.set_seq1(option)
        scores.append((matcher.ratio(), letter))
    scores.sort(reverse=True)
    best, letter = scores[0]
    if best < cutoff or (len(scores) > 1 and scores[1][0] == best):
        return None
    return letter


def _normal(text: str) -> str:
    return _SPACES.sub(" ", text).strip().rstrip(".").strip().casefold()
