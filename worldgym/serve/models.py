"""The wire types of worldgym's OpenEnv server: pydantic actions, observations and state.

Observations carry the Gymnasium step whole: ``text`` (the observation), ``reward``, ``done`` (terminated or
truncated), ``truncated`` and ``info`` (JSON-safe). A tool env's step answers with a ``CallToolObservation``
(``tool_name``, ``result``) that also carries those fields, so OpenEnv's MCP clients read ``result`` and generic
clients read everything.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.mcp_types import CallToolObservation
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

__all__ = ["EnvObservation", "EnvState", "TextAction", "ToolAction", "ToolResultObservation"]


class TextAction(Action):
    """A text env's action: the reply text (anything but a string is graded as an invalid answer)."""

    text: Any = Field(default=None, description="The reply, e.g. the answer to the question.")


class ToolAction(Action):
    """A tool env's action: an MCP ``call_tool`` or ``list_tools``, or a reply that held no readable call.

    Fields are loosely typed on purpose: whatever a client sends as a call reaches the env, which answers a
    malformed one with its recoverable error observation (as in-process), not with a transport error.
    """

    type: str = Field(default="call_tool", description="'call_tool' or 'list_tools'.")
    tool_name: Any = Field(default=None, description="The tool to call (call_tool).")
    arguments: Any = Field(default=None, description="The call's arguments, an object (call_tool).")
    invalid_reason: str | None = Field(
        default=None, description="Set instead of a call when the model's reply held no readable tool call: why."
    )
    raw_text: str = Field(default="", description="The reply text, with invalid_reason.")


class EnvObservation(Observation):
    """A reset's or text step's result: the observation text, whether the episode was truncated, its info."""

    text: str = Field(default="", description="The observation (task prompt, tool result, grader's reply).")
    truncated: bool = Field(default=False, description="The episode hit its limit (done is then True too).")
    info: dict[str, Any] = Field(default_factory=dict, description="The env's info dict, JSON-safe.")


class ToolResultObservation(CallToolObservation):
    """A tool call's result: MCP's ``tool_name``/``result`` plus the step's ``text``, ``truncated`` and ``info``.

    A call the env rejects (unknown tool, arguments against the schema) is answered here too, with the env's
    error text as ``result``: it costs a turn, as in-process, and the episode goes on.
    """

    text: str = Field(default="", description="The observation text (equal to result).")
    truncated: bool = Field(default=False, description="The episode hit its turn limit.")
    info: dict[str, Any] = Field(default_factory=dict, description="The env's info dict, JSON-safe.")


class EnvState(State):
    """A session's state: the served env id, the episode id and steps taken, whether an episode runs."""

    env_id: str = Field(default="", description="The Gymnasium id of the served env.")
    running: bool = Field(default=False, description="An episode is running (reset, not yet done).")
