"""Load causal LMs by name or path, or build a tiny Qwen3 from config for tests and CPU demos."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen3Config,
)

__all__ = [
    "TINY_SIZES",
    "TinySize",
    "build_tiny_model",
    "load_model",
    "load_tokenizer",
    "save_model_and_tokenizer",
]

TinySize = Literal["tiny", "small"]

# Shapes measured in the field notes: "tiny" ~0.8M parameters (vocab 3000), "small" ~3.9M.
TINY_SIZES: dict[str, dict[str, int]] = {
    "tiny": {
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
    },
    "small": {
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
    },
}


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase,
    size: TinySize = "tiny",
    seed: int = 0,
    max_position_embeddings: int = 4096,
) -> PreTrainedModel:
    """A randomly initialised Qwen3 causal LM sized for ``tokenizer``; the same seed gives the same weights.

    The weights are drawn inside ``torch.random.fork_rng`` so building a model never moves the caller's global
    RNG.
    """
    if size not in TINY_SIZES:
        raise ValueError(f"size must be one of {sorted(TINY_SIZES)}, got {size!r}")
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **TINY_SIZES[size],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def load_model(
    name_or_path: str | Path, dtype: torch.dtype | str = "auto", device: str | torch.device = "cpu"
) -> PreTrainedModel:
    """Any causal LM by hub name (e.g. ``Qwen/Qwen3-8B``, from the local cache) or by local directory."""
    model = AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=dtype)
    return model.to(device)


def load_tokenizer(name_or_path: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer saved beside a model; generation needs left padding, so it is forced here."""
    tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def save_model_and_tokenizer(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | Path
) -> Path:
    """Write both with ``save_pretrained`` (safetensors) so :func:`load_model`/:func:`load_tokenizer` reload
    them."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
