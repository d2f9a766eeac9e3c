"""Fuzz: 100,000 steps of sampled calls and random/malformed text never raise and respect the turn limit."""

import json

import numpy as np

from worldgym.envs.csr_phone.env import CSRPhoneEnv
from worldgym.spaces import ToolCall
from worldgym.wrappers import ParseToolCall, format_tool_call

STEPS = 50_000  # per half: sampled ToolCalls, then text through ParseToolCall (100,000 in all)
_ALPHABET = np.array(list("abc{}[]\":,<>/_ 0123456789tool_call\n\u00e9\u2603"))


def run(env, next_action, steps: int) -> int:
    episodes, turns = 0, 0
    env.reset(seed=0)
    for _ in range(steps):
        observation, reward, terminated, truncated, _info = env.step(next_action())
        turns += 1
        assert isinstance(observation, str) and reward in (0.0, 1.0) and turns <= env.unwrapped.max_turns
        assert (turns == env.unwrapped.max_turns) == truncated or terminated
        if terminated or truncated:
            episodes, turns = episodes + 1, 0
            env.reset()
    return episodes


def test_sampled_tool_calls():
    env = CSRPhoneEnv()
    env.action_space.seed(0)
    assert run(env, env.action_space.sample, STEPS) >= STEPS // 16


def test_random_and_malformed_text_through_the_wrapper():
    env = ParseToolCall(CSRPhoneEnv())
    inner_space = env.unwrapped.action_space
    inner_space.seed(1)
    rng = np.random.default_rng(1)

    def garbage() -> str:
        return "".join(rng.choice(_ALPHABET, size=int(rng.integers(0, 60))))

    def next_text() -> str:
        kind = int(rng.integers(6))
        if kind == 0:
            return format_tool_call(inner_space.sample())
        if kind == 1:
            return format_tool_call(inner_space.sample())[: int(rng.integers(0, 40))]
        if kind == 2:
            name = ["search_company", "auth_info_form", "make_phone_call", "hang_up"][int(rng.integers(4))]
            arguments = {"company": 7, "fields": "pin", "phone_number": None, garbage(): [garbage()]}
            return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
        if kind == 3:
            return f"<tool_call>{garbage()}</tool_call>"
        if kind == 4:
            return f'<tool_call>{{"name": "make_phone_call", "arguments": "{garbage()}"}}'
        return garbage()

    assert run(env, next_text, STEPS) >= STEPS // 16
    env.reset(seed=2)
    observation, _, _, _, info = env.step(123)  # a non-string reply is an invalid call, not an exception
    assert info["response_type"] == "invalid_call" and observation.startswith("Error: invalid tool call.")
    _, _, _, _, info = env.unwrapped.step(ToolCall("hang_up", {}))
    assert info["response_type"] == "invalid_call" and info["turn"] == 2
