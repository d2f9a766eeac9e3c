"""Build the policy and its observation encoder: a tiny Qwen3 from config, or any HF causal LM."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, Qwen3Config

from worldgym.agents.ztoken_ppo.config import ModelConfig
from worldgym.agents.ztoken_ppo.encoding import (
    NativeEncoder,
    ObservationEncoder,
    TokenizerEncoder,
    add_ztoken_tokens,
)
from worldgym.agents.ztoken_ppo.model import ZTokenPolicy
from worldgym.envs.ztoken.vocab import ZTokenVocab


def tiny_qwen3_config(config: ModelConfig, vocab: ZTokenVocab) -> Qwen3Config:
    """A Qwen3 config over the env's own vocabulary (pad id 0, tied embeddings)."""
    return Qwen3Config(
        vocab_size=vocab.size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=vocab.pad_id,
        bos_token_id=None,
        eos_token_id=None,
    )


def _seeded_from_config(lm_config, seed: int) -> PreTrainedModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(lm_config)


def build_policy(config: ModelConfig, vocab: ZTokenVocab) -> tuple[ZTokenPolicy, ObservationEncoder]:
    """Return a fresh policy and the encoder that feeds it env observations.

    ``config.pretrained=None`` builds the tiny Qwen3 (CPU default). Otherwise the tokenizer and model are
    loaded with ``from_pretrained`` (a hub name or a local directory), the Z tokens and ``<ANSWER>`` are
    added, and the embeddings are resized to the new vocabulary.
    """
    if config.pretrained is None:
        lm = _seeded_from_config(tiny_qwen3_config(config, vocab), config.seed)
        encoder: ObservationEncoder = NativeEncoder(vocab)
    else:
        tokenizer = AutoTokenizer.from_pretrained(config.pretrained)
        add_ztoken_tokens(tokenizer, vocab.num_z_tokens)
        lm = AutoModelForCausalLM.from_pretrained(config.pretrained)
        lm.resize_token_embeddings(len(tokenizer))
        encoder = TokenizerEncoder(tokenizer, vocab)
    return ZTokenPolicy(lm, encoder.action_token_ids, seed=config.seed), encoder


def rebuild_policy(
    lm_config_dict: dict, vocab: ZTokenVocab, tokenizer_dir: str | None
) -> tuple[ZTokenPolicy, ObservationEncoder]:
    """Rebuild an (untrained) policy of a saved architecture; the caller loads the weights."""
    settings = dict(lm_config_dict)
    lm_config = AutoConfig.for_model(settings.pop("model_type"), **settings)
    lm = AutoModelForCausalLM.from_config(lm_config)
    if tokenizer_dir is None:
        encoder: ObservationEncoder = NativeEncoder(vocab)
    else:
        encoder = TokenizerEncoder(AutoTokenizer.from_pretrained(tokenizer_dir), vocab)
    return ZTokenPolicy(lm, encoder.action_token_ids), encoder
