"""Turn env observations (env token ids) into model inputs with <ANSWER> appended after the last token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from worldgym.envs.ztoken.vocab import ANSWER_TOKEN, PAD_TOKEN, ZTokenVocab, z_token


@dataclass
class EncodedBatch:
    """Right-padded model inputs: question tokens, Z tokens, ``<ANSWER>``, padding.

    ``last_index`` is the last observed token (its logits choose the next action, its hidden state gives V_t);
    ``answer_index`` is the appended ``<ANSWER>`` (the digit heads read it); ``prompt_lengths`` counts the
    question's model tokens.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_lengths: torch.Tensor
    last_index: torch.Tensor
    answer_index: torch.Tensor

    def to(self, device: torch.device | str) -> EncodedBatch:
        """Move every tensor to ``device``."""
        return EncodedBatch(
            *(
                t.to(device)
                for t in (
                    self.input_ids,
                    self.attention_mask,
                    self.prompt_lengths,
                    self.last_index,
                    self.answer_index,
                )
            )
        )


class ObservationEncoder(Protocol):
    """Maps env observations to model inputs and knows the model ids of the env's actions."""

    action_token_ids: list[int]

    def encode(self, observations: np.ndarray) -> EncodedBatch:
        """Encode a ``[batch, obs_len]`` array of env token ids."""
        ...


class NativeEncoder:
    """The tiny model shares the env's vocabulary, so encoding is a vectorised append of ``<ANSWER>``."""

    def __init__(self, vocab: ZTokenVocab) -> None:
        self.vocab = vocab
        self.action_token_ids = vocab.action_token_ids()

    def encode(self, observations: np.ndarray) -> EncodedBatch:
        """Append ``<ANSWER>`` after each row's last non-pad token."""
        obs = torch.as_tensor(np.asarray(observations), dtype=torch.long)
        batch, length = obs.shape
        lengths = (obs != self.vocab.pad_id).sum(dim=1)
        input_ids = torch.cat([obs, torch.zeros(batch, 1, dtype=torch.long)], dim=1)
        rows = torch.arange(batch)
        input_ids[rows, lengths] = self.vocab.answer_id
        attention_mask = (torch.arange(length + 1)[None, :] <= lengths[:, None]).long()
        prompt_lengths = ((obs > self.vocab.pad_id) & (obs < self.vocab.answer_id)).sum(dim=1)
        return EncodedBatch(input_ids, attention_mask, prompt_lengths, lengths - 1, lengths)


class TokenizerEncoder:
    """For a pretrained LM: its tokenizer encodes the question; Z tokens and <ANSWER> are added tokens."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, vocab: ZTokenVocab) -> None:
        self.tokenizer = tokenizer
        self.vocab = vocab
        missing = [
            t
            for t in (ANSWER_TOKEN, *map(z_token, range(vocab.num_z_tokens)))
            if t not in tokenizer.get_vocab()
        ]
        if missing:
            raise ValueError(
                f"tokenizer lacks the added tokens {missing[:3]}...; use add_ztoken_tokens() first"
            )
        self._env_to_model = {
            vocab.z_id(i): tokenizer.convert_tokens_to_ids(z_token(i)) for i in range(vocab.num_z_tokens)
        }
        self.answer_id = int(tokenizer.convert_tokens_to_ids(ANSWER_TOKEN))
        self.pad_id = int(tokenizer.pad_token_id)
        self.action_token_ids = [self._env_to_model[vocab.z_id(i)] for i in range(vocab.num_z_tokens)]
        self.action_token_ids.append(self.answer_id)
        self._question_cache: dict[str, list[int]] = {}

    def _question_ids(self, question: str) -> list[int]:
        if question not in self._question_cache:
            self._question_cache[question] = self.tokenizer(question, add_special_tokens=False)["input_ids"]
        return self._question_cache[question]

    def encode(self, observations: np.ndarray) -> EncodedBatch:
        """Tokenize each row's question text, then map Z ids and append ``<ANSWER>``."""
        rows: list[list[int]] = []
        prompt_lengths: list[int] = []
        for obs in np.asarray(observations):
            ids = [int(i) for i in obs if int(i) != self.vocab.pad_id]
            question = self.vocab.decode([i for i in ids if i < self.vocab.answer_id])
            prompt = self._question_ids(question)
            rows.append(
                prompt + [self._env_to_model[i] for i in ids if i >= self.vocab.first_z_id] + [self.answer_id]
            )
            prompt_lengths.append(len(prompt))
        width = max(map(len, rows))
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            input_ids[r, : len(row)] = torch.tensor(row)
            attention_mask[r, : len(row)] = 1
        answer_index = torch.tensor([len(row) - 1 for row in rows])
        return EncodedBatch(
            input_ids, attention_mask, torch.tensor(prompt_lengths), answer_index - 1, answer_index
        )


def add_ztoken_tokens(tokenizer: PreTrainedTokenizerBase, num_z_tokens: int) -> int:
    """Add ``<Z_0..V-1>``, ``<ANSWER>`` (and ``<PAD>`` if there is no pad token); return the count added."""
    added = tokenizer.add_tokens(
        [z_token(i) for i in range(num_z_tokens)] + [ANSWER_TOKEN], special_tokens=True
    )
    if tokenizer.pad_token is None:
        added += tokenizer.add_special_tokens({"pad_token": PAD_TOKEN})
    return added
