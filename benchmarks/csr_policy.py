"""CSR policies on CSRPhone-v1's 0/1 task reward: the copying random baseline, warm starts and DAPO, by difficulty.

Every figure is greedy success on validation-split companies (never seen in training), episode ``i`` seeded
``10**6 + i``. Each stage saves its own JSON under ``benchmarks/results/csr_policy/``; ``report`` merges them
into ``benchmarks/results/csr_policy.json`` and draws ``csr_policy.png``.

    python benchmarks/csr_policy.py random                                  # RandomPolicy, d1-d5 (seconds)
    python benchmarks/csr_policy.py warm-start --model tiny                 # SFT (cached) + eval, free/constrained
    python benchmarks/csr_policy.py warm-start --model smollm2-135m --decodings free
    python benchmarks/csr_policy.py warm-start --model smollm2-135m --decodings free --mistake-rate 0.15  # DART
    python benchmarks/csr_policy.py warm-start --model smollm2-135m --decodings free --difficulties 3 \
        --mistake-rate 0.2 --continue-on 3          # the preset's warm start, trained on at d3 with mistakes
    python benchmarks/csr_policy.py dapo --model tiny --decoding constrained --difficulty 1 --seed 0
    python benchmarks/csr_policy.py dapo --model smollm2-135m --decoding free --difficulty 3 --seed 0
    python benchmarks/csr_policy.py sampled --model smollm2-135m --decoding free --difficulty 3  # by temperature
    python benchmarks/csr_policy.py report

``dapo`` runs are resumable: rerunning the same command continues from the run's last checkpoint
(``runs/csr_policy/<model>-<decoding>-d<difficulty>-s<seed>/``). Every stage takes ``--results-dir`` (where the
part files and the report go) and ``--quick`` (a small warm start, 1 DAPO step, a few episodes, d1; run folders and
the warm-start cache under ``<results-dir>/runs/``): ``random --quick``, ``warm-start --quick --model tiny``,
``dapo --quick --model tiny --decoding constrained --difficulty 1`` and ``report --quick`` check every stage in
under a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import worldgym  # noqa: F401  (registers the ids)
from worldgym.agents.grpo import GRPOTrainer, grpo_presets
from worldgym.agents.llm.envs import make_text_env
from worldgym.agents.llm.evaluation import evaluate_chat_policy
from worldgym.agents.llm.warm_start import WarmStart

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import (
    add_batch_flags,
    batch_command,
    batch_settings,
    results_dir,
    results_parser,
    set_torch_threads,
    temperature_suffix,
    train_in_chunks,
    write_json,
)
from benchmarks.csr_warm_starts import (
    DIFFICULTIES,
    load_chosen,
    warm_start_command,
    warm_start_flags,
    warm_start_suffix,
)

PRESETS = grpo_presets("CSRPhone-v1")  # the CSR presets, per model

MAX_TURNS = 16  # the env's own limit: the random baseline gets the same budget


def runs_dir(args: argparse.Namespace) -> Path:
    """Run folders and the warm-start cache: ``runs/`` (relative to the working directory), or inside the
    results folder with ``--quick``."""
    return results_dir(args) / "runs" if args.quick else Path("runs")


def warm_start(args: argparse.Namespace) -> WarmStart:
    config = PRESETS[args.model].warm_start
    if args.quick:  # a few expert chats at d1, one epoch: trains in about a second
        config = replace(config, difficulties=(1,), episodes_per_difficulty=8, epochs=1)
    return load_chosen(config, args, runs_dir(args) / "warm_starts")


def warm_start_label(args: argparse.Namespace) -> str:
    """The part-file name of the warm start ``args`` select (the preset's, or one with mistakes / continued)."""
    return f"{args.model}-warm_start{warm_start_suffix(args)}"


def evaluate(ws: WarmStart, model: str, difficulty: int, episodes: int, decoding: str, split: str = "validation",
             temperature: float = 0.0, max_turns: int = MAX_TURNS) -> dict[str, Any]:
    engine = PRESETS[model].engine(ws.model, ws.tokenizer)
    kwargs = {"split": split, "difficulty": difficulty}
    start = time.perf_counter()
    metrics, _ = evaluate_chat_policy(engine, ws.tokenizer, lambda: make_text_env("CSRPhone-v1", kwargs),
                                      episodes, max_turns, PRESETS[model].max_new_tokens, decoding,
                                      max_episode_tokens=PRESETS[model].max_episode_tokens,
                                      temperature=temperature)
    return {"success": metrics["eval/success_rate"], "copy_probe": metrics.get("eval/copy_probe"),
            "episodes": episodes, "seconds": time.perf_counter() - start}


# ---------------------------------------------------------------- stages
def run_random(args: argparse.Namespace) -> None:
    from worldgym.demo import run_demo

    results = run_demo(args.episodes, 0, "validation", list(DIFFICULTIES))
    success = {str(row["difficulty"]): row["random"]["success_rate"] for row in results["results"]}
    _write_part(args, "random_copy", {"success": success, "episodes": args.episodes,
                                      "command": "python benchmarks/csr_policy.py random" + _quick(args)})
    print("random (copying) baseline:", success)


def run_warm_start(args: argparse.Namespace) -> None:
    """Evaluate the (cached) warm start; rows are merged into the model's part file after every difficulty,
    so difficulties can be run in separate invocations (and an interrupted run keeps what it measured)."""
    ws = warm_start(args)
    ws.model.eval()
    name = warm_start_label(args)
    path = results_dir(args) / "csr_policy" / f"{name}.json"
    part: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    if part.get("key") != ws.path.name:  # rows of another warm start are not merged with this one's
        part = {}
    part.update({"warm_start": ws.summary | {"losses": None}, "key": ws.path.name})
    for decoding in args.decodings:
        rows = part.get(decoding, {}).get("by_difficulty", {})
        for difficulty in args.difficulties:
            rows[str(difficulty)] = evaluate(ws, args.model, difficulty, args.episodes, decoding)
            print(args.model, decoding, f"d{difficulty}", rows[str(difficulty)])
            probes = [r["copy_probe"] for r in rows.values() if r["copy_probe"] is not None]
            part[decoding] = {"success": {d: r["success"] for d, r in sorted(rows.items())},
                              "copy_probe": float(np.mean(probes)) if probes else None, "by_difficulty": rows}
            _write_part(args, name, part)


def run_dapo(args: argparse.Namespace) -> None:
    preset = PRESETS[args.model]
    ws = warm_start(args)
    run = (f"{args.decoding}-d{args.difficulty}-t{args.max_turns}-s{args.seed}{temperature_suffix(args.temperature)}"
           + warm_start_suffix(args))
    name = f"{args.model}-{run}"
    quick = {"prompts_per_step": 2, "group_size": 2, "progress": False} if args.quick else {}
    overrides = batch_settings(args) | quick
    config = preset.grpo_config(args.difficulty, decoding=args.decoding, num_steps=args.steps,
                                max_turns=args.max_turns,
                                eval_every=args.eval_every, eval_episodes=args.episodes, checkpoint_every=1,
                                seed=args.seed, output_dir=str(runs_dir(args) / "csr_policy" / name), **overrides)
    trainer = GRPOTrainer(config, model=ws.model, tokenizer=ws.tokenizer,
                          make_engine=lambda policy: preset.engine(policy, ws.tokenizer))
    resumed = trainer.resume_latest()
    if resumed is not None:
        print(f"resumed from {resumed} at step {trainer.step}")
    part_name = f"{args.model}-dapo-{run}"
    command = (f"python benchmarks/csr_policy.py dapo --model {args.model} --decoding {args.decoding} "
               f"--difficulty {args.difficulty} --seed {args.seed} --steps {args.steps} --max-turns {args.max_turns} "
               f"--eval-every {args.eval_every} --episodes {args.episodes}" + batch_command(args)
               + warm_start_command(args) + _quick(args))

    def write_part() -> None:  # after every validation: a stopped run keeps its curve so far
        curve = [(m["step"], m["eval/success_rate"]) for m in trainer.history if "eval/success_rate" in m]
        steps = [m for m in trainer.history if "rollout/success_rate" in m]
        _write_part(args, part_name, {
            "model": args.model, "decoding": args.decoding, "difficulty": args.difficulty, "seed": args.seed,
            "steps": args.steps, "steps_done": trainer.step, "warm_start_key": ws.path.name,
            "warm_start": warm_start_label(args),
            "max_turns": args.max_turns, "temperature": trainer.config.temperature,
            "eval_episodes": args.episodes, "curve": curve,
            # per training step: the sampled (first-round) success, the episodes sampled, whether the update had
            # anything to learn from, and the step's seconds
            "sampled_success": [m["rollout/success_rate"] for m in steps],
            "episodes_sampled": [m["rollout/episodes_sampled"] for m in steps],
            "skipped_updates": [m.get("loss/skipped_update", 0.0) for m in steps],
            "step_seconds": [m["time/step_s"] for m in steps],
            "command": command})
        print("validation success by step:", curve)

    train_in_chunks(trainer, args.eval_every, write_part)


def run_sampled(args: argparse.Namespace) -> None:
    """Success of the warm start's *sampled* episodes on training-split tasks, at each temperature: how often a
    DAPO group at that temperature holds a success to learn from (greedy validation success says less)."""
    ws = warm_start(args)
    ws.model.eval()
    name = f"{args.model}-sampled-{args.decoding}-d{args.difficulty}-t{args.max_turns}{warm_start_suffix(args)}"
    path = results_dir(args) / "csr_policy" / f"{name}.json"
    part: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    if part.get("key") != ws.path.name:
        part = {}
    part.update({"key": ws.path.name, "model": args.model, "decoding": args.decoding, "split": "train",
                 "difficulty": args.difficulty, "max_turns": args.max_turns, "episodes": args.episodes,
                 "command": f"python benchmarks/csr_policy.py sampled --model {args.model} --decoding "
                            f"{args.decoding} --difficulty {args.difficulty} --max-turns {args.max_turns} "
                            f"--episodes {args.episodes} --temperatures "
                            + " ".join(f"{t:g}" for t in args.temperatures) + warm_start_command(args)
                            + _quick(args)})
    rows = part.setdefault("by_temperature", {})
    for temperature in args.temperatures:
        key = f"{temperature:g}"
        rows[key] = evaluate(ws, args.model, args.difficulty, args.episodes, args.decoding, split="train",
                             temperature=temperature, max_turns=args.max_turns)
        print(args.model, f"d{args.difficulty} T={key}", rows[key])
        _write_part(args, name, part)


def run_report(args: argparse.Namespace) -> None:
    results = results_dir(args)
    parts = {path.stem: json.loads(path.read_text()) for path in sorted((results / "csr_policy").glob("*.json"))}
    report: dict[str, Any] = {"split": "validation", "max_turns": MAX_TURNS, "quick": args.quick}
    if "random_copy" in parts:
        report["random_copy"] = parts["random_copy"]["success"]
    for model in PRESETS:
        entry: dict[str, Any] = {}
        if f"{model}-warm_start" in parts:
            ws = parts[f"{model}-warm_start"]
            entry["warm_start"] = {d: ws[d] for d in ("free", "constrained") if d in ws}
        others = {name.removeprefix(f"{model}-warm_start-"): name  # with mistakes, continued
                  for name in parts if name.startswith(f"{model}-warm_start-")}
        for label, name in others.items():
            entry.setdefault("other_warm_starts", {})[label] = {"warm_start": {  # (an entry of the model's shape)
                d: parts[name][d] for d in ("free", "constrained") if d in parts[name]}}
        # DAPO runs and sampled success go with the warm start they started from (by its key)
        targets = {parts.get(f"{model}-warm_start", {}).get("key"): entry}
        for label, name in others.items():
            targets[parts[name].get("key")] = entry["other_warm_starts"][label]
        runs = trained_runs([p for name, p in parts.items() if name.startswith(f"{model}-dapo-")], model)
        preset_key = parts.get(f"{model}-warm_start", {}).get("key")
        for key, target in targets.items():
            # (runs before the key was recorded count as the preset's: their part files are replaced when their
            # command runs again)
            chosen = [r for r in runs if r.get("warm_start_key", preset_key) == key]
            if chosen:
                target["dapo"] = _dapo_by_decoding(chosen)
        unmatched = [r for r in runs if r.get("warm_start_key", preset_key) not in targets]
        if unmatched:  # DAPO from a warm start not evaluated here: not comparable
            print(f"{model}: left out {len(unmatched)} DAPO runs from warm starts without a warm-start part")
        for part in (p for name, p in parts.items() if name.startswith(f"{model}-sampled-")):
            if part.get("key") in targets:  # sampled success of a reported warm start, by temperature
                targets[part["key"]].setdefault("sampled_train_success", {}).setdefault(part["decoding"], {})[
                    str(part["difficulty"])] = {t: row["success"] for t, row in part["by_temperature"].items()}
        if entry:
            report[model] = entry
    write_json(results / "csr_policy.json", report)
    _plot(report, results / "csr_policy.png")
    for name, entry in _warm_start_entries(report):
        _print_entry(name, entry)
    print("random (copying):", report.get("random_copy"))


def _warm_start_entries(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Each model's entry, then its other warm starts' entries as ``"<model> [<label>]"``."""
    entries = []
    for model in PRESETS:
        entry = report.get(model, {})
        entries.append((model, entry))
        entries += [(f"{model} [{label}]", other) for label, other in entry.get("other_warm_starts", {}).items()]
    return entries


def trained_runs(runs: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    """The DAPO runs that took at least one step: a run stopped before its first update holds only the warm
    start's validation, which is not a DAPO seed."""
    trained = []
    for run in runs:
        if _steps_done(run):
            trained.append(run)
        else:
            print(f"{model}: left out a DAPO run with no step done ({run.get('command', run['seed'])})")
    return trained


def _steps_done(run: dict[str, Any]) -> int:
    """Steps a DAPO run's part file says it finished (older part files, written at the end, have no count)."""
    return run.get("steps_done", run["steps"])


def _print_entry(name: str, entry: dict[str, Any]) -> None:
    for decoding, row in entry.get("warm_start", {}).items():
        print(f"{name} warm start ({decoding}):", row["success"], "copy probe", row["copy_probe"])
    for decoding, runs in entry.get("dapo", {}).items():
        for difficulty, row in runs["success"].items():
            print(f"{name} DAPO ({decoding}) d{difficulty}: start {row['start']} -> {row['seeds']} "
                  f"(mean {row['mean']:.3f}, max_turns {row['max_turns']})")


def _dapo_by_decoding(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """DAPO runs' validation success by decoding and difficulty: the final figure per seed, their mean, and
    each seed's curve."""
    summary: dict[str, Any] = {}
    for decoding in sorted({r["decoding"] for r in runs}):
        by_difficulty: dict[str, Any] = {}
        for difficulty in sorted({r["difficulty"] for r in runs if r["decoding"] == decoding}):
            chosen = sorted((r for r in runs if r["decoding"] == decoding and r["difficulty"] == difficulty),
                            key=lambda r: r["seed"])
            finals = [r["curve"][-1][1] for r in chosen]
            by_difficulty[str(difficulty)] = {
                "mean": float(np.mean(finals)), "seeds": finals, "seed_ids": [r["seed"] for r in chosen],
                "start": [r["curve"][0][1] for r in chosen], "curves": [r["curve"] for r in chosen],
                "steps_done": [_steps_done(r) for r in chosen],
                "steps": [r["steps"] for r in chosen],
                "max_turns": sorted({r.get("max_turns", MAX_TURNS) for r in chosen}),
                "temperatures": sorted({r.get("temperature", 1.0) for r in chosen})}
        summary[decoding] = {"success": by_difficulty}
    return summary


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, entry in _warm_start_entries(report):
        for decoding, runs in entry.get("dapo", {}).items():
            for difficulty, row in runs["success"].items():
                # every validated step, over the seeds that got there (a stopped run ends its curve early)
                by_step: dict[int, list[float]] = {}
                for curve in row["curves"]:
                    for step, value in curve:
                        by_step.setdefault(step, []).append(value)
                steps = sorted(by_step)
                (line,) = ax.plot(steps, [np.mean(by_step[s]) for s in steps], marker="o",
                                  label=f"{name} {decoding} d{difficulty}")
                ax.fill_between(steps, [min(by_step[s]) for s in steps], [max(by_step[s]) for s in steps],
                                color=line.get_color(), alpha=0.2)
    ax.set_xlabel("DAPO step")
    ax.set_ylabel("validation success (greedy)")
    ax.set_title("CSRPhone-v1, 0/1 reward: mean and range over the seeds at each step")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _write_part(args: argparse.Namespace, name: str, data: dict[str, Any]) -> None:
    write_json(results_dir(args) / "csr_policy" / f"{name}.json", data)


def _quick(args: argparse.Namespace) -> str:
    return " --quick" if args.quick else ""


def _apply_quick(args: argparse.Namespace) -> None:
    """``--quick`` sizes: a few episodes at d1, one DAPO step of 2 x 2 episodes of at most 4 calls."""
    if not args.quick:
        return
    args.episodes = {"random": 20}.get(args.stage, 4)
    if args.stage == "warm-start":
        args.difficulties = [1]
    if args.stage == "dapo":
        args.steps, args.eval_every, args.max_turns = 1, 1, 4
    if args.stage == "sampled":
        args.max_turns = 4


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="stage", required=True)
    common = [results_parser()]
    chosen = warm_start_flags()  # which warm start a stage trains, evaluates or starts from
    random = sub.add_parser("random", help="the copying random baseline", parents=common)
    random.add_argument("--episodes", type=int, default=1000)
    warm = sub.add_parser("warm-start", help="train (or load) a warm start and evaluate it", parents=[*common, chosen])
    warm.add_argument("--model", choices=sorted(PRESETS), required=True)
    warm.add_argument("--decodings", nargs="+", choices=["free", "constrained"], default=["free", "constrained"])
    warm.add_argument("--difficulties", type=int, nargs="+", default=list(DIFFICULTIES))
    warm.add_argument("--episodes", type=int, default=64, help="validation episodes per difficulty")
    dapo = sub.add_parser("dapo", help="DAPO from the warm start on the 0/1 reward (resumable)",
                          parents=[*common, chosen])
    dapo.add_argument("--model", choices=sorted(PRESETS), required=True)
    dapo.add_argument("--decoding", choices=["free", "constrained"], required=True)
    dapo.add_argument("--difficulty", type=int, choices=DIFFICULTIES, required=True)
    dapo.add_argument("--seed", type=int, default=0)
    dapo.add_argument("--steps", type=int, default=30)
    dapo.add_argument("--eval-every", type=int, default=5)
    dapo.add_argument("--max-turns", type=int, default=MAX_TURNS,
                      help="tool calls per episode in training and validation (the step-0 validation of the run "
                           "is the warm start under the same limit)")
    dapo.add_argument("--episodes", type=int, default=64, help="validation episodes per evaluation")
    add_batch_flags(dapo)
    sampled = sub.add_parser("sampled", help="the warm start's sampled success on training tasks, by temperature",
                             parents=[*common, chosen])
    sampled.add_argument("--model", choices=sorted(PRESETS), required=True)
    sampled.add_argument("--decoding", choices=["free", "constrained"], required=True)
    sampled.add_argument("--difficulty", type=int, choices=DIFFICULTIES, required=True)
    sampled.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.7])
    sampled.add_argument("--max-turns", type=int, default=MAX_TURNS)
    sampled.add_argument("--episodes", type=int, default=32, help="sampled episodes per temperature")
    sub.add_parser("report", help="merge the stages into csr_policy.json and csr_policy.png", parents=common)
    args = parser.parse_args(argv)
    _apply_quick(args)
    set_torch_threads(max(1, min(2, os.cpu_count() or 1)))
    {"random": run_random, "warm-start": run_warm_start, "dapo": run_dapo, "sampled": run_sampled,
     "report": run_report}[args.stage](args)


if __name__ == "__main__":
    main()
