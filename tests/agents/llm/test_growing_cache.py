"""GrowingLayer / growing_cache: the same keys and values as transformers' DynamicLayer, appended in place, and
the HF engine's generations unchanged by it."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from worldgym.agents.llm.engines.growing_cache import GrowingCache, GrowingLayer, growing_cache


def _steps(seed: int, lengths: list[int], batch: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 3, n, 4, generator=generator), torch.randn(batch, 3, n, 4, generator=generator))
            for n in lengths]


def test_appends_like_a_dynamic_layer_and_reallocates_only_when_full():
    grown, plain = GrowingLayer(room=4), DynamicLayer()
    capacities = []
    reallocate = grown._reallocate
    grown._reallocate = lambda *args: (capacities.append(args[-1]), reallocate(*args))  # type: ignore[method-assign]
    for keys, values in _steps(0, [5, 1, 1, 1, 1, 1, 3, 1]):
        got, want = grown.update(keys, values), plain.update(keys, values)
        assert all(torch.equal(g, w) for g, w in zip(got, want))
        assert grown.keys.data_ptr() == grown._key_buffer.data_ptr()  # a view of the buffer
    assert grown.get_seq_length() == plain.get_seq_length() == 14
    assert capacities == [9, 14]  # 5 + room 4; at 10 positions, 10 + 4: not a copy per token


def test_crop_and_batch_selection_are_followed_by_correct_appends():
    grown, plain = GrowingLayer(room=8), DynamicLayer()
    first, second, third = _steps(1, [6, 2, 1])
    for layer in (grown, plain):
        layer.update(*first)
        layer.crop(-2)  # drop 2 positions: a view of the buffer, appends go on behind position 4
        layer.update(*second)
    assert torch.equal(grown.keys, plain.keys) and grown.keys.data_ptr() == grown._key_buffer.data_ptr()
    index = torch.tensor([1])
    for layer in (grown, plain):
        layer.batch_select_indices(index)  # the rows kept, with their room (one copy)
        layer.update(third[0][:1], third[1][:1])
    assert torch.equal(grown.keys, plain.keys) and torch.equal(grown.values, plain.values)
    assert grown.keys.data_ptr() == grown._key_buffer.data_ptr() and grown._key_buffer.shape[0] == 1


def test_batch_selection_keeps_the_room_so_the_next_append_copies_nothing():
    grown = GrowingLayer(room=8)
    first, second = _steps(4, [5, 1], batch=3)
    grown.update(*first)
    grown.update(*second)  # into room: the keys are a view of the buffer
    reallocations = []
    reallocate = grown._reallocate
    grown._reallocate = lambda *args: (reallocations.append(args[-1]), reallocate(*args))  # type: ignore[method-assign]
    index = torch.tensor([2, 0])
    expected = torch.cat([first[0], second[0]], 2)[index]
    grown.batch_select_indices(index)
    assert torch.equal(grown.keys, expected) and grown._key_buffer.shape[2] > grown.get_seq_length()
    more = _steps(5, [1], batch=2)[0]
    grown.update(*more)
    assert reallocations == [] and torch.equal(grown.keys, torch.cat([expected, more[0]], 2))


def test_growing_cache_copies_a_dynamic_cache_and_leaves_other_layouts_alone():
    keys, values = _steps(2, [5])[0]
    cache = DynamicCache(ddp_cache_data=[(keys, values), (keys + 1, values + 1)])
    held = cache.layers[0].keys.data_ptr()
    grown = growing_cache(cache, room=3, config=None)  # type: ignore[arg-type]
    assert isinstance(grown, GrowingCache) and all(type(layer) is GrowingLayer for layer in grown.layers)
    assert torch.equal(grown.layers[0].keys, keys) and torch.equal(grown.layers[1].values, values + 1)
    assert grown.layers[0].keys.data_ptr() == held  # moved over, not copied
    assert all(layer.keys is None for layer in cache.layers)  # ... and held by one cache only
    before = grown.layers[0].keys.clone()
    more = _steps(3, [2])[0]
    appended = grown.layers[0].update(*more)[0]  # the first append copies the layer into room
    assert torch.equal(appended, torch.cat([before, more[0]], 2)) and appended.data_ptr() != held
    assert growing_cache(grown, room=3, config=None) is grown  # type: ignore[arg-type]

    class Sliding(DynamicLayer):
        pass

    other = DynamicCache(ddp_cache_data=[(keys, values)])
    other.layers = [Sliding()]
    assert growing_cache(other, room=3, config=None) is other  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="room must be >= 1"):
        GrowingLayer(room=0)


def test_engine_generations_are_the_same_with_concatenating_caches(monkeypatch):
    """Multi-turn greedy and sampled generations with the KV cache kept across turns: the same tokens and
    logprobs whether the engine's caches grow in place or by concatenation."""
    from worldgym.agents.llm import build_tiny_model, train_chat_tokenizer
    from worldgym.agents.llm.engines import HFEngine, SamplingParams, hf

    tokenizer = train_chat_tokenizer(["hello world, the phone number is 555 0101"] * 4, vocab_size=300)
    model = build_tiny_model(tokenizer, seed=0)

    def turns(engine: HFEngine) -> list[tuple[list[int], list[float]]]:
        out = []
        prompts = [[5, 6, 7, 8, 9], [10, 11, 12]]
        for temperature in (0.0, 1.0, 0.0):
            params = SamplingParams(max_new_tokens=6, temperature=temperature, seed=3)
            generations = [row[0] for row in engine.generate(prompts, params)]
            out += [(g.token_ids, g.logprobs) for g in generations]
            prompts = [p + g.token_ids + [13, 14] for p, g in zip(prompts, generations)]  # the next turn
        return out

    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], reuse_kv_cache=True)
    grown = turns(engine)
    monkeypatch.setattr(hf, "growing_cache", lambda cache, room, config: cache)
    plain = turns(HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], reuse_kv_cache=True))
    assert [tokens for tokens, _ in grown] == [tokens for tokens, _ in plain]
    assert all(a == pytest.approx(b, abs=1e-5) for (_, a), (_, b) in zip(grown, plain))


def test_a_batch_of_stored_rows_is_built_without_concatenation(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import LlamaConfig

    from worldgym.agents.llm.engines.prefix_cache import batched_cache

    config = LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=16)
    stored = torch.randn(2, 2, 2, 5, 4)  # [layers, keys/values, kv heads, positions, head dim]
    monkeypatch.setattr(torch, "cat", lambda *args, **kwargs: pytest.fail("the rows were concatenated"))
    cache = batched_cache([stored, None, stored[:, :, :, :3]], 6, config)
    assert len(cache.layers) == 2 and cache.get_seq_length() == 6
    for layer, kv in zip(cache.layers, stored):
        assert torch.equal(layer.keys[0, :, :5], kv[0]) and torch.equal(layer.values[2, :, :3], kv[1, :, :3])
        assert not layer.keys[1].any() and not layer.keys[0, :, 5:].any()  # zeros where the mask hides
