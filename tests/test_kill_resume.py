"""kill -9 + resume for every trainer: the resumed run ends with the uninterrupted run's weights and metrics.

Each run is a separate process (``tests/kill_resume_worker.py``), forked from a forkserver that has only
imported the libraries, so it starts in a fraction of a second and shares no state with the test or with
the other runs. The kill step is random: set ``WORLDGYM_KILL_SEED`` to replay a failure's seed.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import random
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from worldgym.agents.llm.checkpoint import load_checkpoint
from worldgym.checkpointing import CRASH_STAGES, is_complete, run_files
from worldgym.jsonl import read_jsonl
from worldgym.retention import DELETING
from worldgym.segment_store import SEGMENT_FILES, SEGMENT_WRITTEN

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the forkserver imports the worker by name
import kill_resume_worker as worker

SEED = int(os.environ.get("WORLDGYM_KILL_SEED", random.randrange(2**32)))
TIMING_PREFIXES = ("time/", "perf/")  # wall-clock figures differ between any two runs
RUN_TIMEOUT_S = 240


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """One torch thread (the shared fixture) for every test here."""


@pytest.fixture(scope="module")
def processes():
    """Starts runs as processes forked from a forkserver that imported the libraries once."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(worker.PRELOAD)
    return context


class Runs:
    """Starts worker runs and waits for them; every run has its own folder and log under ``root``."""

    def __init__(self, processes, root: Path) -> None:
        self.processes = processes
        self.root = root
        self.assets = root / "assets"
        self._uninterrupted: dict[str, Path] = {}
        self.finish(self._start(str(root / "assets.log"), worker.prepare_assets, str(self.assets)))

    def start(self, trainer: str, run_dir: Path, **options) -> multiprocessing.Process:
        log = f"{run_dir}.log"
        return self._start(log, worker.train, trainer, str(run_dir), str(self.assets), log, **options)

    def _start(self, log: str, target, *args, **kwargs) -> multiprocessing.Process:
        process = self.processes.Process(target=target, args=args, kwargs=kwargs, name=str(log))
        process.start()
        return process

    def finish(self, process: multiprocessing.Process) -> None:
        process.join(RUN_TIMEOUT_S)
        assert process.exitcode == 0, f"{process.name} ended with {process.exitcode}:\n{self.log(process)}"

    def run(self, trainer: str, run_dir: Path, **options) -> Path:
        self.finish(self.start(trainer, run_dir, **options))
        return run_dir

    def uninterrupted(self, trainer: str) -> Path:
        """A run of ``trainer`` from start to end (once per module)."""
        if trainer not in self._uninterrupted:
            self._uninterrupted[trainer] = self.run(trainer, self.root / f"{trainer}_uninterrupted")
        return self._uninterrupted[trainer]

    @staticmethod
    def log(process: multiprocessing.Process) -> str:
        path = Path(process.name)
        return path.read_text()[-3000:] if path.is_file() else "(no log)"


@pytest.fixture(scope="module")
def runs(processes, tmp_path_factory) -> Runs:
    return Runs(processes, tmp_path_factory.mktemp("kill_resume"))


def training_steps(trainer: str, run_dir: Path) -> list[int]:
    """The steps logged so far (records at step 0 are the evaluation before training)."""
    key = worker.STEP_KEY[trainer]
    return [record[key] for record in read_jsonl(run_dir / "metrics.jsonl") if record.get(key, 0) > 0]


def kill_once_logged(
    process: multiprocessing.Process, trainer: str, run_dir: Path, count: int, delay: float
) -> None:
    """SIGKILL ``process`` ``delay`` seconds after its ``count``-th training step is in ``metrics.jsonl``."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while len(training_steps(trainer, run_dir)) < count:
        assert process.is_alive(), f"the run ended before step {count}:\n{Runs.log(process)}"
        assert time.monotonic() < deadline, f"no step {count} after {RUN_TIMEOUT_S} s"
        time.sleep(0.002)
    time.sleep(delay)
    os.kill(process.pid, signal.SIGKILL)
    process.join(RUN_TIMEOUT_S)
    assert process.exitcode == -signal.SIGKILL, f"the run ended before the kill:\n{Runs.log(process)}"


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in record.items() if not k.startswith(TIMING_PREFIXES)} for record in records]


def assert_same_run(trainer: str, expected: Path, got: Path) -> None:
    """Same final trainable weights, bit for bit, and the same lines in every JSONL log but for timings."""
    want, have = worker.final_weights(trainer, expected), worker.final_weights(trainer, got)
    assert sorted(have) == sorted(want)
    differing = [name for name in want if not torch.equal(have[name], want[name])]
    assert not differing, (
        f"{len(differing)} of {len(want)} tensors differ, e.g. {differing[:3]} (seed {SEED})"
    )
    logs = sorted(path.name for path in expected.glob("*.jsonl"))
    assert logs == sorted(path.name for path in got.glob("*.jsonl")) and "metrics.jsonl" in logs
    for name in logs:
        want_lines, have_lines = (without_timing(read_jsonl(run / name)) for run in (expected, got))
        assert len(have_lines) == len(want_lines), (
            f"{name}: {len(have_lines)} lines, expected {len(want_lines)}"
        )
        for index, (have_line, want_line) in enumerate(zip(have_lines, want_lines, strict=True)):
            assert have_line == want_line, f"{name} line {index + 1} differs (seed {SEED})"


def resumed_from(run_dir: Path) -> list[str | None]:
    """The checkpoint each start of the run resumed from (None: a fresh start)."""
    return [start["resumed_from"] for start in read_jsonl(f"{run_dir}.starts.jsonl")]


@pytest.mark.parametrize("trainer", worker.TRAINERS)
def test_kill_9_at_a_random_step_then_resume_ends_like_the_uninterrupted_run(runs, tmp_path, trainer):
    """SIGKILL a run a random moment after a random step (during a step or a save), resume it in a fresh
    process from the checkpoint that survived, finish: same final weights and metrics as without the kill."""
    expected = runs.uninterrupted(trainer)
    steps = len(training_steps(trainer, expected))
    rng = random.Random(f"{SEED}-{trainer}")
    count, delay = rng.randint(2, steps - 1), rng.uniform(0.0, 0.03)
    run_dir = tmp_path / "run"
    kill_once_logged(runs.start(trainer, run_dir), trainer, run_dir, count, delay)
    runs.run(trainer, run_dir)
    first, second = resumed_from(run_dir)
    assert first is None and second is not None, "the second start did not resume from a checkpoint"
    assert_same_run(trainer, expected, run_dir)


@pytest.fixture(scope="module")
def after_one_step(runs) -> Callable[[str], Path]:
    """A GRPO or dual-LoRA run stopped after its first step (``checkpoint-1`` and ``checkpoint-last`` written),
    run once per module."""
    return functools.cache(lambda trainer: runs.run(trainer, runs.root / f"{trainer}_one_step", num_steps=1))


def checkpoint_folders(run_dir: Path) -> list[str]:
    return sorted(path.name for path in run_dir.iterdir() if path.name.startswith("checkpoint"))


def segment_files(run_dir: Path) -> list[str]:
    return sorted(path.name for path in run_dir.glob(SEGMENT_FILES))


# the dual-LoRA world model's replay is stored once per run: a save may also be killed once it has written its
# replay segment, before the checkpoint that lists it
LLM_STAGES = [*(("grpo", stage) for stage in CRASH_STAGES), *(("dual_lora", stage) for stage in CRASH_STAGES),
              ("dual_lora", SEGMENT_WRITTEN)]


@pytest.mark.parametrize(("trainer", "stage"), LLM_STAGES)
def test_llm_killed_at_each_stage_of_a_save_resumes_from_a_loadable_checkpoint(
    runs, after_one_step, tmp_path, trainer, stage
):
    """Continue a one-step GRPO or dual-LoRA run to its end in a process that SIGKILLs itself at ``stage`` of a
    random later save (``checkpoint-<n>``; for ``old_moved_aside``, the first save that replaces a folder: a
    better ``checkpoint-best``, else ``checkpoint-last`` at the end; for ``pruning``, the removal of the
    checkpoint the new one displaces): a loadable checkpoint is left, with every replay segment it needs, and
    resuming finishes the run as if never killed, with no partial folder and no orphan segment left behind."""
    expected = runs.uninterrupted(trainer)
    run_dir = tmp_path / "run"
    shutil.copytree(after_one_step(trainer), run_dir)
    first_step = random.Random(f"{SEED}-{trainer}-{stage}").randint(2, worker.LLM_STEPS)
    killed = runs.start(trainer, run_dir, crash=(stage, first_step))
    killed.join(RUN_TIMEOUT_S)
    assert killed.exitcode == -signal.SIGKILL, f"not killed at {stage}:\n{runs.log(killed)}"
    complete = [run_dir / name for name in checkpoint_folders(run_dir)
                if not name.endswith((".tmp", ".old", DELETING))]
    steps = [load_checkpoint(path)[1]["step"] for path in complete]  # every complete one loads, run files too
    moved_aside = [name for name in checkpoint_folders(run_dir) if name.endswith(".old")]
    if stage == "old_moved_aside":  # the end's checkpoint-last, or a checkpoint-best replaced on the way
        assert moved_aside in (["checkpoint-last.old"], ["checkpoint-best.old"]), checkpoint_folders(run_dir)
        partial, newest = moved_aside[0], worker.LLM_STEPS if moved_aside == ["checkpoint-last.old"] else max(steps)
    else:
        partial = {
            "files_written": f"checkpoint-{first_step}.tmp",
            "synced": f"checkpoint-{first_step}.tmp",
            "new_renamed_in": None,
            "pruning": f"checkpoint-{first_step - 1}{DELETING}",  # save_total_limit=1: the previous one goes
            SEGMENT_WRITTEN: None,
        }[stage]
        newest = first_step - (stage in ("files_written", "synced", SEGMENT_WRITTEN))
    assert partial is None or (run_dir / partial).is_dir(), checkpoint_folders(run_dir)
    assert max(steps) == newest
    loadable = [run_dir / name for name in checkpoint_folders(run_dir) if not name.endswith((".tmp", DELETING))]
    listed = {Path(name).name for path in loadable for name in run_files(path)}  # a ".old" one's too
    # a checkpoint whose pruning was cut short may list segments no other one needs: its next prune deletes them
    pruned = {Path(name).name for folder in checkpoint_folders(run_dir) if folder.endswith(DELETING)
              for name in run_files(run_dir / folder)}
    unlisted = trainer == "dual_lora" and stage in ("files_written", "synced", SEGMENT_WRITTEN)
    orphans = [name for name in segment_files(run_dir) if name not in listed and name not in pruned]
    assert len(orphans) == unlisted  # the killed save's
    runs.run(trainer, run_dir)
    assert resumed_from(run_dir)[-1] == str(run_dir / f"checkpoint-{newest}")
    assert_same_run(trainer, expected, run_dir)
    assert checkpoint_folders(run_dir) == checkpoint_folders(expected)
    assert segment_files(run_dir) == segment_files(expected)


# Dreamer never saves over an existing folder (no checkpoint-last or -best), so it is never killed "old_moved_aside";
# it may be killed once a save has written its replay segment, before the checkpoint that lists it.
DREAMER_STAGES = (*(stage for stage in CRASH_STAGES if stage != "old_moved_aside"), SEGMENT_WRITTEN)
DREAMER_SAVE_EVERY = 4  # iterations between two of the worker's Dreamer checkpoints (save_total_limit=2)


@pytest.mark.parametrize("stage", DREAMER_STAGES)
def test_dreamer_killed_at_each_stage_of_a_save_resumes_exactly(runs, tmp_path, stage):
    """SIGKILL a Dreamer run (Game Boy, episodes kept across a resume) at ``stage`` of a random save that also
    prunes: the complete checkpoints left verify with every replay segment they need, resuming finishes the run as
    if never killed, and the run folder ends with the same checkpoints and replay segments (same bytes: their
    names hold their hashes) as the uninterrupted run, a killed save's orphan segment gone."""
    expected = runs.uninterrupted("dreamer_v3")
    run_dir = tmp_path / "run"
    first_step = DREAMER_SAVE_EVERY * random.Random(f"{SEED}-dreamer-{stage}").randint(3, 8)
    killed = runs.start("dreamer_v3", run_dir, crash=(stage, first_step))
    killed.join(RUN_TIMEOUT_S)
    assert killed.exitcode == -signal.SIGKILL, f"not killed at {stage}:\n{runs.log(killed)}"
    complete = [run_dir / name for name in checkpoint_folders(run_dir) if not name.endswith((".tmp", DELETING))]
    assert complete and all(is_complete(path) for path in complete), checkpoint_folders(run_dir)
    unfinished = stage in ("files_written", "synced", SEGMENT_WRITTEN)  # the killed save's segment, unlisted
    newest = first_step - DREAMER_SAVE_EVERY * unfinished
    assert max(int(path.name.split("-")[1]) for path in complete) == newest
    partial = {"files_written": f"checkpoint-{first_step}.tmp", "synced": f"checkpoint-{first_step}.tmp",
               "pruning": f"checkpoint-{first_step - 2 * DREAMER_SAVE_EVERY}{DELETING}"}.get(stage)
    assert partial is None or (run_dir / partial).is_dir(), checkpoint_folders(run_dir)
    listed = {Path(name).name for path in complete for name in run_files(path)}
    orphans = [name for name in segment_files(run_dir) if name not in listed]
    assert [name.split("-")[1:3] for name in orphans] == [[str(newest), str(first_step)]] * unfinished, orphans
    runs.run("dreamer_v3", run_dir)
    assert resumed_from(run_dir)[-1] == str(run_dir / f"checkpoint-{newest}")
    assert_same_run("dreamer_v3", expected, run_dir)
    assert checkpoint_folders(run_dir) == checkpoint_folders(expected)
    assert segment_files(run_dir) == segment_files(expected)
