"""Scripted expert and random baseline: the expert solves every difficulty from observations alone."""

import pytest

from worldgym.envs.csr_phone.env import CSRPhoneEnv
from worldgym.envs.csr_phone.evaluation import evaluate_policy, run_episode
from worldgym.envs.csr_phone.policies import ExpertPolicy, RandomPolicy, TextPolicy
from worldgym.wrappers import ParseToolCall, format_tool_call

EPISODES = 200  # the demo and benchmark report 1,000 per difficulty


@pytest.mark.parametrize("difficulty", [1, 2, 3, 4, 5])
def test_expert_solves_every_difficulty(difficulty):
    stats = evaluate_policy(CSRPhoneEnv(difficulty=difficulty), ExpertPolicy, EPISODES, seed=1000)
    assert stats.success_rate >= 0.99
    assert stats.mean_turns <= 16


def test_expert_transfers_to_unseen_test_companies_through_the_text_wrapper():
    env = ParseToolCall(CSRPhoneEnv(split="test"))
    stats = evaluate_policy(env, lambda: TextPolicy(ExpertPolicy()), 100, seed=0)
    assert stats.success_rate >= 0.99


def test_random_baseline_is_far_below_the_expert():
    easy = evaluate_policy(CSRPhoneEnv(difficulty=1), lambda: RandomPolicy(0), EPISODES, seed=0)
    hard = evaluate_policy(CSRPhoneEnv(difficulty=5), lambda: RandomPolicy(0), EPISODES, seed=0)
    assert 0.0 < easy.success_rate < 0.6
    assert hard.success_rate < easy.success_rate
    assert easy.mean_turns > 10


def test_expert_needs_the_environment_to_tell_it_the_company():
    env = CSRPhoneEnv(difficulty=1)
    observation, info = env.reset(seed=0)
    expert = ExpertPolicy()
    expert.reset(observation.replace(info["company"], "Unknown Holdings"), info)
    call = expert.act(observation, info)
    assert call.arguments == {"company": "Unknown Holdings"}
    assert run_episode(env, ExpertPolicy(), seed=0).success


def test_expert_solves_other_generated_worlds():
    stats = evaluate_policy(CSRPhoneEnv(world_seed=7, split="validation"), ExpertPolicy, 100, seed=0)
    assert stats.success_rate >= 0.99


@pytest.mark.parametrize("difficulty", [1, 3, 4])
def test_expert_recovers_from_the_mistakes_it_injects(difficulty):
    """ExpertPolicy.mistake (an alike company's number, a redial, a call without the asked details) run through
    executed(): the task's state is unchanged and the expert still finishes within the call limit."""
    import numpy as np

    env = ParseToolCall(CSRPhoneEnv(difficulty=difficulty, split="train"))
    rng = np.random.default_rng(0)
    mistakes = successes = 0
    for seed in range(12):
        observation, info = env.reset(seed=seed)
        expert = ExpertPolicy()
        expert.reset(observation, info)
        for _ in range(16):
            call = expert.act(observation, info)
            mistake = expert.mistake(call, rng) if rng.random() < 0.3 else None
            if mistake is not None:
                expert.executed(mistake)
                mistakes += 1
                call = mistake
            observation, _reward, terminated, truncated, info = env.step(format_tool_call(call))
            if terminated or truncated:
                successes += bool(info["success"])
                break
    assert successes >= 11 and mistakes >= 6


def test_expert_has_no_mistake_before_it_has_searched():
    import numpy as np

    env = CSRPhoneEnv(difficulty=3, split="train")
    observation, info = env.reset(seed=0)
    expert = ExpertPolicy()
    expert.reset(observation, info)
    call = expert.act(observation, info)
    assert call.name == "search_company" and expert.mistake(call, np.random.default_rng(0)) is None
