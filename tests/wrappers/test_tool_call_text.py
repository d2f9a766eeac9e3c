"""Tests for parsing model text into tool calls."""

import json

import pytest

from worldgym.spaces import ToolCall, ToolCallError
from worldgym.wrappers import format_tool_call, parse_tool_call


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>', ToolCall("f", {"x": 1})),
        ('Sure.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call> done', ToolCall("f", {})),
        ('<tool_call>{"name": "f", "arguments": {"x": "a"}}', ToolCall("f", {"x": "a"})),  # no closing tag
        ('<tool_call>{"name": "f", "arguments": "{\\"x\\": 2}"}</tool_call>', ToolCall("f", {"x": 2})),
        ('<tool_call>{"name": "f"}</tool_call>', ToolCall("f", {})),
        ('<tool_call>{"name":"a","arguments":{}}</tool_call><tool_call>{"name":"b","arguments":{}}</tool_call>',
         ToolCall("a", {})),
    ],
)
def test_parse_valid_calls(text, expected):
    assert parse_tool_call(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("I am not sure what to do.", "no <tool_call>"),
        ("<tool_call>{name: f}</tool_call>", "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "string field 'name'"),
        ('<tool_call>{"name": "f", "arguments": "{oops"}</tool_call>', "'arguments' string is not valid JSON"),
        ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "'arguments' must be a JSON object"),
        ("<tool_call></tool_call>", "not valid JSON"),
        ('<tool_call>{"name": "f", "arguments": ' + "[" * 10**5 + "]" * 10**5 + "}", "more than 32 levels"),
        ('<tool_call>{"name": "f", "arguments": ' + "[" * 990 + "]" * 990 + "}", "more than 32 levels deep"),
        ('<tool_call>{"name": "f", "arguments": "' + "[" * 5000 + '"}', "more than 32 levels deep"),
        ('<tool_call>{"name": "f", "arguments": {"x": ' + "1" * 10_000 + "}}", "more than 600 digits"),
        ('<tool_call>{"name": "f", "arguments": {"x": -' + "1" * 601 + "}}", "more than 600 digits"),
        ('<tool_call>{"name": "f", "arguments": {"x": NaN}}', "NaN is not a JSON value"),
        ('<tool_call>{"name": "f", "arguments": {"x": -Infinity}}', "-Infinity is not a JSON value"),
    ],
)
def test_parse_malformed_calls_become_errors(text, reason):
    result = parse_tool_call(text)
    assert isinstance(result, ToolCallError)
    assert reason in result.message
    assert result.raw_text == text


def test_format_then_parse_round_trips():
    call = ToolCall("make_phone_call", {"phone_number": "1-800-555-0100", "auth_info": {"zip": "02139"}})
    assert parse_tool_call(format_tool_call(call)) == call


def test_limits_admit_what_they_promise():
    depth_32 = "[" * 31 + "]" * 31  # the arguments object is the first level
    assert parse_tool_call('<tool_call>{"name": "f", "arguments": {"x": ' + depth_32 + "}}") == ToolCall(
        "f", {"x": json.loads(depth_32)})
    assert parse_tool_call('<tool_call>{"name": "f", "arguments": {"x": ' + "9" * 600 + "}}") == ToolCall(
        "f", {"x": int("9" * 600)})


def test_a_reply_longer_than_the_action_space_is_an_error_observation_at_once(monkeypatch):
    import gymnasium as gym

    from worldgym.wrappers import ParseToolCall, tool_call_text

    def no_parsing(text):
        raise AssertionError("an overlong reply must be refused before its JSON is parsed")

    monkeypatch.setattr(tool_call_text, "_load_json", no_parsing)  # parsing 5 MB of JSON alone takes ~0.2 s
    env = ParseToolCall(gym.make("CSRPhone-v1"), max_action_chars=4096)
    env.reset(seed=0)
    call = format_tool_call(ToolCall("search_company", {"company": "x" * 5_000_000}))
    observation, reward, terminated, _, info = env.step(call)
    assert observation.startswith("Error: invalid tool call. the reply has")
    assert "more than this env's max_action_chars=4096" in info["errors"][0] and info["raw_text"] is call
    assert (reward, terminated, info["turn"]) == (0.0, False, 1)


def test_the_text_action_space_admits_any_unicode_reply_up_to_its_length():
    import gymnasium as gym

    from worldgym.wrappers import ParseToolCall

    env = ParseToolCall(gym.make("CSRPhone-v1"), max_action_chars=64)
    assert "Café’s ¾ 中文 🙂" in env.action_space and "é" * 64 in env.action_space
    assert "é" * 65 not in env.action_space and b"x" not in env.action_space
    env.action_space.seed(0)
    assert all(env.action_space.sample() in env.action_space for _ in range(20))
