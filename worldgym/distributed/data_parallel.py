"""What the data-parallel GRPO learners share (:class:`~worldgym.distributed.DDPLearner`,
:class:`~worldgym.distributed.FSDPLearner`): every rank runs the same update on its share of each minibatch,
and the result equals one process updating on the whole minibatch.

Every rank holds the same :class:`~worldgym.agents.grpo.GRPOTrainer` (same config, seed and weights) and the
same batch, so every rank draws the same minibatch order from the trainer's RNG. The trainer's minibatch step
(:func:`~worldgym.agents.grpo.step.step_on_minibatch`, which weights every rank's loss terms by its share of
the whole minibatch's counts) runs with the learner as its :class:`~worldgym.agents.grpo.learner.Learner`: the
learner supplies only what differs from one process. Rank ``r`` takes rows
``rows.tensor_split(world_size)[r]`` (:meth:`DataParallelLearner.split`), counts and metric sums are
all-reduced (:meth:`~DataParallelLearner.sum_counts`), every loss is computed inside the wrapped module's
forward (:meth:`~DataParallelLearner.forward`: DDP, or FSDP2's ``fully_shard`` root, averages the gradients in
the backward pass) and microbatches before a minibatch's last may skip the reduction
(:meth:`~DataParallelLearner.without_gradient_sync`). Each rank then clips and steps its optimizer.

**In the training loop.** ``GRPOConfig(learner="ddp"|"fsdp")`` under ``torchrun`` makes every rank's trainer
build a learner (:func:`init_process_group_from_env` joins the group): rank 0 runs the rollouts and shares the
episodes and its RNG state (:meth:`DataParallelLearner.share_from_rank0`), every rank prepares the same batch
and runs :meth:`DataParallelLearner.update`, and only rank 0 validates, logs and writes checkpoints.

This module imports nothing of the agents: a learner serves any trainer with the :class:`Trainer` shape.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol, TypeVar

import numpy as np
import torch
import torch.distributed as dist

__all__ = [
    "DataParallelLearner", "LossModule", "Trainer", "all_reduce_sum", "default_backend",
    "init_process_group_from_env", "shard_rows",
]

T = TypeVar("T")


def default_backend() -> str:
    """``"nccl"`` where CUDA is present, else ``"gloo"``."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def init_process_group_from_env() -> None:
    """Join the process group ``torchrun`` describes in the environment (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``) with :func:`default_backend`; nothing to do when one is initialised.

    Raises:
        RuntimeError: no group is initialised and the environment describes none.
    """
    if dist.is_initialized():
        return
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"learner='ddp' or 'fsdp' needs a torch.distributed process group, and the environment lacks "
            f"{missing}: launch with `torchrun --nproc-per-node N your_script.py`, or call "
            "torch.distributed.init_process_group first"
        )
    if default_backend() == "nccl" and "LOCAL_RANK" in os.environ:  # pragma: no cover - needs a GPU
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(default_backend())


def shard_rows(rows: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous share of a minibatch's ``rows`` (sizes differ by at most one).

    >>> shard_rows(torch.arange(5), 1, 2).tolist()
    [3, 4]
    """
    if len(rows) < world_size:
        raise ValueError(
            f"a minibatch of {len(rows)} rows cannot be split over {world_size} ranks: every rank needs one row "
            "(raise minibatch_size, or make the batch size a multiple of it)"
        )
    return rows.tensor_split(world_size)[rank]


def all_reduce_sum(values: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """``values`` summed over the group's ranks, returned on the CPU (reduced on CUDA under NCCL, which
    reduces no CPU tensor)."""
    reduced = values.to("cuda" if dist.get_backend(group) == "nccl" else "cpu")
    dist.all_reduce(reduced, group=group)
    return reduced.cpu()


class Trainer(Protocol):
    """What a data-parallel learner uses of the trainer it serves (:class:`~worldgym.agents.grpo.GRPOTrainer` and
    its subclasses)."""

    config: Any  # its ``device`` is where the policy trains
    policy: torch.nn.Module
    trainable: dict[str, torch.Tensor]
    optimizer: torch.optim.Optimizer
    auxiliary_loss: Any  # an auxiliary objective, or None

    def update(self, prepared: Any, learner: Any = None) -> dict[str, float]: ...

    def load_trainable(self, weights: dict[str, torch.Tensor], optimizer_state: dict[str, Any] | None
                       ) -> None: ...

    def rebuild_optimizer(self) -> None: ...


class LossModule(torch.nn.Module):
    """The policy under a module whose forward runs a given loss computation: the module DDP wraps, or FSDP2's
    root, so the wrapper sees the forward of every backward it reduces (``score_tokens`` calls the decoder and
    LM head directly, never the model's own forward)."""

    def __init__(self, policy: torch.nn.Module):
        super().__init__()
        self.policy = policy  # registered: the parameters the wrapper synchronises

    def forward(self, compute: Callable[[], T]) -> T:
        """``compute()``, whose losses use ``self.policy``."""
        return compute()


class DataParallelLearner:
    """The shared part of the data-parallel learners: group membership, rank 0's rollouts shared with every
    rank, and the :class:`~worldgym.agents.grpo.learner.Learner` the trainer's minibatch step runs with. A
    subclass wraps a :class:`LossModule` (:attr:`model`) and, where the weights are sharded, gathers them
    (:meth:`full_weights` for generation, :meth:`full_trainable`, :meth:`full_state` / :meth:`load_full_state`
    for checkpoints) and sums gradient parts over the ranks (:meth:`sum_gradient_parts`).

    Raises:
        RuntimeError: no process group is initialised.
    """

    collective_forwards = False  # whether every forward is a collective, so the ranks must run as many

    def __init__(self, trainer: Trainer, process_group: dist.ProcessGroup | None = None):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                f"{type(self).__name__} needs an initialised process group: call "
                "torch.distributed.init_process_group (e.g. backend=default_backend()) on every rank first, "
                "or launch with torchrun"
            )
        self.trainer = trainer
        self.group = process_group
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)

    @property
    def model(self) -> torch.nn.Module:
        """The wrapped :class:`LossModule`."""
        raise NotImplementedError

    def share_from_rank0(self, produce: Callable[[], T], rng: np.random.Generator) -> T:
        """Rank 0 runs ``produce()`` (e.g. a step's rollouts); every rank returns its result and continues
        from rank 0's ``rng`` state after it, so the ranks draw the same minibatch orders from then on."""
        payload: list[Any] = [(produce(), rng.bit_generator.state) if self.rank == 0 else None]
        dist.broadcast_object_list(payload, src=0, group=self.group)
        result, rng.bit_generator.state = payload[0]
        return result

    @contextmanager
    def full_weights(self) -> Iterator[None]:
        """A block in which rank 0 can run the policy alone (generation, validation); every rank enters it."""
        yield

    def full_trainable(self) -> Mapping[str, torch.Tensor]:
        """The whole trainable tensors by name, for rollout workers (every rank calls it)."""
        return self.trainer.trainable

    def full_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """``(trainable tensors, optimizer.state_dict())``, whole, for a checkpoint (every rank calls it)."""
        return dict(self.trainer.trainable), self.trainer.optimizer.state_dict()

    def load_full_state(self, weights: Mapping[str, torch.Tensor], optimizer_state: dict[str, Any] | None
                        ) -> None:
        """Load :meth:`full_state`'s tensors (read from a checkpoint on every rank)."""
        self.trainer.load_trainable(dict(weights), optimizer_state)

    def update(self, prepared: Any) -> dict[str, float]:
        """The trainer's ``update`` of a prepared batch (the same on every rank) with every minibatch split over
        the ranks.

        Raises:
            ValueError: a minibatch has fewer rows than there are ranks.
        """
        return self.trainer.update(prepared, learner=self)

    # ------------------------------------------------------------ the Learner protocol
    def split(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's contiguous share of a minibatch's ``rows`` (:func:`shard_rows`)."""
        return [shard_rows(rows, rank, self.world_size) for rank in range(self.world_size)]

    def sum_counts(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` summed over the ranks (:func:`all_reduce_sum`)."""
        return all_reduce_sum(values, self.group)

    def sum_gradient_parts(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` as they are: every rank holds the whole reduced gradients (a sharding learner sums)."""
        return values

    def without_gradient_sync(self) -> AbstractContextManager[None]:
        """A block whose backward passes accumulate gradients unreduced (default: they reduce in each)."""
        return nullcontext()

    def forward(self, compute: Callable[[], T]) -> T:
        """``compute()`` as the wrapped :class:`LossModule`'s forward."""
        return self.model(compute)
