"""CSRPhone-v1 throughput in one process: env steps/s under the expert, random and sampled-call policies.

Usage: ``python benchmarks/csr_env_throughput.py [--steps 200000] [--quick] [--results-dir DIR]``; writes
``csr_env_throughput.json`` to ``benchmarks/results/`` (see ``--help``).

For each policy the loop runs ``--steps`` env steps (difficulty drawn per episode, resets included) and
reports
  * ``env_steps_per_s``: steps divided by the wall time spent inside ``env.reset``/``env.step`` (the goal:
    >= 20,000 for the expert),
  * ``loop_steps_per_s``: steps divided by the wall time of the whole loop, policy included,
  * ``*_per_cpu_s``: the same per CPU-second of this process (``time.process_time``), which stays meaningful
    when the machine's cores are shared with other jobs (the load average is recorded too).
Success rates over 1,000 episodes per difficulty are the job of ``python -m worldgym.demo``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worldgym.envs.csr_phone.env import CSRPhoneEnv
from worldgym.envs.csr_phone.policies import ExpertPolicy, RandomPolicy
from worldgym.spaces import ToolCall

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import results_dir, results_parser, write_json

GOAL_STEPS_PER_S = 20_000
QUICK_STEPS = 2_000


class SampledCalls:
    """Calls drawn from the action space (``action_space.sample()``), ignoring observations."""

    def __init__(self, env: CSRPhoneEnv, seed: int) -> None:
        self.space = env.action_space
        self.space.seed(seed)

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Nothing to remember."""

    def act(self, observation: str, info: dict[str, Any]) -> ToolCall:
        """A random valid call."""
        return self.space.sample()


def measure(make_policy: Callable[[CSRPhoneEnv], Any], steps: int, seed: int) -> dict[str, float]:
    """Run ``steps`` env steps with the policy; time the env alone and the whole loop (wall and CPU)."""
    env = CSRPhoneEnv()
    policy = make_policy(env)
    env_wall = env_cpu = 0.0
    episodes = successes = 0
    loop_wall, loop_cpu = time.perf_counter(), time.process_time()
    wall, cpu = time.perf_counter(), time.process_time()
    observation, info = env.reset(seed=seed)
    env_wall, env_cpu = time.perf_counter() - wall, time.process_time() - cpu
    policy.reset(observation, info)
    for _ in range(steps):
        action = policy.act(observation, info)
        wall, cpu = time.perf_counter(), time.process_time()
        observation, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            episodes += 1
            successes += int(info["success"])
            observation, info = env.reset()
        env_wall += time.perf_counter() - wall
        env_cpu += time.process_time() - cpu
        if terminated or truncated:
            policy.reset(observation, info)
    loop_wall, loop_cpu = time.perf_counter() - loop_wall, time.process_time() - loop_cpu
    return {
        "steps": steps,
        "episodes": episodes,
        "success_rate": successes / max(episodes, 1),
        "env_steps_per_s": steps / env_wall,
        "loop_steps_per_s": steps / loop_wall,
        "env_steps_per_cpu_s": steps / env_cpu,
        "loop_steps_per_cpu_s": steps / loop_cpu,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a summary and write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[results_parser()])
    parser.add_argument("--steps", type=int, default=None,
                        help=f"env steps per policy (default 200,000; {QUICK_STEPS:,} with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = QUICK_STEPS if args.quick else 200_000
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    policies: dict[str, Callable[[CSRPhoneEnv], Any]] = {
        "expert": lambda env: ExpertPolicy(),
        "random": lambda env: RandomPolicy(args.seed),
        "sampled_calls": lambda env: SampledCalls(env, args.seed),
    }
    results: dict[str, Any] = {
        "env": "CSRPhone-v1 (difficulty drawn per episode)",
        "quick": args.quick,
        "goal_env_steps_per_s": GOAL_STEPS_PER_S,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_before": os.getloadavg()[0],
        "policies": {},
    }
    for name, make_policy in policies.items():
        figures = measure(make_policy, args.steps, args.seed)
        results["policies"][name] = figures
        print(f"{name:>14}: env {figures['env_steps_per_s']:>9,.0f} steps/s wall "
              f"({figures['env_steps_per_cpu_s']:>9,.0f} per CPU-s) | loop incl. policy "
              f"{figures['loop_steps_per_s']:>9,.0f} steps/s wall "
              f"({figures['loop_steps_per_cpu_s']:>9,.0f} per CPU-s)"
              f" | {figures['episodes']} episodes, success {figures['success_rate']:.1%}")
    results["load_average_after"] = os.getloadavg()[0]
    expert = results["policies"]["expert"]
    results["goal_met_wall"] = expert["env_steps_per_s"] >= GOAL_STEPS_PER_S
    results["goal_met_cpu"] = expert["env_steps_per_cpu_s"] >= GOAL_STEPS_PER_S
    verdict = {True: "met", False: "NOT met"}
    print(f"goal {GOAL_STEPS_PER_S:,} expert env steps/s: wall {verdict[results['goal_met_wall']]}, "
          f"per CPU-s {verdict[results['goal_met_cpu']]} "
          f"(load average {results['load_average_before']:.2f} -> {results['load_average_after']:.2f} "
          f"on {os.cpu_count()} cores)")
    write_json(results_dir(args) / "csr_env_throughput.json", results, indent=2)
    return results


if __name__ == "__main__":
    main()
