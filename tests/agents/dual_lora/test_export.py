"""Dual-LoRA runs taken elsewhere: the policy adapter alone as a flat PEFT folder (the world model's stays
behind), one merged model when the policy's forward sums both adapters ("stacked"); transcripts with the world
model's predicted replies."""

import json

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from worldgym.agents.dual_lora import DualLoRAConfig, DualLoRATrainer
from worldgym.agents.llm.models import build_tiny_model
from worldgym.export import export
from worldgym.transcripts import read_transcript

from .conftest import PhoningEngine, make_csr_env


@pytest.mark.parametrize(("transfer", "layout"), [("separate", "peft_adapter"), ("stacked", "transformers_model")])
def test_the_export_computes_what_the_trainers_policy_computes(tmp_path, csr_tokenizer, transfer, layout):
    config = DualLoRAConfig(env_id="CSRPhone-v1", env_kwargs={"difficulty": 1}, max_turns=2, num_steps=1,
                            prompts_per_step=2, group_size=2, max_new_tokens=40, eval_every=0, minibatch_size=4,
                            progress=False, learning_rate=1e-2, output_dir=str(tmp_path / "run"), transfer=transfer)
    trainer = DualLoRATrainer(config, model=build_tiny_model(csr_tokenizer, seed=0), tokenizer=csr_tokenizer,
                              make_env=make_csr_env, make_engine=lambda policy: PhoningEngine(csr_tokenizer))
    trainer.train()
    out = export(tmp_path / "run", tmp_path / "export")
    assert json.loads((out / "worldgym_export.json").read_text())["layout"] == layout
    if layout == "peft_adapter":
        adapter = json.loads((out / "adapter_config.json").read_text())
        policy = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(adapter["base_model_name_or_path"]),
                                           out)
        assert list(policy.peft_config) == ["default"]  # the world model's adapter is not exported
    else:
        policy = AutoModelForCausalLM.from_pretrained(out)
    ids = torch.tensor([csr_tokenizer.encode("Call the company at 1-800-555-0100.")])
    trainer.policy.eval()
    with torch.no_grad():
        assert torch.allclose(policy.eval()(ids).logits, trainer.policy(ids).logits, atol=1e-5)


def test_validation_transcripts_put_the_world_models_reply_beside_the_real_one(tmp_path, csr_tokenizer):
    config = DualLoRAConfig(env_id="CSRPhone-v1", env_kwargs={"difficulty": 1}, max_turns=3, num_steps=1,
                            prompts_per_step=2, group_size=2, max_new_tokens=40, eval_every=1, eval_episodes=2,
                            minibatch_size=4, progress=False, output_dir=str(tmp_path / "run"),
                            imagined_reply_tokens=8)
    trainer = DualLoRATrainer(config, model=build_tiny_model(csr_tokenizer, seed=0), tokenizer=csr_tokenizer,
                              make_env=make_csr_env, make_engine=lambda policy: PhoningEngine(csr_tokenizer))
    trainer.train()
    records = read_transcript(tmp_path / "run", 1)
    answers = [(reply, answer) for record in records for reply, answer in
               zip(record["messages"][1::2], record["messages"][2::2], strict=True)]
    calls = [answer for reply, answer in answers if reply["tool_call"].get("name") == "make_phone_call"]
    others = [answer for reply, answer in answers if reply["tool_call"].get("name") != "make_phone_call"]
    assert calls and all(isinstance(answer["predicted_reply"], str) for answer in calls)
    assert all("predicted_reply" not in answer for answer in others)
