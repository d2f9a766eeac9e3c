"""Fixtures for the Z-token PPO tests: a tiny native policy and a tiny HF model saved to a tmp dir."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import worldgym  # noqa: F401  (registers the ids)
from worldgym.agents.ztoken_ppo import ZTokenModelConfig, build_policy
from worldgym.envs.ztoken import ZTokenVocab

TINY_MODEL = ZTokenModelConfig(
    hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, intermediate_size=64
)
ENV_KWARGS = {"num_z_tokens": 4, "max_new_tokens": 4, "operand_digits": 1}


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """One torch thread (the shared fixture) for every test here."""


@pytest.fixture
def env_kwargs() -> dict:
    """A small env: 4 Z tokens, at most 4 generated tokens, one-digit operands."""
    return dict(ENV_KWARGS)


@pytest.fixture
def tiny_model() -> ZTokenModelConfig:
    """A one-layer, 32-wide Qwen3."""
    return TINY_MODEL


@pytest.fixture
def tiny_policy():
    return build_policy(TINY_MODEL, ZTokenVocab(ENV_KWARGS["num_z_tokens"]))


def save_tiny_hf_model(root: Path, **config_overrides) -> Path:
    """Write a tiny Qwen3 causal LM + byte-level BPE tokenizer (no pad token) with ``save_pretrained``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = [f"{a}+{b}={a + b} {a}*{b}={a * b}" for a in range(30) for b in range(30)]
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>")
    settings = {
        "vocab_size": len(fast),
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "tie_word_embeddings": True,
    }
    config = Qwen3Config(**{**settings, **config_overrides})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        Qwen3ForCausalLM(config).save_pretrained(root)
    fast.save_pretrained(root)
    return root


@pytest.fixture(scope="session")
def hf_model_dir(tmp_path_factory) -> Path:
    """A tiny Qwen3 causal LM + tokenizer saved to a tmp dir (see :func:`save_tiny_hf_model`)."""
    return save_tiny_hf_model(tmp_path_factory.mktemp("hf_tiny"))


@pytest.fixture(scope="session")
def hf_dropout_model_dir(tmp_path_factory) -> Path:
    """The same tiny Qwen3 with attention dropout 0.5, as pretrained LMs often ship with dropout."""
    return save_tiny_hf_model(tmp_path_factory.mktemp("hf_dropout"), attention_dropout=0.5)
