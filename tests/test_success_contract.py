"""The success contract: every registered env reports ``info["success"]`` (a bool) on every step, ``True`` only
on the step that completes the task. Trainers and benchmarks read only that key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest

import worldgym  # noqa: F401  (registers the ids)
from worldgym.envs.csr_phone.policies import ExpertPolicy
from worldgym.registration import ENV_SPECS
from worldgym.spaces import ToolCall
from worldgym.wrappers import ParseToolCall

Policy = Callable[[gym.Env, Any, dict], Any]


def _csr_expert() -> Policy:
    expert = ExpertPolicy()

    def act(env: gym.Env, observation: Any, info: dict) -> Any:
        if "tools" in info:
            expert.reset(observation, info)
        return expert.act(observation, info)

    return act


def _csr_wrong_number(env: gym.Env, observation: Any, info: dict) -> Any:
    return ToolCall("make_phone_call", {"phone_number": "0-000-000-0000"})


def _math_answer(env: gym.Env, observation: Any, info: dict) -> str:
    return f"#### {env.unwrapped._problem.answer_text}"


def _longhealth(correct: bool) -> Policy:
    def act(env: gym.Env, observation: Any, info: dict) -> str:
        letter = info["answer"] if correct else next(x for x in "ABCDE" if x != info["answer"])
        return f"<answer>{letter}</answer>"

    return act


def _ztoken(correct: bool) -> Policy:
    def act(env: gym.Env, observation: Any, info: dict) -> Any:
        digits = list(env.unwrapped._problem.digits)
        if not correct:
            digits[-1] = (digits[-1] + 1) % 10
        return {"token": env.unwrapped.answer_action, "digits": digits}

    return act


# Per env id: (a policy that completes the task, one that never does). GameBoy-v0, whose winning policy would
# have to play the game, is covered by tests/envs/gameboy/test_gameboy_vector_env.py (goal reached -> success,
# truncated -> not); its single env (gym.make) passes the vector env's infos through unchanged.
POLICIES: dict[str, tuple[Callable[[], Policy], Policy]] = {
    "CSRPhone-v1": (_csr_expert, _csr_wrong_number),
    "MathQA-v1": (lambda: _math_answer, lambda env, obs, info: "#### -1"),
    "LongHealthQA-v0": (lambda: _longhealth(True), _longhealth(False)),
    "ZTokenDigits-v1": (lambda: _ztoken(True), _ztoken(False)),
}
COVERED_ELSEWHERE = {"GameBoy-v0"}


def test_every_registered_env_is_covered() -> None:
    assert set(ENV_SPECS) == set(POLICIES) | COVERED_ELSEWHERE


def _play(env: gym.Env, policy: Policy, seed: int) -> list[dict]:
    observation, info = env.reset(seed=seed)
    infos = []
    terminated = truncated = False
    while not (terminated or truncated):
        observation, _, terminated, truncated, info = env.step(policy(env, observation, info))
        infos.append(info)
    return infos


@pytest.mark.parametrize("env_id", sorted(POLICIES))
@pytest.mark.parametrize("winning", [True, False])
def test_success_is_reported_on_every_step_and_true_only_on_completion(env_id: str, winning: bool) -> None:
    make_winner, loser = POLICIES[env_id]
    env = gym.make(env_id)
    for seed in range(3):
        infos = _play(env, make_winner() if winning else loser, seed)
        assert all(isinstance(info["success"], bool) for info in infos)
        assert [info["success"] for info in infos] == [False] * (len(infos) - 1) + [winning]


def test_tool_call_wrapper_reports_success_false_for_malformed_text() -> None:
    env = ParseToolCall(gym.make("CSRPhone-v1"))
    env.reset(seed=0)
    _, _, _, _, info = env.step("no call here")
    assert info["response_type"] == "invalid_call" and info["success"] is False
