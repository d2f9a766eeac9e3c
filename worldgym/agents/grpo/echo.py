"""ECHO: the policy also learns to predict the env's own output, in the rollout's own token sequence.

Beside the policy loss, the same forward pass scores the tokens of the tool results the episode saw (their
text only, not the chat template around it) and adds their cross-entropy, weighted by ``echo_coef``: one
weight set learns both to act and what the env answers. Each observation's loss is its mean token
cross-entropy (length-normalised), averaged over the minibatch's observations. Invalid calls' error messages
and imagined observations (written by a model, not the env) are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from worldgym.agents.llm.rollout import Episode, Turn

__all__ = ["ECHO_SUMS", "EchoTargets", "echo_loss", "echo_means", "echo_turns", "is_error_observation"]


def is_error_observation(turn: Turn) -> bool:
    """Whether the env answered ``turn`` with an error (an invalid or unparsable tool call)."""
    return turn.info.get("response_type") == "invalid_call" or bool(turn.info.get("errors"))


def echo_turns(episode: Episode, tools: Sequence[str] = ()) -> list[Turn]:
    """The turns whose observation text the policy learns: results of ``tools`` (every tool when empty), not
    errors, not imagined, with content tokens in the episode (the last turn's observation never is)."""
    return [turn for turn in episode.turns
            if turn.content_span[1] > turn.content_span[0] and "tool" in turn.info
            and (not tools or turn.info["tool"] in tools)
            and not is_error_observation(turn) and not turn.info.get("imagined", False)]


@dataclass
class EchoTargets:
    """A step's echo targets: per batch row (episode), the ``[start, end)`` spans of the observation tokens
    it learns, in the episode's token positions."""

    spans: list[list[tuple[int, int]]]

    @classmethod
    def from_episodes(cls, episodes: Sequence[Episode], tools: Sequence[str] = ()) -> EchoTargets:
        return cls([[turn.content_span for turn in echo_turns(episode, tools)] for episode in episodes])

    def count(self, rows: torch.Tensor | Sequence[int]) -> int:
        """How many observations the ``rows`` hold (the loss's normaliser over a minibatch)."""
        return sum(len(self.spans[row]) for row in _as_list(rows))

    def segments(self, rows: torch.Tensor | Sequence[int], width: int) -> torch.Tensor:
        """``[len(rows), width - 1]`` long tensor aligned with the *targets* (column ``j`` predicts token
        ``j + 1``): the observation a target token belongs to, numbered over ``rows`` from 0, else -1."""
        out = torch.full((len(_as_list(rows)), width - 1), -1, dtype=torch.long)
        number = 0
        for index, row in enumerate(_as_list(rows)):
            for start, end in self.spans[row]:
                end = min(end, width)
                if end > start:
                    out[index, start - 1 : end - 1] = number
                number += 1
        return out


def echo_loss(logits: torch.Tensor, targets: torch.Tensor, segments: torch.Tensor, normaliser: int
              ) -> tuple[torch.Tensor, dict[str, float]]:
    """The sum over observations of their mean token cross-entropy, divided by ``normaliser`` (the
    minibatch's observation count, so microbatches' terms add up to the minibatch mean), and its metrics as
    sums (:data:`ECHO_SUMS`: parts of a minibatch add up; :func:`echo_means` turns them into means).

    Args:
        logits: ``[N, V]`` the model's logits at the observation tokens' positions (temperature 1).
        targets: ``[N]`` the observation tokens.
        segments: ``[N]`` the observation each token belongs to (numbered from 0).
        normaliser: the minibatch's observation count.

    >>> logits = torch.tensor([[0.0, 9.0], [9.0, 0.0], [0.0, 9.0]])
    >>> loss, sums = echo_loss(logits, torch.tensor([1, 1, 1]), torch.tensor([0, 0, 1]), normaliser=2)
    >>> round(loss.item(), 3), round(echo_means(sums)["echo/token_accuracy"], 3)
    (2.25, 0.667)
    """
    token_loss = F.cross_entropy(logits.float(), targets, reduction="none")
    count = int(segments.max()) + 1 if len(segments) else 0
    lengths = torch.zeros(count, device=logits.device).index_add_(0, segments, torch.ones_like(token_loss))
    per_observation = torch.zeros(count, device=logits.device).index_add_(0, segments, token_loss)
    present = lengths > 0
    loss = (per_observation[present] / lengths[present]).sum() / max(normaliser, 1)
    with torch.no_grad():
        correct = float((logits.argmax(-1) == targets).sum())
        loss_sum = float((per_observation[present] / lengths[present]).sum())
    return loss, {"echo/loss_sum": loss_sum, "echo/correct_tokens": correct, "echo/tokens": float(len(targets)),
                  "echo/observations": float(int(present.sum()))}


# the echo metrics a minibatch's parts (microbatches, ranks) add up, before echo_means
ECHO_SUMS = ("echo/loss_sum", "echo/correct_tokens", "echo/tokens", "echo/observations")


def echo_means(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` with the echo sums replaced by ``loss/echo`` (mean over observations), ``echo/token_accuracy``
    (over their tokens) and ``echo/observations``; unchanged without echo sums."""
    if "echo/observations" not in metrics:
        return metrics
    out = {key: value for key, value in metrics.items() if key not in ECHO_SUMS}
    return out | {"loss/echo": metrics["echo/loss_sum"] / max(metrics["echo/observations"], 1.0),
                  "echo/token_accuracy": metrics["echo/correct_tokens"] / max(metrics["echo/tokens"], 1.0),
                  "echo/observations": metrics["echo/observations"]}


def _as_list(rows: torch.Tensor | Sequence[int]) -> list[int]:
    return rows.tolist() if isinstance(rows, torch.Tensor) else list(rows)
