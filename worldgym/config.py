"""Validation helpers shared by every agent's dataclass config (errors name the field, the value and the fix)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["check_choice", "check_field", "check_positive_int"]


def check_field(condition: bool, name: str, value: Any, fix: str) -> None:
    """Raise ``ValueError`` naming the field, the value received and how to fix it when ``condition`` is false.

    >>> check_field(3 >= 1, "epochs", 3, "use a positive integer")
    >>> check_field(0 >= 1, "epochs", 0, "use a positive integer")
    Traceback (most recent call last):
    ValueError: epochs=0 is invalid: use a positive integer
    """
    if not condition:
        raise ValueError(f"{name}={value!r} is invalid: {fix}")


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``allowed`` (for ``Literal[...]`` fields)."""
    options = list(allowed)
    check_field(value in options, name, value, f"use one of {options}")


def check_positive_int(name: str, value: Any) -> None:
    """Raise ``ValueError`` unless ``value`` is an ``int`` >= 1 (``bool`` and integral floats are rejected).

    >>> check_positive_int("seq_len", 8.5)
    Traceback (most recent call last):
    ValueError: seq_len=8.5 is invalid: use an integer >= 1
    """
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    check_field(ok, name, value, "use an integer >= 1")
