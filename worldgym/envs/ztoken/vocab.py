"""The fixed token vocabulary of ZTokenDigits-v1: pad, question characters, <ANSWER> and the Z tokens."""

from __future__ import annotations

from dataclasses import dataclass, field

from worldgym.config import check_positive_int

PAD_TOKEN = "<PAD>"
ANSWER_TOKEN = "<ANSWER>"
QUESTION_CHARS: tuple[str, ...] = tuple("0123456789+*=")


def z_token(index: int) -> str:
    """Return the text of latent token ``index``, e.g. ``z_token(3) == "<Z_3>"``."""
    return f"<Z_{index}>"


@dataclass(frozen=True)
class ZTokenVocab:
    """Observation token ids: ``0`` is padding, then question characters, ``<ANSWER>``, ``<Z_0..V-1>``.

    The env's action index ``i < num_z_tokens`` means ``<Z_i>`` and ``i == num_z_tokens`` means ``<ANSWER>``.

    >>> vocab = ZTokenVocab(num_z_tokens=4)
    >>> vocab.encode_question("12+3=")
    [2, 3, 11, 4, 13]
    >>> vocab.decode([2, 3, 11, 4, 13, vocab.z_id(1), 0])
    '12+3=<Z_1>'
    """

    num_z_tokens: int
    tokens: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        check_positive_int("num_z_tokens", self.num_z_tokens)
        tokens = (PAD_TOKEN, *QUESTION_CHARS, ANSWER_TOKEN, *(z_token(i) for i in range(self.num_z_tokens)))
        object.__setattr__(self, "tokens", tokens)

    @property
    def size(self) -> int:
        """Number of token ids."""
        return len(self.tokens)

    @property
    def pad_id(self) -> int:
        """Id of the padding token (always 0)."""
        return 0

    @property
    def answer_id(self) -> int:
        """Id of ``<ANSWER>``."""
        return 1 + len(QUESTION_CHARS)

    @property
    def first_z_id(self) -> int:
        """Id of ``<Z_0>``; Z ids are contiguous."""
        return self.answer_id + 1

    def z_id(self, index: int) -> int:
        """Id of ``<Z_index>``."""
        if not 0 <= index < self.num_z_tokens:
            raise ValueError(f"Z index must be in [0, {self.num_z_tokens}), got {index}")
        return self.first_z_id + index

    def action_to_id(self, action_token: int) -> int:
        """Map an env action token index (Z index, or ``num_z_tokens`` for <ANSWER>) to its token id."""
        return self.answer_id if action_token == self.num_z_tokens else self.z_id(action_token)

    def action_token_ids(self) -> list[int]:
        """Token ids in env action order: ``[<Z_0>, ..., <Z_{V-1}>, <ANSWER>]``."""
        return [self.z_id(i) for i in range(self.num_z_tokens)] + [self.answer_id]

    def encode_question(self, question: str) -> list[int]:
        """Encode a question string made of digits, ``+``, ``*`` and ``=``."""
        unknown = sorted(set(question) - set(QUESTION_CHARS))
        if unknown:
            raise ValueError(f"question {question!r} has characters outside the vocabulary: {unknown}")
        return [1 + QUESTION_CHARS.index(ch) for ch in question]

    def decode(self, ids: list[int] | tuple[int, ...]) -> str:
        """Decode ids to text, dropping padding."""
        return "".join(self.tokens[int(i)] for i in ids if int(i) != self.pad_id)
