"""Gathered one-hot layers equal their dense counterparts (values and weight gradients) and keep the maths."""

import torch
import torch.nn.functional as F
from torch import nn

from worldgym.agents.dreamer_v3.behavior import imagine
from worldgym.agents.dreamer_v3.config import model_size
from worldgym.agents.dreamer_v3.distributions import unimix_logits, unimix_probs
from worldgym.agents.dreamer_v3.model import RSSM, Actor, Critic, RSSMState, WorldModel
from worldgym.agents.dreamer_v3.onehot import multi_hot, one_hot_columns, one_hot_linear, one_hot_mlp

S, D = 3, 4


def _random_columns(gen: torch.Generator, *lead: int) -> torch.Tensor:
    return one_hot_columns(torch.randint(D, (*lead, S), generator=gen), D)


def test_one_hot_columns_index_the_flat_one_hot_vector():
    classes = torch.tensor([[2, 0, 3]])
    dense = F.one_hot(classes, D).float().flatten(-2)
    assert torch.equal(multi_hot(one_hot_columns(classes, D), S * D), dense)
    assert one_hot_columns(classes, D).tolist() == [[2, 4, 11]]


def test_one_hot_linear_matches_dense_values_and_weight_grads():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    columns = _random_columns(gen, 5, 7)
    h = torch.randn(5, 7, 6, generator=gen)
    dense_in = torch.cat((multi_hot(columns, S * D), h), dim=-1)
    for bias in (False, True):
        layer = nn.Linear(S * D + 6, 8, bias=bias)
        grad_out = torch.randn(5, 7, 8, generator=gen)
        (F.linear(dense_in, layer.weight, layer.bias) * grad_out).sum().backward()
        expected = [p.grad.clone() for p in layer.parameters()]
        layer.zero_grad()
        out = one_hot_linear(layer, columns, h)
        torch.testing.assert_close(out, layer(dense_in))
        (out * grad_out).sum().backward()
        for got, want in zip((p.grad for p in layer.parameters()), expected, strict=True):
            torch.testing.assert_close(got, want)


def test_one_hot_mlp_without_dense_inputs():
    gen = torch.Generator().manual_seed(1)
    net = nn.Sequential(nn.Linear(S * D, 5, bias=False), nn.LayerNorm(5), nn.SiLU(), nn.Linear(5, 2))
    columns = _random_columns(gen, 9)
    torch.testing.assert_close(one_hot_mlp(net, columns), net(multi_hot(columns, S * D)))


def test_unimix_probs_are_the_softmax_of_unimix_logits():
    logits = torch.randn(4, S * D) * 5
    probs = unimix_probs(logits, D, 0.01)
    expected = unimix_logits(logits, D, 0.01).view(4, S, D).softmax(-1)
    torch.testing.assert_close(probs / probs.sum(-1, keepdim=True), expected)
    torch.testing.assert_close(unimix_probs(logits, D, 0.0), logits.view(4, S, D).softmax(-1))


def test_gathered_imagination_matches_the_dense_step_and_heads():
    torch.manual_seed(0)
    cfg = model_size("tiny", stochastic_size=S, discrete_size=D)
    rssm = RSSM(cfg, action_dim=3, embed_dim=5)
    gen = torch.Generator().manual_seed(2)
    h = torch.randn(6, cfg.recurrent_size, generator=gen)
    columns = _random_columns(gen, 6)
    action = torch.randint(3, (6,), generator=gen)
    z = multi_hot(columns, S * D).view(6, S, D)
    with torch.no_grad():
        one_hot_action = F.one_hot(action, 3).float()
        dense = rssm.imagine_step(RSSMState(h, z), one_hot_action, torch.Generator().manual_seed(3))
        h_next, columns_next = rssm.imagine_step_columns(h, columns, action, torch.Generator().manual_seed(3))
    torch.testing.assert_close(h_next, dense.h)
    assert torch.equal(columns_next, rssm.latent_columns(dense.z))

    features = torch.cat((z.flatten(-2), h), dim=-1)
    actor, critic = Actor(cfg, 3), Critic(cfg)
    nn.init.normal_(critic.net[-1].weight)  # the zero-initialised output layer would hide differences
    torch.testing.assert_close(actor.from_latent(columns, h), actor(features))
    torch.testing.assert_close(critic.from_latent(columns, h), critic(features))


def test_imagination_features_are_one_hot_states():
    torch.manual_seed(0)
    cfg = model_size("tiny", stochastic_size=S, discrete_size=D)
    wm = WorldModel(cfg, (4,), action_dim=3, pixels=False)
    start = wm.rssm.initial_state(5)
    rollout = imagine(wm, Actor(cfg, 3), start, 4, torch.Generator().manual_seed(0))
    assert rollout.features.shape == (5, 5, S * D + cfg.recurrent_size)
    assert rollout.columns.shape == (5, 5, S) and rollout.action_logits.requires_grad
    latents = rollout.features[..., : S * D].view(5, 5, S, D)
    assert torch.equal(latents.sum(-1), torch.ones(5, 5, S))
    torch.testing.assert_close(rollout.features[0], start.features())
