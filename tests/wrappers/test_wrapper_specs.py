"""Every worldgym wrapper passes gymnasium's ``check_env`` on every env it applies to, and ``gym.make(spec)``
rebuilds the wrapped env identically (same wrapper stack, arguments, spaces and trajectory)."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import worldgym.wrappers
from worldgym.envs.csr_phone.policies import ExpertPolicy, TextPolicy
from worldgym.envs.ztoken import FlattenTokenDigitsAction
from worldgym.registration import ENV_SPECS

SINGLE_ENVS = sorted(env_id for env_id, spec in ENV_SPECS.items() if "entry_point" in spec)
WRAPPERS: dict[str, type[gym.Wrapper]] = {
    **{name: getattr(worldgym.wrappers, name) for name in worldgym.wrappers.__all__
       if isinstance(getattr(worldgym.wrappers, name), type)
       and issubclass(getattr(worldgym.wrappers, name), gym.Wrapper)},
    "FlattenTokenDigitsAction": FlattenTokenDigitsAction,
}
NON_DEFAULT_ARGUMENTS = {"ParseToolCall": {"max_action_chars": 512}}
ENV_ARGUMENTS = {"CSRPhone-v1": {"difficulty": 3}, "ZTokenDigits-v1": {"num_z_tokens": 4},
                 "MathQA-v1": {"num_problems": 20}}


def _applies(wrapper: type[gym.Wrapper], env_id: str) -> bool:
    try:
        wrapper(gym.make(env_id, **ENV_ARGUMENTS.get(env_id, {})))
    except TypeError:  # the wrapper names the action space it needs
        return False
    return True


PAIRS = [(name, env_id) for name, wrapper in WRAPPERS.items() for env_id in SINGLE_ENVS
         if _applies(wrapper, env_id)]


def test_every_wrapper_applies_somewhere():
    assert {"ParseToolCall", "FlattenTokenDigitsAction"} <= set(WRAPPERS)
    assert {name for name, _ in PAIRS} == set(WRAPPERS)
    assert {("ParseToolCall", "CSRPhone-v1"), ("FlattenTokenDigitsAction", "ZTokenDigits-v1")} <= set(PAIRS)


def _wrapped(name: str, env_id: str, **arguments: Any) -> gym.Env:
    return WRAPPERS[name](gym.make(env_id, **ENV_ARGUMENTS.get(env_id, {})), **arguments)


class _SampledActions:
    """Seeded samples of an action space, with the policy interface of the CSR expert."""

    def __init__(self, space: gym.Space) -> None:
        self.space = space
        space.seed(7)

    def reset(self, observation: Any, info: dict[str, Any]) -> None:
        """Nothing to read."""

    def act(self, observation: Any, info: dict[str, Any]) -> Any:
        return self.space.sample()


def _rollout(name: str, env: gym.Env, steps: int = 12) -> list[tuple]:
    """(observation, reward, terminated, truncated) of ``steps`` steps of a deterministic policy: the CSR
    expert writing text for ParseToolCall, else seeded samples of the action space."""
    policy = TextPolicy(ExpertPolicy()) if name == "ParseToolCall" else _SampledActions(env.action_space)
    observation, info = env.reset(seed=3)
    policy.reset(observation, info)
    trajectory = []
    for _ in range(steps):
        observation, reward, terminated, truncated, info = env.step(policy.act(observation, info))
        trajectory.append((np.asarray(observation).tolist(), reward, terminated, truncated))
        if terminated or truncated:
            observation, info = env.reset()
            policy.reset(observation, info)
    return trajectory


@pytest.mark.parametrize(("name", "env_id"), PAIRS)
def test_wrapped_env_passes_check_env(name: str, env_id: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the env is wrapped": checking the wrapped env is the point
        check_env(_wrapped(name, env_id, **NON_DEFAULT_ARGUMENTS.get(name, {})), skip_render_check=True)


@pytest.mark.parametrize(("name", "env_id"), PAIRS)
def test_make_from_spec_rebuilds_the_wrapped_env(name: str, env_id: str):
    arguments = NON_DEFAULT_ARGUMENTS.get(name, {})
    env = _wrapped(name, env_id, **arguments)
    (recorded,) = env.spec.additional_wrappers
    assert recorded.name == name and (recorded.kwargs or {}) == arguments
    rebuilt = gym.make(env.spec)
    assert type(rebuilt) is type(env) and rebuilt.spec == env.spec
    assert rebuilt.unwrapped.spec.kwargs == env.unwrapped.spec.kwargs == ENV_ARGUMENTS.get(env_id, {})
    assert rebuilt.action_space == env.action_space and rebuilt.observation_space == env.observation_space
    assert _rollout(name, rebuilt) == _rollout(name, env)
