"""Scripted expert and random baseline: the expert solves every difficulty from observations alone."""

import pytest

from worldgym.envs.csr_phone.env import CSRPhoneEnv
from worldgym.envs.csr_phone.evaluation import evaluate_policy, run_episode
from worldgym.envs.csr_phone.policies import ExpertPolicy, RandomPolicy, TextPolicy
from worldgym.wrappers import ParseToolCall

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
