"""A KV cache that appends in place: each layer keeps spare room behind its positions.

transformers' :class:`DynamicCache` appends a decoding step's keys and values with ``torch.cat``, which copies
the layer's whole cache into a new allocation at every generated token: on CPU, for batches of long multi-turn
conversations, that copying is quadratic in the conversation and was a third of a SmolLM2 d3 rollout's time
(py-spy on a DAPO run: ``DynamicLayer.update`` 32%, the attention itself 31%). :class:`GrowingLayer` writes each
step into a preallocated buffer and exposes the filled part as a view, reallocating (with room to spare) only
when the buffer is full, so a ``generate`` call copies the cache about once. Values are the same as the
:class:`DynamicLayer`'s; the cache is still a :class:`DynamicCache` to ``generate`` and to the engine's KV store.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedConfig
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

__all__ = ["GrowingCache", "GrowingLayer", "growing_cache"]


class GrowingLayer(DynamicLayer):
    """A :class:`DynamicLayer` whose ``keys``/``values`` are views into buffers with ``room`` spare positions.

    Anything that replaces ``keys``/``values`` with other tensors (``crop`` keeps a view; beam reordering or
    batch selection make new tensors) is noticed at the next ``update``, which then copies into a new buffer.
    """

    def __init__(self, room: int = 256) -> None:
        super().__init__()
        if room < 1:
            raise ValueError(f"room must be >= 1, got {room}")
        self.room = room
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        end = length + key_states.shape[-2]
        if not self._owns_views(key_states) or end > self._key_buffer.shape[-2]:  # type: ignore[union-attr]
            self._reallocate(key_states, value_states, length, end + max(self.room, end // 4))
        self._key_buffer[:, :, length:end] = key_states  # type: ignore[index]
        self._value_buffer[:, :, length:end] = value_states  # type: ignore[index]
        self.keys = self._key_buffer[:, :, :end]  # type: ignore[index]
        self.values = self._value_buffer[:, :, :end]  # type: ignore[index]
        return self.keys, self.values

    def adopt(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Take ``keys``/``values`` as this layer's full buffers, without copying them: the first append moves
        them into a buffer with room, after which the adopted tensors can be freed."""
        self.lazy_initialization(keys, values)
        self.keys = self._key_buffer = keys
        self.values = self._value_buffer = values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the batch rows ``indices``, with their room (one copy; the base class's selection drops
        the room, so the next append would copy again)."""
        if self.keys is None or not self._owns_views(self.keys):
            super().batch_select_indices(indices)
            return
        length = self.get_seq_length()
        self._key_buffer = self._key_buffer.index_select(0, indices)  # type: ignore[union-attr]
        self._value_buffer = self._value_buffer.index_select(0, indices)  # type: ignore[union-attr]
        self.keys = self._key_buffer[:, :, :length]
        self.values = self._value_buffer[:, :, :length]

    def _owns_views(self, key_states: torch.Tensor) -> bool:
        """Whether ``keys``/``values`` are still the leading positions of this layer's buffers."""
        buffers, views = (self._key_buffer, self._value_buffer), (self.keys, self.values)
        return all(
            buffer is not None and view is not None and view.dim() == 4
            and view.data_ptr() == buffer.data_ptr() and view.stride() == buffer.stride()
            and view.shape[:2] == buffer.shape[:2] == key_states.shape[:2] and view.shape[3] == buffer.shape[3]
            for buffer, view in zip(buffers, views))

    def _reallocate(self, key_states: torch.Tensor, value_states: torch.Tensor, length: int, capacity: int) -> None:
        batch, heads, _, _ = key_states.shape
        self._key_buffer = key_states.new_empty((batch, heads, capacity, key_states.shape[3]))
        self._value_buffer = value_states.new_empty((batch, heads, capacity, value_states.shape[3]))
        if length:
            self._key_buffer[:, :, :length] = self.keys
            self._value_buffer[:, :, :length] = self.values


class GrowingCache(DynamicCache):
    """A :class:`DynamicCache` whose layers are :class:`GrowingLayer`."""

    def __init__(self, layers: list[GrowingLayer]) -> None:
        Cache.__init__(self, layers=layers)  # type: ignore[arg-type]


def growing_cache(cache: DynamicCache | None, room: int, config: PreTrainedConfig) -> DynamicCache:
    """``cache`` (None: the empty cache ``generate`` would make for ``config``'s model) as a
    :class:`GrowingCache` with ``room`` spare positions per layer, holding the same keys and values. The
    tensors move over without a copy (``cache``'s layers are emptied), and each layer's first append copies
    only that layer into room, so a batch's KV is never held twice. A cache with other layer types than plain
    :class:`DynamicLayer` (sliding windows, linear attention) is returned as it is."""
    if cache is None:
        cache = DynamicCache(config=config)
    if isinstance(cache, GrowingCache) or not all(type(layer) is DynamicLayer for layer in cache.layers):
        return cache
    layers: list[GrowingLayer] = []
    for layer in cache.layers:
        grown = GrowingLayer(room)
        if layer.is_initialized and layer.keys is not None and layer.keys.numel():
            grown.adopt(layer.keys, layer.values)
            layer.keys = layer.values = None  # the adopted tensors now live in one cache only
        layers.append(grown)
    return GrowingCache(layers)
