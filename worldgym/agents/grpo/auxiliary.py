"""The GRPO trainer's extra-loss hook: an objective trained beside the policy loss in the same backward pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch

from worldgym.agents.llm.rollout import Episode

__all__ = ["AuxiliaryLoss"]


class AuxiliaryLoss(Protocol):
    """An objective the :class:`~worldgym.agents.grpo.GRPOTrainer` adds to every minibatch's loss.

    Per step the trainer calls :meth:`begin_step` with the step's training episodes (in batch-row order),
    then, for each minibatch, :meth:`loss` with the minibatch's rows and backpropagates
    ``policy_weight * L_policy + loss(rows)`` once; :meth:`end_step` closes the step. Validation episodes go
    through :meth:`evaluate`; :meth:`state` / :meth:`load_state` travel in the trainer's checkpoints.
    """

    @property
    def policy_weight(self) -> float:
        """The weight of the policy loss this step (0 trains the auxiliary objective alone)."""
        ...

    def begin_step(self, episodes: Sequence[Episode], step: int) -> None:
        """Prepare the step's targets from its training episodes (row ``i`` of the batch is ``episodes[i]``)."""
        ...

    def loss(self, rows: Sequence[int]) -> tuple[torch.Tensor, dict[str, float]]:
        """The weighted loss for the minibatch of these rows (a differentiable scalar) and its metrics."""
        ...

    def end_step(self) -> dict[str, float]:
        """Step-level metrics, after the last minibatch."""
        ...

    def evaluate(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Metrics of the objective on validation episodes."""
        ...

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """``(tensors, json_state)`` to checkpoint."""
        ...

    def load_state(self, tensors: dict[str, torch.Tensor], json_state: dict[str, Any]) -> None:
        """Restore :meth:`state`."""
        ...
