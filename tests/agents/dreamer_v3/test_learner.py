"""Learner: a gradient step updates every trained network (vector and pixel obs) and the slow critic."""

import pytest
import torch

from worldgym.agents.dreamer_v3.config import DreamerConfig, LossConfig, ReplayConfig, model_size
from worldgym.agents.dreamer_v3.learner import DreamerLearner, prepare_sequence
from worldgym.agents.dreamer_v3.pixels import pack_2bit


def batch(obs: torch.Tensor, T: int, B: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    cont = torch.ones(T, B)
    cont[2, 0] = 0
    is_first = torch.zeros(T, B)
    is_first[3, 0] = 1
    return {
        "obs": obs,
        "action": torch.randint(3, (T, B), generator=gen),
        "reward": torch.randn(T, B, generator=gen),
        "is_first": is_first,
        "cont": cont,
        "episode_id": torch.zeros(T, B, dtype=torch.int64),
    }


@pytest.mark.parametrize("obs_kind", ["vector", "pixels"])
def test_train_step_updates_every_network(obs_kind):
    torch.manual_seed(0)
    T, B = 5, 2
    cfg = DreamerConfig(
        obs_kind=obs_kind,
        model=model_size("tiny"),
        loss=LossConfig(horizon=3, kl_free_nats=0.0),
        replay=ReplayConfig(capacity=50, seq_len=T, batch_size=B, min_ready_steps=T, safety_margin=T),
    )
    if obs_kind == "pixels":
        shape = (1, 72, 20)
        obs = pack_2bit(torch.randint(0, 4, (T, B, 1, 72, 80), dtype=torch.uint8))
    else:
        shape = (4,)
        obs = torch.randn(T, B, 4)
    learner = DreamerLearner(cfg, shape, action_dim=3)
    data = batch(obs, T, B)
    gen = torch.Generator().manual_seed(0)
    learner.train_step(data, gen)  # first step: zero-initialised heads start learning
    before = {k: v.detach().clone() for k, v in learner.named_parameters()}
    metrics = learner.train_step(data, gen)
    assert all(bool(torch.isfinite(v)) for v in metrics.values())
    unchanged = [k for k, v in learner.named_parameters() if v.requires_grad and torch.equal(v, before[k])]
    assert unchanged == []
    # The slow critic tracks the critic with tau = 0.02 (it was a copy before the first step)
    slow = dict(learner.slow_critic.named_parameters())
    for name, param in learner.critic.named_parameters():
        expected = before[f"slow_critic.{name}"].lerp(before[f"critic.{name}"], 0.02)
        torch.testing.assert_close(slow[name], expected)
        assert not torch.equal(slow[name], param)


def test_prepare_sequence_shifts_actions_and_forces_first():
    data = {"action": torch.tensor([[1], [2], [0]]), "is_first": torch.zeros(3, 1)}
    prev, first = prepare_sequence(data, 3)
    assert prev.argmax(-1).squeeze(-1).tolist() == [0, 1, 2] and float(prev[0].sum()) == 0
    assert first.squeeze().tolist() == [1, 0, 0]


def test_free_bits_stop_prior_gradients_below_one_nat():
    torch.manual_seed(0)
    cfg = DreamerConfig(
        model=model_size("tiny"),
        loss=LossConfig(horizon=2),
        replay=ReplayConfig(capacity=50, seq_len=4, batch_size=2, min_ready_steps=4, safety_margin=4),
    )
    learner = DreamerLearner(cfg, (4,), action_dim=3)
    prior = [p.detach().clone() for p in learner.world_model.rssm.transition.parameters()]
    metrics = learner.train_step(batch(torch.randn(4, 2, 4), 4, 2), torch.Generator().manual_seed(0))
    assert float(metrics["loss/world_kl"]) < 1.0
    assert all(
        torch.equal(a, b)
        for a, b in zip(prior, learner.world_model.rssm.transition.parameters(), strict=True)
    )
