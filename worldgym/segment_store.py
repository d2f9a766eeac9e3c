"""Replay data stored once per run: append-only segment files beside the checkpoints that share them.

A trainer whose replay grows by appending items (Dreamer's steps, the dual-LoRA world model's phone calls),
numbered from the run's start, copies none of it into its checkpoints. Each save writes the live items no segment
holds yet as one segment of the store ``replay/`` in the folder holding the checkpoint
(``replay/segment-<start>-<end>-<hash>.safetensors``: the items ``[start, end)``; written once, never changed),
and the checkpoint lists the segments holding its live items: in its own state (:meth:`Segment.to_dict`) and, with
their SHA-256s, among its manifest's run files (:func:`segment_digests`), which every check of the checkpoint
verifies. N checkpoints thus share one copy of each item; pruning deletes the segments no checkpoint of the folder
lists any more (:func:`worldgym.retention.prune_run_files` with :data:`SEGMENT_FILES`).

A checkpoint saved outside its run folder gets a store of its own beside it, with every live item in one segment.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save

from worldgym.checkpointing import crash_point, read_tensors, write_durably
from worldgym.errors import CheckpointError

__all__ = ["SEGMENT_FILES", "SEGMENT_WRITTEN", "STORE", "Segment", "SegmentStore", "listed_segments",
           "segment_digests", "write_segment"]

STORE = "replay"  # the folder, beside the checkpoints, that holds the segments
SEGMENT_FILES = f"{STORE}/segment-*"  # the files pruning may delete (finished segments and torn writes)
SEGMENT_WRITTEN = "replay_segment_written"  # crash stage (CRASH_ENV): a segment written, its checkpoint not yet

Fields = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Segment:
    """The items ``[start, end)``, in ``file`` (relative to the folder holding the checkpoints)."""

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


def listed_segments(data: Any, source: Path) -> list[Segment]:
    """The segments a checkpoint's state lists (``[segment.to_dict(), ...]``), read from ``source``."""
    if not isinstance(data, list):
        raise CheckpointError(f"{source} is corrupt: its replay segments are not a list")
    return [Segment.from_dict(entry, source) for entry in data]


def segment_digests(segments: list[Segment]) -> dict[str, str]:
    """``segments`` as the run files of a checkpoint's manifest: file -> SHA-256."""
    return {segment.file: segment.sha256 for segment in segments}


def write_segment(folder: Path, fields: Fields, start: int, end: int) -> Segment:
    """Write the ``fields`` of the items ``[start, end)`` durably as a segment of ``folder``'s store."""
    data = save(fields)
    digest = hashlib.sha256(data).hexdigest()
    file = f"{STORE}/segment-{start}-{end}-{digest[:16]}.safetensors"
    write_durably(folder / file, data)
    return Segment(file, start, end, digest)


class SegmentStore:
    """Where a run's replay items are stored: per folder of checkpoints, the segments (oldest first) holding the
    live items as last saved there or loaded from there."""

    def __init__(self) -> None:
        self._stored: dict[Path, list[Segment]] = {}

    def stored(self, folder: Path) -> list[Segment]:
        """The segments of ``folder`` holding the live items as last saved or loaded."""
        return list(self._stored.get(Path(folder).resolve(), []))

    def save(self, folder: Path, live: tuple[int, int], read: Callable[[int, int], Fields]) -> list[Segment]:
        """Write the ``live`` items ``[lo, hi)`` that no segment of ``folder``'s store holds yet as one segment
        (``read(start, end)``: their fields); returns the segments holding every live item (what a checkpoint
        saved in ``folder`` lists)."""
        lo, hi = live
        kept = [segment for segment in self.stored(folder) if segment.end > lo]
        if not all((folder / segment.file).is_file() for segment in kept):  # deleted meanwhile: store them again
            kept = []
        start = kept[-1].end if kept else lo
        if start < hi:
            kept.append(write_segment(folder, read(start, hi), start, hi))
            crash_point(SEGMENT_WRITTEN)
        self._stored[Path(folder).resolve()] = kept
        return list(kept)

    def forget(self) -> None:
        """Store every live item anew at the next save (the replay was loaded from elsewhere)."""
        self._stored = {}

    def load(
        self,
        folder: Path,
        segments: list[Segment],
        live: tuple[int, int],
        restore: Callable[[list[tuple[Segment, Fields]]], None],
        needs: str,
    ) -> None:
        """Read ``segments`` of ``folder`` (checked against the checkpoint's manifest already), which must hold the
        ``live`` items ``[lo, hi)``, and pass them with their fields to ``restore``; they become the segments a
        next save in ``folder`` extends.

        Raises:
            CheckpointError: the segments do not hold every live item (``needs`` describes them), or ``restore``
                raised a ``ValueError`` (fields that do not fit the replay).
        """
        lo, hi = live
        spans = [(segment.start, segment.end) for segment in segments]
        contiguous = all(a[1] == b[0] for a, b in itertools.pairwise(spans))
        covers = spans[0][0] <= lo and spans[-1][1] == hi if spans else lo == hi
        if not (contiguous and covers):
            raise CheckpointError(f"the replay segments {spans} in {folder / STORE} do not hold the {needs}")
        try:
            restore([(segment, read_tensors(folder / segment.file)) for segment in segments])
        except CheckpointError:
            raise
        except ValueError as err:
            raise CheckpointError(f"replay segments in {folder / STORE}: {err}") from err
        self._stored = {Path(folder).resolve(): list(segments)}
