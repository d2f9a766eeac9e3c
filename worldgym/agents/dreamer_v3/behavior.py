"""Behavior learning in imagination: roll the actor through the RSSM prior, then actor and critic losses."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from worldgym.agents.dreamer_v3.config import LossConfig
from worldgym.agents.dreamer_v3.distributions import TwoHotSymlog, sample_index
from worldgym.agents.dreamer_v3.loss import (
    ReturnNormalizer,
    actor_loss,
    critic_loss,
    discount_weights,
    lambda_returns,
)
from worldgym.agents.dreamer_v3.model import Actor, Critic, RSSMState, WorldModel


@dataclass
class Imagination:
    """Time-major imagined rollout: features ``[H+1, M, F]``, the one-hot actions taken ``[H, M, A]`` and the
    actor's logits for them ``[H, M, A]`` (with gradients to the actor only)."""

    features: torch.Tensor
    actions: torch.Tensor
    action_logits: torch.Tensor


def sample_actions(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Integer actions ``[...]`` drawn from ``[..., A]`` logits with an explicit generator."""
    return sample_index(torch.softmax(logits.detach(), dim=-1), generator)


def imagine(
    world_model: WorldModel, actor: Actor, start: RSSMState, horizon: int, generator: torch.Generator | None
) -> Imagination:
    """Roll ``horizon`` prior steps from ``start`` (``h [M, H]``, ``z [M, S, D]``) following the actor.

    No gradient flows through the dynamics (discrete actions are trained with REINFORCE); the actor's logits
    keep their graph so the actor loss needs no second forward pass.
    """
    state = start.detach()
    features, actions, logits = [state.features()], [], []
    for _ in range(horizon):
        step_logits = actor(features[-1])
        action = F.one_hot(sample_actions(step_logits, generator), actor.action_dim).float()
        with torch.no_grad():
            state = world_model.rssm.imagine_step(state, action, generator)
        features.append(state.features())
        actions.append(action)
        logits.append(step_logits)
    return Imagination(torch.stack(features), torch.stack(actions), torch.stack(logits))


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
    feats = rollout.features
    critic_logits = critic(feats)
    with torch.no_grad():
        rewards = TwoHotSymlog(world_model.reward(feats)).mean
        values = TwoHotSymlog(critic_logits.detach()).mean
        continues = (world_model.cont(feats) > 0).float()
        continues = torch.cat((start_continue.unsqueeze(0), continues[1:]))
        returns = lambda_returns(rewards[1:], values[1:], continues[1:] * cfg.gamma, cfg.lmbda)
        weights = discount_weights(continues, cfg.gamma)[:-1]
        offset, scale = normalizer(returns)
        advantage = (returns - offset) / scale - (values[:-1] - offset) / scale
        slow_values = TwoHotSymlog(slow_critic(feats[:-1])).mean
    policy_loss, entropy = actor_loss(
        rollout.action_logits, rollout.actions, advantage, weights, cfg.entropy_coef
    )
    value_loss = critic_loss(critic_logits[:-1], returns, slow_values, weights)
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
