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

**In the training loop.** ``GRPOConfig(learner="ddp")`` under ``torchrun`` makes every rank's trainer build
a learner (:func:`init_process_group_from_env` joins the group): rank 0 runs the rollouts and shares the
episodes and its RNG state (:meth:`DDPLearner.share_from_rank0`), every rank prepares the same batch and runs
:meth:`DDPLearner.update`, and only rank 0 validates, logs and saves.

Gloo on CPU is tested; NCCL on CUDA goes the same way (``device_ids`` set) but is untested here. Not yet:
FSDP/FSDP2 sharding, auxiliary losses (the dual-LoRA world model: its normaliser is its own).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from worldgym.agents.grpo.trainer import GRPOTrainer, MinibatchLoss, TrainBatch, loss_shares

__all__ = ["DDPLearner", "default_backend", "init_process_group_from_env", "shard_rows"]

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


class _ShardLoss(torch.nn.Module):
    """The trainer's minibatch loss as a module forward, so DDP sees the forward of every backward it
    reduces (``score_tokens`` calls the decoder and LM head directly, never the model's own forward)."""

    def __init__(self, trainer: GRPOTrainer):
        super().__init__()
        self.policy = trainer.policy  # registered: the parameters DDP synchronises
        self._minibatch_loss = trainer.minibatch_loss

    def forward(
        self,
        batch: dict[str, Any],
        advantages: torch.Tensor,
        rows: torch.Tensor,
        policy_scale: float,
        token_scale: float,
    ) -> tuple[torch.Tensor, MinibatchLoss]:
        terms = self._minibatch_loss(batch, advantages, rows)
        return terms.total(policy_scale, token_scale), terms


class DDPLearner:
    """Data-parallel updates for a :class:`GRPOTrainer` (LoRA adapters or full fine-tuning).

    Call it on every rank of an initialised process group with the same batch; only the trainable tensors
    (``requires_grad``) are synchronised, so LoRA all-reduces the adapters alone.

    Args:
        trainer: this rank's trainer, built identically on every rank.
        process_group: default: the global group.
        find_unused_parameters: passed to DDP (needed when some trainable tensor gets no gradient).

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
        device = torch.device(trainer.config.device)
        device_ids = [device] if device.type == "cuda" else None
        self.model = DistributedDataParallel(
            _ShardLoss(trainer),
            device_ids=device_ids,
            process_group=process_group,
            find_unused_parameters=find_unused_parameters,
        )

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
            ValueError: the trainer has an auxiliary loss (not data-parallel yet), or a minibatch has fewer
                rows than there are ranks.
        """
        if self.trainer.auxiliary_loss is not None:
            raise ValueError(
                "DDPLearner does not support auxiliary losses yet (their normaliser is their own, so the "
                "shard weighting of the policy loss does not apply to them): train them in one process"
            )
        return self.trainer.update(prepared, minibatch_step=self._minibatch_step)

    def _minibatch_step(
        self, batch: dict[str, Any], advantages: torch.Tensor, rows: torch.Tensor
    ) -> dict[str, float]:
        local = shard_rows(rows, self.rank, self.world_size)
        tokens = batch["action_mask"][local].sum()  # trained tokens (padding is 0)
        counts = torch.tensor([float(tokens), float(len(local))], dtype=torch.float64)
        dist.all_reduce(counts, group=self.group)
        policy_share, token_share = loss_shares(self.trainer.config.loss_aggregation, float(tokens), len(local),
                                                float(counts[0]), float(counts[1]))
        # x world_size: DDP divides the summed gradients by it
        loss, terms = self.model(
            batch, advantages, local, self.world_size * policy_share, self.world_size * token_share
        )
        grad_norm = self.trainer.apply_gradients(loss)  # DDP all-reduces inside the backward, before the clip
        local_metrics = terms.metrics
        combined = torch.tensor(
            [loss.item() / self.world_size] + [token_share * local_metrics[key] for key in _TOKEN_MEAN_METRICS],
            dtype=torch.float64,
        )
        dist.all_reduce(combined, group=self.group)
        return {
            "loss/total": float(combined[0]),
            **{key: float(value) for key, value in zip(_TOKEN_MEAN_METRICS, combined[1:].tolist())},
            "loss/grad_norm": grad_norm.item(),
        }
