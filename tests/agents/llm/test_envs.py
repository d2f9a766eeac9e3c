"""Text envs for LLM agents: the action space alone decides whether a model's text is parsed into tool calls."""

import gymnasium as gym
import pytest

from worldgym.agents.llm.envs import is_tool_env, make_text_env
from worldgym.envs.tool_env import ToolEnv, ToolResult
from worldgym.spaces import Tool, ToolCall
from worldgym.wrappers import ParseToolCall, format_tool_call

GUESS_ID = "worldgym-tests/Guess-v0"


class GuessEnv(ToolEnv):
    """A tool env no list of known ids names: guess a digit."""

    def __init__(self, max_turns: int = 4):
        tool = Tool("guess", "Guess the digit.", {"type": "object", "properties": {
            "number": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["number"]})
        super().__init__([tool], max_turns=max_turns)

    def _reset_task(self, options):
        self.secret = int(self.np_random.integers(10))
        return "Guess my digit.", {}

    def _call_tool(self, call):
        right = call.arguments["number"] == self.secret
        return ToolResult("Correct!" if right else "No.", reward=float(right), terminated=right,
                          info={"response_type": "correct" if right else "wrong"})


@pytest.fixture(scope="module", autouse=True)
def guess_env_id():
    gym.register(GUESS_ID, entry_point=GuessEnv)
    yield
    del gym.registry[GUESS_ID]


@pytest.mark.parametrize(("env_id", "tools"), [("CSRPhone-v1", True), (GUESS_ID, True), ("MathQA-v1", False),
                                                ("LongHealthQA-v0", False)])
def test_a_tool_env_is_wrapped_whatever_its_id(env_id, tools):
    env = make_text_env(env_id)
    assert isinstance(env, ParseToolCall) is tools
    assert is_tool_env(env.unwrapped) is tools
    assert not is_tool_env(env)  # what the agent acts on: text


def test_text_in_the_one_format_reaches_the_tool_env_as_a_call():
    env = make_text_env(GUESS_ID, {"max_turns": 2})
    env.reset(seed=0)
    secret = env.unwrapped.secret
    _, reward, terminated, _, info = env.step(format_tool_call(ToolCall("guess", {"number": secret})))
    assert (reward, terminated, info["response_type"]) == (1.0, True, "correct")


def test_env_kwargs_reach_the_env():
    assert make_text_env(GUESS_ID, {"max_turns": 7}).unwrapped.max_turns == 7
