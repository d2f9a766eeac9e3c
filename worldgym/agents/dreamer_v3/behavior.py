"""Behavior learning in imagination: roll the actor through the RSSM prior, then actor and critic losses."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from worldgym.agents.dreamer_v3.config import LossConfig
from worldgym.agents.dreamer_v3.distributions import TwoHotSymlog
from worldgym.agents.dreamer_v3.loss import (
    ReturnNormalizer,
    actor_loss,
    critic_loss,
    discount_weights,
    lambda_returns,
)
from worldgym.agents.dreamer_v3.model import Actor, Critic, RSSMState, WorldModel
from worldgym.agents.dreamer_v3.onehot import autocast_dtype, multi_hot, one_hot_mlp
from worldgym.sampling import sample_index


@dataclass
class Imagination:
    """Time-major imagined rollout. Model states are kept as ``h [H+1, M, H]`` and the columns of the one-hot
    latents ``[H+1, M, S]`` (see :mod:`worldgym.agents.dreamer_v3.onehot`); also the one-hot actions taken
    ``[H, M, A]`` and the actor's logits for them ``[H, M, A]`` (with gradients to the actor only)."""

    h: torch.Tensor
    columns: torch.Tensor
    actions: torch.Tensor
    action_logits: torch.Tensor
    latent_width: int

    @property
    def features(self) -> torch.Tensor:
        """Dense heads' input ``[H+1, M, S * D + H]`` (the same values the sparse heads see)."""
        return torch.cat((multi_hot(self.columns, self.latent_width, self.h.dtype), self.h), dim=-1)


def sample_actions(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Integer actions ``[...]`` drawn from ``[..., A]`` logits with an explicit generator."""
    return sample_index(torch.softmax(logits.detach(), dim=-1), generator)


def imagine(
    world_model: WorldModel, actor: Actor, start: RSSMState, horizon: int, generator: torch.Generator | None
) -> Imagination:
    """Roll ``horizon`` prior steps from ``start`` (``h [M, H]``, one-hot ``z [M, S, D]``) with the actor.

    No gradient flows through the dynamics (discrete actions are trained with REINFORCE); the actor's logits
    keep their graph so the actor loss needs no second forward pass.
    """
    rssm = world_model.rssm
    h = start.h.detach()
    columns = rssm.latent_columns(start.z.detach())
    hs, cols, actions, logits = [h], [columns], [], []
    for _ in range(horizon):
        step_logits = actor.from_latent(cols[-1], hs[-1])
        action = sample_actions(step_logits, generator)
        with torch.no_grad():
            h, columns = rssm.imagine_step_columns(hs[-1], cols[-1], action, generator)
        hs.append(h)
        cols.append(columns)
        actions.append(F.one_hot(action, actor.action_dim).to(step_logits.dtype))
        logits.append(step_logits)
    return Imagination(
        torch.stack(hs),
        torch.stack(cols),
        torch.stack(actions),
        torch.stack(logits),
        start.z.shape[-2] * start.z.shape[-1],
    )


def behavior_losses(
    world_model: WorldModel,
    actor: Actor,
    critic: Critic,
    slow_critic: Critic,
    normalizer: ReturnNormalizer,
    rollout: Imagination,
    start_continue: torch.Tensor,
    cfg: LossConfig,
) -> dict[str, torch.Tensor]:
    """Actor and critic losses on one imagined rollout (DreamerV3 section 3).

    Args:
        start_continue (torch.Tensor): true continue flags of the start states ``[M, 1]``.
    """
    cols = rollout.columns
    h = rollout.h.to(autocast_dtype(rollout.h.device.type))  # the heads' input, cast once for all four
    # The critic loss only uses the first H steps: the last step's values need no graph
    critic_logits = critic.from_latent(cols[:-1], h[:-1])
    with torch.no_grad():
        last_values = TwoHotSymlog(critic.from_latent(cols[-1:], h[-1:])).mean
        values = torch.cat((TwoHotSymlog(critic_logits.detach()).mean, last_values))
        # Rewards and continues of the start states are never used (start_continue replaces the latter)
        rewards = TwoHotSymlog(one_hot_mlp(world_model.reward, cols[1:], h[1:])).mean
        continues = (one_hot_mlp(world_model.cont, cols[1:], h[1:]) > 0).to(values.dtype)
        continues = torch.cat((start_continue.unsqueeze(0), continues))
        returns = lambda_returns(rewards, values[1:], continues[1:] * cfg.gamma, cfg.lmbda)
        weights = discount_weights(continues, cfg.gamma)[:-1]
        offset, scale = normalizer(returns)
        advantage = (returns - offset) / scale - (values[:-1] - offset) / scale
        slow_values = TwoHotSymlog(slow_critic.from_latent(cols[:-1], h[:-1])).mean
    policy_loss, entropy = actor_loss(
        rollout.action_logits, rollout.actions, advantage, weights, cfg.entropy_coef
    )
    value_loss = critic_loss(critic_logits, returns, slow_values, weights)
    return {
        "actor": policy_loss,
        "critic": value_loss,
        "entropy": entropy,
        "return_mean": returns.mean(),
        "return_scale": scale,
        "advantage_mean": advantage.mean(),
    }


@torch.no_grad()
def update_slow_critic(critic: Critic, slow_critic: Critic, tau: float) -> None:
    """``slow <- tau * critic + (1 - tau) * slow`` (tau = 1 copies)."""
    for param, slow in zip(critic.parameters(), slow_critic.parameters(), strict=True):
        slow.lerp_(param, tau)
