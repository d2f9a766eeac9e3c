"""CSRPhone-v1 success of the scripted expert and a random policy on every difficulty; trains nothing.

Run ``python -m worldgym.demo`` (``--help`` for the flags). Prints a rich table; ``--json PATH`` also writes
the figures as JSON. (``make demo`` is another thing: it trains the dual-LoRA agent.)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from worldgym.envs.csr_phone.env import CSRPhoneEnv
from worldgym.envs.csr_phone.evaluation import evaluate_policy
from worldgym.envs.csr_phone.policies import ExpertPolicy, RandomPolicy
from worldgym.envs.csr_phone.world import DIFFICULTIES, SPLITS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(prog="python -m worldgym.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000, help="episodes per policy and difficulty")
    parser.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    parser.add_argument("--split", choices=SPLITS, default="test", help="which companies the tasks come from")
    parser.add_argument("--difficulties", type=int, nargs="+", default=sorted(DIFFICULTIES),
                        choices=sorted(DIFFICULTIES), help="difficulty levels to run")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    return args


def run_demo(episodes: int, seed: int, split: str, difficulties: list[int],
             progress: Progress | None = None) -> dict[str, Any]:
    """Success statistics of both policies per difficulty, as a JSON-friendly dict."""
    policies = {"expert": ExpertPolicy, "random": lambda: RandomPolicy(seed)}
    total = episodes * len(policies) * len(difficulties)
    task = progress.add_task("episodes", total=total) if progress else None
    rows = []
    for difficulty in difficulties:
        row: dict[str, Any] = {"difficulty": difficulty}
        for name, make_policy in policies.items():
            env = CSRPhoneEnv(difficulty=difficulty, split=split)
            advance = (lambda n: progress.advance(task, n)) if progress else None
            row[name] = evaluate_policy(env, make_policy, episodes, seed=seed, progress=advance).as_dict()
        rows.append(row)
    return {"env": "CSRPhone-v1", "split": split, "episodes_per_cell": episodes, "seed": seed,
            "results": rows}


def results_table(results: dict[str, Any]) -> Table:
    """The results as a rich table."""
    table = Table(title=f"CSRPhone-v1 success rate ({results['episodes_per_cell']} episodes per cell, "
                        f"{results['split']} split)")
    for column in ("Difficulty", "Expert success", "Expert turns", "Random success", "Random turns"):
        table.add_column(column, justify="right")
    for row in results["results"]:
        expert, random = row["expert"], row["random"]
        table.add_row(str(row["difficulty"]), f"{expert['success_rate']:.1%}", f"{expert['mean_turns']:.2f}",
                      f"{random['success_rate']:.1%}", f"{random['mean_turns']:.2f}")
    return table


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the demo from the command line."""
    args = parse_args(argv)
    console = Console()
    start = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        results = run_demo(args.episodes, args.seed, args.split, args.difficulties, progress)
    results["seconds"] = round(time.perf_counter() - start, 2)
    console.print(results_table(results))
    console.print(f"done in {results['seconds']} s")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        console.print(f"wrote {args.json}")
    return results


if __name__ == "__main__":
    main()
