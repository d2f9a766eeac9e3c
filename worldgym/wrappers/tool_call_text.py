"""Bridges between a model's raw text and tool calls: Hermes-style ``<tool_call>{json}</tool_call>`` blocks."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym

from worldgym.spaces import (
    MAX_ARGUMENT_DEPTH,
    MAX_INT_DIGITS,
    ToolCall,
    ToolCallError,
    ToolCallSpace,
    nesting_exceeds,
)
from worldgym.text import UnicodeText

__all__ = ["TOOL_CALL_CLOSE", "TOOL_CALL_OPEN", "ParseToolCall", "format_tool_call", "parse_tool_call"]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"


def format_tool_call(call: ToolCall) -> str:
    """The Hermes text form of ``call``, as a model should write it (and as expert chats teach it): the tags on
    lines of their own around :meth:`ToolCall.to_json`, name first. :func:`parse_tool_call` reads it back.

    >>> print(format_tool_call(ToolCall("search_company", {"company": "Acme"})))
    <tool_call>
    {"name": "search_company", "arguments": {"company": "Acme"}}
    </tool_call>
    """
    return f"{TOOL_CALL_OPEN}\n{call.to_json()}\n{TOOL_CALL_CLOSE}"


def parse_tool_call(text: str) -> ToolCall | ToolCallError:
    """The first ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in ``text``, or why there is none.

    A missing closing tag is tolerated (generation often stops right before it). ``arguments`` may also be a JSON
    string holding an object. The result is not checked against any schema: that is the env's job.

    Never raises: besides invalid JSON, text nested more than ``MAX_ARGUMENT_DEPTH`` levels deep, integers of
    more than ``MAX_INT_DIGITS`` digits and ``NaN``/``Infinity`` (not JSON, though Python reads them) are
    errors.

    >>> parse_tool_call('I will search. <tool_call>{"name": "search_company", "arguments": {"company": "Acme"}}'
    ...                 '</tool_call>')
    ToolCall(name='search_company', arguments={'company': 'Acme'})
    >>> parse_tool_call("Hello!").message
    'no <tool_call>...</tool_call> block found in the reply'
    >>> parse_tool_call('<tool_call>{"name": "f", "arguments": {"x": NaN}}').message
    'the tool call is not valid JSON (NaN is not a JSON value)'
    """
    start = text.find(TOOL_CALL_OPEN)
    if start < 0:
        return ToolCallError(f"no {TOOL_CALL_OPEN}...{TOOL_CALL_CLOSE} block found in the reply", text)
    body = text[start + len(TOOL_CALL_OPEN):]
    end = body.find(TOOL_CALL_CLOSE)
    body = (body if end < 0 else body[:end]).strip()
    payload = _load_json(body)
    if isinstance(payload, _Unreadable):
        return ToolCallError(f"the tool call is not valid JSON ({payload})", text)
    if not isinstance(payload, dict):
        return ToolCallError("the tool call must be a JSON object with 'name' and 'arguments'", text)
    name, arguments = payload.get("name"), payload.get("arguments", {})
    if not isinstance(name, str):
        return ToolCallError("the tool call needs a string field 'name'", text)
    if isinstance(arguments, str):
        arguments = _load_json(arguments)
        if isinstance(arguments, _Unreadable):
            return ToolCallError(f"the tool call's 'arguments' string is not valid JSON ({arguments})", text)
    if not isinstance(arguments, dict):
        return ToolCallError("the tool call's 'arguments' must be a JSON object", text)
    return ToolCall(name, arguments)


class _Unreadable(ValueError):
    """Why a JSON text was not read (returned, not raised, by :func:`_load_json`)."""


def _load_json(text: str) -> Any:
    """The JSON value in ``text``, or an :class:`_Unreadable` saying why there is none; never raises."""
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as error:
        return _Unreadable(f"{error.msg} at position {error.pos}")
    except _Unreadable as error:
        return error
    except RecursionError:  # json's C parser recurses once per level
        return _Unreadable(f"nested more than {MAX_ARGUMENT_DEPTH} levels deep")
    if isinstance(value, (dict, list)) and nesting_exceeds(value, MAX_ARGUMENT_DEPTH + 1):  # + call object
        return _Unreadable(f"nested more than {MAX_ARGUMENT_DEPTH} levels deep")
    return value


def _parse_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise _Unreadable(f"an integer has more than {MAX_INT_DIGITS} digits")
    return int(digits)


def _reject_constant(name: str) -> float:
    raise _Unreadable(f"{name} is not a JSON value")


_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_constant=_reject_constant)


class ParseToolCall(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """Lets an agent act with raw text: each action string is parsed into a :class:`ToolCall`.

    Text without a well-formed call becomes a :class:`ToolCallError`, which the wrapped tool env answers with an
    error observation that costs a turn, so a malformed reply never raises. The wrapped env's action space must be
    a :class:`ToolCallSpace`; this wrapper's action space is :class:`worldgym.text.UnicodeText`: any text (every
    character is passed on unchanged) of at most ``max_action_chars`` characters. A longer reply is not parsed:
    it becomes a :class:`ToolCallError` at once, so a reply of megabytes costs microseconds, not a JSON parse.

    Args:
        env: a tool-call env (e.g. ``gym.make("CSRPhone-v1")``).
        max_action_chars: the longest reply the action space admits.
    """

    def __init__(self, env: gym.Env, max_action_chars: int = 4096):
        if not isinstance(env.action_space, ToolCallSpace):
            raise TypeError(f"ParseToolCall needs an env with a ToolCallSpace action space, got {env.action_space}")
        if type(max_action_chars) is not int:  # bool is an int subclass
            raise TypeError(f"max_action_chars must be an int, got {type(max_action_chars).__name__}")
        if max_action_chars < 1:
            raise ValueError(f"max_action_chars must be >= 1, got {max_action_chars}")
        gym.utils.RecordConstructorArgs.__init__(self, max_action_chars=max_action_chars)
        gym.ActionWrapper.__init__(self, env)
        self.action_space = UnicodeText(max_action_chars)

    def action(self, action: Any) -> ToolCall | ToolCallError:
        """Parse a model reply; non-string actions and replies longer than the action space become a
        ToolCallError too."""
        if not isinstance(action, str):
            return ToolCallError(f"expected the reply as a string, got {type(action).__name__}")
        if len(action) > self.action_space.max_length:
            return ToolCallError(f"the reply has {len(action)} characters, more than this env's "
                                 f"max_action_chars={self.action_space.max_length}; write one short tool call",
                                 action)
        return parse_tool_call(action)
