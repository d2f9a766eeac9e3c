"""Byte-level BPE tokenizers trained on env text, with a tool-aware chat template and assistant masks."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import gymnasium as gym
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

__all__ = [
    "CHAT_TEMPLATE",
    "COMPACT_TOOLS_CHAT_TEMPLATE",
    "END_OF_TEXT",
    "IM_END",
    "IM_START",
    "SPECIAL_TOKENS",
    "TOOL_SPECIAL_TOKENS",
    "WORLD_MODEL_TOKENS",
    "env_text_corpus",
    "train_chat_tokenizer",
]

END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# Atomic tokens for tool calling (Hermes / Qwen convention); kept in decoded text so calls can be parsed.
TOOL_SPECIAL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END, *TOOL_SPECIAL_TOKENS)
# A world model of a tool's replies (the dual-LoRA agent's) reads ``conversation + call + <|predict_csr|>`` and
# writes ``<|csr|> reply <|/csr|>``. CSR warm starts reserve these tokens, so one warm start per model serves
# both the CSR policy (which never emits them) and the dual-LoRA agent.
WORLD_MODEL_TOKENS = ("<|predict_csr|>", "<|csr|>", "<|/csr|>")


def _chat_template(tool_listing: str) -> str:
    """Qwen-style ChatML with ``tool_listing`` (Jinja) rendering the tools inside the system turn."""
    return (
        "{% if tools %}"
        "{{ '<|im_start|>system\\n' }}"
        "{% if messages[0].role == 'system' %}{{ messages[0].content + '\\n' }}{% endif %}"
        "{{ '# Tools\\nCall one function per reply as "
        '<tool_call>{"name": ..., "arguments": {...}}</tool_call>.\\n<tools>\\n\' }}'
        + tool_listing
        + "{{ '</tools><|im_end|>\\n' }}"
        "{% elif messages[0].role == 'system' %}"
        "{{ '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
        "{% endif %}"
        "{% for message in messages %}"
        "{% if message.role == 'assistant' %}"
        "{{ '<|im_start|>assistant\\n' }}"
        "{% generation %}{{ message.content + '<|im_end|>' }}{% endgeneration %}"
        "{{ '\\n' }}"
        "{% elif message.role == 'tool' %}"
        "{{ '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
        "{% elif message.role != 'system' %}"
        "{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
        "{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )


# Qwen-style ChatML. ``tools=`` goes into the system turn; tool results come back as user turns wrapped in
# <tool_response>; every assistant turn sits in a {% generation %} block so ``return_assistant_tokens_mask``
# marks exactly the tokens a model produces (its content and the closing <|im_end|>).
CHAT_TEMPLATE = _chat_template("{% for tool in tools %}{{ tool | tojson }}{{ '\\n' }}{% endfor %}")
# The same chat with each tool shown as a one-line signature, ``name(arg, ...)``, instead of its JSON schema:
# a tiny model learns the tools from demonstrations, and CSRPhone's schemas alone are ~1k tokens per chat.
COMPACT_TOOLS_CHAT_TEMPLATE = _chat_template(
    "{% for tool in tools %}{% set f = tool.function if tool.function is defined else tool %}"
    "{{ f.name + '(' + ((f.parameters.properties if f.parameters is defined else {}) | list | join(', '))"
    " + ')\\n' }}{% endfor %}"
)

# Text every chat contains; added to the training corpus so the template's own words get merged tokens.
_TEMPLATE_TEXT = (
    "system\nuser\nassistant\n# Tools\nCall one function per reply as "
    '<tool_call>{"name": ..., "arguments": {...}}</tool_call>.\n<tools>\n</tools>\n'
)


def train_chat_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 3000,
    min_frequency: int = 2,
    extra_special_tokens: Sequence[str] = (),
    tool_format: Literal["json", "signatures"] = "json",
    split_digits: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts`` and wrap it as a transformers chat tokenizer.

    Byte-level means any string round-trips (unseen characters fall back to bytes), so a tokenizer trained on
    one env's text still encodes everything. Training is deterministic for the same corpus.

    Args:
        texts: the corpus (env prompts, observations, tool schemas, expert replies).
        vocab_size: target vocabulary size, special tokens included (must exceed the 256 byte symbols).
        min_frequency: least count for a merge.
        extra_special_tokens: more atomic tokens to reserve (after :data:`SPECIAL_TOKENS`).
        tool_format: how the chat template shows ``tools=``: ``"json"`` (each OpenAI schema as JSON, as real
            models expect) or ``"signatures"`` (one ``name(arg, ...)`` line per tool,
            :data:`COMPACT_TOOLS_CHAT_TEMPLATE`; for tiny models that learn the tools from demonstrations).
        split_digits: one token per digit, so numbers (phone numbers, account values) tokenize the same way
            wherever they appear and a model copies them digit by digit.

    Returns:
        A ``PreTrainedTokenizerFast`` with ``eos_token=<|im_end|>``, ``pad_token=<|endoftext|>``, left padding
        and the chat template; ``save_pretrained`` / ``AutoTokenizer.from_pretrained`` round-trip it.
    """
    if tool_format not in ("json", "signatures"):
        raise ValueError(f"tool_format must be 'json' or 'signatures', got {tool_format!r}")
    specials = list(dict.fromkeys([*SPECIAL_TOKENS, *extra_special_tokens]))
    if vocab_size <= 256 + len(specials):
        raise ValueError(
            f"vocab_size must exceed 256 byte symbols + {len(specials)} special tokens, got {vocab_size}"
        )
    backend = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if split_digits
        else byte_level
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_with_template_text(texts), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        bos_token=None,
        additional_special_tokens=specials[3:],
        chat_template=CHAT_TEMPLATE if tool_format == "json" else COMPACT_TOOLS_CHAT_TEMPLATE,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def _with_template_text(texts: Iterable[str]) -> Iterable[str]:
    yield _TEMPLATE_TEXT
    yield from texts


def env_text_corpus(make_env: Callable[[], gym.Env], num_resets: int = 200, seed: int = 0) -> list[str]:
    """Text an env shows an agent (reset observations, system prompts, tool schemas) for training a
    tokenizer."""
    env = make_env()
    texts: list[str] = []
    for index in range(num_resets):
        observation, info = env.reset(seed=seed + index)
        texts.append(str(observation))
        if info.get("system_prompt"):
            texts.append(str(info["system_prompt"]))
        if info.get("tools") and index == 0:
            texts.extend(json.dumps(tool) for tool in info["tools"])
    env.close()
    return texts
