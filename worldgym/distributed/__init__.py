"""Scale-out runtimes for the GRPO trainers: a data-parallel learner on ``torch.distributed`` (DDP, gloo on
CPU); rollout workers on Ray come next."""

from worldgym.distributed.ddp import DDPLearner, default_backend, shard_rows

__all__ = ["DDPLearner", "default_backend", "shard_rows"]
