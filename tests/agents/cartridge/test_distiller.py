"""The cartridge distiller: losses, teacher/student alignment, the on-policy / offline / hybrid loop, exact resume."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.base import AgentTrainer
from worldgym.agents.cartridge import CartridgeDistillConfig, CartridgeDistillTrainer, distillation_loss
from worldgym.agents.llm import build_tiny_model
from worldgym.errors import CheckpointError

from .conftest import PANEL, make_trainer


def _trainer(tmp_path, tokenizer, **overrides) -> CartridgeDistillTrainer:
    return make_trainer(tmp_path, tokenizer, **overrides)


def test_full_kl_is_the_forward_kl_and_topk_and_sampled_reverse_estimate_it():
    torch.manual_seed(0)
    teacher, student = torch.randn(5, 11), torch.randn(5, 11, requires_grad=True)
    loss, figures = distillation_loss(teacher, student)
    p, log_q = teacher.softmax(-1), student.log_softmax(-1)
    expected = (p * (p.log() - log_q)).sum(-1).mean()
    assert torch.allclose(loss, expected, atol=1e-6) and figures["kl/full"] == pytest.approx(expected.item())
    top, _ = distillation_loss(teacher, student, "topk", top_k=11)  # every token: the full sum
    assert torch.allclose(top, expected, atol=1e-6)
    tokens = torch.tensor([0, 3, 5, 1, 10])
    reverse, figures = distillation_loss(teacher, student, "sampled_reverse", tokens=tokens)
    reverse.backward()
    assert student.grad is not None and figures["kl/full"] == pytest.approx(expected.item())
    with pytest.raises(ValueError, match="same completion tokens"):
        distillation_loss(teacher, student[:3])
    with pytest.raises(ValueError, match="sampled tokens"):
        distillation_loss(teacher, student, "sampled_reverse")


def test_teacher_and_student_rows_score_each_answer_token_as_an_unpadded_forward(tmp_path, tokenizer):
    """Prompts of very different lengths (documents vs none) in one right-padded batch: every answer token's
    logprob equals the one from a single-sequence forward without padding."""
    from worldgym.agents.cartridge.trainer import _behind

    trainer = _trainer(tmp_path, tokenizer)
    episodes = trainer._student_answers([0, 1])
    rows = [episodes[0], _behind(episodes[1], trainer._prompt(episodes[1].env_seed, "full"))]
    assert len(rows[1].token_ids) > 3 * len(rows[0].token_ids)  # the teacher's row holds the documents
    batch, answers = trainer._score(rows, None)
    assert answers.tolist() == [t for e in rows for t, m in zip(e.token_ids[1:], e.action_mask[1:]) if m]
    for row, episode in enumerate(rows):
        ids, mask = episode.token_ids, episode.action_mask
        with torch.no_grad():
            logits = trainer.model(torch.tensor([ids])).logits[0, :-1].float()
        single = logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
        answer = torch.tensor(mask[1:], dtype=torch.bool)
        assert answer.sum() > 0 and len(set(torch.tensor(ids[1:])[answer].tolist())) > 1
        torch.testing.assert_close(batch.logprobs[row, :len(ids) - 1][answer], single[answer], atol=1e-4, rtol=0)


def test_the_teacher_scores_behind_the_documents_kv_as_with_the_documents_in_its_prompt(tmp_path, tokenizer):
    """The documents' KV is computed once; scoring the question and answer behind it gives every answer token
    the logprob (and logits) of scoring the whole teacher prompt."""
    from worldgym.agents.cartridge.trainer import _behind

    trainer = _trainer(tmp_path, tokenizer)
    prefix = trainer.documents_prefix_ids
    document_tokens = len(tokenizer(trainer.documents, add_special_tokens=False)["input_ids"])
    assert prefix and len(prefix) >= document_tokens  # the template and the documents: the bulk of the prompt
    assert trainer.documents_prefix.num_tokens == trainer.documents_prefix.num_frozen == len(prefix)
    episodes = [_behind(e, trainer._prompt(e.env_seed, "full")) for e in trainer._student_answers([0, 1, 2])]
    behind_prefix = trainer._score_teacher(episodes)
    whole, _ = trainer._score(episodes, None)
    torch.testing.assert_close(behind_prefix.logits, whole.logits, atol=1e-4, rtol=1e-4)


def test_evaluation_measures_the_frozen_models_figures_once(tmp_path, tokenizer, monkeypatch):
    trainer = _trainer(tmp_path, tokenizer)
    first = trainer.evaluate()
    calls = []
    greedy = trainer._greedy_answers
    monkeypatch.setattr(trainer, "_greedy_answers", lambda engine, *a, **k: calls.append(engine) or greedy(engine, *a, **k))
    trainer.train_step()
    second = trainer.evaluate()
    assert calls == [trainer.student_engine]  # only the cartridge's answers are generated again
    for key in ("eval/accuracy_none", "eval/accuracy_teacher", "eval/kl_none"):
        assert second[key] == first[key]
    assert second["eval/kl_cartridge"] != first["eval/kl_cartridge"]


@pytest.mark.parametrize("mode", ["on_policy", "offline", "hybrid"])
def test_distillation_trains_only_the_cartridge_and_lowers_the_held_out_kl(tmp_path, tokenizer, mode):
    trainer = _trainer(tmp_path, tokenizer, mode=mode, offline_steps=1, num_steps=3)
    assert isinstance(trainer, AgentTrainer)
    model_before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    frozen = trainer.cartridge.keys[:, :, :1].detach().clone()
    history = trainer.train()
    assert [row["step"] for row in history] == [0, 1, 2, 3]
    assert [row["rollout/offline"] for row in history[1:]] == {
        "on_policy": [0.0] * 3, "offline": [1.0] * 3, "hybrid": [1.0, 0.0, 0.0]}[mode]
    first, last = history[0], history[-1]
    assert last["eval/kl_cartridge"] < first["eval/kl_cartridge"]  # held-out questions, teacher's answers
    assert first["eval/memory_ratio"] > 10 and first["eval/questions"] >= 1
    assert all(torch.equal(v, trainer.model.state_dict()[k]) for k, v in model_before.items())
    assert torch.equal(trainer.cartridge.keys[:, :, :1], frozen)  # the attention sink stays
    assert (tmp_path / "run" / "cartridge" / "cartridge.json").is_file()


def test_a_resumed_run_continues_exactly(tmp_path, tokenizer):
    straight = _trainer(tmp_path / "a", tokenizer, num_steps=3)
    straight.train()
    first = _trainer(tmp_path / "b", tokenizer, num_steps=2, checkpoint_every=1)
    first.train()
    resumed = _trainer(tmp_path / "b", tokenizer, num_steps=3)
    assert resumed.resume_latest() is not None and resumed.step == 2
    resumed.train()
    for name, tensor in straight.cartridge.state_dict().items():
        torch.testing.assert_close(resumed.cartridge.state_dict()[name], tensor, atol=0, rtol=0)
    assert [row["step"] for row in resumed.history] == [0, 1, 2, 3]
    other = _trainer(tmp_path / "c", tokenizer, num_tokens=8)
    with pytest.raises(CheckpointError, match="16 tokens"):
        other.load(tmp_path / "b" / "run" / "checkpoint-last")


def test_a_pretrained_teacher_is_warmed_up_through_a_merged_lora_when_asked(tmp_path, tokenizer):
    """A pretrained model (here a tiny one saved as a checkpoint) learns the task through a LoRA adapter, which is
    merged in: the distiller's frozen model is a plain model whose weights moved."""
    from peft import PeftModel

    from worldgym.agents.llm import save_model_and_tokenizer

    folder = tmp_path / "pretrained"
    save_model_and_tokenizer(build_tiny_model(tokenizer, seed=0), tokenizer, folder)
    config = CartridgeDistillConfig(model=str(folder), env_kwargs=PANEL, num_tokens=16, teacher_warmup=True,
                                    warmup_episodes=4, warmup_epochs=1, warm_start_dir=str(tmp_path / "warm"),
                                    output_dir=str(tmp_path / "run"), progress=False)
    trainer = CartridgeDistillTrainer(config)
    assert trainer.config.warms_up_teacher and not isinstance(trainer.model, PeftModel)
    before = build_tiny_model(tokenizer, seed=0).state_dict()
    after = trainer.model.state_dict()
    assert any(not torch.equal(after[name], tensor) for name, tensor in before.items() if name in after)
    assert len(list((tmp_path / "warm").iterdir())) == 1  # cached
    assert not CartridgeDistillConfig(model=str(folder)).warms_up_teacher  # a pretrained model: only when asked
    with pytest.raises(ValueError, match="needs its warm-up"):
        CartridgeDistillConfig(model="tiny", teacher_warmup=False)


def test_a_pretrained_teacher_warms_up_on_another_panel_in_batches_that_read_the_documents_once(tmp_path,
                                                                                             tokenizer):
    """warmup_env_kwargs: the warm-up's questions come from another panel's training patients, batched by
    patient (the documents run once per batch); a warm-up panel that trains on the cartridge's patient is
    refused before any training."""
    from worldgym.agents.cartridge.trainer import teacher_warm_start_config
    from worldgym.agents.llm import save_model_and_tokenizer
    from worldgym.errors import CartridgeError

    folder = tmp_path / "pretrained"
    save_model_and_tokenizer(build_tiny_model(tokenizer, seed=0), tokenizer, folder)
    settings = dict(model=str(folder), env_kwargs=PANEL, num_tokens=16, teacher_warmup=True, warmup_episodes=6,
                    warmup_epochs=1, warmup_batch_size=3, warm_start_dir=str(tmp_path / "warm"),
                    output_dir=str(tmp_path / "run"), progress=False)
    other_panel = {"num_patients": 5, "panel_seed": 1, "task": 1}
    config = CartridgeDistillConfig(**settings, warmup_env_kwargs=other_panel)
    warm = teacher_warm_start_config(config)
    assert warm.env_kwargs == {**other_panel, "split_by": "patient"} and warm.batch_size == 3
    assert warm.shared_prefix_tokens > 0
    assert teacher_warm_start_config(dataclasses.replace(config, warmup_batch_size=None)).shared_prefix_tokens == 0
    trainer = CartridgeDistillTrainer(config)
    summary = next((tmp_path / "warm").iterdir()) / "warm_start.json"
    assert summary.is_file() and trainer.patient_id == "patient_03"
    bigger_same_panel = {"num_patients": 20, "task": 1}  # patient_01 falls in its training split
    with pytest.raises(CartridgeError, match="trains the teacher on patient patient_01's documents"):
        CartridgeDistillTrainer(dataclasses.replace(config, warmup_env_kwargs=bigger_same_panel,
                                                    patient_id="patient_01"))


def test_a_teacher_asked_for_text_answers_warms_up_on_the_options_text():
    """env_kwargs["answer_format"] = "text" reaches the warm-up, on another panel too, and its expert chats
    answer with the right option's text."""
    from worldgym.agents.cartridge.trainer import teacher_warm_start_config
    from worldgym.agents.llm.warm_start import expert_chats

    config = CartridgeDistillConfig(model="tiny", env_kwargs={**PANEL, "answer_format": "text"}, warmup_episodes=3,
                                    warmup_env_kwargs={"num_patients": 5, "panel_seed": 1})
    warm = teacher_warm_start_config(config)
    assert warm.env_kwargs["answer_format"] == "text" and warm.env_kwargs["panel_seed"] == 1
    for chat in expert_chats(warm):
        prompt, answer = chat.messages[-2]["content"], chat.messages[-1]["content"]
        assert prompt.endswith("copied exactly, inside answer tags.")
        text = answer.removeprefix("<answer>").removesuffix("</answer>")
        assert f": {text}\n" in prompt and len(text) > 1  # one option's text, not a letter
    letters = teacher_warm_start_config(dataclasses.replace(config, env_kwargs=PANEL))
    assert "answer_format" not in letters.env_kwargs  # the letter warm-up keeps its settings (and cache key)


def test_config_rejects_bad_settings():
    with pytest.raises(ValueError, match=r"mode='both' is invalid"):
        CartridgeDistillConfig(mode="both")
    with pytest.raises(ValueError, match=r"num_frozen_tokens=9 is invalid"):
        CartridgeDistillConfig(num_tokens=8, num_frozen_tokens=9)
    with pytest.raises(ValueError, match="the distiller sets them"):
        CartridgeDistillConfig(env_kwargs={"documents": "full"})
    with pytest.raises(ValueError, match=r"log_episodes='some' is invalid"):
        CartridgeDistillConfig(log_episodes="some")
    assert dataclasses.asdict(CartridgeDistillConfig())["kl"] == "full"


def test_documents_longer_than_the_prompt_limit_are_refused_with_their_size(tmp_path, tokenizer):
    from worldgym.errors import CartridgeError

    with pytest.raises(CartridgeError, match=r"patient \S+'s documents are \d+ tokens .* max_prompt_tokens=64"):
        _trainer(tmp_path, tokenizer, max_prompt_tokens=64)
