"""Run every benchmark (full or ``--quick``), then write the benchmark tables from the results JSON.

    python -m benchmarks                  # every benchmark in full (hours), into benchmarks/results; both tables
    python -m benchmarks --quick          # every benchmark in seconds-to-a-minute each, into runs/benchmarks/quick;
                                          # prints the full table (the committed tables keep the committed figures)
    python -m benchmarks --table-only     # only rewrite the tables from benchmarks/results
    python -m benchmarks --check          # exit 1 when a table differs from benchmarks/results
    python -m benchmarks --only fuzz_envs dreamer --quick

Three tables, each between ``<!-- benchmark-table:start -->`` and ``<!-- benchmark-table:end -->``: the README's
short one (a headline per benchmark and a link to its docs page), the full one on ``docs/results/benchmarks.md``
and the precision page's float32-vs-bf16 speed per kind of CPU (``docs/precision.md``).
They are only ever rewritten from ``benchmarks/results`` (full runs), never from quick results.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import QUICK_RESULTS, REPO, RESULTS, portable
from benchmarks.table import render, render_cpu_precision, render_summary, replace_table, table_in

README = REPO / "README.md"
BENCHMARKS_PAGE = REPO / "docs" / "results" / "benchmarks.md"
PRECISION_PAGE = REPO / "docs" / "precision.md"


@dataclass(frozen=True)
class Benchmark:
    """A script and the command lines (after ``python benchmarks/<script>``) of its full and quick runs, in
    order; ``--results-dir`` (and ``--quick``) are appended to each."""

    script: str
    full: tuple[tuple[str, ...], ...]
    quick: tuple[tuple[str, ...], ...]

    @property
    def name(self) -> str:
        return self.script.removesuffix(".py")


def _recorded_parts(folder: str, pattern: str) -> tuple[tuple[str, ...], ...]:
    """The command each committed part file ``benchmarks/results/<folder>/<pattern>`` recorded, as it ran (after
    ``python benchmarks/<script>``), in file-name order."""
    return tuple(tuple(shlex.split(json.loads(path.read_text())["command"])[2:])
                 for path in sorted((RESULTS / folder).glob(pattern)))


def _dual_lora_runs() -> tuple[tuple[str, ...], ...]:
    """The tiny-model runs behind the committed dual-LoRA table: the command each one recorded, as it ran."""
    data = json.loads((RESULTS / "csr_dual_lora_vs_dapo.json").read_text())
    return tuple(tuple(shlex.split(command)[2:]) for run in data["runs"]["tiny-d1"].values()
                 for command in run["commands"])


# The full commands are the ones behind the committed results (see each results file's "command" fields).
SUITE: tuple[Benchmark, ...] = (
    Benchmark("csr_env_throughput.py", ((),), ((),)),
    Benchmark("gameboy_throughput.py", ((),), ((),)),
    Benchmark("fuzz_envs.py", ((),), ((),)),
    Benchmark("ztoken_ppo.py", ((),), ((),)),
    Benchmark("sheeprl_dreamer_step.py", (("--size", "XS", "--steps", "4"),), ((),)),
    Benchmark("dreamer.py", (("speed", "--sizes", "tiny", "XS"), ("ratio", "--max-steps", "1000"), ("cartpole",)),
              (("speed",), ("ratio",), ("cartpole",))),
    Benchmark("csr_policy.py",
              (("random",), ("warm-start", "--model", "tiny"),
               ("warm-start", "--model", "smollm2-135m", "--decodings", "free", "--difficulties", "1", "2", "3",
                "--episodes", "16"),
               *_recorded_parts("csr_policy", "tiny-dapo-*.json"), ("report",)),
              (("random",), ("warm-start", "--model", "tiny", "--decodings", "constrained"),
               ("dapo", "--model", "tiny", "--decoding", "constrained", "--difficulty", "1"), ("report",))),
    Benchmark("csr_dual_lora_vs_dapo.py",
              (*_dual_lora_runs(), ("final-eval", "--difficulties", "2", "--episodes", "32"),
               ("report",), ("demo-time",)),
              (("run", "--mode", "dapo"), ("run", "--mode", "separate"), ("report",), ("demo-time",))),
    Benchmark("csr_rollout_speed.py",
              ((), ("--model", "smollm2-135m", "--warm-start", "--compare", "dtype", "--difficulties", "3",
                    "--batch-sizes", "16", "--max-new-tokens", "192", "--max-episode-tokens", "8192", "--threads", "1")),
              ((), ("--compare", "dtype"))),
    Benchmark("cpu_matmul_dtype.py", ((), ("--cap-isa", "AVX2")), ((), ("--cap-isa", "AVX2"))),
    Benchmark("llm_precision.py",
              (("learner", "--model", "smollm2-135m", "--threads", "1"),
               ("dapo-step", "--model", "smollm2-135m", "--dtypes", "bfloat16"),
               ("sft", "--model", "smollm2-135m")),
              (("learner",), ("dapo-step",), ("sft",))),
    Benchmark("decode_attention.py", ((),), ((),)),
    Benchmark("precision_agents.py", ((),), ((),)),
    Benchmark("kv_cache_growth.py", ((),), ((),)),
    Benchmark("cpu_allocator_memory.py", ((),), ((),)),
    Benchmark("grpo_vs_trl.py", ((),), ((),)),
    Benchmark("cartridge_on_vs_offline.py",
              (*_recorded_parts("cartridge", "tiny-*.json"), ("report",)),
              (("run", "--mode", "on_policy"), ("run", "--mode", "offline"), ("report",))),
    Benchmark("ray_scaleout.py", ((),), ((),)),
    Benchmark("serve_load.py", ((),), ((),)),
    Benchmark("fresh_clone.py", ((),), ((),)),
)


def run(benchmark: Benchmark, quick: bool, results: Path) -> bool:
    """Run the benchmark's commands in order; False at the first that fails."""
    for argv in benchmark.quick if quick else benchmark.full:
        command = [sys.executable, str(REPO / "benchmarks" / benchmark.script), *argv, "--results-dir", str(results)]
        command += ["--quick"] if quick else []
        print(f"$ python benchmarks/{benchmark.script} {' '.join(command[2:])}", flush=True)
        start = time.perf_counter()
        if subprocess.run(command, cwd=REPO, check=False).returncode != 0:
            print(f"FAILED: {benchmark.name} ({time.perf_counter() - start:.0f} s)", flush=True)
            return False
        print(f"done: {benchmark.name} in {time.perf_counter() - start:.0f} s", flush=True)
    return True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="every benchmark's --quick mode")
    mode.add_argument("--table-only", action="store_true", help="run nothing: rewrite the benchmark tables")
    mode.add_argument("--check", action="store_true", help="run nothing: fail when a benchmark table is stale")
    parser.add_argument("--only", nargs="+", choices=[b.name for b in SUITE], help="run only these benchmarks")
    parser.add_argument("--results-dir", type=Path, default=None,
                        help=f"where results go (default {portable(RESULTS)}; {portable(QUICK_RESULTS)} with --quick)")
    parser.add_argument("--readme", type=Path, default=README, help="the README whose short table is rewritten")
    parser.add_argument("--benchmarks-page", type=Path, default=BENCHMARKS_PAGE,
                        help="the docs page whose full table is rewritten")
    parser.add_argument("--precision-page", type=Path, default=PRECISION_PAGE,
                        help="the docs page whose per-CPU precision table is rewritten")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # file -> the table it holds
    tables = {args.readme: render_summary, args.benchmarks_page: render, args.precision_page: render_cpu_precision}
    if args.check:
        stale = False
        for path, table in tables.items():
            stale_here = table_in(path.read_text()) != table(RESULTS)
            print(f"{portable(path)}: the benchmark table is "
                  + ("stale: run `python -m benchmarks --table-only`" if stale_here else "up to date"))
            stale |= stale_here
        return int(stale)
    results = args.results_dir or (QUICK_RESULTS if args.quick else RESULTS)
    failed = []
    if not args.table_only:
        failed = [b.name for b in SUITE if (not args.only or b.name in args.only) and not run(b, args.quick, results)]
    if results.resolve() == RESULTS.resolve():
        for path, table in tables.items():
            path.write_text(replace_table(path.read_text(), table(results)))
            print(f"wrote the benchmark table of {portable(path)}")
    else:
        print(render(results))
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
