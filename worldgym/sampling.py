"""Drawing from categorical distributions by inverse transform sampling.

One uniform per draw, a cumulative sum and a binary search: the same distribution as ``torch.multinomial``,
cheaper on CPU (``benchmarks/token_sampling.py``: an LLM's next tokens for a batch of 16 or 32 over a
49,152-token vocabulary). Dreamer's latent and action samples and the LLM engines' next tokens use it.

>>> probs = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
>>> sample_index(probs, torch.Generator().manual_seed(0))[0].item()
1
"""

from __future__ import annotations

import torch

__all__ = ["sample_index"]


def sample_index(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Class indices ``[...]`` drawn from ``[..., D]`` non-negative weights (normalised here: they need not sum
    to 1), in ``probs``' dtype (float64 for a large vocabulary keeps the cumulative sums exact to ~1e-16).

    The index is the first whose cumulative weight exceeds the draw, so a class of weight 0 is never drawn;
    where the draw rounds up to the total, the last class of positive weight.
    """
    cdf = probs.cumsum(dim=-1)
    total = cdf[..., -1:].contiguous()
    uniform = torch.rand(total.shape, generator=generator, device=probs.device, dtype=probs.dtype)
    drawn = torch.searchsorted(cdf, uniform * total, right=True)
    last_positive = torch.searchsorted(cdf, total)  # the first position the cumulative weight is complete
    return torch.minimum(drawn, last_positive).squeeze(-1)
