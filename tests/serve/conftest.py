"""Shared by the server tests: waiting, bounded in time, for a server-side condition."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_until(predicate: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``predicate`` every 50 ms for up to ``timeout_s`` seconds; its last answer."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture
def wait_for() -> Callable[[Callable[[], bool], float], bool]:
    """:func:`wait_until`, for a test to call: ``assert wait_for(lambda: ..., 5)``."""
    return wait_until
