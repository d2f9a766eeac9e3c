"""Train Dreamer v3 on CartPole-v1 (vector obs) on CPU, with JSONL metrics, a progress bar and checkpoints.

    python examples/train_dreamer.py                               # tiny model, 20k env steps, CPU engine
    python examples/train_dreamer.py --steps 2000 --size tiny      # a 1-2 minute smoke run
    python examples/train_dreamer.py --resume runs/dreamer_cartpole/checkpoints/iter_5000
    python examples/train_dreamer.py --engine async --device cuda --size XS

Metrics go to ``<run-dir>/metrics.jsonl`` (one line per ``--log-every`` policy steps), checkpoints to
``<run-dir>/checkpoints/iter_<n>`` (safetensors + JSON, incl. the replay and the replay-ratio state).
Game Boy tasks (``GameBoy-v0``, pixel obs packed 2 bits/pixel) use ``--obs-kind pixels`` once that env exists.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import gymnasium as gym
import torch

from worldgym.agents.dreamer_v3 import (
    DreamerConfig,
    LossConfig,
    OptimConfig,
    ReplayConfig,
    ScheduleConfig,
    build_engine,
    evaluate,
    model_size,
)
from worldgym.agents.dreamer_v3.engine.rollout import default_obs_transform
from worldgym.agents.dreamer_v3.pixels import pack_frames


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env-id", default="CartPole-v1", help="Gymnasium id with discrete actions")
    parser.add_argument("--obs-kind", choices=["vector", "pixels"], default="vector")
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
    parser.add_argument("--run-dir", default="runs/dreamer_cartpole")
    parser.add_argument("--log-every", type=int, default=500)
    parser.add_argument("--checkpoint-every", type=int, default=5000)
    parser.add_argument("--resume", default=None, help="checkpoint folder to continue from")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    return parser.parse_args()


def make_config(args: argparse.Namespace) -> DreamerConfig:
    seq_len = args.seq_len
    return DreamerConfig(
        env_id=args.env_id,
        obs_kind=args.obs_kind,
        num_envs=args.num_envs,
        total_steps=args.steps,
        seed=args.seed,
        model=model_size(args.size, dense_units=64, recurrent_size=64)
        if args.size == "tiny"
        else model_size(args.size),
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
        optim=OptimConfig(world_lr=3e-4, actor_lr=8e-5, critic_lr=8e-5),
        device=args.device,
        log_every=args.log_every,
        checkpoint_every=args.checkpoint_every,
        run_dir=args.run_dir,
    )


def main() -> None:
    args = parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    torch.set_num_threads(args.threads)
    cfg = make_config(args)
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    (Path(cfg.run_dir) / "config.json").write_text(json.dumps(cfg.to_dict(), indent=1) + "\n")
    # Pixel envs give 2-bit shades [N, H, W]; the replay stores them packed 4 pixels per byte
    transform = pack_frames if args.obs_kind == "pixels" else default_obs_transform
    engine = build_engine(cfg, args.engine, obs_transform=transform)
    last = engine.run(resume_from=args.resume)
    print(
        f"trained: {last['policy_step']} policy steps, {last['gradient_steps']} gradient steps, "
        f"replay ratio {last['replay/ratio_actual']:.3f} (target {cfg.schedule.replay_ratio})"
    )
    eval_env = gym.make_vec(cfg.env_id, num_envs=1, vectorization_mode="sync")
    metrics = evaluate(
        engine.core.learner,
        eval_env,
        episodes=args.eval_episodes,
        seed=cfg.seed + 10_000,
        obs_transform=transform,
    )
    print(json.dumps(metrics))
    with (Path(cfg.run_dir) / "eval.jsonl").open("a") as handle:
        handle.write(json.dumps({"policy_step": last["policy_step"]} | metrics) + "\n")


if __name__ == "__main__":
    main()
