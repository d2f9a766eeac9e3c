"""``create_app``: a worldgym text env as an OpenEnv server (FastAPI), one session per WebSocket; ``serve``."""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
from typing import Any

import gymnasium as gym
from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from openenv.core.env_server.types import EnvironmentMetadata, State

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.serve.environment import GymEnvironment, action_kind
from worldgym.serve.guard import TOKEN_ENV_VAR, GuardRequests
from worldgym.serve.limits import DEFAULT_MAX_MESSAGE_BYTES, ServeLimits
from worldgym.serve.models import EnvObservation, TextAction, ToolAction
from worldgym.serve.session import SessionCount, run_session

__all__ = ["DEFAULT_MAX_SESSIONS", "DEFAULT_SESSION_TIMEOUT_S", "build_server", "check_exposure", "create_app", "serve"]

DEFAULT_MAX_SESSIONS = 256
DEFAULT_SESSION_TIMEOUT_S = 300.0


def create_app(env_id: str, *, max_sessions: int = DEFAULT_MAX_SESSIONS,
               session_timeout: float | None = DEFAULT_SESSION_TIMEOUT_S,
               max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, token: str | None = None,
               **env_kwargs: Any) -> FastAPI:
    """An OpenEnv server for ``gym.make(env_id, **env_kwargs)``: each WebSocket connection to ``/ws`` is one
    session with its own env instance, freed when the socket closes, or closed by the server after
    ``session_timeout`` silent seconds (None: never).

    Routes: ``/ws`` (sessions), ``GET /health``, ``/schema``, ``/metadata`` (computed once) and ``/sessions``
    (``{"active": n, "max": m}``). Episodes run only over ``/ws``; no route creates, reads or closes a session
    by id. With ``token``, every route and the socket need ``Authorization: Bearer <token>``. A message or
    body over ``max_message_bytes`` is refused (see :class:`~worldgym.serve.limits.ServeLimits`).

    Raises:
        TypeError: the env acts with neither text nor tool calls.
        ValueError: a limit out of range; the env rejects ``env_kwargs``.
    """
    limits = ServeLimits(max_sessions=max_sessions, session_timeout_s=session_timeout,
                         max_message_bytes=max_message_bytes)
    if token is not None and (not isinstance(token, str) or len(token) < 16):
        raise ValueError("token must be a string of at least 16 characters (e.g. `openssl rand -hex 32`)")
    probe = gym.make(env_id, **env_kwargs)  # fail here, not in the first session, on a bad id or argument
    kind = action_kind(probe)
    doc = (type(probe.unwrapped).__doc__ or "").strip().split("\n")[0]
    probe.close()
    action_cls = ToolAction if kind == "tool" else TextAction
    metadata = EnvironmentMetadata(name=env_id, description=doc or env_id).model_dump()
    schema = {"action": action_cls.model_json_schema(), "observation": EnvObservation.model_json_schema(),
              "state": State.model_json_schema()}
    sessions = SessionCount(max=limits.max_sessions)
    make_env = functools.partial(GymEnvironment, env_id, env_kwargs)

    app = FastAPI(title=f"worldgym {env_id}", description=f"{env_id} over the OpenEnv protocol.",
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(_QuietDisconnects)
    app.add_middleware(GuardRequests, token=token, max_body_bytes=limits.max_message_bytes)
    app.state.limits, app.state.sessions = limits, sessions

    @app.websocket("/ws")
    async def session(websocket: WebSocket) -> None:
        await run_session(websocket, make_env, action_cls, sessions, limits)

    @app.get("/health", tags=["Health"])
    def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.get("/schema", tags=["Schema"], summary="JSON schemas of actions, observations and state")
    def get_schema() -> dict[str, Any]:
        return schema

    @app.get("/metadata", tags=["Environment Info"], summary="The env id and its description")
    def get_metadata() -> dict[str, Any]:
        return metadata

    @app.get("/sessions", tags=["Health"], summary="Open sessions and the limit")
    def get_sessions() -> dict[str, int]:
        return {"active": sessions.active, "max": sessions.max}

    return app


class _QuietDisconnects:
    """ASGI middleware: a WebSocket client that leaves while its answer is being sent is a normal goodbye, not
    an application error to log."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise


def check_exposure(host: str, token: str | None, insecure: bool) -> None:
    """Refuse to serve beyond this machine without a token, unless ``insecure`` says so on purpose.

    Raises:
        ValueError: ``host`` is not a loopback address (or ``localhost``), no token is set and not ``insecure``.
    """
    if token or insecure or _is_loopback(host):
        return
    raise ValueError(f"refusing to serve on {host!r} without a token: anyone who reaches it could run sessions. "
                     f"Set --token or {TOKEN_ENV_VAR} (clients send 'Authorization: Bearer <token>'), bind "
                     "127.0.0.1, or pass --insecure on a network you trust")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_server(env_id: str, host: str = "127.0.0.1", port: int = 8000, *,
                 max_sessions: int = DEFAULT_MAX_SESSIONS, session_timeout: float | None = DEFAULT_SESSION_TIMEOUT_S,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, max_connections: int = 1024,
                 handshake_timeout: float = 10.0, token: str | None = None, insecure: bool = False,
                 log_level: str = "warning", **env_kwargs: Any) -> Any:
    """The ``uvicorn.Server`` that :func:`serve` runs: :func:`create_app` with messages bounded at the protocol
    level too (permessage-deflate is off: a message's size on the wire is its size), at most
    ``max_connections`` open connections (uvicorn answers 503 beyond), ``handshake_timeout`` seconds for a new
    connection's headers. ``token`` defaults to ``$WORLDGYM_SERVE_TOKEN``.

    Raises:
        ValueError: a non-loopback ``host`` without a token or ``insecure`` (see :func:`check_exposure`).
    """
    import uvicorn

    from worldgym.serve.transport import (
        OneLineAcceptErrors,
        handshake_timeout_protocol,
        raise_open_file_limit,
    )

    token = token or os.environ.get(TOKEN_ENV_VAR) or None
    check_exposure(host, token, insecure)
    limits = ServeLimits(max_sessions=max_sessions, session_timeout_s=session_timeout,
                         max_message_bytes=max_message_bytes, max_connections=max_connections,
                         handshake_timeout_s=handshake_timeout)
    app = create_app(env_id, max_sessions=max_sessions, session_timeout=session_timeout,
                     max_message_bytes=max_message_bytes, token=token, **env_kwargs)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level,
                            http=handshake_timeout_protocol(limits.handshake_timeout_s),
                            limit_concurrency=raise_open_file_limit(limits.max_connections),
                            ws_max_size=limits.max_message_bytes, ws_max_queue=4, timeout_keep_alive=5,
                            ws_per_message_deflate=False)  # no (de)compression on the event loop, no bombs
    config.load()  # installs uvicorn's logging: the filter goes on after it
    logging.getLogger("asyncio").addFilter(OneLineAcceptErrors())
    return uvicorn.Server(config)


def serve(env_id: str, host: str = "127.0.0.1", port: int = 8000, **options: Any) -> None:
    """Run :func:`build_server` (same arguments) until interrupted."""
    build_server(env_id, host, port, **options).run()
