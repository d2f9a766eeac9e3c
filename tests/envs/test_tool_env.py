"""Tests for the ToolEnv base class shared by tool-call text envs."""

from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from worldgym.envs.tool_env import ToolEnv, ToolResult
from worldgym.spaces import Tool, ToolCall, ToolCallError
from worldgym.wrappers import ParseToolCall


class GuessEnv(ToolEnv):
    """Guess a secret number in [0, 9]; the reply says higher/lower."""

    def __init__(self, max_turns: int = 4):
        tool = Tool("guess", "Guess the number.", {"type": "object", "properties": {
            "number": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["number"]})
        super().__init__([tool], max_turns=max_turns, max_observation_chars=64, render_mode="ansi")

    def _reset_task(self, options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
        self.secret = int(self.np_random.integers(10))
        return "Guess my number (0-9). \u00e9", {}

    def _call_tool(self, call: ToolCall) -> ToolResult:
        number = call.arguments["number"]
        if number == self.secret:
            return ToolResult("Correct!", reward=1.0, terminated=True, info={"response_type": "correct"})
        hint = "higher" if number < self.secret else "lower"
        return ToolResult(f"No, {hint}." + "!" * 100, info={"response_type": hint})


def test_check_env_passes_raw_and_wrapped():
    check_env(GuessEnv(), skip_render_check=True)
    check_env(ParseToolCall(GuessEnv()), skip_render_check=True)


def test_invalid_actions_cost_a_turn_and_truncate():
    env = GuessEnv(max_turns=3)
    prompt, info = env.reset(seed=0)
    assert prompt == "Guess my number (0-9). \u00e9"  # any Unicode text is kept as it is
    assert "observation_changes" not in info
    assert info["tools"][0]["function"]["name"] == "guess"
    obs, reward, terminated, truncated, info = env.step(ToolCallError("no <tool_call> block"))
    assert obs.startswith("Error: invalid tool call. no <tool_call> block")
    assert (reward, terminated, truncated, info["turn"], info["response_type"]) == (0.0, False, False, 1,
                                                                                    "invalid_call")
    _, _, _, _, info = env.step(ToolCall("guess", {"number": 42}))
    assert info["errors"] == ["guess: number must be <= 9, got 42"]
    _, _, terminated, truncated, _ = env.step("not even a call")
    assert (terminated, truncated) == (False, True)
    assert "<invalid action of type str>" in env.render()


def test_observations_are_cut_to_the_space_limit():
    env = GuessEnv()
    env.reset(seed=1)
    wrong = (env.secret + 1) % 10
    obs, *_, info = env.step(ToolCall("guess", {"number": wrong}))
    assert len(obs) == 64 and obs.endswith("...[truncated]") and obs in env.observation_space
    assert info["observation_changes"]["truncated_from"] in (len("No, higher.") + 100, len("No, lower.") + 100)


def test_lone_surrogates_in_a_tool_result_become_u_fffd_and_are_reported():
    env = GuessEnv()
    env.reset(seed=0)
    env._call_tool = lambda call: ToolResult("caf\u00e9 \ud800\udfff \u2028 \u20ac")
    obs, *_, info = env.step(ToolCall("guess", {"number": 1}))
    assert obs == "caf\u00e9 \ufffd\ufffd \u2028 \u20ac" and obs in env.observation_space
    assert info["observation_changes"] == {"surrogates_replaced": 2}


def test_step_before_reset_raises():
    with pytest.raises(gym.error.ResetNeeded):
        GuessEnv().step(ToolCall("guess", {"number": 1}))


def test_constructor_validates():
    with pytest.raises(ValueError, match="max_turns=0 is invalid: use an integer >= 1"):
        GuessEnv(max_turns=0)


def test_stepping_an_ended_episode_raises_until_reset():
    env = GuessEnv()
    env.reset(seed=0)
    _, reward, terminated, _, _info = env.step(ToolCall("guess", {"number": env.secret}))
    assert (reward, terminated) == (1.0, True)
    with pytest.raises(gym.error.ResetNeeded, match="episode has ended"):
        env.step(ToolCall("guess", {"number": env.secret}))  # no reward farming after the end
    env.reset(seed=0)
    assert env.step(ToolCall("guess", {"number": env.secret}))[1] == 1.0


def test_invalid_text_keeps_the_raw_reply_in_info():
    env = ParseToolCall(GuessEnv())
    env.reset(seed=0)
    *_, info = env.step("I think it is 3")
    assert info["raw_text"] == "I think it is 3" and info["response_type"] == "invalid_call"


def test_small_observation_limit_rejected():
    class Tiny(GuessEnv):
        def __init__(self):
            ToolEnv.__init__(self, [], max_turns=1, max_observation_chars=10)

    with pytest.raises(ValueError, match="max_observation_chars=10 is invalid: use an integer >= 32"):
        Tiny()


def test_what_an_env_keeps_of_each_action_is_bounded():
    from worldgym.text import MAX_STORED_ACTION_CHARS

    env = GuessEnv(max_turns=8)
    env.reset(seed=0)
    for _ in range(3):
        env.step(ToolCallError("no tool call", "x" * 1_000_000))
        env.step(ToolCall("guess", {"number": "y" * 1_000_000}))
    assert all(len(call) <= MAX_STORED_ACTION_CHARS for call, _ in env._transcript)
    assert len(env.render()) < 4 * (MAX_STORED_ACTION_CHARS + 200)
