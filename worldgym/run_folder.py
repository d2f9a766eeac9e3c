"""The files of a run folder that every trainer shares: their names, ``results.json`` and finding a run's
checkpoint by ``best`` / ``last`` / step."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from worldgym.checkpointing import (
    LAST_CHECKPOINT,
    is_complete,
    latest_checkpoint,
    resolve_checkpoint,
    step_checkpoint,
)
from worldgym.errors import CheckpointNotFoundError, RunFolderError

__all__ = ["BEST_CHECKPOINT", "EPISODES_DIR", "METRICS_FILE", "RESULTS_FILE", "check_run_folder",
           "find_checkpoint", "read_results", "update_results"]

METRICS_FILE = "metrics.jsonl"  # one JSON line per logged step: the run's source of truth
RESULTS_FILE = "results.json"  # the run's summary (the example scripts' figures, the best checkpoint)
EPISODES_DIR = "episodes"  # episodes/step-<n>.jsonl: the episodes of the validation at step n
BEST_CHECKPOINT = "checkpoint-best"  # the checkpoint of the best validation so far


def check_run_folder(run_dir: str | Path) -> Path:
    """``run_dir`` as a Path once it is a folder holding a ``metrics.jsonl`` or a checkpoint.

    Raises:
        RunFolderError: naming the folder, when it is missing or holds no run.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise RunFolderError(f"{path} is not a run folder: no such directory")
    if not (path / METRICS_FILE).is_file() and not any(path.glob("checkpoint-*")):
        raise RunFolderError(f"{path} is not a run folder: it holds neither {METRICS_FILE} nor a checkpoint-* folder "
                             "(give the trainer's output_dir)")
    return path


def read_results(run_dir: str | Path) -> dict[str, Any]:
    """The run's ``results.json`` ({} when there is none or it does not parse)."""
    path = Path(run_dir) / RESULTS_FILE
    try:
        results = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return results if isinstance(results, dict) else {}


def update_results(run_dir: str | Path, fields: dict[str, Any]) -> Path:
    """Merge ``fields`` into the run's ``results.json`` (written whole to a temporary file, then renamed in)."""
    path = Path(run_dir) / RESULTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(read_results(run_dir) | fields, indent=1, default=str) + "\n")
    os.replace(tmp, path)
    return path


def find_checkpoint(run_dir: str | Path, which: str = "last") -> Path:
    """The complete checkpoint folder ``which`` of a run: ``"best"``, ``"last"`` (the newest:
    :func:`~worldgym.checkpointing.latest_checkpoint`) or a step number.

    Raises:
        RunFolderError: ``run_dir`` holds no run, or ``which`` is none of those.
        CheckpointNotFoundError: the run has no complete checkpoint of that name (the message lists those it has).
    """
    run = check_run_folder(run_dir)
    if which == "last":  # the newest complete one: checkpoint-last, or a newer step checkpoint
        newest = latest_checkpoint(run)
        if newest is not None:
            return newest
        folder = run / LAST_CHECKPOINT
    elif which == "best":
        folder = run / BEST_CHECKPOINT
    elif which.isdigit():
        folder = step_checkpoint(run, int(which))
    else:
        raise RunFolderError(f"checkpoint={which!r} is invalid: use 'best', 'last' or a step number")
    folder = resolve_checkpoint(folder)
    if not is_complete(folder):
        have = sorted(p.name for p in run.glob("checkpoint-*") if p.is_dir() and is_complete(p))
        raise CheckpointNotFoundError(f"{run} has no complete {folder.name.removesuffix('.old')}: its checkpoints "
                                      f"are {have or 'none'}")
    return folder
