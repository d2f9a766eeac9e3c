"""Benchmark on ZTokenDigits-v1: warm start vs after PPO (held-out exact match, per-digit accuracy, Z length)
over several seeds, with Stable-Baselines3 PPO (MLP policy) on the same env and env-step budget as a baseline.

    python benchmarks/ztoken_ppo.py           # 3 seeds, CPU (~15-25 min on 2 shared cores)
    python benchmarks/ztoken_ppo.py --quick   # smoke run: seed 0, tiny budgets (seconds)
    python benchmarks/ztoken_ppo.py --dtype float32 bfloat16   # the whole benchmark once per precision

Prints a table; writes ztoken_ppo.json and ztoken_ppo.png (exact match vs env steps) to benchmarks/results/
(``--results-dir``). ``--dtype`` sets the PPO phase's precision (``ZTokenPPOConfig.dtype``; the warm start and
the supervised control stay float32): float32 writes ztoken_ppo.json / .png, another dtype
ztoken_ppo_<dtype>.json / .png of the same shape.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import worldgym  # noqa: F401  (registers ZTokenDigits-v1)
from worldgym.agents.ztoken_ppo import (
    ZTokenEpisode,
    ZTokenModelConfig,
    ZTokenPPOConfig,
    ZTokenPPOTrainer,
    ZTokenWarmStartConfig,
    build_policy,
    evaluate_policy,
    load_policy,
    save_checkpoint,
    warm_start,
)
from worldgym.agents.ztoken_ppo.evaluate import episode_metrics
from worldgym.agents.ztoken_ppo.rollout import run_until_episodes
from worldgym.envs.ztoken import FlattenTokenDigitsAction, ZTokenVocab

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import portable, results_dir, results_parser, write_json

ENV_ID = "ZTokenDigits-v1"
DTYPES = ("float32", "bfloat16")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, parents=[results_parser()]
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2 (0 with --quick)")
    parser.add_argument("--operand-digits", type=int, default=2)
    parser.add_argument("--warm-steps", type=int, default=1000)
    parser.add_argument("--rollouts", type=int, default=10)
    parser.add_argument("--episodes-per-rollout", type=int, default=512)
    parser.add_argument("--update-epochs", type=int, default=2)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--eval-episodes", type=int, default=512)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--dtype", nargs="+", choices=DTYPES, default=["float32"],
                        help="the PPO phase's precision; several: the benchmark once per dtype (default float32)")
    args = parser.parse_args(argv)
    if args.seeds is None:
        args.seeds = [0] if args.quick else [0, 1, 2]
    if args.quick:
        args.warm_steps, args.rollouts, args.episodes_per_rollout, args.eval_episodes = 50, 2, 64, 64
        args.eval_every = 1
    return args


def evaluate_sb3(
    model, env_kwargs: dict[str, Any], num_episodes: int, num_envs: int, seed: int
) -> dict[str, float]:
    """Held-out metrics for an SB3 model on the problems ``evaluate_policy`` uses (same seeds and order)."""
    envs = SyncVectorEnv(
        [
            lambda: FlattenTokenDigitsAction(gym.make(ENV_ID, **{**env_kwargs, "split": "test"}))
            for _ in range(num_envs)
        ],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    finished, _ = run_until_episodes(
        envs, num_episodes // num_envs, seed, lambda obs: model.predict(obs, deterministic=True)[0]
    )
    envs.close()
    return episode_metrics(
        [ZTokenEpisode(f"sb3-{i}", breakdown=e.info) for i, per in enumerate(finished) for e in per], "eval"
    )


def run_sb3(
    seed: int, env_kwargs: dict[str, Any], checkpoints: list[int], args: argparse.Namespace
) -> list[dict]:
    """Train SB3 PPO (MLP) and evaluate it at the same env-step counts as the Z-token PPO evaluations."""
    from stable_baselines3 import PPO

    env = FlattenTokenDigitsAction(gym.make(ENV_ID, **env_kwargs))
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0)
    curve = []
    for target in checkpoints:
        if target > model.num_timesteps:
            model.learn(total_timesteps=target - model.num_timesteps, reset_num_timesteps=False)
        metrics = evaluate_sb3(model, env_kwargs, args.eval_episodes, 8, seed=1234)
        curve.append({"env_steps": int(model.num_timesteps), **metrics})
    return curve


def run_supervised_control(
    seed: int, env_kwargs: dict[str, Any], args: argparse.Namespace, warm_path: Path
) -> dict[str, float]:
    """Control: continue the warm start *supervised* (annealed) on PPO's episode and optimizer-step counts.

    PPO anneals its learning rate while the warm start ends at a constant one, so part of a PPO gain could
    be annealing alone; this isolates it.
    """
    policy, encoder, _ = load_policy(warm_path)
    steps = args.rollouts * args.update_epochs * args.num_minibatches
    batch_size = args.rollouts * args.episodes_per_rollout // steps
    config = ZTokenWarmStartConfig(steps=steps, batch_size=batch_size, seed=seed + 1000, lr_schedule="onecycle")
    warm_start(policy, encoder, ENV_ID, env_kwargs, config, progress=False)
    return evaluate_policy(policy, encoder, env_kwargs=env_kwargs, num_episodes=args.eval_episodes, seed=1234)


def run_seed(
    seed: int, env_kwargs: dict[str, Any], args: argparse.Namespace, workdir: Path, dtype: str = "float32"
) -> dict[str, Any]:
    """Warm start, PPO in ``dtype`` (evaluated along the way), supervised control, SB3 baseline; this seed's
    figures."""
    start = time.perf_counter()
    policy, encoder = build_policy(ZTokenModelConfig(seed=seed), ZTokenVocab(env_kwargs["num_z_tokens"]))
    warm_start(
        policy, encoder, ENV_ID, env_kwargs, ZTokenWarmStartConfig(steps=args.warm_steps, seed=seed), progress=False
    )
    save_checkpoint(workdir / f"warm{seed}", policy, encoder, env_kwargs["num_z_tokens"])
    warm_s = time.perf_counter() - start
    config = ZTokenPPOConfig(
        init_checkpoint=str(workdir / f"warm{seed}"),
        env_kwargs=env_kwargs,
        num_steps=args.rollouts,
        learning_rate=args.lr,
        seed=seed,
        episodes_per_rollout=args.episodes_per_rollout,
        update_epochs=args.update_epochs,
        num_minibatches=args.num_minibatches,
        eval_episodes=args.eval_episodes,
        eval_every=args.eval_every,
        log_rollouts=False,
        progress=False,
        output_dir=str(workdir / f"ppo{seed}-{dtype}"),
        dtype=dtype,
    )
    trainer = ZTokenPPOTrainer(config)
    start = time.perf_counter()
    lines = trainer.train()
    trainer.close()
    ppo_s = time.perf_counter() - start
    curve = [
        {k: v for k, v in line.items() if k == "env_steps" or k.startswith("eval/")}
        for line in lines
        if "eval/exact_match" in line
    ]
    control = run_supervised_control(seed, env_kwargs, args, workdir / f"warm{seed}")
    start = time.perf_counter()
    sb3_curve = run_sb3(
        seed, env_kwargs, [point["env_steps"] for point in curve if point["env_steps"] > 0], args
    )
    sb3_s = time.perf_counter() - start
    return {
        "seed": seed,
        "warm_start": curve[0],
        "ppo": curve[-1],
        "ppo_curve": curve,
        "supervised_control": control,
        "sb3": sb3_curve[-1],
        "sb3_curve": sb3_curve,
        "seconds": {"warm_start": warm_s, "ppo": ppo_s, "sb3": sb3_s},
        "ppo_update_seconds": [line["time/update_s"] for line in lines if "time/update_s" in line],
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std over seeds for the headline metrics, and whether PPO beat its warm start in every seed."""
    summary: dict[str, Any] = {}
    for stage in ("warm_start", "ppo", "supervised_control", "sb3"):
        for metric in ("eval/exact_match", "eval/digit_accuracy", "eval/z_len_mean"):
            values = [run[stage][metric] for run in runs]
            summary[f"{stage}/{metric.removeprefix('eval/')}"] = {
                "mean": float(np.mean(values)),
                "std": float(np.std(values)),
            }
    summary["ppo_beats_warm_start_every_seed"] = all(
        run["ppo"]["eval/exact_match"] > run["warm_start"]["eval/exact_match"] for run in runs
    )
    return summary


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Held-out exact match vs env steps (PPO phase; the warm start sits at step 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for run in runs:
        ppo = run["ppo_curve"]
        ax.plot(
            [p["env_steps"] for p in ppo],
            [p["eval/exact_match"] for p in ppo],
            "o-",
            color="tab:blue",
            alpha=0.7,
            label="Z-token PPO (from warm start)" if run is runs[0] else None,
        )
        sb3 = run["sb3_curve"]
        ax.plot(
            [p["env_steps"] for p in sb3],
            [p["eval/exact_match"] for p in sb3],
            "s--",
            color="tab:orange",
            alpha=0.7,
            label="SB3 PPO (MLP, from scratch)" if run is runs[0] else None,
        )
        ax.plot(
            ppo[-1]["env_steps"],
            run["supervised_control"]["eval/exact_match"],
            "*",
            markersize=11,
            color="tab:green",
            label="control: warm start + annealed supervised" if run is runs[0] else None,
        )
    ax.set_xlabel("env steps (PPO phase)")
    ax.set_ylabel("held-out exact match")
    ax.set_title(f"ZTokenDigits-v1, {len(runs)} seeds")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    env_kwargs = {"num_z_tokens": 8, "max_new_tokens": 8, "operand_digits": args.operand_digits}
    for dtype in dict.fromkeys(args.dtype):
        run_dtype(args, env_kwargs, dtype)


def run_dtype(args: argparse.Namespace, env_kwargs: dict[str, Any], dtype: str) -> None:
    """Every seed with PPO in ``dtype``; writes the results JSON and PNG (named after a dtype other than float32)."""
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            run = run_seed(seed, env_kwargs, args, Path(tmp), dtype)
            runs.append(run)
            print(
                f"[{dtype}] seed {seed}: exact match warm {run['warm_start']['eval/exact_match']:.3f} -> PPO "
                f"{run['ppo']['eval/exact_match']:.3f} | supervised control "
                f"{run['supervised_control']['eval/exact_match']:.3f} | "
                f"SB3 {run['sb3']['eval/exact_match']:.3f} | "
                f"digit acc warm {run['warm_start']['eval/digit_accuracy']:.3f} -> PPO "
                f"{run['ppo']['eval/digit_accuracy']:.3f} | "
                f"Z len {run['warm_start']['eval/z_len_mean']:.2f} -> "
                f"{run['ppo']['eval/z_len_mean']:.2f} | {run['seconds']}",
                flush=True,
            )
    summary = summarize(runs)
    for key, value in summary.items():
        shown = value if isinstance(value, bool) else f"{value['mean']:.3f} +- {value['std']:.3f}"
        print(f"{key:32s} {shown}")
    out = results_dir(args)
    report = {
        "quick": args.quick,
        "settings": vars(args),  # write_json stores the results folder relative to the repository
        "dtype": dtype,
        "env_kwargs": env_kwargs,
        "machine": platform.platform(),
        "torch_threads": torch.get_num_threads(),
        "summary": summary,
        "runs": runs,
    }
    name = "ztoken_ppo" if dtype == "float32" else f"ztoken_ppo_{dtype}"
    write_json(out / f"{name}.json", report)
    plot(runs, out / f"{name}.png")
    print(f"wrote {portable(out / f'{name}.png')}")


if __name__ == "__main__":
    main()
