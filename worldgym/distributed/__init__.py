"""Scale-out runtimes for the GRPO trainers: rollout workers on Ray (``GRPOConfig(runtime="ray")``) and a
data-parallel learner on ``torch.distributed`` (DDP, gloo on CPU). Ray is imported only when used."""

from worldgym.distributed.ddp import DDPLearner, default_backend, init_process_group_from_env, shard_rows
from worldgym.distributed.ray_rollouts import RayRollouts, RolloutWorker, WorkerShard, WorkerSpec

__all__ = [
    "DDPLearner", "RayRollouts", "RolloutWorker", "WorkerShard", "WorkerSpec", "default_backend",
    "init_process_group_from_env", "shard_rows",
]
