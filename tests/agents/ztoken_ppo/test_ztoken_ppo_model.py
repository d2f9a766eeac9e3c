"""Policy tests: logit masking, head placement, rollout/update consistency, the pretrained (HF) path."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from worldgym.agents.ztoken_ppo import (
    ZTokenModelConfig,
    ZTokenPPOConfig,
    ZTokenPPOTrainer,
    build_policy,
    load_policy,
    masked_token_log_probs,
    save_checkpoint,
)
from worldgym.agents.ztoken_ppo.checkpoint import FORMAT_VERSION, KIND
from worldgym.agents.ztoken_ppo.encoding import TokenizerEncoder
from worldgym.agents.ztoken_ppo.model import joint_entropy, joint_log_prob
from worldgym.agents.ztoken_ppo.rollout import collect_episodes, ztoken_vector_env
from worldgym.agents.ztoken_ppo.warm_start import collect_scripted_episodes, warm_start_loss
from worldgym.checkpointing import write_manifest
from worldgym.envs.ztoken import ZTokenVocab


def test_masking_gives_zero_probability_outside_the_allowed_set() -> None:
    logits = torch.tensor([[50.0, 1.0, 2.0, 3.0, -40.0]])
    allowed = torch.tensor([1, 3])
    log_probs = masked_token_log_probs(logits, allowed)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(1))
    torch.testing.assert_close(log_probs, torch.log_softmax(torch.tensor([[1.0, 3.0]]), -1))


def test_encoder_appends_answer_after_the_last_observed_token(tiny_policy) -> None:
    _, encoder = tiny_policy
    vocab = ZTokenVocab(4)
    obs = np.zeros((2, 8), dtype=np.int64)
    question = vocab.encode_question("3+4=")
    obs[0, :4] = question
    obs[1, :6] = question + [vocab.z_id(1), vocab.z_id(0)]
    batch = encoder.encode(obs)
    assert batch.answer_index.tolist() == [4, 6] and batch.last_index.tolist() == [3, 5]
    assert batch.input_ids[[0, 1], batch.answer_index].tolist() == [vocab.answer_id] * 2
    assert batch.prompt_lengths.tolist() == [4, 4]
    assert batch.attention_mask.sum(1).tolist() == [5, 7]


def test_value_head_is_linear_tanh_linear(tiny_policy) -> None:
    policy, _ = tiny_policy
    first, activation, last = policy.value_head
    hidden = policy.lm.config.hidden_size
    assert (first.in_features, first.out_features, last.out_features) == (hidden, hidden, 1)
    assert isinstance(activation, torch.nn.Tanh)
    assert len(policy.digit_heads) == 5 and all(h.out_features == 10 for h in policy.digit_heads)


def test_digit_heads_read_the_answer_position(tiny_policy, env_kwargs) -> None:
    policy, encoder = tiny_policy
    envs = ztoken_vector_env("ZTokenDigits-v1", env_kwargs, 2)
    obs, digits = collect_scripted_episodes(envs, 2, 1, 2, seed=0, rng=np.random.default_rng(0))
    batch = encoder.encode(obs)
    out = policy(batch)
    _, teacher_digits = policy.teacher_forced(batch)
    torch.testing.assert_close(out.digit_logits, teacher_digits)
    hidden = policy.lm.base_model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask
    ).last_hidden_state
    answer_hidden = hidden[torch.arange(len(obs)), batch.answer_index]
    torch.testing.assert_close(out.digit_logits[:, 0], policy.digit_heads[0](answer_hidden))
    assert digits.shape == (4, 5)


def test_rollout_log_probs_match_the_update_recomputation(tiny_policy, env_kwargs) -> None:
    policy, encoder = tiny_policy
    envs = ztoken_vector_env("ZTokenDigits-v1", env_kwargs, 2)
    episodes, steps = collect_episodes(
        policy, encoder, envs, 3, seed=0, generator=torch.Generator().manual_seed(0)
    )
    assert len(episodes) == 6 and steps >= sum(len(e.tokens) for e in episodes)
    obs = np.stack([o for e in episodes for o in e.observations])
    tokens = torch.tensor([t for e in episodes for t in e.tokens])
    digits = torch.tensor([d for e in episodes for d in e.digits])
    out = policy(encoder.encode(obs))
    recomputed = joint_log_prob(out, tokens, digits, policy.answer_action, include_digits=True)
    stored = torch.tensor([p for e in episodes for p in e.log_probs])
    torch.testing.assert_close(recomputed, stored, atol=1e-5, rtol=1e-5)
    entropy = joint_entropy(out, policy.answer_action, include_digits=True)
    torch.testing.assert_close(
        entropy, torch.tensor([h for e in episodes for h in e.entropy]), atol=1e-5, rtol=1e-5
    )
    assert all(0 <= t <= policy.answer_action for t in tokens.tolist())


def test_greedy_acting_is_deterministic_and_seeded_sampling_repeats(tiny_policy, env_kwargs) -> None:
    policy, encoder = tiny_policy
    envs = ztoken_vector_env("ZTokenDigits-v1", env_kwargs, 2)

    def run(decoding: str, seed: int) -> list:
        episodes, _ = collect_episodes(
            policy,
            encoder,
            envs,
            2,
            seed=5,
            generator=torch.Generator().manual_seed(seed),
            token_decoding=decoding,
            digit_decoding=decoding,
        )
        return [(e.tokens, e.digits, e.breakdown["applied_mask"]) for e in episodes]

    assert run("greedy", 0) == run("greedy", 1)
    assert run("sample", 3) == run("sample", 3)
    assert run("sample", 3) != run("sample", 4)


def test_pretrained_model_gets_added_tokens_and_resized_embeddings(hf_model_dir, env_kwargs) -> None:
    vocab = ZTokenVocab(env_kwargs["num_z_tokens"])
    policy, encoder = build_policy(ZTokenModelConfig(pretrained=str(hf_model_dir)), vocab)
    assert isinstance(encoder, TokenizerEncoder)
    tokenizer = encoder.tokenizer
    assert tokenizer.pad_token is not None
    assert policy.lm.get_input_embeddings().num_embeddings == len(tokenizer)
    assert tokenizer.convert_ids_to_tokens(encoder.action_token_ids) == [
        "<Z_0>",
        "<Z_1>",
        "<Z_2>",
        "<Z_3>",
        "<ANSWER>",
    ]
    obs = np.zeros((1, 8), dtype=np.int64)
    obs[0, :6] = vocab.encode_question("12+3=") + [vocab.z_id(2)]
    batch = encoder.encode(obs)
    assert tokenizer.decode(batch.input_ids[0]) == "12+3=<Z_2><ANSWER>"
    assert batch.input_ids[0, batch.last_index[0]] == tokenizer.convert_tokens_to_ids("<Z_2>")
    sample = policy.act(batch, torch.Generator().manual_seed(0))
    assert 0 <= int(sample.tokens[0]) <= 4


def test_pretrained_policy_warm_start_step_and_checkpoint_round_trip(
    hf_model_dir, tmp_path, env_kwargs
) -> None:
    vocab = ZTokenVocab(env_kwargs["num_z_tokens"])
    policy, encoder = build_policy(ZTokenModelConfig(pretrained=str(hf_model_dir)), vocab)
    envs = ztoken_vector_env("ZTokenDigits-v1", env_kwargs, 2)
    obs, digits = collect_scripted_episodes(envs, 2, 1, 2, seed=0, rng=np.random.default_rng(0))
    loss, _ = warm_start_loss(policy, encoder.encode(obs), torch.as_tensor(digits), 1.0, 1.0)
    loss.backward()
    assert policy.lm.get_input_embeddings().weight.grad is not None
    save_checkpoint(tmp_path / "ckpt", policy, encoder, vocab.num_z_tokens)
    loaded, loaded_encoder, num_z = load_policy(tmp_path / "ckpt")
    assert num_z == 4 and isinstance(loaded_encoder, TokenizerEncoder)
    batch = encoder.encode(obs)
    torch.testing.assert_close(
        loaded(loaded_encoder.encode(obs)).token_log_probs, policy(batch).token_log_probs
    )


def test_building_and_loading_a_policy_leave_the_global_torch_rng_alone(
    hf_model_dir, tiny_model, tmp_path, env_kwargs
) -> None:
    vocab = ZTokenVocab(env_kwargs["num_z_tokens"])
    for name, model_config in (
        ("native", tiny_model),
        ("pretrained", ZTokenModelConfig(pretrained=str(hf_model_dir))),
    ):
        torch.manual_seed(0)
        state = torch.get_rng_state()
        policy, encoder = build_policy(model_config, vocab)
        assert torch.equal(torch.get_rng_state(), state), f"build_policy ({name}) used the global RNG"
        save_checkpoint(tmp_path / name, policy, encoder, vocab.num_z_tokens)
        load_policy(tmp_path / name)
        assert torch.equal(torch.get_rng_state(), state), f"load_policy ({name}) used the global RNG"


def test_dropout_is_disabled_so_the_first_minibatch_ratio_is_one(
    hf_dropout_model_dir, tmp_path, env_kwargs
) -> None:
    vocab = ZTokenVocab(env_kwargs["num_z_tokens"])
    policy, encoder = build_policy(ZTokenModelConfig(pretrained=str(hf_dropout_model_dir)), vocab)
    assert policy.lm.config.attention_dropout == 0.0
    config = ZTokenPPOConfig(
        env_kwargs=env_kwargs,
        num_envs=4,
        episodes_per_rollout=16,
        update_epochs=1,
        num_minibatches=1,
        eval_episodes=0,
        output_dir=str(tmp_path / "run"),
        progress=False,
    )
    trainer = ZTokenPPOTrainer(config, policy, encoder)
    parts = trainer.update(trainer.collect())
    assert parts["loss/clip_fraction"] == 0.0 and abs(parts["loss/approx_kl"]) < 1e-6

    save_checkpoint(tmp_path / "ckpt", policy, encoder, vocab.num_z_tokens)
    spec_file = tmp_path / "ckpt" / "policy.json"
    spec = json.loads(spec_file.read_text())
    spec["lm_config"]["attention_dropout"] = 0.5  # a checkpoint written before dropout was disabled
    spec_file.write_text(json.dumps(spec))
    write_manifest(tmp_path / "ckpt", KIND, FORMAT_VERSION)  # as if saved so (the edit broke its SHA-256)
    loaded, _, _ = load_policy(tmp_path / "ckpt")
    assert loaded.lm.config.attention_dropout == 0.0
    loaded.train()
    obs = np.stack(trainer.collect()[0].observations)
    torch.testing.assert_close(loaded(encoder.encode(obs)).values, loaded(encoder.encode(obs)).values)


@pytest.mark.gpu
def test_policy_acts_on_cuda(tiny_policy, env_kwargs) -> None:
    policy, encoder = tiny_policy
    policy.to("cuda")
    envs = ztoken_vector_env("ZTokenDigits-v1", env_kwargs, 2)
    episodes, _ = collect_episodes(
        policy, encoder, envs, 1, seed=0, generator=torch.Generator(device="cuda").manual_seed(0)
    )
    assert len(episodes) == 2
