"""Gradient accumulation (``microbatch_size``) gives the update of one pass over the whole minibatch, for each
loss aggregation, with a KL term and entropy bonus, and with the dual-LoRA world model's auxiliary loss; and
activation checkpointing changes nothing but memory."""

from __future__ import annotations

import pytest
import torch

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """One torch thread (the shared fixture)."""


def _step(tmp_path, reward, name: str, **overrides) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    config = GRPOConfig(prompts_per_step=2, group_size=3, max_new_tokens=12, minibatch_size=6, learning_rate=1e-2,
                        num_steps=1, eval_every=0, progress=False, output_dir=str(tmp_path / name), **overrides)
    trainer = GRPOTrainer(config, reward_fn=reward)
    # SGD: AdamW's first step divides by |g| + eps, which scales float rounding of tiny gradients up
    trainer.optimizer = torch.optim.SGD(list(trainer.trainable.values()), lr=config.learning_rate)
    metrics = trainer.train_step()
    return metrics, {name: p.detach().clone() for name, p in trainer.trainable.items()}


@pytest.mark.parametrize("settings", [
    {"loss_aggregation": "token_mean"},
    {"loss_aggregation": "seq_mean", "finetune": "full", "kl_coef": 0.05, "entropy_coef": 0.01},
    {"loss_aggregation": "dr_grpo"},
])
def test_microbatches_give_the_whole_minibatch_update(tmp_path, settings, parity_reward):
    whole, whole_weights = _step(tmp_path, parity_reward, "whole", **settings)
    assert whole["loss/grad_norm"] > 0
    for micro in (1, 4):  # equal chunks, and a last chunk smaller than the others
        got, weights = _step(tmp_path, parity_reward, f"micro{micro}", microbatch_size=micro, **settings)
        for key in ("loss/total", "loss/policy", "loss/entropy", "loss/grad_norm", "loss/kl"):
            assert got[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-6), (micro, key)
        for name, tensor in whole_weights.items():
            torch.testing.assert_close(weights[name], tensor, rtol=1e-5, atol=1e-6)


def test_activation_checkpointing_keeps_the_update(tmp_path, parity_reward):
    plain, plain_weights = _step(tmp_path, parity_reward, "plain", microbatch_size=2)
    checkpointed, weights = _step(tmp_path, parity_reward, "checkpointed", microbatch_size=2,
                                  activation_checkpointing=True)
    assert checkpointed["rollout/model_tokens"] == plain["rollout/model_tokens"]  # generation keeps its KV cache
    for name, tensor in plain_weights.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-5, atol=1e-6)


def test_microbatch_size_must_not_be_negative():
    with pytest.raises(ValueError, match="microbatch_size=-1 is invalid"):
        GRPOConfig(microbatch_size=-1)
