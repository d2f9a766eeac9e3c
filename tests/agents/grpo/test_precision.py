"""Mixed precision through the LLM stack: bf16 frozen weights, float32 trainables, recomputed old logprobs."""

import math

import pytest
import torch

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.llm.engines import HFEngine, SamplingParams
from worldgym.agents.llm.models import build_tiny_model, sharpen
from worldgym.agents.llm.sft import Chat, SFTConfig, sft_train
from worldgym.envs.math_qa import MathQAEnv
from worldgym.precision import cast_for_training, compute_dtype, resolve_dtype


def _trainer(tmp_path, tokenizer, dtype: str, model=None, **overrides) -> GRPOTrainer:
    config = GRPOConfig(num_steps=2, prompts_per_step=2, group_size=4, max_new_tokens=8, eval_every=0,
                        progress=False, output_dir=str(tmp_path / dtype), learning_rate=1e-2, minibatch_size=4,
                        dtype=dtype, **overrides)
    model = model if model is not None else sharpen(build_tiny_model(tokenizer, seed=0), 3.0)
    return GRPOTrainer(config, model=model, tokenizer=tokenizer, make_env=lambda: MathQAEnv(num_problems=30),
                       make_eval_env=lambda: MathQAEnv("test", num_problems=8))


def test_bf16_trainer_stores_frozen_weights_in_bf16_and_trains_float32_adapters(tmp_path, tokenizer,
                                                                                parity_reward):
    trainer = _trainer(tmp_path, tokenizer, "bfloat16")
    trainer.reward_fn = parity_reward
    assert trainer.dtype == torch.bfloat16 and trainer.recomputes_old_logprobs
    frozen = [p for p in trainer.policy.parameters() if not p.requires_grad]
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen if p.is_floating_point())
    assert all(p.dtype == torch.float32 for p in trainer.trainable.values())
    assert compute_dtype(trainer.policy) == torch.bfloat16
    history = trainer.train()
    step = history[-1]
    assert math.isfinite(step["loss/total"])
    # the engine's logprobs differ from the learner's by rounding; recomputed ones make the ratio ~1
    assert 0 < step["precision/logprob_gap_max"] < 1.0
    assert step["precision/logprob_gap_mean"] <= step["precision/logprob_gap_max"]
    assert step["loss/ratio_first_minibatch"] == pytest.approx(1.0, abs=2e-2)
    states = [s for group in trainer.optimizer.state.values() for s in group.values() if torch.is_tensor(s)]
    assert all(s.dtype == torch.float32 for s in states if s.is_floating_point() and s.ndim)


def test_float32_keeps_the_engine_logprobs_and_an_exact_first_ratio(tmp_path, tokenizer, parity_reward):
    trainer = _trainer(tmp_path, tokenizer, "float32")
    trainer.reward_fn = parity_reward
    assert not trainer.recomputes_old_logprobs
    step = trainer.train()[-1]
    assert "precision/logprob_gap_max" not in step
    assert step["loss/ratio_first_minibatch"] == pytest.approx(1.0, abs=1e-5)


def test_recomputing_in_float32_finds_no_gap(tmp_path, tokenizer, parity_reward):
    trainer = _trainer(tmp_path, tokenizer, "float32", recompute_old_logprobs=True)
    trainer.reward_fn = parity_reward
    step = trainer.train(until=1)[-1]
    assert step["precision/logprob_gap_max"] < 1e-4


def test_same_seed_same_bf16_run(tmp_path, tokenizer, parity_reward):
    runs = []
    for name in ("a", "b"):
        trainer = _trainer(tmp_path / name, tokenizer, "bfloat16")
        trainer.reward_fn = parity_reward
        runs.append(trainer.train())
    drop_times = [{k: v for k, v in row.items() if not k.startswith(("time/", "perf/"))} for row in runs[0]]
    assert drop_times == [{k: v for k, v in row.items() if not k.startswith(("time/", "perf/"))}
                          for row in runs[1]]


@pytest.mark.parametrize(("saved", "loaded"), [("float32", "bfloat16"), ("bfloat16", "float32")])
def test_a_checkpoint_loads_in_either_precision(tmp_path, tokenizer, saved, loaded):
    first = _trainer(tmp_path / "first", tokenizer, saved)
    first.train(until=1)
    path = first.save(tmp_path / "checkpoint")
    second = _trainer(tmp_path / "second", tokenizer, loaded)
    second.load(path)
    assert second.step == 1
    for name, tensor in first.trainable.items():
        assert torch.equal(second.trainable[name], tensor) and second.trainable[name].dtype == torch.float32
    second.train()
    assert second.step == 2


def test_bad_dtype_and_the_deprecated_flag():
    with pytest.raises(ValueError, match="dtype='float16' is invalid"):
        GRPOConfig(dtype="float16")
    with pytest.warns(DeprecationWarning, match="dtype='bfloat16'"):
        config = GRPOConfig(bf16_autocast=True)
    assert config.dtype == "bfloat16"
    with pytest.raises(ValueError, match="dtype='bfloat16' is invalid: use 'float32' with learner='fsdp'"):
        GRPOConfig(dtype="bfloat16", learner="fsdp", share_prompt_prefix=False)


def test_auto_follows_the_hardware(monkeypatch):
    from worldgym import precision

    monkeypatch.setattr(precision, "cpu_supports_bf16", lambda: False)
    assert resolve_dtype("auto", "cpu") == torch.float32
    monkeypatch.setattr(precision, "cpu_supports_bf16", lambda: True)
    assert resolve_dtype("auto", "cpu") == torch.bfloat16


def test_bf16_engine_decodes_in_bf16_and_agrees_with_float32_at_first(tokenizer):
    prompts = [tokenizer("What is 3 plus 4?")["input_ids"], tokenizer("Add 12 and 9.")["input_ids"]]
    params = SamplingParams(max_new_tokens=12, temperature=0.0, seed=0)
    outputs, key_dtypes = {}, {}
    for dtype in (torch.float32, torch.bfloat16):
        model = sharpen(build_tiny_model(tokenizer, seed=0, dtype=dtype), 3.0)
        seen: list[torch.dtype] = []
        model.model.layers[0].self_attn.k_proj.register_forward_hook(
            lambda module, inputs, out, seen=seen: seen.append(out.dtype))
        engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
        outputs[dtype] = [g[0] for g in engine.generate(prompts, params)]
        key_dtypes[dtype] = set(seen)
        assert all(isinstance(lp, float) and math.isfinite(lp) for g in outputs[dtype] for lp in g.logprobs)
    assert key_dtypes == {torch.float32: {torch.float32}, torch.bfloat16: {torch.bfloat16}}  # the KV's dtype
    first = outputs[torch.float32][0].token_ids, outputs[torch.bfloat16][0].token_ids
    assert first[0][:3] == first[1][:3]  # the same greedy start; later tokens may diverge by rounding


def test_cast_for_training_keeps_trainables_in_float32(tokenizer):
    model = build_tiny_model(tokenizer, seed=0)
    model.lm_head.weight.requires_grad_(False)  # tied with the embeddings: frozen
    model.model.norm.weight.requires_grad_(True)
    cast_for_training(model, torch.bfloat16)
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16
    assert model.model.norm.weight.dtype == torch.float32


def test_bf16_sft_trains_in_place(tokenizer):
    model = build_tiny_model(tokenizer, seed=0)
    chats = [Chat([{"role": "user", "content": "What is 3 plus 4?"},
                   {"role": "assistant", "content": "7"}], None, 1.0)] * 4
    losses = sft_train(model, tokenizer, chats, SFTConfig(epochs=3, batch_size=2, progress=False,
                                                          dtype="bfloat16"))
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0]
    assert all(p.dtype == torch.float32 for p in model.parameters())  # full fine-tuning: all trainable


def test_bf16_scoring_of_lora_with_trainable_tokens_restores_the_adapters_casting(tokenizer):
    from peft import LoraConfig, get_peft_model
    from peft.tuners.tuners_utils import BaseTunerLayer

    from worldgym.agents.llm.scoring import score_tokens

    model = get_peft_model(build_tiny_model(tokenizer, seed=0), LoraConfig(
        r=4, target_modules=["q_proj", "v_proj"], trainable_token_indices=[5, 6], task_type="CAUSAL_LM"))
    cast_for_training(model, torch.bfloat16)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    scored = score_tokens(model, ids, torch.ones_like(ids), torch.ones(1, 5))
    scored.logprobs.sum().backward()
    assert torch.isfinite(scored.logprobs).all()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    assert all(getattr(m, "cast_input_dtype_enabled", True) for m in layers)  # switched back on afterwards


def test_the_smollm2_preset_trains_in_this_machines_fast_precision_and_the_tiny_one_in_float32():
    from worldgym.agents.grpo.presets import grpo_preset

    assert grpo_preset("CSRPhone-v1", "smollm2-135m").grpo_config(3).dtype == "auto"
    assert grpo_preset("CSRPhone-v1", "smollm2-135m").warm_start.dtype == "float32"  # the shipped warm start, loaded as it is
    assert grpo_preset("CSRPhone-v1", "tiny").grpo_config(1).dtype == "float32"


def test_bf16_lora_update_with_checkpointed_activations(tmp_path, tokenizer, parity_reward):
    # the backward recomputes each layer outside the forward's autocast block: its adapter layers must compute
    # the same dtypes then (else torch.utils.checkpoint refuses the recomputed tensors)
    trainer = _trainer(tmp_path, tokenizer, "bfloat16", activation_checkpointing=True, microbatch_size=2,
                       share_prompt_prefix=False)
    trainer.reward_fn = parity_reward
    step = trainer.train()[-1]
    assert math.isfinite(step["loss/total"]) and step["loss/grad_norm"] > 0


def test_bf16_updates_weight_tokens_by_the_truncated_engine_ratio(tmp_path, tokenizer, parity_reward):
    trainer = _trainer(tmp_path, tokenizer, "bfloat16", importance_sampling_cap=1.01)
    trainer.reward_fn = parity_reward
    step = trainer.train(until=1)[-1]
    assert 0.9 < step["precision/is_weight_mean"] <= 1.01
    assert 0 <= step["precision/is_weight_capped"] <= 1
    plain = _trainer(tmp_path / "plain", tokenizer, "bfloat16", importance_sampling_cap=None)
    plain.reward_fn = parity_reward
    assert "precision/is_weight_mean" not in plain.train(until=1)[-1]


def test_importance_weights_scale_each_tokens_gradient():
    from worldgym.agents.llm.losses import policy_loss

    logprobs = torch.log(torch.tensor([[0.5, 0.25]])).requires_grad_(True)
    weights = torch.tensor([[1.0, 2.0]])
    mask, advantages = torch.ones(1, 2), torch.tensor([1.0])
    policy_loss(logprobs, logprobs.detach(), advantages, mask, importance_weights=weights).loss.backward()
    weighted = logprobs.grad.clone()
    logprobs.grad = None
    policy_loss(logprobs, logprobs.detach(), advantages, mask).loss.backward()
    torch.testing.assert_close(weighted, logprobs.grad * weights)


def test_importance_sampling_cap_below_one_is_refused():
    with pytest.raises(ValueError, match="importance_sampling_cap=0.5 is invalid"):
        GRPOConfig(importance_sampling_cap=0.5)
