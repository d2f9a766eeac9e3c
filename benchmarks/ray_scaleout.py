"""GRPO in process vs on Ray rollout workers (1 and 2 workers, synchronous and asynchronous with lag 1): steps
per second and the time of each phase, same tiny model, task and budget.

Every configuration trains a fresh ``GRPOTrainer`` (same seed) for ``--steps`` steps; the first step is a
warm-up (workers load weights, caches fill) and is not timed. The configurations run in turn, ``--repeats``
times (A B C ... A B C ...), and each figure is the median over repeats. Per configuration:
  * ``steps_per_s``: timed steps over their wall time,
  * ``phases_s``: the learner's mean seconds per step waiting for rollouts (``rollout``), computing rewards,
    padding and advantages (``prepare``), updating (``update``) and publishing weights (``sync``), and the
    workers' mean seconds loading new weights (``weight_load``) and generating (``worker_busy``),
  * ``worker_utilisation``: worker generation seconds over (step wall time x workers),
  * ``policy_lag_mean``: updates between the weights that sampled a trained batch and the learner's.
Ray's start-up (``ray.init`` and the workers' construction) is reported apart (``startup_s``). The learner
process uses torch's default threads (one per core) except in ``in-process-1-thread``, which separates the
effect of threads from that of Ray: a Ray worker generates with one thread, and a tiny model generates faster
on one thread than on two.

A scaling model, from the one-worker synchronous phase times, predicts steps/s for N inference workers and M
data-parallel learners: synchronous ``1 / (gen / N + prepare + update / M + sync)``, asynchronous
``1 / max(gen / N, prepare + update / M + sync)`` (``gen`` = a worker's generation seconds per step). The
prediction assumes every worker and learner has its own device; in the committed run they share two CPU cores.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/ray_scaleout.py            # 10 steps x 3 repeats, MathQA-v1
    OMP_WAIT_POLICY=PASSIVE python benchmarks/ray_scaleout.py --quick    # 2 steps, 3 configurations

Writes ``ray_scaleout.json`` and ``ray_scaleout.png`` to ``benchmarks/results/`` (``--results-dir``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import results_dir, results_parser, write_json

PHASES = ("rollout", "prepare", "update", "sync", "weight_load", "worker_busy")
_PHASE_KEYS = {"rollout": "time/rollout_s", "prepare": "time/prepare_s", "update": "time/update_s",
               "sync": "time/sync_s", "weight_load": "time/weight_load_s", "worker_busy": "time/worker_busy_s"}


@dataclass(frozen=True)
class Setting:
    """One configuration: the runtime, its workers, whether rollouts run ahead of the update, and the learner
    process's torch threads (None: torch's default, one per core; a Ray worker always has one)."""

    name: str
    runtime: str = "local"
    workers: int = 1
    asynchronous: bool = False
    learner_threads: int | None = None

    def overrides(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "num_rollout_workers": self.workers, "async_rollouts": self.asynchronous}


SETTINGS = (
    Setting("in-process"),
    Setting("in-process-1-thread", learner_threads=1),
    Setting("ray-1-sync", "ray", 1),
    Setting("ray-1-async", "ray", 1, True),
    Setting("ray-2-sync", "ray", 2),
    Setting("ray-2-async", "ray", 2, True),
)


def base_config(args: argparse.Namespace, output_dir: str) -> dict[str, Any]:
    """The shared budget: the tiny model with LoRA on MathQA-v1, DAPO defaults, ``--steps`` steps."""
    sizes = ({"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 16, "minibatch_size": 4} if args.quick
             else {"prompts_per_step": 8, "group_size": 8, "max_new_tokens": 64, "minibatch_size": 32})
    return {"env_id": "MathQA-v1", "model": "tiny", "num_steps": args.steps, "eval_every": 0, "progress": False,
            "seed": 0, "output_dir": output_dir, **sizes}


def run_setting(setting: Setting, args: argparse.Namespace) -> dict[str, Any]:
    """Train one configuration; its timed steps' figures."""
    threads = torch.get_num_threads()
    torch.set_num_threads(setting.learner_threads or os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        trainer = GRPOTrainer(GRPOConfig(**base_config(args, folder), **setting.overrides()))
        startup = time.perf_counter() - start
        try:
            rows = [trainer.train_step() for _ in range(args.steps)]
        finally:
            trainer.close()
            torch.set_num_threads(threads)
    timed = rows[1:]  # the first step is a warm-up
    wall = sum(row["time/step_s"] for row in timed)
    return {
        "steps_per_s": len(timed) / wall,
        "phases_s": {phase: statistics.mean(row[_PHASE_KEYS[phase]] for row in timed) for phase in PHASES},
        "worker_utilisation": statistics.mean(row["perf/worker_utilisation"] for row in timed),
        "policy_lag_mean": statistics.mean(row["rollout/policy_lag_mean"] for row in timed),
        "startup_s": startup,
        "reward_mean": statistics.mean(row["rollout/reward_mean"] for row in rows),
    }


def median_over_repeats(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over repeats (``repeats`` keeps every run's steps/s)."""
    return {
        "steps_per_s": statistics.median(r["steps_per_s"] for r in runs),
        "phases_s": {p: statistics.median(r["phases_s"][p] for r in runs) for p in PHASES},
        "worker_utilisation": statistics.median(r["worker_utilisation"] for r in runs),
        "policy_lag_mean": statistics.median(r["policy_lag_mean"] for r in runs),
        "startup_s": statistics.median(r["startup_s"] for r in runs),
        "repeats_steps_per_s": [r["steps_per_s"] for r in runs],
    }


def scaling_model(phases: dict[str, float]) -> dict[str, dict[str, float]]:
    """Predicted steps/s for N inference workers and M learners from one worker's synchronous phase times."""
    generate = phases["worker_busy"] + phases["weight_load"]
    learner = phases["update"]
    fixed = phases["prepare"] + phases["sync"]
    prediction = {}
    for workers, learners in ((1, 1), (2, 1), (4, 4), (8, 8)):
        prediction[f"{workers}+{learners}"] = {
            "sync_steps_per_s": 1 / (generate / workers + fixed + learner / learners),
            "async_steps_per_s": 1 / max(generate / workers, fixed + learner / learners),
        }
    return prediction


def plot(results: dict[str, Any], path: Path) -> None:
    """Stacked learner phase seconds per step for every configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    bottom = [0.0] * len(names)
    for phase in ("rollout", "prepare", "update", "sync"):
        values = [results[name]["phases_s"][phase] for name in names]
        ax.bar(names, values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values)]
    for index, name in enumerate(names):
        ax.text(index, bottom[index], f"{results[name]['steps_per_s']:.2f} steps/s", ha="center", va="bottom",
                fontsize=8)
    ax.set_ylabel("learner seconds per step")
    ax.set_ylim(0, 1.15 * max(bottom))
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    ax.set_title("GRPO on MathQA-v1, tiny model: where a step's time goes (2 CPU cores)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], parents=[results_parser()])
    parser.add_argument("--steps", type=int, default=10, help="steps per configuration (the first is a warm-up)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over all configurations")
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG from the results JSON")
    args = parser.parse_args(argv)
    folder = results_dir(args)
    if args.plot_only:
        plot(json.loads((folder / "ray_scaleout.json").read_text())["results"], folder / "ray_scaleout.png")
        return
    if args.quick:
        args.steps, args.repeats = 2, 1
    settings = [SETTINGS[0], SETTINGS[2], SETTINGS[3]] if args.quick else SETTINGS
    import ray

    ray.init(num_cpus=max(s.workers for s in settings), include_dashboard=False, log_to_driver=False)
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in settings}
    try:
        for repeat in range(args.repeats):
            for setting in settings:
                result = run_setting(setting, args)
                runs[setting.name].append(result)
                print(f"repeat {repeat} {setting.name:19s} {result['steps_per_s']:.3f} steps/s  "
                      + "  ".join(f"{p} {v:.2f}s" for p, v in result["phases_s"].items()))
    finally:
        ray.shutdown()
    results = {name: median_over_repeats(values) for name, values in runs.items()}
    reference = results["in-process"]["steps_per_s"]
    for figures in results.values():
        figures["speed_vs_in_process"] = figures["steps_per_s"] / reference
    payload = {
        "command": "python benchmarks/ray_scaleout.py" + (" --quick" if args.quick else ""),
        "quick": args.quick,
        "config": base_config(args, "runs/ray_scaleout"),
        "steps": args.steps, "repeats": args.repeats,
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
                    "load_average": os.getloadavg()},
        "results": results,
        "scaling_model": scaling_model(results["ray-1-sync"]["phases_s"]),
    }
    write_json(folder / "ray_scaleout.json", payload)
    plot(results, folder / "ray_scaleout.png")
    for name, figures in results.items():
        print(f"{name:19s} {figures['steps_per_s']:.3f} steps/s ({figures['speed_vs_in_process']:.2f}x in-process), "
              f"lag {figures['policy_lag_mean']:.1f}, workers busy {100 * figures['worker_utilisation']:.0f}%")


if __name__ == "__main__":
    main()
