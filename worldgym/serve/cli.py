"""``worldgym serve ENV_ID``: the command line of the OpenEnv server."""

from __future__ import annotations

import argparse
import json
from typing import Any

from worldgym.serve.app import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TIMEOUT_S

__all__ = ["add_serve_parser", "run_serve"]


def add_serve_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``serve`` command to an ``add_subparsers()`` object."""
    parser = commands.add_parser(
        "serve", help="serve a text or tool-call env over the OpenEnv protocol",
        description="Serve a registered worldgym text or tool-call env over OpenEnv's protocol (WebSocket /ws, "
                    "MCP /mcp, HTTP), one env instance per session.")
    parser.add_argument("env_id", help="a registered env id, e.g. CSRPhone-v1")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                        help="concurrent sessions; a client beyond it gets CAPACITY_REACHED")
    parser.add_argument("--session-timeout", type=float, default=DEFAULT_SESSION_TIMEOUT_S,
                        help="seconds a session may stay idle before the server frees it")
    parser.add_argument("--env-kwargs", type=_json_object, default={},
                        help='the env\'s constructor arguments as a JSON object, e.g. \'{"difficulty": 3}\'')
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    return parser


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"--env-kwargs must be a JSON object: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"--env-kwargs must be a JSON object, got {type(value).__name__}")
    return value


def run_serve(args: argparse.Namespace) -> None:
    """Serve ``args.env_id`` until interrupted."""
    from worldgym.serve.app import serve

    serve(args.env_id, args.host, args.port, max_sessions=args.max_sessions,
          session_timeout=args.session_timeout, log_level=args.log_level, **args.env_kwargs)
