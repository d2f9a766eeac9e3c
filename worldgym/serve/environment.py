"""``GymEnvironment``: one worldgym text env behind OpenEnv's ``Environment`` interface (one per session)."""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import ListToolsAction, ListToolsObservation
from openenv.core.env_server.mcp_types import Tool as MCPTool
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation

from worldgym.serve.info import client_info
from worldgym.serve.models import EnvObservation, EnvState, TextAction, ToolAction, ToolResultObservation
from worldgym.spaces import ToolCall, ToolCallError, ToolCallSpace

__all__ = ["GymEnvironment", "action_kind", "jsonable"]

logger = logging.getLogger(__name__)
MAX_SEED = 2**64  # seeds are ints in [0, MAX_SEED): what numpy takes, at a bounded cost
MAX_EPISODE_ID_CHARS = 128


def action_kind(env: gym.Env) -> str:
    """``"tool"`` for a tool-call env, ``"text"`` for a text env; other action spaces cannot be served.

    Raises:
        TypeError: the env acts with neither tool calls nor text (e.g. ZTokenDigits-v1, GameBoy-v0).
    """
    if isinstance(env.action_space, ToolCallSpace):
        return "tool"
    if isinstance(env.action_space, gym.spaces.Text):
        return "text"
    raise TypeError(
        f"worldgym serve needs a text or tool-call env (a Text or ToolCallSpace action space); "
        f"{env.spec.id if env.spec else type(env).__name__} has {env.action_space}"
    )


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: numpy scalars and arrays to Python, tuples and sets to lists, mappings to
    dicts with string keys, non-finite floats and other objects to strings."""
    if isinstance(value, (str, bool, int)) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(item) for item in value]
    if isinstance(value, ToolCall):
        return json.loads(value.to_json())
    return str(value)


class GymEnvironment(Environment):
    """A worldgym env (``gym.make(env_id, **env_kwargs)``) as an OpenEnv environment.

    Tool envs take :class:`ToolAction` (MCP ``list_tools`` / ``call_tool``), text envs :class:`TextAction`.
    Nothing a client sends raises: a bad call gets the env's own error observation, a step before ``reset``
    or after the episode's end (or after the server closed the session) an observation with ``done=True`` and
    ``info["errors"]``, a reset with a bad seed, options or episode id, or one the env rejects, the same
    (``response_type`` ``"reset_failed"``). ``info`` holds only the keys :mod:`worldgym.serve.info` lets the
    client read (no answers, no server paths).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # every session has its own env instance; envs share no mutable state

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None):
        super().__init__()
        self.env_id = env_id
        self._env: gym.Env | None = gym.make(env_id, **dict(env_kwargs or {}))
        self._kind = action_kind(self._env)
        self._tools = self._mcp_tools(self._env)
        self._running = False
        self._episode_id: str | None = None
        self._step_count = 0

    @staticmethod
    def _mcp_tools(env: gym.Env) -> list[MCPTool]:
        if not isinstance(env.action_space, ToolCallSpace):
            return []
        return [MCPTool(name=tool.name, description=tool.description, input_schema=dict(tool.parameters))
                for tool in env.action_space.tools.values()]

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              options: dict[str, Any] | None = None, **kwargs: Any) -> EnvObservation:
        """Start an episode (``seed`` and ``options`` as in Gymnasium); unknown keyword arguments are ignored."""
        if self._env is None:
            return self._closed()
        self._running = False
        problem = _reset_problem(seed, episode_id, options)
        if problem is not None:
            return _error(f"reset failed: {problem}", "reset_failed")
        try:
            text, info = self._env.reset(seed=seed, options=options)
        except (TypeError, ValueError, KeyError, gym.error.Error) as error:  # options the env rejects
            return _error(f"reset failed: {_brief(str(error))}", "reset_failed")
        except Exception:  # an env bug, not the client's: log it here, answer the client
            logger.exception("%s: reset failed", self.env_id)
            return _error("the env failed to reset: try again or report it to the server's operator", "env_error")
        self._running = True
        self._episode_id = episode_id or str(uuid.uuid4())
        self._step_count = 0
        return EnvObservation(text=text, info=jsonable(client_info(self.env_id, info)), done=False, reward=None)

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """Answer ``list_tools`` at any time; otherwise step the running episode with the action."""
        if isinstance(action, ListToolsAction) or getattr(action, "type", None) == "list_tools":
            return ListToolsObservation(tools=self._tools)
        if self._env is None:
            return self._closed()
        if not self._running:
            return _error("no episode is running: reset first (the last one ended, or none started)",
                          "reset_needed")
        try:
            text, reward, terminated, truncated, info = self._env.step(self._gym_action(action))
        except Exception:  # an env bug, not the client's: log it here, end the episode, answer the client
            logger.exception("%s: step failed; the episode ended", self.env_id)
            self._running = False
            return _error("the env failed on this action; the episode ended: reset to start another", "env_error")
        self._step_count += 1
        self._running = not (terminated or truncated)
        fields = dict(text=text, reward=float(reward), done=terminated or truncated, truncated=truncated,
                      info=jsonable(client_info(self.env_id, info)))
        if self._kind == "tool":
            name = getattr(action, "tool_name", None)
            return ToolResultObservation(tool_name=name if isinstance(name, str) else "", result=text, **fields)
        return EnvObservation(**fields)

    def _gym_action(self, action: Action) -> Any:
        """The env's action: a ToolCall (or ToolCallError) for tool envs, the text for text envs."""
        if self._kind == "text":
            return action.text if isinstance(action, TextAction) else None
        if not isinstance(action, ToolAction):
            return ToolCallError(f"expected a call_tool action, got {type(action).__name__}")
        if action.invalid_reason is not None:
            return ToolCallError(action.invalid_reason, action.raw_text)
        if action.type != "call_tool":
            return ToolCallError(f"unknown action type {action.type!r}; expected 'call_tool' or 'list_tools'")
        arguments = {} if action.arguments is None else action.arguments
        return ToolCall(action.tool_name, arguments)

    def _closed(self) -> EnvObservation:
        return _error("this session was closed (idle past the server's session timeout): connect again",
                      "session_closed")

    @property
    def state(self) -> EnvState:
        """The episode id, steps taken and whether an episode is running."""
        return EnvState(env_id=self.env_id, episode_id=self._episode_id, step_count=self._step_count,
                        running=self._running)

    def get_metadata(self) -> EnvironmentMetadata:
        """The env id and the first line of its class docstring."""
        doc = (type(self._env.unwrapped).__doc__ or "") if self._env is not None else ""
        return EnvironmentMetadata(name=self.env_id, description=doc.strip().split("\n")[0] or self.env_id)

    def close(self) -> None:
        """Close the env and free it; the session's later requests get a "session closed" observation."""
        env, self._env, self._running = self._env, None, False
        if env is not None:
            env.close()


def _reset_problem(seed: Any, episode_id: Any, options: Any) -> str | None:
    """Why a reset's arguments are not usable (None when they are): checked before the env sees them."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < MAX_SEED):
        return f"seed must be null or an integer in [0, 2**64), got {_brief(seed)}"
    if options is not None and not isinstance(options, Mapping):
        return f"options must be null or an object, got {type(options).__name__}"
    if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > MAX_EPISODE_ID_CHARS):
        return f"episode_id must be null or a string of at most {MAX_EPISODE_ID_CHARS} characters"
    return None


def _brief(value: Any, limit: int = 200) -> str:
    """A short text for an error message: what the client sent is never echoed in full."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_SEED:
        return "an integer out of range"
    if isinstance(value, str):
        text = value
    elif isinstance(value, (bool, int, float)) or value is None:
        text = repr(value)
    else:
        text = f"a value of type {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error(message: str, response_type: str) -> EnvObservation:
    return EnvObservation(text=f"Error: {message}.", done=True, reward=0.0,
                          info={"errors": [message], "response_type": response_type, "success": False})
