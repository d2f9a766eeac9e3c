"""Exports of an LLM agent's policy: plain transformers + PEFT reproduce the trainer's greedy episode exactly."""

import json
import re

import gymnasium as gym
import pytest
import torch
from gymnasium import spaces
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.llm.engines import SamplingParams
from worldgym.agents.llm.evaluation import VALIDATION_SEEDS_START
from worldgym.agents.llm.export import EXPORT_FILE, POLICY_BASE, export_run
from worldgym.errors import ExportError
from worldgym.run_folder import find_checkpoint


class VarietyEnv(gym.Env):
    """Reward = distinct characters in the reply / 20: sampled replies differ, so the first step updates."""

    observation_space = spaces.Text(64)
    action_space = spaces.Text(256)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "Say something.", {}

    def step(self, action):
        return "", len(set(action)) / 20, True, False, {}


def _trained(tmp_path, model, tokenizer, finetune: str) -> GRPOTrainer:
    config = GRPOConfig(num_steps=1, prompts_per_step=2, group_size=4, max_new_tokens=8, eval_every=0,
                        progress=False, output_dir=str(tmp_path / "run"), learning_rate=1e-2, finetune=finetune)
    trainer = GRPOTrainer(config, model=model, tokenizer=tokenizer, make_env=VarietyEnv, make_eval_env=VarietyEnv)
    trainer.train()
    assert "loss/skipped_update" not in trainer.history[-1]
    return trainer


def _generated_runs(token_ids: list[int], action_mask: list[int]) -> list[tuple[int, int]]:
    """``(start, end)`` of every run of model-generated tokens in an episode."""
    runs, start = [], None
    for index, flag in enumerate([*action_mask, 0]):
        if flag and start is None:
            start = index
        elif not flag and start is not None:
            runs.append((start, index))
            start = None
    return runs


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_the_export_reproduces_the_trainers_greedy_episode(tmp_path, model, tokenizer, finetune):
    trainer = _trained(tmp_path, model, tokenizer, finetune)
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    episode = trainer.eval_collector.collect([VALIDATION_SEEDS_START], 1, params)[0]
    run_dir = tmp_path / "run"
    out = export_run(run_dir, find_checkpoint(run_dir, "last"), tmp_path / "export")

    if finetune == "lora":  # a standard PEFT folder: adapter at the root, its base beside it
        assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
        base = AutoModelForCausalLM.from_pretrained(json.loads((out / "adapter_config.json").read_text())
                                                    ["base_model_name_or_path"])
        policy = PeftModel.from_pretrained(base, out)
        assert any(p.abs().sum() > 0 for n, p in policy.named_parameters() if "lora_B" in n)  # trained, not init
    else:
        policy = AutoModelForCausalLM.from_pretrained(out)
    policy.eval()
    exported_tokenizer = AutoTokenizer.from_pretrained(out)
    assert exported_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert json.loads((out / EXPORT_FILE).read_text())["step"] == 1

    spans = _generated_runs(episode.token_ids, episode.action_mask)
    assert spans
    with torch.no_grad():
        for start, end in spans:
            prompt = torch.tensor([episode.token_ids[:start]])
            generated = policy.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                        max_new_tokens=end - start, pad_token_id=tokenizer.pad_token_id)
            assert generated[0, start:].tolist() == episode.token_ids[start:end]
        ids = torch.tensor([episode.token_ids])
        trainer.policy.eval()
        assert torch.allclose(policy(ids).logits, trainer.policy(ids).logits, atol=1e-5)


def test_an_export_needs_the_runs_policy_base(tmp_path, model, tokenizer):
    _trained(tmp_path, model, tokenizer, "lora")
    run_dir = tmp_path / "run"
    checkpoint = find_checkpoint(run_dir, "last")
    (run_dir / POLICY_BASE / "base.json").unlink()
    with pytest.raises(ExportError, match=re.escape(f"{run_dir} holds no policy_base/base.json")):
        export_run(run_dir, checkpoint, tmp_path / "export")


def test_trained_token_rows_go_into_the_exported_base_and_the_adapter_holds_lora_only(tmp_path, tokenizer):
    from safetensors.torch import load_file

    from worldgym.agents.llm.adapters import seeded_lora
    from worldgym.agents.llm.export import export_policy
    from worldgym.agents.llm.models import build_tiny_model

    added = [len(tokenizer) - 2, len(tokenizer) - 1]  # stand-ins for the added tool and world-model tokens
    policy = seeded_lora(build_tiny_model(tokenizer, seed=0), 0, rank=2, alpha=4, target_modules=["q_proj", "v_proj"],
                         init_lora_weights=False, trainable_token_indices={"embed_tokens": added})
    with torch.no_grad():  # trained rows: unlike the base's
        for name, parameter in policy.named_parameters():
            if "trainable_tokens_delta" in name:
                parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(3)))
    policy.eval()
    ids = torch.tensor([[1, 5, added[0], 9, added[1], 4]])
    with torch.no_grad():
        expected = policy(ids).logits
    trainable_before = {name: p.requires_grad for name, p in policy.named_parameters()}

    out = export_policy(policy, tokenizer, tmp_path / "export")
    weights = load_file(out / "adapter_model.safetensors")
    assert weights and not any("trainable_tokens" in key for key in weights)  # what vLLM refuses
    assert not json.loads((out / "adapter_config.json").read_text()).get("trainable_token_indices")
    base = AutoModelForCausalLM.from_pretrained(out / "base_model")
    reloaded = PeftModel.from_pretrained(base, out).eval()
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, expected)
    assert {name: p.requires_grad for name, p in policy.named_parameters()} == trainable_before
    with torch.no_grad():  # the policy itself is unchanged by the export (its rows were put back)
        assert torch.equal(policy(ids).logits, expected)
        with policy.disable_adapter():
            assert not torch.equal(policy(ids).logits, expected)
