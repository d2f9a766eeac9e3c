"""Validation helpers shared by every agent's dataclass config (errors name the field, the value and the fix)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["check_choice", "check_field"]


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
