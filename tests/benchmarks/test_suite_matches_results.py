"""`python -m benchmarks` (`make bench`) reruns the commands behind the committed results, not other settings."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

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


@pytest.mark.parametrize(("name", "folder", "pattern", "first"), [
    ("csr_policy", "csr_policy", "tiny-dapo-*.json", "dapo"),
    ("cartridge_on_vs_offline", "cartridge", "tiny-*.json", "run"),
])
def test_the_suite_reruns_every_committed_tiny_part_as_recorded(name, folder, pattern, first) -> None:
    recorded = [tuple(shlex.split(json.loads(path.read_text())["command"])[2:])
                for path in sorted((RESULTS / folder).glob(pattern))]
    suite = [command for command in full_commands(name) if command[0] == first and "tiny" in command]
    assert len(recorded) >= 6
    assert sorted(suite) == sorted(recorded)
