"""Validation helpers shared by every config and env constructor: a :class:`~worldgym.errors.ConfigError`
names the setting, the value received and the fix, in one style (``name=value is invalid: fix``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worldgym.errors import ConfigError

__all__ = ["check_choice", "check_device", "check_field", "check_positive_int", "check_range"]


def check_field(condition: bool, name: str, value: Any, fix: str) -> None:
    """Raise :class:`ConfigError` (a ``ValueError``) naming the field, the value received and how to fix it
    when ``condition`` is false.

    >>> check_field(3 >= 1, "epochs", 3, "use a positive integer")
    >>> check_field(0 >= 1, "epochs", 0, "use a positive integer")
    Traceback (most recent call last):
    worldgym.errors.ConfigError: epochs=0 is invalid: use a positive integer
    """
    if not condition:
        raise ConfigError(f"{name}={value!r} is invalid: {fix}")


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> None:
    """Raise :class:`ConfigError` unless ``value`` is one of ``allowed`` (for ``Literal[...]`` fields)."""
    options = list(allowed)
    check_field(value in options, name, value, f"use one of {options}")


def check_positive_int(name: str, value: Any) -> None:
    """Raise :class:`ConfigError` unless ``value`` is an ``int`` >= 1 (``bool`` and integral floats are rejected).

    >>> check_positive_int("seq_len", 8.5)
    Traceback (most recent call last):
    worldgym.errors.ConfigError: seq_len=8.5 is invalid: use an integer >= 1
    """
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    check_field(ok, name, value, "use an integer >= 1")


def check_range(
    name: str, value: Any, low: float | None, high: float | None, low_open: bool = False, high_open: bool = False
) -> None:
    """Raise :class:`ConfigError` unless ``low <= value <= high`` (``<`` on an open end; ``None``: unbounded).

    >>> check_range("top_p", 1.0, 0, 1, low_open=True)
    >>> check_range("eps_low", 0.0, 0, 1, low_open=True, high_open=True)
    Traceback (most recent call last):
    worldgym.errors.ConfigError: eps_low=0.0 is invalid: use a number in (0, 1)
    >>> check_range("kl_coef", -1, 0, None)
    Traceback (most recent call last):
    worldgym.errors.ConfigError: kl_coef=-1 is invalid: use a number >= 0
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if high is None:
        fix = f"use a number {'>' if low_open else '>='} {low}"
    elif low is None:
        fix = f"use a number {'<' if high_open else '<='} {high}"
    else:
        fix = f"use a number in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    check_field(ok, name, value, fix)


def check_device(name: str, value: Any) -> None:
    """Raise :class:`ConfigError` unless ``value`` names a torch device the trainers run on: cpu, cuda or cuda:N.

    >>> check_device("device", "cuda:1")
    >>> check_device("device", "tpu")
    Traceback (most recent call last):
    worldgym.errors.ConfigError: device='tpu' is invalid: use 'cpu', 'cuda' or 'cuda:N'
    """
    ok = isinstance(value, str) and (value in ("cpu", "cuda") or value.startswith("cuda:"))
    check_field(ok, name, value, "use 'cpu', 'cuda' or 'cuda:N'")
