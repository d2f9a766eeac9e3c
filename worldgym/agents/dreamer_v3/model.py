"""Dreamer v3 networks: LayerNorm GRU, RSSM with is_first resets, MLP/CNN encoders and decoders, heads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from worldgym.agents.dreamer_v3.config import ModelConfig
from worldgym.agents.dreamer_v3.distributions import (
    categorical_mode,
    straight_through_sample,
    symlog,
    unimix_logits,
    unimix_probs,
)
from worldgym.agents.dreamer_v3.onehot import autocast_dtype, one_hot_columns, one_hot_mlp
from worldgym.agents.dreamer_v3.pixels import shades_to_float, unpack_2bit
from worldgym.agents.dreamer_v3.timemajor import flatten_time, unflatten_time
from worldgym.sampling import sample_index

Sampler = Callable[[torch.Tensor], torch.Tensor]


def mlp(in_dim: int, units: int, layers: int, eps: float, out_dim: int | None = None) -> nn.Sequential:
    """``layers`` x (Linear without bias -> LayerNorm -> SiLU), then an optional Linear output layer."""
    modules: list[nn.Module] = []
    width = in_dim
    for _ in range(layers):
        modules += [nn.Linear(width, units, bias=False), nn.LayerNorm(units, eps=eps), nn.SiLU()]
        width = units
    if out_dim is not None:
        modules.append(nn.Linear(width, out_dim))
    return nn.Sequential(*modules)


def zero_output_layer(net: nn.Sequential) -> nn.Sequential:
    """Zero the last Linear so a two-hot head starts predicting 0 (DreamerV3 reward/critic init)."""
    last = net[-1]
    if not isinstance(last, nn.Linear):
        raise TypeError("zero_output_layer needs a network ending in nn.Linear")
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)
    return net


class LayerNormGRUCell(nn.Module):
    """GRU cell with one fused Linear over ``[h, x]`` and LayerNorm on the gates.

    The fused matmul follows the ambient autocast (bfloat16 under mixed precision); the gates and the state
    ``h`` are computed in float32.
    """

    def __init__(self, input_size: int, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size + input_size, 3 * hidden_size, bias=False)
        self.layer_norm = nn.LayerNorm(3 * hidden_size, eps=eps)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """One step: ``x [B, I]``, ``h [B, H]`` -> new ``h [B, H]`` (update gate biased towards keeping h)."""
        h = h.float()
        low = autocast_dtype(x.device.type)  # build the matmul's input in its dtype: one cast, not three
        mixed = self.linear(torch.cat((h.to(low), x.to(low)), dim=-1))
        with torch.autocast(device_type=x.device.type, enabled=False):
            gates = self.layer_norm(mixed.float())
            reset, cand, update = gates.chunk(3, dim=-1)
            cand = torch.tanh(torch.sigmoid(reset) * cand)
            update = torch.sigmoid(update - 1)
            return update * cand + (1 - update) * h


@dataclass
class RSSMState:
    """Model state: deterministic ``h [..., H]`` and one-hot stochastic ``z [..., S, D]``."""

    h: torch.Tensor
    z: torch.Tensor

    def features(self) -> torch.Tensor:
        """Heads' input ``[..., S * D + H]`` (stochastic first, as in sheeprl)."""
        return torch.cat((self.z.flatten(-2), self.h), dim=-1)

    def detach(self) -> RSSMState:
        return RSSMState(self.h.detach(), self.z.detach())


@dataclass
class ObserveOutput:
    """Time-major outputs of :meth:`RSSM.observe`."""

    h: torch.Tensor
    z: torch.Tensor
    prior_logits: torch.Tensor
    post_logits: torch.Tensor
    last: RSSMState

    def features(self) -> torch.Tensor:
        return torch.cat((self.z.flatten(-2), self.h), dim=-1)


class RSSM(nn.Module):
    """Recurrent state-space model with discrete latents, unimix and a learnable initial state."""

    def __init__(self, cfg: ModelConfig, action_dim: int, embed_dim: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.action_dim = action_dim
        stoch = cfg.stochastic_size * cfg.discrete_size
        self.input_mlp = mlp(stoch + action_dim, cfg.dense_units, 1, cfg.layer_norm_eps)
        self.gru = LayerNormGRUCell(cfg.dense_units, cfg.recurrent_size, cfg.layer_norm_eps)
        self.transition = mlp(cfg.recurrent_size, cfg.dense_units, 1, cfg.layer_norm_eps, stoch)
        self.representation = mlp(
            cfg.recurrent_size + embed_dim, cfg.dense_units, 1, cfg.layer_norm_eps, stoch
        )
        self.initial_h = nn.Parameter(torch.zeros(cfg.recurrent_size))

    def _latents(self, flat_logits: torch.Tensor) -> torch.Tensor:
        """Float32 unimix logits ``[..., S, D]`` of a layer's ``[..., S * D]`` output (any dtype)."""
        mixed = unimix_logits(flat_logits.float(), self.cfg.discrete_size, self.cfg.unimix)
        return mixed.view(*mixed.shape[:-1], self.cfg.stochastic_size, self.cfg.discrete_size)

    def prior_logits(self, h: torch.Tensor) -> torch.Tensor:
        """Prior ``p(z | h)`` logits ``[..., S, D]`` after unimix."""
        return self._latents(self.transition(h))

    def posterior_logits(self, h: torch.Tensor, embed: torch.Tensor) -> torch.Tensor:
        """Posterior ``q(z | h, e)`` logits ``[..., S, D]`` after unimix."""
        return self._latents(self.representation(torch.cat((h, embed), dim=-1)))

    def initial_state(self, batch: int) -> RSSMState:
        """Learnable ``h0 = tanh(w)`` and ``z0`` = mode of the prior at ``h0``."""
        h = torch.tanh(self.initial_h).expand(batch, -1)
        return RSSMState(h, categorical_mode(self.prior_logits(h)))

    def step_h(self, state: RSSMState, action: torch.Tensor) -> torch.Tensor:
        """Deterministic transition ``h' = GRU([z, a], h)``."""
        x = self.input_mlp(torch.cat((state.z.flatten(-2), action), dim=-1))
        return self.gru(x, state.h)

    def observe(
        self,
        embed: torch.Tensor,
        prev_action: torch.Tensor,
        is_first: torch.Tensor,
        state: RSSMState | None = None,
        generator: torch.Generator | None = None,
        sampler: Sampler | None = None,
    ) -> ObserveOutput:
        """Filter a time-major sequence; resets ``h``, ``z`` and the previous action where ``is_first``.

        Args:
            embed (torch.Tensor): encoder output ``[T, B, E]``.
            prev_action (torch.Tensor): one-hot action taken *before* each step ``[T, B, A]``.
            is_first (torch.Tensor): ``[T, B, 1]``; 1 resets the state to the learned initial one.
            state (RSSMState | None): state before step 0 (the initial state if None).
            generator (torch.Generator | None): drives the posterior samples.
            sampler (Sampler | None): overrides sampling (fixtures inject recorded samples).
        """
        time, batch = embed.shape[:2]
        sample = sampler or (lambda logits: straight_through_sample(logits, generator))
        init = self.initial_state(batch)
        if state is None:
            state = init
        # On CPU, steps without any reset skip the (identity) blend; on accelerators a host sync would cost more
        resets = is_first.flatten(1).any(1).tolist() if is_first.device.type == "cpu" else [True] * time
        # representation(cat(h, e)): the embedding half of its first layer, for the whole sequence at once
        first, rest = self.representation[0], self.representation[1:]
        hidden = self.cfg.recurrent_size
        embed_part = F.linear(embed, first.weight[:, hidden:])
        h_weight = first.weight[:, :hidden].t().to(embed_part.dtype)  # cast once, not per step (autocast)
        hs, zs, posts = [], [], []
        for t in range(time):
            action = prev_action[t]
            if resets[t]:
                keep = 1.0 - is_first[t]
                action = action * keep
                state = RSSMState(
                    h=state.h * keep + init.h * is_first[t],
                    z=state.z * keep.unsqueeze(-1) + init.z * is_first[t].unsqueeze(-1),
                )
            h = self.step_h(state, action)
            post = self._latents(rest(torch.addmm(embed_part[t], h, h_weight)))
            state = RSSMState(h, sample(post))
            hs.append(h)
            zs.append(state.z)
            posts.append(post)
        h_seq = torch.stack(hs)
        # The recurrence never uses the priors: compute them for the whole sequence at once
        return ObserveOutput(h_seq, torch.stack(zs), self.prior_logits(h_seq), torch.stack(posts), state)

    def imagine_step(
        self, state: RSSMState, action: torch.Tensor, generator: torch.Generator | None
    ) -> RSSMState:
        """One prior step used in imagination: ``h' = GRU([z, a], h)``, ``z' ~ p(z | h')``."""
        h = self.step_h(state, action)
        return RSSMState(h, straight_through_sample(self.prior_logits(h), generator))

    def latent_columns(self, z: torch.Tensor) -> torch.Tensor:
        """One-hot ``z [..., S, D]`` -> the columns of its ones in the flat ``S * D`` vector, ``[..., S]``."""
        return one_hot_columns(z.argmax(dim=-1), self.cfg.discrete_size)

    def imagine_step_columns(
        self, h: torch.Tensor, columns: torch.Tensor, action: torch.Tensor, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`imagine_step` (no gradients) on latent columns ``[M, S]`` and integer actions ``[M]``.

        Same maths and the same random draws as :meth:`imagine_step`; the one-hot inputs of the first layer
        are gathered (see :mod:`worldgym.agents.dreamer_v3.onehot`). Returns ``(h', columns')``.
        """
        stoch = self.cfg.stochastic_size * self.cfg.discrete_size
        x = one_hot_mlp(self.input_mlp, torch.cat((columns, action.unsqueeze(-1) + stoch), dim=-1))
        h = self.gru(x, h)
        # sample_index normalises by the total, so the mixed probabilities need no log/softmax round trip
        probs = unimix_probs(self.transition(h).float(), self.cfg.discrete_size, self.cfg.unimix)
        classes = sample_index(probs, generator)
        return h, one_hot_columns(classes, self.cfg.discrete_size)


class MLPEncoder(nn.Module):
    """Vector observations -> symlog -> MLP embedding."""

    def __init__(self, obs_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.net = mlp(obs_dim, cfg.dense_units, cfg.mlp_layers, cfg.layer_norm_eps)
        self.out_dim = cfg.dense_units

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(symlog(obs.float()))


def _conv_shapes(height: int, width: int, stages: int) -> list[tuple[int, int]]:
    """Spatial sizes through ``stages`` stride-2, kernel-4, padding-1 convolutions."""
    shapes = [(height, width)]
    for _ in range(stages):
        height, width = (height + 2 - 4) // 2 + 1, (width + 2 - 4) // 2 + 1
        shapes.append((height, width))
    return shapes


class ChannelLayerNorm(nn.Module):
    """LayerNorm over the channel dim of ``[B, C, H, W]``."""

    def __init__(self, channels: int, eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class CNNEncoder(nn.Module):
    """Packed 2-bit frames ``[B, C, H, W/4]`` -> unpack -> 4 conv stages -> flat embedding."""

    STAGES = 4

    def __init__(self, packed_shape: tuple[int, int, int], cfg: ModelConfig) -> None:
        super().__init__()
        channels, height, packed_width = packed_shape
        self.shapes = _conv_shapes(height, packed_width * 4, self.STAGES)
        if min(self.shapes[-1]) < 1:
            raise ValueError(f"frame {height}x{packed_width * 4} is too small for {self.STAGES} conv stages")
        widths = [cfg.cnn_multiplier * 2**i for i in range(self.STAGES)]
        layers: list[nn.Module] = []
        in_ch = channels
        for out_ch in widths:
            layers += [
                nn.Conv2d(in_ch, out_ch, 4, stride=2, padding=1, bias=False),
                ChannelLayerNorm(out_ch, cfg.layer_norm_eps),
                nn.SiLU(),
            ]
            in_ch = out_ch
        self.net = nn.Sequential(*layers)
        self.channels = widths
        self.out_dim = widths[-1] * self.shapes[-1][0] * self.shapes[-1][1]

    def forward(self, packed: torch.Tensor) -> torch.Tensor:
        return self.net(shades_to_float(unpack_2bit(packed))).flatten(1)


class CNNDecoder(nn.Module):
    """Model features -> transposed convs -> frame means ``[B, C, H, W]`` in [-0.5, 0.5] units."""

    def __init__(self, encoder: CNNEncoder, out_channels: int, feature_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.shapes = encoder.shapes
        self.top = encoder.channels[-1]
        self.project = nn.Linear(feature_dim, encoder.out_dim)
        widths = list(reversed(encoder.channels))[1:] + [out_channels]
        self.ups = nn.ModuleList()
        self.norms = nn.ModuleList()
        in_ch = self.top
        for i, out_ch in enumerate(widths):
            last = i == len(widths) - 1
            self.ups.append(nn.ConvTranspose2d(in_ch, out_ch, 4, stride=2, padding=1, bias=last))
            self.norms.append(
                nn.Identity()
                if last
                else nn.Sequential(ChannelLayerNorm(out_ch, cfg.layer_norm_eps), nn.SiLU())
            )
            in_ch = out_ch

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        height, width = self.shapes[-1]
        x = self.project(features).view(-1, self.top, height, width)
        targets = list(reversed(self.shapes))[1:]
        for up, norm, size in zip(self.ups, self.norms, targets, strict=True):
            x = norm(up(x, output_size=list(size)))
        return x


class WorldModel(nn.Module):
    """Encoder + RSSM + observation decoder + reward (two-hot) and continue heads."""

    def __init__(self, cfg: ModelConfig, obs_shape: tuple[int, ...], action_dim: int, pixels: bool) -> None:
        super().__init__()
        self.pixels = pixels
        feature_dim = cfg.latent_size
        if pixels:
            if len(obs_shape) != 3:
                raise ValueError(f"pixel obs must be packed [C, H, W/4], got shape {obs_shape}")
            encoder = CNNEncoder(obs_shape, cfg)  # type: ignore[arg-type]
            self.decoder: nn.Module = CNNDecoder(encoder, obs_shape[0], feature_dim, cfg)
        else:
            if len(obs_shape) != 1:
                raise ValueError(f"vector obs must be 1-D, got shape {obs_shape}")
            encoder = MLPEncoder(obs_shape[0], cfg)
            self.decoder = mlp(feature_dim, cfg.dense_units, cfg.mlp_layers, cfg.layer_norm_eps, obs_shape[0])
        self.encoder: nn.Module = encoder
        self.rssm = RSSM(cfg, action_dim, encoder.out_dim)
        self.reward = zero_output_layer(
            mlp(feature_dim, cfg.dense_units, cfg.mlp_layers, cfg.layer_norm_eps, cfg.bins)
        )
        self.cont = mlp(feature_dim, cfg.dense_units, cfg.mlp_layers, cfg.layer_norm_eps, 1)

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """Time-major ``[T, B, ...]`` observations -> ``[T, B, E]``."""
        return unflatten_time(self.encoder(flatten_time(obs)), obs.shape[0])

    def decode(self, features: torch.Tensor) -> torch.Tensor:
        """Time-major features -> reconstruction means ``[T, B, ...]``."""
        return unflatten_time(self.decoder(flatten_time(features)), features.shape[0])


class Actor(nn.Module):
    """Discrete policy over model features with 1% unimix on the action distribution."""

    def __init__(self, cfg: ModelConfig, action_dim: int) -> None:
        super().__init__()
        self.net = mlp(cfg.latent_size, cfg.dense_units, cfg.mlp_layers, cfg.layer_norm_eps, action_dim)
        self.unimix = cfg.unimix
        self.action_dim = action_dim

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Float32 action logits ``[..., A]`` (already mixed)."""
        return unimix_logits(self.net(features).float(), self.action_dim, self.unimix)

    def from_latent(self, columns: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` on features given as latent columns ``[..., S]`` and ``h [..., H]``."""
        return unimix_logits(one_hot_mlp(self.net, columns, h).float(), self.action_dim, self.unimix)


class Critic(nn.Module):
    """Two-hot value head over model features (zero-initialised output)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.net = zero_output_layer(
            mlp(cfg.latent_size, cfg.dense_units, cfg.mlp_layers, cfg.layer_norm_eps, cfg.bins)
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)

    def from_latent(self, columns: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` on features given as latent columns ``[..., S]`` and ``h [..., H]``."""
        return one_hot_mlp(self.net, columns, h)
