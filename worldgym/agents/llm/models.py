"""Load causal LMs by name or path, or build a tiny Qwen3 from config for tests and CPU demos."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen3Config,
)

from worldgym.precision import resolve_dtype

__all__ = [
    "TINY_SIZES",
    "TinySize",
    "build_tiny_model",
    "load_model",
    "load_tokenizer",
    "model_from_config",
    "save_model_and_tokenizer",
    "sharpen",
    "tiny_model_config",
]

TinySize = Literal["tiny", "small"]

# Sizes: "tiny" ~0.8M parameters (vocab 3000), "small" ~3.9M.
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


def tiny_model_config(
    vocab_size: int,
    size: TinySize | Mapping[str, int] = "tiny",
    *,
    pad_token_id: int | None,
    eos_token_id: int | None = None,
    max_position_embeddings: int = 4096,
) -> Qwen3Config:
    """The Qwen3 config of a tiny model over ``vocab_size`` tokens (tied embeddings, no bos token).

    ``size`` names a :data:`TINY_SIZES` shape or gives one (a mapping with the same keys), e.g. an agent's own
    width and depth over an env's own vocabulary.

    >>> tiny_model_config(100, "tiny", pad_token_id=0).hidden_size
    128
    """
    if isinstance(size, str):
        if size not in TINY_SIZES:
            raise ValueError(f"size must be one of {sorted(TINY_SIZES)} or a shape mapping, got {size!r}")
        size = TINY_SIZES[size]
    unknown = sorted(set(size) - set(TINY_SIZES["tiny"]))
    if unknown:
        raise ValueError(
            f"size has unknown keys {unknown}: use those of TINY_SIZES, {sorted(TINY_SIZES['tiny'])}"
        )
    return Qwen3Config(
        vocab_size=vocab_size,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        **size,
    )


def model_from_config(
    config: PretrainedConfig, seed: int = 0, dtype: str | torch.dtype = "float32"
) -> PreTrainedModel:
    """A causal LM of ``config`` with weights drawn from ``seed``; the caller's global torch RNG is untouched
    (the draw runs inside ``torch.random.fork_rng``). The weights are drawn in float32 and then stored in
    ``dtype`` (see :mod:`worldgym.precision`), so both precisions start from the same values."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    return model.to(resolve_dtype(dtype))


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase,
    size: TinySize | Mapping[str, int] = "tiny",
    seed: int = 0,
    max_position_embeddings: int = 4096,
    dtype: str | torch.dtype = "float32",
) -> PreTrainedModel:
    """A randomly initialised Qwen3 causal LM sized for ``tokenizer``; the same seed gives the same weights.

    ``size`` is a :data:`TINY_SIZES` name or a shape (see :func:`tiny_model_config`). The weights are drawn
    inside ``torch.random.fork_rng`` so building a model never moves the caller's global RNG; ``dtype``
    ("float32", "bfloat16", "auto" or a torch dtype) is the dtype they are stored in.
    """
    config = tiny_model_config(
        len(tokenizer),
        size,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        max_position_embeddings=max_position_embeddings,
    )
    model = model_from_config(config, seed, dtype)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def sharpen(model: PreTrainedModel, factor: float = 6.0) -> PreTrainedModel:
    """Scale every weight matrix of ``model`` by ``factor`` in place (returned for chaining).

    A tiny model at its default init scale says the same token whatever it sees, so a test of context handling
    (a misplaced KV, a misaligned row) could not fail on it; sharpened, its outputs depend on the context.
    """
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim == 2:
                parameter.mul_(factor)
    return model


def load_model(
    name_or_path: str | Path,
    dtype: torch.dtype | str = "float32",
    device: str | torch.device = "cpu",
    config: PretrainedConfig | None = None,
) -> PreTrainedModel:
    """Any causal LM by hub name (e.g. ``Qwen/Qwen3-8B``, from the local cache) or by local directory;
    ``config`` replaces the saved config (e.g. the same one with dropout switched off). ``dtype`` is the
    library's precision setting ("float32", "bfloat16", "auto": bf16 where the hardware computes it natively;
    or a torch dtype), resolved for ``device``."""
    extra = {} if config is None else {"config": config}
    model = AutoModelForCausalLM.from_pretrained(
        str(name_or_path), dtype=resolve_dtype(dtype, device), **extra
    )
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
