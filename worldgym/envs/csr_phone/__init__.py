"""CSRPhone-v1: a customer-service phone-call simulator with three tools and a seeded world of companies.

>>> import gymnasium as gym
>>> import worldgym
>>> from worldgym.envs.csr_phone import ExpertPolicy, run_episode
>>> env = gym.make("CSRPhone-v1", difficulty=5, split="test")
>>> run_episode(env, ExpertPolicy(), seed=0).success
True
"""

from worldgym.envs.csr_phone.env import CSR_TOOLS, CSRPhoneEnv
from worldgym.envs.csr_phone.evaluation import EpisodeResult, PolicyStats, evaluate_policy, run_episode
from worldgym.envs.csr_phone.policies import ExpertPolicy, RandomPolicy, TextPolicy
from worldgym.envs.csr_phone.replies import classify_reply
from worldgym.envs.csr_phone.world import DIFFICULTIES

__all__ = [
    "CSR_TOOLS",
    "DIFFICULTIES",
    "CSRPhoneEnv",
    "EpisodeResult",
    "ExpertPolicy",
    "PolicyStats",
    "RandomPolicy",
    "TextPolicy",
    "classify_reply",
    "evaluate_policy",
    "run_episode",
]
