"""Text envs for LLM agents: any registered env, its tool calls read from the model's text when it takes them."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from worldgym.spaces import ToolCallSpace
from worldgym.wrappers import ParseToolCall

__all__ = ["is_tool_env", "make_text_env"]


def is_tool_env(env: gym.Env) -> bool:
    """Whether ``env`` acts on :class:`~worldgym.spaces.ToolCall` objects (a :class:`ToolCallSpace` action
    space), so a model's text must be parsed into calls first.

    >>> import worldgym
    >>> is_tool_env(gym.make("CSRPhone-v1")), is_tool_env(gym.make("MathQA-v1"))
    (True, False)
    """
    return isinstance(env.action_space, ToolCallSpace)


def make_text_env(env_id: str, env_kwargs: dict[str, Any] | None = None) -> gym.Env:
    """``gym.make(env_id, **env_kwargs)`` acting on text: a tool-call env (:func:`is_tool_env`) is wrapped in
    :class:`~worldgym.wrappers.ParseToolCall`, an answer-text env is returned as it is.

    >>> [isinstance(make_text_env(env_id), ParseToolCall) for env_id in ("CSRPhone-v1", "MathQA-v1")]
    [True, False]
    """
    import worldgym  # noqa: F401  (registers the ids)

    env = gym.make(env_id, **(env_kwargs or {}))
    return ParseToolCall(env) if is_tool_env(env) else env
