"""Dreamer v3 benchmarks: s per gradient step, CartPole sample efficiency vs SB3 PPO, replay-ratio accuracy.

    python benchmarks/dreamer.py speed --sizes tiny XS --steps 5        # (1) s/gradient step vs sheeprl
    python benchmarks/dreamer.py speed --dtype float32 bfloat16         #     float32 and bf16 side by side
    python benchmarks/dreamer.py cartpole --seeds 0 1 2 --max-steps 30000  # (2) env steps to mean return 475
    python benchmarks/dreamer.py ratio --ratios 0.1 0.5 1.0                # (3) replay ratio actual vs target

CartPole runs are saved one by one and reused: run seeds in separate processes (``--seeds 1``, ``--seeds 2``)
to use more cores, then collect them with ``cartpole --report-only`` (with the same settings). Each writes
``dreamer_<name>.json`` (and a PNG for cartpole) to ``benchmarks/results/`` (``--results-dir``) and prints the
figures. ``speed`` compares with sheeprl 0.8.4's figures from ``sheeprl_dreamer_step.json`` in the same folder
(written by ``benchmarks/sheeprl_dreamer_step.py``: run it right before, on the same sizes, batch, length and
thread count, so that both see the same load); without a matching row the comparison is left empty and says so.
``speed --dtype`` times each precision on the same sizes, batch and length, alternating their steps so both see
the same load; float32 is the baseline (each row's top-level figures) and is compared with sheeprl's ``32-true``
rows, bfloat16 (``row["dtypes"]["bfloat16"]``) with its ``bf16-mixed`` rows (``sheeprl_dreamer_step.py
--precision``).
Set ``--label`` (e.g. ``shared-load``) when the machine is busy: the label is stored with the figures.
Every command takes ``--quick`` (tiny sizes, a few hundred env steps, one seed: seconds; run folders under
``<results-dir>/runs/``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

from worldgym.agents.dreamer_v3 import (
    SMALL_CONTROL_MODEL,
    SMALL_CONTROL_OPTIM,
    CPUEngine,
    DreamerConfig,
    LossConfig,
    OptimConfig,
    ReplayConfig,
    ScheduleConfig,
    model_size,
)
from worldgym.agents.dreamer_v3.learner import DreamerLearner
from worldgym.agents.dreamer_v3.replay import ReplayRing, dreamer_schema
from worldgym.config import renamed_fields_of
from worldgym.precision import cpu_supports_bf16

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import REPO, portable, results_dir, results_parser, write_json
from benchmarks.sheeprl_dreamer_step import RESULTS_NAME as SHEEPRL_RESULTS
from benchmarks.sheeprl_dreamer_step import row_precision

SHEEPRL_PRECISION = {"float32": "32-true", "bfloat16": "bf16-mixed"}  # our dtype -> sheeprl's Fabric precision

SOLVED = 475.0


def runs_dir(args: argparse.Namespace) -> Path:
    """Git-ignored run folders: ``runs/benchmarks/dreamer``, or inside the results folder with ``--quick``."""
    return results_dir(args) / "runs" if args.quick else REPO / "runs" / "benchmarks" / "dreamer"


def write_result(args: argparse.Namespace, name: str, payload: dict[str, Any]) -> Path:
    return write_json(results_dir(args) / f"dreamer_{name}.json", payload | {"quick": args.quick})


def sheeprl_figures(
    args: argparse.Namespace, size: str, precision: str = "32-true"
) -> tuple[dict[str, Any] | None, str]:
    """sheeprl's row for ``size`` at this batch, length, thread count and Fabric ``precision``, from
    ``sheeprl_dreamer_step.json`` (None when there is none), and where it came from (or why there is none)."""
    path = results_dir(args) / SHEEPRL_RESULTS
    if not path.is_file():
        return None, f"not measured: no {portable(path)} (run benchmarks/sheeprl_dreamer_step.py)"
    settings = {"size": size, "batch_size": args.batch_size, "seq_len": args.seq_len, "threads": args.threads}
    for row in json.loads(path.read_text())["rows"]:
        if all(row[key] == value for key, value in settings.items()) and row_precision(row) == precision:
            return row, f"{portable(path)} (sheeprl {row['sheeprl']}, {precision}, label {row['label']!r})"
    if precision != "32-true":
        settings["precision"] = precision
    return None, f"not measured: {portable(path)} has no row with {settings}"


def speed_learner(args: argparse.Namespace, size: str, dtype: str) -> DreamerLearner:
    """A seeded learner of ``size`` computing in ``dtype`` (the same weights for every dtype)."""
    cfg = DreamerConfig(
        model=model_size(size),
        dtype=dtype,
        replay=ReplayConfig(
            capacity=512,
            seq_len=args.seq_len,
            batch_size=args.batch_size,
            min_ready_steps=args.seq_len,
            safety_margin=args.seq_len,
        ),
    )
    torch.manual_seed(0)
    return DreamerLearner(cfg, (4,), action_dim=2)


def speed_batch(args: argparse.Namespace) -> dict[str, torch.Tensor]:
    """A synthetic CartPole-shaped replay batch (episodes of 50 steps)."""
    ring = ReplayRing(dreamer_schema((4,)), 512, 1, args.seq_len)
    gen = torch.Generator().manual_seed(0)
    for t in range(256):
        ring.write(
            {
                "obs": torch.randn(1, 4, generator=gen),
                "action": torch.randint(2, (1,), generator=gen),
                "reward": torch.ones(1),
                "is_first": torch.tensor([float(t % 50 == 0)]),
                "cont": torch.ones(1),
                "episode_id": torch.tensor([t // 50]),
            }
        )
        ring.commit()
    return ring.sample(args.batch_size, args.seq_len, gen)[0]


def time_steps(args: argparse.Namespace, size: str) -> dict[str, tuple[float, float]]:
    """Wall and CPU seconds per gradient step of each ``--dtype``, their steps alternating (same load)."""
    batch = speed_batch(args)
    learners = {dtype: speed_learner(args, size, dtype) for dtype in args.dtype}
    gens = {dtype: torch.Generator().manual_seed(0) for dtype in args.dtype}
    totals = dict.fromkeys(args.dtype, (0.0, 0.0))
    for dtype, learner in learners.items():
        learner.train_step(batch, gens[dtype])  # warm-up
    for _ in range(args.steps):
        for dtype, learner in learners.items():
            start, cpu_start = time.perf_counter(), time.process_time()  # CPU time: less sensitive to other jobs
            learner.train_step(batch, gens[dtype])
            wall, cpu = totals[dtype]
            totals[dtype] = (wall + time.perf_counter() - start, cpu + time.process_time() - cpu_start)
    return {dtype: (wall / args.steps, cpu / args.steps) for dtype, (wall, cpu) in totals.items()}


def speed_figures(args: argparse.Namespace, size: str, dtype: str, seconds: float, cpu_seconds: float) -> dict[str, Any]:
    """One dtype's figures and sheeprl's in the matching precision (None where sheeprl was not measured)."""
    sheeprl, source = sheeprl_figures(args, size, SHEEPRL_PRECISION[dtype])
    theirs = sheeprl["s_per_step"] if sheeprl else None
    theirs_cpu = sheeprl["cpu_s_per_step"] if sheeprl else None
    return {
        "sheeprl_source": source,
        "sheeprl_precision": SHEEPRL_PRECISION[dtype],
        "s_per_step": seconds,
        "cpu_s_per_step": cpu_seconds,
        "sheeprl_s_per_step": theirs,
        "sheeprl_cpu_s_per_step": theirs_cpu,
        "speedup": theirs / seconds if theirs else None,
        "cpu_speedup": theirs_cpu / cpu_seconds if theirs_cpu else None,
    }


def describe_speed(dtype: str, figures: dict[str, Any], baseline: dict[str, Any]) -> str:
    """One printed line part: s/step, the ratio to float32 (for other dtypes) and the sheeprl comparison."""
    seconds, cpu_seconds = figures["s_per_step"], figures["cpu_s_per_step"]
    text = f"{dtype} {seconds:.3f} s/step ({cpu_seconds:.3f} CPU s"
    if figures is not baseline:
        text += f", {baseline['cpu_s_per_step'] / cpu_seconds:.2f}x float32"
    theirs, theirs_cpu = figures["sheeprl_s_per_step"], figures["sheeprl_cpu_s_per_step"]
    if theirs is None:
        return f"{text})  sheeprl {figures['sheeprl_source']}"
    precision = "" if figures["sheeprl_precision"] == "32-true" else f" {figures['sheeprl_precision']}"
    return (f"{text})  sheeprl{precision} {theirs:.3f} s/step ({theirs_cpu:.3f} CPU s): "
            f"{theirs / seconds:.2f}x wall, {theirs_cpu / cpu_seconds:.2f}x CPU")


def speed(args: argparse.Namespace) -> None:
    """(1) Mean seconds per gradient step (world model + behavior) on synthetic CartPole-shaped batches, per
    ``--dtype``; each row's top-level figures are float32's."""
    if args.dtype[0] != "float32":
        raise SystemExit(f"--dtype {' '.join(args.dtype)}: list float32 first (it is the baseline of every row)")
    rows = []
    for size in args.sizes:
        timings = time_steps(args, size)
        dtypes = {dtype: speed_figures(args, size, dtype, *timings[dtype]) for dtype in args.dtype}
        baseline = dtypes["float32"]
        row = {"sheeprl_source": baseline["sheeprl_source"], "size": size}
        row |= {k: v for k, v in baseline.items() if k not in ("sheeprl_source", "sheeprl_precision")}
        row["dtypes"] = dtypes
        for figures in dtypes.values():
            figures["cpu_ratio_to_float32"] = baseline["cpu_s_per_step"] / figures["cpu_s_per_step"]
            figures["ratio_to_float32"] = baseline["s_per_step"] / figures["s_per_step"]
        rows.append(row)
        print(f"{size:>4}: " + "; ".join(describe_speed(d, f, baseline) for d, f in dtypes.items()))
    write_result(
        args,
        "speed",
        {
            "label": args.label,
            "threads": torch.get_num_threads(),
            "batch_size": args.batch_size,
            "seq_len": args.seq_len,
            "dtypes": args.dtype,
            "cpu_bf16_native": cpu_supports_bf16(),
            "rows": rows,
        },
    )


def cartpole_config(seed: int, max_steps: int, run_dir: Path, replay_ratio: float) -> DreamerConfig:
    seq_len = 32
    return DreamerConfig(
        env_id="CartPole-v1",
        num_envs=1,
        num_steps=max_steps,
        seed=seed,
        model=SMALL_CONTROL_MODEL,
        replay=ReplayConfig(
            capacity=max_steps + seq_len,
            seq_len=seq_len,
            batch_size=16,
            min_ready_steps=seq_len,
            safety_margin=seq_len,
        ),
        schedule=ScheduleConfig(replay_ratio=replay_ratio, learning_starts=512, pretrain_steps=1),
        loss=LossConfig(),
        optim=SMALL_CONTROL_OPTIM,
        log_every=250,
        output_dir=str(run_dir),
    )


def rolling_mean_10(episodes: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(env step at which an episode ended, mean return of the last 10 episodes then), one per episode."""
    returns = [float(e["return"]) for e in episodes]
    return [
        (int(e["policy_step"]), sum(returns[max(0, i - 9) : i + 1]) / len(returns[max(0, i - 9) : i + 1]))
        for i, e in enumerate(episodes)
    ]


def first_solved(episodes: list[dict[str, Any]]) -> int | None:
    """The first env step at which the mean return of the last 10 training episodes reaches 475."""
    for step, mean in rolling_mean_10(episodes):
        if mean >= SOLVED:
            return step
    return None


def run_dreamer_cartpole(config: DreamerConfig, stop_when_solved: bool) -> list[dict[str, Any]]:
    run_dir = Path(config.output_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    engine = CPUEngine(config)
    solved = (lambda record: (record["episode/return_mean_10"] or 0) >= SOLVED) if stop_when_solved else None
    engine.run(progress=config.progress, stop_when=solved)
    return [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]


def run_ppo_cartpole(seed: int, max_steps: int, stop_when_solved: bool) -> list[dict[str, Any]]:
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    class Track(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.episodes: list[dict[str, Any]] = []
            self.solved = False

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.episodes.append(
                        {"policy_step": int(self.num_timesteps), "return": float(info["episode"]["r"])}
                    )
                    recent = [e["return"] for e in self.episodes[-10:]]
                    self.solved = self.solved or sum(recent) / len(recent) >= SOLVED
            return not (stop_when_solved and self.solved)

    env = gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))
    track = Track()
    PPO("MlpPolicy", env, seed=seed, verbose=0, device="cpu").learn(max_steps, callback=track)
    return track.episodes


def cartpole_run(agent: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One agent's CartPole run: its episodes (end step, return) and wall time. Finished runs are kept in
    ``runs/benchmarks/dreamer/cartpole/<agent>_seed<k>.json`` and reused, so seeds can run in separate
    processes side by side and a last call (``--report-only``) collects them."""
    saved = runs_dir(args) / "cartpole" / f"{agent}_seed{seed}.json"
    settings = {"max_steps": args.max_steps, "replay_ratio": args.replay_ratio, "stop": args.stop_when_solved}
    if agent == "dreamer":  # a changed Dreamer config must not reuse runs saved under the old one
        run_dir = runs_dir(args) / "cartpole" / f"seed{seed}"
        config = cartpole_config(seed, args.max_steps, run_dir, args.replay_ratio)
        if args.quick:
            config = dataclasses.replace(config, progress=False)
        settings |= {"model": dataclasses.asdict(config.model), "optim": dataclasses.asdict(config.optim)}
    if saved.is_file() and not args.rerun:
        run = json.loads(saved.read_text())
        if _current_names(run.get("settings")) == settings:
            return run | {"settings": settings}
    if args.report_only:
        raise SystemExit(f"no finished {agent} run for seed {seed} with these settings ({portable(saved)}): run it")
    start = time.perf_counter()
    if agent == "dreamer":
        episodes = run_dreamer_cartpole(config, args.stop_when_solved)
    else:
        episodes = run_ppo_cartpole(seed, args.max_steps, args.stop_when_solved)
    run = {"episodes": episodes, "wall_s": time.perf_counter() - start, "settings": settings}
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(run))
    return run


def _current_names(settings: Any) -> Any:
    """A saved run's settings with the optimiser's fields under their current names (runs saved before the
    learning rates' rename hold ``world_lr``, ``actor_lr``, ``critic_lr``)."""
    if not isinstance(settings, dict) or not isinstance(settings.get("optim"), dict):
        return settings
    renames = renamed_fields_of(OptimConfig)
    return settings | {"optim": {renames.get(key, key): value for key, value in settings["optim"].items()}}


def cartpole(args: argparse.Namespace) -> None:
    """(2) Env steps until the mean of the last 10 training episodes reaches 475, Dreamer vs SB3 PPO."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results: dict[str, Any] = {
        "label": args.label,
        "max_steps": args.max_steps,
        "threshold": SOLVED,
        "runs": [],
    }
    fig, ax = plt.subplots(figsize=(7, 4))
    for seed in args.seeds:
        for agent in args.agents:
            run = cartpole_run(agent, seed, args)
            solved = first_solved(run["episodes"])
            results["runs"].append(
                {
                    "agent": agent,
                    "seed": seed,
                    "solved_at": solved,
                    "wall_s": run["wall_s"],
                    "settings": run.get("settings"),
                }
            )
            print(f"{agent} seed {seed}: solved at {solved} env steps ({run['wall_s']:.0f} s)")
            points = rolling_mean_10(run["episodes"])
            if points:
                ax.plot(
                    *zip(*points, strict=True),
                    label=f"{agent} seed {seed}",
                    color="C0" if agent == "dreamer" else "C1",
                    alpha=0.4 + 0.2 * (seed % 3),
                )
    for agent in args.agents:
        steps = [r["solved_at"] for r in results["runs"] if r["agent"] == agent]
        solved = sorted(s for s in steps if s is not None)
        results[f"{agent}_solved_runs"] = f"{len(solved)}/{len(steps)}"
        results[f"{agent}_median_solved_at"] = solved[len(solved) // 2] if len(solved) == len(steps) else None
        print(f"{agent}: solved {len(solved)}/{len(steps)} runs, at {solved} env steps")
    ax.axhline(SOLVED, color="gray", linestyle="--")
    ax.set(xlabel="env steps", ylabel="mean return (last 10 episodes)", title="CartPole-v1")
    ax.legend(fontsize=7)
    fig.savefig(results_dir(args) / "dreamer_cartpole.png", dpi=120, bbox_inches="tight")
    write_result(args, "cartpole", results)


def ratio(args: argparse.Namespace) -> None:
    """(3) Replay ratio actually done vs target after a short CartPole run per target."""
    rows = []
    for target in args.ratios:
        cfg = cartpole_config(0, args.max_steps, runs_dir(args) / "ratio" / f"r{target}", target)
        cfg = dataclasses.replace(
            cfg,
            model=model_size("tiny"),
            replay=dataclasses.replace(
                cfg.replay, batch_size=2, seq_len=8, min_ready_steps=8, safety_margin=8
            ),
            loss=dataclasses.replace(cfg.loss, horizon=3),
        )
        record = CPUEngine(cfg).run(progress=False)
        actual = record["replay/ratio_actual"]
        rows.append({"target": target, "actual": actual, "relative_error": abs(actual - target) / target})
        print(f"target {target}: actual {actual:.4f} ({100 * abs(actual - target) / target:.2f}% off)")
    write_result(args, "ratio", {"label": args.label, "max_steps": args.max_steps, "rows": rows})


def apply_quick(args: argparse.Namespace) -> None:
    """``--quick`` sizes: one short step, run or target per command (the figures mean nothing)."""
    if not args.quick:
        return
    if args.command == "speed":  # sheeprl_dreamer_step.py --quick measures XS at the same 2 x 8 batch
        args.sizes, args.steps, args.batch_size, args.seq_len = ["tiny", "XS"], 1, 2, 8
    if args.command == "cartpole":  # learning starts at 512 env steps
        args.seeds, args.max_steps, args.replay_ratio = [0], 600, 0.1
    if args.command == "ratio":
        args.ratios, args.max_steps = [0.5], 700


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--label", default="", help="e.g. 'shared-load' when other jobs share the CPU")
    parser.add_argument("--threads", type=int, default=1)
    sub = parser.add_subparsers(dest="command", required=True)
    common = [results_parser()]
    p = sub.add_parser("speed", parents=common)
    p.add_argument("--sizes", nargs="+", default=["tiny", "XS"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--dtype", nargs="+", choices=["float32", "bfloat16"], default=["float32", "bfloat16"],
                   help="precisions to time side by side, float32 first (default: both)")
    p = sub.add_parser("cartpole", parents=common)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--agents", nargs="+", choices=["dreamer", "ppo"], default=["dreamer", "ppo"])
    p.add_argument("--max-steps", type=int, default=30_000)
    p.add_argument("--replay-ratio", type=float, default=0.5)
    p.add_argument("--rerun", action="store_true", help="run again even where a finished run is saved")
    p.add_argument("--report-only", action="store_true", help="only collect saved runs into the JSON/PNG")
    p.add_argument(
        "--keep-going",
        dest="stop_when_solved",
        action="store_false",
        help="train on to --max-steps after solving (default: stop at the first log after solving)",
    )
    p = sub.add_parser("ratio", parents=common)
    p.add_argument("--ratios", type=float, nargs="+", default=[0.1, 0.5, 1.0])
    p.add_argument("--max-steps", type=int, default=2000)
    args = parser.parse_args(argv)
    apply_quick(args)
    torch.set_num_threads(args.threads)
    {"speed": speed, "cartpole": cartpole, "ratio": ratio}[args.command](args)


if __name__ == "__main__":
    main()
