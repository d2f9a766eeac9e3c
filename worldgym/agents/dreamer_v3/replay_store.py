"""Dreamer's replay, stored once per run: append-only segment files under ``<run folder>/replay/``.

A checkpoint holds no copy of the replay ring. Each save writes the committed steps that no segment holds yet
as one new segment (``replay/segment-<start>-<end>-<hash>.safetensors``: every field, ``[end - start, N, ...]``;
written once, never changed), then lists the segments holding the ring's live steps
(:meth:`~worldgym.agents.dreamer_v3.replay.ReplayRing.live_steps`) in its ``state.json`` and, with their SHA-256s,
among its manifest's run files, which every check of the checkpoint verifies. N checkpoints thus share one copy of
each step. Once the ring has wrapped, older checkpoints' segments are only needed while those checkpoints are
kept: pruning deletes the segments no checkpoint of the run folder lists (:func:`worldgym.retention.prune_run_files`
with :data:`SEGMENT_FILES`).

The store lives beside the checkpoint folder (``Path(checkpoint).parent / "replay"``), so a checkpoint saved
outside the run folder gets a store of its own there, with every live step in one segment.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save

from worldgym.agents.dreamer_v3.replay import ReplayRing
from worldgym.checkpointing import crash_point, read_tensors, write_durably
from worldgym.errors import CheckpointError

__all__ = ["SEGMENT_FILES", "SEGMENT_WRITTEN", "STORE", "ReplaySegments", "Segment", "write_segment"]

STORE = "replay"  # the folder, beside the checkpoints, that holds the segments
SEGMENT_FILES = f"{STORE}/segment-*"  # the files pruning may delete (finished segments and torn writes)
SEGMENT_WRITTEN = "replay_segment_written"  # crash stage (CRASH_ENV): a segment written, its checkpoint not yet


@dataclass(frozen=True)
class Segment:
    """The steps ``[start, end)`` of every env, in ``file`` (relative to the folder holding the checkpoints)."""

    file: str
    start: int
    end: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, source: Path) -> Segment:
        """The segment ``data`` describes; a malformed description raises :class:`CheckpointError` naming
        ``source``."""
        ok = isinstance(data, dict) and set(data) == {"file", "start", "end", "sha256"}
        ok = ok and all(type(data[k]) is int for k in ("start", "end")) and 0 <= data["start"] < data["end"]
        if not (ok and isinstance(data["file"], str) and isinstance(data["sha256"], str)):
            raise CheckpointError(f"{source} is corrupt: {data!r} does not describe a replay segment")
        return cls(**data)


def write_segment(folder: Path, steps: dict[str, torch.Tensor], start: int, end: int) -> Segment:
    """Write the fields ``steps`` of the steps ``[start, end)`` durably as a segment of ``folder``'s store."""
    data = save(steps)
    digest = hashlib.sha256(data).hexdigest()
    file = f"{STORE}/segment-{start}-{end}-{digest[:16]}.safetensors"
    write_durably(folder / file, data)
    return Segment(file, start, end, digest)


class ReplaySegments:
    """Where a run's replay steps are stored: per folder of checkpoints, the segments (oldest first) holding the
    live steps as last saved there or loaded from there."""

    def __init__(self) -> None:
        self._stored: dict[Path, list[Segment]] = {}

    def stored(self, folder: Path) -> list[Segment]:
        """The segments of ``folder`` holding this run's live steps as last saved or loaded."""
        return list(self._stored.get(Path(folder).resolve(), []))

    def save(self, replay: ReplayRing, folder: Path) -> list[Segment]:
        """Write the live steps of ``replay`` that no segment of ``folder``'s store holds yet as one segment;
        returns the segments holding every live step (what a checkpoint saved in ``folder`` lists)."""
        lo, hi = replay.live_steps()
        kept = [segment for segment in self.stored(folder) if segment.end > lo]
        if not all((folder / segment.file).is_file() for segment in kept):  # deleted meanwhile: store them again
            kept = []
        start = kept[-1].end if kept else lo
        if start < hi:
            kept.append(write_segment(folder, replay.read_steps(start, hi), start, hi))
            crash_point(SEGMENT_WRITTEN)
        self._stored[Path(folder).resolve()] = kept
        return list(kept)

    def forget(self) -> None:
        """Store every live step anew at the next save (the ring was loaded from elsewhere)."""
        self._stored = {}

    def load(self, replay: ReplayRing, folder: Path, segments: list[Segment], committed_t: int) -> None:
        """Refill ``replay`` (emptied) with the live steps up to ``committed_t`` from ``segments`` of ``folder``
        (checked against the checkpoint's manifest already).

        Raises:
            CheckpointError: the segments do not hold every live step, or a segment's fields do not fit the ring.
        """
        lo = max(0, committed_t - replay.capacity + replay.safety_margin)
        spans = [(segment.start, segment.end) for segment in segments]
        contiguous = all(a[1] == b[0] for a, b in itertools.pairwise(spans))
        covers = spans[0][0] <= lo and spans[-1][1] == committed_t if spans else lo == committed_t
        if not (contiguous and covers):
            raise CheckpointError(
                f"the replay segments {spans} in {folder / STORE} do not hold the steps [{lo}, {committed_t}) this "
                "ring needs (saved with another replay capacity or safety margin?)"
            )
        parts = []
        for segment in segments:
            fields = read_tensors(folder / segment.file)
            if any(t.ndim == 0 or t.shape[0] != segment.end - segment.start for t in fields.values()):
                raise CheckpointError(f"{folder / segment.file} does not hold steps [{segment.start}, {segment.end})")
            parts.append((segment.start, fields))
        try:
            replay.restore_steps(committed_t, parts)
        except ValueError as err:
            raise CheckpointError(f"replay segments in {folder / STORE}: {err}") from err
        self._stored = {Path(folder).resolve(): list(segments)}
