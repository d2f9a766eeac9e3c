"""Policy-gradient losses for LLM RL as pure tensor functions: GRPO / DAPO / Dr.GRPO, k3 KL, entropy, shaping.

Shapes: ``B`` sequences of ``T`` tokens. ``mask`` is 1 on tokens the policy generated (the only ones trained)
and 0 on prompt, environment and padding tokens. Log-probabilities are per token.

Two tempting mistakes, and why they are wrong:

* **Summing log-probabilities over the sequence before the ratio.** ``exp(sum_t logp_t - sum_t logp_old_t)``
  is a product of per-token ratios: it explodes or vanishes with length, so clipping it clips whole sequences
  at once (almost always, for long ones) and the gradient is dominated by length instead of by which tokens
  were good. PPO's surrogate is a per-decision quantity; GRPO/DAPO clip each token's ratio (equation 1 of
  DAPO, arXiv:2503.14476) and only then aggregate.
* **Using the reference model as the old policy.** The clip keeps the update close to the policy that
  *sampled*
  the data (pi_old), which is what makes reusing the batch for several minibatch steps an importance-sampling
  estimate. The frozen reference drifts away from the policy as training goes on, so its ratio is not an
  importance weight at all: clipping against it freezes learning once the policy has moved 20% from the start,
  and the old-policy constraint disappears. The reference belongs only in the (optional) KL penalty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

__all__ = [
    "AdvantageNorm",
    "Aggregation",
    "PolicyLossOutput",
    "aggregate",
    "dynamic_sampling_mask",
    "entropy_from_logits",
    "group_advantages",
    "kl_k3",
    "overlong_penalty",
    "policy_loss",
    "token_logprobs",
    "truncated_importance_weights",
]

Aggregation = Literal["token_mean", "seq_mean", "dr_grpo"]
AdvantageNorm = Literal["group_std", "none"]


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log pi(target_t | prefix) for each position, from logits ``[B, T, V]`` and targets ``[B, T]``.

    ``temperature`` divides the logits first, so training log-probabilities match the distribution that
    sampled.
    """
    logits = logits.float() / temperature
    return torch.gather(logits.log_softmax(-1), -1, targets.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The true entropy ``H = -sum_v p_v log p_v`` of each position's distribution, ``[B, T, V] -> [B, T]``.

    (Not ``-log p(chosen token)``, which is only a one-sample estimate of it.)
    """
    log_p = (logits.float() / temperature).log_softmax(-1)
    return -(log_p.exp() * log_p).sum(-1)


def group_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, norm: AdvantageNorm = "group_std", eps: float = 1e-6
) -> torch.Tensor:
    """Group-relative advantages: ``(r - mean_g) / (std_g + eps)`` (GRPO), or ``r - mean_g`` with
    ``norm="none"``
    (Dr.GRPO). ``std`` is the unbiased sample std of the group (as in TRL); a group of one gets advantage 0.

    >>> group_advantages(torch.tensor([1., 0., 1., 1.]), torch.tensor([0, 0, 1, 1]), norm="none")
    tensor([ 0.5000, -0.5000,  0.0000,  0.0000])
    """
    rewards = rewards.float()
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    sums = torch.zeros(len(counts), dtype=rewards.dtype).index_add_(0, inverse, rewards)
    means = sums / counts
    centred = rewards - means[inverse]
    if norm == "none":
        return centred
    if norm != "group_std":
        raise ValueError(f"norm must be 'group_std' or 'none', got {norm!r}")
    squares = torch.zeros(len(counts), dtype=rewards.dtype).index_add_(0, inverse, centred**2)
    std = (squares / (counts - 1).clamp(min=1)).sqrt()
    return centred / (std[inverse] + eps)


def aggregate(
    values: torch.Tensor, mask: torch.Tensor, mode: Aggregation, max_tokens: int | None = None
) -> torch.Tensor:
    """Reduce per-token ``values`` ``[B, T]`` over the masked tokens to a scalar.

    * ``token_mean`` (DAPO): sum over all tokens / number of tokens; long and short sequences weigh per token.
    * ``seq_mean`` (GRPO): mean over each sequence's tokens, then mean over sequences.
    * ``dr_grpo`` (Dr.GRPO): sum over all tokens / (B * ``max_tokens``), a constant, so no length bias.
    """
    mask = mask.to(values.dtype)
    if mode == "token_mean":
        return (values * mask).sum() / mask.sum().clamp(min=1.0)
    if mode == "seq_mean":
        per_sequence = (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_sequence.mean()
    if mode == "dr_grpo":
        normaliser = max_tokens if max_tokens is not None else values.shape[-1]
        return (values * mask).sum() / (values.shape[0] * normaliser)
    raise ValueError(f"mode must be one of 'token_mean', 'seq_mean', 'dr_grpo', got {mode!r}")


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref): ``exp(ref - logp) - (ref - logp) - 1`` (Schulman 2020).

    Non-negative and unbiased for samples drawn from pi.
    """
    log_ratio = ref_logprobs - logprobs
    return log_ratio.exp() - log_ratio - 1.0


@dataclass
class PolicyLossOutput:
    """The scalar loss to minimise and detached diagnostics."""

    loss: torch.Tensor
    policy_loss: torch.Tensor
    kl: torch.Tensor
    clip_fraction: torch.Tensor
    ratio_mean: torch.Tensor


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    aggregation: Aggregation = "token_mean",
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    max_tokens: int | None = None,
    importance_weights: torch.Tensor | None = None,
) -> PolicyLossOutput:
    """Token-level clipped surrogate (PPO / GRPO / DAPO), plus an optional k3 KL penalty to a reference.

    Per token: ``r_t = exp(logp_t - logp_old_t)`` against the policy that *sampled* (see the module
    docstring), ``l_t = -w_t min(r_t A, clip(r_t, 1 - eps_low, 1 + eps_high) A) + kl_coef * k3_t``, aggregated
    by ``aggregation``. ``advantages`` are per sequence ``[B]`` (broadcast over tokens) or per token ``[B, T]``.
    ``importance_weights`` ``w_t`` (constants, default 1): where the tokens were sampled by an engine whose
    probabilities differ from the learner's, the truncated ratio of the two (:func:`truncated_importance_weights`).
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    ratio = (logprobs - old_logprobs).exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    if importance_weights is not None:
        per_token = per_token * importance_weights.detach()
    kl = torch.zeros_like(per_token)
    if ref_logprobs is not None:
        kl = kl_k3(logprobs, ref_logprobs)
    total = aggregate(per_token + kl_coef * kl, mask, aggregation, max_tokens)
    with torch.no_grad():
        was_clipped = (clipped < unclipped).to(
            per_token.dtype
        )  # the clip is active: the token gets no gradient
        stats = {
            name: aggregate(value, mask, "token_mean")
            for name, value in (("policy", per_token), ("kl", kl), ("clip", was_clipped), ("ratio", ratio))
        }
    return PolicyLossOutput(total, stats["policy"], stats["kl"], stats["clip"], stats["ratio"])


def truncated_importance_weights(learner_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor,
                                  cap: float) -> torch.Tensor:
    """Truncated importance sampling of rollouts from another engine: per token
    ``min(pi_learner / pi_engine, cap)`` on the masked tokens (1 elsewhere), the learner's probability of the
    sampled token over the probability the engine sampled it with. An engine that rounds differently (bf16
    kernels, another attention) samples from a slightly different policy than the one the loss differentiates;
    weighting each token by this ratio makes the gradient the learner's own policy gradient again, and the cap
    bounds the variance a rare token with a tiny engine probability would add.

    >>> truncated_importance_weights(torch.log(torch.tensor([[0.5, 0.9, 0.2]])),
    ...                              torch.log(torch.tensor([[0.5, 0.3, 0.4]])), torch.tensor([[1, 1, 0]]), cap=2.0)
    tensor([[1., 2., 1.]])
    """
    ratio = (learner_logprobs.float() - engine_logprobs.float()).exp().clamp(max=cap)
    return torch.where(mask.bool(), ratio, torch.ones_like(ratio))


def dynamic_sampling_mask(rewards: torch.Tensor, group_ids: torch.Tensor, tol: float = 1e-8) -> torch.Tensor:
    """True for samples whose group has differing rewards (DAPO dynamic sampling keeps only those groups).

    A group whose rewards are all equal has zero advantage everywhere, so it adds no signal and only dilutes
    the batch.

    >>> dynamic_sampling_mask(torch.tensor([1., 1., 0., 1.]), torch.tensor([0, 0, 1, 1])).tolist()
    [False, False, True, True]
    """
    _, inverse = torch.unique(group_ids, return_inverse=True)
    groups = int(inverse.max()) + 1 if len(inverse) else 0
    high = torch.full((groups,), -float("inf")).scatter_reduce(0, inverse, rewards.float(), "amax")
    low = torch.full((groups,), float("inf")).scatter_reduce(0, inverse, rewards.float(), "amin")
    return (high - low > tol)[inverse]


def overlong_penalty(
    lengths: torch.Tensor, max_length: int, buffer: int, penalty: float = 1.0
) -> torch.Tensor:
    """DAPO soft overlong punishment: 0 up to ``max_length - buffer`` tokens, then falling linearly to
    ``-penalty``
    at ``max_length`` (and ``-penalty`` beyond). Added to the task reward.

    >>> overlong_penalty(torch.tensor([10, 15, 20]), max_length=20, buffer=10).tolist()
    [0.0, -0.5, -1.0]
    """
    if buffer <= 0 or buffer > max_length:
        raise ValueError(f"buffer must be in (0, max_length={max_length}], got {buffer}")
    excess = (lengths.float() - (max_length - buffer)).clamp(min=0.0)
    return (excess / buffer).clamp(max=1.0) * -penalty + 0.0  # + 0.0 turns -0.0 into 0.0
