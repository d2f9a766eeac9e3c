"""The engine protocol: prompt token ids in; generated token ids, per-token logprobs, finish reason out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from worldgym.agents.llm.constrained import CopyConstraint

__all__ = ["FinishReason", "Generation", "GenerationEngine", "SamplingParams"]

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample.

    Args:
        temperature: softmax temperature; 0 means greedy decoding.
        top_p: nucleus sampling mass (1.0 = off).
        max_new_tokens: generation stops after this many tokens (finish reason ``"length"``).
        n: completions per prompt.
        seed: seed of this call's sampling; the same seed, prompts and weights give the same tokens.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    n: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")

    @property
    def logprob_temperature(self) -> float:
        """The temperature logprobs are measured at (1 for greedy decoding)."""
        return self.temperature if self.temperature > 0 else 1.0


@dataclass
class Generation:
    """One completion: the exact token ids sampled (stop token included), their logprobs, and why it ended.

    ``allowed_token_ids[i]`` lists the token ids the sampler could choose from at token ``i`` when a
    constraint narrowed it (``None`` where decoding was free; the whole list is ``None`` for unconstrained
    generation); ``logprobs`` are then over the allowed tokens only.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    prompt_index: int = 0
    extra: dict = field(default_factory=dict)
    allowed_token_ids: list[list[int] | None] | None = None

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"got {len(self.token_ids)} token ids but {len(self.logprobs)} logprobs")
        if self.allowed_token_ids is not None and len(self.allowed_token_ids) != len(self.token_ids):
            raise ValueError(
                f"got {len(self.token_ids)} token ids but {len(self.allowed_token_ids)} allowed-token entries"
            )


@runtime_checkable
class GenerationEngine(Protocol):
    """What rollouts need from an inference backend (HF ``generate``, vLLM, ...)."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        constraints: Sequence[CopyConstraint | None] | None = None,
    ) -> list[list[Generation]]:
        """For each prompt (a list of token ids), ``params.n`` generations; ``constraints`` (one per prompt,
        ``None`` = free) narrow copied tool arguments (:mod:`worldgym.agents.llm.constrained`). An engine that
        cannot apply constraints raises ``ValueError`` when given one."""
        ...

    def sync_weights(self) -> None:
        """Make the engine sample from the trainer's current weights (adapter-only where possible)."""
        ...
