"""``create_app``: a worldgym text env as an OpenEnv server (FastAPI), many sessions per process."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
from fastapi import FastAPI, WebSocketDisconnect
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.types import ConcurrencyConfig

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.serve.environment import GymEnvironment, action_kind
from worldgym.serve.models import EnvObservation, TextAction, ToolAction

__all__ = ["DEFAULT_MAX_SESSIONS", "DEFAULT_SESSION_TIMEOUT_S", "create_app", "serve"]

DEFAULT_MAX_SESSIONS = 256
DEFAULT_SESSION_TIMEOUT_S = 300.0


def create_app(env_id: str, *, max_sessions: int = DEFAULT_MAX_SESSIONS,
               session_timeout: float | None = DEFAULT_SESSION_TIMEOUT_S, **env_kwargs: Any) -> FastAPI:
    """An OpenEnv server for ``gym.make(env_id, **env_kwargs)``: each WebSocket session (``/ws``, ``/mcp``) gets
    its own env instance, freed when the client disconnects or after ``session_timeout`` idle seconds (OpenEnv
    checks every ``max(session_timeout / 4, 5)`` s; None: never).

    Routes are OpenEnv's (``/ws``, ``/mcp``, ``/reset``, ``/step``, ``/state``, ``/schema``, ``/metadata``,
    ``/health``) plus ``GET /sessions`` (``{"active": n, "max": m}``). HTTP ``/reset`` and ``/step`` are
    stateless (a fresh env per request), as in OpenEnv; episodes run over ``/ws``.

    Raises:
        TypeError: the env acts with neither text nor tool calls.
        ValueError: ``max_sessions`` < 1 or ``session_timeout`` <= 0; the env rejects ``env_kwargs``.
    """
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ValueError(f"max_sessions must be an int >= 1, got {max_sessions!r}")
    if session_timeout is not None and not session_timeout > 0:
        raise ValueError(f"session_timeout must be > 0 seconds or None, got {session_timeout!r}")
    probe = gym.make(env_id, **env_kwargs)  # fail here, not in the first session, on a bad id or argument
    kind = action_kind(probe)
    probe.close()
    server = HTTPEnvServer(
        functools.partial(GymEnvironment, env_id, env_kwargs),
        ToolAction if kind == "tool" else TextAction,
        EnvObservation,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout),
    )
    app = FastAPI(title=f"worldgym {env_id}", description=f"{env_id} over the OpenEnv protocol.")
    app.add_middleware(_QuietDisconnects)
    server.register_routes(app)
    app.state.env_server = server

    @app.get("/sessions", tags=["Health"], summary="Open sessions and the limit")
    def sessions() -> dict[str, int]:
        return {"active": server.active_sessions, "max": server.max_concurrent_envs}

    return app


class _QuietDisconnects:
    """ASGI middleware: when a WebSocket client leaves first, OpenEnv's handler (which has freed the session by
    then) raises on its own closing send; that is a normal goodbye, not an application error to log."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise


def serve(env_id: str, host: str = "127.0.0.1", port: int = 8000, *, max_sessions: int = DEFAULT_MAX_SESSIONS,
          session_timeout: float | None = DEFAULT_SESSION_TIMEOUT_S, log_level: str = "warning",
          **env_kwargs: Any) -> None:
    """Run :func:`create_app` with uvicorn until interrupted."""
    import uvicorn

    app = create_app(env_id, max_sessions=max_sessions, session_timeout=session_timeout, **env_kwargs)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
