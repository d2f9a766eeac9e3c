"""The Dreamer v3 learner: owns the networks and optimisers and runs one gradient step on a replay batch."""

from __future__ import annotations

import contextlib
import copy

import torch
import torch.nn.functional as F
from torch import nn

from worldgym.agents.dreamer_v3.behavior import behavior_losses, imagine, update_slow_critic
from worldgym.agents.dreamer_v3.config import DreamerConfig
from worldgym.agents.dreamer_v3.loss import ReturnNormalizer, WorldModelLosses, world_model_loss
from worldgym.agents.dreamer_v3.model import Actor, Critic, ObserveOutput, RSSMState, WorldModel
from worldgym.agents.dreamer_v3.onehot import one_hot_mlp
from worldgym.agents.dreamer_v3.pixels import shades_to_float, unpack_2bit
from worldgym.precision import autocast


def prepare_sequence(batch: dict[str, torch.Tensor], action_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One-hot previous actions ``[T, B, A]`` and ``is_first [T, B, 1]`` (1 at t=0) of a replay batch."""
    actions = F.one_hot(batch["action"], action_dim).float()
    prev_action = torch.cat((torch.zeros_like(actions[:1]), actions[:-1]))
    is_first = batch["is_first"].float().unsqueeze(-1).clone()
    is_first[0] = 1.0
    return prev_action, is_first


class DreamerLearner(nn.Module):
    """World model, actor, critic (+ slow critic, return normaliser) and their Adam optimisers.

    Weights, optimiser state and gradients are float32. With ``cfg.dtype`` resolving to bfloat16, the
    networks' forward passes run under autocast (mixed precision) while distributions, losses, returns and
    advantages are computed in float32; backward passes and gradient clipping run outside autocast.

    Args:
        cfg (DreamerConfig): run config.
        obs_shape (tuple[int, ...]): stored observation shape (packed ``[C, H, W/4]`` for pixels).
        action_dim (int): number of discrete actions.
    """

    def __init__(self, cfg: DreamerConfig, obs_shape: tuple[int, ...], action_dim: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.action_dim = action_dim
        self.pixels = cfg.obs_kind == "pixels"
        self.dtype = cfg.compute_dtype
        self.world_model = WorldModel(cfg.model, obs_shape, action_dim, self.pixels)
        self.actor = Actor(cfg.model, action_dim)
        self.critic = Critic(cfg.model)
        self.slow_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.normalizer = ReturnNormalizer(
            cfg.loss.return_decay, cfg.loss.percentile_low, cfg.loss.percentile_high
        )
        o = cfg.optim
        self.optimizers = {
            "world_model": torch.optim.Adam(self.world_model.parameters(), lr=o.world_learning_rate, eps=o.eps),
            "actor": torch.optim.Adam(self.actor.parameters(), lr=o.actor_learning_rate, eps=o.eps),
            "critic": torch.optim.Adam(self.critic.parameters(), lr=o.critic_learning_rate, eps=o.eps),
        }
        self.gradient_steps = 0

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast to the run's compute dtype on the learner's device (a no-op for float32)."""
        return autocast(self.dtype, self.cfg.device)

    def observation_target(self, obs: torch.Tensor) -> torch.Tensor:
        """The decoder target: raw vectors (symlog in the loss) or unpacked pixels in [-0.5, 0.5]."""
        return shades_to_float(unpack_2bit(obs)) if self.pixels else obs.float()

    def _head(self, net: nn.Sequential, posterior: ObserveOutput) -> torch.Tensor:
        """``net(posterior.features())`` with the one-hot latents gathered (gradients reach ``z`` too)."""
        columns = self.world_model.rssm.latent_columns(posterior.z.detach())
        return one_hot_mlp(net, columns, posterior.h, one_hot=posterior.z.flatten(-2))

    def _decode(self, posterior: ObserveOutput) -> torch.Tensor:
        """Reconstruction means ``[T, B, ...]`` (the pixel decoder takes dense features)."""
        if self.pixels:
            return self.world_model.decode(posterior.features())
        return self._head(self.world_model.decoder, posterior)  # type: ignore[arg-type]

    def _step(self, name: str, loss: torch.Tensor, module: nn.Module, clip: float) -> torch.Tensor:
        optimizer = self.optimizers[name]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(module.parameters(), clip)
        optimizer.step()
        return norm.detach()

    def _world_model_losses(
        self, batch: dict[str, torch.Tensor], generator: torch.Generator
    ) -> tuple[ObserveOutput, WorldModelLosses]:
        """Filter the batch through the world model; its posterior and the (float32) world-model losses."""
        cfg, wm = self.cfg, self.world_model
        prev_action, is_first = prepare_sequence(batch, self.action_dim)
        embed = wm.encode(batch["obs"])
        posterior = wm.rssm.observe(embed, prev_action, is_first, generator=generator)
        losses = world_model_loss(
            self._decode(posterior),
            self.observation_target(batch["obs"]),
            self._head(wm.reward, posterior),
            batch["reward"].unsqueeze(-1),
            posterior.prior_logits,
            posterior.post_logits,
            self._head(wm.cont, posterior),
            batch["cont"].unsqueeze(-1).float(),
            symlog_obs=not self.pixels,
            kl_dynamic=cfg.loss.kl_dynamic,
            kl_representation=cfg.loss.kl_representation,
            kl_free_nats=cfg.loss.kl_free_nats,
        )
        return posterior, losses

    def train_step(
        self, batch: dict[str, torch.Tensor], generator: torch.Generator
    ) -> dict[str, torch.Tensor]:
        """One world-model + behavior gradient step on a time-major batch; metrics stay on device."""
        cfg = self.cfg
        tau = 1.0 if self.gradient_steps == 0 else cfg.loss.critic_tau
        update_slow_critic(self.critic, self.slow_critic, tau)
        wm = self.world_model
        with self.autocast():
            posterior, losses = self._world_model_losses(batch, generator)
        metrics = losses.as_metrics()
        metrics["grad/world_norm"] = self._step("world_model", losses.total, wm, cfg.optim.world_clip)

        start = RSSMState(posterior.h.detach().flatten(0, 1), posterior.z.detach().flatten(0, 1))
        start_continue = batch["cont"].float().reshape(-1, 1)
        with self.autocast():
            rollout = imagine(wm, self.actor, start, cfg.loss.horizon, generator)
            behavior = behavior_losses(
                wm, self.actor, self.critic, self.slow_critic, self.normalizer, rollout, start_continue, cfg.loss
            )
        metrics["grad/actor_norm"] = self._step(
            "actor", behavior["actor"], self.actor, cfg.optim.behavior_clip
        )
        metrics["grad/critic_norm"] = self._step(
            "critic", behavior["critic"], self.critic, cfg.optim.behavior_clip
        )
        metrics |= {
            f"loss/{k}" if k in ("actor", "critic") else f"behavior/{k}": v.detach()
            for k, v in behavior.items()
        }
        self.gradient_steps += 1
        return metrics
