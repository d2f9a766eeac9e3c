"""Writes the results pages' tables from the committed results JSON, so that no figure in them is typed by hand.

    python tools/results_tables.py           # rewrite every table below
    python tools/results_tables.py --check   # exit 1 when one is stale

A table lives in its page between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``; ``tests/test_doc_figures.py``
fails when one differs from what this script writes.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's benchmarks package
from benchmarks.table import replace_table, sync_pages

RESULTS = REPO / "benchmarks" / "results"

# The tiny model's modes in benchmarks/csr_dual_lora_vs_dapo.py, in the order the page reads them.
DUAL_LORA_MODES = {
    "dapo": "DAPO (λ = 0)",
    "separate": "separate",
    "separate-own-clip": "separate, each adapter clipped on its own (`make demo`)",
    "stacked": "stacked",
    "shared": "shared",
    "iwm": "iwm (4 world-model steps, then DAPO)",
    "shared-l0.05": "shared at λ = 0.05",
    "shared-capped": "shared, world-model gradient capped at the policy's (`auxiliary_grad_ratio=1.0`)",
    "stacked-capped": "stacked, capped likewise",
    "shared-capped-0.1": "shared, capped at 0.1x the policy's",
    "shared-projected": "shared, PCGrad projection, then capped at 1x (`auxiliary_projection`)",
    "echo": "ECHO, weight 0.1 (the policy learns the replies itself)",
    "echo-0.01": "ECHO, weight 0.01",
}


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def render_dual_lora(results: Path = RESULTS) -> str:
    """The tiny-model table of ``csr_dual_lora_vs_dapo.json``: one row per mode."""
    data = json.loads((results / "csr_dual_lora_vs_dapo.json").read_text())
    runs = data["runs"]["tiny-d1"]
    threshold = round(100 * data["thresholds"]["tiny"])
    header = (f"| mode | seeds | steps | d1 validation at the end, % (per seed) | mean | tasks to {threshold}% "
              "(per seed) | world-model token accuracy, % | d2 validation, % | s per step | vs DAPO |")
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|"]
    for mode, label in DUAL_LORA_MODES.items():
        run = runs[mode]
        seeds = " / ".join(str(seed) for seed in run["seeds"])
        steps = " / ".join(sorted({str(step) for step in run["steps_done"]}))
        final = " / ".join(_percent(value) for value in run["final_success"])
        tasks = " / ".join("—" if value is None else f"{value:,}" for value in run["tasks_to_threshold"])
        accuracy = " / ".join(_percent(value) for value in run["final_wm_token_accuracy"])
        d2 = run.get("final_success_by_difficulty", {}).get("2")
        d2_text = " / ".join(_percent(value) for value in d2) if d2 else "—"
        lines.append(f"| {label} | {seeds} | {steps} | {final} | {_percent(run['final_success_mean'])} | {tasks} | "
                     f"{accuracy} | {d2_text} | {run['seconds_per_step']:.1f} | {run['step_time_vs_dapo']:.2f} |")
    return "\n".join(lines)


def render_csr_phone_success(results: Path = RESULTS) -> str:
    """Scripted expert vs random policy per difficulty, from ``csr_phone_success.json``."""
    data = json.loads((results / "csr_phone_success.json").read_text())
    lines = ["| difficulty | expert success | expert tool calls | random success | random tool calls |",
             "|---|---|---|---|---|"]
    for row in data["results"]:
        expert, random = row["expert"], row["random"]
        lines.append(f"| {row['difficulty']} | {_percent(expert['success_rate'])}% | {expert['mean_turns']:.2f} | "
                     f"{_percent(random['success_rate'])}% | {random['mean_turns']:.2f} |")
    return "\n".join(lines)


SCALEOUT_LABELS = {"in-process": "in process (2 torch threads)", "in-process-1-thread": "in process, 1 torch thread",
                   "ray-1-sync": "Ray, 1 worker, sync", "ray-1-async": "Ray, 1 worker, async",
                   "ray-2-sync": "Ray, 2 workers, sync", "ray-2-async": "Ray, 2 workers, async"}


def render_ray_scaleout(results: Path = RESULTS) -> str:
    """In process vs Ray rollout workers, from ``ray_scaleout.json`` (medians of the repeats)."""
    data = json.loads((results / "ray_scaleout.json").read_text())
    lines = ["| configuration | steps/s | learner waits for rollouts (s/step) | update (s/step) | workers busy | lag |",
             "|---|---|---|---|---|---|"]
    for name, label in SCALEOUT_LABELS.items():
        row = data["results"][name]
        busy = f"{100 * row['worker_utilisation']:.0f}%" if name.startswith("ray") else "-"
        lines.append(f"| {label} | {row['steps_per_s']:.2f} | {row['phases_s']['rollout']:.2f} | "
                     f"{row['phases_s']['update']:.2f} | {busy} | {row['policy_lag_mean']:.0f} |")
    return "\n".join(lines)


# page -> {table name: renderer}
TABLES: dict[str, dict[str, Callable[[Path], str]]] = {
    "docs/results/dual-lora.md": {"dual-lora-table": render_dual_lora},
    "docs/envs/csr-phone.md": {"csr-phone-success-table": render_csr_phone_success},
    "docs/results/scale-out.md": {"ray-scaleout-table": render_ray_scaleout},
}


def render_page(page: str, text: str, results: Path = RESULTS) -> str:
    """The page's text with each of its tables rewritten from ``results``."""
    for name, render in TABLES[page].items():
        text = replace_table(text, render(results), f"<!-- {name}:start -->", f"<!-- {name}:end -->")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing: exit 1 when a table is stale")
    args = parser.parse_args(argv)
    pages = {REPO / page: functools.partial(render_page, page) for page in TABLES}
    return sync_pages(pages, args.check, "python tools/results_tables.py")


if __name__ == "__main__":
    raise SystemExit(main())
