"""Run many ``csr_dual_lora_vs_dapo.py run`` jobs, ``--jobs`` at a time, so a sweep can continue piecewise.

A named sweep (``--sweep NAME``, :data:`SWEEPS`) fixes a comparison's every setting before its first run. Each
(mode, seed) run writes its part file under ``<results-dir>/csr_dual_lora/`` after every validation and is
*finished* once it reached its last step and its final test-split evaluations are in; commit each finished part.
``--missing`` runs only the pairs with no finished part, so the sweep continues on a fresh machine: an unfinished
part's run resumes from its run folder's checkpoint where this machine has one, and restarts otherwise (as does a
part made with other settings). The step-0 validation, the same warm start for every run, is computed once
(``csr_dual_lora/step0/``, commit it too) and every run of the setting reads it instead of validating step 0.

    python benchmarks/csr_dual_lora_sweep.py --sweep smollm2-d3 --missing              # CPU: what fits in memory
    python benchmarks/csr_dual_lora_sweep.py --sweep smollm2-d3 --missing --device cuda --jobs 4
    python benchmarks/csr_dual_lora_sweep.py --sweep smollm2-d3 --dry-run              # which pairs are done
    python benchmarks/csr_dual_lora_sweep.py --modes dapo echo --seeds 0 1 --difficulty 3 --steps 40 \\
        --mistake-rate 0.2 --continue-on 3 --device cuda --deadline-s 500 --archive /tmp/out/sweep.tar.gz
    python benchmarks/csr_dual_lora_sweep.py --sweep tiny-d1 --quick --device cpu      # the pipeline

Every ``--archive-every`` seconds, and at the end, the part files and the logs are packed into ``--archive`` (a
``.tar.gz``); at ``--deadline-s`` the runs still going are stopped (they resume from their checkpoints).
Then ``python benchmarks/csr_dual_lora_vs_dapo.py report`` compares the modes from the parts alone.
Needs the model installed (``make smollm2``); with ``--wheels DIR`` it first installs the wheels in DIR with no
index (for a machine with no network).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, fields
from pathlib import Path

from worldgym.checkpointing import latest_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks import csr_dual_lora_vs_dapo as bench
from benchmarks.common import portable, results_dir, results_parser
from benchmarks.csr_warm_starts import DIFFICULTIES, warm_start_command, warm_start_flags

SCRIPT = Path(__file__).resolve().parent / "csr_dual_lora_vs_dapo.py"
MAX_GPU_JOBS = 4  # processes that share one GPU
# the most one SmolLM2 process held on CPU (its peak resident memory, the kernel's VmHWM), by what it does in a
# run, measured over one imagined-call run validating aside and an ECHO run beside it on a 24 GiB machine: one
# that only trains (``--evaluate-aside``), an evaluation worker at d3 validations and d1-d3 tests, one at a d4-d5
# test (one at a time among the runs; 15.9 GB in a worker that had run the run's other evaluations before its d5
# test), and one that trains and validates itself (its own d4-d5 tests hold at least what a worker's do)
SMOLLM2_PEAK_GB = {"trains": 7.7, "evaluates": 10.7, "evaluates d4-d5": 15.9, "trains and evaluates": 15.9}


@dataclass(frozen=True)
class Sweep:
    """A comparison's settings, fixed before its first run: every run of every mode trains and validates alike."""

    model: str
    difficulty: int
    modes: tuple[str, ...]
    seeds: tuple[int, ...]
    steps: int
    eval_every: int
    episodes: int  # validation episodes per evaluation, and per final test difficulty
    max_turns: int
    mistake_rate: float = 0.0
    continue_on: tuple[int, ...] | None = None
    temperature: float | None = None
    prompts_per_step: int | None = None
    group_size: int | None = None
    final_test: tuple[int, ...] = DIFFICULTIES
    lora_dropout: float | None = None  # None: DualLoRAConfig's


SWEEPS: dict[str, Sweep] = {
    # The world-model modes against DAPO and ECHO on SmolLM2-135M. d3 from the mistakes warm start (shipped): its
    # greedy validation started at 0.31 at d3 on 16 episodes and at 0.14 on the sweep's 64 (the committed step-0
    # validation, current kernels): room to rise. The threshold, 0.40, is
    # csr_dual_lora_vs_dapo.THRESHOLDS["smollm2-135m"], fixed before the first run. Batches of 2 tasks x
    # 8 samples at temperature 0.5 and 12 turns, as SmolLM2's first d3 runs; 8 steps validated every 2. No LoRA
    # dropout: the old logprobs are the policy's without it, so with it the PPO ratio moves before any update, and
    # it costs the learner time (benchmarks/lora_dropout.py).
    "smollm2-d3": Sweep(
        model="smollm2-135m", difficulty=3, mistake_rate=0.2, continue_on=(3,),
        modes=("dapo", "echo", "separate-own-clip", "shared-capped-0.1", "separate-own-clip-imagined50"),
        seeds=(0, 1, 2), steps=8, eval_every=2, episodes=64, max_turns=12, temperature=0.5,
        prompts_per_step=2, group_size=8, lora_dropout=0.0),
    # the same modes on the tiny model at d1 with the benchmark's own defaults (threshold 0.30)
    "tiny-d1": Sweep(
        model="tiny", difficulty=1,
        modes=("dapo", "echo", "separate-own-clip", "shared-capped-0.1", "separate-own-clip-imagined50"),
        seeds=(0, 1, 2), steps=16, eval_every=4, episodes=64, max_turns=8),
}

# without --sweep: a setting flag not given takes this value
DEFAULTS = {"model": "smollm2-135m", "difficulty": 3, "seeds": (0, 1, 2), "steps": 40, "eval_every": 4,
            "episodes": 64, "max_turns": 16, "mistake_rate": 0.0, "final_test": ()}


def stage_command(args: argparse.Namespace, stage: str, *flags: str) -> list[str]:
    """A ``csr_dual_lora_vs_dapo.py`` stage's command line with the sweep's settings (and ``flags``)."""
    command = [sys.executable, str(SCRIPT), stage, *flags, "--model", args.model, "--difficulty",
               str(args.difficulty), "--steps", str(args.steps), "--max-turns", str(args.max_turns), "--eval-every",
               str(args.eval_every), "--episodes", str(args.episodes), "--device", args.device,
               "--results-dir", str(results_dir(args))]
    for flag in ("temperature", "prompts_per_step", "group_size", "lora_dropout"):
        if getattr(args, flag) is not None:
            command += [f"--{flag.replace('_', '-')}", f"{getattr(args, flag):g}"]
    return command + warm_start_command(args).split() + (["--quick"] if args.quick else [])


def run_command(args: argparse.Namespace, mode: str, seed: int, stage: str = "run") -> list[str]:
    """One (mode, seed) run's command line: trained, then evaluated on the test split (``--final-test``); or
    another stage of that run (``evaluate-aside``: its evaluation worker)."""
    final_test = ["--final-test", *map(str, args.final_test)] if args.final_test else []
    return stage_command(args, stage, "--mode", mode, "--seed", str(seed), *final_test)


def pair_commands(args: argparse.Namespace, mode: str, seed: int, restart: bool) -> list[list[str]]:
    """The processes of one (mode, seed) run: its ``run`` (``--restart`` where its part is stale), and with
    ``--evaluate-aside`` an ``evaluate-aside`` worker beside it, then a second worker in the trainer's place
    once it has trained (``--train-only``: a process that trained keeps memory that two evaluating processes
    at once cannot spare; on 24 GB, one that stayed to help was OOM-killed beside the worker)."""
    run = run_command(args, mode, seed) + (["--restart"] if restart else [])
    if not args.evaluate_aside:
        return [run]
    worker = run_command(args, mode, seed, stage="evaluate-aside")
    return [run + ["--evaluate-aside", "--train-only"], worker, worker]


@dataclass(frozen=True)
class PairStatus:
    """Where one (mode, seed) run stands on this machine."""

    part: Path
    run_dir: Path  # its run folder (checkpoints, logs)
    done: bool  # its part is finished
    stale: bool  # its part was made with other settings: the run restarts and replaces it
    note: str  # what a run of it would do, in words


def pair_status(args: argparse.Namespace, mode: str, seed: int) -> PairStatus:
    """Whether the pair's part is finished, and otherwise whether its run would resume, restart or start."""
    run_args = bench.parse_args(run_command(args, mode, seed)[2:])
    name = bench.run_name(run_args)
    part_path = bench.parts_dir(run_args) / f"{name}.json"
    run_dir = bench.runs_dir(run_args) / "csr_dual_lora" / name
    if not part_path.is_file():
        return PairStatus(part_path, run_dir, False, False, "to run (no part)")
    stale = bench.stale_part(part_path, bench.run_config(run_args, mode, run_dir))
    if stale:
        return PairStatus(part_path, run_dir, False, True, f"to restart (its part has other settings: {stale})")
    if bench.is_finished(json.loads(part_path.read_text()), tuple(args.final_test)):
        return PairStatus(part_path, run_dir, True, False, "done")
    checkpoint = latest_checkpoint(run_dir)
    note = f"to resume from {checkpoint.name}" if checkpoint else "to restart (unfinished, no checkpoint here)"
    return PairStatus(part_path, run_dir, False, False, note)


def archive(args: argparse.Namespace, logs: Path) -> None:
    """Pack the part files and logs into ``args.archive`` (written aside, then renamed into place)."""
    if args.archive is None:
        return
    args.archive.parent.mkdir(parents=True, exist_ok=True)
    partial = args.archive.with_name(args.archive.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        for folder in (results_dir(args) / "csr_dual_lora", logs):
            if folder.is_dir():
                tar.add(folder, arcname=folder.name)
    partial.replace(args.archive)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, a named sweep's settings filled in (see :func:`apply_sweep`)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     parents=[results_parser(), warm_start_flags()])
    parser.add_argument("--sweep", help=f"a named sweep's fixed settings: {', '.join(SWEEPS)}")
    parser.add_argument("--missing", action="store_true", help="run only the pairs with no finished part")
    parser.add_argument("--dry-run", action="store_true", help="say which pairs are done and which would run")
    parser.add_argument("--jobs", type=int, help="runs at a time, in processes' slots: a finished trainer's slot goes "
                                                   "to the next run's (default: 2 on CPU, 4 on a GPU; with "
                                                   "--evaluate-aside 1 on CPU, 2 on a GPU; SmolLM2 on CPU: no more "
                                                   "than fit in memory, and a --jobs that would not fit is refused)")
    parser.add_argument("--evaluate-aside", action="store_true",
                        help="each run as two processes at a time: its trainer, and a worker that validates and "
                             "tests its checkpoints as they appear, joined by a second worker once the trainer "
                             "is done (a run's wall time about its training's alone)")
    parser.add_argument("--model", choices=["tiny", "smollm2-135m"])
    parser.add_argument("--modes", nargs="+")
    parser.add_argument("--seeds", type=int, nargs="+")
    parser.add_argument("--difficulty", type=int)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--max-turns", type=int)
    parser.add_argument("--eval-every", type=int)
    parser.add_argument("--episodes", type=int)
    parser.add_argument("--final-test", type=int, nargs="+", choices=DIFFICULTIES, metavar="D",
                        help="test-split difficulties each run is evaluated at after its last step")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--temperature", type=float, help="rollout sampling temperature (default: the preset's)")
    parser.add_argument("--prompts-per-step", type=int, help="tasks per step (default: the preset's)")
    parser.add_argument("--group-size", type=int, help="samples per task (default: the preset's)")
    parser.add_argument("--lora-dropout", type=float, help="dropout on the adapters' inputs (default: the config's)")
    parser.add_argument("--deadline-s", type=float, help="stop the runs this long after the start (default: none)")
    parser.add_argument("--archive", type=Path, help="a .tar.gz of the part files and logs, kept up to date")
    parser.add_argument("--archive-every", type=float, default=30.0)
    parser.add_argument("--wheels", type=Path, help="install these wheels first (no index)")
    parser.set_defaults(mistake_rate=None)
    args = parser.parse_args(argv)
    try:
        apply_sweep(args)
    except ValueError as error:
        parser.error(str(error))
    return args


def apply_sweep(args: argparse.Namespace) -> None:
    """Fill in ``args.sweep``'s settings (``--modes`` and ``--seeds`` may pick some of its own; any other setting
    given must be its value), or :data:`DEFAULTS` for the flags not given; check the modes and ``--jobs``.

    Raises:
        ValueError: an unknown sweep or mode, a setting the sweep fixes otherwise, or too many jobs.
    """
    if args.sweep is not None:
        if args.sweep not in SWEEPS:
            raise ValueError(f"unknown sweep {args.sweep!r}: choose one of {', '.join(SWEEPS)}")
        _fill_from(args, SWEEPS[args.sweep])
    for name, value in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if not args.modes:
        raise ValueError("name the modes to run (--modes) or a sweep (--sweep)")
    unknown = [mode for mode in args.modes if mode not in bench.MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {', '.join(unknown)}: choose from {', '.join(bench.MODES)}")
    on_gpu = args.device.startswith("cuda")
    per_run = processes_per_run(args)
    if args.jobs is None:  # the two cores (or a GPU's process slots); on CPU, no more SmolLM2 runs than fit
        args.jobs = (MAX_GPU_JOBS if on_gpu else 2) // per_run
        if not on_gpu and args.model == "smollm2-135m":
            args.jobs = max(1, min(args.jobs, runs_that_fit(args, memory_bytes())))
    if args.jobs < 1 or (on_gpu and args.jobs * per_run > MAX_GPU_JOBS):
        raise ValueError(f"--jobs {args.jobs}: give 1 or more (at most {MAX_GPU_JOBS} processes share one GPU, "
                         f"{per_run} per run)")


def check_memory(args: argparse.Namespace, total_bytes: int) -> None:
    """Refuse more than one SmolLM2 run at a time on CPU where their processes' peaks, added up, would not fit in
    ``total_bytes`` of memory: the kernel would kill one of them midway (a run resumes from its last checkpoint,
    but the step it was in is lost). One run always may: its processes' peaks do not all come at once (a run
    validating aside, 26.6 GB added up, ran through on a machine of 25.3 GB)."""
    if args.device.startswith("cuda") or args.model != "smollm2-135m" or args.jobs == 1:
        return
    needed, total = smollm2_peak_gb(args, args.jobs), total_bytes / 1e9
    if needed > total:
        raise ValueError(f"--jobs {args.jobs}: {args.jobs} SmolLM2 runs at a time hold up to {needed:.1f} GB "
                         f"({'trainers beside workers, or workers' if args.evaluate_aside else 'one process each'}, "
                         f"at their measured peaks), this machine has {total:.1f} GB: give --jobs "
                         f"{max(1, runs_that_fit(args, total_bytes))}")


def memory_bytes() -> int:
    """This machine's memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def smollm2_peak_gb(args: argparse.Namespace, runs: int) -> float:
    """The most ``runs`` SmolLM2 runs' processes at a time hold on CPU, their measured peaks added up: each run one
    process, or validating aside a trainer and a worker, then two workers (one d4-d5 test among them all)."""
    peak = SMOLLM2_PEAK_GB
    if not args.evaluate_aside:
        return runs * peak["trains and evaluates"]
    return max(runs * (peak["trains"] + peak["evaluates"]), peak["evaluates d4-d5"] + (2 * runs - 1) * peak["evaluates"])


def runs_that_fit(args: argparse.Namespace, total_bytes: int) -> int:
    """How many SmolLM2 runs at a time fit in ``total_bytes`` (0 when not one does)."""
    runs = 0
    while smollm2_peak_gb(args, runs + 1) <= total_bytes / 1e9:
        runs += 1
    return runs


def processes_per_run(args: argparse.Namespace) -> int:
    """A run's processes at a time: its trainer (or, once it trained, a second worker), and its evaluation worker
    with ``--evaluate-aside``."""
    return 2 if args.evaluate_aside else 1


def _fill_from(args: argparse.Namespace, sweep: Sweep) -> None:
    """``sweep``'s settings into ``args``; ``--modes``/``--seeds`` may be subsets, other flags must agree."""
    for field in fields(sweep):
        fixed, given = getattr(sweep, field.name), getattr(args, field.name)
        if field.name in ("modes", "seeds") and given is not None:
            outside = [value for value in given if value not in fixed]
            if outside:
                raise ValueError(f"--{field.name} {' '.join(map(str, outside))}: not in the {args.sweep} sweep "
                                 f"({' '.join(map(str, fixed))})")
            continue
        same = given is None or (tuple(given) if isinstance(given, list) else given) == fixed
        if not same:
            flag = "--" + field.name.replace("_", "-")
            raise ValueError(f"the {args.sweep} sweep fixes {flag} at {fixed} (given {given}): every run of a sweep "
                             "trains alike; drop the flag, or run without --sweep")
        setattr(args, field.name, fixed)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    start = time.monotonic()
    pairs = [(mode, seed) for mode in args.modes for seed in args.seeds]
    status = {pair: pair_status(args, *pair) for pair in pairs}
    for (mode, seed), pair in status.items():
        print(f"{mode} seed {seed}: {pair.note}", flush=True)
    todo = [pair for pair in pairs if not (args.missing and status[pair].done)]
    print(f"{sum(s.done for s in status.values())} of {len(pairs)} pairs done; {len(todo)} to run, "
          f"{args.jobs} at a time", flush=True)
    if args.dry_run or not todo:
        return
    try:
        check_memory(args, memory_bytes())
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    if args.wheels is not None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        *map(str, sorted(args.wheels.glob("*.whl")))], check=True)
    logs = results_dir(args) / "sweep_logs"
    logs.mkdir(parents=True, exist_ok=True)
    prepare(args, logs)
    print(f"warm start and step-0 validation ready after {time.monotonic() - start:.0f}s", flush=True)
    if args.evaluate_aside:  # a stale run's folder goes before its worker could read an old checkpoint in it
        for pair in todo:
            if status[pair].stale:
                shutil.rmtree(status[pair].run_dir, ignore_errors=True)
    commands = {pair: pair_commands(args, *pair, restart=status[pair].stale) for pair in todo}
    codes = run_pool(args, commands, start, logs)
    for (mode, seed), code in codes.items():
        finished = pair_status(args, mode, seed)
        ended = "stopped at the deadline" if code is None else f"exit {code}"
        print(f"{mode} seed {seed}: {ended}, {finished.note}"
              + (f": commit {portable(finished.part)}" if finished.done else ""), flush=True)
    print(f"done after {time.monotonic() - start:.0f}s", flush=True)
    failed = [f"{mode} seed {seed}" for (mode, seed), code in codes.items() if code not in (0, None)]
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)} (see {portable(logs)})")


def prepare(args: argparse.Namespace, logs: Path) -> None:
    """Train (or load) the shared warm start and compute (or keep) the setting's step-0 validation, once,
    before the runs start (each run would otherwise do both)."""
    with open(logs / "step0.log", "w") as log:
        subprocess.run(stage_command(args, "step0"), check=True, stdout=log, stderr=subprocess.STDOUT)


def run_pool(args: argparse.Namespace, commands: dict[tuple[str, int], list[list[str]]], start: float,
             logs: Path) -> dict[tuple[str, int], int | None]:
    """Run the pairs' processes (``commands``, in order), at most ``args.jobs`` runs' worth at a time, archiving as
    they go; at the deadline stop those running and start no more. A process starts as soon as a slot frees,
    except a pair's third one (the worker that takes its trainer's place), which waits for the trainer to end; so
    the next pair's trainer starts while the last one's workers finish its final tests. A pair whose trainer (its
    first process) fails has its other processes stopped, or never started. Returns each started pair's exit
    code: its first failing process's, else 0 (None: stopped at the deadline)."""
    slots = args.jobs * processes_per_run(args)
    queue = [(pair, index) for pair, pair_commands in commands.items() for index in range(len(pair_commands))]
    running: dict[tuple[str, int], list[subprocess.Popen[bytes]]] = {}
    codes: dict[tuple[str, int], int | None] = {}
    stopped: set[tuple[str, int]] = set()
    threads = max(1, (os.cpu_count() or 1) // slots)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WORLDGYM_THREADS": str(threads)}
    last = time.monotonic()
    with contextlib.ExitStack() as files:
        while queue or running:
            past_deadline = args.deadline_s is not None and time.monotonic() - start >= args.deadline_s
            alive = sum(job.poll() is None for jobs in running.values() for job in jobs)
            while alive < slots and not past_deadline:
                startable = [entry for entry in queue if entry[1] < 2  # a third process: once its trainer ended
                             or (entry[0] in running and running[entry[0]][0].poll() is not None)]
                if not startable:
                    break
                queue.remove(startable[0])
                pair, index = startable[0]
                mode, seed = pair
                name = f"{mode}-s{seed}" + ("" if index == 0 else "-aside" if index == 1 else f"-aside{index}")
                log = files.enter_context(open(logs / f"{name}.log", "a"))
                running.setdefault(pair, []).append(
                    subprocess.Popen(commands[pair][index], env=env, stdout=log, stderr=subprocess.STDOUT))
                alive += 1
                if index == 0:
                    print(f"{mode} seed {seed}: started", flush=True)
            if past_deadline:
                queue.clear()
                for pair, jobs in running.items():
                    for job in jobs:
                        job.terminate()
                    stopped.add(pair)
            time.sleep(0.5)
            for pair, jobs in list(running.items()):
                if jobs[0].poll() not in (None, 0):  # the trainer failed: its worker would wait in vain
                    for job in jobs[1:]:
                        job.terminate()
                    queue = [entry for entry in queue if entry[0] != pair]
                waiting = any(entry[0] == pair for entry in queue)
                if not waiting and all(job.poll() is not None for job in jobs):
                    failed = [job.returncode for job in running.pop(pair) if job.returncode != 0]
                    codes[pair] = None if pair in stopped else (failed[0] if failed else 0)
            if time.monotonic() - last >= args.archive_every:
                archive(args, logs)
                last = time.monotonic()
    archive(args, logs)
    return codes


if __name__ == "__main__":
    main()
