"""Actions of the wrong type, over every registered env: a typed error (or, for text envs, the documented
invalid-action observation), and the env's state unchanged — the valid steps after a rejected call give what
they give without it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.envs.csr_phone.policies import ExpertPolicy
from worldgym.envs.ztoken import FlattenTokenDigitsAction
from worldgym.registration import ENV_SPECS

NAN = float("nan")
DIGITS = [1, 2, 3, 4, 5]
# env -> (bad action, expected error) rows; ``step`` is the env's step, ``reset`` a reset with bad options.
ZTOKEN_ROWS = [
    ({"token": 3, "digits": [1.5] * 5}, TypeError),  # the reported case: float digits were scored
    ({"token": 3, "digits": np.ones(5, dtype=np.float32)}, TypeError),  # integral floats too
    ({"token": 3.0, "digits": DIGITS}, TypeError),
    ({"token": True, "digits": DIGITS}, TypeError),
    ({"token": 3, "digits": [True] * 5}, TypeError),
    ({"token": 0, "digits": [True, 1, 2, 3, 4]}, TypeError),  # one bool among ints: numpy would read it as 1
    ({"token": 0, "digits": (np.True_, 1, 2, 3, 4)}, TypeError),
    ({"token": 3, "digits": [1, 2, 3]}, ValueError),
    ({"token": [3], "digits": DIGITS}, ValueError),
    ({"token": 3, "digits": [[1, 2], [3]]}, ValueError),
    ({"token": 5, "digits": DIGITS}, ValueError),  # num_z_tokens=4: tokens 0-4
    ({"token": -1, "digits": DIGITS}, ValueError),
    ({"token": 3, "digits": [1, 2, 3, 4, 10]}, ValueError),
    ({"token": 3, "digits": [NAN] * 5}, TypeError),
    ({"token": NAN, "digits": DIGITS}, TypeError),
    (None, TypeError),
    ({"token": None, "digits": DIGITS}, TypeError),
    ({"token": 3, "digits": None}, TypeError),
    ("3 12345", TypeError),
    ({"token": "3", "digits": DIGITS}, TypeError),
    ({"token": 3, "digits": "12345"}, TypeError),
    ((3, DIGITS), TypeError),
    ({"token": 3}, ValueError),
    ({"token": 3, "digits": DIGITS, "extra": 0}, ValueError),
]
FLAT_ROWS = [
    (np.array([3, 1, 2, 3, 4, 5], dtype=np.float64), TypeError),  # the reported case: SB3's flat actions
    (np.array([3.5, 1, 2, 3, 4, 5]), TypeError),
    (np.ones(6, dtype=bool), TypeError),
    (np.array([3, 1, 2, 3, 4]), ValueError),
    (np.array([[3, 1, 2, 3, 4, 5]]), ValueError),
    (np.array([5, 1, 2, 3, 4, 5]), ValueError),
    (np.array([3, 1, 2, 3, 4, -1]), ValueError),
    (np.array([NAN] * 6), TypeError),
    (None, TypeError),
    ("312345", TypeError),
    ([3, 1, 2, 3, 4, None], TypeError),
    ([3, 1, 2, 3, 4, True], TypeError),
]
GAMEBOY_STEP_ROWS = [
    (np.array([1.0, 2.0]), TypeError),  # the reported case: float arrays were cast
    (np.array([1.5, 2.0]), TypeError),
    (np.array([True, False]), TypeError),
    (np.array([1, 2, 3]), ValueError),
    (np.array([[1], [2]]), ValueError),
    (np.array(1), ValueError),
    (np.array([1, 9]), ValueError),
    (np.array([-1, 0]), ValueError),
    (np.array([NAN, 0]), TypeError),
    (None, TypeError),
    ("12", TypeError),
    ([1, "2"], TypeError),
    ([True, 1], TypeError),  # a bool among ints: numpy would read it as 1
    ([np.False_, 1], TypeError),
    ((1, np.bool_(True)), TypeError),
]
GAMEBOY_RESET_MASKS = [
    ([1, 0], TypeError),  # the reported cases: int and float masks were cast
    (np.array([1.0, 0.0]), TypeError),
    ([True, False, True], ValueError),
    ([[True, False]], ValueError),
    (None, TypeError),
    ("10", TypeError),
    ([NAN, NAN], TypeError),
]
# Text envs answer anything that is not a valid action with an observation, by design (a model's reply
# never raises): CSRPhone-v1 the invalid-call observation, MathQA-v1 and LongHealthQA-v0 an ungradable answer.
TEXT_ROWS = [None, 3, 1.5, NAN, "search_company Acme", b"x", np.array([1.5]), [1, 2],
             {"name": "search_company", "arguments": {"company": "Acme"}}]
ACCEPTED_ZTOKEN_FORMS = [  # lossless casts: any integer dtype, tuples, numpy scalars, 0-d arrays
    {"token": np.int64(4), "digits": np.array(DIGITS, dtype=np.uint8)},
    {"token": np.array(4, dtype=np.int16), "digits": tuple(DIGITS)},
    {"token": 4, "digits": np.array(DIGITS, dtype=np.int32)},
]


def _same(a: Any, b: Any) -> bool:
    """Deep equality of step results (arrays compared by value)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _check_rejected_then_unchanged(env: Any, reset: Callable[[], Any], bad_call: Callable[[], Any],
                                   error: type[Exception], valid_actions: list[Any]) -> Exception:
    """``bad_call`` raises ``error``; after it the valid actions give what they give after a plain reset."""
    reset()
    expected = [env.step(action) for action in valid_actions]
    reset()
    with pytest.raises(error) as raised:
        bad_call()
    assert type(raised.value) is error  # a TypeError is not a ValueError subclass or vice versa
    assert _same([env.step(action) for action in valid_actions], expected)
    return raised.value


@pytest.fixture(scope="module")
def gameboy() -> gym.vector.VectorEnv:
    return gym.make_vec("GameBoy-v0", num_envs=2)


def test_the_table_covers_every_registered_env():
    covered = {"ZTokenDigits-v1", "GameBoy-v0", "CSRPhone-v1", "MathQA-v1", "LongHealthQA-v0"}
    assert set(ENV_SPECS) == covered


@pytest.mark.parametrize(("action", "error"), ZTOKEN_ROWS)
def test_ztoken_rejects_wrong_actions(action: Any, error: type[Exception]):
    env = gym.make("ZTokenDigits-v1", num_z_tokens=4, max_new_tokens=3)
    valid = [{"token": 0, "digits": DIGITS}, {"token": 4, "digits": DIGITS}]
    raised = _check_rejected_then_unchanged(env, lambda: env.reset(seed=0), lambda: env.step(action), error,
                                            valid)
    assert "is not in the action space" in str(raised)
    if "digits must" in str(raised) or "token'] must" in str(raised):  # dtype, shape and range are named
        assert re.search(r"dtype int64.* of shape \(\d*,?\) in \[0, \d+\)", str(raised))


@pytest.mark.parametrize("action", ACCEPTED_ZTOKEN_FORMS)
def test_ztoken_accepts_lossless_integer_forms(action: dict):
    env = gym.make("ZTokenDigits-v1", num_z_tokens=4)
    env.reset(seed=0)
    expected = env.step({"token": 4, "digits": DIGITS})
    env.reset(seed=0)
    assert _same(env.step(action), expected)


@pytest.mark.parametrize(("action", "error"), FLAT_ROWS)
def test_flat_token_digits_wrapper_rejects_wrong_actions(action: Any, error: type[Exception]):
    env = FlattenTokenDigitsAction(gym.make("ZTokenDigits-v1", num_z_tokens=4, max_new_tokens=3))
    valid = [np.array([0, *DIGITS]), np.array([4, *DIGITS], dtype=np.int32)]
    raised = _check_rejected_then_unchanged(env, lambda: env.reset(seed=0), lambda: env.step(action), error,
                                            valid)
    assert "action must be integers (dtype int64; any integer dtype is accepted) of shape (6,) in " \
           "[0, [5, 10, 10, 10, 10, 10])" in str(raised)


@pytest.mark.parametrize(("actions", "error"), GAMEBOY_STEP_ROWS)
def test_gameboy_rejects_wrong_actions(gameboy: gym.vector.VectorEnv, actions: Any, error: type[Exception]):
    valid = [np.array([1, 2]), np.array([3, 0], dtype=np.uint8), [4, 4]]
    raised = _check_rejected_then_unchanged(gameboy, lambda: gameboy.reset(seed=0),
                                            lambda: gameboy.step(actions), error, valid)
    assert "actions must be integers (dtype int64; any integer dtype is accepted) of shape (2,) in [0, 9)" \
        in str(raised)


@pytest.mark.parametrize(("mask", "error"), GAMEBOY_RESET_MASKS)
def test_gameboy_rejects_wrong_reset_masks(gameboy: gym.vector.VectorEnv, mask: Any, error: type[Exception]):
    valid = [np.array([1, 2]), np.array([3, 0])]
    raised = _check_rejected_then_unchanged(
        gameboy, lambda: gameboy.reset(seed=0),
        lambda: gameboy.reset(seed=123, options={"reset_mask": mask}),  # nor is the RNG reseeded
        error, valid)
    assert "options['reset_mask'] must be booleans (dtype bool) of shape (2,)" in str(raised)


@pytest.mark.parametrize("action", TEXT_ROWS, ids=repr)
def test_csr_phone_answers_non_tool_calls_with_the_invalid_call_observation(action: Any):
    env = gym.make("CSRPhone-v1", max_turns=40)

    def expert_episode(*bad_action: Any) -> list[tuple]:
        observation, info = env.reset(seed=0)
        expert = ExpertPolicy()
        expert.reset(observation, info)  # reads the task prompt
        if bad_action:
            error_text, reward, terminated, _, bad_info = env.step(bad_action[0])
            assert bad_info["response_type"] == "invalid_call" and (reward, terminated) == (0.0, False)
            assert bad_info["errors"] == [f"expected a ToolCall, got {type(action).__name__}"]
            assert error_text in env.observation_space
        steps = []
        while not (steps and (steps[-1][2] or steps[-1][3])):
            observation, *outcome, info = env.step(expert.act(observation, info))
            steps.append((observation, *outcome))
        return steps

    assert expert_episode(action) == expert_episode()  # only the turn counter moved


@pytest.mark.parametrize("action", TEXT_ROWS, ids=repr)
def test_math_qa_answers_non_text_with_an_invalid_answer(action: Any):
    env = gym.make("MathQA-v1", num_problems=20)
    _, info = env.reset(seed=0)
    observation, reward, terminated, truncated, step_info = env.step(action)
    if isinstance(action, str):  # text is graded, whatever it holds
        assert step_info["predicted"] is None and step_info["errors"] == ["no number found in the answer"]
    else:
        assert step_info["errors"] == [f"expected the answer as a string, got {type(action).__name__}"]
    assert (reward, terminated, truncated, step_info["success"]) == (0.0, True, False, False)
    assert observation in env.observation_space
    assert env.reset(seed=0)[1]["index"] == info["index"]


@pytest.mark.parametrize("action", TEXT_ROWS, ids=repr)
def test_longhealth_answers_non_text_with_an_invalid_answer(action: Any):
    env = gym.make("LongHealthQA-v0", num_patients=2)
    _, info = env.reset(seed=0)
    observation, reward, terminated, truncated, step_info = env.step(action)
    if isinstance(action, str):  # text is graded, whatever it holds
        assert step_info["predicted"] is None and step_info["parse"] == "none" and step_info["errors"]
    else:
        assert step_info["errors"] == [f"expected the answer as a string, got {type(action).__name__}"]
    assert (reward, terminated, truncated, step_info["success"]) == (0.0, True, False, False)
    assert observation in env.observation_space
    assert env.reset(seed=0)[1] == info
