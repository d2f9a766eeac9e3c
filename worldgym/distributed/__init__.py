"""Scale-out runtimes for the GRPO trainers: rollout workers on Ray (``GRPOConfig(runtime="ray")``) and a
data-parallel learner on ``torch.distributed`` (DDP, gloo on CPU), launched by ``torchrun`` or by Ray Train
(:func:`train_ddp_on_ray`). Ray is imported only when used."""

from worldgym.distributed.ddp import DDPLearner, default_backend, init_process_group_from_env, shard_rows
from worldgym.distributed.launch import train_ddp_on_ray
from worldgym.distributed.ray_rollouts import RayRollouts, RolloutWorker, WorkerShard, WorkerSpec

__all__ = [
    "DDPLearner", "RayRollouts", "RolloutWorker", "WorkerShard", "WorkerSpec", "default_backend",
    "init_process_group_from_env", "shard_rows", "train_ddp_on_ray",
]
