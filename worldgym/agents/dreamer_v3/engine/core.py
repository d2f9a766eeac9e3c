"""What every engine shares: building the run, the actor window, the learner window, logging and checkpoints.

An engine alternates *windows* of ``rollout_window`` iterations. The actor plays a window (the schedule plans
each iteration: random or policy actions, gradient steps owed) and publishes ``committed_t``; the learner then
does the owed gradient steps on the replay as of that commit marker and publishes new policy weights. With
``pipeline_lag = 1`` the actor plays window ``k + 1`` before the learner trains on window ``k`` (the order
the async engine runs them in concurrently), so the CPU engine reproduces the async engine's schedule exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from worldgym.agents.dreamer_v3.checkpoint import load_checkpoint, save_checkpoint
from worldgym.agents.dreamer_v3.config import DreamerConfig
from worldgym.agents.dreamer_v3.engine.rollout import (
    EnvRunner,
    ObsTransform,
    default_obs_transform,
    state_saving_env,
)
from worldgym.agents.dreamer_v3.learner import DreamerLearner
from worldgym.agents.dreamer_v3.metrics import check_batch, check_metrics, to_float
from worldgym.agents.dreamer_v3.policy import DreamerPolicy
from worldgym.agents.dreamer_v3.replay import ReplayRing, dreamer_schema
from worldgym.agents.dreamer_v3.scheduler import TrainSchedule
from worldgym.errors import CheckpointError
from worldgym.jsonl import append_jsonl, truncate_jsonl
from worldgym.precision import dtype_name
from worldgym.retention import CheckpointKeeper, prune_run_files
from worldgym.segment_store import SEGMENT_FILES, SegmentStore
from worldgym.tracking import Tracker, make_tracker


@dataclass
class WindowResult:
    """What one actor window produced: owed gradient steps and the commit marker it published."""

    first_iter: int
    last_iter: int
    gradient_steps: int
    committed_t: int
    actor_s: float


@dataclass
class Counters:
    """Run progress, saved in checkpoints."""

    iter_num: int = 0
    owed_steps: int = 0
    learner_version: int = 0
    episodes: int = 0
    recent_returns: list[float] = field(default_factory=list)
    recent_lengths: list[int] = field(default_factory=list)


def stored_obs_layout(
    env: gym.vector.VectorEnv, obs_transform: ObsTransform
) -> tuple[tuple[int, ...], torch.dtype]:
    """Shape (per env) and dtype of the observations as stored, found by transforming a zero batch."""
    space = env.single_observation_space
    probe = obs_transform(np.zeros((env.num_envs, *(space.shape or ())), dtype=space.dtype))
    return tuple(probe.shape[1:]), probe.dtype


def make_env(cfg: DreamerConfig) -> gym.vector.VectorEnv:
    """The default vector env of a config (Gymnasium's sync vector env, NEXT_STEP autoreset)."""
    return gym.make_vec(cfg.env_id, num_envs=cfg.num_envs, vectorization_mode="sync")


class EngineCore:
    """Builds env runner, replay, learner, policy, schedule and generators from one config.

    Args:
        cfg (DreamerConfig): the run.
        env (gym.vector.VectorEnv | None): a vector env with ``cfg.num_envs`` envs (default: ``make_env``).
        obs_transform (ObsTransform): numpy obs batch -> stored tensor (e.g. 2-bit packing for pixels).
    """

    def __init__(
        self,
        cfg: DreamerConfig,
        env: gym.vector.VectorEnv | None = None,
        obs_transform: ObsTransform = default_obs_transform,
    ) -> None:
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        env = env if env is not None else make_env(cfg)
        if env.num_envs != cfg.num_envs:
            raise ValueError(f"env has {env.num_envs} envs but num_envs={cfg.num_envs}; make them equal")
        self.runner = EnvRunner(env, obs_transform)
        self.state_saving_env = state_saving_env(env)  # checkpoints hold its state: episodes survive a resume
        obs_shape, obs_dtype = stored_obs_layout(env, obs_transform)
        if cfg.obs_kind == "pixels" and obs_dtype != torch.uint8:
            raise ValueError(
                f"obs_kind='pixels' needs packed uint8 observations, the stored obs are {obs_dtype}: pass "
                "obs_transform=pack_frames (or an env that packs)"
            )
        if cfg.obs_kind == "vector" and len(obs_shape) != 1:
            raise ValueError(
                f"obs_kind='vector' needs 1-D observations, the stored obs have shape {obs_shape}"
            )
        r = cfg.replay
        self.replay = ReplayRing(
            dreamer_schema(obs_shape, obs_dtype), r.capacity, cfg.num_envs, r.safety_margin, self.device
        )
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's global RNG
            torch.manual_seed(cfg.seed)
            self.learner = DreamerLearner(cfg, obs_shape, self.runner.action_dim).to(self.device)
        self.obs_shape = tuple(obs_shape)
        self.policy = DreamerPolicy(self.learner, cfg.num_envs).to(self.device)
        s = cfg.schedule
        self.schedule = TrainSchedule(
            s.replay_ratio, s.learning_starts, s.pretrain_steps, r.seq_len, cfg.num_envs
        )
        self.generators = {
            name: torch.Generator(device=self.device).manual_seed(cfg.seed * 1000 + offset)
            for offset, name in enumerate(("actor", "sample", "learner"))
        }
        self.counters = Counters()
        self.total_iters = max(1, cfg.num_steps // cfg.num_envs)
        self.run_dir = Path(cfg.output_dir)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.checkpoints = CheckpointKeeper(self.run_dir, cfg.save_total_limit, shared=(SEGMENT_FILES,))
        self.replay_segments = SegmentStore()  # where the saved replay steps are (worldgym.segment_store)
        self.tracker: Tracker | None = None  # config.report_to's backends, opened by the first log()
        self._resumed_step: int | None = None  # the policy step resume() continued from
        self.episodes_path = self.run_dir / "episodes.jsonl"  # one line per finished episode
        self._metric_sums: dict[str, torch.Tensor] = {}
        self._metric_count = 0
        self._sampled = [None, None]
        self._timers = {"actor_s": 0.0, "learner_s": 0.0, "wall_s": 0.0}
        self._needs_reset = True

    # --- actor side
    def actor_window(self, first_iter: int, last_iter: int) -> WindowResult:
        """Play iterations ``first_iter..last_iter``: write and commit rows, plan gradient steps."""
        start = time.perf_counter()
        if self._needs_reset:
            self.runner.reset(seed=self.cfg.seed + first_iter)
            self.policy.reset_state()
            self._needs_reset = False
        owed = 0
        stride = self.cfg.replay.commit_stride
        for iter_num in range(first_iter, last_iter + 1):
            plan = self.schedule.plan(iter_num)
            owed += plan.gradient_steps
            if plan.random_actions:
                actions = torch.randint(
                    self.runner.action_dim,
                    (self.cfg.num_envs,),
                    generator=self.generators["actor"],
                    device=self.device,
                )
            else:
                obs = self.runner.obs.to(self.device, non_blocking=True)
                actions = self.policy.act(obs, self.runner.is_first.to(self.device), self.generators["actor"])
            self.replay.write({k: v.to(self.device) for k, v in self.runner.row(actions).items()})
            if self.replay.written_t % stride == 0:
                self.replay.commit()
            stats = self.runner.step(actions)
            for episode_return, length in zip(stats.returns, stats.lengths, strict=True):
                append_jsonl(
                    self.episodes_path,
                    {"policy_step": iter_num * self.cfg.num_envs, "return": episode_return, "length": length},
                )
            self.counters.episodes += len(stats.returns)
            self.counters.recent_returns = (self.counters.recent_returns + stats.returns)[-100:]
            self.counters.recent_lengths = (self.counters.recent_lengths + stats.lengths)[-100:]
        committed = self.replay.commit()
        elapsed = time.perf_counter() - start
        self._timers["actor_s"] += elapsed
        return WindowResult(first_iter, last_iter, owed, committed, elapsed)

    # --- learner side
    def learner_window(self, window: WindowResult) -> int:
        """Do the gradient steps owed by ``window`` on the replay as of its commit marker; returns steps done.

        Steps owed while the replay cannot yield a sequence yet are carried to the next window.
        """
        start = time.perf_counter()
        r = self.cfg.replay
        self.counters.owed_steps += window.gradient_steps
        done = 0
        if self.counters.owed_steps and self.replay.ready(r.seq_len, r.min_ready_steps, window.committed_t):
            expected = self._expected_batch_shapes()
            for _ in range(self.counters.owed_steps):
                batch, times = self.replay.sample(
                    r.batch_size, r.seq_len, self.generators["sample"], window.committed_t
                )
                if self.learner.gradient_steps == 0:
                    check_batch(batch, expected, self.run_dir)
                metrics = self.learner.train_step(batch, self.generators["learner"])
                self._accumulate(metrics, times)
                done += 1
            self.counters.owed_steps = 0
            self.counters.learner_version += 1
        self._timers["learner_s"] += time.perf_counter() - start
        return done

    def publish_policy(self) -> None:
        """Copy the learner's weights into the acting policy (CPU engine: same stream, no race)."""
        self.policy.sync_from(self.learner, self.counters.learner_version)

    def _expected_batch_shapes(self) -> dict[str, tuple[tuple[int, ...], torch.device]]:
        r = self.cfg.replay
        lead = (r.seq_len, r.batch_size)
        return {name: ((*lead, *spec.shape), self.device) for name, spec in self.replay.schema.items()}

    def _accumulate(self, metrics: dict[str, torch.Tensor], times: torch.Tensor) -> None:
        for key, value in metrics.items():
            self._metric_sums[key] = self._metric_sums.get(key, 0) + value
        self._metric_count += 1
        low, high = times.min(), times.max()
        self._sampled = [
            low if self._sampled[0] is None else torch.minimum(self._sampled[0], low),
            high if self._sampled[1] is None else torch.maximum(self._sampled[1], high),
        ]

    # --- logs and state
    def log(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write one JSONL record (syncs the device: called only at log intervals)."""
        c, s = self.counters, self.schedule
        policy_step = c.iter_num * self.cfg.num_envs
        trained_steps = policy_step - (s.train_starts - 1) * s.steps_per_iter
        ratio_steps = self.learner.gradient_steps - (s.pretrain_steps if self.learner.gradient_steps else 0)
        t = self._timers
        overlap = 0.0
        busy = min(t["actor_s"], t["learner_s"])
        if busy > 0 and t["wall_s"] > 0:
            overlap = max(0.0, (t["actor_s"] + t["learner_s"] - t["wall_s"]) / busy)
        record: dict[str, Any] = {
            "step": policy_step,  # the contract's step key: the budget (num_steps) spent, in policy steps
            "policy_step": policy_step,
            "iter": c.iter_num,
            "gradient_steps": self.learner.gradient_steps,
            "time/actor_ms": 1000 * t["actor_s"],
            "time/learner_ms": 1000 * t["learner_s"],
            "time/wall_ms": 1000 * t["wall_s"],
            "time/overlap_efficiency": overlap,
            "replay/ratio_target": s.ratio._ratio,
            "replay/ratio_actual": ratio_steps / trained_steps if trained_steps > 0 else 0.0,
            "replay/ratio_cumulative": self.learner.gradient_steps / policy_step if policy_step else 0.0,
            "replay/fill": self.replay.fill(),
            "replay/committed_t": self.replay.committed_t,
            "replay/sampled_t_min": self._sampled[0],
            "replay/sampled_t_max": self._sampled[1],
            "policy/actor_version": self.policy.version,
            "policy/learner_version": c.learner_version,
            "episode/count": c.episodes,
            "episode/return_mean": float(np.mean(c.recent_returns)) if c.recent_returns else None,
            "episode/length_mean": float(np.mean(c.recent_lengths)) if c.recent_lengths else None,
            "episode/return_mean_10": float(np.mean(c.recent_returns[-10:])) if c.recent_returns else None,
        }
        if self._metric_count:
            means = {k: v / self._metric_count for k, v in self._metric_sums.items()}
            check_metrics(means, self.run_dir, {"policy_step": policy_step}, {})
            record |= means
        record |= extra or {}
        row = {k: to_float(v) for k, v in record.items()}
        append_jsonl(self.metrics_path, row)
        if self.tracker is None:
            self.tracker = make_tracker(self.cfg.report_to, self.run_dir, self.cfg.to_dict(), self._resumed_step)
        if self.tracker is not None:
            self.tracker.log(row, int(row["step"]))
        self._metric_sums, self._metric_count, self._sampled = {}, 0, [None, None]
        return {k: v.item() if isinstance(v, torch.Tensor) else v for k, v in record.items()}

    def save(self, directory: str | Path | None = None) -> Path:
        """Checkpoint into ``directory`` (default ``run_dir/checkpoint-<iteration>``, keeping the newest
        ``save_total_limit`` of those); the replay steps not stored yet go to the ``replay/`` folder beside it."""
        c = self.counters
        state = {
            "config": self.cfg.to_dict(),
            "resolved_dtype": dtype_name(self.learner.dtype),  # what config["dtype"] ran as
            "iter_num": c.iter_num,
            "owed_steps": c.owed_steps,
            "learner_version": c.learner_version,
            "policy_version": self.policy.version,
            "episodes": c.episodes,
            "recent_returns": c.recent_returns,
            "recent_lengths": c.recent_lengths,
            "schedule": self.schedule.state_dict(),
            "next_episode_id": self.runner._next_episode,
            "obs_shape": list(self.obs_shape),  # what an exported policy is rebuilt with
            "action_dim": self.runner.action_dim,
        }
        env, actor = None, None
        if self.state_saving_env is not None and not self._needs_reset:  # episodes in progress: keep them
            env = self.state_saving_env
            actor = {f"runner.{k}": v for k, v in self.runner.state_dict().items()}
            actor |= {f"policy.{k}": v for k, v in self.policy.filter_state().items()}

        def write(path: Path) -> Path:
            return save_checkpoint(
                path, self.learner, self.replay, self.generators, state, env, actor, c.iter_num, self.replay_segments
            )

        if directory is None:  # a step checkpoint, then the pruning of those beyond save_total_limit
            return self.checkpoints.save_step(c.iter_num, write)
        path = write(Path(directory))
        prune_run_files(path.parent, (SEGMENT_FILES,))  # segments the checkpoint replaced there had alone
        return path

    def resume(self, directory: str | Path) -> None:
        """Continue the run saved in ``directory``: networks, optimisers, replay, Ratio and generators, and the
        episodes in progress when the env saves its state (else the next window resets the envs)."""
        state = load_checkpoint(
            directory, self.learner, self.replay, self.generators, self.state_saving_env, self.replay_segments
        )
        saved_cfg = state["config"]
        for key in ("model", "replay", "obs_kind", "num_envs", "env_id"):
            if saved_cfg[key] != self.cfg.to_dict()[key]:
                raise CheckpointError(
                    f"checkpoint {directory} was written with a different {key!r}: {saved_cfg[key]}"
                )
        c = self.counters
        c.iter_num, c.owed_steps = int(state["iter_num"]), int(state["owed_steps"])
        c.learner_version, c.episodes = int(state["learner_version"]), int(state["episodes"])
        c.recent_returns, c.recent_lengths = list(state["recent_returns"]), list(state["recent_lengths"])
        self.schedule.load_state_dict(state["schedule"], last_iter=c.iter_num)
        self.runner._next_episode = int(state["next_episode_id"])
        self.publish_policy()
        self.policy.version = int(state["policy_version"])
        actor = state.get("actor")
        if actor is not None:
            self.runner.load_state_dict(_unprefixed(actor, "runner."))
            self.policy.load_filter_state(
                {k: v.to(self.device) for k, v in _unprefixed(actor, "policy.").items()}
            )
        self._needs_reset = actor is None
        # lines logged after this checkpoint (before a crash) would otherwise appear twice
        truncate_jsonl(self.metrics_path, "policy_step", c.iter_num * self.cfg.num_envs)
        truncate_jsonl(self.episodes_path, "policy_step", c.iter_num * self.cfg.num_envs)
        self.checkpoints.resumed([])  # a kill between a checkpoint and its pruning: prune now
        self._resumed_step = c.iter_num * self.cfg.num_envs


def _unprefixed(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
