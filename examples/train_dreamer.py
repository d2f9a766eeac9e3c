"""Train Dreamer v3 on CartPole-v1 (vector obs) or GameBoy-v0 (packed 2-bit pixels), with JSONL metrics.

    python examples/train_dreamer.py                               # CartPole, tiny model, 20k env steps, CPU
    python examples/train_dreamer.py --steps 2000 --size tiny      # a 1-2 minute smoke run
    python examples/train_dreamer.py --steps 30000 --replay-ratio 0.5 --learning-starts 512  # as benchmarked
    python examples/train_dreamer.py --resume runs/dreamer_cartpole/checkpoints/iter_5000
    python examples/train_dreamer.py --engine async --device cuda --size XS

    # Game Boy: the homebrew sprite-to-goal task (ROM built from source), 8 emulators
    python examples/train_dreamer.py --env gameboy --num-envs 8 --steps 20000 --replay-capacity 20000
    # StandingStill-style world-model check on the homebrew ROM: constant no-op, observation loss must fall
    python examples/train_dreamer.py --env gameboy --fixed-action 0 --steps 400 --learning-starts 64 \
        --log-every 40 --replay-capacity 1000 --batch-size 8 --seq-len 16 --eval-episodes 1
    # Pokémon Red StandingStill / ExitOak with a ROM you own (StandingStill always presses no-op)
    python examples/train_dreamer.py --env gameboy --task standing_still --rom pokered.gb --steps 400

Metrics go to ``<run-dir>/metrics.jsonl`` (one line per ``--log-every`` policy steps), checkpoints to
``<run-dir>/checkpoints/iter_<n>`` (safetensors + JSON, incl. the replay and the replay-ratio state).
With ``--device cuda`` the Game Boy emulators run on the GPU too and frames go to the replay from the
env's device buffer.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from worldgym.agents.dreamer_v3 import (
    SMALL_CONTROL_MODEL,
    SMALL_CONTROL_OPTIM,
    DreamerConfig,
    LossConfig,
    OptimConfig,
    ReplayConfig,
    ScheduleConfig,
    build_engine,
    evaluate,
    model_size,
)
from worldgym.agents.dreamer_v3.engine.rollout import ObsTransform, default_obs_transform
from worldgym.agents.dreamer_v3.gameboy import GAMEBOY_TASKS, ROM_ENV_VAR, make_gameboy_env
from worldgym.agents.dreamer_v3.pixels import pack_frames


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", choices=["gym", "gameboy"], default="gym", help="gym: any --env-id")
    parser.add_argument("--env-id", default="CartPole-v1", help="Gymnasium id with discrete actions")
    parser.add_argument("--obs-kind", choices=["vector", "pixels"], default="vector")
    parser.add_argument("--task", choices=GAMEBOY_TASKS, default="sprite_goal", help="GameBoy-v0 task")
    parser.add_argument(
        "--rom", default=os.environ.get(ROM_ENV_VAR), help=f"your Pokémon Red ROM (default ${ROM_ENV_VAR})"
    )
    parser.add_argument(
        "--fixed-action", type=int, default=None, help="Game Boy button every step (0 = no-op; "
        "standing_still defaults to 0)",
    )
    parser.add_argument("--max-episode-steps", type=int, default=None, help="Game Boy truncation")
    parser.add_argument("--savestate", default=None, help="Game Boy .npz start state (save_start_state)")
    parser.add_argument("--steps", type=int, default=20_000, help="policy steps summed over envs")
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--size", choices=["tiny", "XS", "S", "M"], default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay-ratio", type=float, default=0.25, help="gradient steps per policy step")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--learning-starts", type=int, default=1024)
    parser.add_argument("--replay-capacity", type=int, default=100_000, help="steps kept per env")
    parser.add_argument("--engine", choices=["cpu", "async"], default="cpu")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--run-dir", default=None, help="default runs/dreamer_<env or task>")
    parser.add_argument("--log-every", type=int, default=500)
    parser.add_argument("--checkpoint-every", type=int, default=5000)
    parser.add_argument("--resume", default=None, help="checkpoint folder to continue from")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    if args.env == "gameboy":
        args.env_id, args.obs_kind = "GameBoy-v0", "pixels"
        if args.task == "standing_still" and args.fixed_action is None:
            args.fixed_action = 0
    if args.run_dir is None:
        args.run_dir = f"runs/dreamer_{args.task if args.env == 'gameboy' else 'cartpole'}"
    return args


def make_env(args: argparse.Namespace, num_envs: int) -> tuple[gym.vector.VectorEnv, ObsTransform]:
    """The vector env and the obs transform that stores its observations in the replay."""
    if args.env == "gameboy":
        return make_gameboy_env(
            num_envs,
            task=args.task,
            rom_path=args.rom,
            fixed_action=args.fixed_action,
            device=args.device,
            max_episode_steps=args.max_episode_steps,
            savestate=args.savestate,
        )
    env = gym.make_vec(args.env_id, num_envs=num_envs, vectorization_mode="sync")
    # Pixel envs give 2-bit shades [N, H, W]; the replay stores them packed 4 pixels per byte
    return env, pack_frames if args.obs_kind == "pixels" else default_obs_transform


def make_config(args: argparse.Namespace) -> DreamerConfig:
    seq_len = args.seq_len
    # tiny: the CartPole benchmark's setting; XS/S/M: the paper's sizes and learning rates
    if args.size == "tiny":
        model, optim = SMALL_CONTROL_MODEL, SMALL_CONTROL_OPTIM
    else:
        model, optim = model_size(args.size), OptimConfig()
    return DreamerConfig(
        env_id=args.env_id,
        obs_kind=args.obs_kind,
        num_envs=args.num_envs,
        total_steps=args.steps,
        seed=args.seed,
        model=model,
        replay=ReplayConfig(
            capacity=args.replay_capacity,
            seq_len=seq_len,
            batch_size=args.batch_size,
            commit_stride=1,
            min_ready_steps=seq_len,
            safety_margin=seq_len,
        ),
        schedule=ScheduleConfig(
            replay_ratio=args.replay_ratio,
            learning_starts=args.learning_starts,
            pretrain_steps=1,
            rollout_window=1,
        ),
        loss=LossConfig(),
        optim=optim,
        device=args.device,
        log_every=args.log_every,
        checkpoint_every=args.checkpoint_every,
        run_dir=args.run_dir,
    )


def observation_loss_trend(run_dir: str) -> tuple[float, float] | None:
    """First and last logged world-model observation loss (the StandingStill check), if any were logged."""
    key = "loss/world_observation_loss"
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    values = [record[key] for record in map(json.loads, lines) if record.get(key) is not None]
    return (values[0], values[-1]) if values else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    torch.set_num_threads(args.threads)
    cfg = make_config(args)
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    (Path(cfg.run_dir) / "config.json").write_text(json.dumps(cfg.to_dict(), indent=1) + "\n")
    env, transform = make_env(args, cfg.num_envs)
    engine = build_engine(cfg, args.engine, env=env, obs_transform=transform)
    last = engine.run(resume_from=args.resume)
    print(
        f"trained: {last['policy_step']} policy steps, {last['gradient_steps']} gradient steps, "
        f"replay ratio {last['replay/ratio_actual']:.3f} (target {cfg.schedule.replay_ratio})"
    )
    trend = observation_loss_trend(cfg.run_dir)
    if trend is not None:
        print(f"world-model observation loss: first log {trend[0]:.2f} -> last log {trend[1]:.2f}")
    eval_env, eval_transform = make_env(args, 1)
    metrics = evaluate(
        engine.core.learner,
        eval_env,
        episodes=args.eval_episodes,
        seed=cfg.seed + 10_000,
        obs_transform=eval_transform,
    )
    print(json.dumps(metrics))
    with (Path(cfg.run_dir) / "eval.jsonl").open("a") as handle:
        handle.write(json.dumps({"policy_step": last["policy_step"]} | metrics) + "\n")
    return {"train": last, "eval": metrics, "observation_loss": trend}


if __name__ == "__main__":
    main()
