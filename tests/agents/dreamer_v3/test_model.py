"""Networks: LayerNorm GRU, RSSM resets and sampling, pixel encoder/decoder on packed synthetic frames."""

import torch
import torch.nn.functional as F

from worldgym.agents.dreamer_v3.config import model_size
from worldgym.agents.dreamer_v3.distributions import (
    categorical_entropy,
    straight_through_sample,
    unimix_logits,
)
from worldgym.agents.dreamer_v3.model import RSSM, CNNDecoder, CNNEncoder, WorldModel
from worldgym.agents.dreamer_v3.pixels import pack_2bit

CFG = model_size("tiny")


def test_is_first_reset_equals_a_fresh_start():
    torch.manual_seed(0)
    rssm = RSSM(CFG, action_dim=3, embed_dim=5)
    gen = torch.Generator().manual_seed(0)
    T, B = 6, 2
    embed = torch.randn(T, B, 5, generator=gen)
    actions = F.one_hot(torch.randint(3, (T, B), generator=gen), 3).float()
    is_first = torch.zeros(T, B, 1)
    is_first[0] = 1
    is_first[3, 1] = 1
    with torch.no_grad():
        full = rssm.observe(
            embed,
            actions,
            is_first,
            sampler=lambda logits: F.one_hot(logits.argmax(-1), CFG.discrete_size).float(),
        )
        tail_first = is_first[3:].clone()
        tail_first[0] = 1
        fresh = rssm.observe(
            embed[3:],
            actions[3:],
            tail_first,
            sampler=lambda logits: F.one_hot(logits.argmax(-1), CFG.discrete_size).float(),
        )
    torch.testing.assert_close(full.h[3:, 1], fresh.h[:, 1])
    assert not torch.allclose(full.h[3:, 0], fresh.h[:, 0])


def test_observe_is_deterministic_given_a_generator():
    torch.manual_seed(0)
    rssm = RSSM(CFG, action_dim=2, embed_dim=4)
    args = (torch.randn(5, 3, 4), torch.zeros(5, 3, 2), torch.ones(5, 3, 1))
    with torch.no_grad():
        a = rssm.observe(*args, generator=torch.Generator().manual_seed(9))
        b = rssm.observe(*args, generator=torch.Generator().manual_seed(9))
        c = rssm.observe(*args, generator=torch.Generator().manual_seed(10))
    assert torch.equal(a.z, b.z) and not torch.equal(a.z, c.z)
    torch.testing.assert_close(a.z.sum(-1), torch.ones(5, 3, CFG.stochastic_size))


def test_unimix_and_straight_through():
    logits = torch.tensor([[50.0, 0.0, 0.0, 0.0]], requires_grad=True)
    mixed = unimix_logits(logits, 4, 0.01)
    probs = mixed.detach().softmax(-1)
    assert float(probs.min()) >= 0.01 / 4 - 1e-6
    sample = straight_through_sample(mixed, torch.Generator().manual_seed(0))
    assert torch.equal(sample.detach().sum(-1), torch.ones(1))
    (sample * torch.arange(4.0)).sum().backward()
    assert logits.grad is not None and float(logits.grad.abs().sum()) > 0
    assert float(categorical_entropy(torch.zeros(4))) == torch.log(torch.tensor(4.0)).item()


def test_cnn_encoder_decoder_on_packed_game_boy_frames():
    frames = torch.randint(
        0, 4, (2, 1, 72, 80), generator=torch.Generator().manual_seed(0), dtype=torch.uint8
    )
    encoder = CNNEncoder((1, 72, 20), CFG)
    embed = encoder(pack_2bit(frames))
    assert embed.shape == (2, encoder.out_dim) and encoder.shapes[-1] == (4, 5)
    decoder = CNNDecoder(encoder, 1, CFG.latent_size, CFG)
    assert decoder(torch.randn(3, CFG.latent_size)).shape == (3, 1, 72, 80)


def test_world_model_shapes_and_gradients_for_pixels():
    torch.manual_seed(0)
    wm = WorldModel(CFG, (1, 72, 20), action_dim=4, pixels=True)
    obs = pack_2bit(torch.randint(0, 4, (3, 2, 1, 72, 80), dtype=torch.uint8))
    embed = wm.encode(obs)
    out = wm.rssm.observe(embed, torch.zeros(3, 2, 4), torch.ones(3, 2, 1), generator=torch.Generator())
    recon = wm.decode(out.features())
    assert recon.shape == (3, 2, 1, 72, 80)
    recon.square().mean().backward()
    assert wm.encoder.net[0].weight.grad is not None
    assert wm.rssm.initial_h.grad is not None
