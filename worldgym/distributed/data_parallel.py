"""What the data-parallel GRPO learners share (:class:`~worldgym.distributed.DDPLearner`,
:class:`~worldgym.distributed.FSDPLearner`): every rank runs the same update on its shard of each minibatch,
and the result equals one process updating on the whole minibatch.

Every rank holds the same :class:`~worldgym.agents.grpo.GRPOTrainer` (same config, seed and weights) and the
same :class:`~worldgym.agents.grpo.TrainBatch`, so every rank draws the same minibatch order from the
trainer's RNG. Rank ``r`` scores rows ``rows.tensor_split(world_size)[r]`` of each minibatch; the wrapper
(DDP, or FSDP2's ``fully_shard``) averages the gradients in the backward pass, then each rank clips and
steps its optimizer.

**Loss weighting.** DDP and FSDP2 *average* gradients over ranks, which equals the whole-minibatch gradient
only if each rank's loss is the whole minibatch's loss restricted to its rows. GRPO's losses are means with
batch-dependent normalisers: ``token_mean`` divides by the number of trained tokens in the minibatch,
``seq_mean`` and ``dr_grpo`` by its number of sequences, the entropy bonus by its tokens. A rank's loss
divides by *its own* count, so shards with different token counts would be mis-weighted (a short shard's
tokens would count for more). Each rank therefore all-reduces its counts first and multiplies each term by
``world_size * local_count / global_count``: the ``world_size`` cancels the averaging and the count ratio
turns the local mean into the local share of the global mean. Logged metrics are combined the same way, so
they equal the single-process ones too.

**Microbatches.** With ``microbatch_size`` each rank splits its share into microbatches of that many rows and
accumulates their gradients: every microbatch's terms are weighted by its share of the *whole* minibatch's
counts (the same :func:`~worldgym.agents.grpo.trainer.loss_shares` rule as the single-process path), and the
auxiliary loss joins the last microbatch (once per minibatch). The gradients are reduced once per minibatch
under DDP (``no_sync`` for all but the last microbatch); FSDP2 reduce-scatters every microbatch's (only the
sharded gradients are kept). Where every forward is a collective (FSDP2) every rank runs as many microbatches
as the largest share needs, the smaller shares padded with one-row repeats weighted 0.

**Auxiliary losses** (the dual-LoRA world model) draw their examples on the *whole* minibatch: every rank
passes all its rows and a :class:`~worldgym.agents.grpo.auxiliary.LossShard`, draws the same sample of phone
calls from the same RNG (``wm_max_calls``, replay), scores its share of them, and divides its summed loss by
the whole minibatch's count (after confidence skipping), all-reduced; the term is scaled by ``world_size``
like the others. Its metrics (loss, token accuracy, skipped calls) are sums all-reduced into the whole
minibatch's means. A rank whose share holds no call leaves the world-model adapter without a gradient.

**In the training loop.** ``GRPOConfig(learner="ddp"|"fsdp")`` under ``torchrun`` makes every rank's trainer
build a learner (:func:`init_process_group_from_env` joins the group): rank 0 runs the rollouts and shares the
episodes and its RNG state (:meth:`DataParallelLearner.share_from_rank0`), every rank prepares the same batch
and runs :meth:`DataParallelLearner.update`, and only rank 0 validates, logs and writes checkpoints.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from worldgym.agents.grpo.auxiliary import LossShard
from worldgym.agents.grpo.trainer import GRPOTrainer, MinibatchLoss, TrainBatch, loss_shares

__all__ = [
    "DataParallelLearner", "GroupShard", "Microbatch", "ShardLoss", "all_reduce_sum", "default_backend",
    "init_process_group_from_env", "microbatches", "shard_rows",
]

T = TypeVar("T")

# metrics that are means over the minibatch's trained tokens, combined across ranks by token share
_TOKEN_MEAN_METRICS = ("loss/policy", "loss/kl", "loss/entropy", "loss/clip_fraction", "loss/ratio_mean")


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


@dataclass(frozen=True)
class Microbatch:
    """The rows of one forward/backward pass; ``weighted`` is False for padding (a repeated row weighted 0)."""

    rows: torch.Tensor
    weighted: bool = True


def microbatches(rows: torch.Tensor, size: int, count: int = 0) -> list[Microbatch]:
    """``rows`` in microbatches of ``size`` (all at once when ``size`` is 0), padded to ``count`` microbatches
    with one-row repeats weighted 0.

    >>> [(m.rows.tolist(), m.weighted) for m in microbatches(torch.arange(3), 2, count=3)]
    [([0, 1], True), ([2], True), ([2], False)]
    """
    parts = [Microbatch(part) for part in (rows.split(size) if size else [rows])]
    return parts + [Microbatch(rows[-1:], weighted=False)] * (count - len(parts))


def all_reduce_sum(values: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """``values`` summed over the group's ranks, returned on the CPU (reduced on CUDA under NCCL, which
    reduces no CPU tensor)."""
    reduced = values.to("cuda" if dist.get_backend(group) == "nccl" else "cpu")
    dist.all_reduce(reduced, group=group)
    return reduced.cpu()


@dataclass(frozen=True)
class GroupShard(LossShard):
    """A :class:`LossShard` whose :meth:`sum` all-reduces over ``group``."""

    group: dist.ProcessGroup | None = None

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        return all_reduce_sum(values, self.group)


class ShardLoss(torch.nn.Module):
    """The trainer's minibatch loss as a module forward: the module DDP wraps, or FSDP2's root, so the
    wrapper sees the forward of every backward it reduces (``score_tokens`` calls the decoder and LM head
    directly, never the model's own forward)."""

    def __init__(self, trainer: GRPOTrainer):
        super().__init__()
        self.policy = trainer.policy  # registered: the parameters the wrapper synchronises
        self._trainer = [trainer]  # in a list: not a submodule

    def forward(
        self,
        batch: dict[str, Any],
        advantages: torch.Tensor,
        rows: torch.Tensor,
        micro_rows: torch.Tensor,
        shard: GroupShard,
        policy_scale: float,
        token_scale: float,
        with_auxiliary: bool = True,
    ) -> tuple[torch.Tensor, MinibatchLoss]:
        """This rank's terms for one microbatch: the policy's on ``micro_rows`` (scaled by the given shares)
        and, ``with_auxiliary``, the auxiliary objective's on this rank's share of the examples of the whole
        minibatch ``rows``; every term x ``world_size`` (the wrapper averages)."""
        trainer = self._trainer[0]
        terms = trainer.minibatch_loss(batch, advantages, micro_rows, with_auxiliary=False, minibatch_rows=rows)
        if with_auxiliary:
            terms.auxiliary, terms.auxiliary_metrics = trainer.auxiliary_term(rows, shard)
        scale = shard.world_size
        return terms.total(scale * policy_scale, scale * token_scale, scale), terms


class DataParallelLearner:
    """The shared part of the data-parallel learners: group membership, rank 0's rollouts shared with every
    rank, and minibatch steps with the loss weighting above. A subclass wraps the :class:`ShardLoss` module
    (:meth:`_wrap`) and, where the weights are sharded, gathers them (:meth:`full_weights` for generation,
    :meth:`full_trainable`, :meth:`full_state` / :meth:`load_full_state` for checkpoints).

    Raises:
        RuntimeError: no process group is initialised.
    """

    collective_forwards = False  # whether every forward is a collective, so the ranks must run as many

    def __init__(self, trainer: GRPOTrainer, process_group: dist.ProcessGroup | None = None):
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
        self.shard = GroupShard(self.rank, self.world_size, self.collective_forwards, process_group)

    @property
    def model(self) -> torch.nn.Module:
        """The wrapped :class:`ShardLoss` module."""
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

    def update(self, prepared: TrainBatch) -> dict[str, float]:
        """:meth:`GRPOTrainer.update` with every minibatch split over the ranks; the same batch on every rank.

        Raises:
            ValueError: a minibatch has fewer rows than there are ranks.
        """
        return self.trainer.update(prepared, minibatch_step=self._minibatch_step)

    def _minibatch_step(
        self, batch: dict[str, Any], advantages: torch.Tensor, rows: torch.Tensor
    ) -> dict[str, float]:
        """One optimizer step on this rank's share of the minibatch ``rows``, in microbatches; the whole
        minibatch's metrics."""
        local = shard_rows(rows, self.rank, self.world_size)
        local_counts = torch.tensor([_trained_tokens(batch, local), len(local)], dtype=torch.float64)
        counts = self.shard.sum(local_counts)  # the whole minibatch's trained tokens and rows
        parts = microbatches(local, self.trainer.config.microbatch_size, self._microbatch_count(rows))
        self.trainer.optimizer.zero_grad(set_to_none=True)
        loss_sum, means = 0.0, torch.zeros(len(_TOKEN_MEAN_METRICS), dtype=torch.float64)
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            with nullcontext() if last else self._without_gradient_sync():  # reduced in the last backward
                loss, terms, token_share = self._backward(batch, advantages, rows, part, counts, last)
            loss_sum += loss
            means += token_share * torch.tensor([terms.metrics[key] for key in _TOKEN_MEAN_METRICS],
                                                dtype=torch.float64)
        grad_norm = self.trainer.clip_and_step()
        combined = self.shard.sum(torch.cat([torch.tensor([loss_sum / self.world_size], dtype=torch.float64),
                                             means])).tolist()
        return {
            "loss/total": combined[0],
            **dict(zip(_TOKEN_MEAN_METRICS, combined[1:])),
            "loss/grad_norm": _full(grad_norm).item(),
            **terms.auxiliary_metrics,
        }

    def _backward(
        self, batch: dict[str, Any], advantages: torch.Tensor, rows: torch.Tensor, part: Microbatch,
        counts: torch.Tensor, with_auxiliary: bool,
    ) -> tuple[float, MinibatchLoss, float]:
        """Forward and backward of one microbatch, its terms weighted by its share of the whole minibatch's
        ``counts`` (trained tokens, rows); returns its loss, terms and token share."""
        total_tokens, total_rows = counts.tolist()
        tokens = _trained_tokens(batch, part.rows)
        policy_share, token_share = (
            loss_shares(self.trainer.config.loss_aggregation, tokens, len(part.rows), total_tokens, total_rows)
            if part.weighted else (0.0, 0.0)
        )
        loss, terms = self.model(batch, advantages, rows, part.rows, self.shard, policy_share, token_share,
                                 with_auxiliary)
        loss.backward()
        return loss.item(), terms, token_share

    def _microbatch_count(self, rows: torch.Tensor) -> int:
        """How many microbatches every rank runs where forwards are collectives: as many as the largest share
        (rank 0's) needs; else 0 (each rank its own)."""
        if not self.collective_forwards:
            return 0
        return len(microbatches(shard_rows(rows, 0, self.world_size), self.trainer.config.microbatch_size))

    def _without_gradient_sync(self) -> AbstractContextManager[None]:
        """A block whose backward passes accumulate gradients unreduced (default: they reduce in each)."""
        return nullcontext()


def _trained_tokens(batch: dict[str, Any], rows: torch.Tensor) -> float:
    """The trained tokens of ``rows`` (padding is 0 in the action mask)."""
    return float(batch["action_mask"][rows].sum())


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's whole value (FSDP2's gradient norm), else the tensor."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
