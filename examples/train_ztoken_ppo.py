"""Train the Z-token PPO agent on ZTokenDigits-v0: supervised warm start, then PPO; CPU, a few minutes.

    python examples/train_ztoken_ppo.py                          # tiny Qwen3 from config, CPU
    python examples/train_ztoken_ppo.py --resume                 # continue runs/ztoken_ppo where it stopped
    python examples/train_ztoken_ppo.py --pretrained Qwen/Qwen3-0.6B --device cuda   # any HF causal LM

Writes ``<out>/warm_start/`` (checkpoint), ``<out>/warm_start.jsonl``, ``<out>/ppo/metrics.jsonl``,
``<out>/ppo/rollouts.jsonl`` and ``<out>/ppo/checkpoint/``. A run without ``--resume`` starts these logs afresh;
``--resume`` continues them (and just reports the final metrics if the run already finished).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import worldgym  # noqa: F401  (registers ZTokenDigits-v0)
from worldgym.agents.ztoken_ppo import (
    WarmStartConfig,
    ZTokenModelConfig,
    ZTokenPPOConfig,
    ZTokenPPOTrainer,
    build_policy,
    save_checkpoint,
    warm_start,
)
from worldgym.envs.ztoken import ZTokenVocab


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output-dir", default="runs/ztoken_ppo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--pretrained", default=None, help="HF model name or path (default: tiny Qwen3 from config)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--operand-digits", type=int, default=2, help="difficulty: max digits per operand")
    parser.add_argument("--num-z-tokens", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--warm-steps", type=int, default=1000)
    parser.add_argument("--rollouts", type=int, default=10)
    parser.add_argument("--episodes-per-rollout", type=int, default=512)
    parser.add_argument("--eval-episodes", type=int, default=256)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--resume", action="store_true", help="continue the PPO run in --output-dir")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.output_dir)
    env_kwargs = {
        "num_z_tokens": args.num_z_tokens,
        "max_new_tokens": args.max_new_tokens,
        "operand_digits": args.operand_digits,
    }
    ppo_config = ZTokenPPOConfig(
        model=ZTokenModelConfig(pretrained=args.pretrained, seed=args.seed),
        init_checkpoint=str(out / "warm_start"),  # PPO starts from the warm start below
        env_kwargs=env_kwargs,
        num_rollouts=args.rollouts,
        episodes_per_rollout=args.episodes_per_rollout,
        eval_episodes=args.eval_episodes,
        lr=args.lr,
        seed=args.seed,
        device=args.device,
        output_dir=str(out / "ppo"),
    )

    if args.resume:
        trainer = ZTokenPPOTrainer(ppo_config)
        trainer.load(out / "ppo" / "checkpoint")
    else:
        # Phase 2/3 stand-in: supervised digit heads + scripted Z policy, saved as the checkpoint PPO loads.
        start = time.perf_counter()
        policy, encoder = build_policy(ppo_config.model, ZTokenVocab(args.num_z_tokens))
        policy.to(args.device)
        warm_config = WarmStartConfig(
            steps=args.warm_steps, seed=args.seed, z_max=min(4, args.max_new_tokens - 1)
        )
        warm_start(policy, encoder, "ZTokenDigits-v0", env_kwargs, warm_config, out / "warm_start.jsonl")
        save_checkpoint(out / "warm_start", policy, encoder, args.num_z_tokens)
        trainer = ZTokenPPOTrainer(ppo_config)
        warm_metrics = trainer.evaluate()
        print(
            f"warm start ({time.perf_counter() - start:.0f}s): held-out exact match "
            f"{warm_metrics['eval/exact_match']:.3f}, "
            f"digit accuracy {warm_metrics['eval/digit_accuracy']:.3f}"
        )

    if trainer.rollout_index >= ppo_config.num_rollouts:
        print(
            f"run already finished at rollout {trainer.rollout_index} of {ppo_config.num_rollouts}: "
            "raise --rollouts to train further"
        )
    start = time.perf_counter()
    final = trainer.train()[-1]
    trainer.close()
    summary = {key: round(value, 4) for key, value in final.items() if key.startswith("eval/")}
    print(f"PPO ({time.perf_counter() - start:.0f}s, {final['env_steps']} env steps): {json.dumps(summary)}")


if __name__ == "__main__":
    main()
