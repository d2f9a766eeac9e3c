"""A trainer's model by name: a tiny Qwen3 built on an env's own text, or a pretrained model with the chat setup."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

import torch

from worldgym.agents.llm.models import TINY_SIZES, TinySize, build_tiny_model
from worldgym.agents.llm.pretrained import DEFAULT_LORA_TARGETS, ChatModel, load_chat_model
from worldgym.agents.llm.tokenizer import train_chat_tokenizer

__all__ = ["build_or_load_chat_model", "tiny_chat_model"]


def tiny_chat_model(
    corpus: Iterable[str],
    size: TinySize | Mapping[str, int] = "tiny",
    *,
    seed: int = 0,
    dtype: str | torch.dtype = "float32",
    vocab_size: int = 2000,
    extra_special_tokens: Sequence[str] = (),
    tool_format: Literal["json", "signatures"] = "json",
    split_digits: bool = False,
) -> ChatModel:
    """A chat tokenizer trained on ``corpus`` (:func:`train_chat_tokenizer` with these options) and a tiny
    Qwen3 of ``size`` drawn from ``seed`` for it (:func:`build_tiny_model`); no token is added afterwards.

    >>> tiny = tiny_chat_model(["Call the company at 1-800-555-0100."] * 20, vocab_size=300)
    >>> tiny.model.config.vocab_size == len(tiny.tokenizer), tiny.added_token_ids
    (True, [])
    """
    tokenizer = train_chat_tokenizer(corpus, vocab_size=vocab_size, extra_special_tokens=extra_special_tokens,
                                     tool_format=tool_format, split_digits=split_digits)
    model = build_tiny_model(tokenizer, size, seed=seed, dtype=dtype)
    return ChatModel(model, tokenizer, [], DEFAULT_LORA_TARGETS)


def build_or_load_chat_model(
    name: str,
    corpus: Callable[[], Iterable[str]],
    *,
    seed: int = 0,
    dtype: str | torch.dtype = "float32",
    extra_special_tokens: Sequence[str] = (),
) -> ChatModel:
    """The model a config's ``model`` names, with its chat tokenizer: ``"tiny"``/``"small"``
    (:data:`TINY_SIZES`) is built by :func:`tiny_chat_model` on the text ``corpus()`` returns (called only
    then; e.g. :func:`env_text_corpus` of the env), drawn from ``seed``; any other name (``"smollm2-135m"``, a
    local folder, a hub name) is loaded by :func:`load_chat_model`. ``extra_special_tokens`` become atomic
    tokens either way; ``dtype`` is the precision the weights are stored in.
    """
    if name in TINY_SIZES:
        return tiny_chat_model(corpus(), name, seed=seed, dtype=dtype, extra_special_tokens=extra_special_tokens)
    return load_chat_model(name, extra_special_tokens=extra_special_tokens, dtype=dtype)
