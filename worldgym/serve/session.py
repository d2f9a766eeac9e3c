"""The ``/ws`` endpoint: one session per WebSocket connection, owned by it, speaking OpenEnv's message protocol.

A session is created when its socket opens (its env at the first message) and freed when the socket closes (a
``close`` message, the client's disconnect, or ``session_timeout_s`` of silence, after which the server closes
the socket): it has no id a client could name from elsewhere, and the open session count is the number of open
sockets. Every message is parsed, validated, stepped and serialised in a worker thread, so one client's heavy
message does not stall the event loop that serves the others; messages over :data:`HEAVY_MESSAGE_BYTES` go
through one :class:`HeavyLane`, so many of them (from one client or several) take no more of the interpreter
than a fifth of the time.

Messages are OpenEnv's: ``{"type": "reset", "data": {"seed", "episode_id", "options"}}``, ``{"type": "step",
"data": <action>}``, ``{"type": "state"}``, ``{"type": "close"}``; answers ``{"type": "observation" | "state" |
"error", "data": ...}``. Errors never echo the message back and list at most :data:`MAX_LISTED_ERRORS` problems.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import Action, WSErrorCode
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocket, WebSocketDisconnect

from worldgym.serve.environment import GymEnvironment
from worldgym.serve.limits import ServeLimits

__all__ = ["HEAVY_MESSAGE_BYTES", "MAX_LISTED_ERRORS", "HeavyLane", "SessionCount", "run_session"]

logger = logging.getLogger(__name__)
MAX_LISTED_ERRORS = 10
CLOSE_IDLE = 1001  # going away: silent past the session timeout
CLOSE_TOO_BIG = 1009  # RFC 6455: message too big
CLOSE_TRY_LATER = 1013  # RFC 6455: try again later (capacity)
_SURROGATE = re.compile("[\ud800-\udfff]")
_RESET_KEYS = ("seed", "episode_id", "options")
HEAVY_MESSAGE_BYTES = 64 * 1024  # a tool call or an answer is far smaller; larger messages take turns
REST_FACTOR = 4.0  # the heavy lane rests 4x as long as it worked: heavy work gets at most 1/5 of the time
T = TypeVar("T")


class HeavyLane:
    """One lane for heavy messages: they run one at a time, and after each the lane rests :data:`REST_FACTOR`
    times as long as it took, so heavy work (parsing a large message holds the interpreter for milliseconds)
    gets at most a fifth of the time whoever sends it, and small messages are not kept waiting behind it."""

    def __init__(self) -> None:
        self._turn = asyncio.Lock()
        self._rest_until = 0.0

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in a worker thread, in turn."""
        async with self._turn:
            await asyncio.sleep(max(0.0, self._rest_until - time.monotonic()))
            began = time.monotonic()
            try:
                return await run_in_threadpool(function, *args)
            finally:
                ended = time.monotonic()
                self._rest_until = ended + REST_FACTOR * (ended - began)


@dataclass
class SessionCount:
    """Open sessions (one per open ``/ws`` socket), the most allowed, and the lane of heavy messages."""

    max: int
    active: int = 0
    heavy_lane: HeavyLane = field(default_factory=HeavyLane)

    def try_open(self) -> bool:
        """Take a slot; False when all ``max`` are taken."""
        if self.active >= self.max:
            return False
        self.active += 1
        return True

    def release(self) -> None:
        self.active -= 1


@dataclass
class _Slot:
    """A connection's env: built at its first message, so a connection that sends nothing usable builds none."""

    env: GymEnvironment | None = None


async def run_session(websocket: WebSocket, make_env: Callable[[], GymEnvironment], action_cls: type[Action],
                      sessions: SessionCount, limits: ServeLimits) -> None:
    """Serve one connection's session until the socket closes; the env is built and closed off the loop."""
    await websocket.accept()
    if not sessions.try_open():
        await websocket.send_text(_error(WSErrorCode.CAPACITY_REACHED, f"all {sessions.max} sessions are in use",
                                         active_sessions=sessions.active, max_sessions=sessions.max))
        await websocket.close(CLOSE_TRY_LATER)
        return
    slot = _Slot()
    try:
        await _serve_messages(websocket, slot, make_env, action_cls, limits, sessions.heavy_lane)
    except WebSocketDisconnect:
        pass
    finally:
        sessions.release()
        if slot.env is not None:
            await run_in_threadpool(slot.env.close)


async def _serve_messages(websocket: WebSocket, slot: _Slot, make_env: Callable[[], GymEnvironment],
                          action_cls: type[Action], limits: ServeLimits, heavy_lane: HeavyLane) -> None:
    while True:
        try:
            message = await asyncio.wait_for(websocket.receive(), limits.session_timeout_s)
        except TimeoutError:
            await websocket.close(CLOSE_IDLE, "idle past the session timeout")
            return
        if message["type"] == "websocket.disconnect":
            return
        raw = message.get("text") if message.get("text") is not None else message.get("bytes")
        if raw is None:
            continue
        if len(raw) > limits.max_message_bytes:  # uvicorn stops larger frames first; other servers may not
            await websocket.close(CLOSE_TOO_BIG, f"messages are limited to {limits.max_message_bytes} bytes")
            return
        if slot.env is None:
            try:
                slot.env = await run_in_threadpool(make_env)
            except Exception:  # the factory's message may name server paths or arguments: log it, say less
                logger.exception("a session's env could not be built")
                await websocket.send_text(_error(WSErrorCode.FACTORY_ERROR, "the server could not build the env"))
                return
        if len(raw) > HEAVY_MESSAGE_BYTES:
            reply = await heavy_lane.run(answer, slot.env, action_cls, raw)
        else:
            reply = await run_in_threadpool(answer, slot.env, action_cls, raw)
        if reply is None:  # the client said goodbye
            await websocket.close()
            return
        await websocket.send_text(reply)


def answer(env: GymEnvironment, action_cls: type[Action], raw: str | bytes) -> str | None:
    """The JSON reply to one message (None for ``close``); never raises on what a client sends."""
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, too deep or an integer of thousands of digits
        return _error(WSErrorCode.INVALID_JSON, "the message is not a JSON object")
    if not isinstance(message, dict):
        return _error(WSErrorCode.INVALID_JSON, "the message is not a JSON object")
    kind, data = message.get("type"), message.get("data", {})
    if kind == "close":
        return None
    if kind == "state":
        return _dumps({"type": "state", "data": env.state.model_dump()})
    if kind not in ("reset", "step"):
        return _error(WSErrorCode.UNKNOWN_TYPE, "the message type must be 'reset', 'step', 'state' or 'close'")
    if not isinstance(data, dict):
        return _error(WSErrorCode.VALIDATION_ERROR, f"'data' must be an object, got {type(data).__name__}")
    if kind == "reset":
        observation = env.reset(**{key: data[key] for key in _RESET_KEYS if key in data})
    else:
        action = parse_action(action_cls, data)
        if isinstance(action, str):
            return action
        observation = env.step(action)
    return _dumps({"type": "observation", "data": serialize_observation(observation)})


def parse_action(action_cls: type[Action], data: dict[str, Any]) -> Action | str:
    """``data`` as an ``action_cls``, or the error reply: unknown fields are named (a few), never echoed."""
    fields = action_cls.model_fields
    unknown = [key for key in data if key not in fields]
    if unknown:
        names = ", ".join(repr(key[:40]) for key in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        return _error(WSErrorCode.VALIDATION_ERROR, f"{len(unknown)} unknown action field(s): {names}; "
                      f"expected some of {sorted(fields)}")
    try:
        return action_cls.model_validate(data)
    except ValidationError as error:
        listed = error.errors(include_url=False, include_context=False, include_input=False)
        return _error(WSErrorCode.VALIDATION_ERROR, "invalid action", errors=listed[:MAX_LISTED_ERRORS],
                      error_count=error.error_count())


def _error(code: WSErrorCode, message: str, **details: Any) -> str:
    return _dumps({"type": "error", "data": {"message": message, "code": code.value, **details}})


def _dumps(payload: dict[str, Any]) -> str:
    """``payload`` as JSON text that encodes as UTF-8: a lone surrogate (which no encoder takes) becomes U+FFFD
    rather than losing the whole reply."""
    text = json.dumps(payload, ensure_ascii=False, default=str)
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text
