"""Evaluation jobs beside training: one worker per job, a dead worker's job freed, waiting for checkpoints."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from benchmarks.evaluation_jobs import Job, JobFolder, work

from .test_benchmarks_quick import REPO

JOBS = [Job("validation-step-2", 2), Job("validation-step-4", 4), Job("test-d1", 4)]


def test_a_claim_excludes_other_workers_until_released(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path / "evaluations")
    with folder.claimed("validation-step-2") as first:
        assert first and folder.is_held("validation-step-2")
        with folder.claimed("validation-step-2") as second:
            assert not second
        assert not folder.is_held("test-d1")
    assert not folder.is_held("validation-step-2")


def test_a_dead_workers_claim_is_freed(tmp_path: Path) -> None:
    holder = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from benchmarks.evaluation_jobs import JobFolder
        with JobFolder(Path({str(tmp_path)!r})).claimed("validation-step-2") as ours:
            print(ours, flush=True)
            sys.stdin.readline()
    """)
    process = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "True"
    folder = JobFolder(tmp_path)
    assert folder.is_held("validation-step-2")
    done = work(folder, JOBS[:1], ready=lambda job: True, run_job=lambda job: {"by": "me"}, after=lambda: None)
    assert done == 0 and folder.result(JOBS[0]) is None  # the other process has it
    process.kill()
    process.wait()
    assert not folder.is_held("validation-step-2")
    assert work(folder, JOBS[:1], ready=lambda job: True, run_job=lambda job: {"by": "me"}, after=lambda: None) == 1
    assert folder.result(JOBS[0]) == {"by": "me"}


def test_work_takes_ready_jobs_in_order_and_skips_finished_ones(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path)
    folder.save(JOBS[1], {"earlier": True})
    order: list[str] = []
    after: list[int] = []
    done = work(folder, JOBS, ready=lambda job: job.step <= 4, run_job=lambda job: order.append(job.name) or {},
                after=lambda: after.append(len(order)), done=lambda job: job.name == "test-d1")
    assert done == 1 and order == ["validation-step-2"] and after == [1]
    assert folder.result(JOBS[1]) == {"earlier": True}  # not done again


def test_waiting_workers_take_checkpoints_as_they_appear_and_stop_without_a_trainer(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path)
    checkpoints = {2}
    looks: list[int] = []

    def ready(job: Job) -> bool:
        return job.step in checkpoints

    def keep_waiting() -> bool:  # the "trainer" saves step 4 at the second look, then is gone after the fourth
        looks.append(1)
        checkpoints.add(4) if len(looks) == 2 else None
        return len(looks) < 4

    done = work(folder, JOBS, ready, run_job=lambda job: {"step": job.step}, after=lambda: None, poll_s=0.0,
                keep_waiting=keep_waiting)
    assert done == 3 and [folder.result(job) for job in JOBS] == [{"step": 2}, {"step": 4}, {"step": 4}]
    folder2 = JobFolder(tmp_path / "never")  # a trainer that never saves step 4: the worker stops waiting
    looks.clear()
    checkpoints.discard(4)
    assert work(folder2, JOBS, lambda job: job.step == 2, run_job=lambda job: {}, after=lambda: None, poll_s=0.0,
                keep_waiting=lambda: looks.append(1) or len(looks) < 3) == 1
    assert folder2.result(JOBS[1]) is None and len(looks) == 3


def test_jobs_of_one_group_run_one_at_a_time(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path)
    jobs = [Job("validation-step-4", 4), Job("test-d4", 4, "long-tests"), Job("test-d5", 4, "long-tests")]
    done: list[str] = []

    def run_job(job: Job) -> dict[str, int]:
        done.append(job.name)
        return {"step": job.step}

    with folder.claimed("group-long-tests"):  # another worker is running a job of the group
        assert work(folder, jobs, ready=lambda job: True, run_job=run_job, after=lambda: None) == 1
    assert done == ["validation-step-4"]
    assert work(folder, jobs, ready=lambda job: True, run_job=run_job, after=lambda: None) == 2
    assert done == ["validation-step-4", "test-d4", "test-d5"]


def test_runs_sharing_a_groups_folder_run_their_groups_jobs_one_at_a_time(tmp_path: Path) -> None:
    first = JobFolder(tmp_path / "run-a" / "evaluations", groups=tmp_path)
    second = JobFolder(tmp_path / "run-b" / "evaluations", groups=tmp_path)
    jobs = [Job("validation-step-4", 4), Job("test-d5", 4, "long-tests")]
    done: list[str] = []

    def run_job(job: Job) -> dict[str, int]:
        done.append(job.name)
        return {"step": job.step}

    with first.groups.claimed("group-long-tests"):  # the other run is testing d5
        assert work(second, jobs, ready=lambda job: True, run_job=run_job, after=lambda: None) == 1
    assert done == ["validation-step-4"] and (tmp_path / "group-long-tests.lock").is_file()
    assert work(second, jobs, ready=lambda job: True, run_job=run_job, after=lambda: None) == 1
    assert done == ["validation-step-4", "test-d5"]
