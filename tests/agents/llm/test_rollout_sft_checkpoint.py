"""Rollout collector (exact ids, masks, groups, multi-turn tool envs), SFT warm start and checkpoint files."""

import re
from collections.abc import Sequence

import gymnasium as gym
import pytest
import torch

from worldgym.agents.llm.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from worldgym.agents.llm.engines import Generation, HFEngine, SamplingParams
from worldgym.agents.llm.rollout import RolloutCollector, collate_episodes, make_vector_env
from worldgym.agents.llm.sft import SFTConfig, collect_expert_chats, sft_train
from worldgym.envs.math_qa import MathQAEnv
from worldgym.envs.tool_env import ToolEnv, ToolResult
from worldgym.spaces import Tool, ToolCall
from worldgym.wrappers import ParseToolCall, format_tool_call


class CountEnv(ToolEnv):
    """Call ``add(a, b)`` until the running total reaches 3 (then reward 1)."""

    def __init__(self):
        schema = {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        }
        super().__init__([Tool("add", "Add two integers.", schema)], max_turns=4)
        self.total = 0

    def _reset_task(self, options):
        self.total = 0
        return "Reach a total of 3.", {}

    def _call_tool(self, call):
        self.total += call.arguments["a"] + call.arguments["b"]
        return ToolResult(
            f"total={self.total}",
            reward=float(self.total == 3),
            terminated=self.total >= 3,
            success=self.total == 3,
        )


class ScriptedEngine:
    """Replies with fixed texts (tokenized) in turn order; logprob -1 per token; the last reply is cut
    (length)."""

    def __init__(self, tokenizer, replies: Sequence[str], cut_last: bool = False):
        self.tokenizer, self.replies, self.cut_last, self.turn = tokenizer, list(replies), cut_last, 0
        self.prompts: list[list[int]] = []

    def sync_weights(self):
        pass

    def generate(self, prompts, params):
        text = self.replies[min(self.turn, len(self.replies) - 1)]
        cut = self.cut_last and self.turn == len(self.replies) - 1
        self.turn += 1
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = ids if cut else ids + [self.tokenizer.eos_token_id]
        self.prompts.extend(list(p) for p in prompts)
        return [[Generation(ids, [-1.0] * len(ids), "length" if cut else "stop")] for _ in prompts]


def test_multi_turn_tool_episode_keeps_exact_ids_and_masks(tokenizer):
    call = format_tool_call(ToolCall("add", {"a": 1, "b": 1}))
    engine = ScriptedEngine(tokenizer, [call, "oops, no call", call.replace('"b": 1', '"b": 0')])
    collector = RolloutCollector(engine, tokenizer, lambda: ParseToolCall(CountEnv()), max_turns=5)
    (episode,) = collector.collect([0], 1, SamplingParams())
    assert next(t.observation for t in episode.turns) == "total=2"
    assert episode.turns[1].info["response_type"] == "invalid_call"  # a reply without a call is not a crash
    assert (episode.reward, episode.terminated, episode.success, len(episode.turns)) == (1.0, True, True, 3)
    model_ids = [t for t, m in zip(episode.token_ids, episode.action_mask) if m]
    expected = [
        i
        for text in engine.replies
        for i in tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ]
    assert model_ids == expected
    assert [lp for lp, m in zip(episode.old_logprobs, episode.action_mask) if m] == [-1.0] * len(expected)
    for turn, text in zip(episode.turns, engine.replies):  # each turn's token spans index its own tokens
        start, end = turn.action_span
        assert episode.token_ids[start:end] == tokenizer(text, add_special_tokens=False)["input_ids"] + [
            tokenizer.eos_token_id
        ]
        start, end = turn.observation_span
        if turn is not episode.turns[-1]:
            assert turn.observation in tokenizer.decode(episode.token_ids[start:end])
    assert episode.turns[-1].observation_span[0] == episode.turns[-1].observation_span[1]  # the last: empty
    # Every turn's prompt is exactly the previous tokens: the model's own ids are never re-tokenized.
    assert episode.token_ids[: len(engine.prompts[2])] == engine.prompts[2]
    text = tokenizer.decode(episode.token_ids)
    assert '"name": "add"' in text.split("<|im_start|>user")[0]  # tools shown in the system turn
    assert text.count("<tool_response>") == 2


def test_cut_reply_gets_a_context_eos_and_truncation(tokenizer):
    call = format_tool_call(ToolCall("add", {"a": 0, "b": 0}))
    collector = RolloutCollector(
        ScriptedEngine(tokenizer, [call, call], cut_last=True),
        tokenizer,
        lambda: ParseToolCall(CountEnv()),
        max_turns=2,
    )
    (episode,) = collector.collect([0], 1, SamplingParams())
    assert episode.truncated and not episode.terminated and episode.reward == 0.0
    assert episode.token_ids[-1] == tokenizer.eos_token_id and episode.action_mask[-1] == 0


def test_groups_share_the_task_and_collate(model, tokenizer):
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
    collector = RolloutCollector(engine, tokenizer, lambda: MathQAEnv(num_problems=20))
    episodes = collector.collect([11, 12], 3, SamplingParams(max_new_tokens=6, seed=1), first_group_id=5)
    assert [e.group_id for e in episodes] == [5, 5, 5, 6, 6, 6]
    prompts = [tuple(e.token_ids[: e.prompt_length]) for e in episodes]
    assert prompts[0] == prompts[1] == prompts[2] != prompts[3]
    batch = collate_episodes(episodes, tokenizer.pad_token_id)
    longest = max(len(e.token_ids) for e in episodes)
    assert batch["input_ids"].shape == (6, longest) and batch["action_mask"].shape == (6, longest - 1)
    assert batch["action_mask"].sum().item() == sum(e.num_model_tokens for e in episodes)
    assert torch.equal(batch["group_ids"], torch.tensor([5, 5, 5, 6, 6, 6]))


def _math_expert(env, observation, info):
    return env.unwrapped.problems[info["index"]].solution


def test_sft_learns_the_expert_answers(model, tokenizer):
    chats = collect_expert_chats(lambda: MathQAEnv(num_problems=8), _math_expert, range(8))
    assert all(chat.reward == 1.0 for chat in chats) and chats[0].messages[-1]["role"] == "assistant"
    losses = sft_train(
        model, tokenizer, chats, SFTConfig(epochs=15, batch_size=8, learning_rate=3e-3, progress=False)
    )
    assert losses[-1] < 0.5 * losses[0]
    with pytest.raises(ValueError, match="epochs=0 is invalid: use an integer >= 1"):
        SFTConfig(epochs=0)
    with pytest.raises(ValueError, match="no assistant token within the first max_length=8"):
        sft_train(model, tokenizer, chats, SFTConfig(max_length=8, progress=False))


def test_checkpoint_round_trip_and_corruption(tmp_path):
    param = torch.nn.Parameter(torch.randn(3))
    optimizer = torch.optim.AdamW([param], lr=0.1)
    param.grad = torch.ones(3)
    optimizer.step()
    path = save_checkpoint(tmp_path / "ckpt", {"w": param}, {"step": 4, "note": "hi"}, optimizer)
    weights, state, optimizer_state = load_checkpoint(path)
    assert torch.equal(weights["w"], param.detach()) and state == {"step": 4, "note": "hi"}
    fresh = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3))], lr=0.1)
    fresh.load_state_dict(optimizer_state)
    assert torch.equal(
        fresh.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"]
    )
    data = (path / "weights.safetensors").read_bytes()
    (path / "weights.safetensors").write_bytes(data[:-4])
    with pytest.raises(CheckpointError, match="weights.safetensors is corrupt"):
        load_checkpoint(path)
    (path / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        load_checkpoint(path)


class BrokenEnv(MathQAEnv):
    """Answers a step with ``None`` instead of text."""

    def step(self, action):
        _, _, terminated, truncated, info = super().step(action)
        return None, 1.0, terminated, truncated, info


class BrokenResetEnv(MathQAEnv):
    """Starts an episode with the problem's token count instead of its text."""

    def reset(self, *, seed=None, options=None):
        observation, info = super().reset(seed=seed, options=options)
        return len(observation), info


@pytest.mark.parametrize(("env_class", "call", "kind"), [(BrokenEnv, "step", "NoneType"),
                                                         (BrokenResetEnv, "reset", "int")])  # fmt: skip
def test_a_non_text_observation_is_an_env_bug_named_with_the_env(tokenizer, env_class, call, kind):
    collector = RolloutCollector(
        ScriptedEngine(tokenizer, ["#### 1"]), tokenizer, lambda: env_class(num_problems=5)
    )
    message = f"{env_class.__name__} returned a {kind} observation from {call}()"
    with pytest.raises(TypeError, match=re.escape(message)):
        collector.collect([0], 1, SamplingParams())


def test_a_non_text_observation_from_a_vector_env_names_the_id_and_sub_env(tokenizer):
    gym.register("BrokenMathQA-v0", entry_point=BrokenEnv, kwargs={"num_problems": 5})
    try:
        vector_env = make_vector_env(lambda: gym.make("BrokenMathQA-v0", disable_env_checker=True), 2)
        collector = RolloutCollector(ScriptedEngine(tokenizer, ["#### 1"]), tokenizer, vector_env=vector_env)
        message = "BrokenMathQA-v0 (BrokenEnv), sub-env 0 of a SyncVectorEnv, returned a NoneType observation"
        with pytest.raises(TypeError, match=re.escape(message)):
            collector.collect([0, 1], 1, SamplingParams())
        vector_env.close()
    finally:
        gym.registry.pop("BrokenMathQA-v0")


def test_length_bucketed_batches_cover_every_chat_once():
    from worldgym.agents.llm.sft import _length_bucketed_batches

    lengths = [int(x) for x in torch.randint(10, 3000, (100,), generator=torch.Generator().manual_seed(0))]
    batches = _length_bucketed_batches(lengths, 4, torch.Generator().manual_seed(1))
    assert sorted(i for batch in batches for i in batch) == list(range(100))
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread < 0.5 * (max(lengths) - min(lengths)) / 2


def test_sft_loss_runs_the_lm_head_on_assistant_tokens_only_and_equals_the_full_cross_entropy(model, tokenizer):
    from worldgym.agents.llm.sft import _pad, assistant_token_loss

    examples = [([5, 6, 7, 8, 9, 10], [0, 0, 1, 1, 0, 1]), ([5, 6, 7], [0, 1, 1])]
    input_ids, attention, labels = _pad(examples, tokenizer.pad_token_id)
    full = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
    torch.testing.assert_close(assistant_token_loss(model, input_ids, attention, labels), full)


def test_sft_with_activation_checkpointing_takes_the_same_steps_and_switches_it_off(tokenizer):
    from worldgym.agents.llm import build_tiny_model

    chats = collect_expert_chats(lambda: MathQAEnv(num_problems=4), _math_expert, range(4))
    runs = []
    for checkpointing in (False, True):
        model = build_tiny_model(tokenizer, seed=1)
        config = SFTConfig(epochs=2, batch_size=2, learning_rate=3e-3, progress=False,
                           activation_checkpointing=checkpointing)
        runs.append(sft_train(model, tokenizer, chats, config))
        assert not model.is_gradient_checkpointing
    assert runs[0] == pytest.approx(runs[1], rel=1e-5)


def _chats_about_two_documents(count: int) -> list:
    """MathQA expert chats behind one of two long system messages (two patients' documents, say)."""
    chats = collect_expert_chats(lambda: MathQAEnv(num_problems=count), _math_expert, range(count))
    documents = [" ".join(f"{i + 50 * k} + {i}" for i in range(30 + 5 * k)) for k in range(2)]
    for index, chat in enumerate(chats):
        chat.messages.insert(0, {"role": "system", "content": documents[index % 2]})
    return chats


def test_sft_batches_chats_that_share_an_opening_and_runs_it_once(model, tokenizer):
    """shared_prefix_tokens: every batch comes from one family of chats with the same opening, every chat is
    trained once per epoch, and the batch's loss and gradients equal the plain pass's while the decoder reads
    fewer tokens."""
    from worldgym.agents.llm.sft import _encode, _family_batches, _pad, _prefix_families, assistant_token_loss

    chats = _chats_about_two_documents(10)
    examples = [_encode(tokenizer, chat, 4096) for chat in chats]
    families = _prefix_families([ids for ids, _ in examples], 64)
    assert sorted(map(sorted, families)) == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    batches = _family_batches(families, 3, torch.Generator().manual_seed(0))
    assert sorted(i for batch in batches for i in batch) == list(range(10)) and len(batches) == 4
    assert all(len({i % 2 for i in batch}) == 1 for batch in batches)

    read: list[int] = []
    model.get_input_embeddings().register_forward_hook(lambda module, args, out: read.append(args[0].numel()))
    input_ids, attention, labels = _pad([examples[i] for i in families[0]], tokenizer.pad_token_id)
    results = []
    for group_ids in (None, torch.zeros(len(families[0]), dtype=torch.long)):
        model.zero_grad(set_to_none=True)
        loss = assistant_token_loss(model, input_ids, attention, labels, group_ids)
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (plain, plain_grads), (shared, shared_grads) = results
    torch.testing.assert_close(shared, plain, rtol=1e-5, atol=1e-6)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    assert read[1] + read[2] < 0.6 * read[0]  # prefix pass + continuations vs every row in full


def test_sft_with_a_shared_opening_learns_and_refuses_settings_that_cannot_share(model, tokenizer):
    chats = _chats_about_two_documents(8)
    config = SFTConfig(epochs=10, batch_size=3, learning_rate=3e-3, progress=False, shared_prefix_tokens=64)
    losses = sft_train(model, tokenizer, chats, config)
    assert len(losses) == 10 * 4 and losses[-1] < 0.5 * losses[0]  # families of 4: batches of 3 and 1
    for conflict in ({"bucket_by_length": True}, {"activation_checkpointing": True}):
        with pytest.raises(ValueError, match="shared_prefix_tokens=64 is invalid: batches come from families"):
            SFTConfig(shared_prefix_tokens=64, **conflict)
