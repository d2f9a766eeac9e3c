"""A per-sequence KV store for :class:`~worldgym.agents.llm.engines.hf.HFEngine`: multi-turn rollouts prefill
only each turn's new tokens.

Each entry maps a token sequence (a row's prompt plus the tokens ``generate`` fed after it) to that sequence's
KV, one tensor ``[layers, 2 (keys, values), kv_heads, length, head_dim]`` holding only real token positions
(no padding), so entries from different batches and layouts can be combined into a new batch. Entries are
evicted least-recently-used beyond a bound on the total number of stored tokens; memory is that bound times
``layers * 2 * kv_heads * head_dim * dtype bytes`` (46 KB a token for SmolLM2-135M in float32).

A prompt normally reuses an entry that opens it whole. With ``branching=True`` it may also reuse the opening it
shares with a longer entry it branches off: a causal model's KV at a position depends only on the tokens up to
it, so the first ``n`` positions of any sequence that starts with the same ``n`` tokens are that opening's KV.
A world model that writes a reply after each of an episode's calls needs this: its stored sequence ends with
its own reply, which the episode's next prompt replaces with the real conversation.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeGuard

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedConfig
from transformers.cache_utils import DynamicLayer

from worldgym.agents.llm.engines.growing_cache import GrowingLayer

__all__ = ["KVCacheStats", "PrefixKVCache", "StoredOpening", "batched_cache", "row_kv", "storable"]

TokenKey = tuple[int, ...]


class StoredOpening(NamedTuple):
    """What a prompt reuses: its opening ``tokens``, their ``kv`` ``[layers, 2, kv_heads, len(tokens),
    head_dim]``, and the stored ``entry`` they come from (``tokens`` itself, or a longer sequence the prompt
    branches off)."""

    tokens: TokenKey
    kv: torch.Tensor
    entry: TokenKey


@dataclass
class KVCacheStats:
    """Running counts over the prompts looked up: how many found a stored opening, and how many of their
    tokens it covered (``HFEngine`` uses every hit: a batch with any starts from the stored KV)."""

    rows: int = 0
    hit_rows: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0

    @property
    def prefilled_tokens(self) -> int:
        """Prompt tokens the model had to run (not found in the store)."""
        return self.prompt_tokens - self.reused_tokens


class PrefixKVCache:
    """LRU map from token sequences to their per-token KV (see the module docstring for the layout).

    >>> store = PrefixKVCache(max_tokens=5)
    >>> store.put([1, 2, 3], torch.zeros(1, 2, 1, 3, 4))
    >>> hit = store.longest_prefix([1, 2, 3, 4])
    >>> hit.tokens, tuple(hit.kv.shape), store.longest_prefix([1, 2, 3]) is None  # >= 1 token stays uncached
    ((1, 2, 3), (1, 2, 1, 3, 4), True)
    >>> store.put([7, 8, 9], torch.zeros(1, 2, 1, 3, 4))  # 6 tokens > 5: the least recently used goes
    >>> len(store), store.num_tokens, store.longest_prefix([1, 2, 3, 4]) is None
    (1, 3, True)
    >>> branching = PrefixKVCache(max_tokens=8, branching=True)
    >>> branching.put([1, 2, 3, 4], torch.zeros(1, 2, 1, 4, 4))
    >>> hit = branching.longest_prefix([1, 2, 5])  # shares [1, 2] with the stored [1, 2, 3, 4]
    >>> hit.tokens, tuple(hit.kv.shape), hit.entry
    ((1, 2), (1, 2, 1, 2, 4), (1, 2, 3, 4))
    """

    def __init__(self, max_tokens: int, branching: bool = False):
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.max_tokens = max_tokens
        self.branching = branching
        self.stats = KVCacheStats()
        self._entries: OrderedDict[TokenKey, torch.Tensor] = OrderedDict()
        self._arrays: dict[TokenKey, np.ndarray] = {}  # the entries' tokens as arrays (branching only)
        self._lengths: Counter[int] = Counter()
        self.num_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every entry (the stats are kept)."""
        self._entries.clear()
        self._arrays.clear()
        self._lengths.clear()
        self.num_tokens = 0

    def lookup(self, prompts: Sequence[Sequence[int]]) -> list[StoredOpening | None]:
        """:meth:`longest_prefix` of each prompt, counted in :attr:`stats`."""
        hits = [self.longest_prefix(prompt) for prompt in prompts]
        self.stats.rows += len(prompts)
        self.stats.hit_rows += sum(hit is not None for hit in hits)
        self.stats.prompt_tokens += sum(len(prompt) for prompt in prompts)
        self.stats.reused_tokens += sum(len(hit.tokens) for hit in hits if hit is not None)
        return hits

    def longest_prefix(self, prompt: Sequence[int]) -> StoredOpening | None:
        """The longest stored opening of ``prompt`` that leaves at least one of its tokens uncached (``generate``
        needs an input token): a whole entry, or with ``branching`` the shared opening of any entry. The entry
        it comes from becomes the most recently used."""
        prompt = tuple(prompt)
        hit = None
        for length in sorted((n for n in self._lengths if n < len(prompt)), reverse=True):
            key = prompt[:length]
            kv = self._entries.get(key)
            if kv is not None:
                hit = StoredOpening(key, kv, key)
                break
        if self.branching:
            hit = self._longest_branch(prompt, hit)
        if hit is not None:
            self._entries.move_to_end(hit.entry)
        return hit

    def _longest_branch(self, prompt: TokenKey, best: StoredOpening | None) -> StoredOpening | None:
        """``best``, or the longest opening ``prompt`` shares with an entry, if longer (cut to leave one prompt
        token uncached)."""
        tokens = np.asarray(prompt, dtype=np.int64)
        longest, entry = 0 if best is None else len(best.tokens), None
        for key, array in self._arrays.items():
            width = min(len(array), len(tokens) - 1)
            if width <= longest:
                continue
            differ = np.flatnonzero(array[:width] != tokens[:width])
            shared = int(differ[0]) if differ.size else width
            if shared > longest:
                longest, entry = shared, key
        if entry is None:
            return best
        return StoredOpening(prompt[:longest], self._entries[entry][:, :, :, :longest], entry)

    def put(self, tokens: Sequence[int], kv: torch.Tensor) -> None:
        """Store ``kv`` (``[layers, 2, kv_heads, len(tokens), head_dim]``) for ``tokens``, evicting the least
        recently used entries beyond the bound (an entry longer than the bound is not stored)."""
        key = tuple(tokens)
        if kv.shape[3] != len(key):
            raise ValueError(f"{len(key)} tokens but KV for {kv.shape[3]} positions")
        if not 0 < len(key) <= self.max_tokens:
            return
        self.discard(key)
        self._entries[key] = kv
        if self.branching:
            self._arrays[key] = np.asarray(key, dtype=np.int64)
        self._lengths[len(key)] += 1
        self.num_tokens += len(key)
        while self.num_tokens > self.max_tokens:
            self.discard(next(iter(self._entries)))

    def discard(self, key: TokenKey) -> None:
        """Remove an entry if present."""
        if self._entries.pop(key, None) is not None:
            self._arrays.pop(key, None)
            self._lengths[len(key)] -= 1
            if not self._lengths[len(key)]:
                del self._lengths[len(key)]
            self.num_tokens -= len(key)


def storable(cache: object, length: int) -> TypeGuard[DynamicCache]:
    """Whether rows can be cut out of ``generate``'s returned cache: a :class:`DynamicCache` of plain full-
    attention layers (no sliding windows, no linear attention), all ``length`` positions long."""
    return (
        isinstance(cache, DynamicCache)
        and len(cache.layers) > 0
        and all(type(layer) in (DynamicLayer, GrowingLayer) and layer.get_seq_length() == length
                for layer in cache.layers)
    )


def row_kv(cache: DynamicCache, row: int, columns: torch.Tensor) -> torch.Tensor:
    """A copy of batch row ``row``'s KV at sequence positions ``columns``:
    ``[layers, 2, kv_heads, len(columns), head_dim]``."""
    return torch.stack(
        [torch.stack((layer.keys[row, :, columns], layer.values[row, :, columns])) for layer in cache.layers]
    )


def batched_cache(kvs: Sequence[torch.Tensor | None], width: int, config: PreTrainedConfig) -> DynamicCache:
    """A batch :class:`DynamicCache` ``width`` positions long: row ``r`` holds ``kvs[r]`` in its first positions
    and zeros after (and everywhere when ``kvs[r]`` is ``None``); the attention mask must hide the zeros. At
    least one entry must be a tensor (it gives the shapes)."""
    like = next(kv for kv in kvs if kv is not None)
    layers, _, heads, _, head_dim = like.shape
    shape = (len(kvs), heads, width, head_dim)
    # one tensor per layer's keys and values (not views of one block): each can be freed on its own
    data = [tuple(torch.zeros(shape, dtype=like.dtype, device=like.device) for _ in range(2)) for _ in range(layers)]
    for row, kv in enumerate(kvs):
        if kv is not None:
            for layer, (keys, values) in enumerate(data):
                keys[row, :, : kv.shape[3]] = kv[layer, 0]
                values[row, :, : kv.shape[3]] = kv[layer, 1]
    cache = DynamicCache(config=config)
    for layer, (keys, values) in zip(cache.layers, data, strict=True):  # taken as they are: no copy
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
    return cache
