"""Losses against hand-computed values."""

import math

import pytest
import torch

from worldgym.agents.llm.losses import (
    aggregate,
    dynamic_sampling_mask,
    entropy_from_logits,
    group_advantages,
    kl_k3,
    overlong_penalty,
    policy_loss,
    token_logprobs,
)


def test_token_clip_is_asymmetric_and_per_token():
    old = torch.zeros(1, 2)
    new = torch.log(torch.tensor([[1.5, 0.5]])).requires_grad_()
    mask = torch.ones(1, 2)
    # A = +1: token 1 ratio 1.5 clipped at 1 + 0.28; token 2 ratio 0.5 kept (min picks the unclipped 0.5).
    out = policy_loss(new, old, torch.tensor([1.0]), mask, aggregation="token_mean")
    assert out.loss.item() == pytest.approx(-(1.28 + 0.5) / 2)
    assert out.clip_fraction.item() == pytest.approx(0.5)
    out.loss.backward()
    # Clipped token gets no gradient; the kept one gets d(-r)/dlogp / 2 = -0.5 * 0.5.
    assert new.grad[0].tolist() == pytest.approx([0.0, -0.25])
    # A = -1: token 1 ratio 1.5 kept (-1.5 < -1.28); token 2 ratio 0.5 clipped at 1 - 0.2 -> 0.8.
    out = policy_loss(new.detach(), old, torch.tensor([-1.0]), mask)
    assert out.loss.item() == pytest.approx((1.5 + 0.8) / 2)


def test_ratio_is_against_old_policy_and_one_on_policy():
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    out = policy_loss(logp, logp.clone(), torch.tensor([2.0]), torch.ones(1, 3))
    assert out.ratio_mean.item() == pytest.approx(1.0)
    assert out.loss.item() == pytest.approx(-2.0)
    assert out.clip_fraction.item() == 0.0


def test_aggregation_modes():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate(values, mask, "token_mean").item() == pytest.approx(10 / 4)
    assert aggregate(values, mask, "seq_mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(values, mask, "dr_grpo", max_tokens=5).item() == pytest.approx(10 / (2 * 5))
    with pytest.raises(ValueError, match="mode must be one of"):
        aggregate(values, mask, "mean")


def test_masked_tokens_do_not_count():
    logp = torch.zeros(1, 3, requires_grad=True)
    out = policy_loss(logp, torch.zeros(1, 3), torch.tensor([1.0]), torch.tensor([[0, 1, 0]]))
    out.loss.backward()
    assert logp.grad.tolist() == [[0.0, -1.0, 0.0]]


def test_group_advantages():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    std = math.sqrt(4 * 0.25 / 3)
    expected = [0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std, 0.0, 0.0]
    assert group_advantages(rewards, groups).tolist() == pytest.approx(expected, rel=1e-5)
    assert group_advantages(rewards, groups, "none").tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0, 0])
    with pytest.raises(ValueError, match="norm must be"):
        group_advantages(rewards, groups, "batch")


def test_kl_k3_values():
    logp, ref = torch.log(torch.tensor([0.5, 0.3])), torch.log(torch.tensor([0.25, 0.3]))
    assert kl_k3(logp, ref).tolist() == pytest.approx([0.5 + math.log(2) - 1, 0.0], abs=1e-6)
    out = policy_loss(
        logp[None], logp[None], torch.tensor([0.0]), torch.ones(1, 2), ref_logprobs=ref[None], kl_coef=0.1
    )
    assert out.loss.item() == pytest.approx(0.1 * (0.5 + math.log(2) - 1) / 2, abs=1e-6)


def test_true_entropy_and_logprobs():
    uniform = torch.zeros(1, 1, 4)
    assert entropy_from_logits(uniform).item() == pytest.approx(math.log(4))
    peaked = torch.tensor([[[10.0, 0.0, 0.0, 0.0]]])
    assert entropy_from_logits(peaked).item() < 0.01
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    assert token_logprobs(logits, torch.tensor([[1]])).item() == pytest.approx(math.log(0.75))
    assert token_logprobs(logits, torch.tensor([[1]]), temperature=0.5).item() == pytest.approx(math.log(0.9))


def test_dynamic_sampling_and_overlong():
    keep = dynamic_sampling_mask(
        torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0]), torch.tensor([2, 2, 5, 5, 7, 7])
    )
    assert keep.tolist() == [False, False, True, True, False, False]
    assert overlong_penalty(torch.tensor([5, 12, 16, 30]), 16, 8, penalty=2.0).tolist() == [
        0.0,
        -1.0,
        -2.0,
        -2.0,
    ]
    with pytest.raises(ValueError, match="buffer must be in"):
        overlong_penalty(torch.tensor([1]), 16, 0)
