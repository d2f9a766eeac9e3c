"""CSRPhone-v1: a customer-service phone-call simulator with three tools and a seeded world of companies.

>>> import gymnasium as gym
>>> import worldgym
>>> from worldgym.envs.csr_phone import ExpertPolicy, run_episode
>>> env = gym.make("CSRPhone-v1", difficulty=5, split="test")
>>> run_episode(env, ExpertPolicy(), seed=0).success
True
"""

from worldgym.env_training import register_expert, register_presets
from worldgym.envs.csr_phone.env import CSR_TOOLS, CSRPhoneEnv
from worldgym.envs.csr_phone.evaluation import EpisodeResult, PolicyStats, evaluate_policy, run_episode
from worldgym.envs.csr_phone.policies import ExpertPolicy, RandomPolicy, TextPolicy
from worldgym.envs.csr_phone.presets import PRESETS
from worldgym.envs.csr_phone.replies import classify_reply, nearest_reply_type
from worldgym.envs.csr_phone.text_expert import CSRTextExpert
from worldgym.envs.csr_phone.world import DIFFICULTIES

# warm starts keep the cache keys they had as CSRPhone-v0's: they were made from the chats of the new version
# (the reply-text fix of CSRPhone-v1 came first)
register_expert("CSRPhone-v1", CSRTextExpert, options=("mistake_rate", "seed"), difficulties=(1, 2, 3),
                warm_start_id="CSRPhone-v0")
register_presets("CSRPhone-v1", PRESETS, default="smollm2-135m")  # SmolLM2's settings for any other model

__all__ = [
    "CSR_TOOLS",
    "DIFFICULTIES",
    "CSRPhoneEnv",
    "CSRTextExpert",
    "EpisodeResult",
    "ExpertPolicy",
    "PolicyStats",
    "RandomPolicy",
    "TextPolicy",
    "classify_reply",
    "evaluate_policy",
    "nearest_reply_type",
    "run_episode",
]
