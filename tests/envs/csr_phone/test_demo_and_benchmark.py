"""Smoke tests of the demo (``python -m worldgym.demo``) and the throughput benchmark script."""

import json
import runpy
import sys
from pathlib import Path

import pytest

from worldgym import demo

BENCHMARK = Path(__file__).parents[3] / "benchmarks" / "csr_env_throughput.py"


def test_demo_prints_a_table_and_writes_json(tmp_path, capsys):
    output = tmp_path / "demo.json"
    flags = ["--episodes", "20", "--seed", "3", "--difficulties", "1", "5", "--json", str(output)]
    results = demo.main(flags)
    assert json.loads(output.read_text())["results"] == results["results"]
    assert [row["difficulty"] for row in results["results"]] == [1, 5]
    assert all(row["expert"]["success_rate"] == 1.0 for row in results["results"])
    printed = capsys.readouterr().out
    assert "Expert success" in printed and "Random success" in printed


def test_demo_rejects_bad_flags():
    with pytest.raises(SystemExit):
        demo.parse_args(["--episodes", "0"])
    with pytest.raises(SystemExit):
        demo.parse_args(["--difficulties", "7"])


def test_benchmark_script_runs_and_writes_json(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(BENCHMARK), "--steps", "300", "--results-dir", str(tmp_path)])
    runpy.run_path(str(BENCHMARK), run_name="__main__")
    results = json.loads((tmp_path / "csr_env_throughput.json").read_text())
    assert set(results["policies"]) == {"expert", "random", "sampled_calls"}
    assert results["policies"]["expert"]["env_steps_per_s"] > 0
