"""Who runs a GRPO minibatch step: one process (:class:`SingleProcess`), or one rank of a data-parallel group
(``worldgym.distributed``'s ``DDPLearner`` and ``FSDPLearner``), behind the :class:`Learner` protocol."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol, TypeVar

import torch

__all__ = ["SINGLE_PROCESS_LEARNER", "Learner", "SingleProcess"]

T = TypeVar("T")


class Learner(Protocol):
    """What differs between one process updating on a minibatch and one rank doing its part of the same update;
    :func:`~worldgym.agents.grpo.step.step_on_minibatch` runs the rest, the same for both.

    Attributes:
        rank: this process's rank (0 alone).
        world_size: how many ranks share each minibatch (1 alone).
        collective_forwards: whether every forward is a collective (sharded weights), so that every rank must
            run as many forwards and backward passes as the others.
    """

    rank: int
    world_size: int
    collective_forwards: bool

    def split(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's share of a minibatch's ``rows``, rank ``r``'s at index ``r``."""
        ...

    def sum_counts(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` (counts and metric sums, float64 on the CPU) summed over the ranks; every rank calls it, in
        the same order."""
        ...

    def sum_gradient_parts(self, values: torch.Tensor) -> torch.Tensor:
        """Sums over the gradient this rank holds (squared norms, dot products) summed over the ranks: over
        sharded gradients an all-reduce, over whole ones (one process, DDP after its reduction) ``values``."""
        ...

    def without_gradient_sync(self) -> AbstractContextManager[None]:
        """A block whose backward passes accumulate gradients without reducing them over the ranks (where the
        wrapper can defer it; elsewhere no change)."""
        ...

    def forward(self, compute: Callable[[], T]) -> T:
        """``compute()``, run as the forward of the wrapped model, so the wrapper reduces the gradients of the
        backward pass through its result."""
        ...


class SingleProcess:
    """The :class:`Learner` of one process: the whole minibatch is its own and nothing is reduced.

    >>> learner = SingleProcess()
    >>> [rows.tolist() for rows in learner.split(torch.arange(3))], learner.forward(lambda: 7)
    ([[0, 1, 2]], 7)
    """

    rank = 0
    world_size = 1
    collective_forwards = False

    def split(self, rows: torch.Tensor) -> list[torch.Tensor]:
        return [rows]

    def sum_counts(self, values: torch.Tensor) -> torch.Tensor:
        return values

    def sum_gradient_parts(self, values: torch.Tensor) -> torch.Tensor:
        return values

    def without_gradient_sync(self) -> AbstractContextManager[None]:
        return nullcontext()

    def forward(self, compute: Callable[[], T]) -> T:
        return compute()


SINGLE_PROCESS_LEARNER = SingleProcess()
