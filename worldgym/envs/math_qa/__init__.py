"""MathQA-v1: GSM8K-style word problems (template generator or a user's GSM8K file) and the answer grader."""

from worldgym.env_training import register_expert
from worldgym.envs.math_qa.env import SYSTEM_PROMPT, MathQAEnv
from worldgym.envs.math_qa.expert import NoisyMathExpert
from worldgym.envs.math_qa.loader import load_gsm8k
from worldgym.envs.math_qa.problems import MathProblem, generate_problems, split_of
from worldgym.envs.math_qa.reward import MathRewardModel, extract_answer, normalize_number

register_expert("MathQA-v1", NoisyMathExpert, options=("seed", "noise"))

__all__ = [
    "SYSTEM_PROMPT",
    "MathProblem",
    "MathQAEnv",
    "MathRewardModel",
    "NoisyMathExpert",
    "extract_answer",
    "generate_problems",
    "load_gsm8k",
    "normalize_number",
    "split_of",
]
