"""The GRPO trainer's extra-loss hook: an objective trained beside the policy loss in the same backward pass."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.distributed.tensor import DTensor

from worldgym.agents.llm.rollout import Episode

__all__ = ["SINGLE_PROCESS", "AuxiliaryLoss", "LossShard", "combine_auxiliary_gradient", "take_gradients"]


@dataclass(frozen=True)
class LossShard:
    """This process's part of an auxiliary loss under a data-parallel learner (rank ``rank`` of
    ``world_size``).

    The objective draws its examples on the whole minibatch (the same draws on every rank), scores the ones
    :meth:`take` gives this rank, and combines counts and sums over the ranks with :meth:`sum` (``reduce``, the
    learner's all-reduce). One process is ``LossShard()``: every example is its own and :meth:`sum` returns its
    argument. With ``equal_shares`` (where every rank must run the objective's forward and backward: sharded
    weights, or a gradient of its own under DDP) each rank scores as many examples as the others: it pads its
    share with :meth:`padding` repeats, weighted 0.
    """

    rank: int = 0
    world_size: int = 1
    equal_shares: bool = False
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = field(default=None, compare=False, repr=False)

    def take(self, sizes: Sequence[int]) -> list[int]:
        """This rank's examples, by index: the examples sorted by size, dealt out in turn, so the ranks'
        shares hold similar numbers of tokens (a rank may get none).

        >>> LossShard(1, 2).take([5, 1, 9, 3])
        [0, 1]
        """
        order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
        return order[self.rank :: self.world_size]

    def padding(self, own: int, total: int) -> int:
        """How many repeats (weighted 0) this rank scores after its ``own`` of ``total`` examples.

        >>> LossShard(1, 2, equal_shares=True).padding(own=1, total=3)
        1
        """
        return -(-total // self.world_size) - own if self.equal_shares else 0

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` summed over the ranks (every rank calls it, in the same order)."""
        return values if self.reduce is None else self.reduce(values)


SINGLE_PROCESS = LossShard()


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

    def loss(self, rows: Sequence[int], shard: LossShard = SINGLE_PROCESS
             ) -> tuple[torch.Tensor, dict[str, float]]:
        """The weighted loss for the minibatch of these rows (a differentiable scalar) and its metrics.

        Under a data-parallel learner every rank passes the whole minibatch's ``rows`` and its ``shard``, and
        gets its part of the loss (the parts sum to the whole minibatch's loss) and the whole minibatch's
        metrics (the same on every rank).
        """
        ...

    def end_step(self) -> dict[str, float]:
        """Step-level metrics, after the last minibatch."""
        ...

    def evaluate(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Metrics of the objective on validation episodes."""
        ...

    def state(self, path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, str]]:
        """``(tensors, json_state, run_files)`` for the checkpoint being saved at ``path``. ``run_files`` are
        the files beside it that this and other checkpoints share, written (durably) by this call: path relative
        to ``path.parent`` -> SHA-256. Put them in the segment store (:data:`worldgym.segment_store.SEGMENT_FILES`):
        the trainer's pruning deletes those no checkpoint lists any more."""
        ...

    def load_state(self, tensors: dict[str, torch.Tensor], json_state: dict[str, Any], path: Path) -> None:
        """Restore :meth:`state` from the checkpoint at ``path`` (its run files already checked)."""
        ...


def take_gradients(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
    """The tensors' gradients so far, by name, leaving every ``.grad`` empty for the next backward."""
    taken = {name: param.grad for name, param in params.items()}
    for param in params.values():
        param.grad = None
    return taken


def combine_auxiliary_gradient(params: dict[str, torch.Tensor], policy_grads: dict[str, torch.Tensor | None],
                               ratio: float | None, project: bool = False,
                               sum_parts: Callable[[torch.Tensor], torch.Tensor] | None = None) -> dict[str, float]:
    """Combine the policy's gradient (``policy_grads``, from :func:`take_gradients`) with the auxiliary loss's,
    now in each ``param.grad``, as ``grad = g_policy + c * g_aux``, both measured on the tensors both gradients
    reach (an objective on tensors of its own is left as it is):

    - ``project``: first drop the part of ``g_aux`` that points against ``g_policy`` (PCGrad, Yu et al. 2020:
      where ``g_aux . g_policy < 0``, ``g_aux -= (g_aux . g_policy / |g_policy|^2) g_policy`` on those tensors);
    - ``ratio``: then ``c = min(1, ratio * |g_policy| / |g_aux|)``, a cap on the auxiliary norm (None: c = 1).

    Returns ``aux/grad_scale`` (c) and, where neither norm is 0, ``aux/grad_norm_ratio`` (|g_aux| / |g_policy|)
    and ``aux/grad_cosine`` (between the two), both before projection and cap.

    Where the gradients are sharded over ranks (FSDP's DTensors), each rank sums the squares and products of the
    part it holds and ``sum_parts`` sums those over the ranks (an all-reduce every rank calls; None: the
    gradients are whole, as in one process or under DDP).

    >>> a, b = torch.zeros(2, requires_grad=True), torch.zeros(1, requires_grad=True)
    >>> a.grad, b.grad = torch.tensor([3.0, 4.0]), None       # the policy reaches a only
    >>> policy = take_gradients({"a": a, "b": b})
    >>> a.grad, b.grad = torch.tensor([0.0, 50.0]), torch.tensor([7.0])   # the auxiliary loss reaches both
    >>> combine_auxiliary_gradient({"a": a, "b": b}, policy, ratio=1.0)
    {'aux/grad_scale': 0.1, 'aux/grad_norm_ratio': 10.0, 'aux/grad_cosine': 0.8}
    >>> a.grad.tolist(), round(b.item() + b.grad.item(), 4)   # b: the auxiliary part alone, scaled
    ([3.0, 9.0], 0.7)
    >>> a.grad, b.grad = torch.tensor([-6.0, 0.0]), None      # against the policy: projected out
    >>> combine_auxiliary_gradient({"a": a, "b": b}, policy, ratio=None, project=True)["aux/grad_cosine"]
    -0.6
    >>> [round(g, 4) for g in a.grad.tolist()]                 # g_aux became (-3.84, 2.88), orthogonal to (3, 4)
    [-0.84, 6.88]
    """
    shared = [name for name, param in params.items() if param.grad is not None and policy_grads[name] is not None]
    policy_sq, auxiliary_sq, dot = _summed(sum_parts, [(policy_grads[name], policy_grads[name]) for name in shared],
                                           [(params[name].grad, params[name].grad) for name in shared],
                                           [(params[name].grad, policy_grads[name]) for name in shared])
    policy_norm, auxiliary_norm = math.sqrt(policy_sq), math.sqrt(auxiliary_sq)
    metrics: dict[str, float] = {}
    if shared and policy_norm > 0 and auxiliary_norm > 0:
        metrics = {"aux/grad_norm_ratio": auxiliary_norm / policy_norm,
                   "aux/grad_cosine": dot / (auxiliary_norm * policy_norm)}
        if project and dot < 0:
            for name in shared:
                params[name].grad.sub_(policy_grads[name], alpha=dot / policy_norm**2)
            (auxiliary_sq,) = _summed(sum_parts, [(params[name].grad, params[name].grad) for name in shared])
            auxiliary_norm = math.sqrt(auxiliary_sq)
    capped = ratio is not None and shared and auxiliary_norm > 0
    scale = min(1.0, ratio * policy_norm / auxiliary_norm) if capped else 1.0
    for name, param in params.items():
        policy = policy_grads[name]
        if param.grad is None:
            param.grad = policy
            continue
        param.grad.mul_(scale)
        if policy is not None:
            param.grad.add_(policy)
    return {"aux/grad_scale": scale, **metrics}


def _summed(sum_parts: Callable[[torch.Tensor], torch.Tensor] | None,
            *products: list[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
    """For each list of gradient pairs, the sum of their elementwise products over this rank's parts, summed over
    the ranks by ``sum_parts`` (one call for all the lists)."""
    local = [sum(float((_local(a) * _local(b)).sum()) for a, b in pairs) for pairs in products]
    if sum_parts is None:
        return local
    return sum_parts(torch.tensor(local, dtype=torch.float64)).tolist()


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The part of ``tensor`` this rank holds (a sharded DTensor's local shard), else the tensor."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor
