"""``worldgym serve ENV_ID``: the command line of the OpenEnv server."""

from __future__ import annotations

import argparse
import json
from typing import Any

from worldgym.serve.app import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TIMEOUT_S
from worldgym.serve.guard import TOKEN_ENV_VAR
from worldgym.serve.limits import DEFAULT_MAX_MESSAGE_BYTES, ServeLimits

__all__ = ["add_serve_parser", "run_serve"]


def add_serve_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``serve`` command to an ``add_subparsers()`` object."""
    parser = commands.add_parser(
        "serve", help="serve a text or tool-call env over the OpenEnv protocol",
        description="Serve a registered worldgym text or tool-call env over OpenEnv's protocol (WebSocket /ws, "
                    "MCP /mcp, HTTP), one env instance per session.")
    parser.add_argument("env_id", help="a registered env id, e.g. CSRPhone-v1")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (0.0.0.0: every interface; needs --token or --insecure)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                        help="concurrent sessions; a client beyond it gets CAPACITY_REACHED")
    parser.add_argument("--session-timeout", type=float, default=DEFAULT_SESSION_TIMEOUT_S,
                        help="seconds a session may stay idle before the server frees it")
    parser.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES,
                        help="largest WebSocket message or HTTP body, after decompression; larger ones are refused")
    parser.add_argument("--max-connections", type=int, default=ServeLimits.max_connections,
                        help="open connections before new ones get HTTP 503")
    parser.add_argument("--handshake-timeout", type=float, default=ServeLimits.handshake_timeout_s,
                        help="seconds a new connection has to send its request headers")
    parser.add_argument("--token", default=None,
                        help=f"require 'Authorization: Bearer TOKEN' on every route and socket (default: "
                             f"${TOKEN_ENV_VAR}); at least 16 characters")
    parser.add_argument("--insecure", action="store_true",
                        help="allow a non-loopback --host without a token (only on a network you trust)")
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
    """Serve ``args.env_id`` until interrupted; a bad setting exits with its message (no traceback)."""
    from worldgym.serve.app import serve

    try:
        serve(args.env_id, args.host, args.port, max_sessions=args.max_sessions,
              session_timeout=args.session_timeout, max_message_bytes=args.max_message_bytes,
              max_connections=args.max_connections, handshake_timeout=args.handshake_timeout, token=args.token,
              insecure=args.insecure, log_level=args.log_level, **args.env_kwargs)
    except ValueError as error:  # a refused exposure, a limit out of range, env arguments the env rejects
        raise SystemExit(f"worldgym serve: error: {error}") from None
