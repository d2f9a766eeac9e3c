"""ASGI middleware in front of every route: an optional bearer token and a bound on request bodies."""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

__all__ = ["TOKEN_ENV_VAR", "GuardRequests"]

logger = logging.getLogger(__name__)
TOKEN_ENV_VAR = "WORLDGYM_SERVE_TOKEN"
CLOSE_POLICY = 1008  # RFC 6455: policy violation (before the handshake completes, uvicorn answers HTTP 403)


class GuardRequests:
    """Refuse, before any route runs: a request or socket without ``Authorization: Bearer <token>`` (when a
    token is set; HTTP 401, or the handshake refused), and an HTTP body declared over ``max_body_bytes`` (HTTP
    413). No route reads a body (they are all GETs), so an undeclared (chunked) body is refused unread (405).

    A WebSocket message's size is bounded by the server (uvicorn's ``ws_max_size``) and by the ``/ws`` route.
    """

    def __init__(self, app: Any, *, token: str | None, max_body_bytes: int) -> None:
        self.app = app
        self._token = f"Bearer {token}".encode() if token else None
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if self._token is not None and not self._authorized(scope):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": CLOSE_POLICY})
            else:
                await _respond(send, 401, "a bearer token is required", [(b"www-authenticate", b"Bearer")])
            return
        declared = _header(scope, b"content-length") if scope["type"] == "http" else None
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            await _respond(send, 413, f"request bodies are limited to {self.max_body_bytes} bytes")
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: dict[str, Any]) -> bool:
        given = _header(scope, b"authorization")
        return given is not None and hmac.compare_digest(given.encode("latin-1"), self._token)


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


async def _respond(send: Any, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
