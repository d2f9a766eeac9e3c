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


def test_checkpointing_only_long_microbatches_keeps_the_update_and_recomputes_only_those(tmp_path, parity_reward,
                                                                                       monkeypatch):
    from worldgym.agents.llm import adapters

    paused: list[bool] = []
    pause = adapters.activation_checkpointing_paused

    def recording_pause(model):
        paused.append(True)
        return pause(model)

    monkeypatch.setattr("worldgym.agents.grpo.trainer.activation_checkpointing_paused", recording_pause)
    _, always_weights = _step(tmp_path, parity_reward, "always", microbatch_size=2,
                                   activation_checkpointing=True)
    assert not paused  # 0: every microbatch recomputes
    _, never_weights = _step(tmp_path, parity_reward, "never", microbatch_size=2, activation_checkpointing=True,
                                 checkpointing_min_tokens=10**9)
    assert len(paused) == 3  # three microbatches of 2 rows, each shorter than the threshold
    for name, tensor in always_weights.items():
        torch.testing.assert_close(never_weights[name], tensor, rtol=1e-5, atol=1e-6)


def test_checkpointing_paused_restores_the_layers(tiny_model_for_pause):
    from worldgym.agents.llm.adapters import activation_checkpointing_paused

    model = tiny_model_for_pause

    def flags() -> list[bool]:
        return [m.gradient_checkpointing for m in model.modules() if hasattr(m, "gradient_checkpointing")]

    assert flags() and all(flags())
    with activation_checkpointing_paused(model):
        assert not any(flags())
    assert all(flags())
    with pytest.raises(RuntimeError), activation_checkpointing_paused(model):
        raise RuntimeError("a failing forward")
    assert all(flags())


def test_checkpointing_switches_on_and_off_without_deprecated_names(tokenizer):
    import warnings

    from worldgym.agents.llm.adapters import disable_activation_checkpointing, enable_activation_checkpointing
    from worldgym.agents.llm.models import build_tiny_model

    model = build_tiny_model(tokenizer, seed=0)
    layers = [m for m in model.modules() if hasattr(m, "gradient_checkpointing")]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*deprecated.*", category=FutureWarning)
        enable_activation_checkpointing(model)
        assert layers and all(m.gradient_checkpointing for m in layers)
        disable_activation_checkpointing(model)
    assert not any(m.gradient_checkpointing for m in layers)


@pytest.fixture
def tiny_model_for_pause(tokenizer):
    from worldgym.agents.llm.adapters import enable_activation_checkpointing
    from worldgym.agents.llm.models import build_tiny_model

    model = build_tiny_model(tokenizer, seed=0)
    enable_activation_checkpointing(model)
    return model


def test_checkpointing_min_tokens_must_not_be_negative():
    with pytest.raises(ValueError, match="checkpointing_min_tokens=-1 is invalid"):
        GRPOConfig(checkpointing_min_tokens=-1)


def test_releasing_the_heap_after_each_microbatch_keeps_the_update(tmp_path, parity_reward, monkeypatch):
    from worldgym.agents.llm import allocator

    plain, plain_weights = _step(tmp_path, parity_reward, "plain", microbatch_size=2)
    calls = []
    monkeypatch.setattr(allocator, "release_free_heap", lambda: calls.append(1) or True)
    released, weights = _step(tmp_path, parity_reward, "released", microbatch_size=2, cpu_release_heap=True)
    assert len(calls) == 1 + 3  # after the rollouts, then after each of the 3 microbatches' backward
    assert released["loss/total"] == plain["loss/total"]
    for name, tensor in plain_weights.items():
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=0)
