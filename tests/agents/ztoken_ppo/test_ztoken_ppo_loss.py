"""PPO loss and advantage functions against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from worldgym.agents.ztoken_ppo.loss import clipped_policy_loss, episode_advantages, ppo_loss, value_loss


def test_terminal_advantage_is_reward_minus_value() -> None:
    rewards = torch.tensor([0.0, 0.0, 0.75])
    values = torch.tensor([0.1, 0.5, 0.9])
    advantages, returns = episode_advantages(rewards, values, "terminal")
    torch.testing.assert_close(returns, torch.full((3,), 0.75))
    torch.testing.assert_close(advantages, torch.tensor([0.65, 0.25, -0.15]))


def test_gae_with_unit_gamma_and_lambda_equals_terminal_advantage() -> None:
    rewards, values = torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.2, 0.4, 0.3])
    gae, gae_returns = episode_advantages(rewards, values, "gae", gamma=1.0, gae_lambda=1.0)
    terminal, returns = episode_advantages(rewards, values, "terminal")
    torch.testing.assert_close(gae, terminal)
    torch.testing.assert_close(gae_returns, returns)


def test_gae_with_zero_lambda_is_one_step_td() -> None:
    rewards, values = torch.tensor([0.0, 1.0]), torch.tensor([0.2, 0.6])
    advantages, _ = episode_advantages(rewards, values, "gae", gamma=0.9, gae_lambda=0.0)
    torch.testing.assert_close(advantages, torch.tensor([0.9 * 0.6 - 0.2, 1.0 - 0.6]))


def test_clipped_loss_clips_large_ratios() -> None:
    old = torch.zeros(2)
    new = torch.log(torch.tensor([2.0, 0.5]))
    advantages = torch.tensor([1.0, -1.0])
    loss, clip_fraction = clipped_policy_loss(new, old, advantages, clip_eps=0.2)
    # ratio 2 with A=1 -> min(2, 1.2) = 1.2; ratio 0.5 with A=-1 -> min(-0.5, -0.8) = -0.8
    assert loss.item() == pytest.approx(-(1.2 - 0.8) / 2)
    assert clip_fraction.item() == 1.0


def test_total_loss_combines_parts() -> None:
    logp = torch.tensor([-1.0, -2.0])
    total, parts = ppo_loss(
        logp,
        logp,
        torch.tensor([1.0, -1.0]),
        torch.tensor([0.0, 1.0]),
        torch.tensor([1.0, 1.0]),
        torch.tensor([2.0, 4.0]),
        clip_eps=0.2,
        value_coef=0.5,
        entropy_coef=0.1,
    )
    assert parts["loss/value"] == pytest.approx(value_loss(torch.tensor([0.0, 1.0]), torch.ones(2)).item())
    assert total.item() == pytest.approx(0.0 + 0.5 * 0.5 - 0.1 * 3.0)
