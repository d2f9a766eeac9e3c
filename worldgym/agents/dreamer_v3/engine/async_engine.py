"""Two-loop async engine: an actor loop and a learner thread, on their own CUDA streams when on a GPU.

Window ``k`` of the actor (env steps + replay writes, on the actor stream) runs while the learner (sampling +
world-model + behavior updates, on the learner stream) trains on window ``k - 1``. After each window the
learner copies its weights into one of two policy slots and **then** records that slot's
``policy_ready_event``; the actor waits on it before the window that uses those weights, so it acts with
weights one window older than the serial order (:class:`CPUEngine` with ``pipeline_lag=1`` runs this exact
schedule in one thread). The learner samples only up to the commit marker the actor published with the window.
Double-buffered slots mean the learner never writes weights the actor is reading: slot ``j % 2`` is written
only after the window that used it ended.

On CPU the same code runs with threads only (ops are synchronous per thread), which is how the tests cover it.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from tqdm.auto import tqdm

from worldgym.agents.dreamer_v3.config import DreamerConfig
from worldgym.agents.dreamer_v3.engine.core import EngineCore, WindowResult
from worldgym.agents.dreamer_v3.engine.rollout import ObsTransform, default_obs_transform
from worldgym.agents.dreamer_v3.policy import DreamerPolicy


class StreamPair:
    """Actor/learner CUDA streams and events, or no-ops on CPU (where each thread's ops are synchronous)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.actor = torch.cuda.Stream(device) if self.cuda else None
        self.learner = torch.cuda.Stream(device) if self.cuda else None

    def context(self, stream: Any) -> contextlib.AbstractContextManager:
        return torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext()

    def event(self) -> Any:
        return torch.cuda.Event() if self.cuda else None

    def record(self, event: Any, stream: Any) -> None:
        if self.cuda:
            event.record(stream)

    def wait(self, stream: Any, event: Any) -> None:
        if self.cuda:
            stream.wait_event(event)


class AsyncEngine:
    """Actor loop (calling thread) + learner thread sharing one :class:`EngineCore`.

    Args:
        cfg (DreamerConfig): the run; ``replay.safety_margin`` must cover two rollout windows.
        env (gym.vector.VectorEnv | None): vector env (default: ``gym.make_vec(cfg.env_id, ...)``).
        obs_transform (ObsTransform): numpy obs -> stored tensor.
    """

    def __init__(
        self,
        cfg: DreamerConfig,
        env: gym.vector.VectorEnv | None = None,
        obs_transform: ObsTransform = default_obs_transform,
    ) -> None:
        window = cfg.schedule.rollout_window
        if cfg.replay.safety_margin < 2 * window:
            raise ValueError(
                f"replay.safety_margin={cfg.replay.safety_margin} is invalid for the async engine: must be "
                f">= 2 * schedule.rollout_window = {2 * window} (the actor writes one window past the "
                "learner's view)"
            )
        self.core = EngineCore(cfg, env, obs_transform)
        self.streams = StreamPair(self.core.device)
        self.slots: list[DreamerPolicy] = [self.core.policy, copy.deepcopy(self.core.policy)]
        self.ready_events = [self.streams.event(), self.streams.event()]
        self.released_events = [self.streams.event(), self.streams.event()]
        self._windows: queue.Queue[tuple[int, WindowResult, Any] | None] = queue.Queue()
        self._published = threading.Condition()
        self._published_window = 0
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    # ----------------------------------------------------------------------------------------------- learner
    def _learner_loop(self) -> None:
        core, streams = self.core, self.streams
        try:
            while (item := self._windows.get()) is not None:
                index, window, data_ready = item
                streams.wait(streams.learner, data_ready)
                with streams.context(streams.learner):
                    with self._lock:
                        core.learner_window(window)
                    slot = index % 2
                    streams.wait(streams.learner, self.released_events[slot])
                    self.slots[slot].sync_from(core.learner, core.counters.learner_version)
                    streams.record(self.ready_events[slot], streams.learner)
                with self._published:
                    self._published_window = index
                    self._published.notify_all()
        except BaseException as err:  # noqa: BLE001 (any failure, KeyboardInterrupt too, is re-raised in the actor loop)
            self._error = err
            with self._published:
                self._published_window = -1
                self._published.notify_all()

    def _wait_published(self, index: int) -> None:
        with self._published:
            self._published.wait_for(lambda: self._published_window >= index or self._published_window < 0)
        if self._error is not None:
            raise self._error

    # ------------------------------------------------------------------------------------------------- actor
    def _use_slot(self, version: int) -> None:
        """Act with the weights published after window ``version`` (0: the initial weights)."""
        slot = version % 2
        previous, current = self.core.policy, self.slots[slot]
        if current is not previous:
            current.state, current.prev_action = previous.state, previous.prev_action
            self.core.policy = current
        if version > 0:
            self.streams.wait(self.streams.actor, self.ready_events[slot])

    def run(self, resume_from: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
        """Train until ``cfg.num_steps``; returns the last logged record."""
        core, cfg, streams = self.core, self.core.cfg, self.streams
        if resume_from is not None:
            core.resume(resume_from)
            for slot in self.slots:
                slot.sync_from(core.learner, core.counters.learner_version)
        if streams.cuda:
            torch.cuda.synchronize(core.device)
        learner = threading.Thread(target=self._learner_loop, name="dreamer-learner", daemon=True)
        learner.start()
        counters = core.counters
        log_iters = max(1, cfg.log_every // cfg.num_envs)
        ckpt_iters = cfg.checkpoint_every // cfg.num_envs
        bar = tqdm(
            total=core.total_iters * cfg.num_envs,
            initial=counters.iter_num * cfg.num_envs,
            disable=not progress,
            unit="step",
            desc="dreamer_v3 async",
        )
        record: dict[str, Any] = {}
        index = 0  # windows of this process; window `index` acts with the weights of window `index - 2`
        started = time.perf_counter()
        try:
            while counters.iter_num < core.total_iters:
                index += 1
                version = max(0, index - 2)
                self._wait_published(version)
                first = counters.iter_num + 1
                last = min(counters.iter_num + cfg.schedule.rollout_window, core.total_iters)
                with streams.context(streams.actor):
                    self._use_slot(version)
                    window = core.actor_window(first, last)
                    self.released_events[version % 2] = self._record_new(streams.actor)
                    data_ready = self._record_new(streams.actor)
                counters.iter_num = last
                self._windows.put((index, window, data_ready))
                bar.update((last - first + 1) * cfg.num_envs)
                checkpoint_due = ckpt_iters and last // ckpt_iters > (first - 1) // ckpt_iters
                final = last == core.total_iters
                log_due = last // log_iters > (first - 1) // log_iters or final
                if checkpoint_due or final or log_due:
                    self._wait_published(index)  # drain: the learner caught up with this window
                    core._timers["wall_s"] += time.perf_counter() - started
                    started = time.perf_counter()
                    with self._lock:
                        record = core.log()
                    bar.set_postfix(ret=record["episode/return_mean"], gs=record["gradient_steps"])
                if checkpoint_due or final:
                    if streams.cuda:
                        torch.cuda.synchronize(core.device)
                    core.save()
        finally:
            self._windows.put(None)
            learner.join()
            bar.close()
        if self._error is not None:
            raise self._error
        return record

    def _record_new(self, stream: Any) -> Any:
        event = self.streams.event()
        self.streams.record(event, stream)
        return event
