"""The world model's warm-up: recorded chats' phone calls laid out as a rollout's, trained on the world model's
adapter alone before the first step."""

import pytest
import torch

from worldgym.agents.dual_lora import DualLoRATrainer
from worldgym.agents.dual_lora.warmup import chat_phone_calls
from worldgym.agents.dual_lora.world_model import pack_calls, wm_token_ids
from worldgym.agents.grpo.trainer import GRPOTrainer
from worldgym.agents.llm.checkpoint import load_checkpoint
from worldgym.agents.llm.rollout import encode_chat
from worldgym.agents.llm.sft import Chat
from worldgym.agents.llm.warm_start import demonstrations
from worldgym.envs.csr_phone import classify_reply

from .conftest import PHONE_CALL, SEARCH
from .test_trainer import _adapter_weights, _config, _trainer


@pytest.fixture(scope="module")
def expert_chats():
    return demonstrations("CSRPhone-v1", {"difficulty": 1, "split": "train"}, range(3), max_turns=8)


def test_chat_calls_are_the_rendered_chat_up_to_the_calls_end_then_markers_then_the_reply(expert_chats,
                                                                                             csr_tokenizer):
    predict, start, end = wm_token_ids(csr_tokenizer)
    eos = csr_tokenizer.eos_token_id
    for chat, examples in zip(expert_chats, chat_phone_calls(expert_chats, csr_tokenizer)):
        calls = [i for i, m in enumerate(chat.messages) if m["role"] == "assistant" and "make_phone_call" in
                 m["content"]]
        assert len(examples) == len(calls) > 0
        full = encode_chat(csr_tokenizer, chat.messages, chat.tools, add_generation_prompt=False)
        for index, example in zip(calls, examples):
            context = example.token_ids[: example.target_start - 2]
            assert list(context) == full[: len(context)] and context[-1] == eos  # the call's end-of-turn
            opening = encode_chat(csr_tokenizer, chat.messages[:index], chat.tools)  # as a rollout's prompt
            assert list(context[: len(opening)]) == opening
            assert example.token_ids[example.target_start - 2 : example.target_start] == (predict, start)
            reply = (chat.messages[index + 1]["content"] if index + 1 < len(chat.messages)
                     else chat.final_observation)
            assert csr_tokenizer.decode(example.token_ids[example.target_start : -1]) == reply
            assert example.token_ids[-1] == end and example.response_type == classify_reply(reply)
        assert len(pack_calls(examples)) == 1  # one chat's calls share their context: one forward
    finished = [chat for chat in expert_chats if chat.reward > 0]
    assert finished and all(classify_reply(chat.final_observation) == "task_complete" for chat in finished)


def test_a_call_without_a_reply_and_other_tools_are_left_out(csr_tokenizer):
    chat = Chat([{"role": "user", "content": "Call Acme."}, {"role": "assistant", "content": SEARCH},
                 {"role": "tool", "content": "Acme: 1-800-555-0100"}, {"role": "assistant", "content": PHONE_CALL},
                 {"role": "tool", "content": "Hello, Acme here."}, {"role": "assistant", "content": PHONE_CALL}])
    assert len(chat_phone_calls([chat], csr_tokenizer)[0]) == 1  # the last call's answer was not recorded
    chat.final_observation = "Goodbye."
    assert len(chat_phone_calls([chat], csr_tokenizer, max_context_tokens=4)[0]) == 2
    assert chat_phone_calls([chat], csr_tokenizer, max_context_tokens=4)[0][1].target_start == 6


def test_the_warm_up_trains_the_world_model_alone_before_the_first_step(tmp_path, csr_tokenizer, expert_chats,
                                                                         capsys):
    trainer = _trainer(tmp_path, csr_tokenizer, wm_warmup_updates=3, wm_warmup_chats_per_update=2,
                       wm_learning_rate=5e-3, progress=True)
    trainer.world_model_chats = expert_chats
    policy = _adapter_weights(trainer, "policy")
    world_model = _adapter_weights(trainer, "world_model")
    warmup = trainer.warm_up_world_model()
    shown = capsys.readouterr().err  # the progress bar, at its last update
    assert "world-model warm-up" in shown and "3/3" in shown
    assert warmup["wm_warmup/calls"] == sum(map(len, chat_phone_calls(expert_chats, csr_tokenizer)))
    assert warmup["wm_warmup/loss_last"] < warmup["wm_warmup/loss_first"]
    assert all(torch.equal(p, policy[n]) for n, p in _adapter_weights(trainer, "policy").items())
    assert any(not torch.equal(p, world_model[n]) for n, p in _adapter_weights(trainer, "world_model").items())

    fresh = _trainer(tmp_path / "fresh", csr_tokenizer, wm_warmup_updates=1, wm_warmup_chats_per_update=1)
    first = fresh.train_step()  # the env's expert plays the warm-up's one chat
    assert first["wm_warmup/calls"] > 0 and "time/wm_warmup_s" in first
    assert "wm_warmup/calls" not in fresh.train_step()  # once, before the first step


def test_the_warm_up_needs_a_world_model_adapter_of_its_own(tmp_path):
    with pytest.raises(ValueError, match="wm_warmup_updates"):
        _config(tmp_path, transfer="shared", wm_warmup_updates=2)
    with pytest.raises(ValueError, match="wm_warmup_chats_per_update"):
        _config(tmp_path, wm_warmup_updates=2, wm_warmup_chats_per_update=0)


def test_a_run_killed_after_the_warm_up_resumes_from_checkpoint_0_without_warming_up_again(
        tmp_path, csr_tokenizer, monkeypatch):
    settings = {"wm_warmup_updates": 2, "wm_warmup_chats_per_update": 1, "num_steps": 1, "checkpoint_every": 1,
                "eval_every": 1, "metric_for_best_model": "eval/success_rate"}
    straight = _trainer(tmp_path / "straight", csr_tokenizer, **settings)
    straight.train()

    killed = _trainer(tmp_path / "killed", csr_tokenizer, **settings)
    untrained_world_model = _adapter_weights(killed, "world_model")
    with monkeypatch.context() as patch:  # killed once the warm-up is done, before the first step's rollouts
        patch.setattr(GRPOTrainer, "train_step", lambda self: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            killed.train()
    resumed = _trainer(tmp_path / "killed", csr_tokenizer, **settings)
    with monkeypatch.context() as patch:
        patch.setattr(DualLoRATrainer, "warm_up_world_model", lambda self: pytest.fail("warmed up again"))
        assert resumed.resume_latest().name == "checkpoint-0" and resumed.step == 0
        resumed.train()

    assert [row["step"] for row in resumed.history] == [0, 1]
    warmup = {name: value for name, value in straight.history[1].items() if name.startswith("wm_warmup/")}
    assert warmup and {name: resumed.history[1].get(name) for name in warmup} == warmup
    for name, tensor in straight.trainable.items():
        torch.testing.assert_close(resumed.trainable[name], tensor, rtol=0, atol=0)
    best, _, _ = load_checkpoint(tmp_path / "killed" / "run" / "checkpoint-best")  # step 0's: before the warm-up
    assert all(torch.equal(best[name], tensor) for name, tensor in untrained_world_model.items())
