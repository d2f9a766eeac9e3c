"""Where a trainer's rollouts run, behind one interface its loop calls: in the trainer's own process
(:class:`LocalRollouts`, the default) or on Ray rollout workers (:class:`worldgym.agents.llm.ray_rollouts.RayRollouts`).

A runtime takes a request for groups of episodes (:meth:`RolloutRuntime.submit`), returns them when asked
(:meth:`RolloutRuntime.gather`), and learns of new weights after every update
(:meth:`RolloutRuntime.sync_weights`). Every episode carries the version of the weights that sampled it
(``Episode.policy_version``), so the learner can measure, log and bound its policy lag.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, runtime_checkable

import torch

from worldgym.agents.llm.engines import SamplingParams
from worldgym.agents.llm.rollout import Episode, RolloutCollector

__all__ = ["LocalRollouts", "RolloutBatch", "RolloutRuntime"]


@dataclass
class RolloutBatch:
    """The episodes of one request (in seed order, groups whole) and what producing them cost.

    Attributes:
        episodes: ``len(env_seeds) * group_size`` episodes, each with its ``policy_version``.
        busy_seconds: generation time summed over the workers that ran them.
        weight_load_seconds: time the workers spent loading new weights before generating.
        worker_restarts: workers that died while running the request and were restarted (their share re-run).
    """

    episodes: list[Episode]
    busy_seconds: float
    weight_load_seconds: float = 0.0
    worker_restarts: int = 0


@runtime_checkable
class RolloutRuntime(Protocol):
    """What a trainer's loop needs from the place its rollouts run."""

    num_workers: int

    def submit(
        self, env_seeds: Sequence[int], group_size: int, params: SamplingParams, first_group_id: int = 0
    ) -> Any:
        """Start (or schedule) ``group_size`` episodes per env seed with the newest synced weights; returns a
        request for :meth:`gather`."""
        ...

    def gather(self, request: Any) -> RolloutBatch:
        """Wait for a request's episodes."""
        ...

    def sync_weights(self, version: int, weights: Mapping[str, torch.Tensor]) -> None:
        """Rollouts submitted from now on use ``weights`` (the trainable tensors by name), as ``version``."""
        ...

    def close(self) -> None:
        """Release workers (a no-op in process)."""
        ...


class LocalRollouts:
    """Rollouts in the trainer's process, with its own engine: a request runs when it is gathered, so its
    episodes always come from the newest weights (lag 0)."""

    num_workers = 1

    def __init__(self, collector: RolloutCollector):
        self.collector = collector
        self.version = 0

    def submit(
        self, env_seeds: Sequence[int], group_size: int, params: SamplingParams, first_group_id: int = 0
    ) -> Callable[[], RolloutBatch]:
        return partial(self._collect, list(env_seeds), group_size, params, first_group_id)

    def gather(self, request: Callable[[], RolloutBatch]) -> RolloutBatch:
        return request()

    def sync_weights(self, version: int, weights: Mapping[str, torch.Tensor]) -> None:
        """Record the version: the engine samples from the trained model object itself (the trainer clears its
        stored KV)."""
        self.version = version

    def close(self) -> None:
        if self.collector.vector_env is not None:
            self.collector.vector_env.close()

    def _collect(self, env_seeds: list[int], group_size: int, params: SamplingParams, first_group_id: int
                 ) -> RolloutBatch:
        start = time.perf_counter()
        episodes = self.collector.collect(env_seeds, group_size, params, first_group_id=first_group_id)
        for episode in episodes:
            episode.policy_version = self.version
        return RolloutBatch(episodes, time.perf_counter() - start)
