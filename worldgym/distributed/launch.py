"""Data-parallel learners launched by Ray instead of ``torchrun``: Ray Train's ``TorchTrainer`` starts one process
per learner and joins them in a ``torch.distributed`` group (gloo on CPU, NCCL with GPUs), and each runs a
``learner="ddp"`` or ``learner="fsdp"`` trainer. Rank 0 writes the run folder (metrics, checkpoints) as it does
under ``torchrun``.

    from functools import partial
    train_ddp_on_ray(partial(GRPOTrainer, GRPOConfig(learner="ddp", output_dir="runs/x")), num_learners=4,
                     use_gpu=True)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from worldgym.distributed.ray_support import require_ray

__all__ = ["train_ddp_on_ray"]

_DATA_PARALLEL = ("ddp", "fsdp")  # the learners whose processes train together


def train_ddp_on_ray(
    make_trainer: Callable[[], Any],
    num_learners: int,
    use_gpu: bool = False,
    cpus_per_learner: float = 1.0,
    storage_path: str | Path | None = None,
) -> Any:
    """Run ``make_trainer().train()`` in ``num_learners`` Ray Train workers joined in one process group.

    Args:
        make_trainer: builds this learner's trainer (called in each worker; it must pickle); its config needs
            ``learner="ddp"`` or ``"fsdp"``.
        num_learners: learner processes (the data-parallel world size).
        use_gpu: one GPU per learner (NCCL); else CPU learners on gloo.
        cpus_per_learner: CPUs Ray reserves per learner.
        storage_path: where Ray Train keeps its own run records (default: Ray's, ``~/ray_results``).

    Returns:
        Ray Train's ``Result`` (its ``error`` is raised instead when a learner failed).

    Raises:
        ValueError: ``num_learners`` < 1.
    """
    if num_learners < 1:
        raise ValueError(f"num_learners must be >= 1, got {num_learners}")
    require_ray()
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    scaling = ScalingConfig(num_workers=num_learners, use_gpu=use_gpu,
                            resources_per_worker={"CPU": cpus_per_learner})
    run = RunConfig(storage_path=str(storage_path) if storage_path is not None else None)
    return TorchTrainer(_LearnerLoop(make_trainer), scaling_config=scaling, run_config=run).fit()


class _LearnerLoop:
    """What each Ray Train worker runs: build the trainer (its data-parallel learner joins Ray Train's group)
    and train it to the end."""

    def __init__(self, make_trainer: Callable[[], Any]):
        self.make_trainer = make_trainer

    def __call__(self, _config: dict[str, Any] | None = None) -> None:
        trainer = self.make_trainer()
        if trainer.config.learner not in _DATA_PARALLEL:
            raise ValueError(f"train_ddp_on_ray needs trainers with learner in {_DATA_PARALLEL} (got "
                             f"learner={trainer.config.learner!r}): every learner must take part in each update")
        try:
            trainer.train()
        finally:
            trainer.close()
