"""World-model examples come from the rollout's own ids; the loss is the reply's cross-entropy, per call."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from worldgym.agents.dual_lora.replay import PhoneCallReplay
from worldgym.agents.dual_lora.world_model import (
    PhoneCallExample,
    WorldModelScores,
    phone_call_examples,
    score_examples,
    wm_token_ids,
)
from worldgym.agents.llm.engines import SamplingParams
from worldgym.agents.llm.models import build_tiny_model
from worldgym.agents.llm.rollout import RolloutCollector
from worldgym.agents.llm.tokenizer import train_chat_tokenizer

from .conftest import PhoningEngine, make_csr_env


@pytest.fixture(scope="module")
def episodes(csr_tokenizer):
    collector = RolloutCollector(PhoningEngine(csr_tokenizer), csr_tokenizer, make_csr_env, max_turns=4)
    return collector.collect([3, 4], 1, SamplingParams())


def test_examples_are_context_ids_then_markers_then_the_reply(episodes, csr_tokenizer):
    per_episode = phone_call_examples(episodes, csr_tokenizer)
    predict, start, end = wm_token_ids(csr_tokenizer)
    for episode, examples in zip(episodes, per_episode):
        calls = [t for t in episode.turns if t.info.get("tool") == "make_phone_call"]
        assert len(examples) == len(calls) == 3  # the first turn searches: not a phone call
        for turn, example in zip(calls, examples):
            context_end = turn.action_span[1]
            assert example.token_ids[:context_end] == tuple(episode.token_ids[:context_end])
            assert example.token_ids[context_end : context_end + 2] == (predict, start)
            assert example.target_start == context_end + 2 and example.token_ids[-1] == end
            assert csr_tokenizer.decode(example.token_ids[example.target_start : -1]) == turn.observation
            assert example.response_type == turn.info["response_type"]
    short = phone_call_examples(episodes, csr_tokenizer, max_context_tokens=5)[0][0]
    assert short.target_start == 7


def test_a_tokenizer_without_the_markers_is_refused():
    plain = train_chat_tokenizer(["hello world"] * 10, vocab_size=300)
    with pytest.raises(ValueError, match="extra_special_tokens"):
        wm_token_ids(plain)


def test_loss_is_the_mean_over_calls_of_each_reply_token_mean(csr_tokenizer):
    model = build_tiny_model(csr_tokenizer, seed=0).eval()
    examples = [PhoneCallExample((5, 6, 7, 8, 9), 3, "a"), PhoneCallExample((5, 6, 10, 11, 12, 13, 14), 4, "b")]
    scores = score_examples(model, examples, csr_tokenizer.pad_token_id)
    for row, example in enumerate(examples):
        ids = torch.tensor([example.token_ids])
        logits = model(input_ids=ids).logits[0, :-1]
        expected = F.cross_entropy(logits[example.target_start - 1 :], ids[0, example.target_start :])
        torch.testing.assert_close(scores.loss[row], expected, atol=1e-5, rtol=1e-5)
        assert scores.num_targets[row] == example.num_targets


def test_replay_samples_only_past_steps_and_round_trips(tmp_path):
    replay = PhoneCallReplay(capacity=3)
    replay.add([PhoneCallExample((1, 2, 3), 2, "a"), PhoneCallExample((4, 5), 1, "b")], step=0)
    replay.add([PhoneCallExample((6, 7, 8, 9), 3, "c"), PhoneCallExample((1, 1), 1, "d")], step=1)
    assert len(replay) == 3  # the oldest is gone
    rng = np.random.default_rng(0)
    assert {e.response_type for e in replay.sample(5, current_step=1, rng=rng)} == {"b"}
    checkpoint = tmp_path / "checkpoint-1"  # a checkpoint of the run folder tmp_path
    state, run_files = replay.save(tmp_path)  # the calls go to the run folder's segment store
    assert run_files and all((tmp_path / name).is_file() for name in run_files)
    copy = PhoneCallReplay(1)
    copy.load(checkpoint, state, {})
    assert copy.sample(5, 2, np.random.default_rng(0)) == replay.sample(5, 2, np.random.default_rng(0))


def test_chunked_scores_keep_the_order_of_the_examples(csr_tokenizer):
    from worldgym.agents.dual_lora.world_model import score_in_chunks

    model = build_tiny_model(csr_tokenizer, seed=0).eval()
    examples = [PhoneCallExample(tuple(range(5, 5 + n)), 2, "a") for n in (9, 4, 12, 6, 5)]
    whole = score_examples(model, examples, csr_tokenizer.pad_token_id)
    chunked = score_in_chunks(model, examples, csr_tokenizer.pad_token_id, chunk_size=2)
    torch.testing.assert_close(chunked.loss, whole.loss, atol=1e-5, rtol=1e-5)
    assert chunked.num_targets.tolist() == [7, 2, 10, 4, 3]


def test_chunks_are_checkpointed_same_gradients_fewer_saved_activations(csr_tokenizer):
    """With gradients on, each chunk's activations are dropped until the backward reruns it: the graph saves
    far fewer bytes than one forward over every example, and the gradients are the same."""
    from worldgym.agents.dual_lora.world_model import score_in_chunks

    model = build_tiny_model(csr_tokenizer, seed=0).eval()
    examples = [PhoneCallExample(tuple(range(5, 5 + n)), 2, "a") for n in (40, 36, 44, 38)]

    def saved_bytes_and_grads(chunk_size: int) -> tuple[int, list[torch.Tensor]]:
        model.zero_grad()
        saved = []

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            saved.append(tensor.numel() * tensor.element_size())
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = score_in_chunks(model, examples, csr_tokenizer.pad_token_id, chunk_size).loss.sum()
        loss.backward()
        return sum(saved), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    whole_bytes, whole_grads = saved_bytes_and_grads(chunk_size=len(examples))  # one chunk: nothing to drop
    chunked_bytes, chunked_grads = saved_bytes_and_grads(chunk_size=1)
    assert chunked_bytes < whole_bytes / 10
    assert len(chunked_grads) == len(whole_grads) > 0
    for chunked, whole in zip(chunked_grads, whole_grads):
        torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=1e-4)


def test_tool_usage_metrics_count_calls_by_tool(episodes):
    from worldgym.agents.llm.evaluation import tool_usage_metrics

    metrics = tool_usage_metrics(episodes)
    assert metrics["eval/tool/search_company_per_episode"] == 1.0
    assert metrics["eval/tool/make_phone_call_per_episode"] == 3.0
    assert metrics["eval/tool_calls_per_episode"] == 4.0 and metrics["eval/invalid_call_rate"] == 0.0


def _nested_examples() -> list[PhoneCallExample]:
    """Two episodes' calls: contexts 20, 35 and 60 tokens long of one episode, 30 of another, and a call whose
    context leaves the first episode's after 10 tokens (it starts a pack of its own)."""
    generator = torch.Generator().manual_seed(0)
    first = torch.randint(10, 300, (60,), generator=generator).tolist()
    other = torch.randint(10, 300, (30,), generator=generator).tolist()
    forked = first[:10] + torch.randint(10, 300, (15,), generator=generator).tolist()

    def call(context: list[int], reply: int) -> PhoneCallExample:
        return PhoneCallExample(tuple(context + [5, 6] + list(range(20, 20 + reply)) + [7]), len(context) + 2, "a")

    return [call(first[:35], 4), call(other, 6), call(first, 3), call(forked, 5), call(first[:20], 8)]


def test_packed_calls_share_their_contexts(csr_tokenizer):
    from worldgym.agents.dual_lora.world_model import pack_calls

    packs = pack_calls(_nested_examples())
    assert sorted(sorted(pack.members) for pack in packs) == [[0, 2, 4], [1], [3]]
    alone = pack_calls(_nested_examples(), share_contexts=False)  # sharded ranks: one forward per call
    assert sorted(pack.members for pack in alone) == [(0,), (1,), (2,), (3,), (4,)]
    longest = next(pack for pack in packs if 2 in pack.members)
    assert longest.context_length == 60 and len(longest.token_ids) == 60 + (2 + 3 + 1) + (2 + 4 + 1) + (2 + 8 + 1)
    mask = longest.attention_mask()[0, 0]
    start, size, seen = longest.branches[longest.members.index(4)]  # the 20-token context's call
    assert mask[start, :seen].all() and not mask[start, seen:start].any() and mask[start + 1, start]
    assert longest.position_ids[start : start + size] == tuple(range(20, 20 + size))


@pytest.mark.parametrize("grad", [False, True])
def test_packed_scores_equal_each_calls_own(csr_tokenizer, grad):
    from worldgym.agents.dual_lora.world_model import score_packed

    model = build_tiny_model(csr_tokenizer, seed=0).eval()
    examples = _nested_examples()

    def scored(packed: bool) -> tuple[WorldModelScores, list[torch.Tensor]]:
        model.zero_grad()
        with torch.set_grad_enabled(grad):
            scores = (score_packed(model, examples) if packed
                      else score_examples(model, examples, csr_tokenizer.pad_token_id))
        if grad:
            scores.loss.sum().backward()
        return scores, [p.grad.clone() for p in model.parameters() if p.grad is not None]

    (separate, separate_grads), (packed, packed_grads) = scored(False), scored(True)
    for name in ("loss", "token_accuracy", "mean_probability"):
        torch.testing.assert_close(getattr(packed, name), getattr(separate, name), atol=1e-5, rtol=1e-5)
    assert packed.exact_match.tolist() == separate.exact_match.tolist()
    assert packed.num_targets.tolist() == separate.num_targets.tolist() == [5, 7, 4, 6, 9]
    assert len(packed_grads) == len(separate_grads) == (len(list(model.parameters())) if grad else 0)
    for a, b in zip(packed_grads, separate_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_wm_chunk_size_is_deprecated():
    from worldgym.agents.dual_lora import DualLoRAConfig

    with pytest.warns(DeprecationWarning, match="wm_chunk_size is deprecated and ignored"):
        DualLoRAConfig(wm_chunk_size=1)
