"""ZTokenDigits-v1: latent Z-token reasoning over arithmetic with a 5-digit answer."""

from worldgym.envs.ztoken.env import ZTokenDigitsEnv
from worldgym.envs.ztoken.problems import ArithmeticProblem, ProblemSampler
from worldgym.envs.ztoken.reward import RewardBreakdown, RewardConfig, score_answer
from worldgym.envs.ztoken.vocab import ZTokenVocab
from worldgym.envs.ztoken.wrappers import FlattenTokenDigitsAction

__all__ = [
    "ArithmeticProblem",
    "FlattenTokenDigitsAction",
    "ProblemSampler",
    "RewardBreakdown",
    "RewardConfig",
    "ZTokenDigitsEnv",
    "ZTokenVocab",
    "score_answer",
]
