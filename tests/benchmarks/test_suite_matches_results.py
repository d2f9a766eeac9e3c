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


def test_the_dual_lora_suite_reruns_every_committed_run_as_recorded() -> None:
    data = json.loads((RESULTS / "csr_dual_lora_vs_dapo.json").read_text())
    recorded = [tuple(shlex.split(command)[2:]) for group in data["runs"].values() for run in group.values()
                for command in run["commands"]]
    suite = full_commands("csr_dual_lora_vs_dapo")
    assert len(recorded) > 20 and any("smollm2-135m" in command for command in recorded)
    assert [command for command in recorded if command not in suite] == []
    assert [command for command in suite if command[0] == "run" and command not in recorded] == []


@pytest.mark.parametrize(("name", "folder", "pattern", "first", "model"), [
    ("csr_policy", "csr_policy", "tiny-dapo-*.json", "dapo", "tiny"),
    ("cartridge_on_vs_offline", "cartridge", "tiny-*.json", "run", "tiny"),
    ("csr_policy", "csr_policy", "smollm2-135m-dapo-*.json", "dapo", "smollm2-135m"),
    ("csr_policy", "csr_policy", "smollm2-135m-sampled-*.json", "sampled", "smollm2-135m"),
    ("cartridge_on_vs_offline", "cartridge", "smollm2-135m*.json", "run", "smollm2-135m"),
])
def test_the_suite_reruns_every_committed_part_as_recorded(name, folder, pattern, first, model) -> None:
    recorded = [tuple(shlex.split(json.loads(path.read_text())["command"])[2:])
                for path in sorted((RESULTS / folder).glob(pattern))]
    suite = [command for command in full_commands(name) if command[0] == first and model in command]
    assert len(recorded) >= 1
    assert sorted(suite) == sorted(recorded)


@pytest.mark.parametrize("name", ["fuzz_envs.json", "kv_cache_growth.json", "cpu_allocator_memory.json",
                                  "grpo_vs_trl.json", "grpo_vs_trl_bfloat16.json", "ray_scaleout.json"])
def test_the_suite_reruns_the_command_a_results_file_recorded(name: str) -> None:
    words = shlex.split(json.loads((RESULTS / name).read_text())["command"])
    while "=" in words[0]:  # OMP_WAIT_POLICY=PASSIVE python ...
        words.pop(0)
    script = Path(words[1]).stem
    assert tuple(words[2:]) in full_commands(script)


def settings_flags(settings: dict, flags: dict[str, str]) -> dict[str, list[str]]:
    """The flags a recorded ``settings`` object stands for, each with its values as command-line words."""
    return {flag: [str(v) for v in (settings[key] if isinstance(settings[key], list) else [settings[key]])]
            for key, flag in flags.items()}


def flag_values(command: tuple[str, ...], flag: str) -> list[str]:
    start = command.index(flag) + 1
    end = next((i for i in range(start, len(command)) if command[i].startswith("--")), len(command))
    return list(command[start:end])


@pytest.mark.parametrize(("name", "compare"), [
    ("csr_rollout_speed.json", None), ("csr_rollout_speed_smollm2.json", None),
    ("csr_rollout_speed_retire_smollm2.json", "retire"), ("csr_rollout_speed_dtype_smollm2.json", "dtype"),
])
def test_the_suite_reruns_each_rollout_speed_file_at_its_recorded_settings(name: str, compare: str | None) -> None:
    data = json.loads((RESULTS / name).read_text())
    flags = {"difficulties": "--difficulties", "batch_sizes": "--batch-sizes", "max_new_tokens": "--max-new-tokens",
             "max_episode_tokens": "--max-episode-tokens", "threads": "--threads", "episodes": "--episodes",
             "seed": "--seed"}
    defaults = {"--difficulties": ["1", "3"], "--batch-sizes": ["1", "16"], "--max-new-tokens": ["96"],
                "--max-episode-tokens": ["4096"], "--episodes": ["16"], "--seed": ["0"]}
    model = data["model"]
    matching = [command for command in full_commands("csr_rollout_speed")
                if (model == "tiny") == ("--model" not in command)
                and (compare is None) == ("--compare" not in command)
                and (compare is None or flag_values(command, "--compare") == [compare])]
    assert len(matching) == 1, matching
    command = matching[0]
    for flag, values in settings_flags(data["settings"], flags).items():
        assert (flag_values(command, flag) if flag in command else defaults.get(flag)) == values, flag
    assert ("--warm-start" in command) == (model != "tiny")


def test_the_suite_skips_a_command_whose_model_is_not_installed(monkeypatch, capsys) -> None:
    import benchmarks.__main__ as suite

    ran = []
    monkeypatch.setattr(suite, "model_missing", lambda name: True)
    monkeypatch.setattr(suite.subprocess, "run", lambda command, **kwargs: ran.append(command))
    benchmark = suite.Benchmark("kv_cache_growth.py", (("--model", "smollm2-135m", "--batch", "8"),), ((),))
    assert suite.run(benchmark, quick=False, results=RESULTS) is True
    assert ran == [] and "skipped: python benchmarks/kv_cache_growth.py --model smollm2-135m" in capsys.readouterr().out
    assert suite.pretrained_model(("--model", "tiny")) is None and suite.pretrained_model(("learner",)) is None


def test_every_full_command_that_loads_smollm2_names_it() -> None:
    """Scripts whose default model is SmolLM2 name it on their full command, so the suite can skip them."""
    for name in ("decode_attention", "kv_cache_growth", "cpu_allocator_memory"):
        assert all("--model" in command for command in full_commands(name)), name
