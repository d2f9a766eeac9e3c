"""Tiny tokenizer/model fixtures shared by the LLM-stack and GRPO tests (built once per session: fast on 2 cores)."""

import pytest
import torch

from worldgym.agents.llm.models import build_tiny_model
from worldgym.agents.llm.rollout import Episode
from worldgym.agents.llm.tokenizer import train_chat_tokenizer
from worldgym.envs.math_qa import generate_problems

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer():
    problems = generate_problems(300, seed=0)
    corpus = [p.question + "\n" + p.solution for p in problems]
    corpus += ['<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'] * 20
    return train_chat_tokenizer(corpus, vocab_size=600)


@pytest.fixture()
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=0)


def _token_parity(episode: Episode) -> float:
    """A reward that differs within groups of a random tiny model, so updates are not zero."""
    return float(sum(t for t, sampled in zip(episode.token_ids, episode.action_mask) if sampled) % 2)


@pytest.fixture()
def parity_reward():
    """The parity of the sampled tokens' ids as a reward (for tests that need non-zero updates)."""
    return _token_parity
