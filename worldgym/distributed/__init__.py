"""Scale-out for the GRPO trainers: data-parallel learners on ``torch.distributed`` (DDP, or FSDP2 with sharded
weights; gloo on CPU), launched by ``torchrun`` or by Ray Train (:func:`train_ddp_on_ray`). Ray is imported only
when used. Rollout workers on Ray (``GRPOConfig(runtime="ray")``) are part of the LLM stack:
:mod:`worldgym.agents.llm.ray_rollouts`."""

from worldgym.distributed.data_parallel import (
    DataParallelLearner,
    default_backend,
    init_process_group_from_env,
    shard_rows,
)
from worldgym.distributed.ddp import DDPLearner
from worldgym.distributed.fsdp import FSDPLearner
from worldgym.distributed.launch import train_ddp_on_ray

__all__ = ["DDPLearner", "DataParallelLearner", "FSDPLearner", "default_backend", "init_process_group_from_env",
           "shard_rows", "train_ddp_on_ray"]
