"""The dual-LoRA sweep: named presets, ``--missing`` (finished pairs skipped, interrupted ones resumed), the
shared step-0 validation, and the report's bootstrap interval and per-machine step times."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks import csr_dual_lora_vs_dapo as bench
from benchmarks.csr_dual_lora_sweep import (
    SWEEPS,
    check_memory,
    memory_bytes,
    parse_args,
    run_command,
    run_pool,
)
from benchmarks.csr_dual_lora_vs_dapo import (
    _check_one_setting,
    bootstrap_interval,
    final_success_interval,
    imagined_success_confirmed,
    is_finished,
    second_round_share,
    step_time_by_machine,
)

from .test_benchmarks_quick import REPO, _check, load, run_stages

# --quick runs of the tiny model at d1, each evaluated on the test split at d1 after its 2 steps
QUICK_SWEEP = ("--model", "tiny", "--difficulty", "1", "--modes", "dapo", "--seeds", "0", "1", "--final-test", "1",
               "--quick", "--missing", "--device", "cpu")


def sweep(results: Path, *argv: str) -> str:
    """``python benchmarks/csr_dual_lora_sweep.py <argv> --results-dir <results>``; its stdout."""
    return _check([sys.executable, str(REPO / "benchmarks" / "csr_dual_lora_sweep.py"), *argv,
                   "--results-dir", str(results)])


def interrupt_after_step_1(results: Path, name: str) -> None:
    """Leave run ``name`` as if stopped after step 1: its checkpoint-1 kept, its part as written at step 0."""
    run_dir = results / "runs" / "csr_dual_lora" / name
    for later in ("checkpoint-2", "checkpoint-last"):
        shutil.rmtree(run_dir / later)
    path = results / "csr_dual_lora" / f"{name}.json"
    part = json.loads(path.read_text())
    for key in ("final_test_by_difficulty", "final_test_episode_success"):
        part.pop(key)
    part |= {"steps_done": 0, "finished": False, "curve": part["curve"][:1]}
    path.write_text(json.dumps(part))


def test_sweep_runs_only_missing_pairs_and_resumes_an_interrupted_one(tmp_path: Path) -> None:
    first = sweep(tmp_path, *QUICK_SWEEP)
    assert "0 of 2 pairs done; 2 to run" in first
    parts = {seed: load(tmp_path / "csr_dual_lora" / f"tiny-dapo-d1-s{seed}.json") for seed in (0, 1)}
    for part in parts.values():
        assert part["finished"] and set(part["final_test_by_difficulty"]) == {"1"}
        assert part["step0_from"] == "tiny-d1.json" and [step for step, _ in part["curve"]] == [0, 2]
    done_before = (tmp_path / "csr_dual_lora" / "tiny-dapo-d1-s0.json").read_text()
    interrupt_after_step_1(tmp_path, "tiny-dapo-d1-s1")

    second = sweep(tmp_path, *QUICK_SWEEP)
    assert "dapo seed 0: done" in second and "dapo seed 1: to resume from checkpoint-1" in second
    assert "1 of 2 pairs done; 1 to run" in second and "dapo seed 0: started" not in second
    assert "holds this setting's step-0 validation" in (tmp_path / "sweep_logs" / "step0.log").read_text()
    assert (tmp_path / "csr_dual_lora" / "tiny-dapo-d1-s0.json").read_text() == done_before  # not run again
    assert "resumed from" in (tmp_path / "sweep_logs" / "dapo-s1.log").read_text()
    resumed = load(tmp_path / "csr_dual_lora" / "tiny-dapo-d1-s1.json")
    assert resumed["finished"] and resumed["step0_from"] == "tiny-d1.json"
    for key in ("curve", "episode_success_curve", "tasks_by_step", "final_test_by_difficulty"):
        assert resumed[key] == parts[1][key], key  # the resumed run continued the same run exactly
    assert "dapo seed 1: exit 0, done: commit tiny-dapo-d1-s1.json" in second


def test_sweep_runs_each_run_beside_an_evaluation_worker(tmp_path: Path) -> None:
    out = sweep(tmp_path, *QUICK_SWEEP[:8], *QUICK_SWEEP[9:], "--evaluate-aside")  # seed 0 alone
    assert "1 to run, 1 at a time" in out and "dapo seed 0: exit 0, done: commit tiny-dapo-d1-s0.json" in out
    part = load(tmp_path / "csr_dual_lora" / "tiny-dapo-d1-s0.json")
    assert part["finished"] and [step for step, _ in part["curve"]] == [0, 2] and part["step0_from"] == "tiny-d1.json"
    logs = tmp_path / "sweep_logs"
    assert "evaluation(s) done beside the trainer" in (logs / "dapo-s0-aside.log").read_text()
    assert "evaluation(s) done" not in (logs / "dapo-s0.log").read_text()  # the trainer only trained
    assert (logs / "dapo-s0-aside2.log").exists()  # the worker that took the trainer's place


def _stamp(path: Path, seconds: float = 0.0, code: int = 0) -> list[str]:
    """A process that sleeps ``seconds``, then appends when it ended to ``path`` and exits with ``code``."""
    code_text = (f"import sys, time; time.sleep({seconds}); "
                 f"open({str(path)!r}, 'a').write(str(time.time())); sys.exit({code})")
    return [sys.executable, "-c", code_text]


def test_the_next_pairs_trainer_starts_while_the_last_worker_finishes(tmp_path: Path) -> None:
    args = parse_args(["--model", "tiny", "--modes", "dapo", "--evaluate-aside", "--deadline-s", "60",
                       "--archive-every", "100", "--results-dir", str(tmp_path)])
    assert args.jobs == 1  # two processes at a time: one run's trainer and worker
    a_trainer, a_worker, b_trainer, b_worker = (tmp_path / name for name in ("a0", "a1", "b0", "b1"))
    commands = {("dapo", 0): [_stamp(a_trainer), _stamp(a_worker, seconds=5)],
                ("dapo", 1): [_stamp(b_trainer, seconds=2), _stamp(b_worker)]}
    codes = run_pool(args, commands, time.monotonic(), tmp_path)
    assert codes == {("dapo", 0): 0, ("dapo", 1): 0}
    ended = {path.name: float(path.read_text()) for path in (a_trainer, a_worker, b_trainer, b_worker)}
    assert ended["b0"] < ended["a1"]  # the slot the first trainer left was not kept idle
    assert ended["b1"] > ended["b0"]  # the second worker waited for a slot: two processes at a time


def test_a_runs_second_worker_starts_once_its_trainer_ended(tmp_path: Path) -> None:
    args = parse_args(["--model", "tiny", "--modes", "dapo", "--evaluate-aside", "--jobs", "2",
                       "--archive-every", "100", "--results-dir", str(tmp_path)])
    trainer, worker, second = (tmp_path / name for name in ("a0", "a1", "a2"))
    commands = {("dapo", 0): [_stamp(trainer, seconds=2), _stamp(worker, seconds=4), _stamp(second)]}
    assert run_pool(args, commands, time.monotonic(), tmp_path) == {("dapo", 0): 0}
    ended = {path.name: float(path.read_text()) for path in (trainer, worker, second)}
    assert ended["a0"] <= ended["a2"] < ended["a1"]  # free slots did not start it before its trainer ended
    assert (tmp_path / "dapo-s0-aside2.log").exists()


def test_train_only_needs_workers_to_evaluate() -> None:
    with pytest.raises(SystemExit, match="give --evaluate-aside too"):
        bench.run(bench.parse_args(["run", "--mode", "dapo", "--train-only", "--quick"]))


def test_a_failed_trainers_worker_never_starts(tmp_path: Path) -> None:
    args = parse_args(["--model", "tiny", "--modes", "dapo", "--evaluate-aside", "--jobs", "1",
                       "--archive-every", "100", "--results-dir", str(tmp_path)])
    commands = {("dapo", 0): [_stamp(tmp_path / "a0"), _stamp(tmp_path / "a1", seconds=2)],
                ("dapo", 1): [_stamp(tmp_path / "b0", code=3), _stamp(tmp_path / "b1", seconds=2)]}
    codes = run_pool(args, commands, time.monotonic(), tmp_path)
    assert codes == {("dapo", 0): 0, ("dapo", 1): 3} and not (tmp_path / "b1").exists()


def test_step0_validation_is_computed_once_and_equals_a_runs_own(tmp_path: Path) -> None:
    out = run_stages("csr_dual_lora_vs_dapo.py", ("run", "--mode", "dapo"), ("run", "--mode", "echo"), ("step0",),
                     ("step0",), ("run", "--mode", "dapo", "--seed", "1"), ("run", "--mode", "echo", "--seed", "1"),
                     results=tmp_path)
    assert out.count("wrote tiny-d1.json") == 1 and "holds this setting's step-0 validation" in out
    shared = load(tmp_path / "csr_dual_lora" / "step0" / "tiny-d1.json")
    assert shared["setting"]["episodes"] == 4 and shared["setting"]["warm_start"].startswith("tiny-CSRPhone")

    def step0_row(name: str) -> dict[str, Any]:
        log = tmp_path / "runs" / "csr_dual_lora" / name / "metrics.jsonl"
        row = json.loads(log.read_text().splitlines()[0]).items()
        return {k: v for k, v in row if k != "step" and not k.startswith("time/")}  # seconds differ run to run

    for mode, kind in (("dapo", "adapter"), ("echo", "echo")):
        own, reused = step0_row(f"tiny-{mode}-d1-s0"), step0_row(f"tiny-{mode}-d1-s1")
        assert shared["validation"][kind] == own == reused  # what each run would have computed itself
        assert load(tmp_path / "csr_dual_lora" / f"tiny-{mode}-d1-s1.json")["step0_from"] == "tiny-d1.json"
        assert load(tmp_path / "csr_dual_lora" / f"tiny-{mode}-d1-s0.json")["step0_from"] is None
    assert out.count("step-0 validation from tiny-d1.json") == 2


COMPARED_KEYS = ("curve", "episode_success_curve", "wm_accuracy_curve", "invalid_call_rate_curve", "tasks_by_step",
                 "final_eval", "final_test_by_difficulty", "final_test_episode_success", "finished")


def test_validating_aside_gives_the_inline_runs_part(tmp_path: Path) -> None:
    """A trainer that leaves its validations and final tests to jobs on its checkpoints writes the part of a run
    that validates as it trains; a worker that takes the jobs later gives them again."""
    flags = ("--mode", "separate", "--final-test", "1")
    run_stages("csr_dual_lora_vs_dapo.py", ("run", *flags), results=tmp_path / "inline")
    aside = tmp_path / "aside"
    run_stages("csr_dual_lora_vs_dapo.py", ("run", *flags, "--evaluate-aside"), results=aside)
    inline_part = load(tmp_path / "inline" / "csr_dual_lora" / "tiny-separate-d1-s0.json")
    part_path = aside / "csr_dual_lora" / "tiny-separate-d1-s0.json"
    aside_part = load(part_path)
    assert inline_part["finished"] and [step for step, _ in inline_part["curve"]] == [0, 2]
    for key in COMPARED_KEYS:
        assert aside_part[key] == inline_part[key], key
    assert aside_part["command"].endswith("--evaluate-aside --quick")

    jobs = aside / "runs" / "csr_dual_lora" / "tiny-separate-d1-s0" / "evaluations"
    for job in ("validation-step-2", "test-d1"):  # as if a deadline had stopped the run before these jobs
        (jobs / f"{job}.json").unlink()
    out = run_stages("csr_dual_lora_vs_dapo.py", ("evaluate-aside", *flags), results=aside)
    assert "2 evaluation(s) done beside the trainer" in out
    again = load(part_path)
    for key in COMPARED_KEYS:
        assert again[key] == inline_part[key], key
    assert not list(jobs.glob("scratch-*"))  # the worker's trainer folder is gone


def test_a_run_that_validated_itself_still_gets_its_final_tests_aside(tmp_path: Path) -> None:
    """Steps the run validated inline need no validation job, but the final tests at its last step still run."""
    out = run_stages("csr_dual_lora_vs_dapo.py", ("run", "--mode", "dapo"),
                     ("evaluate-aside", "--mode", "dapo", "--final-test", "1"), results=tmp_path)
    assert "1 evaluation(s) done beside the trainer" in out
    part = load(tmp_path / "csr_dual_lora" / "tiny-dapo-d1-s0.json")
    assert [step for step, _ in part["curve"]] == [0, 2] and set(part["final_test_by_difficulty"]) == {"1"}
    assert part["finished"]


def test_a_part_without_its_last_validation_is_not_finished() -> None:
    part = {"steps": 4, "steps_done": 4, "config": {"eval_every": 2}, "curve": [[0, 0.1], [2, 0.2]],
            "final_test_by_difficulty": {"1": 0.5}}
    assert not is_finished(part, (1,))
    part["curve"].append([4, 0.3])
    assert is_finished(part, (1,)) and not is_finished(part, (1, 2))
    assert is_finished({"steps": 3, "steps_done": 3, "config": {"eval_every": 0}, "curve": [[0, 0.1]]})


def test_the_report_refuses_to_compare_runs_of_other_settings() -> None:
    def part(mode: str, dropout: float) -> dict[str, Any]:
        return {"mode": mode, "seed": 0, "config": {"num_steps": 8, "eval_every": 2, "lora_dropout": dropout}}

    _check_one_setting([part("dapo", 0.0), part("echo", 0.0)])
    with pytest.raises(SystemExit, match=r"dapo seed 0: .*\"lora_dropout\": 0.0.*echo seed 0: .*0.05"):
        _check_one_setting([part("dapo", 0.0), part("echo", 0.05)])


def test_a_run_refuses_a_part_made_with_other_settings(tmp_path: Path) -> None:
    path = tmp_path / "csr_dual_lora" / "tiny-dapo-d1-s0.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"config": {"num_steps": 2, "eval_episodes": 16}}))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "csr_dual_lora_vs_dapo.py"), "run", "--mode",
                           "dapo", "--quick", "--results-dir", str(tmp_path)], cwd=REPO, capture_output=True,
                          text=True, check=False)
    assert done.returncode != 0 and "was made with other settings" in done.stderr
    assert "pass --restart to replace it" in done.stderr


def test_sweep_presets_fix_their_settings() -> None:
    args = parse_args(["--sweep", "smollm2-d3", "--seeds", "1"])
    preset = SWEEPS["smollm2-d3"]
    assert (args.model, args.difficulty, args.steps, args.episodes, args.eval_every) == ("smollm2-135m", 3, 8, 64, 2)
    assert (args.mistake_rate, args.continue_on, args.final_test) == (0.2, (3,), (1, 2, 3, 4, 5))
    command = run_command(args, "dapo", 1)
    assert args.lora_dropout == 0.0 and command[command.index("--lora-dropout") + 1] == "0"
    assert args.modes == preset.modes and args.seeds == [1] and args.jobs == (2 if memory_bytes() / 1e9 >= 31.8 else 1)
    assert {"dapo", "echo", "separate-own-clip", "shared-capped-0.1"} < set(preset.modes)
    assert any("imagined" in mode for mode in preset.modes) and len(preset.seeds) >= 3 and preset.steps >= 8
    assert parse_args(["--sweep", "smollm2-d3", "--device", "cuda"]).jobs == 4
    # validating aside, a run is two processes: one run at a time on two cores, two on a GPU
    assert parse_args(["--sweep", "smollm2-d3", "--evaluate-aside"]).jobs == 1
    assert parse_args(["--sweep", "smollm2-d3", "--evaluate-aside", "--device", "cuda"]).jobs == 2


def test_smollm2_processes_that_would_not_fit_in_memory_are_refused() -> None:
    gib = 2**30
    one_run_aside = parse_args(["--sweep", "smollm2-d3", "--evaluate-aside", "--jobs", "1"])
    check_memory(one_run_aside, 24 * gib)  # a d4-d5 test beside a d1-d3 one: 26.6 GB
    check_memory(one_run_aside, 16 * gib)  # one run always may: its peaks do not all come at once
    two_runs_aside = parse_args(["--sweep", "smollm2-d3", "--evaluate-aside", "--jobs", "2"])
    with pytest.raises(ValueError, match=r"2 SmolLM2 runs at a time hold up to 48.0 GB \(trainers beside workers, or "
                                         r"workers, at their measured peaks\), this machine has 25.8 GB: give --jobs 1"):
        check_memory(two_runs_aside, 24 * gib)  # four processes at once ran a 24 GiB machine out of memory
    check_memory(two_runs_aside, 48 * gib)
    two_runs = parse_args(["--sweep", "smollm2-d3", "--jobs", "2"])
    with pytest.raises(ValueError, match=r"hold up to 31.8 GB \(one process each.*give --jobs 1"):
        check_memory(two_runs, 24 * gib)
    check_memory(two_runs, 32 * gib)
    check_memory(parse_args(["--sweep", "smollm2-d3", "--evaluate-aside", "--device", "cuda"]), 8 * gib)
    check_memory(parse_args(["--sweep", "tiny-d1", "--evaluate-aside", "--jobs", "2"]), 8 * gib)
    if memory_bytes() / 1e9 >= 26.6:  # without --jobs, the runs that fit this machine pass its check
        for argv in (["--sweep", "smollm2-d3"], ["--sweep", "smollm2-d3", "--evaluate-aside"]):
            check_memory(parse_args(argv), memory_bytes())


@pytest.mark.parametrize(("argv", "message"), [
    (["--sweep", "smollm2"], "unknown sweep 'smollm2': choose one of smollm2-d3, tiny-d1"),
    (["--sweep", "smollm2-d3", "--steps", "4"], "the smollm2-d3 sweep fixes --steps at 8 (given 4)"),
    (["--sweep", "smollm2-d3", "--continue-on", "2"], "fixes --continue-on at (3,) (given [2])"),
    (["--sweep", "smollm2-d3", "--modes", "dapo", "separate"], "--modes separate: not in the smollm2-d3 sweep"),
    (["--modes", "dapo", "dapo-x"], "unknown mode(s) dapo-x: choose from dapo, "),
    (["--sweep", "tiny-d1", "--device", "cuda", "--jobs", "5"], "at most 4 processes share one GPU"),
    (["--sweep", "tiny-d1", "--device", "cuda", "--jobs", "3", "--evaluate-aside"], "2 per run"),
    (["--difficulty", "2"], "name the modes to run (--modes) or a sweep (--sweep)"),
])
def test_sweep_rejects_bad_input(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err


def test_bootstrap_interval_on_constructed_examples() -> None:
    # seeds that each agree with themselves: only the draw of seeds varies (2 of 2 at 1, 2 of 2 at 0, ...)
    assert bootstrap_interval([[1.0] * 8, [0.0] * 8]) == (0.0, 1.0)
    assert bootstrap_interval([[0.25] * 4] * 3) == (0.25, 0.25)  # nothing varies
    # one seed of 64 episodes, half of them successes: the normal interval 0.5 +- 1.96 * 0.0625
    low, high = bootstrap_interval([[1.0, 0.0] * 32])
    assert low == pytest.approx(0.5 - 1.96 * 0.0625, abs=0.015) and high == pytest.approx(0.5 + 1.96 * 0.0625,
                                                                                          abs=0.015)
    # both levels count: seeds at 0.25 and 0.75, their episodes alike (seeds alone) or varying (wider)
    assert bootstrap_interval([[0.25] * 64, [0.75] * 64]) == (0.25, 0.75)
    low, high = bootstrap_interval([[1.0, 0.0, 0.0, 0.0] * 16, [1.0, 1.0, 1.0, 0.0] * 16])
    assert low < 0.25 and high > 0.75
    # deterministic for a seed, another seed another draw (unequal seeds: 7, 9 and 6 episodes)
    groups = [[1.0, 0.0, 0.0] * 7, [1.0, 0.0] * 9, [1.0] * 5 + [0.0]]
    assert bootstrap_interval(groups, seed=0) == bootstrap_interval(groups, seed=0) != bootstrap_interval(groups,
                                                                                                         seed=1)
    with pytest.raises(ValueError, match=re.escape("no empty one, got sizes [2, 0]")):
        bootstrap_interval([[1.0, 0.0], []])


def test_report_helpers_on_constructed_parts() -> None:
    def part(seconds: float, machine: str, **extra: Any) -> dict[str, Any]:
        return {"steps": 2, "steps_done": 2, "step_seconds": [seconds], "machine": {"cpu_model": machine},
                "curve": [[0, 0.0], [2, 0.5]], "episode_success_curve": [[0, [0.0]], [2, [1.0, 0.0]]], **extra}

    dapo = [part(10.0, "A"), part(40.0, "B")]
    mode = [part(12.0, "A"), part(12.0, "C")]
    (label,) = step_time_by_machine(mode, dapo)  # machine C made no DAPO part; B no part of this mode
    assert label.startswith("A,") and step_time_by_machine(mode, dapo)[label] == pytest.approx(1.2)
    assert final_success_interval(mode) == [0.0, 1.0]
    assert final_success_interval([{**mode[0], "episode_success_curve": [[0, [0.0]]]}]) is None  # no last one
    assert final_success_interval([{"curve": [[0, 0.0]]}]) is None  # an older part
    finished = part(1.0, "A", final_test_by_difficulty={"1": 0.5})
    assert is_finished(finished, (1,)) and not is_finished(finished, (1, 2))
    assert not is_finished({**finished, "steps_done": 1}, (1,))
    rounds = {"config": {"prompts_per_step": 2, "group_size": 8, "first_round_prompts": 0},
              "episodes_by_step": [0, 32, 48, 80, 96]}  # second rounds at steps 1 and 3
    assert second_round_share(rounds) == 0.5
    assert second_round_share({**rounds, "config": {**rounds["config"], "first_round_prompts": 4}}) == 0.0
    assert second_round_share({"config": rounds["config"]}) is None


def test_the_confirmed_share_of_imagined_successes_weighs_each_step_by_its_successes() -> None:
    part = {"imagined_episodes_by_step": [8.0, 8.0, 8.0], "imagined_success_by_step": [0.5, 0.0, 0.25],
            "imagined_success_confirmed_by_step": [0.25, None, 1.0]}  # 4 successes (1 confirmed), none, 2 (2)
    assert imagined_success_confirmed(part) == pytest.approx(3 / 6)
    assert imagined_success_confirmed({**part, "imagined_success_by_step": [0.0, 0.0, 0.0]}) is None
    assert imagined_success_confirmed({"imagined_episodes_by_step": [8.0]}) is None  # a part made before the record


def test_a_part_made_before_its_modes_definition_changed_is_stale(tmp_path: Path) -> None:
    """A mode field a part's config lacks had its default: the same run for modes that keep it, a stale one for
    a mode that now sets it."""
    settings = {"num_steps": 8, "eval_every": 2, "eval_episodes": 64, "max_turns": 6, "temperature": 0.5,
                "prompts_per_step": 4, "group_size": 8, "iwm_steps": 4, "lora_dropout": 0.0}
    path = tmp_path / "part.json"
    for mode, expected in (("separate-own-clip", None), ("separate-own-clip-imagined50", {"wm_token_rows": [False, True]})):
        config = bench.dual_lora_config("tiny", 1, **bench.MODES[mode], **settings)
        made_before = {key: value for key, value in config.to_dict().items() if key != "wm_token_rows"}
        path.write_text(json.dumps({"config": made_before}))
        assert bench.stale_part(path, config) == expected


def test_the_report_can_leave_out_the_parts_of_runs_in_flight(tmp_path: Path) -> None:
    folder = tmp_path / "csr_dual_lora"
    folder.mkdir()
    for name in ("dapo-s0", "dapo-s1", "echo-s0", "echo-s1"):
        (folder / f"{name}.json").write_text(json.dumps({"name": name}))
    args = bench.parse_args(["report", "--results-dir", str(tmp_path)])
    assert [p["name"] for p in bench.read_parts(args)] == ["dapo-s0", "dapo-s1", "echo-s0", "echo-s1"]
    args = bench.parse_args(["report", "--results-dir", str(tmp_path), "--leave-out", "echo-s1", "dapo-*"])
    assert [p["name"] for p in bench.read_parts(args)] == ["echo-s0"]
