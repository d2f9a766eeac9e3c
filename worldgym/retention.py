"""Checkpoint retention of a run folder: the newest ``save_total_limit`` step checkpoints, ``checkpoint-last`` and
``checkpoint-best`` (Hugging Face's ``save_total_limit`` / ``metric_for_best_model`` / ``greater_is_better``).

Every trainer that saves ``checkpoint-<n>`` folders saves them through one :class:`CheckpointKeeper`, so pruning
works alike for all. Pruning is kill-safe: it starts only once the newest step checkpoint has been saved, keeps
the newest ``save_total_limit`` step checkpoints whose manifests verify (a damaged one never counts as kept),
and deletes an old one by first renaming it to ``<name>.deleting`` (which no reader takes for a checkpoint)
and only then removing its files; a later prune removes what a kill left half deleted.

Run files that checkpoints share (their manifests' ``run_files``, e.g. Dreamer's ``replay/`` segments) go once no
checkpoint of the run folder lists them any more (:func:`prune_run_files`), so pruning never deletes what a
retained checkpoint needs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worldgym.checkpointing import (
    MANIFEST,
    crash_point,
    fsync_directory,
    is_complete,
    run_checkpoints,
    run_files,
    step_checkpoint,
)
from worldgym.config import check_field
from worldgym.errors import CheckpointError
from worldgym.run_folder import BEST_CHECKPOINT, read_results, update_results

__all__ = ["BEST_CHECKPOINT", "DELETING", "CheckpointKeeper", "check_retention", "is_new_best",
           "prune_checkpoints", "prune_run_files"]


DELETING = ".deleting"  # suffix of a pruned checkpoint while its files are removed


def check_retention(save_total_limit: int | None) -> None:
    """Raise :class:`~worldgym.errors.ConfigError` unless ``save_total_limit`` is None (keep every checkpoint)
    or an integer >= 1.

    >>> check_retention(0)
    Traceback (most recent call last):
    worldgym.errors.ConfigError: save_total_limit=0 is invalid: use None (keep every step checkpoint) or an integer >= 1
    """
    ok = save_total_limit is None or (isinstance(save_total_limit, int) and not isinstance(save_total_limit, bool)
                                      and save_total_limit >= 1)
    check_field(ok, "save_total_limit", save_total_limit, "use None (keep every step checkpoint) or an integer >= 1")


def prune_checkpoints(
    run_dir: str | Path, save_total_limit: int | None, shared: Iterable[str] = ()
) -> list[Path]:
    """Delete the step checkpoints (``checkpoint-<n>``) of ``run_dir`` older than its newest ``save_total_limit``
    complete ones; ``checkpoint-last`` and ``checkpoint-best`` are never touched. Returns the deleted folders.
    Then the run files matching the globs ``shared`` that no remaining checkpoint needs go (:func:`prune_run_files`).

    A step checkpoint counts as kept only when its manifest and every file it lists verify, so a kill at any
    moment leaves at least ``save_total_limit`` loadable step checkpoints (or every one there was).
    """
    run_dir = Path(run_dir)
    for leftover in run_dir.glob(f"checkpoint-*{DELETING}"):  # a prune a kill cut short
        shutil.rmtree(leftover, ignore_errors=True)
    deleted = [] if save_total_limit is None else _prune_steps(run_dir, save_total_limit)
    prune_run_files(run_dir, shared)
    return deleted


def _prune_steps(run_dir: Path, save_total_limit: int) -> list[Path]:
    numbered = sorted((step, folder) for folder in run_checkpoints(run_dir) if (step := _step_of(folder)) >= 0)
    kept, deleted = 0, []
    for _, folder in reversed(numbered):
        if kept < save_total_limit:
            kept += is_complete(folder)
            continue
        deleted.append(_delete(folder))
    return deleted


def prune_run_files(folder: str | Path, shared: Iterable[str]) -> list[Path]:
    """Delete the files matching the globs ``shared`` (relative to ``folder``, e.g. ``"replay/segment-*"``) that
    the manifest of no checkpoint in ``folder`` lists among its run files; returns them. Give globs that also
    match what a kill left of a write (:func:`~worldgym.checkpointing.write_durably`'s ``<file>.tmp``).

    Every sub-folder with a manifest counts (``checkpoint-best`` and ``<name>.old`` included), but for
    ``<name>.tmp`` (a save never renamed in) and ``<name>.deleting`` (being pruned): none is ever loaded. A
    manifest that does not parse needs nothing: its checkpoint cannot be loaded either.
    """
    folder = Path(folder)
    candidates = sorted({file for pattern in shared for file in folder.glob(pattern) if file.is_file()})
    if not candidates:
        return []
    needed: set[Path] = set()
    for checkpoint in folder.iterdir():
        if checkpoint.name.endswith((".tmp", DELETING)) or not (checkpoint / MANIFEST).is_file():
            continue
        try:
            needed.update(folder / name for name in run_files(checkpoint))
        except CheckpointError:
            continue
    deleted = [file for file in candidates if file not in needed]
    for file in deleted:
        file.unlink()
    return deleted


def _step_of(folder: Path) -> int:
    """The number in ``checkpoint-<n>`` (or its ``.old``), -1 for ``checkpoint-last``."""
    suffix = folder.name.removesuffix(".old").rsplit("-", 1)[1]
    return int(suffix) if suffix.isdigit() else -1


def _delete(folder: Path) -> Path:
    aside = folder.with_name(folder.name.removesuffix(".old") + DELETING)
    folder.rename(aside)
    fsync_directory(folder.parent)
    crash_point("pruning")
    shutil.rmtree(aside)
    return folder


def is_new_best(history: Sequence[dict[str, Any]], metric: str, greater_is_better: bool = True) -> bool:
    """Whether the newest row of ``history`` holds ``metric`` and beats it in every earlier row (strictly: a tie
    keeps the earlier checkpoint).

    >>> is_new_best([{"eval/success_rate": 0.2}, {"loss": 1.0}, {"eval/success_rate": 0.5}], "eval/success_rate")
    True
    >>> is_new_best([{"eval/success_rate": 0.5}, {"eval/success_rate": 0.5}], "eval/success_rate")
    False
    """
    if not history or metric not in history[-1]:
        return False
    value = history[-1][metric]
    earlier = [row[metric] for row in history[:-1] if metric in row]
    return all(value > other if greater_is_better else value < other for other in earlier)


@dataclass
class CheckpointKeeper:
    """Where a trainer's checkpoints go and which stay.

    Args:
        run_dir: the run folder.
        save_total_limit: step checkpoints kept (None: every one); ``checkpoint-last`` and
            ``checkpoint-best`` come on top.
        metric_for_best_model: the validation metric that picks ``checkpoint-best`` (None: no best checkpoint).
        greater_is_better: whether a larger ``metric_for_best_model`` is better.
        prunes: whether this process prunes (False on the ranks of a data-parallel group that save collectively
            but do not write).
        shared: globs (relative to ``run_dir``) of the run files the checkpoints share (Dreamer:
            ``("replay/segment-*",)``); those no checkpoint needs any more go after every prune.
    """

    run_dir: Path
    save_total_limit: int | None = None
    metric_for_best_model: str | None = None
    greater_is_better: bool = True
    prunes: bool = True
    shared: tuple[str, ...] = ()

    def save_step(self, step: int, save: Callable[[Path], Any]) -> Path:
        """``save(run_dir/checkpoint-<step>)``, then prune the step checkpoints beyond ``save_total_limit``."""
        path = step_checkpoint(self.run_dir, step)
        save(path)
        if self.prunes:
            prune_checkpoints(self.run_dir, self.save_total_limit, self.shared)
        return path

    def resumed(self, history: Sequence[dict[str, Any]], save: Callable[[Path], Any] | None = None) -> None:
        """Finish what a kill cut short once a trainer resumed its newest checkpoint: the pruning after it, and
        (given ``save``) its ``checkpoint-best`` when the last row of ``history`` is the best so far and
        ``results.json`` does not record it saved already (a checkpoint saved after that row's best, as a
        world-model warm-up's ``checkpoint-0``, holds other weights than the best of its step)."""
        if self.prunes:
            prune_checkpoints(self.run_dir, self.save_total_limit, self.shared)
        if save is not None and not self._best_saved(history):
            self.save_best(history, save)

    def _best_saved(self, history: Sequence[dict[str, Any]]) -> bool:
        """Whether ``checkpoint-best`` is there and ``results.json`` records it as the step of ``history``'s
        last row."""
        best = read_results(self.run_dir).get("best_checkpoint", {})
        return (bool(history) and best.get("step") == history[-1].get("step")
                and (self.run_dir / BEST_CHECKPOINT).is_dir())

    def save_best(self, history: Sequence[dict[str, Any]], save: Callable[[Path], Any]) -> Path | None:
        """When the newest row of ``history`` is the best validation so far, ``save(run_dir/checkpoint-best)``
        and record it in ``results.json`` (``best_checkpoint``: step, metric, value); the folder, else None."""
        metric = self.metric_for_best_model
        if metric is None or not is_new_best(history, metric, self.greater_is_better):
            return None
        path = self.run_dir / BEST_CHECKPOINT
        save(path)
        row = history[-1]
        update_results(self.run_dir, {"best_checkpoint": {"path": BEST_CHECKPOINT, "step": row.get("step"),
                                                          "metric": metric, "value": row[metric]}})
        return path
