"""HFEngine's prefix KV cache: multi-turn rollouts that prefill only the new tokens give the same episodes
(greedy) and the same logprobs as re-prefilling everything; the cache is hit, bounded and dropped when the
weights change."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from worldgym.agents.llm.adapters import merged_trainable_tokens
from worldgym.agents.llm.engines import HFEngine, SamplingParams
from worldgym.agents.llm.engines.prefix_cache import PrefixKVCache
from worldgym.agents.llm.envs import make_text_env
from worldgym.agents.llm.losses import token_logprobs
from worldgym.agents.llm.models import build_tiny_model, sharpen
from worldgym.agents.llm.rollout import Episode, RolloutCollector
from worldgym.agents.llm.tokenizer import env_text_corpus, train_chat_tokenizer

SEEDS = [0, 1, 2, 3]  # CSR tasks whose prompts differ in length
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=24)


def _make_env():
    return make_text_env("CSRPhone-v1", {"difficulty": 1})


@pytest.fixture(scope="module")
def csr_tokenizer():
    return train_chat_tokenizer(env_text_corpus(_make_env, num_resets=20), vocab_size=800)


@pytest.fixture()
def csr_model(csr_tokenizer):
    """A tiny model whose weights are scaled up so that its replies vary and depend on the context (at the
    default init scale it repeats one token whatever it sees: a misplaced KV would not change its tokens)."""
    return sharpen(build_tiny_model(csr_tokenizer, seed=0))


def _engine(model, tokenizer, reuse: bool, **kwargs) -> HFEngine:
    """Rows stop at one of many ids (eos and every 11th token), so replies end at different lengths and
    ``generate`` keeps feeding pad tokens to finished rows."""
    stops = [tokenizer.eos_token_id, *range(5, len(tokenizer), 11)]
    kwargs = {"batch_size": 3, "reuse_kv_cache": reuse, "kv_cache_max_tokens": 100_000, **kwargs}
    return HFEngine(model, tokenizer.pad_token_id, stops, **kwargs)


def _collect(engine, tokenizer, params=GREEDY, seeds=SEEDS, group_size=1) -> list[Episode]:
    return RolloutCollector(engine, tokenizer, _make_env, max_turns=5).collect(seeds, group_size, params)


class _Recording:
    """Wraps an engine's ``generate`` to record, per turn, the cache counters (when the engine has a cache)
    and the token positions the model really ran (counted at its input embedding: prefill and decoding)."""

    def __init__(self, engine: HFEngine):
        self.engine, self.calls, self.positions = engine, [], []
        self._count = 0
        engine.model.get_input_embeddings().register_forward_hook(self._on_embed)

    def _on_embed(self, module, inputs, output):
        self._count += inputs[0].numel()

    def _counters(self) -> tuple[int, ...]:
        stats = self.engine.kv_cache.stats if self.engine.kv_cache is not None else None
        return (stats.rows, stats.hit_rows, stats.prompt_tokens, stats.reused_tokens) if stats else (0,) * 4

    def generate(self, prompts, params):
        before, self._count = self._counters(), 0
        out = self.engine.generate(prompts, params)
        self.calls.append([b - a for a, b in zip(before, self._counters())])
        self.positions.append(self._count)
        return out

    def sync_weights(self):
        self.engine.sync_weights()


def _assert_logprobs_match_a_forward(model, episodes: list[Episode], temperature: float) -> None:
    """Each model token's logprob equals a training forward over the whole episode."""
    for episode in episodes:
        ids = torch.tensor([episode.token_ids])
        with torch.no_grad():
            expected = token_logprobs(model(ids).logits[:, :-1], ids[:, 1:], temperature)[0]
        model_positions = [i - 1 for i, m in enumerate(episode.action_mask) if m]
        got = torch.tensor([episode.old_logprobs[i + 1] for i in model_positions])
        assert torch.allclose(got, expected[model_positions], atol=1e-4)


def test_greedy_multi_turn_rollouts_are_identical_with_and_without_reuse(csr_model, csr_tokenizer):
    plain = _collect(_engine(csr_model, csr_tokenizer, reuse=False), csr_tokenizer)
    reused = _collect(_engine(csr_model, csr_tokenizer, reuse=True), csr_tokenizer)
    assert min(len(e.turns) for e in plain) >= 4 and len({len(e.token_ids) for e in plain}) == len(SEEDS)
    finishes = {t.finish_reason for e in plain for t in e.turns}
    assert finishes == {"stop", "length"}  # rows end early and late
    for a, b in zip(plain, reused, strict=True):
        assert a.token_ids == b.token_ids and a.action_mask == b.action_mask
        assert torch.allclose(torch.tensor(a.old_logprobs), torch.tensor(b.old_logprobs), atol=1e-4)
    _assert_logprobs_match_a_forward(csr_model, reused, temperature=1.0)


def test_later_turns_prefill_only_their_new_tokens(csr_model, csr_tokenizer):
    engine = _engine(csr_model, csr_tokenizer, reuse=True)
    reused = _Recording(engine)
    _collect(reused, csr_tokenizer)
    first, *later = reused.calls
    assert first[1] == 0 and len(later) >= 3  # nothing stored before the first turn
    for rows, hit_rows, prompt_tokens, reused_tokens in later:
        assert hit_rows == rows  # every running episode continues from its stored KV
        assert prompt_tokens - reused_tokens < 0.1 * prompt_tokens
    assert len(engine.kv_cache) == len(SEEDS)  # each episode's entry replaced turn by turn, not piled up
    plain = _Recording(_engine(csr_model, csr_tokenizer, reuse=False))
    _collect(plain, csr_tokenizer)
    assert reused.positions[0] == plain.positions[0]  # the first turn runs the same way
    for with_reuse, without in zip(reused.positions[1:], plain.positions[1:], strict=True):
        assert with_reuse < 0.25 * without  # the model itself ran far fewer positions


def test_sampled_rollouts_with_reuse_keep_the_trainers_logprobs(csr_model, csr_tokenizer, monkeypatch):
    """Across turns, with GRPO groups (the first turn takes the shared-prefix path) and top-p sampling."""
    engine = _engine(csr_model, csr_tokenizer, reuse=True)
    shared_calls = []
    prefill_shared = engine._prefill_shared
    monkeypatch.setattr(engine, "_prefill_shared", lambda *a: shared_calls.append(1) or prefill_shared(*a))
    params = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=16, seed=3)
    episodes = _collect(engine, csr_tokenizer, params, seeds=[0, 1], group_size=2)
    assert shared_calls and engine.kv_cache.stats.hit_rows > 0  # both paths ran
    _assert_logprobs_match_a_forward(csr_model, episodes, temperature=0.8)


def test_rows_with_and_without_a_stored_prefix_share_a_batch(csr_model, csr_tokenizer):
    engine = _engine(csr_model, csr_tokenizer, reuse=True)
    plain = _engine(csr_model, csr_tokenizer, reuse=False)
    first = csr_tokenizer("Hello there, how can I help you today?")["input_ids"]
    (generation,), = engine.generate([first], GREEDY)
    follow_up = first + generation.token_ids + csr_tokenizer(" And then?")["input_ids"]
    prompts = [csr_tokenizer("An unrelated prompt")["input_ids"], follow_up]
    params = SamplingParams(temperature=0.0, max_new_tokens=12, n=2)
    got = engine.generate(prompts, params)
    assert engine.kv_cache.stats.hit_rows == 2  # both samples of the follow-up reuse the one entry
    expected = plain.generate(prompts, params)
    for got_row, expected_row in zip(got, expected, strict=True):
        for a, b in zip(got_row, expected_row, strict=True):
            assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_a_prompt_branching_off_a_stored_sequence_reuses_their_shared_opening(csr_model, csr_tokenizer):
    """A world model's pattern: a reply written after a marker, then a prompt that goes on from the turn before
    the marker. With ``kv_cache_branches`` it prefills only what follows the shared opening, with the same
    tokens and logprobs as prefilling it whole; without, the stored sequence serves nothing."""
    turn = csr_tokenizer("Hello there, how can I help you today?")["input_ids"]
    marker = csr_tokenizer(" Predict:")["input_ids"]
    engines = {branches: _engine(csr_model, csr_tokenizer, reuse=True, kv_cache_branches=branches)
               for branches in (False, True)}
    for engine in engines.values():
        engine.generate([turn + marker], GREEDY)
    engines[True].generate([turn + marker], GREEDY)  # branches off its own entry, which it stores again
    engines[False].generate([turn + marker], GREEDY)
    later = turn + csr_tokenizer(" I would like to close my account.")["input_ids"] + marker
    before = {branches: engine.kv_cache.stats.reused_tokens for branches, engine in engines.items()}
    got = {branches: engine.generate([later], GREEDY)[0][0] for branches, engine in engines.items()}
    reused = {branches: engine.kv_cache.stats.reused_tokens - before[branches] for branches, engine in engines.items()}
    assert reused[False] == 0 and len(turn) <= reused[True] < len(later)
    assert len(engines[True].kv_cache) == 1  # the entry branched off is used up, as an extended one is
    (expected,), = _engine(csr_model, csr_tokenizer, reuse=False).generate([later], GREEDY)
    for generation in got.values():
        assert generation.token_ids == expected.token_ids
        assert torch.allclose(torch.tensor(generation.logprobs), torch.tensor(expected.logprobs), atol=1e-4)


def test_sync_weights_and_in_place_updates_drop_the_cache(csr_model, csr_tokenizer):
    engine = _engine(csr_model, csr_tokenizer, reuse=True)
    prompt = csr_tokenizer("Hello there")["input_ids"]
    (generation,), = engine.generate([prompt], GREEDY)
    assert len(engine.kv_cache) == 1 and engine.kv_cache.num_tokens > 0
    engine.sync_weights()
    assert len(engine.kv_cache) == 0 and engine.kv_cache.num_tokens == 0
    (generation,), = engine.generate([prompt], GREEDY)
    with torch.no_grad():  # an optimizer-style in-place update without sync_weights
        next(csr_model.parameters()).mul_(1.01)
    follow_up = prompt + generation.token_ids + [5]
    hits_before = engine.kv_cache.stats.hit_rows
    (got,), = engine.generate([follow_up], GREEDY)
    assert engine.kv_cache.stats.hit_rows == hits_before  # stale KV not reused
    (expected,), = _engine(csr_model, csr_tokenizer, reuse=False).generate([follow_up], GREEDY)
    assert got.token_ids == expected.token_ids
    assert torch.allclose(torch.tensor(got.logprobs), torch.tensor(expected.logprobs), atol=1e-4)


def test_eviction_keeps_the_token_bound(csr_model, csr_tokenizer):
    bound = 3000  # room for about two episodes of the four
    engine = _engine(csr_model, csr_tokenizer, reuse=True, kv_cache_max_tokens=bound)
    recording = _Recording(engine)
    sizes = []
    original = engine.generate

    def generate_and_measure(prompts, params):
        out = original(prompts, params)
        sizes.append((engine.kv_cache.num_tokens, len(engine.kv_cache)))
        return out

    engine.generate = generate_and_measure
    episodes = _collect(recording, csr_tokenizer)
    assert all(tokens <= bound for tokens, _ in sizes) and max(count for _, count in sizes) < len(SEEDS)
    assert 0 < sum(hits for _, hits, _, _ in recording.calls) < sum(rows for rows, *_ in recording.calls[1:])
    plain = _collect(_engine(csr_model, csr_tokenizer, reuse=False), csr_tokenizer)  # misses are harmless
    assert [e.token_ids for e in episodes] == [e.token_ids for e in plain]


def test_store_evicts_the_least_recently_used_entry():
    store = PrefixKVCache(max_tokens=6)
    kv = torch.zeros(1, 2, 1, 2, 4)
    store.put([1, 2], kv)
    store.put([3, 4], kv)
    store.put([5, 6], kv)
    assert store.longest_prefix([1, 2, 9]) is not None  # [1, 2] is now the most recently used
    store.put([7, 8], kv)
    assert store.longest_prefix([3, 4, 9]) is None and store.longest_prefix([1, 2, 9]) is not None
    store.put([1, 2, 3], torch.zeros(1, 2, 1, 3, 4))
    assert store.longest_prefix([1, 2, 3, 4]).tokens == (1, 2, 3)  # the longest stored opening wins
    assert store.num_tokens <= 6
    with pytest.raises(ValueError, match="2 tokens but KV for 3"):
        store.put([1, 2], torch.zeros(1, 2, 1, 3, 4))


def test_branching_store_serves_the_longest_shared_opening():
    store = PrefixKVCache(max_tokens=100, branching=True)
    kv = torch.arange(5.0).reshape(1, 1, 1, 5, 1).expand(1, 2, 1, 5, 1)
    store.put([1, 2, 3, 4, 5], kv)
    store.put([1, 2, 9], torch.zeros(1, 2, 1, 3, 1))
    hit = store.longest_prefix([1, 2, 3, 7, 7])
    assert hit.tokens == (1, 2, 3) and hit.entry == (1, 2, 3, 4, 5)
    assert hit.kv[0, 0, 0, :, 0].tolist() == [0.0, 1.0, 2.0]  # the entry's first three positions
    assert store.longest_prefix([1, 2, 3, 4, 5]).tokens == (1, 2, 3, 4)  # one prompt token stays uncached
    assert store.longest_prefix([1, 2, 9, 4]).entry == (1, 2, 9)  # a whole entry, when it is the longest
    assert store.longest_prefix([8, 1, 2]) is None
    store.discard((1, 2, 3, 4, 5))
    assert store.longest_prefix([1, 2, 3, 7]).tokens == (1, 2)  # from the entry left
    store.clear()
    assert store.longest_prefix([1, 2, 3]) is None


def _with_trainable_tokens(model, tokenizer):
    """A LoRA with trainable embedding rows (as the pretrained models' added special tokens get), the rows moved
    away from the base so that merging them in or not changes what the model computes."""
    rows = list(range(3, 40, 3))  # tokens the tiny model says often
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM",
                      trainable_token_indices=rows)
    peft_model = get_peft_model(model, lora)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "trainable_tokens_delta" in name:
                parameter.mul_(-2.0)
    return peft_model, rows


def test_merged_trainable_tokens_is_exact_and_restores_the_base(csr_model, csr_tokenizer):
    weight = csr_model.get_input_embeddings().weight  # the base embedding (tied to the LM head)
    base = weight.detach().clone()
    model, rows = _with_trainable_tokens(csr_model, csr_tokenizer)
    ids = torch.tensor([list(range(2, 60))])
    with torch.no_grad():
        expected = model(ids).logits
        with merged_trainable_tokens(model) as merged:
            assert merged >= 1 and not torch.equal(weight[rows], base[rows])
            inside = model(ids).logits
    assert torch.equal(inside, expected)
    assert torch.equal(weight, base)  # the original rows are back, bit for bit


def test_generation_with_trainable_tokens_keeps_its_kv_and_the_trainers_logprobs(csr_model, csr_tokenizer):
    model, _ = _with_trainable_tokens(csr_model, csr_tokenizer)
    engine = _engine(model, csr_tokenizer, reuse=True)
    episodes = _collect(engine, csr_tokenizer, seeds=[0, 1])
    assert engine.kv_cache.stats.hit_rows > 0  # merging the rows in and out did not count as a weight update
    _assert_logprobs_match_a_forward(model, episodes, temperature=1.0)
    plain = _collect(_engine(model, csr_tokenizer, reuse=False, min_shared_prefix=0), csr_tokenizer, seeds=[0, 1])
    assert [e.token_ids for e in plain] == [e.token_ids for e in episodes]
