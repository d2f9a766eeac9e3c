"""Warm start and PPO end to end on a tiny model: it learns, logs follow the schema, resume is exact, and the
trainer has the agents' one shape (built from its config, train() -> history, evaluate(env), save/load)."""

from __future__ import annotations

import json
import re
from dataclasses import fields, replace

import gymnasium as gym
import numpy as np
import pytest
import torch

from worldgym.agents.base import AgentTrainer
from worldgym.agents.ztoken_ppo import (
    CheckpointError,
    ZTokenPPOConfig,
    ZTokenPPOTrainer,
    ZTokenWarmStartConfig,
    build_policy,
    evaluate_policy,
    load_policy,
    save_checkpoint,
    warm_start,
    ztoken_vector_env,
)
from worldgym.agents.ztoken_ppo.warm_start import collect_scripted_episodes, warm_start_loss
from worldgym.envs.ztoken import RewardBreakdown, ZTokenVocab

ROLLOUT_KEYS = {
    "id",
    "input_ids",
    "generated_ids",
    "digit_logits",
    "digit_probs",
    "actions",
    "logp_old",
    "entropy",
    "values",
} | {field.name for field in fields(RewardBreakdown)}


def _ppo_config(tmp_path, env_kwargs: dict, **overrides) -> ZTokenPPOConfig:
    settings = {
        "env_kwargs": env_kwargs,
        "num_envs": 4,
        "episodes_per_rollout": 16,
        "num_steps": 2,
        "update_epochs": 2,
        "num_minibatches": 2,
        "eval_episodes": 8,
        "eval_every": 1,
        "checkpoint_every": 1,
        "lr": 1e-3,
        "output_dir": str(tmp_path / "run"),
        "progress": False,
    }
    settings.update(overrides)
    return ZTokenPPOConfig(**settings)


def _scripted_batch(seed: int, env_kwargs: dict):
    envs = ztoken_vector_env("ZTokenDigits-v1", env_kwargs, 4)
    return collect_scripted_episodes(envs, 8, 1, 3, seed=seed, rng=np.random.default_rng(seed))


def test_warm_start_lowers_the_supervised_loss(tiny_policy, tmp_path, env_kwargs) -> None:
    policy, encoder = tiny_policy
    obs, digits = _scripted_batch(99, env_kwargs)
    with torch.no_grad():
        before, _ = warm_start_loss(policy, encoder.encode(obs), torch.as_tensor(digits), 1.0, 1.0)
    config = ZTokenWarmStartConfig(steps=30, batch_size=32, num_envs=4, z_min=1, z_max=3, learning_rate=3e-3)
    metrics = warm_start(
        policy, encoder, "ZTokenDigits-v1", env_kwargs, config, tmp_path / "warm.jsonl", progress=False
    )
    with torch.no_grad():
        after, _ = warm_start_loss(policy, encoder.encode(obs), torch.as_tensor(digits), 1.0, 1.0)
    assert after < 0.8 * before
    assert set(metrics) == {"warm/token_loss", "warm/digit_loss", "warm/train_exact_match"}
    assert len((tmp_path / "warm.jsonl").read_text().splitlines()) == 30


def test_warm_start_rejects_a_trace_longer_than_the_token_limit(tiny_policy, env_kwargs) -> None:
    policy, encoder = tiny_policy
    with pytest.raises(ValueError, match=re.escape("z_max=4 leaves no room for <ANSWER>")):
        warm_start(
            policy, encoder, "ZTokenDigits-v1", env_kwargs, ZTokenWarmStartConfig(steps=1, z_max=4), progress=False
        )


def test_ppo_updates_every_parameter_and_writes_the_rollout_schema(tiny_policy, tmp_path, env_kwargs) -> None:
    policy, encoder = tiny_policy
    save_checkpoint(tmp_path / "warm", policy, encoder, env_kwargs["num_z_tokens"])
    config = _ppo_config(tmp_path, env_kwargs, init_checkpoint=str(tmp_path / "warm"))
    trainer = ZTokenPPOTrainer(config)
    before = {name: p.detach().clone() for name, p in trainer.policy.named_parameters()}
    torch.testing.assert_close(before["digit_heads.0.weight"], policy.digit_heads[0].weight)
    history = trainer.train()
    unchanged = [n for n, p in trainer.policy.named_parameters() if torch.equal(p.detach(), before[n])]
    assert not unchanged
    assert history is trainer.history and [row["step"] for row in history] == [0, 1, 2]
    result = history[-1]
    assert result["step"] == 2 and result["env_steps"] >= 2 * 16
    assert {"eval/exact_match", "eval/digit_accuracy", "eval/z_len_mean", "loss/clip_fraction"} <= set(
        result
    )
    records = [json.loads(line) for line in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    assert len(records) == 32 and ROLLOUT_KEYS <= set(records[0])
    for record in records:
        n = record["num_generated"]
        assert (
            len(record["actions"])
            == len(record["logp_old"])
            == len(record["values"])
            == len(record["entropy"])
            == n
        )
        assert len(record["generated_ids"]) == n
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert metrics == history and "eval/exact_match" in metrics[0]


def _untimed(rows: list[dict]) -> list[dict]:
    """Metrics rows without their wall-clock figures."""
    return [{key: value for key, value in row.items() if not key.startswith("time/")} for row in rows]


def test_resume_continues_the_same_run(tmp_path, env_kwargs, tiny_model) -> None:
    straight = ZTokenPPOTrainer(_ppo_config(tmp_path / "a", env_kwargs, eval_episodes=0, model=tiny_model))
    assert straight.resume_latest() is None  # a fresh run
    straight.train()

    first = ZTokenPPOTrainer(
        _ppo_config(tmp_path / "b", env_kwargs, eval_episodes=0, num_steps=1, model=tiny_model)
    )
    first.train()
    for name in ("metrics.jsonl", "rollouts.jsonl"):  # a crash mid-write leaves a torn last line
        with (tmp_path / "b" / "run" / name).open("a") as handle:
            handle.write('{"rollout": 2, "env_st')
    resumed = ZTokenPPOTrainer(_ppo_config(tmp_path / "b", env_kwargs, eval_episodes=0, model=tiny_model))
    assert resumed.resume_latest() == first.checkpoint_path == tmp_path / "b" / "run" / "checkpoint-last"
    assert resumed.rollout_index == 1 and [row["step"] for row in resumed.history] == [1]
    history = resumed.train()
    assert _untimed(history) == _untimed(straight.history)
    for (name, a), (_, b) in zip(
        straight.policy.named_parameters(), resumed.policy.named_parameters(), strict=True
    ):
        torch.testing.assert_close(a, b, msg=name)
    for name, key in (("metrics.jsonl", "step"), ("rollouts.jsonl", "rollout")):
        lines = (tmp_path / "b" / "run" / name).read_text().splitlines()
        assert [json.loads(line)[key] for line in lines] == [
            json.loads(line)[key] for line in (tmp_path / "a" / "run" / name).read_text().splitlines()
        ]
    lines = (tmp_path / "b" / "run" / "rollouts.jsonl").read_text()
    assert lines == (tmp_path / "a" / "run" / "rollouts.jsonl").read_text()

    finished = ZTokenPPOTrainer(_ppo_config(tmp_path / "b", env_kwargs, eval_episodes=0, model=tiny_model))
    assert finished.resume_latest() == resumed.checkpoint_path
    logged = [
        json.loads(line) for line in (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert finished.train() == logged == history
    assert logged[-1]["step"] == 2 and logged[-1]["env_steps"] == resumed.env_steps


def test_a_fresh_run_in_a_used_output_dir_starts_new_logs(tiny_policy, tmp_path, env_kwargs) -> None:
    config = _ppo_config(tmp_path, env_kwargs, num_steps=1, eval_episodes=0)
    for _ in range(2):
        trainer = ZTokenPPOTrainer(config, *tiny_policy)
        trainer.train()
        trainer.close()
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in metrics] == [1]
    assert len((tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()) == 16


def test_warm_start_log_starts_fresh_on_every_run(tiny_policy, tmp_path, env_kwargs) -> None:
    config = ZTokenWarmStartConfig(steps=2, batch_size=4, num_envs=2, z_max=2)
    for _ in range(2):
        warm_start(
            *tiny_policy, "ZTokenDigits-v1", env_kwargs, config, tmp_path / "warm.jsonl", progress=False
        )
    assert [json.loads(line)["step"] for line in (tmp_path / "warm.jsonl").read_text().splitlines()] == [0, 1]


def test_bad_checkpoints_raise_typed_errors(tiny_policy, tmp_path, env_kwargs, tiny_model) -> None:
    with pytest.raises(CheckpointError, match="is not a ztoken_ppo checkpoint"):
        load_policy(tmp_path)
    policy, encoder = tiny_policy
    save_checkpoint(tmp_path / "policy_only", policy, encoder, env_kwargs["num_z_tokens"])
    with pytest.raises(CheckpointError, match="policy-only checkpoint"):
        ZTokenPPOTrainer(_ppo_config(tmp_path, env_kwargs), policy, encoder).load(tmp_path / "policy_only")
    mismatched = replace(_ppo_config(tmp_path, env_kwargs), env_kwargs={**env_kwargs, "num_z_tokens": 6})
    with pytest.raises(ValueError, match="policy has 4 Z tokens, env has 6"):
        ZTokenPPOTrainer(mismatched, policy, encoder)
    with pytest.raises(CheckpointError, match=re.escape("holds a policy over 4 Z tokens, this one has 6")):
        ZTokenPPOTrainer(mismatched).load(tmp_path / "policy_only")
    wider = replace(_ppo_config(tmp_path, env_kwargs), model=replace(tiny_model, hidden_size=64))
    with pytest.raises(CheckpointError, match="weights do not match this policy's architecture"):
        ZTokenPPOTrainer(wider).load(tmp_path / "policy_only")


def test_gae_with_greedy_digits_trains_the_token_policy_but_not_the_digit_heads(
    tiny_policy, tmp_path, env_kwargs
) -> None:
    policy, encoder = tiny_policy
    config = _ppo_config(tmp_path, env_kwargs, advantage="gae", digit_actions="greedy", num_steps=1)
    trainer = ZTokenPPOTrainer(config, policy, encoder)
    heads = [p.detach().clone() for p in policy.digit_heads.parameters()]
    embeddings = policy.lm.get_input_embeddings().weight.detach().clone()
    result = trainer.train()[-1]
    assert all(torch.equal(a, b) for a, b in zip(heads, policy.digit_heads.parameters(), strict=True))
    assert not torch.equal(embeddings, policy.lm.get_input_embeddings().weight)
    assert result["loss/value"] > 0


def test_the_trainer_has_the_agent_shape_and_builds_its_policy_from_the_config(
    tmp_path, env_kwargs, tiny_model
):
    config = _ppo_config(tmp_path, env_kwargs, num_steps=1, model=replace(tiny_model, seed=7))
    trainer = ZTokenPPOTrainer(config)
    assert isinstance(trainer, AgentTrainer) and trainer.history == []
    policy, _ = build_policy(config.model, ZTokenVocab(env_kwargs["num_z_tokens"]))
    for (name, built), (_, expected) in zip(
        trainer.policy.named_parameters(), policy.named_parameters(), strict=True
    ):
        torch.testing.assert_close(built, expected, msg=name)
    path = trainer.save(tmp_path / "saved")
    assert path == tmp_path / "saved" and load_policy(path)[2] == env_kwargs["num_z_tokens"]
    with pytest.raises(ValueError, match="needs both policy and encoder"):
        ZTokenPPOTrainer(config, policy=policy)
    with pytest.raises(TypeError, match="model must be a ZTokenModelConfig, got str"):
        ZTokenPPOConfig(model="tiny")
    trainer.close()


def test_evaluate_plays_the_env_it_is_given(tiny_policy, tmp_path, env_kwargs) -> None:
    trainer = ZTokenPPOTrainer(_ppo_config(tmp_path, env_kwargs), *tiny_policy)
    assert trainer.evaluate() == evaluate_policy(
        *tiny_policy, env_kwargs=env_kwargs, num_episodes=8, num_envs=4
    )
    train_split = ztoken_vector_env("ZTokenDigits-v1", env_kwargs, 2)
    on_train = trainer.evaluate(train_split)
    assert on_train == evaluate_policy(*tiny_policy, num_episodes=8, envs=train_split)
    assert on_train != trainer.evaluate()  # other problems than the test split's
    assert trainer.evaluate(gym.make("ZTokenDigits-v1", **env_kwargs)) == evaluate_policy(
        *tiny_policy, num_episodes=8, envs=ztoken_vector_env("ZTokenDigits-v1", env_kwargs, 1)
    )
    assert not train_split.closed  # the caller's env stays open
    next_step = gym.make_vec("ZTokenDigits-v1", num_envs=2, vectorization_mode="sync", **env_kwargs)
    with pytest.raises(ValueError, match="autoresets in mode NEXT_STEP"):
        trainer.evaluate(next_step)
    with pytest.raises(ValueError, match="env has 6 Z tokens, the policy 4"):
        trainer.evaluate(ztoken_vector_env("ZTokenDigits-v1", {**env_kwargs, "num_z_tokens": 6}, 2))
    with pytest.raises(ValueError, match="num_episodes=8 must be a multiple of num_envs=3"):
        trainer.evaluate(ztoken_vector_env("ZTokenDigits-v1", env_kwargs, 3))
    with pytest.raises(TypeError, match="env must be a gymnasium Env or VectorEnv, got str"):
        trainer.evaluate("ZTokenDigits-v1")
    with pytest.raises(ValueError, match="config.eval_episodes is 0"):
        ZTokenPPOTrainer(_ppo_config(tmp_path, env_kwargs, eval_episodes=0), *tiny_policy).evaluate()
