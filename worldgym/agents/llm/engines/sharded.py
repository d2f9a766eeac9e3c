"""``ShardedEngine``: several engines (e.g. one per inference GPU) sharing the prompts of each call."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from worldgym.agents.llm.engines.base import Generation, GenerationEngine, SamplingParams

if TYPE_CHECKING:
    from worldgym.agents.llm.constrained import CopyConstraint

__all__ = ["ShardedEngine"]


class ShardedEngine:
    """Splits each call's prompts into contiguous shards, one per engine, and runs the engines in threads.

    With engines on different devices (say 4 inference GPUs beside 4 training GPUs) the shards generate in
    parallel (torch releases the GIL in kernels); on a CPU machine use a single :class:`HFEngine` instead.
    Engine ``i`` samples with ``params.seed + i``, so results are reproducible for a fixed number of engines.
    """

    def __init__(self, engines: Sequence[GenerationEngine]):
        if not engines:
            raise ValueError("ShardedEngine needs at least one engine")
        self.engines = list(engines)
        self._pool = ThreadPoolExecutor(max_workers=len(self.engines), thread_name_prefix="engine")

    def sync_weights(self) -> None:
        """Sync every engine."""
        for engine in self.engines:
            engine.sync_weights()

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        constraints: Sequence[CopyConstraint | None] | None = None,
    ) -> list[list[Generation]]:
        """Generations for every prompt, in prompt order, whichever engine produced them (each shard with
        its prompts' constraints)."""
        size = -(-len(prompts) // len(self.engines))
        shards = [(i, list(prompts[i * size : (i + 1) * size])) for i in range(len(self.engines))]
        futures = [
            self._pool.submit(
                self.engines[i].generate,
                shard,
                replace(params, seed=params.seed + i),
                None if constraints is None else list(constraints[i * size : (i + 1) * size]),
            )
            for i, shard in shards
            if shard
        ]
        results: list[list[Generation]] = []
        for (i, _), future in zip(shards, futures):
            for generations in future.result():
                for generation in generations:
                    generation.prompt_index += i * size
                results.append(generations)
        return results
