"""JSON reading for data files that must fail with a message naming the place: repeated keys stay visible,
integers too long to convert stay readable as a marker, and over-deep nesting is located in the text."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from worldgym.spaces import MAX_INT_DIGITS

__all__ = ["HugeInt", "JSONObject", "deep_nesting_path", "loads_checked"]

_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},]')


@dataclass(frozen=True)
class HugeInt:
    """An integer literal of more than ``MAX_INT_DIGITS`` digits, kept unconverted (Python refuses to convert
    such text, and no field of a data file needs one)."""

    digits: int

    def __repr__(self) -> str:
        return f"<an integer of {self.digits} digits>"


class JSONObject(dict):
    """A JSON object read by :func:`loads_checked`: ``duplicates`` lists the keys the text repeats (a plain
    ``dict`` keeps only the last value of each)."""

    duplicates: tuple[str, ...] = ()


def loads_checked(text: str) -> Any:
    """``json.loads(text)`` with objects as :class:`JSONObject` and overlong integers as :class:`HugeInt`.

    Raises ``json.JSONDecodeError`` for invalid JSON and ``RecursionError`` for nesting deeper than Python's
    recursion limit (locate it with :func:`deep_nesting_path`).
    """
    return json.loads(text, object_pairs_hook=_object, parse_int=_integer)


def deep_nesting_path(text: str, max_depth: int) -> list[str | int] | None:
    """The keys and indices leading to the first point where ``text`` nests more than ``max_depth`` levels of
    ``[``/``{`` (e.g. ``["patient_01", "questions", 0, "answer_a", 0, ...]``), or None if it never does.

    >>> deep_nesting_path('{"a": [1, {"b": [[[]]]}]}', 3)
    ['a', 1, 'b']
    >>> deep_nesting_path('[[]]', 3) is None
    True
    """
    stack: list[list[Any]] = []  # per open container: [kind, key or index]
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            stack.append([token, 0 if token == "[" else None])
            if len(stack) > max_depth:
                return [entry[1] for entry in stack[:-1]]
        elif token in "]}":
            if stack:
                stack.pop()
        elif token == ",":
            if stack:
                stack[-1][1] = stack[-1][1] + 1 if stack[-1][0] == "[" else None
        elif stack and stack[-1][0] == "{" and stack[-1][1] is None:
            stack[-1][1] = token[1:-1]  # the key (as written: escapes are left as they are)
    return None


def _object(pairs: list[tuple[str, Any]]) -> JSONObject:
    result = JSONObject(pairs)
    if len(result) < len(pairs):
        seen: set[str] = set()
        result.duplicates = tuple(dict.fromkeys(key for key, _ in pairs if key in seen or seen.add(key)))
    return result


def _integer(text: str) -> int | HugeInt:
    digits = len(text.lstrip("-"))
    return HugeInt(digits) if digits > MAX_INT_DIGITS else int(text)
