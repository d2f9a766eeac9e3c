"""The acting policy: a versioned copy of encoder, RSSM and actor that filters each env's observations."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from worldgym.agents.dreamer_v3.behavior import sample_actions
from worldgym.agents.dreamer_v3.learner import DreamerLearner
from worldgym.agents.dreamer_v3.model import RSSMState
from worldgym.precision import autocast


class DreamerPolicy(nn.Module):
    """Acts in ``num_envs`` envs from a weight copy of the learner, refreshed by :meth:`sync_from`.

    The copy lets an actor keep acting while the learner updates its own weights (the async engine);
    ``version`` counts refreshes so metrics can report how stale the acting weights are. The forward passes
    run in the learner's compute dtype (autocast; weights, filter state and action sampling stay float32).
    """

    def __init__(self, learner: DreamerLearner, num_envs: int) -> None:
        super().__init__()
        self.encoder = copy.deepcopy(learner.world_model.encoder).requires_grad_(False)
        self.rssm = copy.deepcopy(learner.world_model.rssm).requires_grad_(False)
        self.actor = copy.deepcopy(learner.actor).requires_grad_(False)
        self.action_dim = learner.action_dim
        self.dtype = learner.dtype
        self.num_envs = num_envs
        self.version = 0
        self.state: RSSMState | None = None
        self.prev_action = torch.zeros(num_envs, self.action_dim)

    @torch.no_grad()
    def sync_from(self, learner: DreamerLearner, version: int | None = None) -> None:
        """Copy the learner's encoder, RSSM and actor weights into this policy (device-side, no host sync)."""
        pairs = (
            (self.encoder, learner.world_model.encoder),
            (self.rssm, learner.world_model.rssm),
            (self.actor, learner.actor),
        )
        for mine, theirs in pairs:
            for target, source in zip(mine.state_dict().values(), theirs.state_dict().values(), strict=True):
                target.copy_(source, non_blocking=True)
        self.version = self.version + 1 if version is None else version

    def reset_state(self) -> None:
        """Forget every env's filter state (all envs restart from the learned initial state)."""
        self.state = None
        self.prev_action = torch.zeros_like(self.prev_action)

    def filter_state(self) -> dict[str, torch.Tensor]:
        """Every env's filter state (``h``, ``z``; absent before the first :meth:`act`) and previous action."""
        if self.state is None:
            return {"prev_action": self.prev_action}
        return {"h": self.state.h, "z": self.state.z, "prev_action": self.prev_action}

    def load_filter_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Continue filtering from a :meth:`filter_state` (the envs' episodes continue too)."""
        self.state = RSSMState(tensors["h"], tensors["z"]) if "h" in tensors else None
        self.prev_action = tensors["prev_action"]

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        is_first: torch.Tensor,
        generator: torch.Generator | None,
        greedy: bool = False,
    ) -> torch.Tensor:
        """Filter ``obs [N, ...]`` into each env's state (reset where ``is_first [N]``); return actions."""
        device = obs.device
        self.prev_action = self.prev_action.to(device)
        first = is_first.float().view(1, -1, 1)
        if self.state is None:
            first = torch.ones_like(first)
        with autocast(self.dtype, device):
            embed = self.encoder(obs).unsqueeze(0)
            out = self.rssm.observe(embed, self.prev_action.unsqueeze(0), first, self.state, generator=generator)
            self.state = out.last
            logits = self.actor(self.state.features())
        actions = logits.argmax(-1) if greedy else sample_actions(logits, generator)
        self.prev_action = F.one_hot(actions, self.action_dim).float()
        return actions
