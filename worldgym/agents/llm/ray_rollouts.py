"""Rollout workers on Ray: each worker is a Ray actor with its own copy of the policy, its own generation
engine and its own envs; the learner process trains and sends new weights.

**Weights.** After each update the learner puts the trainable tensors in Ray's object store once (adapter-only
under LoRA, since only the adapter trains; every weight under full fine-tuning) as version ``v``
(:meth:`RayRollouts.sync_weights`). Every ``collect`` call carries the version and a reference to its weights;
a worker that holds an older version loads them first. A request therefore samples with exactly the weights
that were newest when it was *submitted*: asynchronous training submits the next step's rollouts before its
update and gets lag 1, and each episode records its ``policy_version``.

**Faults.** Workers are Ray actors with ``max_restarts`` and ``max_task_retries``: when a worker process dies
mid-request, Ray restarts it (its constructor re-runs from the same policy copy) and re-runs the interrupted
``collect``, which reloads its weights version from the reference it carries. A worker's share of a request
is returned once, from whichever attempt finished, so no episode is lost or counted twice; the same seeds and
weights sample the same episodes again. A worker that keeps dying raises ``ray.exceptions.RayActorError``
after ``max_restarts``.

**Placement.** Each worker asks Ray for ``worker_resources`` (e.g. ``{"num_cpus": 1}``, or ``{"num_gpus": 1}``
to put inference on its own GPU beside the learner's); ``address`` attaches to an existing cluster
(``ray.init(address=...)``). The tests run on one CPU node; they do not cover GPU placement.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from worldgym.agents.llm.engines import GenerationEngine, SamplingParams
from worldgym.agents.llm.rollout import Episode, RolloutCollector
from worldgym.agents.llm.runtime import RolloutBatch
from worldgym.distributed.ray_support import require_ray

__all__ = ["RayRollouts", "RolloutWorker", "WorkerShard", "WorkerSpec"]


@dataclass
class WorkerSpec:
    """What a rollout worker is built from.

    Attributes:
        policy: a copy of the learner's model (moved to CUDA when Ray gave the worker a GPU).
        tokenizer: the chat tokenizer.
        make_env: builds one env (the worker keeps a pool of them).
        make_engine: builds the generation engine on ``policy``.
        rollout_limits: :class:`RolloutCollector` keyword arguments (``max_turns``, ``max_episode_tokens``,
            ``decoding``).
    """

    policy: torch.nn.Module
    tokenizer: Any
    make_env: Callable[[], gym.Env]
    make_engine: Callable[[torch.nn.Module], GenerationEngine]
    rollout_limits: Mapping[str, Any]


@dataclass
class WorkerShard:
    """One worker's share of a request: its episodes, generation and weight-loading seconds, and the process
    that produced them (a new pid after a restart)."""

    episodes: list[Episode]
    seconds: float
    weight_load_seconds: float
    pid: int


class RolloutWorker:
    """A rollout worker's state, built from a :class:`WorkerSpec` (run as a Ray actor by :class:`RayRollouts`;
    usable in process for tests)."""

    def __init__(self, spec: WorkerSpec):
        policy = spec.policy.to("cuda") if _assigned_gpus() else spec.policy  # a GPU only where Ray gave one
        self.policy = policy.eval()
        self.trainable = {name: p for name, p in policy.named_parameters() if p.requires_grad}
        self.engine = spec.make_engine(policy)
        self.collector = RolloutCollector(self.engine, spec.tokenizer, spec.make_env, **spec.rollout_limits)
        self.version = 0

    def collect(
        self,
        version: int,
        weights: list[Any],
        env_seeds: Sequence[int],
        group_size: int,
        params: SamplingParams,
        first_group_id: int,
    ) -> WorkerShard:
        """Episodes for ``env_seeds`` sampled with weights ``version`` (``weights``: ``[]`` for the weights
        the worker was built with, else ``[reference]`` to the learner's tensors, a Ray object reference or
        the dict itself), each stamped with that version."""
        load_start = time.perf_counter()
        if version != self.version:
            self.load_weights(version, _resolve(weights[0]) if weights else None)
        start = time.perf_counter()
        episodes = self.collector.collect(env_seeds, group_size, params, first_group_id=first_group_id)
        for episode in episodes:
            episode.policy_version = version
        return WorkerShard(episodes, time.perf_counter() - start, start - load_start, os.getpid())

    def load_weights(self, version: int, tensors: Mapping[str, torch.Tensor] | None) -> None:
        """Copy the learner's trainable tensors in and drop the engine's KV (computed by the old weights)."""
        if tensors is None:
            raise ValueError(f"worker at version {self.version} asked for version {version} without its weights")
        unknown = sorted(set(tensors) - set(self.trainable))
        if unknown:
            raise ValueError(f"weights hold tensors this worker's policy does not train: {unknown[:3]}")
        with torch.no_grad():
            for name, tensor in tensors.items():
                self.trainable[name].copy_(tensor)
        self.engine.sync_weights()
        self.version = version

    def pid(self) -> int:
        """The worker's process id."""
        return os.getpid()


def _assigned_gpus() -> list[Any]:
    """The GPUs Ray gave this worker (none in process, or for a CPU worker)."""
    ray = require_ray()
    return ray.get_gpu_ids() if ray.is_initialized() and torch.cuda.is_available() else []


def _resolve(reference: Any) -> Any:
    """A Ray object reference's value (anything else as it is)."""
    ray = require_ray()
    return ray.get(reference) if isinstance(reference, ray.ObjectRef) else reference


@dataclass
class _Part:
    worker: int
    future: Any


class RayRollouts:
    """A pool of :class:`RolloutWorker` Ray actors behind the trainer's rollout interface
    (:class:`~worldgym.agents.llm.runtime.RolloutRuntime`).

    A request's env seeds are split into contiguous shares, one per worker (groups stay whole on a worker);
    worker ``i`` samples with ``params.seed + i``, so one worker reproduces the in-process rollouts exactly.

    Args:
        spec: what each worker is built from; copied into Ray's object store once.
        num_workers: rollout workers.
        worker_resources: Ray resources per worker (``{"num_cpus": 1}``; ``{"num_gpus": 1}`` on a GPU node).
        max_restarts: restarts of a worker that dies (its interrupted request is re-run).
        address: an existing Ray cluster to attach to (default: the running one, or a new local one).
    """

    def __init__(
        self,
        spec: WorkerSpec,
        num_workers: int = 1,
        worker_resources: Mapping[str, float] | None = None,
        max_restarts: int = 3,
        address: str | None = None,
    ):
        ray = require_ray()
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False)
        if next(spec.policy.parameters()).device.type != "cpu":  # pragma: no cover - needs a GPU
            # unpickles on any worker; a GPU worker moves it back
            spec = replace(spec, policy=copy.deepcopy(spec.policy).to("cpu"))
        actor = ray.remote(RolloutWorker).options(
            max_restarts=max_restarts, max_task_retries=max_restarts, **dict(worker_resources or {"num_cpus": 1})
        )
        # in the object store once, kept referenced here: Ray hands every worker, and every restart, the value
        self._spec = ray.put(spec)
        self.workers = [actor.remote(self._spec) for _ in range(num_workers)]
        self.num_workers = num_workers
        self.version = 0
        self._weights: list[Any] = []  # [object reference] of the newest weights; [] = the initial copy
        self._pids = ray.get([worker.pid.remote() for worker in self.workers])

    def submit(
        self, env_seeds: Sequence[int], group_size: int, params: SamplingParams, first_group_id: int = 0
    ) -> list[_Part]:
        seeds = [int(seed) for seed in env_seeds]
        parts = []
        for index, share in enumerate(np.array_split(np.arange(len(seeds)), self.num_workers)):
            if not len(share):
                continue
            first = int(share[0])
            future = self.workers[index].collect.remote(
                self.version, self._weights, seeds[first : first + len(share)], group_size,
                replace(params, seed=params.seed + index), first_group_id + first,
            )
            parts.append(_Part(index, future))
        return parts

    def gather(self, request: list[_Part]) -> RolloutBatch:
        ray = require_ray()
        shards: list[WorkerShard] = ray.get([part.future for part in request])
        restarts = 0
        for part, shard in zip(request, shards):
            if shard.pid != self._pids[part.worker]:
                self._pids[part.worker] = shard.pid
                restarts += 1
        return RolloutBatch(
            [episode for shard in shards for episode in shard.episodes],
            busy_seconds=sum(shard.seconds for shard in shards),
            weight_load_seconds=sum(shard.weight_load_seconds for shard in shards),
            worker_restarts=restarts,
        )

    def sync_weights(self, version: int, weights: Mapping[str, torch.Tensor]) -> None:
        """Put ``weights`` in the object store once; every later request carries a reference to them."""
        ray = require_ray()
        self._weights = [ray.put({name: tensor.detach().to("cpu", copy=True) for name, tensor in weights.items()})]
        self.version = version

    def kill_worker(self, index: int) -> None:
        """Kill worker ``index``'s process (Ray restarts it): fault-injection for tests and drills."""
        require_ray().kill(self.workers[index], no_restart=False)

    def close(self) -> None:
        """Kill every worker (no restart)."""
        ray = require_ray()
        for worker in self.workers:
            ray.kill(worker)
        self.workers = []

