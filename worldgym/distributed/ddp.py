"""A data-parallel GRPO learner on ``torch.distributed``: every rank runs the same update on its shard of
each minibatch, and the result equals one process updating on the whole minibatch.

Every rank holds the same :class:`~worldgym.agents.grpo.GRPOTrainer` (same config, seed and weights; DDP
broadcasts rank 0's weights when it wraps the policy) and the same :class:`~worldgym.agents.grpo.TrainBatch`,
so every rank draws the same minibatch order from the trainer's RNG. Rank ``r`` scores rows
``rows.tensor_split(world_size)[r]`` of each minibatch; DDP averages the gradients in its backward pass,
then each rank clips and steps its own optimizer on identical gradients.

**Loss weighting.** DDP *averages* gradients over ranks, which equals the whole-minibatch gradient only if
each rank's loss is the whole minibatch's loss restricted to its rows. GRPO's losses are means with
batch-dependent normalisers: ``token_mean`` divides by the number of trained tokens in the minibatch,
``seq_mean`` and ``dr_grpo`` by its number of sequences, the entropy bonus by its tokens. A rank's loss
divides by *its own* count, so shards with different token counts would be mis-weighted (a short shard's
tokens would count for more). Each rank therefore all-reduces its counts first and multiplies each term by
``world_size * local_count / global_count``: the ``world_size`` cancels DDP's averaging and the count ratio
turns the local mean into the local share of the global mean. Logged metrics are combined the same way, so
they equal the single-process ones too.

**Auxiliary losses** (the dual-LoRA world model) draw their examples on the *whole* minibatch: every rank
passes all its rows and a :class:`~worldgym.agents.grpo.auxiliary.LossShard`, draws the same sample of phone
calls from the same RNG (``wm_max_calls``, replay), scores its share of them, and divides its summed loss by
the whole minibatch's count (after confidence skipping), all-reduced; the term is scaled by ``world_size``
like the others. Its metrics (loss, token accuracy, skipped calls) are sums all-reduced into the whole
minibatch's means. A rank whose share holds no call leaves the world-model adapter without a gradient, so
with an auxiliary loss DDP runs with ``find_unused_parameters``.

**In the training loop.** ``GRPOConfig(learner="ddp")`` under ``torchrun`` makes every rank's trainer build
a learner (:func:`init_process_group_from_env` joins the group): rank 0 runs the rollouts and shares the
episodes and its RNG state (:meth:`DDPLearner.share_from_rank0`), every rank prepares the same batch and runs
:meth:`DDPLearner.update`, and only rank 0 validates, logs and saves.

Gloo on CPU is tested; NCCL on CUDA goes the same way (``device_ids`` set) but is untested here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from worldgym.agents.grpo.auxiliary import LossShard
from worldgym.agents.grpo.trainer import GRPOTrainer, MinibatchLoss, TrainBatch, loss_shares

__all__ = ["DDPLearner", "GroupShard", "all_reduce_sum", "default_backend", "init_process_group_from_env",
           "shard_rows"]

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
            f"learner='ddp' needs a torch.distributed process group, and the environment lacks {missing}: launch "
            "with `torchrun --nproc-per-node N your_script.py`, or call torch.distributed.init_process_group first"
        )
    if default_backend() == "nccl" and "LOCAL_RANK" in os.environ:  # pragma: no cover - no GPU here
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


@dataclass(frozen=True)
class GroupShard(LossShard):
    """A :class:`LossShard` whose :meth:`sum` all-reduces over ``group``."""

    group: dist.ProcessGroup | None = None

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        return all_reduce_sum(values, self.group)


class _ShardLoss(torch.nn.Module):
    """The trainer's minibatch loss as a module forward, so DDP sees the forward of every backward it
    reduces (``score_tokens`` calls the decoder and LM head directly, never the model's own forward)."""

    def __init__(self, trainer: GRPOTrainer):
        super().__init__()
        self.policy = trainer.policy  # registered: the parameters DDP synchronises
        self._trainer = [trainer]  # in a list: not a submodule

    def forward(
        self,
        batch: dict[str, Any],
        advantages: torch.Tensor,
        rows: torch.Tensor,
        shard: GroupShard,
        policy_scale: float,
        token_scale: float,
    ) -> tuple[torch.Tensor, MinibatchLoss]:
        """This rank's terms: the policy's on its rows (scaled by the given shares), the auxiliary objective's
        on its share of the whole minibatch's examples; every term x ``world_size`` (DDP averages)."""
        trainer = self._trainer[0]
        local = shard_rows(rows, shard.rank, shard.world_size)
        terms = trainer.minibatch_loss(batch, advantages, local, with_auxiliary=False)
        terms.auxiliary, terms.auxiliary_metrics = trainer.auxiliary_term(rows, shard)
        scale = shard.world_size
        return terms.total(scale * policy_scale, scale * token_scale, scale), terms


class DDPLearner:
    """Data-parallel updates for a :class:`GRPOTrainer` (LoRA adapters or full fine-tuning), with or
    without an auxiliary loss.

    Call it on every rank of an initialised process group with the same batch; only the trainable tensors
    (``requires_grad``) are synchronised, so LoRA all-reduces the adapters alone. DDP wraps the policy at the
    first update (broadcasting rank 0's weights), once the trainer's auxiliary loss is known.

    Args:
        trainer: this rank's trainer, built identically on every rank.
        process_group: default: the global group.
        find_unused_parameters: passed to DDP (needed when some trainable tensor gets no gradient); always on
            when the trainer has an auxiliary loss.

    Raises:
        RuntimeError: no process group is initialised.
    """

    def __init__(
        self,
        trainer: GRPOTrainer,
        process_group: dist.ProcessGroup | None = None,
        find_unused_parameters: bool = False,
    ):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "DDPLearner needs an initialised process group: call torch.distributed.init_process_group "
                "(e.g. backend=default_backend()) on every rank first, or launch with torchrun"
            )
        self.trainer = trainer
        self.group = process_group
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)
        self.shard = GroupShard(self.rank, self.world_size, process_group)
        self.find_unused_parameters = find_unused_parameters
        self._model: DistributedDataParallel | None = None

    @property
    def model(self) -> DistributedDataParallel:
        """The DDP-wrapped loss module (built at first use)."""
        if self._model is None:
            device = torch.device(self.trainer.config.device)
            self._model = DistributedDataParallel(
                _ShardLoss(self.trainer),
                device_ids=[device] if device.type == "cuda" else None,
                process_group=self.group,
                find_unused_parameters=self.find_unused_parameters or self.trainer.auxiliary_loss is not None,
            )
        return self._model

    def share_from_rank0(self, produce: Callable[[], T], rng: np.random.Generator) -> T:
        """Rank 0 runs ``produce()`` (e.g. a step's rollouts); every rank returns its result and continues
        from rank 0's ``rng`` state after it, so the ranks draw the same minibatch orders from then on."""
        payload: list[Any] = [(produce(), rng.bit_generator.state) if self.rank == 0 else None]
        dist.broadcast_object_list(payload, src=0, group=self.group)
        result, rng.bit_generator.state = payload[0]
        return result

    def update(self, prepared: TrainBatch) -> dict[str, float]:
        """:meth:`GRPOTrainer.update` with every minibatch split over the ranks; the same batch on every rank.

        Raises:
            ValueError: a minibatch has fewer rows than there are ranks.
        """
        return self.trainer.update(prepared, minibatch_step=self._minibatch_step)

    def _minibatch_step(
        self, batch: dict[str, Any], advantages: torch.Tensor, rows: torch.Tensor
    ) -> dict[str, float]:
        local = shard_rows(rows, self.rank, self.world_size)
        tokens = float(batch["action_mask"][local].sum())  # trained tokens (padding is 0)
        counts = torch.tensor([tokens, len(local)], dtype=torch.float64)
        total_tokens, total_rows = self.shard.sum(counts).tolist()
        policy_share, token_share = loss_shares(self.trainer.config.loss_aggregation, tokens, len(local),
                                                total_tokens, total_rows)
        loss, terms = self.model(batch, advantages, rows, self.shard, policy_share, token_share)
        grad_norm = self.trainer.apply_gradients(loss)  # DDP all-reduces inside the backward, before the clip
        local_metrics = terms.metrics
        combined = self.shard.sum(torch.tensor(
            [loss.item() / self.world_size] + [token_share * local_metrics[key] for key in _TOKEN_MEAN_METRICS],
            dtype=torch.float64,
        )).tolist()
        return {
            "loss/total": combined[0],
            **dict(zip(_TOKEN_MEAN_METRICS, combined[1:])),
            "loss/grad_norm": grad_norm.item(),
            **terms.auxiliary_metrics,
        }
