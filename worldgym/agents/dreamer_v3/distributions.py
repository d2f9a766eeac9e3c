"""Dreamer v3 transforms and distributions: symlog, two-hot symlog bins, straight-through categoricals."""

from __future__ import annotations

from functools import cached_property

import torch
import torch.nn.functional as F

from worldgym.sampling import sample_index


def symlog(x: torch.Tensor) -> torch.Tensor:
    """``sign(x) * log(1 + |x|)`` (DreamerV3 eq. 9).

    >>> round(float(symlog(torch.tensor(-1.0))), 4)
    -0.6931
    """
    return torch.sign(x) * torch.log1p(torch.abs(x))


def symexp(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`symlog`: ``sign(x) * (exp(|x|) - 1)``."""
    return torch.sign(x) * torch.expm1(torch.abs(x))


class TwoHotSymlog:
    """Categorical over ``bins`` equally spaced points in symlog space [low, high] (DreamerV3 eq. 10-11).

    Args:
        logits (torch.Tensor): ``[..., bins]`` of any floating dtype (the distribution computes in float32).
        low (float): first bin in symlog space.
        high (float): last bin in symlog space.
    """

    def __init__(self, logits: torch.Tensor, low: float = -20.0, high: float = 20.0) -> None:
        self.logits = logits.float()
        self.bins = torch.linspace(low, high, logits.shape[-1], device=logits.device, dtype=self.logits.dtype)

    @cached_property
    def log_probs(self) -> torch.Tensor:
        """Normalised log-probabilities ``[..., bins]`` (computed once per distribution)."""
        return self.logits - torch.logsumexp(self.logits, dim=-1, keepdim=True)

    @property
    def mean(self) -> torch.Tensor:
        """Expected bin mapped back with symexp, ``[..., 1]``."""
        probs = torch.softmax(self.logits, dim=-1)
        return symexp((probs * self.bins).sum(dim=-1, keepdim=True))

    def _neighbours(
        self, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Bins below/above ``symlog(value)`` (``[..., 1]``) and their two-hot weights, each ``[...]``."""
        x = symlog(value).squeeze(-1)
        num = self.bins.shape[0]
        count_le = torch.bucketize(x.contiguous(), self.bins, right=True)  # number of bins <= x
        below = (count_le - 1).clamp(0, num - 1)
        above = count_le.clamp(0, num - 1)
        equal = below == above
        dist_below = torch.where(equal, torch.ones_like(x), (self.bins[below] - x).abs())
        dist_above = torch.where(equal, torch.ones_like(x), (self.bins[above] - x).abs())
        total = dist_below + dist_above
        return below, above, dist_above / total, dist_below / total

    def two_hot(self, value: torch.Tensor) -> torch.Tensor:
        """Two-hot target ``[..., bins]`` of ``symlog(value)`` (``value`` is ``[..., 1]``)."""
        below, above, weight_below, weight_above = self._neighbours(value)
        num = self.bins.shape[0]
        return F.one_hot(below, num) * weight_below.unsqueeze(-1) + F.one_hot(
            above, num
        ) * weight_above.unsqueeze(-1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Cross-entropy score of the two-hot target of ``value`` ``[..., 1]``; returns ``[...]``."""
        below, above, weight_below, weight_above = self._neighbours(value)
        log_pred = self.log_probs
        at_below = log_pred.gather(-1, below.unsqueeze(-1)).squeeze(-1)
        at_above = log_pred.gather(-1, above.unsqueeze(-1)).squeeze(-1)
        return weight_below * at_below + weight_above * at_above


def unimix_probs(logits: torch.Tensor, discrete: int, unimix: float) -> torch.Tensor:
    """Probabilities ``[..., S, D]`` of ``[..., S * D]`` logits with ``unimix`` of a uniform mixed in.

    They are clamped to ``[eps, 1 - eps]`` (so may miss summing to 1 by a few eps); ``softmax`` of
    :func:`unimix_logits` renormalises exactly these values.
    """
    shaped = logits.view(*logits.shape[:-1], -1, discrete)
    probs = torch.softmax(shaped, dim=-1)
    if unimix <= 0:
        return probs
    probs = (1 - unimix) * probs + unimix / discrete
    eps = torch.finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def unimix_logits(logits: torch.Tensor, discrete: int, unimix: float) -> torch.Tensor:
    """Mix ``unimix`` of a uniform distribution into each categorical of ``[..., S * D]`` logits."""
    if unimix <= 0:
        return logits
    return torch.log(unimix_probs(logits, discrete, unimix)).view_as(logits)


def straight_through_sample(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One-hot sample of ``[..., D]`` logits, straight-through gradients (value = sample, grad = probs)."""
    probs = torch.softmax(logits, dim=-1)
    sample = F.one_hot(sample_index(probs.detach(), generator), probs.shape[-1]).to(probs.dtype)
    return sample + probs - probs.detach()


def categorical_mode(logits: torch.Tensor) -> torch.Tensor:
    """One-hot argmax of ``[..., D]`` logits."""
    return F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)


def categorical_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """``KL(p || q)`` of categoricals ``[..., S, D]`` summed over the ``S`` latents; returns ``[...]``."""
    p_log = torch.log_softmax(p_logits, dim=-1)
    q_log = torch.log_softmax(q_logits, dim=-1)
    return (p_log.exp() * (p_log - q_log)).sum(dim=(-1, -2))


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of categoricals ``[..., D]``; returns ``[...]``."""
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)
