"""Evaluations beside training: a run's validations and final tests as jobs that any of its processes may take.

A trainer that does not validate as it trains saves a checkpoint at every step; each evaluation of one step's
weights is then a :class:`Job`, whose result is ``<folder>/<job>.json``. A worker takes the jobs whose checkpoint
exists, one at a time, holding an exclusive ``flock`` on ``<folder>/<job>.lock`` while it works: two workers never
do the same job, and a worker that dies (killed at a deadline) frees its job for another, since the kernel drops
the lock of a closed file. Two processes on two cores, one training and one evaluating the checkpoints behind it,
finish a run in about the time of its training alone plus its last evaluations.

    >>> import tempfile; folder = JobFolder(Path(tempfile.mkdtemp()))
    >>> jobs = [Job("validation-step-2", 2), Job("test-d1", 2)]
    >>> work(folder, jobs, ready=lambda job: True, run_job=lambda job: {"step": job.step}, after=lambda: None)
    2
    >>> folder.result(jobs[1])
    {'step': 2}
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Job", "JobFolder", "work"]


@dataclass(frozen=True)
class Job:
    """One evaluation: ``name`` is its files' stem, ``step`` the step whose checkpoint it evaluates. Jobs of one
    ``group`` run one at a time, whichever workers take them (e.g. those whose memory two processes cannot hold
    at once)."""

    name: str
    step: int
    group: str | None = None


class JobFolder:
    """The results and locks of a run's jobs, in one folder (created on first use). The locks of job groups are
    in ``groups`` (default: the same folder): runs whose folders share it run their groups' jobs one at a time
    between them too."""

    def __init__(self, folder: Path, groups: Path | None = None):
        self.folder = folder
        self.groups = JobFolder(groups) if groups is not None else self

    def result(self, job: Job) -> dict[str, Any] | None:
        """The job's result, or None when it has none yet."""
        path = self.folder / f"{job.name}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def save(self, job: Job, result: dict[str, Any]) -> None:
        """Write the job's result whole (a reader never sees half of it)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f"{job.name}.json.partial"
        partial.write_text(json.dumps(result) + "\n")
        partial.replace(self.folder / f"{job.name}.json")

    @contextmanager
    def claimed(self, name: str, wait: bool = False) -> Iterator[bool]:
        """Hold ``<name>.lock`` within the block; yields whether this process got it (``wait``: block until it
        does). Another process's claim, or another open of the same lock in this one, excludes it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"{name}.lock", "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def is_held(self, name: str) -> bool:
        """Whether another process (or another open in this one) holds ``<name>.lock`` now."""
        with self.claimed(name) as ours:
            return not ours


def work(folder: JobFolder, jobs: Sequence[Job], ready: Callable[[Job], bool],
         run_job: Callable[[Job], dict[str, Any]], after: Callable[[], None], done: Callable[[Job], bool] | None = None,
         poll_s: float | None = None, keep_waiting: Callable[[], bool] = lambda: True) -> int:
    """Do the ``ready`` jobs that have no result and no other worker (nor one of their group at work), in order,
    calling ``after`` after each.

    Args:
        folder: where the results and locks are.
        jobs: every job of the run, in the order to take them.
        ready: whether a job can start (its checkpoint exists).
        run_job: the job's result.
        after: called after each job this worker finished (e.g. to write the run's part file).
        done: whether a job needs no work for another reason than a result (default: never).
        poll_s: None: return once no ready job is free. Else wait, looking again every ``poll_s`` seconds, until
            every job is done by some worker or ``keep_waiting()`` is false (e.g. the trainer is gone).

    Returns:
        The number of jobs this worker did.
    """
    def finished(job: Job) -> bool:
        return folder.result(job) is not None or (done is not None and done(job))

    count = 0
    while True:
        free = [job for job in jobs if not finished(job) and ready(job)]
        took = False
        for job in free:
            with contextlib.ExitStack() as held:
                if not held.enter_context(folder.claimed(job.name)) or finished(job):
                    continue  # another worker has it, or finished it since the look above
                if job.group is not None and not held.enter_context(folder.groups.claimed(f"group-{job.group}")):
                    continue  # a job of its group runs elsewhere (in this run, or in one sharing its groups)
                folder.save(job, run_job(job))
            count, took = count + 1, True
            after()
            break  # look again: an earlier job (a newer checkpoint's) may have become ready meanwhile
        if took:
            continue
        if poll_s is None or all(finished(job) for job in jobs) or not keep_waiting():
            return count
        time.sleep(poll_s)

