"""DualLoRATrainer: the world-model loss trains through its adapter, rollouts use the policy's, checkpoints
resume exactly, the config rejects bad settings."""

import dataclasses

import pytest
import torch

from worldgym.agents.dual_lora import DualLoRAConfig, DualLoRATrainer, wm_success_correlation
from worldgym.agents.llm.checkpoint import CheckpointError
from worldgym.agents.llm.models import build_tiny_model

from .conftest import PhoningEngine, make_csr_env


def _config(tmp_path, **overrides):
    settings = {"env_id": "CSRPhone-v1", "env_kwargs": {"difficulty": 1},
                "eval_env_kwargs": {"split": "validation", "difficulty": 1}, "max_turns": 3, "num_steps": 2,
                "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 40, "eval_every": 0, "eval_episodes": 2,
                "minibatch_size": 4, "progress": False, "learning_rate": 1e-2, "output_dir": str(tmp_path / "run")}
    return DualLoRAConfig(**{**settings, **overrides})


def _trainer(tmp_path, csr_tokenizer, **overrides):
    return DualLoRATrainer(_config(tmp_path, **overrides), model=build_tiny_model(csr_tokenizer, seed=0),
                           tokenizer=csr_tokenizer, make_env=make_csr_env,
                           make_engine=lambda policy: PhoningEngine(csr_tokenizer))


def _adapter_weights(trainer, adapter):
    return {n: p.detach().clone() for n, p in trainer.trainable.items() if f".{adapter}." in n}


def test_trainer_collects_both_adapters_once_and_trains_the_world_model(tmp_path, csr_tokenizer):
    trainer = _trainer(tmp_path, csr_tokenizer)
    assert {n.split(".")[-2] for n in trainer.trainable} == {"policy", "world_model"}
    before = _adapter_weights(trainer, "world_model")
    metrics = trainer.train_step()
    assert metrics["wm/calls"] > 0 and metrics["loss/world_model"] > 0 and metrics["wm/lambda"] == 0.5
    after = _adapter_weights(trainer, "world_model")
    assert all(not torch.equal(before[n], after[n]) for n in before if "lora_B" in n)  # B moves first (B=0)
    assert trainer.policy.active_adapters == ["policy"]  # back to the rollout adapter after the WM forward


def test_wm_coef_zero_is_dapo_alone_and_leaves_the_world_model_untouched(tmp_path, csr_tokenizer):
    trainer = _trainer(tmp_path, csr_tokenizer, wm_coef=0.0)
    before = _adapter_weights(trainer, "world_model")
    metrics = trainer.train_step()
    assert "loss/world_model" not in metrics
    assert all(torch.equal(before[n], p) for n, p in _adapter_weights(trainer, "world_model").items())


def test_rollouts_see_only_the_policy_adapter_unless_stacked(tmp_path, csr_tokenizer):
    ids = torch.randint(0, len(csr_tokenizer), (1, 8))
    for transfer, changes in (("separate", False), ("stacked", True)):
        trainer = _trainer(tmp_path / transfer, csr_tokenizer, transfer=transfer)
        trainer.policy.eval()
        before = trainer.policy(input_ids=ids).logits
        with torch.no_grad():
            for name, parameter in trainer.policy.named_parameters():
                if "lora_B" in name and ".world_model." in name:
                    parameter.normal_()
        assert torch.allclose(trainer.policy(input_ids=ids).logits, before) != changes, transfer


def test_iwm_trains_the_policy_adapter_on_replies_first_then_dapo(tmp_path, csr_tokenizer):
    trainer = _trainer(tmp_path, csr_tokenizer, transfer="iwm", iwm_steps=1, num_steps=2)
    assert trainer.world_model.config.adapter_names == ("policy",)
    first = trainer.train_step()
    assert first["wm/lambda"] == 1.0 and trainer.world_model.schedule.policy_weight(0) == 0.0
    second = trainer.train_step()
    assert second["wm/lambda"] == 0.0 and "loss/world_model" not in second


def test_checkpoint_resume_continues_exactly_and_corruption_is_named(tmp_path, csr_tokenizer):
    straight = _trainer(tmp_path / "a", csr_tokenizer, num_steps=3, wm_replay_fraction=0.5)
    for _ in range(3):
        straight.train_step()
    first = _trainer(tmp_path / "b", csr_tokenizer, num_steps=3, wm_replay_fraction=0.5)
    first.train_step()
    first.train_step()
    path = first.save(tmp_path / "ckpt")
    resumed = _trainer(tmp_path / "c", csr_tokenizer, num_steps=3, wm_replay_fraction=0.5)
    resumed.load(path)
    assert len(resumed.world_model.replay) == len(first.world_model.replay) > 0
    resumed.train_step()
    for name, parameter in straight.trainable.items():
        torch.testing.assert_close(resumed.trainable[name], parameter, rtol=0, atol=0)
    weights = path / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="weights.safetensors"):
        resumed.load(path)


def test_config_rejects_bad_settings():
    with pytest.raises(ValueError, match=r"transfer=.both. is invalid: use one of"):
        DualLoRAConfig(transfer="both")
    with pytest.raises(ValueError, match=r"finetune=.full. is invalid: use .lora."):
        DualLoRAConfig(finetune="full")
    with pytest.raises(ValueError, match=r"lambda_steps=.* is invalid: start at step 0"):
        DualLoRAConfig(lambda_schedule="step", lambda_steps=((5, 1.0),))
    with pytest.raises(ValueError, match="iwm_steps"):
        DualLoRAConfig(transfer="iwm", iwm_steps=5, num_steps=5)
    with pytest.raises(ValueError, match=r"lambda_schedule=.adaptive. is invalid: use .constant. or .step."):
        DualLoRAConfig(lambda_schedule="adaptive", learner="ddp")
    assert DualLoRAConfig(adapter_targets="all-linear").lora_target_modules[-1] == "down_proj"
    custom = DualLoRAConfig(adapter_targets="custom", lora_target_modules=("q_proj",))
    assert custom.lora_target_modules == ("q_proj",)
    assert dataclasses.asdict(custom)["transfer"] == "separate"


def test_adaptive_lambda_shrinks_once_the_world_model_beats_its_baseline():
    from worldgym.agents.dual_lora.schedule import LambdaController

    controller = LambdaController(DualLoRAConfig(lambda_schedule="adaptive", wm_coef=0.5, lambda_adapt_rate=2.0))
    controller.observe_step(0.9)  # no baseline yet: unchanged
    assert controller.value(0) == 0.5
    controller.observe_validation(0.3)
    controller.observe_step(0.5)
    assert controller.value(1) == 0.25
    controller.observe_step(0.31)
    assert controller.value(2) == 0.5


def test_wm_success_correlation():
    pairs = ((0.1, 0.0), (0.2, 0.1), (0.3, 0.3))
    history = [{"eval/wm_token_accuracy": a, "eval/success_rate": s} for a, s in pairs]
    assert wm_success_correlation(history) == pytest.approx(0.9820, abs=1e-3)
    assert wm_success_correlation(history[:2]) is None


def test_world_model_learning_rate_is_a_second_group_of_one_optimizer(tmp_path, csr_tokenizer):
    trainer = _trainer(tmp_path, csr_tokenizer, learning_rate=1e-3, wm_learning_rate=5e-3)
    groups = trainer.optimizer.param_groups
    assert [g["lr"] for g in groups] == [1e-3, 5e-3]
    assert sum(len(g["params"]) for g in groups) == len(trainer.trainable)
    path = trainer.save(tmp_path / "ckpt")
    _trainer(tmp_path / "other", csr_tokenizer, learning_rate=1e-3, wm_learning_rate=5e-3).load(path)


def test_resume_latest_loads_the_newest_checkpoint_and_its_metrics(tmp_path, csr_tokenizer):
    trainer = _trainer(tmp_path, csr_tokenizer, num_steps=2, checkpoint_every=1)
    assert trainer.resume_latest() is None  # a fresh run
    trainer.train()
    resumed = _trainer(tmp_path, csr_tokenizer, num_steps=2, checkpoint_every=1)
    assert resumed.resume_latest().name == "checkpoint-2" and resumed.step == 2
    assert [m["step"] for m in resumed.history] == [1, 2]


def test_microbatches_run_the_world_model_once_per_minibatch(tmp_path, csr_tokenizer):
    def step(name, **overrides):
        trainer = _trainer(tmp_path / name, csr_tokenizer, **overrides)
        trainer.optimizer = torch.optim.SGD(list(trainer.trainable.values()), lr=1e-2)  # see the GRPO test
        return trainer.train_step(), {n: p.detach().clone() for n, p in trainer.trainable.items()}

    # no dropout: the microbatches' forwards draw dropout masks in another order than one pass does
    whole, whole_weights = step("whole", lora_dropout=0.0)
    micro, micro_weights = step("micro", microbatch_size=1, lora_dropout=0.0)
    assert whole["loss/world_model"] > 0 and micro["loss/world_model"] == pytest.approx(whole["loss/world_model"], rel=1e-5)
    assert micro["loss/total"] == pytest.approx(whole["loss/total"], rel=1e-5)
    for name, tensor in whole_weights.items():
        torch.testing.assert_close(micro_weights[name], tensor, rtol=1e-5, atol=1e-6)
    dapo, _ = step("dapo", microbatch_size=1, wm_coef=0.0)  # λ = 0: the world model's loss is a constant
    assert dapo["loss/total"] == pytest.approx(dapo["loss/policy"], abs=1e-6)


def test_both_adapters_train_in_float32_over_a_bf16_base(tmp_path, csr_tokenizer):
    trainer = _trainer(tmp_path, csr_tokenizer, dtype="bfloat16")
    frozen = {p.dtype for p in trainer.policy.parameters() if not p.requires_grad and p.is_floating_point()}
    assert frozen == {torch.bfloat16}
    assert {p.dtype for p in trainer.trainable.values()} == {torch.float32}
    before = _adapter_weights(trainer, "world_model")
    metrics = trainer.train_step()
    assert metrics["loss/world_model"] > 0 and torch.isfinite(torch.tensor(metrics["loss/total"]))
    after = _adapter_weights(trainer, "world_model")
    assert all(not torch.equal(before[n], after[n]) for n in before if "lora_B" in n)


def test_clip_per_adapter_clips_each_adapter_on_its_own(tmp_path, csr_tokenizer):
    trainer = _trainer(tmp_path, csr_tokenizer, transfer="separate", clip_per_adapter=True, grad_clip=0.5)
    policy, world_model = trainer._adapter_groups()
    assert policy and world_model and len(policy) + len(world_model) == len(trainer.trainable)
    for scale, group in ((1.0, policy), (100.0, world_model)):
        for tensor in group:
            tensor.grad = torch.full_like(tensor, scale)
    before = [torch.cat([t.grad.flatten() for t in group]).norm().item() for group in (policy, world_model)]
    total = trainer.clip_and_step()
    assert total.item() == pytest.approx((before[0] ** 2 + before[1] ** 2) ** 0.5, rel=1e-4)
    after = [torch.cat([t.grad.flatten() for t in group]).norm().item() for group in (policy, world_model)]
    assert after == pytest.approx([0.5, 0.5], rel=1e-4)  # a shared clip would leave the policy's ~0.5/100 of it
    with pytest.raises(ValueError, match="clip_per_adapter"):
        _config(tmp_path, transfer="shared", clip_per_adapter=True)


def test_separate_adapters_clipped_on_their_own_train_the_policy_exactly_as_dapo(tmp_path, csr_tokenizer,
                                                                                monkeypatch):
    """Nothing of the world model's loss reaches the policy adapter: without dropout (whose draws would shift
    the rollouts' random stream) the policy after a step is DAPO's, bit for bit, and only its world model moves.
    (A clip shared by both adapters would shrink the policy's step by the world model's gradient.) The scripted
    engine's episodes all earn the same reward, so the advantages are set to +-1 for a policy gradient."""
    import worldgym.agents.grpo.trainer as grpo_trainer

    monkeypatch.setattr(grpo_trainer, "group_advantages",
                        lambda rewards, *args: torch.arange(len(rewards)).remainder(2).float() * 2 - 1)
    settings = {"transfer": "separate", "lora_dropout": 0.0, "grad_clip": 1e-3}  # one shared clip would engage
    dapo = _trainer(tmp_path / "dapo", csr_tokenizer, wm_coef=0.0, **settings)
    separate = _trainer(tmp_path / "separate", csr_tokenizer, clip_per_adapter=True, **settings)
    world_model_before = _adapter_weights(separate, "world_model")
    for trainer in (dapo, separate):
        trainer.train_step()
    ours, theirs = _adapter_weights(separate, "policy"), _adapter_weights(dapo, "policy")
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[n], theirs[n]) for n in ours)
    assert any(bool(ours[n].any()) for n in ours if "lora_B" in n)  # the policy did move (B starts at 0)
    moved = _adapter_weights(separate, "world_model")
    assert any(not torch.equal(world_model_before[n], moved[n]) for n in moved)


@pytest.mark.parametrize("bound", [{}, {"clip_per_adapter": True}, {"auxiliary_grad_ratio": 0.1}])
def test_loss_ratio_warning_only_when_nothing_bounds_the_world_model(tmp_path, csr_tokenizer, caplog,
                                                                     monkeypatch, bound):
    from worldgym.agents.grpo import GRPOTrainer

    trainer = _trainer(tmp_path, csr_tokenizer, transfer="separate", **bound)
    monkeypatch.setattr(GRPOTrainer, "train_step", lambda self: {"loss/world_model": 8.83, "loss/policy": 0.1})
    with caplog.at_level("WARNING", logger="worldgym.agents.dual_lora.trainer"):
        metrics = trainer.train_step()
    assert metrics["wm/loss_ratio"] == pytest.approx(88.3)
    assert any("left [" in record.message for record in caplog.records) == (not bound)


def test_a_shared_step0_validation_sets_the_adaptive_baseline(tmp_path, csr_tokenizer):
    trainer = _trainer(tmp_path, csr_tokenizer, lambda_schedule="adaptive")
    trainer.log_initial_validation({"eval/success_rate": 0.5, "eval/wm_token_accuracy": 0.25})
    assert trainer.world_model.schedule.baseline_accuracy == 0.25  # as if it had validated itself
    assert trainer.history == [{"eval/success_rate": 0.5, "eval/wm_token_accuracy": 0.25, "step": 0}]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_wm_token_rows_train_the_markers_in_the_world_models_adapter_alone(tmp_path, csr_tokenizer, dtype):
    from worldgym.agents.dual_lora.world_model import wm_token_ids

    trainer = _trainer(tmp_path, csr_tokenizer, wm_token_rows=True, wm_learning_rate=5e-3, dtype=dtype)
    rows = [n for n in trainer.trainable if "trainable_tokens" in n]
    assert rows == ["base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta.world_model"]
    delta = trainer.trainable[rows[0]]
    policy, world_model = trainer._adapter_groups()
    assert any(p is delta for p in world_model) and not any(p is delta for p in policy)
    assert trainer.optimizer.param_groups[1]["lr"] == 5e-3
    markers = list(wm_token_ids(csr_tokenizer))
    assert trainer.policy.base_model.model.model.embed_tokens.token_adapter.token_indices["world_model"] == markers
    before = trainer.trainable[rows[0]].detach().clone()
    metrics = trainer.train_step()
    assert metrics["loss/world_model"] > 0
    moved = (trainer.trainable[rows[0]] - before).abs().sum(dim=-1)  # one row per marker, in markers' order
    assert moved[2] > 0  # <|/csr|>, a target of every reply
    path = trainer.save(tmp_path / "ckpt")
    other = _trainer(tmp_path / "other", csr_tokenizer, wm_token_rows=True, wm_learning_rate=5e-3, dtype=dtype)
    other.load(path)
    assert torch.equal(other.trainable[rows[0]], trainer.trainable[rows[0]])
    with pytest.raises(CheckpointError, match="does not fit"):  # a checkpoint without the rows
        _trainer(tmp_path / "plain", csr_tokenizer, wm_learning_rate=5e-3, dtype=dtype).load(path)
    with pytest.raises(ValueError, match="wm_token_rows"):
        _config(tmp_path, transfer="echo", wm_token_rows=True)
