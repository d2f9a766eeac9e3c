"""Run many ``csr_dual_lora_vs_dapo.py run`` jobs side by side on one GPU, within a wall-clock budget.

The warm start the runs share is trained first (once, on the GPU); then one process per (mode, seed) trains on
the same GPU at once, each writing its part file after every validation. Every ``--archive-every`` seconds, and
at the end, the part files and the logs are packed into ``--archive`` (a ``.tar.gz``), so a job cut short keeps
every validation that finished. At the deadline the runs still going are stopped; ``report`` (run afterwards,
anywhere) compares the modes up to the step every run reached.

    python benchmarks/csr_dual_lora_sweep.py --modes dapo echo separate --seeds 0 1 2 --difficulty 3 \\
        --mistake-rate 0.2 --continue-on 3 --max-turns 16 --steps 40 --eval-every 4 --deadline-s 500 \\
        --archive /tmp/out/sweep.tar.gz
    python benchmarks/csr_dual_lora_sweep.py --quick --modes dapo echo --seeds 0 --device cpu   # the pipeline

Needs the model installed (``make smollm2``); with ``--wheels DIR`` it first installs the wheels in DIR with no
index (for a machine with no network).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import results_dir, results_parser
from benchmarks.csr_warm_starts import warm_start_command, warm_start_flags

SCRIPT = Path(__file__).resolve().parent / "csr_dual_lora_vs_dapo.py"


def run_command(args: argparse.Namespace, mode: str, seed: int) -> list[str]:
    """One mode's ``run`` command line."""
    command = [sys.executable, str(SCRIPT), "run", "--model", args.model, "--mode", mode, "--seed", str(seed),
               "--difficulty", str(args.difficulty), "--steps", str(args.steps), "--max-turns", str(args.max_turns),
               "--eval-every", str(args.eval_every), "--episodes", str(args.episodes), "--device", args.device,
               "--results-dir", str(results_dir(args))]
    for flag in ("temperature", "prompts_per_step", "group_size"):
        if getattr(args, flag) is not None:
            command += [f"--{flag.replace('_', '-')}", f"{getattr(args, flag):g}"]
    return command + warm_start_command(args).split() + (["--quick"] if args.quick else [])


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     parents=[results_parser(), warm_start_flags()])
    parser.add_argument("--model", default="smollm2-135m", choices=["tiny", "smollm2-135m"])
    parser.add_argument("--modes", nargs="+", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--difficulty", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--max-turns", type=int, default=16)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--temperature", type=float, help="rollout sampling temperature (default: the preset's)")
    parser.add_argument("--prompts-per-step", type=int, help="tasks per step (default: the preset's)")
    parser.add_argument("--group-size", type=int, help="samples per task (default: the preset's)")
    parser.add_argument("--deadline-s", type=float, default=500.0, help="stop the runs this long after the start")
    parser.add_argument("--archive", type=Path, help="a .tar.gz of the part files and logs, kept up to date")
    parser.add_argument("--archive-every", type=float, default=30.0)
    parser.add_argument("--wheels", type=Path, help="install these wheels first (no index)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    if args.wheels is not None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        *map(str, sorted(args.wheels.glob("*.whl")))], check=True)
    logs = results_dir(args) / "sweep_logs"
    logs.mkdir(parents=True, exist_ok=True)
    # the shared warm start, trained once before the runs start (each run would otherwise train it too)
    first = run_command(args, args.modes[0], args.seeds[0])
    with open(logs / "warm_start.log", "w") as log:
        subprocess.run([*first[:2], "warm-start", *first[3:]], check=True, stdout=log, stderr=subprocess.STDOUT)
    print(f"warm start ready after {time.monotonic() - start:.0f}s", flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with contextlib.ExitStack() as files:
        jobs = {(mode, seed): subprocess.Popen(run_command(args, mode, seed), env=env, stderr=subprocess.STDOUT,
                                               stdout=files.enter_context(open(logs / f"{mode}-s{seed}.log", "w")))
                for mode in args.modes for seed in args.seeds}
        _supervise(args, jobs, start, logs)
    for (mode, seed), job in jobs.items():
        print(f"{mode} seed {seed}: exit {job.returncode}", flush=True)
    print(f"done after {time.monotonic() - start:.0f}s", flush=True)


def _supervise(args: argparse.Namespace, jobs: dict[tuple[str, int], subprocess.Popen], start: float,
               logs: Path) -> None:
    """Archive while the runs go on; stop those still running at the deadline; archive once more."""
    last = time.monotonic()
    while any(job.poll() is None for job in jobs.values()) and time.monotonic() - start < args.deadline_s:
        time.sleep(2)
        if time.monotonic() - last >= args.archive_every:
            archive(args, logs)
            last = time.monotonic()
    for job in jobs.values():
        if job.poll() is None:
            job.terminate()
    for job in jobs.values():
        job.wait()
    archive(args, logs)


if __name__ == "__main__":
    main()
