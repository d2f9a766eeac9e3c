"""Fixtures shared by the DDP and FSDP learner tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from worldgym.agents.llm.tokenizer import train_chat_tokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    corpus = [f"What is {a} + {b}? The answer is {a + b}." for a in range(30) for b in range(10)]
    path = tmp_path_factory.mktemp("tokenizer")
    train_chat_tokenizer(corpus, vocab_size=300).save_pretrained(path)
    return path
