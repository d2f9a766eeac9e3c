"""`python -m benchmarks` (`make bench`) reruns the commands behind the committed results, not other settings."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from benchmarks.__main__ import SUITE

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def full_commands(name: str) -> list[tuple[str, ...]]:
    return list(next(benchmark for benchmark in SUITE if benchmark.name == name).full)


def test_the_dual_lora_suite_reruns_every_committed_tiny_run_as_recorded() -> None:
    data = json.loads((RESULTS / "csr_dual_lora_vs_dapo.json").read_text())
    recorded = [tuple(shlex.split(command)[2:]) for run in data["runs"]["tiny-d1"].values()
                for command in run["commands"]]
    suite = full_commands("csr_dual_lora_vs_dapo")
    assert len(recorded) > 20
    assert [command for command in recorded if command not in suite] == []
    assert [command for command in suite if command[0] == "run" and command not in recorded] == []
