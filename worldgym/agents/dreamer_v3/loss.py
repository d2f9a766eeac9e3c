"""Dreamer v3 losses as pure functions: world model (eq. 5), lambda-returns, return scale, actor, critic."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from worldgym.agents.dreamer_v3.distributions import TwoHotSymlog, categorical_entropy, categorical_kl, symlog


@dataclass
class WorldModelLosses:
    """Scalar parts of the world-model loss (means over ``[T, B]``)."""

    total: torch.Tensor
    kl: torch.Tensor
    kl_loss: torch.Tensor
    reward_loss: torch.Tensor
    observation_loss: torch.Tensor
    continue_loss: torch.Tensor

    def as_metrics(self) -> dict[str, torch.Tensor]:
        return {f"loss/world_{k}": v.detach() for k, v in vars(self).items()}


def observation_nll(pred: torch.Tensor, target: torch.Tensor, symlog_target: bool) -> torch.Tensor:
    """Squared error summed over the event dims (``[T, B, ...] -> [T, B]``); symlog targets for vectors."""
    if symlog_target:
        target = symlog(target)
    return (pred - target).pow(2).flatten(2).sum(dim=-1)


def kl_balanced(
    post_logits: torch.Tensor, prior_logits: torch.Tensor, dyn: float, rep: float, free_nats: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """KL balancing with free bits (DreamerV3 eq. 5): returns the raw KL and the loss, both ``[T, B]``.

    ``dyn * max(free, KL(sg(post) || prior)) + rep * max(free, KL(post || sg(prior)))``.
    """
    kl_dyn = categorical_kl(post_logits.detach(), prior_logits)
    kl_rep = categorical_kl(post_logits, prior_logits.detach())
    loss = dyn * kl_dyn.clamp(min=free_nats) + rep * kl_rep.clamp(min=free_nats)
    return kl_dyn, loss


def world_model_loss(
    obs_pred: torch.Tensor,
    obs: torch.Tensor,
    reward_logits: torch.Tensor,
    rewards: torch.Tensor,
    prior_logits: torch.Tensor,
    post_logits: torch.Tensor,
    cont_logits: torch.Tensor,
    cont_targets: torch.Tensor,
    *,
    symlog_obs: bool,
    kl_dynamic: float = 0.5,
    kl_representation: float = 0.1,
    kl_free_nats: float = 1.0,
) -> WorldModelLosses:
    """World-model loss (DreamerV3 eq. 5): prediction (obs, two-hot reward, continue) + balanced KL.

    Network outputs may come in a lower precision (autocast); every loss is computed in float32.

    Args:
        obs_pred (torch.Tensor): decoder output ``[T, B, ...]`` (symlog space for vectors).
        obs (torch.Tensor): targets ``[T, B, ...]``.
        reward_logits (torch.Tensor): ``[T, B, bins]``.
        rewards (torch.Tensor): ``[T, B, 1]``.
        prior_logits (torch.Tensor): ``[T, B, S, D]``.
        post_logits (torch.Tensor): ``[T, B, S, D]``.
        cont_logits (torch.Tensor): ``[T, B, 1]``.
        cont_targets (torch.Tensor): ``[T, B, 1]``, 0 only at true terminals.
        symlog_obs (bool): compare against ``symlog(obs)`` (vector observations).
    """
    observation_loss = observation_nll(obs_pred.float(), obs.float(), symlog_obs)
    reward_loss = -TwoHotSymlog(reward_logits).log_prob(rewards)
    kl, kl_loss = kl_balanced(
        post_logits.float(), prior_logits.float(), kl_dynamic, kl_representation, kl_free_nats
    )
    continue_loss = F.binary_cross_entropy_with_logits(
        cont_logits.float(), cont_targets.float(), reduction="none"
    ).sum(-1)
    total = (kl_loss + observation_loss + reward_loss + continue_loss).mean()
    return WorldModelLosses(
        total, kl.mean(), kl_loss.mean(), reward_loss.mean(), observation_loss.mean(), continue_loss.mean()
    )


def lambda_returns(
    rewards: torch.Tensor, values: torch.Tensor, continues: torch.Tensor, lmbda: float
) -> torch.Tensor:
    """TD(lambda) returns, time-major ``[H, B, 1]`` (DreamerV3 eq. 7).

    ``R_t = r_t + c_t * ((1 - lambda) * v_t + lambda * R_{t+1})`` with ``R_H = v_H``, where ``rewards``,
    ``values`` and ``continues`` (already multiplied by gamma) are those of the steps *after* each start.
    """
    interm = rewards + continues * values * (1 - lmbda)
    out = [values[-1]]
    for t in reversed(range(rewards.shape[0])):
        out.append(interm[t] + continues[t] * lmbda * out[-1])
    return torch.stack(out[:0:-1])


class ReturnNormalizer(nn.Module):
    """EMA of the 5th/95th return percentiles; returns ``(offset, scale)`` with ``scale >= 1/max_inv``."""

    def __init__(
        self, decay: float = 0.99, low: float = 0.05, high: float = 0.95, max_inv: float = 1.0
    ) -> None:
        super().__init__()
        self.decay, self.q_low, self.q_high, self.min_scale = decay, low, high, 1 / max_inv
        self.register_buffer("low", torch.zeros(()))
        self.register_buffer("high", torch.zeros(()))

    @torch.no_grad()
    def forward(self, returns: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        flat = returns.detach().float().flatten()
        self.low.mul_(self.decay).add_((1 - self.decay) * torch.quantile(flat, self.q_low))
        self.high.mul_(self.decay).add_((1 - self.decay) * torch.quantile(flat, self.q_high))
        return self.low.clone(), torch.clamp(self.high - self.low, min=self.min_scale)


def discount_weights(continues: torch.Tensor, gamma: float) -> torch.Tensor:
    """Cumulative discount of every imagined step ``[H+1, B, 1]`` (1 for the start state)."""
    return torch.cumprod(continues * gamma, dim=0) / gamma


def actor_loss(
    action_logits: torch.Tensor,
    actions: torch.Tensor,
    advantage: torch.Tensor,
    weights: torch.Tensor,
    entropy_coef: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE with entropy bonus for discrete actions (DreamerV3 eq. 11); returns (loss, mean entropy).

    ``action_logits``/``actions`` are ``[H, B, A]`` (one-hot actions); ``advantage``/``weights`` are
    ``[H, B, 1]``.
    """
    action_logits = action_logits.float()
    log_probs = torch.log_softmax(action_logits, dim=-1)
    log_prob = (log_probs * actions.detach()).sum(-1, keepdim=True)
    entropy = categorical_entropy(action_logits).unsqueeze(-1)
    objective = log_prob * advantage.detach() + entropy_coef * entropy
    return -(weights.detach() * objective).mean(), entropy.mean().detach()


def critic_loss(
    critic_logits: torch.Tensor, returns: torch.Tensor, slow_values: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Two-hot critic loss towards the lambda-returns, regularised towards the slow (EMA) critic's values."""
    dist = TwoHotSymlog(critic_logits)
    nll = -dist.log_prob(returns.detach()) - dist.log_prob(slow_values.detach())
    return (nll * weights.detach().squeeze(-1)).mean()
