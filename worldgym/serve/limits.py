"""``ServeLimits``: the bounds a worldgym server keeps whatever its clients send."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "ServeLimits"]

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024  # a tool call or answer is kilobytes; uvicorn's own default is 16 MiB


@dataclass(frozen=True)
class ServeLimits:
    """What one client may cost the server.

    Args:
        max_sessions (int): open WebSocket sessions (default 256); one more is refused with ``CAPACITY_REACHED``.
        session_timeout_s (float | None): seconds a session may stay silent before the server closes its socket
            (default 300; None: never).
        max_message_bytes (int): the largest WebSocket message or HTTP request body, after decompression
            (default 256 KiB); a larger message closes the socket (code 1009), a larger body gets HTTP 413.
        max_connections (int): open connections (sockets, handshakes included) before uvicorn answers 503
            (default 1024, uvicorn's ``limit_concurrency``).
        handshake_timeout_s (float): seconds a new connection has to send its request's headers (default 10).
    """

    max_sessions: int = 256
    session_timeout_s: float | None = 300.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_connections: int = 1024
    handshake_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_message_bytes", "max_connections"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be >= 1024 (a reset message), got {self.max_message_bytes}")
        for name in ("session_timeout_s", "handshake_timeout_s"):
            value = getattr(self, name)
            if value is None and name == "session_timeout_s":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
