"""CPU reference engine: one thread runs actor window -> replay -> learner window, deterministically."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm.auto import tqdm

from worldgym.agents.dreamer_v3.config import DreamerConfig
from worldgym.agents.dreamer_v3.engine.core import EngineCore, WindowResult
from worldgym.agents.dreamer_v3.engine.rollout import ObsTransform, default_obs_transform


class CPUEngine:
    """Deterministic single-threaded Dreamer v3 loop; the correctness baseline for the async engine.

    Args:
        cfg (DreamerConfig): the run.
        env (gym.vector.VectorEnv | None): vector env (default: ``gym.make_vec(cfg.env_id, ...)``).
        obs_transform (ObsTransform): numpy obs -> stored tensor.
        pipeline_lag (int): 0 trains on each window right after it; 1 plays the next window first, which is
            the async engine's order (the actor acts with weights one window older).
    """

    def __init__(
        self,
        cfg: DreamerConfig,
        env: gym.vector.VectorEnv | None = None,
        obs_transform: ObsTransform = default_obs_transform,
        pipeline_lag: int = 0,
    ) -> None:
        if pipeline_lag not in (0, 1):
            raise ValueError(f"pipeline_lag={pipeline_lag} is invalid: use 0 (serial) or 1 (async order)")
        self.core = EngineCore(cfg, env, obs_transform)
        self.pipeline_lag = pipeline_lag
        self._pending: WindowResult | None = None

    def _train(self, window: WindowResult) -> None:
        self.core.learner_window(window)
        self.core.publish_policy()

    def _drain(self) -> None:
        if self._pending is not None:
            self._train(self._pending)
            self._pending = None

    def run(
        self,
        resume_from: str | Path | None = None,
        progress: bool = True,
        stop_when: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any]:
        """Train until ``cfg.num_steps`` (or until ``stop_when(record)`` holds for a logged record, which
        ends the run with a checkpoint); returns the last logged record."""
        core, cfg = self.core, self.core.cfg
        if resume_from is not None:
            core.resume(resume_from)
        counters = core.counters
        window_len = cfg.schedule.rollout_window
        log_iters = max(1, cfg.log_every // cfg.num_envs)
        ckpt_iters = cfg.checkpoint_every // cfg.num_envs
        record: dict[str, Any] = {}
        bar = tqdm(
            total=core.total_iters * cfg.num_envs,
            initial=counters.iter_num * cfg.num_envs,
            disable=not progress,
            unit="step",
            desc="dreamer_v3",
        )
        started = time.perf_counter()
        while counters.iter_num < core.total_iters:
            first = counters.iter_num + 1
            last = min(counters.iter_num + window_len, core.total_iters)
            window = core.actor_window(first, last)
            counters.iter_num = last
            if self.pipeline_lag == 0:
                self._train(window)
            else:
                self._drain()
                self._pending = window
            bar.update((last - first + 1) * cfg.num_envs)
            checkpoint_due = ckpt_iters and last // ckpt_iters > (first - 1) // ckpt_iters
            if checkpoint_due or last == core.total_iters:
                self._drain()
            core._timers["wall_s"] += time.perf_counter() - started
            started = time.perf_counter()
            stopping = False
            if last // log_iters > (first - 1) // log_iters or last == core.total_iters:
                record = core.log()
                bar.set_postfix(ret=record["episode/return_mean"], gs=record["gradient_steps"])
                stopping = stop_when is not None and last < core.total_iters and stop_when(record)
            if stopping:
                self._drain()
            if checkpoint_due or last == core.total_iters or stopping:
                core.save()
            if stopping:
                break
        bar.close()
        return record
