"""Cartridge (trainable KV prefix): scoring and greedy generation behind a cartridge made from text T equal
scoring and generating with T written in front of the sequence; gradients reach only the trainable tokens;
save/load keeps the frozen count and the generations; a cartridge for another model is refused."""

from __future__ import annotations

import json
import re

import pytest
import torch
from peft import LoraConfig, get_peft_model

from worldgym.agents.llm.adapters import enable_activation_checkpointing
from worldgym.agents.llm.cache_argument import returned_cache
from worldgym.agents.llm.cartridge import Cartridge, ModelFingerprint, kv_bytes_per_token
from worldgym.agents.llm.engines import HFEngine, SamplingParams
from worldgym.agents.llm.models import build_tiny_model, sharpen
from worldgym.agents.llm.scoring import score_tokens, shared_prefix
from worldgym.errors import CartridgeError, CheckpointError

DOCUMENT = "Tom has 3 pens and 4 cards. Ana has 5 pens and 2 cards. How many pens do they have?"
ROWS = ("Ana has 5.", "Tom has 3 pens and 4 cards, Ana", "How many?")
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=10)


@pytest.fixture()
def sharp_model(tokenizer):
    """The tiny model with its matrices scaled up, so that its outputs depend on the context (at the default
    init scale it repeats one token whatever it sees: a misplaced KV would not change its tokens)."""
    return sharpen(build_tiny_model(tokenizer, seed=0)).requires_grad_(False)


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text)["input_ids"]


def _padded(
    rows: list[list[int]], left: bool, trained: list[list[float]] | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ids, attention mask and training mask (``trained[r]``: one entry per token of row ``r`` after its first;
    default: all of them)."""
    trained = trained or [[1.0] * (len(row) - 1) for row in rows]
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attention = torch.zeros_like(ids)
    mask = torch.zeros(len(rows), width - 1)
    for r, (row, row_mask) in enumerate(zip(rows, trained)):
        start = width - len(row) if left else 0
        ids[r, start : start + len(row)], attention[r, start : start + len(row)] = torch.tensor(row), 1
        mask[r, start : start + len(row) - 1] = torch.tensor(row_mask)
    return ids, attention, mask


def test_from_text_holds_the_real_kv_of_the_first_tokens(sharp_model, tokenizer):
    tokens = _ids(tokenizer, DOCUMENT)
    cartridge = Cartridge.from_text(sharp_model, tokenizer, DOCUMENT, num_tokens=7, num_frozen=2)
    cache = returned_cache(sharp_model(torch.tensor([tokens]), use_cache=True))
    for layer, (keys, values) in enumerate(zip(cartridge.keys, cartridge.values)):
        assert torch.allclose(keys, cache.layers[layer].keys[0, :, :7], atol=1e-4)
        assert torch.allclose(values, cache.layers[layer].values[0, :, :7], atol=1e-4)
    assert (cartridge.num_tokens, cartridge.num_frozen) == (7, 2)
    assert [p.shape[2] for p in cartridge.parameters()] == [5, 5]  # the trainable tokens only
    assert cartridge.nbytes == 7 * kv_bytes_per_token(sharp_model)


@pytest.mark.parametrize("layout", ["left_padded", "right_padded_groups"])
def test_scoring_behind_a_cartridge_equals_the_text_written_in(sharp_model, tokenizer, layout):
    document = _ids(tokenizer, DOCUMENT)
    num_tokens = len(document) - 3  # the cartridge holds the document's first tokens only
    cartridge = Cartridge.from_token_ids(sharp_model, document, num_tokens)
    rows = [_ids(tokenizer, text) for text in ROWS]
    trained = [[float(j % 3 != 1) for j in range(len(row) - 1)] for row in rows]
    group_ids = None
    if layout == "right_padded_groups":  # two rows share an opening: the shared-prefix pass runs
        rows = [rows[1], rows[1][:6] + rows[0], rows[2]]
        trained = [[float(j >= (5 if r < 2 else 1)) for j in range(len(row) - 1)] for r, row in enumerate(rows)]
        group_ids = torch.tensor([0, 0, 1])
    ids, attention, mask = _padded(rows, layout == "left_padded", trained)
    if group_ids is not None:  # so score_tokens takes the shared-prefix pass
        assert shared_prefix(ids, attention, mask, group_ids).padded_tokens < ids.numel()
    scored = score_tokens(sharp_model, ids, attention, mask, 0.7, group_ids=group_ids, cartridge=cartridge)
    plain = score_tokens(sharp_model, ids, attention, mask, 0.7)

    for r, row in enumerate(rows):
        full = torch.tensor([document[:num_tokens] + row])  # the text as real tokens, no padding
        row_mask = torch.zeros(1, full.shape[1] - 1)
        row_mask[0, num_tokens:] = torch.tensor(trained[r])
        expected = score_tokens(sharp_model, full, torch.ones_like(full), row_mask, 0.7)
        got = scored.logprobs[r][mask[r].bool()]
        assert len(got) == sum(trained[r]) > 0
        assert torch.allclose(got, expected.logprobs[0][row_mask[0].bool()], atol=1e-5)
        assert not torch.allclose(got, plain.logprobs[r][mask[r].bool()], atol=1e-2)  # it matters
    assert scored.logits.shape == plain.logits.shape


def test_gradients_reach_only_the_trainable_tokens(sharp_model, tokenizer):
    cartridge = Cartridge.from_text(sharp_model, tokenizer, DOCUMENT, num_tokens=6, num_frozen=2)
    frozen_before, trainable_before = cartridge.frozen_keys.clone(), cartridge.trainable_keys.clone()
    weights_before = [p.clone() for p in sharp_model.parameters()]
    optimizer = torch.optim.Adam(cartridge.parameters(), lr=2e-2)
    ids, attention, trained = _padded([_ids(tokenizer, text) for text in ROWS], left=True)
    scored = score_tokens(sharp_model, ids, attention, trained, cartridge=cartridge)
    (-scored.logprobs.sum()).backward()
    for parameter in (cartridge.trainable_keys, cartridge.trainable_values):
        assert parameter.grad is not None and (parameter.grad.flatten(1).abs().sum(1) > 0).all()  # every layer
    assert not cartridge.frozen_keys.requires_grad and cartridge.frozen_keys.grad is None
    assert all(p.grad is None for p in sharp_model.parameters())
    optimizer.step()
    assert torch.equal(cartridge.frozen_keys, frozen_before)
    assert not torch.allclose(cartridge.trainable_keys, trainable_before)
    assert all(torch.equal(a, b) for a, b in zip(sharp_model.parameters(), weights_before))


def _generate(model, tokenizer, prompts, cartridge=None, **engine_kwargs):
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], batch_size=3,
                      cartridge=cartridge, **engine_kwargs)
    return [out[0] for out in engine.generate(prompts, GREEDY)]


@pytest.mark.parametrize("min_shared_prefix", [0, 2])
def test_greedy_generation_behind_a_cartridge_equals_the_text_in_the_prompt(
    sharp_model, tokenizer, min_shared_prefix
):
    document = _ids(tokenizer, DOCUMENT)
    cartridge = Cartridge.from_token_ids(sharp_model, document)
    prompts = [_ids(tokenizer, text) for text in ROWS]
    if min_shared_prefix:  # rows 0 and 1 share an opening: the shared-prefix prefill runs behind the cartridge
        prompts[0] = prompts[1][:5] + prompts[0]
    behind = _generate(sharp_model, tokenizer, prompts, cartridge, min_shared_prefix=min_shared_prefix)
    written = _generate(sharp_model, tokenizer, [document + p for p in prompts], min_shared_prefix=0)
    without = _generate(sharp_model, tokenizer, prompts, min_shared_prefix=0)
    for a, b in zip(behind, written, strict=True):
        assert a.token_ids == b.token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    assert [g.token_ids for g in behind] != [g.token_ids for g in without]  # the cartridge matters


def test_kv_reuse_across_turns_behind_a_cartridge(sharp_model, tokenizer):
    document = _ids(tokenizer, DOCUMENT)
    cartridge = Cartridge.from_token_ids(sharp_model, document)
    reuse = HFEngine(sharp_model, tokenizer.pad_token_id, [tokenizer.eos_token_id], batch_size=3,
                     reuse_kv_cache=True, cartridge=cartridge)
    first = [_ids(tokenizer, text) for text in ROWS]
    replies = [out[0].token_ids for out in reuse.generate(first, GREEDY)]
    second = [p + r + _ids(tokenizer, " And Tom?") for p, r in zip(first, replies)]
    second[2] = _ids(tokenizer, "Ana has 4 cards.")  # a row without a stored opening beside two with one
    continued = [out[0] for out in reuse.generate(second, GREEDY)]
    assert reuse.kv_cache.stats.hit_rows == 2
    written = _generate(sharp_model, tokenizer, [document + p for p in second], min_shared_prefix=0)
    for a, b in zip(continued, written, strict=True):
        assert a.token_ids == b.token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    third = [p + g.token_ids for p, g in zip(second, continued)]
    with torch.no_grad():
        cartridge.trainable_values.add_(1.0)  # an optimizer step: the stored KV is stale
    reuse.generate(third, GREEDY)
    assert reuse.kv_cache.stats.hit_rows == 2  # nothing reused


def test_sampled_logprobs_behind_a_cartridge_are_the_scorers(sharp_model, tokenizer):
    """The engine's logprobs (the student's old logprobs) equal score_tokens behind the same cartridge."""
    cartridge = Cartridge.random(sharp_model, num_tokens=5, num_frozen=1, seed=3, std=2.0)
    prompts = [_ids(tokenizer, text) for text in ROWS]
    engine = HFEngine(sharp_model, tokenizer.pad_token_id, [tokenizer.eos_token_id], cartridge=cartridge)
    params = SamplingParams(temperature=0.8, max_new_tokens=8, n=2, seed=5)
    samples = [(p, g) for p, out in zip(prompts, engine.generate(prompts, params)) for g in out]
    rows = [p + g.token_ids for p, g in samples]
    trained = [[0.0] * (len(p) - 1) + [1.0] * len(g.token_ids) for p, g in samples]
    ids, attention, mask = _padded(rows, left=False, trained=trained)
    scored = score_tokens(sharp_model, ids, attention, mask, 0.8, cartridge=cartridge)
    for r, (_, generation) in enumerate(samples):
        got = scored.logprobs[r][mask[r].bool()]
        assert torch.allclose(got, torch.tensor(generation.logprobs), atol=1e-4)


@pytest.mark.parametrize("num_frozen", [0, 3])  # 3 != the 2 KV heads: the count is not read from a shape
def test_save_load_keeps_the_frozen_count_and_the_generations(sharp_model, tokenizer, tmp_path, num_frozen):
    cartridge = Cartridge.from_text(sharp_model, tokenizer, DOCUMENT, num_tokens=9, num_frozen=num_frozen)
    with torch.no_grad():  # trained tokens differ from the init
        cartridge.trainable_keys.add_(0.3 * torch.randn_like(cartridge.trainable_keys))
    prompts = [_ids(tokenizer, text) for text in ROWS]
    before = _generate(sharp_model, tokenizer, prompts, cartridge)
    path = cartridge.save(tmp_path / "cartridge")
    assert json.loads((path / "cartridge.json").read_text())["num_frozen"] == num_frozen
    loaded = Cartridge.load(path, sharp_model)
    assert (loaded.num_tokens, loaded.num_frozen) == (9, num_frozen)
    assert torch.equal(loaded.keys, cartridge.keys) and torch.equal(loaded.values, cartridge.values)
    assert sum(p.numel() for p in loaded.parameters()) == sum(p.numel() for p in cartridge.parameters())
    after = _generate(sharp_model, tokenizer, prompts, loaded)
    assert [(g.token_ids, g.logprobs) for g in after] == [(g.token_ids, g.logprobs) for g in before]


def test_a_cartridge_for_another_model_is_refused(sharp_model, tokenizer, tmp_path):
    cartridge = Cartridge.from_text(sharp_model, tokenizer, DOCUMENT, num_tokens=5)
    path = cartridge.save(tmp_path / "cartridge")
    same_shape = build_tiny_model(tokenizer, seed=1)
    other_shape = build_tiny_model(tokenizer, "small", seed=0)
    ids, attention, trained = _padded([_ids(tokenizer, ROWS[0])], left=True)
    with pytest.raises(CartridgeError, match="another checkpoint"):
        score_tokens(same_shape, ids, attention, trained, cartridge=cartridge)
    with pytest.raises(CartridgeError, match="another checkpoint"):
        HFEngine(same_shape, tokenizer.pad_token_id, [tokenizer.eos_token_id], cartridge=cartridge)
    with pytest.raises(CartridgeError, match="num_layers 2 vs 4, head_dim 32 vs 64, hidden_size 128 vs 256"):
        Cartridge.load(path, other_shape)
    # the same weights are accepted in another dtype and under a LoRA wrapper
    lora = get_peft_model(sharp_model, LoraConfig(r=2, target_modules=["q_proj"]))
    assert ModelFingerprint.of(lora).mismatch(cartridge.fingerprint) is None
    assert ModelFingerprint.of(build_tiny_model(tokenizer, seed=0).to(torch.bfloat16)).mismatch(
        ModelFingerprint.of(build_tiny_model(tokenizer, seed=0))) is None


def test_bad_cartridges_raise_clear_errors(sharp_model, tokenizer, tmp_path):
    with pytest.raises(CartridgeError, match="at least that many tokens"):
        Cartridge.from_text(sharp_model, tokenizer, "Ana", num_tokens=50)
    with pytest.raises(CartridgeError, match=re.escape("num_frozen must be an int in [0, num_tokens=4]")):
        Cartridge.random(sharp_model, num_tokens=4, num_frozen=5)
    path = Cartridge.random(sharp_model, num_tokens=4, seed=1).save(tmp_path / "c")
    metadata = json.loads((path / "cartridge.json").read_text())
    del metadata["num_frozen"]
    with pytest.raises(CheckpointError, match="num_frozen"):
        Cartridge.from_tensors(Cartridge.load(path, sharp_model).tensors(), metadata, sharp_model)
    (path / "cartridge.json").write_text("{}")
    with pytest.raises(CheckpointError, match="corrupt"):
        Cartridge.load(path, sharp_model)  # the manifest's SHA-256 no longer matches
    enable_activation_checkpointing(sharp_model)
    sharp_model.train()
    ids, attention, trained = _padded([_ids(tokenizer, ROWS[0])], left=True)
    with pytest.raises(CartridgeError, match="activation checkpointing"):
        score_tokens(sharp_model, ids, attention, trained, cartridge=Cartridge.random(sharp_model, 4))
