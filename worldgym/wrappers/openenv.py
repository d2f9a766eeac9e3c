"""``OpenEnvGym``: any OpenEnv server (worldgym's or anyone's) as a ``gymnasium.Env`` over one WebSocket session.

Needs openenv-core (worldgym's ``interop`` extra). ``gym.make("worldgym/OpenEnv-v0", base_url=...)`` builds one.
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any

import gymnasium as gym
import httpx

try:
    from openenv.core.generic_client import GenericEnvClient
    from websockets.asyncio.client import connect as ws_connect
    from websockets.exceptions import WebSocketException
except ImportError as error:  # exercised by tests/test_interop_extra.py
    raise ImportError(
        "worldgym.wrappers.OpenEnvGym needs openenv-core: install worldgym with the `interop` extra "
        "(pip install 'worldgym[interop]')"
    ) from error

from worldgym.errors import RemoteEnvError, RemoteEnvSchemaError
from worldgym.spaces import Tool, ToolCall, ToolCallError, ToolCallSpace, invalid_call_text
from worldgym.text import OBSERVATION_CHANGES, UnicodeText, fit_observation_text

__all__ = ["OpenEnvGym"]

# What the client raises when the server is gone, silent past the timeout, or answers with an error message.
_TRANSPORT_ERRORS = (ConnectionError, OSError, TimeoutError, RuntimeError, WebSocketException, httpx.HTTPError)


class OpenEnvGym(gym.Env[str, Any]):
    """An OpenEnv server's env as a Gymnasium env; the session lives as long as this object (``close`` ends it).

    ## Description
    On construction it connects (``/ws``) and reads the server's action schema (``/schema``). An MCP server
    (actions ``call_tool`` / ``list_tools``) becomes a tool env: its tools, listed once, make a
    :class:`~worldgym.spaces.ToolCallSpace`, so :class:`~worldgym.wrappers.ParseToolCall`, the rollout collector
    and worldgym's agents work on it unchanged. A server whose action has one field becomes a text env whose
    action is that field's value.

    ## Action space
    ``ToolCallSpace`` of the server's tools, or ``Text`` (printable ASCII, ``max_action_chars``). A
    :class:`~worldgym.spaces.ToolCallError` (what ``ParseToolCall`` makes of unreadable text) or any other
    non-call is sent to a worldgym server, which answers it as in-process (an error observation costing a turn);
    another server never sees it: the error observation is made here.

    ## Observation space
    ``Text`` over printable ASCII of at most ``max_observation_chars`` (other characters become ``?``): a
    worldgym server's observation text; another server's tool result text, or its observation as JSON.

    ## Rewards
    The server's (``None`` counts as 0).

    ## Episode end
    ``terminated`` when the server says done, ``truncated`` instead when a worldgym server says the episode hit
    its limit. Stepping an ended episode raises ``ResetNeeded``.

    ## Info
    A worldgym server's info as the env gave it, less the keys the server keeps from clients (answers, the
    client's own text; :mod:`worldgym.serve.info`), in JSON types (tuples become lists); another server's:
    ``observation`` (its fields). A step's info always has ``success`` (False unless the server says so).

    ## Errors
    A server that cannot be reached, stops answering within ``timeout_s`` or answers with an error raises
    :class:`~worldgym.errors.RemoteEnvError` (no hang); the next ``reset`` connects again (a new session).
    A server whose actions have no form here raises :class:`~worldgym.errors.RemoteEnvSchemaError`.

    ## Arguments
    base_url: the server, ``http://host:port`` or ``ws://...``.
    connect_timeout_s: seconds to wait for the connection.
    timeout_s: seconds to wait for each request's answer.
    max_observation_chars: longest observation text (the observation space's bound).
    max_action_chars: longest action text of a text env.
    token: sent as ``Authorization: Bearer <token>`` on the socket and on HTTP, for a server started with
        ``worldgym serve --token``.

    ## Version History
    * v0: initial version.
    """

    metadata = {"render_modes": []}

    def __init__(self, base_url: str, connect_timeout_s: float = 10.0, timeout_s: float = 30.0,
                 max_observation_chars: int = 16384, max_action_chars: int = 4096, token: str | None = None):
        if token is not None and (not isinstance(token, str) or not token):
            raise ValueError(f"token must be a non-empty string or None, got {type(token).__name__}")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ValueError(f"base_url must be an http(s):// or ws(s):// URL, got {base_url!r}")
        for name, value in (("connect_timeout_s", connect_timeout_s), ("timeout_s", timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
                raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
        for name, value in (("max_observation_chars", max_observation_chars), ("max_action_chars", max_action_chars)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 32:
                raise ValueError(f"{name} must be an int >= 32, got {value!r}")
        self.base_url = base_url.rstrip("/")
        self.connect_timeout_s = float(connect_timeout_s)
        self.timeout_s = float(timeout_s)
        self.max_observation_chars = max_observation_chars
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client: Any = None
        self._needs_reset = True
        self._connect()
        properties = self._action_properties()
        self.is_worldgym_server = "invalid_reason" in properties
        self._text_field: str | None = None
        if "tool_name" in properties:
            self.action_space: gym.Space = ToolCallSpace(self._list_tools())
        else:
            self._text_field = self._single_field(properties)
            self.action_space = UnicodeText(max_action_chars)
        self.observation_space = UnicodeText(max_observation_chars)

    # ------------------------------------------------------------------ connection
    def _connect(self) -> None:
        client_cls = _BearerClient if self._headers else GenericEnvClient
        client = client_cls(self.base_url, connect_timeout_s=self.connect_timeout_s,
                            message_timeout_s=self.timeout_s)
        if self._headers:
            client.headers = self._headers
        client = client.sync()
        try:
            client.connect()
        except _TRANSPORT_ERRORS as error:
            client.close()
            raise RemoteEnvError(f"could not connect to the OpenEnv server at {self.base_url}: {error}") from error
        self._client = client

    def _request(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` on the client; a transport failure or error reply -> RemoteEnvError."""
        if self._client is None:
            raise RemoteEnvError(f"the connection to {self.base_url} was lost earlier: call reset() to reconnect")
        try:
            return call(*args, **kwargs)
        except _TRANSPORT_ERRORS as error:
            self._drop_client(wait=False)
            raise RemoteEnvError(
                f"OpenEnv server at {self.base_url}: {what} failed ({type(error).__name__}: {error})") from error

    def _drop_client(self, wait: bool = True) -> None:
        """Forget the client and close it; without ``wait`` the close (whose handshake waits up to 10 s on a
        silent server) runs in a background thread."""
        client, self._client, self._needs_reset = self._client, None, True
        if client is not None:
            if wait:
                _close_quietly(client)
            else:
                threading.Thread(target=_close_quietly, args=(client,), daemon=True).start()

    def _action_properties(self) -> dict[str, Any]:
        url = self.base_url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
        try:
            response = httpx.get(f"{url}/schema", headers=self._headers, timeout=self.timeout_s)
            response.raise_for_status()
            schema = response.json()["action"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as error:
            raise RemoteEnvError(f"OpenEnv server at {self.base_url}: reading /schema failed ({error})") from error
        return dict(schema.get("properties", {}))

    def _list_tools(self) -> list[Tool]:
        result = self._request("list_tools", self._client.step, {"type": "list_tools"})
        listed = result.observation.get("tools")
        if not isinstance(listed, list) or not listed:
            raise RemoteEnvSchemaError(f"OpenEnv server at {self.base_url} takes call_tool actions but listed no "
                                       f"tools (list_tools answered {result.observation!r:.200})")
        tools = []
        for spec in listed:
            schema = dict(spec.get("input_schema") or spec.get("inputSchema") or {})
            schema.setdefault("type", "object")
            try:
                tools.append(Tool(spec.get("name"), spec.get("description") or "", schema))
            except ValueError as error:
                raise RemoteEnvSchemaError(f"OpenEnv server at {self.base_url}: {error}") from error
        return tools

    def _single_field(self, properties: dict[str, Any]) -> str:
        fields = [name for name in properties if name != "metadata"]
        if len(fields) != 1:
            raise RemoteEnvSchemaError(
                f"OpenEnv server at {self.base_url}: OpenEnvGym takes MCP tool servers (call_tool actions) or "
                f"actions with one field, got action fields {fields}")
        return fields[0]

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if self._client is None:
            self._connect()
        data: dict[str, Any] = {} if seed is None else {"seed": seed}
        if options:
            data["options"] = options
        result = self._request("reset", self._client.reset, **data)
        text, info = self._read(result.observation, step=False)
        if result.done and info.get("response_type") == "reset_failed":
            raise RemoteEnvError(f"OpenEnv server at {self.base_url}: {text}")
        self._needs_reset = bool(result.done)
        return text, info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise gym.error.ResetNeeded("Call reset() before step() (the episode ended, or none started).")
        payload = self._payload(action)
        if payload is None:  # an unreadable call for a server that cannot be told: answered here
            message = action.message if isinstance(action, ToolCallError) else _not_a_call(action)
            info = {"response_type": "invalid_call", "errors": [message], "success": False}
            return self._fit(invalid_call_text([message]), info), 0.0, False, False, info
        result = self._request("step", self._client.step, payload)
        text, info = self._read(result.observation)
        done = bool(result.done)
        truncated = done and bool(result.observation.get("truncated", False))
        self._needs_reset = done
        return text, float(result.reward or 0.0), done and not truncated, truncated, info

    def close(self) -> None:
        """End the session (the server frees it at once)."""
        self._drop_client()

    # ------------------------------------------------------------------ conversions
    def _payload(self, action: Any) -> dict[str, Any] | None:
        """The step message's action; None when only this side can answer it (see the class docstring)."""
        if self._text_field is not None:
            return {self._text_field: action if _is_json(action) else None}
        if isinstance(action, ToolCall) and isinstance(action.name, str) and _is_json(action.arguments):
            arguments = dict(action.arguments) if isinstance(action.arguments, dict) else action.arguments
            return {"type": "call_tool", "tool_name": action.name, "arguments": arguments}
        if not self.is_worldgym_server:
            return None
        if isinstance(action, ToolCallError):
            return {"type": "call_tool", "invalid_reason": action.message if isinstance(action.message, str) else "",
                    "raw_text": action.raw_text if isinstance(action.raw_text, str) else ""}
        reasons = self.action_space.validate(action) if isinstance(action, ToolCall) else [_not_a_call(action)]
        return {"type": "call_tool", "invalid_reason": "; ".join(reasons)}

    def _read(self, observation: dict[str, Any], step: bool = True) -> tuple[str, dict[str, Any]]:
        """The observation text and info of a server's observation (a step's info always has ``success``)."""
        if self.is_worldgym_server and "text" in observation:
            text, info = str(observation["text"]), dict(observation.get("info") or {})
        else:
            text, info = _remote_text(observation), {"observation": observation}
        if step:
            info["success"] = info.get("success") is True
        return self._fit(text, info), info

    def _fit(self, text: str, info: dict[str, Any]) -> str:
        """``text`` fitted to the observation space, its changes (if any) reported in ``info``."""
        fitted, changes = fit_observation_text(text, self.max_observation_chars)
        if changes:
            info[OBSERVATION_CHANGES] = changes
        return fitted


def _close_quietly(client: Any) -> None:
    try:
        client.close()
    except _TRANSPORT_ERRORS:
        pass  # the connection is gone already


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _not_a_call(action: Any) -> str:
    return f"expected a ToolCall, got {type(action).__name__}"


def _remote_text(observation: dict[str, Any]) -> str:
    """Another server's observation as text: a tool result's text content, else the fields as JSON."""
    if "result" in observation:
        result = observation["result"]
        if isinstance(result, dict) and isinstance(result.get("content"), list):
            texts = [part.get("text", "") for part in result["content"] if isinstance(part, dict)]
            return "\n".join(text for text in texts if isinstance(text, str))
        if isinstance(result, dict) and "data" in result:
            result = result["data"]
        return result if isinstance(result, str) else json.dumps(result, default=str)
    return json.dumps(observation, default=str, sort_keys=True) if observation else ""


class _BearerClient(GenericEnvClient):
    """openenv-core's client, sending ``headers`` (the bearer token) with its WebSocket handshake."""

    headers: dict[str, str]

    async def connect(self) -> _BearerClient:
        if self._ws is None:
            try:
                self._ws = await ws_connect(self._ws_url, open_timeout=self._connect_timeout,
                                            max_size=self._max_message_size, additional_headers=self.headers)
            except Exception as error:
                raise ConnectionError(f"Failed to connect to {self._ws_url}: {error}") from error
        return self
