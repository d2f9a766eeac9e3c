"""Constrained tool arguments: schema marks, the token index, the per-row constraint, the engine's processor,
and the learner scoring constrained tokens over the same allowed set (PPO ratio 1 before an update)."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import worldgym  # noqa: F401  (registers the ids)
from worldgym.agents.llm.constrained import CopyConstraint, TokenTextIndex, copied_argument_keys, mask_logits
from worldgym.agents.llm.engines import HFEngine, SamplingParams
from worldgym.agents.llm.models import build_tiny_model
from worldgym.agents.llm.scoring import score_tokens
from worldgym.agents.llm.tokenizer import train_chat_tokenizer
from worldgym.agents.llm.warm_start import WarmStartConfig, expert_chats
from worldgym.envs.csr_phone.profiles import FIELD_PHRASES

pytestmark = pytest.mark.slow  # one fixture trains a tiny model for ~40 s

VALUES = ("1-800-555-0123", "1-877-555-9876", "POL-1703883")
CALL_OPENING = '<tool_call>\n{"name": "make_phone_call", "arguments": {"phone_number":'


@pytest.fixture(scope="module")
def csr_tokenizer():
    chats = expert_chats(WarmStartConfig(model="tiny", difficulties=(1, 3), episodes_per_difficulty=10))
    corpus = [m["content"] for chat in chats for m in chat.messages]
    return train_chat_tokenizer(corpus, vocab_size=1000, tool_format="signatures", split_digits=True)


@pytest.fixture(scope="module")
def index(csr_tokenizer):
    return TokenTextIndex(csr_tokenizer)


def test_csr_schema_marks_the_company_phone_number_and_every_auth_value() -> None:
    tools = gym.make("CSRPhone-v1").unwrapped.action_space.openai_tools()
    assert copied_argument_keys(tools) == {"company", "phone_number", *FIELD_PHRASES}


@pytest.mark.parametrize("rest", ['1-800"', ' "POL-1"', '"', "x-unknown"])
def test_token_index_matches_a_brute_force_scan(csr_tokenizer, index, rest) -> None:
    specials = set(csr_tokenizer.all_special_ids)
    expected = [
        t for t, text in enumerate(index.texts)
        if t not in specials and text and "\ufffd" not in text and (rest.startswith(text) or text.startswith(rest))
    ]
    assert expected and sorted(index.matching(rest)) == expected


def test_constraint_opens_at_a_marked_key_and_closes_with_the_value(index) -> None:
    constraint = CopyConstraint(index, frozenset({"phone_number"}), VALUES)
    assert constraint.allowed('{"name": "search_company", "arguments": {"company": "') is None
    for written in (CALL_OPENING, CALL_OPENING + ' "1-8', CALL_OPENING + ' "1-877-555-98'):
        allowed = constraint.allowed(written)
        assert allowed, written
        value_so_far = written[len(CALL_OPENING):]
        for token in allowed:  # every allowed token keeps the text on the way to some '"<value>"'
            text = value_so_far + index.texts[token]
            assert any(
                target.startswith(text) or text.startswith(target)
                for value in VALUES for target in (f' "{value}"', f'"{value}"')
            ), (written, index.texts[token])
    assert constraint.allowed(CALL_OPENING + ' "1-800-555-0123"') is None  # closed: free again
    empty = CopyConstraint(index, frozenset({"phone_number"}), ())  # nothing seen yet: only "" can be written
    for token in empty.allowed(CALL_OPENING):
        text = index.texts[token]
        assert any(target.startswith(text) or text.startswith(target) for target in (' ""', '""')), text


def _tokens(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _word_stops(tokenizer) -> list[int]:
    """eos and every third lowercase word token: rows stop at different lengths once a copied value is written
    (never inside one: values hold digits, capitals and dashes)."""
    words = [t for t in range(len(tokenizer)) if (text := tokenizer.decode([t]).strip()).isalpha() and text.islower()]
    return [tokenizer.eos_token_id, *words[::3]]


@pytest.mark.parametrize("stops", ["eos", "words"])
def test_constrained_samples_are_always_exact_copies_and_logprobs_match_a_masked_forward(csr_tokenizer, index,
                                                                                         stops):
    model = build_tiny_model(csr_tokenizer, seed=0)  # untrained: left alone it would write anything
    stop_ids = [csr_tokenizer.eos_token_id] if stops == "eos" else _word_stops(csr_tokenizer)
    engine = HFEngine(model, csr_tokenizer.pad_token_id, stop_ids, batch_size=12)
    batch_rows = []
    generate = model.generate
    model.generate = lambda *a, **k: batch_rows.append(k["input_ids"].shape[0]) or generate(*a, **k)
    keys = frozenset({"phone_number"})
    prompts = [_tokens(csr_tokenizer, CALL_OPENING), _tokens(csr_tokenizer, "hello " + CALL_OPENING)]
    constraints = [CopyConstraint(index, keys, VALUES), CopyConstraint(index, keys, VALUES[:1])]
    params = SamplingParams(temperature=1.0, max_new_tokens=24, n=6, seed=3)
    results = engine.generate(prompts, params, constraints)
    if stops == "words":  # rows that stopped left the batch: the processor followed the rows still decoding
        assert len(batch_rows) > 1 and batch_rows[-1] < 12
    for prompt, generations, constraint in zip(prompts, results, constraints):
        for generation in generations:
            text = csr_tokenizer.decode(generation.token_ids)
            value = text.split('"')[1]
            assert value in constraint.values, text
            assert generation.allowed_token_ids is not None and generation.allowed_token_ids[0] is not None
            # the learner's scoring with the recorded masks gives the sampler's logprobs
            ids = torch.tensor([prompt + generation.token_ids])
            mask = torch.zeros(1, ids.shape[1] - 1)
            mask[0, len(prompt) - 1 :] = 1
            allowed = [{len(prompt) - 1 + i: a for i, a in enumerate(generation.allowed_token_ids) if a}]
            with torch.no_grad():
                scored = score_tokens(model, ids, torch.ones_like(ids), mask, 1.0, allowed=allowed)
            assert torch.allclose(
                scored.logprobs[0, len(prompt) - 1 :], torch.tensor(generation.logprobs), atol=1e-4
            )
    free = engine.generate(prompts, params)
    assert all(g.allowed_token_ids is None for gs in free for g in gs)


def test_mask_logits_keeps_gradients_of_allowed_tokens_and_finite_entropy() -> None:
    logits = torch.randn(2, 5, requires_grad=True)
    masked = mask_logits(logits, [[1, 3], [0]])
    log_p = masked.log_softmax(-1)
    assert torch.isfinite(-(log_p.exp() * log_p).sum(-1)).all()
    assert torch.allclose(log_p[1, 0], torch.tensor(0.0))
    log_p[0, 1].backward()
    assert logits.grad[0, [1, 3]].abs().sum() > 0 and logits.grad[0, [0, 2, 4]].abs().sum() == 0


@pytest.fixture(scope="module")
def csr_sft_model(csr_tokenizer):
    """A tiny model taught the call format on 64 expert chats (~40 s on 2 cores): it writes calls, but does not
    learn to copy in this time."""
    from worldgym.agents.llm.sft import SFTConfig, sft_train

    chats = expert_chats(WarmStartConfig(model="tiny", difficulties=(1,), episodes_per_difficulty=64))
    model = build_tiny_model(csr_tokenizer, seed=0)
    sft_train(model, csr_tokenizer, chats, SFTConfig(epochs=16, batch_size=8, learning_rate=3e-3, progress=False))
    return model


def _csr_collector(model, tokenizer, decoding):
    from worldgym.agents.llm.envs import make_text_env
    from worldgym.agents.llm.rollout import RolloutCollector

    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], batch_size=16)
    return RolloutCollector(engine, tokenizer, lambda: make_text_env("CSRPhone-v1", {"difficulty": 1}),
                            max_turns=6, decoding=decoding)


def test_constrained_rollouts_copy_every_marked_argument(csr_sft_model, csr_tokenizer) -> None:
    from worldgym.agents.llm.copy_probe import copy_probe

    params = SamplingParams(temperature=0.5, max_new_tokens=64, seed=1)
    episodes = _csr_collector(csr_sft_model, csr_tokenizer, "constrained").collect(range(8), 2, params)
    probe = copy_probe(episodes)
    assert probe.arguments >= 8 and probe.rate == 1.0
    free = copy_probe(_csr_collector(csr_sft_model, csr_tokenizer, "free").collect(range(8), 2, params))
    assert free.arguments >= 8 and free.rate < 1.0  # the constraint, not the model, does the copying
    assert any(e.allowed_token_ids for e in episodes)
    for episode in episodes:  # constrained positions are model tokens whose logprobs are over the allowed set
        for index in episode.allowed_token_ids:
            assert episode.action_mask[index] == 1


def test_grpo_with_constrained_decoding_starts_at_ratio_one(csr_sft_model, csr_tokenizer, tmp_path,
                                                            parity_reward) -> None:
    import copy

    from worldgym.agents.grpo import GRPOConfig, GRPOTrainer

    config = GRPOConfig(env_id="CSRPhone-v1", env_kwargs={"difficulty": 1}, max_turns=6,
                        max_new_tokens=64, decoding="constrained", finetune="full", prompts_per_step=2,
                        group_size=4, minibatch_size=8, num_steps=1, eval_every=0, progress=False,
                        output_dir=str(tmp_path), learning_rate=1e-9, temperature=0.5)
    # a reward that differs within groups: the update runs (with no reward difference it is skipped)
    trainer = GRPOTrainer(config, model=copy.deepcopy(csr_sft_model), tokenizer=csr_tokenizer, reward_fn=parity_reward)
    metrics = trainer.train_step()
    assert metrics["loss/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["loss/clip_fraction"] == 0.0
