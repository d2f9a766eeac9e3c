"""One loader for every trainer: tiny models built on an env's text, pretrained ones with the chat setup; and one
seeded LoRA set-up."""

import re
from functools import partial

import pytest
import torch
from peft import PeftModel

from worldgym.agents.dual_lora import WM_SPECIAL_TOKENS, DualLoRAConfig, DualLoRATrainer
from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.llm.adapters import seeded_lora
from worldgym.agents.llm.envs import make_text_env
from worldgym.agents.llm.loading import build_or_load_chat_model, tiny_chat_model
from worldgym.agents.llm.models import save_model_and_tokenizer
from worldgym.agents.llm.pretrained import named_model_available
from worldgym.agents.llm.tokenizer import TOOL_SPECIAL_TOKENS, env_text_corpus

CORPUS = ["Search the company, then call 1-800-555-0100.", "Tom has 3 pens and 4 cards."] * 30


def _never():
    raise AssertionError("a pretrained model needs no corpus")


def _settings(tmp_path, **overrides):
    return {"num_steps": 1, "prompts_per_step": 1, "group_size": 2, "max_new_tokens": 4, "eval_every": 0,
            "progress": False, "output_dir": str(tmp_path / "run"), **overrides}


def _lora_tensors(model):
    return {name: p.detach().clone() for name, p in model.named_parameters() if "lora_" in name}


def test_the_trainers_build_their_tiny_model_with_the_one_loader(tmp_path):
    trainer = DualLoRATrainer(DualLoRAConfig(**_settings(tmp_path), env_id="CSRPhone-v1", max_turns=2,
                                             env_kwargs={"difficulty": 1}, seed=3))
    loaded = build_or_load_chat_model("tiny", partial(env_text_corpus, partial(make_text_env, "CSRPhone-v1",
                                      {"difficulty": 1})), seed=3, extra_special_tokens=WM_SPECIAL_TOKENS)
    assert trainer.tokenizer.get_vocab() == loaded.tokenizer.get_vocab()
    base = {name.replace(".base_layer", ""): tensor
            for name, tensor in trainer.policy.get_base_model().state_dict().items() if "lora_" not in name}
    expected = loaded.model.state_dict()
    assert base.keys() == expected.keys() and all(torch.equal(base[name], expected[name]) for name in base)


def test_grpo_loads_a_pretrained_folder_as_a_chat_model(tmp_path):
    tiny = tiny_chat_model(CORPUS, vocab_size=300, seed=1)
    folder = save_model_and_tokenizer(tiny.model, tiny.tokenizer, tmp_path / "base")
    loaded = build_or_load_chat_model(str(folder), _never, extra_special_tokens=("<extra>",))
    assert all(len(loaded.tokenizer(token, add_special_tokens=False)["input_ids"]) == 1
               for token in (*TOOL_SPECIAL_TOKENS, "<extra>"))
    trainer = GRPOTrainer(GRPOConfig(**_settings(tmp_path), model=str(folder)))
    vocabulary = {token: index for token, index in loaded.tokenizer.get_vocab().items() if token != "<extra>"}
    assert isinstance(trainer.policy, PeftModel) and trainer.tokenizer.get_vocab() == vocabulary


def test_a_tokenizer_alone_builds_a_tiny_model_but_is_refused_for_a_pretrained_one(tmp_path):
    tiny = tiny_chat_model(CORPUS, vocab_size=300)
    trainer = GRPOTrainer(GRPOConfig(**_settings(tmp_path)), tokenizer=tiny.tokenizer)
    assert trainer.tokenizer is tiny.tokenizer
    with pytest.raises(ValueError, match="got a tokenizer but no model for model='smollm2-135m'"):
        GRPOTrainer(GRPOConfig(**_settings(tmp_path), model="smollm2-135m"), tokenizer=tiny.tokenizer)


@pytest.mark.skipif(not named_model_available("smollm2-135m"), reason="SmolLM2 not installed (make smollm2)")
def test_grpo_loads_a_named_model_where_dual_lora_does(tmp_path):
    trainer = GRPOTrainer(GRPOConfig(**_settings(tmp_path), model="smollm2-135m", env_id="CSRPhone-v1",
                                     env_kwargs={"difficulty": 1}, max_turns=2))
    assert isinstance(trainer.policy, PeftModel)
    assert len(trainer.tokenizer("<tool_call>", add_special_tokens=False)["input_ids"]) == 1


def test_seeded_lora_draws_the_same_adapters_from_the_same_seed_and_leaves_the_global_rng():
    model = tiny_chat_model(CORPUS, vocab_size=300).model
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    first = _lora_tensors(seeded_lora(model, 5, rank=2, alpha=4, target_modules=["q_proj"],
                                      adapter_names=("policy", "world_model")))
    assert torch.equal(torch.rand(1), expected_next)
    again = _lora_tensors(seeded_lora(tiny_chat_model(CORPUS, vocab_size=300).model, 5, rank=2, alpha=4,
                                      target_modules=["q_proj"], adapter_names=("policy", "world_model")))
    other = _lora_tensors(seeded_lora(tiny_chat_model(CORPUS, vocab_size=300).model, 6, rank=2, alpha=4,
                                      target_modules=["q_proj"], adapter_names=("policy", "world_model")))
    assert any(".world_model." in name for name in first)
    assert first.keys() == again.keys() and all(torch.equal(first[name], again[name]) for name in first)
    assert not all(torch.equal(first[name], other[name]) for name in first)


def test_seeded_lora_needs_an_adapter_name():
    with pytest.raises(ValueError, match=re.escape("adapter_names=() is invalid")):
        seeded_lora(tiny_chat_model(CORPUS, vocab_size=300).model, 0, rank=2, alpha=4, target_modules=["q_proj"],
                    adapter_names=())
