"""Fuzz every text env and wrapper with hostile model text and wrong-typed actions (hypothesis, CI-bounded).

Whatever the action, ``step`` returns an observation in the observation space, never raises, gives the reason
for an invalid action in ``info``, and leaves the env usable: an invalid call changes nothing but the turn
counter, so the scripted expert's episode afterwards matches its episode on a fresh env.
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.envs.csr_phone.env import CSR_TOOLS
from worldgym.envs.csr_phone.policies import ExpertPolicy, TextPolicy
from worldgym.spaces import ToolCall, ToolCallError
from worldgym.wrappers import ParseToolCall, parse_tool_call

FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example])
MAX_TURNS = 40  # room for the expert after one fuzzed call, at every difficulty
TOOL_NAMES = [tool.name for tool in CSR_TOOLS]
ARGUMENT_KEYS = ["company", "fields", "phone_number", "auth_info", "zip_code", "Company", ""]
# Latin letters and Unicode look-alikes (Cyrillic, Greek, fullwidth, dotless i, zero-width joiner).
LOOK_ALIKES = {"a": "\u0430", "o": "\u043e", "e": "\u0435", "c": "\u0441", "p": "\u0440", "i": "\u0131",
               "m": "\uff4d", "_": "\u200d_", "n": "\u03b7", "h": "\u04bb"}

# ------------------------------------------------------------------------------------------ strategies


def _nest(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


@st.composite
def tool_names(draw) -> str:
    """Real tool names, or ones that differ by case, a look-alike letter, spacing or a suffix."""
    name = draw(st.sampled_from(TOOL_NAMES))
    change = draw(st.sampled_from(["same", "upper", "title", "swap", "look", "space", "suffix", "random"]))
    if change == "upper":
        return name.upper()
    if change == "title":
        return name.title()
    if change == "swap":
        return name.swapcase()
    if change == "look":
        letters = [i for i, ch in enumerate(name) if ch in LOOK_ALIKES]
        i = draw(st.sampled_from(letters))
        return name[:i] + LOOK_ALIKES[name[i]] + name[i + 1:]
    if change == "space":
        return draw(st.sampled_from([" ", "\t", "\n", "\x00"])) + name
    if change == "suffix":
        return name + draw(st.sampled_from(["()", "s", "\u200b", "\ud800"]))
    if change == "random":
        return draw(st.text(max_size=20))
    return name


hostile_strings = st.one_of(
    st.text(max_size=30),
    st.text(st.characters(categories=["Cc", "Cs", "Co", "Zl", "Zp"]), max_size=30),  # control, surrogates
    st.binary(max_size=60).map(lambda raw: raw.decode("utf-8", errors="replace")),
    st.binary(max_size=60).map(lambda raw: raw.decode("utf-8", errors="surrogateescape")),
    st.tuples(st.text(min_size=1, max_size=4), st.integers(0, (1 << 20) // 4)).map(lambda t: t[0] * t[1]),
)
# JSON text fragments a parser chokes on: deep nesting, huge numbers, non-JSON constants, escapes, stray tags.
hostile_fragments = st.one_of(
    st.integers(1, 5000).map(_nest),
    st.integers(1, 5000).map(lambda n: '{"a": ' * n + "1" + "}" * n),
    st.integers(1, 3000).map(lambda n: "[" * n),  # unbalanced
    st.integers(1, 20_000).map(lambda n: "9" * n),
    st.integers(1, 5000).map(lambda n: "-" + "1" * n + ".5e" + "9" * min(n, 400)),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999999", "-0", "1E-99999", "0x10", "01", "1_000",
                     "true", "null", '"\\ud800"', '"\\udfff\\ud800"', '"\\u0000"', '"\\"', "\\", '"',
                     "<tool_call>", "</tool_call>", "{", "}", ",", ":", "\ufeff"]),
    hostile_strings.map(json.dumps),
    hostile_strings,
)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(allow_nan=True, allow_infinity=True),
    hostile_strings, st.sampled_from(["Acme", "1-800-555-0100", "zip_code"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(ARGUMENT_KEYS) | st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
call_payloads = st.fixed_dictionaries({"name": tool_names() | scalars, "arguments": json_values})


@st.composite
def model_texts(draw) -> str:
    """What a model might write: a call (well-formed or not), hostile fragments spliced in, or plain junk."""
    payload = json.dumps(draw(call_payloads))  # NaN and Infinity are written as such
    kind = draw(st.sampled_from(["call", "splice", "arguments_string", "fragments", "issue"]))
    if kind == "splice":
        at = draw(st.integers(0, len(payload)))
        payload = payload[:at] + draw(hostile_fragments) + payload[at:]
    elif kind == "arguments_string":
        payload = json.dumps({"name": draw(tool_names()), "arguments": draw(hostile_fragments)})
    elif kind == "fragments":
        payload = "".join(draw(st.lists(hostile_fragments, min_size=1, max_size=4)))
    elif kind == "issue":  # two texts that once crashed the parser (deep nesting, huge integers), varied sizes
        depth, digits = draw(st.integers(500, 5000)), draw(st.integers(4000, 20_000))
        payload = draw(st.sampled_from([
            '{"name": "search_company", "arguments": ' + _nest(depth, "") + "}",
            '{"name": "search_company", "arguments": {"company": ' + "1" * digits + "}}",
        ]))
    opening = draw(st.sampled_from(["<tool_call>", "<tool_call>\n", "", "<TOOL_CALL>", "<tool_call>" * 2]))
    closing = draw(st.sampled_from(["</tool_call>", "", "</tool_call></tool_call>", "\x00"]))
    return draw(hostile_strings.filter(lambda s: len(s) < 100)) + opening + payload + closing


def _nested_list(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _cycle() -> list:
    value: list = []
    value.append(value)
    return value


odd_values = st.one_of(
    json_values,
    st.integers(0, 20_000).map(lambda n: 10**n),  # past Python's int-to-string limit
    st.integers(0, 5000).map(_nested_list),
    st.builds(_cycle),
    st.builds(lambda: {"zip_code": _cycle()}),
    st.sampled_from([b"Acme", {"zip_code"}, ("zip_code", "zip_code"), np.array(["zip_code"]), np.int64(3),
                     np.float32("nan"), object(), range(3), frozenset()]),
)
raw_tool_calls = st.builds(
    ToolCall,
    tool_names() | scalars | st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.sampled_from(ARGUMENT_KEYS) | st.text(max_size=8) | st.integers(), odd_values,
                    max_size=4) | odd_values,
)
non_tool_calls = st.one_of(
    st.none(), st.integers(), st.floats(), hostile_strings, json_values,
    st.builds(ToolCallError, hostile_strings, hostile_strings),
    st.sampled_from([np.zeros(3), {"name": "search_company", "arguments": {}}, b"x", object()]),
)

# ------------------------------------------------------------------------------------------ helpers

_reference: dict[tuple[bool, int], list[tuple[str, float, bool]]] = {}


def _csr_env(text: bool) -> gym.Env:
    env = gym.make("CSRPhone-v1", max_turns=MAX_TURNS, render_mode="ansi")
    return ParseToolCall(env) if text else env


def _expert_steps(env: gym.Env, text: bool, observation: str, info: dict[str, Any]) -> list[tuple]:
    """The scripted expert's (observation, reward, terminated) until its episode ends."""
    expert = TextPolicy(ExpertPolicy()) if text else ExpertPolicy()
    expert.reset(observation, info)
    steps = []
    for _ in range(MAX_TURNS):
        observation, reward, terminated, truncated, info = env.step(expert.act(observation, info))
        steps.append((observation, reward, terminated))
        if terminated or truncated:
            break
    return steps


def _reference_expert(text: bool, seed: int) -> list[tuple]:
    if (text, seed) not in _reference:
        env = _csr_env(text)
        _reference[(text, seed)] = _expert_steps(env, text, *env.reset(seed=seed))
    return _reference[(text, seed)]


def _check_fuzzed_csr_step(env: gym.Env, action: Any, valid: bool, text: bool, seed: int) -> None:
    """One fuzzed step never raises, stays in the observation space, explains invalid calls; then the expert
    still solves the task (exactly as on a fresh env when the fuzzed call was invalid)."""
    first_observation, first_info = env.reset(seed=seed)
    observation, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(observation), observation[:200]
    assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    assert info["turn"] == 1 and info["success"] is (info["response_type"] == "task_complete")
    if valid:
        assert info["response_type"] != "invalid_call"
    else:
        assert info["response_type"] == "invalid_call" and reward == 0.0 and not terminated
        assert info["errors"] and all(isinstance(e, str) and e for e in info["errors"])
        assert observation.startswith("Error: invalid tool call.")
    assert isinstance(env.render(), str)
    if terminated:
        return
    steps = _expert_steps(env, text, first_observation, first_info)
    assert steps[-1][2], "the expert could not finish after the fuzzed call"
    if not valid:
        assert steps == _reference_expert(text, seed)


def _is_valid(env: gym.Env, call: Any) -> bool:
    return env.unwrapped.action_space.contains(call)


# ------------------------------------------------------------------------------------------ tests


@FUZZ
@given(text=model_texts() | hostile_strings | hostile_fragments, seed=st.integers(0, 15))
def test_csr_text_through_parse_tool_call(text: str, seed: int) -> None:
    env = _csr_env(text=True)
    call = parse_tool_call(text)
    _check_fuzzed_csr_step(env, text, isinstance(call, ToolCall) and _is_valid(env, call), True, seed)


@FUZZ
@given(call=raw_tool_calls | non_tool_calls, seed=st.integers(0, 15))
def test_csr_raw_tool_calls_with_wrong_argument_types(call: Any, seed: int) -> None:
    env = _csr_env(text=False)
    _check_fuzzed_csr_step(env, call, _is_valid(env, call), False, seed)


@FUZZ
@given(action=model_texts() | hostile_strings | hostile_fragments | non_tool_calls, seed=st.integers(0, 15))
def test_math_qa_answers(action: Any, seed: int) -> None:
    env = gym.make("MathQA-v1", num_problems=20, render_mode="ansi")
    env.reset(seed=seed)
    observation, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(observation)
    assert reward in (0.0, 1.0) and terminated and not truncated and info["success"] is (reward == 1.0)
    if not isinstance(action, str) or info["predicted"] is None:
        assert reward == 0.0 and info["errors"] and all(isinstance(e, str) for e in info["errors"])
    assert isinstance(env.render(), str)
    _, info = env.reset(seed=seed)  # the expert's answer still scores
    answer = env.unwrapped.problems[info["index"]].answer_text
    assert env.step(f"So... #### {answer}")[1] == 1.0


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "search_company", "arguments": ' + "[" * 990 + "]" * 990 + "}</tool_call>",
    '<tool_call>{"name": "search_company", "arguments": ' + "[" * 100_000 + "]" * 100_000 + "}</tool_call>",
    '<tool_call>{"name": "search_company", "arguments": {"company": ' + "1" * 10_000 + "}}</tool_call>",
    '<tool_call>{"name": "search_company", "arguments": "' + "[" * 100_000 + '"}</tool_call>',
    '<tool_call>{"name": "search_company", "arguments": {"company": NaN}}</tool_call>',
])
def test_the_reported_crashing_texts_are_invalid_calls(text: str) -> None:
    env = _csr_env(text=True)
    _check_fuzzed_csr_step(env, text, False, True, seed=0)


@pytest.mark.parametrize("arguments", [
    {"fields": [10**5000, 10**5000]},  # str() of the int raised ValueError
    {"phone_number": "1-800-555-0100", "auth_info": {"zip_code": 10**5000}},
    {"fields": _nested_list(5000)},  # RecursionError
    {"fields": _cycle()},
    {"company": float("nan")},
])
def test_raw_calls_that_crashed_validation_are_invalid_calls(arguments: dict) -> None:
    env = _csr_env(text=False)
    name = next(tool.name for tool in CSR_TOOLS if set(arguments) <= set(tool.parameters["properties"]))
    _check_fuzzed_csr_step(env, ToolCall(name, arguments), False, False, seed=0)


def test_tool_names_differing_by_case_get_a_hint() -> None:
    env = _csr_env(text=False)
    env.reset(seed=0)
    *_, info = env.step(ToolCall("Search_Company", {"company": "Acme"}))
    assert info["errors"] == [("unknown tool 'Search_Company'; available tools: ['search_company', "
                               "'auth_info_form', 'make_phone_call'] (did you mean 'search_company'?)")]
