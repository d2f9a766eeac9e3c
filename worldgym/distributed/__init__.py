"""Scale-out runtimes for the GRPO trainers: rollout workers on Ray (``GRPOConfig(runtime="ray")``) and
data-parallel learners on ``torch.distributed`` (DDP, or FSDP2 with sharded weights; gloo on CPU), launched by
``torchrun`` or by Ray Train (:func:`train_ddp_on_ray`). Ray is imported only when used."""

from worldgym.distributed.data_parallel import (
    DataParallelLearner,
    default_backend,
    init_process_group_from_env,
    shard_rows,
)
from worldgym.distributed.ddp import DDPLearner
from worldgym.distributed.fsdp import FSDPLearner
from worldgym.distributed.launch import train_ddp_on_ray
from worldgym.distributed.ray_rollouts import RayRollouts, RolloutWorker, WorkerShard, WorkerSpec

__all__ = [
    "DDPLearner", "DataParallelLearner", "FSDPLearner", "RayRollouts", "RolloutWorker", "WorkerShard",
    "WorkerSpec", "default_backend", "init_process_group_from_env", "shard_rows", "train_ddp_on_ray",
]
