"""CSRPhone-v1 in Gymnasium vector envs, with and without the text wrapper."""

import gymnasium as gym
import pytest

import worldgym  # noqa: F401  (registers CSRPhone-v1)
from worldgym.envs.csr_phone.env import CSR_TOOLS
from worldgym.envs.csr_phone.policies import ExpertPolicy, TextPolicy
from worldgym.wrappers import ParseToolCall

TOOLS = [tool.openai() for tool in CSR_TOOLS]


def env_info(infos: dict, i: int) -> dict:
    """What the expert reads for sub-env ``i``: the tool schemas and the response type."""
    return {"tools": TOOLS, "response_type": infos["response_type"][i] if "response_type" in infos else ""}


def make_env():
    return gym.make("CSRPhone-v1", difficulty=3)


def make_text_env():
    return ParseToolCall(gym.make("CSRPhone-v1", difficulty=3))


# Text observations must not use shared memory: with gymnasium 1.4's default (shared_memory=True)
# AsyncVectorEnv returns strings of the charset's first character instead of the observations.
VECTOR_ENVS = [
    pytest.param(lambda fns: gym.vector.SyncVectorEnv(fns), id="sync"),
    pytest.param(lambda fns: gym.vector.AsyncVectorEnv(fns, shared_memory=False), id="async"),
]


@pytest.mark.parametrize("make_vector", VECTOR_ENVS)
@pytest.mark.parametrize("text", [False, True], ids=["toolcall", "text"])
def test_vector_env_runs_expert_episodes_to_completion(make_vector, text):
    envs = make_vector([make_text_env if text else make_env] * 2)
    try:
        observations, infos = envs.reset(seed=[5, 6])
        policies = [TextPolicy(ExpertPolicy()) if text else ExpertPolicy() for _ in range(2)]
        assert [tool["function"]["name"] for tool in infos["tools"][1]] == [t.name for t in CSR_TOOLS]
        for i, policy in enumerate(policies):
            policy.reset(observations[i], env_info(infos, i))
        done = [False, False]
        for _ in range(16):
            actions = tuple(p.act(observations[i], env_info(infos, i)) for i, p in enumerate(policies))
            observations, _rewards, terminated, _truncated, infos = envs.step(actions)
            for i in range(2):
                assert isinstance(observations[i], str) and observations[i]
                done[i] = done[i] or bool(terminated[i])
            if all(done):
                break
        assert all(done)
    finally:
        envs.close()
