"""What each rank of ``test_fsdp_learner.py`` runs (spawned processes import it by name): ``learner="fsdp"``
training runs, joined the way torchrun does it, and a run resumed from an FSDP checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from ddp_worker import group_member, loop_trainer, torchrun_environment, whole_weights
from torch.distributed.tensor import DTensor

# case -> loop_trainer overrides: LoRA validated after every step (rank 0 generates alone, twice a step), and
# full fine-tuning with a KL term to the frozen reference and activation checkpointing
LOOP_CASES = {"lora": {"eval_every": 1, "eval_episodes": 2, "share_prompt_prefix": False},
              "full": {"finetune": "full", "kl_coef": 0.05, "share_prompt_prefix": False,
                       "activation_checkpointing": True}}
RESUME = {"checkpoint_every": 1, "share_prompt_prefix": False}  # AdamW runs, a checkpoint after each step


def _is_sharded(parameter: torch.Tensor) -> bool:
    """Whether this rank holds a strict part of ``parameter`` (a DTensor over the ranks)."""
    return isinstance(parameter, DTensor) and parameter.to_local().numel() < parameter.numel()


def run_rank(rank: int, port: int, out_dir: str) -> None:
    """One rank: every ``LOOP_CASES`` run and the resume check; rank 0 saves the results."""
    torchrun_environment(rank, port)
    with group_member(rank, out_dir):
        results = {}
        for case, overrides in LOOP_CASES.items():
            trainer = loop_trainer(f"{out_dir}/{case}", "fsdp", **overrides)
            assert all(_is_sharded(p) for p in trainer.trainable.values())
            results[case] = {"history": trainer.train(), "weights": whole_weights(trainer)}
        results["resume"] = _straight_and_resumed(rank, Path(out_dir))
        if rank == 0:
            torch.save(results, Path(out_dir) / "fsdp.pt")


def _straight_and_resumed(rank: int, out_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    """AdamW runs of two steps: one straight through (a checkpoint after each step), and one resumed from the
    straight run's first checkpoint; their whole weights."""
    straight = loop_trainer(str(out_dir / "straight"), "fsdp", sgd=False, **RESUME)
    straight.train()
    if rank == 0:
        shutil.copytree(out_dir / "straight" / "checkpoint-1", out_dir / "resumed" / "checkpoint-1")
    dist.barrier()
    resumed = loop_trainer(str(out_dir / "resumed"), "fsdp", sgd=False, **RESUME)
    assert resumed.resume_latest() is not None and resumed.step == 1
    resumed.train()
    return {"straight": whole_weights(straight), "resumed": whole_weights(resumed)}
