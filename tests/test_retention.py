"""Checkpoint retention: which step checkpoints stay, checkpoint-best, a kill while pruning, run-folder look-ups."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from worldgym.checkpointing import (
    CRASH_ENV,
    LAST_CHECKPOINT,
    checkpoint_directory,
    is_complete,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    write_durably,
)
from worldgym.errors import CheckpointNotFoundError, ConfigError, RunFolderError
from worldgym.retention import DELETING, CheckpointKeeper, check_retention, prune_checkpoints, prune_run_files
from worldgym.run_folder import BEST_CHECKPOINT, find_checkpoint, read_results


def _save(path: Path, step: int) -> Path:
    return save_checkpoint(path, {"w": torch.full((4,), float(step))}, {"i": step}, step=step)


def _names(run: Path) -> list[str]:
    return sorted(p.name for p in run.iterdir() if p.name.startswith("checkpoint"))


def test_the_newest_step_checkpoints_stay_and_last_and_best_are_never_pruned(tmp_path):
    keeper = CheckpointKeeper(tmp_path, save_total_limit=2)
    _save(tmp_path / BEST_CHECKPOINT, 1)
    for step in range(1, 6):
        keeper.save_step(step, lambda path, step=step: _save(path, step))
    _save(tmp_path / LAST_CHECKPOINT, 5)
    assert _names(tmp_path) == ["checkpoint-4", "checkpoint-5", "checkpoint-best", "checkpoint-last"]
    assert load_checkpoint(tmp_path / BEST_CHECKPOINT)[1]["i"] == 1


def test_without_a_limit_every_step_checkpoint_stays(tmp_path):
    for step in range(1, 4):
        CheckpointKeeper(tmp_path).save_step(step, lambda path, step=step: _save(path, step))
    assert _names(tmp_path) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]


def test_a_damaged_step_checkpoint_does_not_count_as_kept(tmp_path):
    for step in (1, 2, 3):
        _save(tmp_path / f"checkpoint-{step}", step)
    (tmp_path / "checkpoint-3" / "weights.safetensors").write_bytes(b"torn")
    deleted = prune_checkpoints(tmp_path, save_total_limit=1)
    assert [p.name for p in deleted] == ["checkpoint-1"]
    with pytest.warns(UserWarning, match="corrupt"):
        assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-2"


_PRUNER = """
import sys
from worldgym.retention import prune_checkpoints
prune_checkpoints(sys.argv[1], 1)
"""


def test_a_kill_while_pruning_leaves_the_newest_checkpoint_and_the_next_prune_cleans_up(tmp_path):
    for step in (1, 2, 3):
        _save(tmp_path / f"checkpoint-{step}", step)
    env = {**os.environ, CRASH_ENV: "pruning", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    pruner = subprocess.run([sys.executable, "-c", _PRUNER, str(tmp_path)], check=False, env=env, timeout=120)
    assert pruner.returncode == -signal.SIGKILL, "the prune was not killed at the injection point"
    assert f"checkpoint-2{DELETING}" in _names(tmp_path)
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-3"
    prune_checkpoints(tmp_path, 1)
    assert _names(tmp_path) == ["checkpoint-3"]


def test_the_best_checkpoint_follows_the_metric_and_is_recorded_in_results(tmp_path):
    keeper = CheckpointKeeper(tmp_path, metric_for_best_model="eval/loss", greater_is_better=False)
    history: list[dict] = []
    for step, loss in [(0, 3.0), (1, None), (2, 1.0), (3, 2.0)]:
        history.append({"step": step} | ({} if loss is None else {"eval/loss": loss}))
        keeper.save_best(history, lambda path, step=step: _save(path, step))
    assert load_checkpoint(tmp_path / BEST_CHECKPOINT)[1]["i"] == 2
    assert read_results(tmp_path)["best_checkpoint"] == {"path": BEST_CHECKPOINT, "step": 2, "metric": "eval/loss",
                                                         "value": 1.0}



def test_a_resume_saves_the_best_checkpoint_only_when_the_kill_came_before_it(tmp_path):
    keeper = CheckpointKeeper(tmp_path, metric_for_best_model="eval/loss", greater_is_better=False)
    history = [{"step": 0, "eval/loss": 3.0}]
    keeper.resumed(history, lambda path: _save(path, 0))  # killed between the step's checkpoint and its best
    assert load_checkpoint(tmp_path / BEST_CHECKPOINT)[1]["i"] == 0
    keeper.resumed(history, lambda path: _save(path, 7))  # resumed from a later checkpoint of the same row
    assert load_checkpoint(tmp_path / BEST_CHECKPOINT)[1]["i"] == 0

def test_checkpoints_are_found_by_best_last_or_step_with_clear_errors(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n")
    _save(tmp_path / "checkpoint-1", 1)
    assert find_checkpoint(tmp_path) == tmp_path / "checkpoint-1"  # "last": the newest, numbered or not
    _save(tmp_path / LAST_CHECKPOINT, 2)
    assert find_checkpoint(tmp_path, "1") == tmp_path / "checkpoint-1"
    assert find_checkpoint(tmp_path) == tmp_path / LAST_CHECKPOINT
    with pytest.raises(CheckpointNotFoundError, match=re.escape("has no complete checkpoint-best: its checkpoints "
                                                                "are ['checkpoint-1', 'checkpoint-last']")):
        find_checkpoint(tmp_path, "best")
    with pytest.raises(RunFolderError, match=re.escape("checkpoint='newest' is invalid")):
        find_checkpoint(tmp_path, "newest")
    with pytest.raises(RunFolderError, match="no such directory"):
        find_checkpoint(tmp_path / "missing")
    with pytest.raises(RunFolderError, match="holds neither metrics.jsonl nor a checkpoint"):
        find_checkpoint(_empty(tmp_path))


def _empty(root: Path) -> Path:
    (root / "empty").mkdir()
    return root / "empty"


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_a_bad_save_total_limit_is_refused(limit):
    with pytest.raises(ConfigError, match=re.escape(f"save_total_limit={limit!r} is invalid")):
        check_retention(limit)


def _save_sharing(path: Path, step: int, shared: list[str]) -> Path:
    """A step checkpoint that needs the run files ``shared`` (``store/<name>``), written first if missing."""
    for name in shared:
        if not (path.parent / "store" / name).is_file():
            write_durably(path.parent / "store" / name, name.encode())
    digests = {f"store/{name}": hashlib.sha256(name.encode()).hexdigest() for name in shared}
    with checkpoint_directory(path, "test", 1, step, digests) as tmp:
        (tmp / "state.json").write_text("{}")
    return path


def _store(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "store").iterdir())


def test_pruning_keeps_the_run_files_a_kept_checkpoint_needs_and_only_those(tmp_path):
    """Shared run files go once no checkpoint lists them (a pruned one, one being deleted, or a save never renamed
    in do not count; checkpoint-best and a checkpoint moved aside do); files the glob does not match stay."""
    keeper = CheckpointKeeper(tmp_path, save_total_limit=2, shared=("store/seg-*",))
    _save_sharing(tmp_path / BEST_CHECKPOINT, 1, ["seg-a"])
    write_durably(tmp_path / "store" / "notes.txt", b"not a segment")
    for step, names in [(1, ["seg-a"]), (2, ["seg-a", "seg-b"]), (3, ["seg-b", "seg-c"]), (4, ["seg-c", "seg-d"])]:
        keeper.save_step(step, lambda path, step=step, names=names: _save_sharing(path, step, names))
    assert _names(tmp_path) == ["checkpoint-3", "checkpoint-4", "checkpoint-best"]
    assert _store(tmp_path) == ["notes.txt", "seg-a", "seg-b", "seg-c", "seg-d"]  # seg-a: checkpoint-best
    shutil.rmtree(tmp_path / BEST_CHECKPOINT)
    (tmp_path / "checkpoint-3").rename(tmp_path / "checkpoint-3.old")  # a save killed after moving it aside
    _save_sharing(tmp_path / "checkpoint-5.tmp", 5, ["seg-e"])  # a save killed before its rename
    write_durably(tmp_path / "store" / "seg-f", b"x")
    (tmp_path / "store" / "seg-f").rename(tmp_path / "store" / "seg-f.tmp")  # a write killed before its rename
    assert prune_run_files(tmp_path, ("store/seg-*",)) == [tmp_path / "store" / n for n in ("seg-a", "seg-e", "seg-f.tmp")]
    assert _store(tmp_path) == ["notes.txt", "seg-b", "seg-c", "seg-d"]
    assert is_complete(tmp_path / "checkpoint-3.old") and is_complete(tmp_path / "checkpoint-4")


def test_a_checkpoint_whose_run_file_is_gone_is_incomplete_and_does_not_count_as_kept(tmp_path):
    for step, names in [(1, ["seg-a"]), (2, ["seg-b"]), (3, ["seg-c"])]:
        _save_sharing(tmp_path / f"checkpoint-{step}", step, names)
    (tmp_path / "store" / "seg-c").unlink()
    assert not is_complete(tmp_path / "checkpoint-3")
    assert [p.name for p in prune_checkpoints(tmp_path, 1, ("store/seg-*",))] == ["checkpoint-1"]
    assert _store(tmp_path) == ["seg-b"]
