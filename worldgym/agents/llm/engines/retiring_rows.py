"""Rows that stopped leave the batch: a batch's decoding split into ``generate`` calls that end when enough
rows have produced a stop token, so later steps decode only the rows still writing.

One ``generate`` call decodes every row for as many steps as its longest row needs: a row that stopped keeps
being fed pad tokens, at the full cost of a row. In a multi-turn rollout most rows of a turn stop after a tool
call of ~50 tokens while one rambles to the token limit (SmolLM2 at d3: turns of 16 rows with mean length
57-101 tokens ran 192 steps). :class:`RetireFinishedRows` ends the call once a quarter of the running rows (at
least one) have stopped; the engine then drops them from the cache and the inputs and calls ``generate`` again
from where it ended (the cache holds everything but the last sampled token, which the next call feeds first).
:class:`DecodedRows` gathers each prompt's tokens and their logprobs over the calls (each call's logits are
reduced to the sampled tokens' logprobs as soon as it ends, so no call's logits outlive it).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import StoppingCriteria

__all__ = ["DecodedRows", "RetireFinishedRows"]


class RetireFinishedRows(StoppingCriteria):
    """Ends a ``generate`` call (every row at once) when at least ``max(1, running // 4)`` of its ``running``
    rows, but not all, hold a stop token after column ``prompt_width``; ``generate`` ends the call itself when
    all rows have stopped."""

    def __init__(self, stop_token_ids: Sequence[int], prompt_width: int):
        self.stop_token_ids = torch.tensor(list(stop_token_ids))
        self.prompt_width = prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor | None, **kwargs: object
                 ) -> torch.BoolTensor:
        stopped = torch.isin(input_ids[:, self.prompt_width:], self.stop_token_ids.to(input_ids.device)).any(1)
        count, running = int(stopped.sum()), len(stopped)
        retire = 0 < count < running and count >= max(1, running // 4)
        return torch.full((running,), retire, dtype=torch.bool, device=input_ids.device)  # type: ignore[return-value]


class DecodedRows:
    """What one batch decoded so far, per prompt row: its tokens and their logprobs, and which rows are still in
    the batch (``active[b]``: the prompt row of batch row ``b``)."""

    def __init__(self, rows: int):
        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.logprobs: list[list[float]] = [[] for _ in range(rows)]
        self.active = list(range(rows))
        self.steps = 0  # decoding steps run so far (every active row has this many tokens)

    def add(self, new_tokens: torch.Tensor, logprobs: torch.Tensor) -> None:
        """One ``generate`` call's ``[active, steps]`` new tokens and their ``[active, steps]`` logprobs."""
        if logprobs.shape != new_tokens.shape:
            raise ValueError(f"{tuple(new_tokens.shape)} tokens but {tuple(logprobs.shape)} logprobs")
        for batch_row, row in enumerate(self.active):
            self.tokens[row] += new_tokens[batch_row].tolist()
            self.logprobs[row] += logprobs[batch_row].tolist()
        self.steps += new_tokens.shape[1]

    def stopped(self, stop_token_ids: Sequence[int]) -> list[int]:
        """Batch rows whose tokens hold a stop token."""
        stops = set(stop_token_ids)
        return [b for b, row in enumerate(self.active) if stops.intersection(self.tokens[row])]

    def keep(self, batch_rows: Sequence[int]) -> None:
        """Only these batch rows go on decoding (in this order)."""
        self.active = [self.active[b] for b in batch_rows]
