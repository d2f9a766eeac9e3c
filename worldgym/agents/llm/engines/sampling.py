"""Next-token sampling for transformers' ``generate``, done by logits processors.

``generate(do_sample=True)`` draws each token with ``torch.multinomial``, which on CPU took 13.6 ms per draw of 16
rows from SmolLM2's 49,152-token vocabulary, 1.6x the inverse transform's 8.3 ms, and 2.2x at 32 rows
(``benchmarks/token_sampling.py``, one thread). The engine instead decodes greedily behind :func:`sampling_processors`:
the temperature and top-p warpers as ``generate`` would apply them, then :class:`DrawNextToken`, which draws
the token by inverse transform sampling (:func:`worldgym.sampling.sample_index`, in float64) and leaves it
the only finite score, so the greedy choice is the draw. The distribution is the same; the random stream
differs from ``multinomial``'s, and is still fixed by the call's seed.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor, TemperatureLogitsWarper, TopPLogitsWarper

from worldgym.agents.llm.engines.base import SamplingParams
from worldgym.sampling import sample_index

__all__ = ["DrawNextToken", "sampling_processors"]


class DrawNextToken(LogitsProcessor):
    """Draw each row's next token from ``softmax(scores)`` and return scores that are 0 at the drawn token and
    ``-inf`` elsewhere (``generate``'s greedy choice then emits the draw)."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        tokens = sample_index(torch.softmax(scores, dim=-1, dtype=torch.float64))
        return torch.full_like(scores, float("-inf")).scatter_(1, tokens[:, None], 0.0)


def sampling_processors(params: SamplingParams) -> list[LogitsProcessor]:
    """The processors that sample as ``params`` asks, to follow any constraint's (none for greedy decoding):
    temperature, top-p where it is below 1, then the draw."""
    if params.temperature == 0:
        return []
    warpers: list[LogitsProcessor] = [TemperatureLogitsWarper(params.temperature)]
    if params.top_p < 1:
        warpers.append(TopPLogitsWarper(params.top_p))
    return [*warpers, DrawNextToken()]
