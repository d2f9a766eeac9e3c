"""ZTokenDigits-v1: latent Z-token reasoning over arithmetic with a 5-digit answer."""

from worldgym.env_training import register_expert
from worldgym.envs.ztoken.env import ZTokenDigitsEnv
from worldgym.envs.ztoken.expert import ScriptedZPolicy
from worldgym.envs.ztoken.problems import ArithmeticProblem, ProblemSampler
from worldgym.envs.ztoken.reward import RewardBreakdown, RewardConfig, score_answer
from worldgym.envs.ztoken.vocab import ZTokenVocab
from worldgym.envs.ztoken.wrappers import FlattenTokenDigitsAction

register_expert("ZTokenDigits-v1", ScriptedZPolicy, options=("num_envs", "num_z", "z_min", "z_max", "seed", "rng"),
                kind="vector")

__all__ = [
    "ArithmeticProblem",
    "FlattenTokenDigitsAction",
    "ProblemSampler",
    "RewardBreakdown",
    "RewardConfig",
    "ScriptedZPolicy",
    "ZTokenDigitsEnv",
    "ZTokenVocab",
    "score_answer",
]
