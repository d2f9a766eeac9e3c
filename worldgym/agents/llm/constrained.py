"""Constrained tool arguments: values a tool schema marks as copied can only be strings the episode has seen.

A tool's JSON schema marks an argument with ``"x-copy-from-observations": true`` (:data:`COPY_ANNOTATION`):
its value must be copied from an earlier observation (CSRPhone-v1: ``phone_number`` and every auth value).
The env lists the copyable strings each observation shows in ``info["observed_values"]`` (each must occur
in the observation text; others are ignored). With constrained decoding, once the model has written
``"<key>":`` for a marked key, the next tokens can only spell ``"<one of the values>"`` (``""`` while there is
none yet): which value stays the model's choice, and everything outside marked values is free.

The sampler and the learner must use the same distribution: the engine records, for every token it sampled
under a constraint, the allowed token ids, and :func:`mask_logits` applies the same mask in the engine's
logprobs and in the trainer's scoring, so the PPO ratio is 1 before the first update.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LogitsProcessor, PreTrainedTokenizerBase

from worldgym.spaces import COPY_ANNOTATION

__all__ = [
    "COPY_ANNOTATION",
    "CopyArgumentsProcessor",
    "CopyConstraint",
    "TokenTextIndex",
    "copied_argument_keys",
    "mask_logits",
]

# Where a disallowed token's logit goes: finite, so entropies stay finite (0 * log 0 = 0, not NaN), and far
# enough below any real logit that its probability is exactly 0 in float32.
DISALLOWED_LOGIT = -1e9
PROMPT_TAIL_TOKENS = 64


def copied_argument_keys(tools: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Names of the properties marked with :data:`COPY_ANNOTATION`, at any depth of the tools' schemas
    (OpenAI function format or bare ``{"name", "parameters"}``)."""
    keys: set[str] = set()

    def visit(schema: Any) -> None:
        if not isinstance(schema, Mapping):
            return
        for name, sub in (schema.get("properties") or {}).items():
            if isinstance(sub, Mapping) and sub.get(COPY_ANNOTATION):
                keys.add(name)
            visit(sub)
        visit(schema.get("items"))
        visit(schema.get("additionalProperties"))

    for tool in tools:
        function = tool.get("function", tool)
        visit(function.get("parameters"))
    return frozenset(keys)


class TokenTextIndex:
    """Each token id's text, and a character trie over those texts to find, for a string ``r``, the tokens
    whose text is a prefix of ``r`` or starts with ``r``. Build once per tokenizer (it decodes the whole
    vocabulary) and share it. ``plain_texts`` is ``texts`` with special tokens (padding, turn and tool tags)
    as empty strings: what a row's running text is built from, so padding inside a batch layout never
    splits a key."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, excluded: Iterable[int] = ()):
        self.vocab_size = len(tokenizer)
        skip = set(tokenizer.all_special_ids) | set(excluded)
        self.texts: list[str] = [tokenizer.decode([i]) for i in range(self.vocab_size)]
        specials = set(tokenizer.all_special_ids)
        self.plain_texts = ["" if i in specials else text for i, text in enumerate(self.texts)]
        self._root: dict = {}
        for token_id, text in enumerate(self.texts):
            if token_id in skip or not text or "\ufffd" in text:  # special or partial-UTF-8 tokens: never copy
                continue
            node = self._root
            for char in text:
                node = node.setdefault(char, {})
            node.setdefault("", []).append(token_id)  # "" holds the ids ending here
        self._subtree_cache: dict[int, list[int]] = {}

    def matching(self, rest: str) -> list[int]:
        """Token ids whose text is a non-empty prefix of ``rest`` or starts with ``rest``."""
        found: list[int] = []
        node = self._root
        for char in rest:
            node = node.get(char)
            if node is None:
                return found
            found += node.get("", [])
        return found + [t for t in self._subtree(node) if len(self.texts[t]) > len(rest)]

    def _subtree(self, node: dict) -> list[int]:
        cached = self._subtree_cache.get(id(node))
        if cached is None:
            cached = list(node.get("", []))
            for char, child in node.items():
                if char:
                    cached += self._subtree(child)
            self._subtree_cache[id(node)] = cached
        return cached


@dataclass
class CopyConstraint:
    """One row's constraint: marked argument ``keys`` may only take one of ``values``."""

    index: TokenTextIndex
    keys: frozenset[str]
    values: tuple[str, ...]
    _pattern: re.Pattern = field(init=False, repr=False)

    def __post_init__(self) -> None:
        alternatives = "|".join(re.escape(k) for k in sorted(self.keys, key=len, reverse=True)) or "(?!)"
        # the text since a marked key's colon, while its string value is not closed yet
        self._pattern = re.compile(r'"(?:' + alternatives + r')"\s*:(\s*(?:"[^"\\]*)?)$')

    def allowed(self, text: str) -> list[int] | None:
        """The token ids that may follow the generated ``text``; ``None`` where nothing is constrained (no
        marked value open). Before the episode has shown any value, a marked value can only be empty: there
        is nothing to copy yet."""
        match = self._pattern.search(text[-256:])
        if match is None:
            return None
        written = match.group(1)  # e.g. ' "1-80'
        allowed: set[int] = set()
        for value in self.values or ("",):
            for target in (f' "{value}"', f'"{value}"'):
                if target.startswith(written):
                    allowed.update(self.index.matching(target[len(written):]))
        return sorted(allowed) if allowed else None


class CopyArgumentsProcessor(LogitsProcessor):
    """A transformers ``LogitsProcessor`` applying one :class:`CopyConstraint` per row (``None``: free) to a
    ``generate`` call whose prompts end at column ``prompt_width``; ``allowed[row][step]`` records the
    allowed ids of every generated token (``None`` where it was free). A row's text starts with its prompt's
    last :data:`PROMPT_TAIL_TOKENS` tokens, so a marked key written by the prompt counts too."""

    def __init__(self, constraints: Sequence[CopyConstraint | None], prompt_width: int):
        self.constraints = list(constraints)
        self.prompt_width = prompt_width
        self.texts = ["" for _ in constraints]
        self.allowed: list[list[list[int] | None]] = [[] for _ in constraints]
        self.active = list(range(len(constraints)))  # the row of each batch row still decoding

    def keep(self, batch_rows: Sequence[int]) -> None:
        """Only these batch rows are still decoding (the engine dropped the others from the batch)."""
        self.active = [self.active[b] for b in batch_rows]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.prompt_width
        if step == 0:
            tails = input_ids[:, -PROMPT_TAIL_TOKENS:].tolist()
            for b, row in enumerate(self.active):
                if (constraint := self.constraints[row]) is not None:
                    self.texts[row] = "".join(constraint.index.plain_texts[token] for token in tails[b])
        else:
            for row, token in zip(self.active, input_ids[:, -1].tolist()):
                if (constraint := self.constraints[row]) is not None:
                    self.texts[row] += constraint.index.plain_texts[token]
        for b, row in enumerate(self.active):
            constraint = self.constraints[row]
            allowed = constraint.allowed(self.texts[row]) if constraint is not None else None
            self.allowed[row].append(allowed)
            if allowed is not None:
                keep = scores[b, allowed]
                scores[b] = float("-inf")
                scores[b, allowed] = keep
        return scores


def mask_logits(logits: torch.Tensor, allowed: Sequence[Sequence[int]]) -> torch.Tensor:
    """``logits`` ``[K, V]`` with every token outside ``allowed[k]`` set to :data:`DISALLOWED_LOGIT`
    (out of place, so gradients flow to the allowed logits)."""
    keep = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
    for row, ids in enumerate(allowed):
        keep[row, list(ids)] = True
    return logits.masked_fill(~keep, DISALLOWED_LOGIT)
