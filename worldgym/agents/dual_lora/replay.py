"""A replay buffer of phone calls for the world model: the newest ``capacity`` calls, sampled from past steps.

Checkpoints hold no copy of it: each save stores the calls added since the previous one as a segment of the run
folder's ``replay/`` store, and the checkpoint lists the segments holding its calls (:mod:`worldgym.segment_store`).
Checkpoints saved before that (with the calls in their own tensors) still load.
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldgym.agents.dual_lora.world_model import PhoneCallExample
from worldgym.errors import CheckpointError
from worldgym.segment_store import Segment, SegmentStore, listed_segments, segment_digests

__all__ = ["PhoneCallReplay"]

Fields = dict[str, torch.Tensor]


class PhoneCallReplay:
    """First in, first out; :meth:`sample` draws only calls added in earlier steps than ``current_step``.

    Calls are numbered in the order added since the run began; the replay holds the calls :meth:`live`.

    >>> replay = PhoneCallReplay(capacity=2)
    >>> replay.add([PhoneCallExample((1, 2, 3), 2, "routing")] * 3, step=0)
    >>> len(replay), replay.live(), replay.sample(5, current_step=0, rng=np.random.default_rng(0))
    (2, (1, 3), [])
    """

    def __init__(self, capacity: int = 5000):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: deque[tuple[int, PhoneCallExample]] = deque(maxlen=capacity)
        self._added = 0  # calls added since the run began
        self._segments = SegmentStore()  # where the saved calls are stored

    def __len__(self) -> int:
        return len(self._items)

    def add(self, examples: list[PhoneCallExample], step: int) -> None:
        self._items.extend((step, example) for example in examples)
        self._added += len(examples)

    def live(self) -> tuple[int, int]:
        """The numbers ``[start, end)`` of the calls held."""
        return self._added - len(self._items), self._added

    def sample(self, count: int, current_step: int, rng: np.random.Generator) -> list[PhoneCallExample]:
        """Up to ``count`` calls from steps before ``current_step``, uniformly, without replacement."""
        past = [example for step, example in self._items if step < current_step]
        if count <= 0 or not past:
            return []
        chosen = rng.choice(len(past), size=min(count, len(past)), replace=False)
        return [past[i] for i in sorted(chosen.tolist())]

    # ---------------------------------------------------------------- checkpoints
    def read_calls(self, start: int, end: int) -> Fields:
        """The held calls ``[start, end)`` as a segment's fields: token ids as one flat int32 tensor, per call its
        length, target start and step, and the response types as UTF-8 JSON."""
        lo, hi = self.live()
        if not lo <= start <= end <= hi:
            raise ValueError(f"calls [{start}, {end}) are not in the replay, which holds [{lo}, {hi})")
        items = list(self._items)[start - lo : end - lo]
        types = json.dumps([example.response_type for _, example in items]).encode()
        return {
            "tokens": torch.tensor([t for _, e in items for t in e.token_ids], dtype=torch.int32),
            "lengths": torch.tensor([len(e.token_ids) for _, e in items], dtype=torch.int64),
            "target_starts": torch.tensor([e.target_start for _, e in items], dtype=torch.int64),
            "steps": torch.tensor([step for step, _ in items], dtype=torch.int64),
            "response_types": torch.frombuffer(bytearray(types), dtype=torch.uint8),
        }

    def save(self, folder: Path) -> tuple[dict[str, Any], dict[str, str]]:
        """Store the held calls no segment of ``folder``'s store holds yet; returns the JSON state of a checkpoint
        saved in ``folder`` and the run files it needs."""
        segments = self._segments.save(folder, self.live(), self.read_calls)
        state = {"capacity": self.capacity, "calls": list(self.live()),
                 "segments": [segment.to_dict() for segment in segments]}
        return state, segment_digests(segments)

    def load(self, checkpoint: Path, state: dict[str, Any], tensors: Fields) -> None:
        """Restore the calls the checkpoint at ``checkpoint`` holds: from the segments it lists (its run files,
        checked already), or, saved before the store, from its own ``tensors``.

        Raises:
            CheckpointError: the segments do not hold the calls, or their fields are inconsistent.
        """
        if "segments" not in state:  # saved before the run-level store: every call in the checkpoint
            try:
                items = _decode(tensors, state["response_types"])
                self._set(int(state["capacity"]), items, len(items))
            except ValueError as err:
                raise CheckpointError(f"checkpoint {checkpoint}: {err}") from err
            self._segments.forget()
            return
        capacity, (start, end) = int(state["capacity"]), state["calls"]

        def restore(parts: list[tuple[Segment, Fields]]) -> None:
            items = []
            for segment, fields in parts:
                if "response_types" not in fields:
                    raise ValueError(f"{segment.file} lacks 'response_types'")
                decoded = _decode(fields, json.loads(bytes(fields["response_types"].tolist())))
                if len(decoded) != segment.end - segment.start:
                    raise ValueError(f"{segment.file} does not hold calls [{segment.start}, {segment.end})")
                items += decoded[max(0, start - segment.start) :]
            self._set(capacity, items, end)

        listed = listed_segments(state["segments"], checkpoint / "state.json")
        needs = f"phone calls [{start}, {end}) this replay held"
        self._segments.load(checkpoint.parent, listed, (start, end), restore, needs)

    def _set(self, capacity: int, items: list[tuple[int, PhoneCallExample]], added: int) -> None:
        """Hold ``items`` (at most ``capacity``), the last of them call ``added - 1``."""
        if len(items) > capacity:
            raise ValueError(f"{len(items)} calls do not fit a replay of capacity {capacity}")
        self.capacity = capacity
        self._items = deque(items, maxlen=capacity)
        self._added = added


def _decode(fields: Fields, response_types: list[str]) -> list[tuple[int, PhoneCallExample]]:
    """The ``(step, call)`` items :meth:`PhoneCallReplay.read_calls`'s ``fields`` (and their ``response_types``)
    hold."""
    missing = sorted({"tokens", "lengths", "target_starts", "steps"} - set(fields))
    if missing:
        raise ValueError(f"replay state lacks {missing}")
    lengths = fields["lengths"].tolist()
    if sum(lengths) != len(fields["tokens"]) or not len(lengths) == len(response_types) == len(fields["steps"]) \
            == len(fields["target_starts"]):
        raise ValueError("replay state is inconsistent: token count or call count does not match")
    tokens, starts, steps = fields["tokens"].tolist(), fields["target_starts"].tolist(), fields["steps"].tolist()
    offsets = np.cumsum([0, *lengths]).tolist()
    return [(steps[i], PhoneCallExample(tuple(tokens[offsets[i] : offsets[i + 1]]), starts[i], response_types[i]))
            for i in range(len(lengths))]
