"""Build the policy and its observation encoder with the shared LLM stack: a tiny Qwen3 over the env's own
vocabulary, or any HF causal LM."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoTokenizer, PretrainedConfig, PreTrainedModel

from worldgym.agents.llm.models import load_model, model_from_config, tiny_model_config
from worldgym.agents.ztoken_ppo.config import ZTokenModelConfig
from worldgym.agents.ztoken_ppo.encoding import (
    NativeEncoder,
    ObservationEncoder,
    TokenizerEncoder,
    add_ztoken_tokens,
)
from worldgym.agents.ztoken_ppo.model import ZTokenPolicy
from worldgym.envs.ztoken.vocab import ZTokenVocab

# the env's questions plus the Z trace are far shorter; RoPE tables are sized by this
MAX_POSITIONS = 256


def tiny_lm_config(config: ZTokenModelConfig, vocab: ZTokenVocab) -> PretrainedConfig:
    """The tiny Qwen3's config over the env's own vocabulary (pad id 0, tied embeddings, no bos/eos)."""
    return tiny_model_config(
        vocab.size, config.tiny_shape(), pad_token_id=vocab.pad_id, max_position_embeddings=MAX_POSITIONS
    )


def disable_dropout(lm_config: PretrainedConfig) -> PretrainedConfig:
    """Set every dropout probability in an LM config (and its sub-configs) to 0, in place; return it.

    PPO's old log-probs come from the rollout and the new ones from the update's forward pass; dropout would
    make them differ before any update (ratio != 1 on the first minibatch), so the policy's LM never uses it
    (as TRL's ``disable_dropout_in_model``). It is done on the config, before the model is built, because
    some models (Qwen3, Llama) copy ``attention_dropout`` into their attention layers rather than using
    ``nn.Dropout`` modules.
    """
    for name, value in vars(lm_config).items():
        if isinstance(value, PretrainedConfig):
            disable_dropout(value)
        elif ("dropout" in name or name.endswith("pdrop")) and isinstance(value, float):
            setattr(lm_config, name, 0.0)
    return lm_config


def _without_dropout_modules(lm: PreTrainedModel) -> PreTrainedModel:
    """Zero any ``nn.Dropout`` left whose rate does not come from a config field."""
    for module in lm.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return lm


def _lm_from_config(lm_config: PretrainedConfig, seed: int) -> PreTrainedModel:
    """An LM of ``lm_config`` without dropout, initialised from ``seed`` (the global RNG is untouched)."""
    return _without_dropout_modules(model_from_config(disable_dropout(lm_config), seed))


def build_policy(config: ZTokenModelConfig, vocab: ZTokenVocab) -> tuple[ZTokenPolicy, ObservationEncoder]:
    """Return a fresh policy and the encoder that feeds it env observations.

    ``config.pretrained=None`` builds the tiny Qwen3 (CPU default). Otherwise the tokenizer and model are
    loaded with ``from_pretrained`` (a hub name or a local directory), the Z tokens and ``<ANSWER>`` are
    added, and the embeddings are resized to the new vocabulary (new rows drawn from ``config.seed``).
    Dropout is switched off in either case (see :func:`disable_dropout`); the global torch RNG is untouched.
    """
    if config.pretrained is None:
        lm = _lm_from_config(tiny_lm_config(config, vocab), config.seed)
        encoder: ObservationEncoder = NativeEncoder(vocab)
    else:
        # not worldgym.agents.llm.models.load_tokenizer: it makes eos the pad token (for left-padded
        # generation), where this encoder pads on its own and the tokenizer gets a <PAD> of its own if it lacks one
        tokenizer = AutoTokenizer.from_pretrained(config.pretrained)
        add_ztoken_tokens(tokenizer, vocab.num_z_tokens)
        lm_config = disable_dropout(AutoConfig.from_pretrained(config.pretrained))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            lm = load_model(config.pretrained, config=lm_config)
            lm.resize_token_embeddings(len(tokenizer))
        _without_dropout_modules(lm)
        encoder = TokenizerEncoder(tokenizer, vocab)
    return ZTokenPolicy(lm, encoder.action_token_ids, seed=config.seed), encoder


def rebuild_policy(
    lm_config_dict: dict, vocab: ZTokenVocab, tokenizer_dir: str | None
) -> tuple[ZTokenPolicy, ObservationEncoder]:
    """Rebuild an (untrained, dropout-free) policy of a saved architecture; the caller loads the weights."""
    settings = dict(lm_config_dict)
    lm_config = AutoConfig.for_model(settings.pop("model_type"), **settings)
    lm = _lm_from_config(lm_config, seed=0)
    if tokenizer_dir is None:
        encoder: ObservationEncoder = NativeEncoder(vocab)
    else:
        encoder = TokenizerEncoder(AutoTokenizer.from_pretrained(tokenizer_dir), vocab)
    return ZTokenPolicy(lm, encoder.action_token_ids), encoder
