"""A replay buffer of phone calls for the world model: the newest ``capacity`` calls, sampled from past steps."""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

import numpy as np
import torch

from worldgym.agents.dual_lora.world_model import PhoneCallExample

__all__ = ["PhoneCallReplay"]


class PhoneCallReplay:
    """First in, first out; :meth:`sample` draws only calls added in earlier steps than ``current_step``.

    >>> replay = PhoneCallReplay(capacity=2)
    >>> replay.add([PhoneCallExample((1, 2, 3), 2, "routing")] * 3, step=0)
    >>> len(replay), replay.sample(5, current_step=0, rng=np.random.default_rng(0))
    (2, [])
    """

    def __init__(self, capacity: int = 5000):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: deque[tuple[int, PhoneCallExample]] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._items)

    def add(self, examples: list[PhoneCallExample], step: int) -> None:
        self._items.extend((step, example) for example in examples)

    def sample(self, count: int, current_step: int, rng: np.random.Generator) -> list[PhoneCallExample]:
        """Up to ``count`` calls from steps before ``current_step``, uniformly, without replacement."""
        past = [example for step, example in self._items if step < current_step]
        if count <= 0 or not past:
            return []
        chosen = rng.choice(len(past), size=min(count, len(past)), replace=False)
        return [past[i] for i in sorted(chosen.tolist())]

    # ---------------------------------------------------------------- checkpoints
    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Token ids as one flat int32 tensor (safetensors) and the rest as JSON."""
        items = list(self._items)
        tokens = [t for _, example in items for t in example.token_ids]
        tensors = {
            "tokens": torch.tensor(tokens, dtype=torch.int32),  # half of int64 (the replay is most of a checkpoint)
            "lengths": torch.tensor([len(e.token_ids) for _, e in items], dtype=torch.int64),
            "target_starts": torch.tensor([e.target_start for _, e in items], dtype=torch.int64),
            "steps": torch.tensor([step for step, _ in items], dtype=torch.int64),
        }
        return tensors, {"capacity": self.capacity, "response_types": [e.response_type for _, e in items]}

    def load_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        lengths = tensors["lengths"].tolist()
        if sum(lengths) != len(tensors["tokens"]) or len(lengths) != len(state["response_types"]):
            raise ValueError("replay state is inconsistent: token count or item count does not match")
        self.capacity = int(state["capacity"])
        self._items = deque(maxlen=self.capacity)
        offsets = np.cumsum([0, *lengths])
        tokens = tensors["tokens"].tolist()
        for i, (start, end) in enumerate(itertools.pairwise(offsets)):
            example = PhoneCallExample(tuple(tokens[start:end]), int(tensors["target_starts"][i]),
                                       state["response_types"][i])
            self._items.append((int(tensors["steps"][i]), example))
