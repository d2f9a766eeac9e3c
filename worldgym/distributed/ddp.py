"""``DDPLearner``: the data-parallel GRPO learner on ``DistributedDataParallel``; every rank holds whole
weights and optimizer state (see :mod:`worldgym.distributed.data_parallel` for the update and its loss
weighting).

DDP broadcasts rank 0's weights when it wraps the policy (at the first update, once the trainer's auxiliary
loss is known), all-reduces the trainable tensors' gradients (LoRA: the adapters alone) in the backward pass,
then each rank clips and steps its own optimizer on identical gradients. With ``microbatch_size`` the
microbatches before a minibatch's last run under ``no_sync``, so the gradients are all-reduced once per
optimizer step.

With an auxiliary loss (the dual-LoRA world model), a rank whose share of the phone calls is empty leaves
the world-model adapter without a gradient, so DDP then runs with ``find_unused_parameters``. With
``auxiliary_grad_ratio`` or ``auxiliary_projection`` the auxiliary loss gets a backward pass of its own, so its
gradient is all-reduced apart from the policy's; both are then whole on every rank, and every rank computes the
same norms and dot products from them.

Gloo on CPU is tested; NCCL on CUDA goes the same way (``device_ids`` set) but the test suite does not cover it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from worldgym.distributed.data_parallel import (
    DataParallelLearner,
    LossModule,
    Trainer,
    all_reduce_sum,
    default_backend,
    init_process_group_from_env,
    shard_rows,
)

__all__ = ["DDPLearner", "all_reduce_sum", "default_backend", "init_process_group_from_env", "shard_rows"]


class DDPLearner(DataParallelLearner):
    """Data-parallel updates for a :class:`~worldgym.agents.grpo.GRPOTrainer` (LoRA adapters or full
    fine-tuning), with or without an auxiliary loss.

    Call it on every rank of an initialised process group with the same batch; only the trainable tensors
    (``requires_grad``) are synchronised, so LoRA all-reduces the adapters alone.

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
        trainer: Trainer,
        process_group: dist.ProcessGroup | None = None,
        find_unused_parameters: bool = False,
    ):
        super().__init__(trainer, process_group)
        self.find_unused_parameters = find_unused_parameters
        self._model: DistributedDataParallel | None = None

    @property
    def model(self) -> DistributedDataParallel:
        """The DDP-wrapped loss module (built at first use)."""
        if self._model is None:
            device = torch.device(self.trainer.config.device)
            self._model = DistributedDataParallel(
                LossModule(self.trainer.policy),
                device_ids=[device] if device.type == "cuda" else None,
                process_group=self.group,
                find_unused_parameters=self.find_unused_parameters or self.trainer.auxiliary_loss is not None,
            )
        return self._model

    def without_gradient_sync(self) -> AbstractContextManager[None]:
        """DDP's ``no_sync``: the block's backward passes accumulate gradients locally."""
        return self.model.no_sync()
