"""``ToolEnv``: the shared base of text environments whose actions are tool calls (turns, errors, limits)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from worldgym.config import check_choice, check_field, check_positive_int
from worldgym.spaces import Tool, ToolCall, ToolCallError, ToolCallSpace, invalid_call_text
from worldgym.text import (
    MAX_STORED_ACTION_CHARS,
    OBSERVATION_CHANGES,
    UnicodeText,
    fit_observation_text,
    stored_action_text,
)

__all__ = ["ToolEnv", "ToolResult"]


@dataclass
class ToolResult:
    """What a tool call produced: the observation ``text``, the ``reward``, whether the task ended, whether it
    ended in success, extra ``info``."""

    text: str
    reward: float = 0.0
    terminated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    success: bool = False


class ToolEnv(gym.Env[str, ToolCall]):
    """Base class for tool-call text envs.

    Subclasses describe their task in :meth:`_reset_task` and answer valid calls in :meth:`_call_tool`; this class
    owns what every such env shares: the :class:`ToolCallSpace` action space and ``Text`` observation space, the
    turn counter and turn limit (``truncated`` after ``max_turns`` calls; stepping an ended episode raises
    ``ResetNeeded``), and the answer to invalid actions — a
    :class:`ToolCallError` from a text wrapper, a call that fails its schema (wrong argument types, unknown
    tool names, NaN, nesting deeper than :data:`worldgym.spaces.MAX_ARGUMENT_DEPTH`) or any other object costs
    a turn and yields an error observation, never an exception.

    Observations are Unicode strings of at most ``max_observation_chars`` (a :class:`worldgym.text.UnicodeText`
    space): tool results keep every character (names in any script, ``’``, ``€``), except the documented changes
    of :func:`worldgym.text.fit_observation_text` (longer text is cut with a marker, lone surrogates become
    U+FFFD), which ``info["observation_changes"]`` reports when they happen. ``info`` on reset carries
    ``tools`` (OpenAI format, for a chat template); on every step it carries ``turn``, ``success`` (the
    library's one success contract: ``True`` on the step that completes the task, else ``False``) and
    ``response_type`` (``"invalid_call"`` for an invalid action, with ``errors`` and, for unparsable text,
    ``raw_text``; ``"tool_result"`` unless the subclass names a finer type).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, tools: Sequence[Tool], max_turns: int, max_observation_chars: int = 4096,
                 render_mode: str | None = None):
        check_positive_int("max_turns", max_turns)
        check_field(isinstance(max_observation_chars, int) and max_observation_chars >= 32,
                    "max_observation_chars", max_observation_chars, "use an integer >= 32")
        check_choice("render_mode", render_mode, [None, "ansi"])
        self.action_space = ToolCallSpace(tools)
        self.observation_space = UnicodeText(max_observation_chars)
        self.max_turns = max_turns
        self.max_observation_chars = max_observation_chars
        self.render_mode = render_mode
        self._turn: int | None = None  # None until reset
        self._ended = False  # the episode terminated or was truncated; step() needs a reset first
        # (action as stored_action_text, observation): kept only for render_mode="ansi", the one reader
        self._transcript: list[tuple[str, str]] = []

    @abstractmethod
    def _reset_task(self, options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
        """Start a new task using ``self.np_random``; return the task prompt and reset info."""

    @abstractmethod
    def _call_tool(self, call: ToolCall) -> ToolResult:
        """Answer a call that is valid for ``self.action_space``."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        prompt, info = self._reset_task(options)
        self._turn = 0
        self._ended = False
        prompt, changes = fit_observation_text(prompt, self.max_observation_chars)
        self._transcript = [("", prompt)] if self.render_mode == "ansi" else []
        info = {**info, "tools": self.action_space.openai_tools(), "turn": 0}
        if changes:
            info[OBSERVATION_CHANGES] = changes
        return prompt, info

    def step(self, action: ToolCall | ToolCallError) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._turn is None:
            raise gym.error.ResetNeeded("Call reset() before step().")
        if self._ended:
            raise gym.error.ResetNeeded("The episode has ended (terminated or truncated): call reset() first.")
        self._turn += 1
        invalid_text = isinstance(action, ToolCallError)
        errors = [_reason(action)] if invalid_text else self.action_space.validate(action)
        if errors:
            info = {"response_type": "invalid_call", "errors": errors}
            if invalid_text:
                info["raw_text"] = action.raw_text
            result = ToolResult(invalid_call_text(errors), info=info)
        else:
            result = self._call_tool(action)
            if "success" in result.info:
                raise TypeError(
                    f"{type(self).__name__}._call_tool put 'success' in ToolResult.info; report it as "
                    "ToolResult(success=...), which the base class writes to info['success'] on every step"
                )
        text, changes = fit_observation_text(result.text, self.max_observation_chars)
        terminated = result.terminated
        truncated = not terminated and self._turn >= self.max_turns
        self._ended = terminated or truncated
        if self.render_mode == "ansi":  # describing the call is a JSON encoding per step: only for render()
            self._transcript.append((stored_action_text(_describe(action)), text))
        info = {"turn": self._turn, "response_type": "tool_result", **result.info, "success": result.success}
        if changes:
            info[OBSERVATION_CHANGES] = changes
        return text, float(result.reward), terminated, truncated, info

    def render(self) -> str | None:
        """The episode so far as text (``render_mode="ansi"``)."""
        if self.render_mode != "ansi" or not self._transcript:
            return None
        (_, prompt), *turns = self._transcript
        return "\n".join([f"TASK: {prompt}"] + [f"CALL: {call}\nRESULT: {text}" for call, text in turns])


def _reason(error: ToolCallError) -> str:
    """The error's message, or a generic one when a caller built it without a (string) message."""
    message = error.message
    return message if isinstance(message, str) and message else "the reply holds no readable tool call"


def _describe(action: Any) -> str:
    if isinstance(action, ToolCall):
        return action.summary(MAX_STORED_ACTION_CHARS)
    if isinstance(action, ToolCallError):
        return f"<invalid: {_reason(action)}>"
    return f"<invalid action of type {type(action).__name__}>"
