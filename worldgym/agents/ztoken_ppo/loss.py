"""PPO losses and advantages as pure tensor functions."""

from __future__ import annotations

import torch

from worldgym.agents.ztoken_ppo.config import AdvantageMode


def episode_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mode: AdvantageMode,
    gamma: float = 1.0,
    gae_lambda: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets for one complete episode of ``T`` steps.

    ``"terminal"``: the return is the undiscounted reward-to-go (the terminal reward R for a terminal-only
    reward), ``A_t = R - V_t``. ``"gae"``: ``delta_t = r_t + gamma V_{t+1} - V_t`` with ``V_T = 0``,
    ``A_t = sum_k (gamma lambda)^k delta_{t+k}`` (Schulman et al. 2016, eq. 16), target ``A_t + V_t``.
    Truncation is an env-defined end with its own terminal reward (0, or minus the length penalty), so no
    step bootstraps.
    """
    if mode == "terminal":
        returns = torch.flip(torch.cumsum(torch.flip(rewards, [0]), 0), [0])
        return returns - values, returns
    next_values = torch.cat([values[1:], values.new_zeros(1)])
    deltas = rewards + gamma * next_values - values
    advantages = torch.zeros_like(rewards)
    running = rewards.new_zeros(())
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * gae_lambda * running
        advantages[t] = running
    return advantages, advantages + values


def clipped_policy_loss(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, clip_eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO-clip surrogate ``-E[min(r A, clip(r, 1-eps, 1+eps) A)]`` (Schulman et al. 2017, eq. 7).

    Returns the loss and the fraction of clipped ratios.
    """
    ratio = torch.exp(log_probs - old_log_probs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    clip_fraction = ((ratio - 1.0).abs() > clip_eps).float().mean()
    return -torch.min(unclipped, clipped).mean(), clip_fraction


def value_loss(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """Mean squared error ``(V_t - R)^2``."""
    return (values - returns).pow(2).mean()


def ppo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    clip_eps: float,
    value_coef: float,
    entropy_coef: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Total loss ``L_clip + c_v (V - R)^2 - c_ent H`` and its parts for logging."""
    policy_loss, clip_fraction = clipped_policy_loss(log_probs, old_log_probs, advantages, clip_eps)
    v_loss = value_loss(values, returns)
    mean_entropy = entropy.mean()
    total = policy_loss + value_coef * v_loss - entropy_coef * mean_entropy
    approx_kl = (old_log_probs - log_probs).mean()
    parts = {
        "loss/policy": policy_loss.item(),
        "loss/value": v_loss.item(),
        "loss/entropy": mean_entropy.item(),
        "loss/clip_fraction": clip_fraction.item(),
        "loss/approx_kl": approx_kl.item(),
    }
    return total, parts
