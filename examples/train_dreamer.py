"""Train Dreamer v3 on CartPole-v1 (vector obs) or GameBoy-v0 (packed 2-bit pixels), with JSONL metrics.

    python examples/train_dreamer.py                                  # CartPole, small model, 20k env steps, CPU
    python examples/train_dreamer.py cartpole --dreamer.num-steps 2000       # a 1-2 minute smoke run
    python examples/train_dreamer.py cartpole-benchmarked             # as benchmarked (30k steps, replay ratio 0.5)
    python examples/train_dreamer.py --resume runs/dreamer_cartpole   # continue from its newest checkpoint
    python examples/train_dreamer.py cartpole --size XS --dreamer.engine async --dreamer.device cuda
    python examples/train_dreamer.py gameboy                          # homebrew sprite-to-goal ROM, 8 emulators
    python examples/train_dreamer.py gameboy-standing-still           # world-model check: constant no-op
    python examples/train_dreamer.py gameboy-standing-still --gameboy.task standing_still --gameboy.rom pokered.gb
    python examples/train_dreamer.py cartpole --help                  # every setting, with its help

Metrics go to ``<output-dir>/metrics.jsonl`` (one line per ``--dreamer.log-every`` policy steps), checkpoints to
``<output-dir>/checkpoint-<iteration>`` (safetensors + JSON, incl. the replay and the replay-ratio state), the
resolved settings to ``<output-dir>/config.json``. With ``--dreamer.device cuda`` the Game Boy emulators run on the
GPU too and frames go to the replay from the env's device buffer.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch

from worldgym.agents.dreamer_v3 import (
    SMALL_CONTROL_MODEL,
    SMALL_CONTROL_OPTIM,
    DreamerConfig,
    DreamerTrainer,
    OptimConfig,
    ReplayConfig,
    ScheduleConfig,
    gym_env_factory,
    model_size,
)
from worldgym.agents.dreamer_v3.gameboy import ROM_ENV_VAR, GameBoyTask, make_gameboy_env
from worldgym.agents.dreamer_v3.trainer import EnvFactory
from worldgym.cli import parse_run, save_run_config
from worldgym.config import check_field, check_positive_int
from worldgym.envs.gameboy.tasks import ACTIONS


@dataclass
class GameBoySettings:
    """The GameBoy-v0 env (used when dreamer.env_id is "GameBoy-v0").

    Attributes:
        task: "sprite_goal" (homebrew ROM built from source) or a Pokémon Red task (needs rom).
        rom: a Pokémon Red ROM you own (default: $WORLDGYM_POKEMON_RED_ROM).
        fixed_action: when set, every step presses this button (0 = no-op; the world-model check).
        max_episode_steps: episode truncation (None: the task's).
        savestate: a .npz start state (save_start_state).
    """

    task: GameBoyTask = "sprite_goal"
    rom: str | None = None
    fixed_action: int | None = None
    max_episode_steps: int | None = None
    savestate: str | None = None

    def __post_init__(self) -> None:
        action = self.fixed_action
        check_field(action is None or (type(action) is int and 0 <= action < len(ACTIONS)), "fixed_action", action,
                    f"use None or a button index in [0, {len(ACTIONS)})")
        if self.max_episode_steps is not None:
            check_positive_int("max_episode_steps", self.max_episode_steps)


@dataclass
class DreamerRun:
    """Dreamer v3 on a Gymnasium vector env or GameBoy-v0.

    Attributes:
        dreamer: the agent's settings.
        gameboy: the Game Boy env's settings.
        size: when set, the network size and learning rates: "small-control" (the CartPole benchmark's) or
            the paper's XS / S / M with its learning rates.
        threads: torch CPU threads.
    """

    dreamer: DreamerConfig
    gameboy: GameBoySettings = field(default_factory=GameBoySettings)
    size: Literal["small-control", "XS", "S", "M"] | None = None
    threads: int = 1

    def __post_init__(self) -> None:
        check_positive_int("threads", self.threads)

    def resolved_config(self) -> DreamerConfig:
        """``dreamer`` with ``size`` applied."""
        if self.size is None:
            return self.dreamer
        if self.size == "small-control":
            return replace(self.dreamer, model=SMALL_CONTROL_MODEL, optim=SMALL_CONTROL_OPTIM)
        return replace(self.dreamer, model=model_size(self.size), optim=OptimConfig())


def _cartpole(**overrides: Any) -> DreamerRun:
    settings = {"num_steps": 20_000, "replay_ratio": 0.25, "learning_starts": 1024, **overrides}
    return DreamerRun(_config("CartPole-v1", "vector", "runs/dreamer_cartpole", **settings))


def _config(env_id: str, obs_kind: str, output_dir: str, num_steps: int, replay_ratio: float, learning_starts: int,
            num_envs: int = 1, capacity: int = 100_000, batch_size: int = 16, seq_len: int = 32, log_every: int = 500,
            checkpoint_every: int = 5000, eval_episodes: int = 10) -> DreamerConfig:
    """The example's CPU setting: the small-control networks, sequences of ``seq_len``, one step per window."""
    return DreamerConfig(
        env_id=env_id, obs_kind=obs_kind, num_envs=num_envs, num_steps=num_steps, model=SMALL_CONTROL_MODEL,
        optim=SMALL_CONTROL_OPTIM, replay=ReplayConfig(capacity=capacity, seq_len=seq_len, batch_size=batch_size,
                                                      commit_stride=1, min_ready_steps=seq_len, safety_margin=seq_len),
        schedule=ScheduleConfig(replay_ratio=replay_ratio, learning_starts=learning_starts, pretrain_steps=1,
                                rollout_window=1),
        log_every=log_every, checkpoint_every=checkpoint_every, output_dir=output_dir, eval_episodes=eval_episodes)


PRESETS: dict[str, tuple[str, DreamerRun]] = {
    "cartpole": ("CartPole-v1, small-control networks, 20k env steps.", _cartpole()),
    "cartpole-benchmarked": ("CartPole-v1 as benchmarks/dreamer.py runs it: 30k steps, replay ratio 0.5.",
                             _cartpole(num_steps=30_000, replay_ratio=0.5, learning_starts=512)),
    "gameboy": ("GameBoy-v0's homebrew sprite-to-goal ROM, 8 emulators, 20k env steps.", DreamerRun(_config(
        "GameBoy-v0", "pixels", "runs/dreamer_sprite_goal", 20_000, 0.25, 1024, num_envs=8, capacity=20_000))),
    "gameboy-standing-still": (
        "World-model check on GameBoy-v0: a constant no-op, the observation loss must fall.",
        DreamerRun(_config("GameBoy-v0", "pixels", "runs/dreamer_standing_still", 400, 0.25, 64, capacity=1000,
                           batch_size=8, seq_len=16, log_every=40, eval_episodes=1),
                   GameBoySettings(fixed_action=0)),
    ),
}


def env_factory(run: DreamerRun, config: DreamerConfig) -> EnvFactory:
    """GameBoy-v0 through :func:`make_gameboy_env` (packed frames, fixed action), else ``gym.make_vec``."""
    if config.env_id != "GameBoy-v0":
        return gym_env_factory(config)
    gb = run.gameboy
    settings = {k: v for k, v in (("max_episode_steps", gb.max_episode_steps), ("savestate", gb.savestate))
                if v is not None}
    rom = gb.rom or os.environ.get(ROM_ENV_VAR)
    fixed = 0 if gb.fixed_action is None and gb.task == "standing_still" else gb.fixed_action  # StandingStill

    def make(num_envs: int):
        return make_gameboy_env(num_envs, task=gb.task, rom_path=rom, fixed_action=fixed, device=config.device,
                                **settings)

    return make


def observation_loss_trend(run_dir: str) -> tuple[float, float] | None:
    """First and last logged world-model observation loss (the StandingStill check), if any were logged."""
    key = "loss/world_observation_loss"
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    values = [record[key] for record in map(json.loads, lines) if record.get(key) is not None]
    return (values[0], values[-1]) if values else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parsed = parse_run(PRESETS, argv, description=__doc__)
    run = parsed.run
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    torch.set_num_threads(run.threads)
    config = run.resolved_config()
    save_run_config(config.output_dir, parsed.preset, run)
    trainer = DreamerTrainer(config, make_env=env_factory(run, config))
    if parsed.resume:
        resumed = trainer.resume_latest()
        print(f"resumed from {resumed}" if resumed else "no checkpoint yet: a fresh run")
    last = trainer.train()[-1]
    print(
        f"trained: {last['step']} policy steps, {last['gradient_steps']} gradient steps, "
        f"replay ratio {last['replay/ratio_actual']:.3f} (target {config.schedule.replay_ratio})"
    )
    trend = observation_loss_trend(config.output_dir)
    if trend is not None:
        print(f"world-model observation loss: first log {trend[0]:.2f} -> last log {trend[1]:.2f}")
    metrics = trainer.evaluate()
    trainer.close()
    print(json.dumps(metrics))
    with (Path(config.output_dir) / "eval.jsonl").open("a") as handle:
        handle.write(json.dumps({"step": last["step"], "policy_step": last["policy_step"]} | metrics) + "\n")
    return {"train": last, "eval": metrics, "observation_loss": trend}


if __name__ == "__main__":
    main()
