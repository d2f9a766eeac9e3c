"""Z-token PPO in bfloat16: float32 trainable weights and Adam state, finite float32 losses, recomputed old
log-probs, deterministic runs, float32 untouched, and checkpoints that load in either precision."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from worldgym.agents.ztoken_ppo import ZTokenPPOConfig, ZTokenPPOTrainer, build_policy
from worldgym.envs.ztoken import ZTokenVocab
from worldgym.precision import resolve_dtype

GAPS = ("precision/logprob_gap_mean", "precision/logprob_gap_max")


def _config(tmp_path, env_kwargs: dict, tiny_model, **overrides) -> ZTokenPPOConfig:
    settings = {
        "model": tiny_model,
        "env_kwargs": env_kwargs,
        "num_envs": 4,
        "episodes_per_rollout": 8,
        "num_steps": 2,
        "update_epochs": 2,
        "num_minibatches": 2,
        "eval_episodes": 4,
        "eval_every": 1,
        "lr": 1e-3,
        "output_dir": str(tmp_path / "run"),
        "progress": False,
    }
    return ZTokenPPOConfig(**{**settings, **overrides})


def _untimed(rows: list[dict]) -> list[dict]:
    return [{key: value for key, value in row.items() if not key.startswith("time/")} for row in rows]


def test_bfloat16_ppo_keeps_float32_weights_and_logs_finite_losses(tmp_path, env_kwargs, tiny_model) -> None:
    trainer = ZTokenPPOTrainer(_config(tmp_path, env_kwargs, tiny_model, dtype="bfloat16"))
    assert trainer.dtype == torch.bfloat16 and trainer.recomputes_old_logprobs
    history = trainer.train()
    assert [row["dtype"] for row in history] == ["bfloat16"] * 3
    for row in history[1:]:
        losses = [value for key, value in row.items() if key.startswith("loss/")]
        assert losses and all(math.isfinite(value) for value in losses)
        assert 0 <= row[GAPS[0]] <= row[GAPS[1]] < 0.1  # the rollout's log-probs vs the update's forward
    # the LM is trained in full: every weight and every Adam moment stays float32
    assert {p.dtype for p in trainer.policy.parameters()} == {torch.float32}
    moments = [t for state in trainer.optimizer.state.values() for t in state.values() if t.ndim > 0]
    assert moments and {t.dtype for t in moments} == {torch.float32}
    state = json.loads((trainer.checkpoint_path / "trainer_state.json").read_text())
    assert state["dtype"] == "bfloat16" and state["config"]["dtype"] == "bfloat16"


def test_bfloat16_runs_repeat_exactly(tmp_path, env_kwargs, tiny_model) -> None:
    runs = [
        ZTokenPPOTrainer(_config(tmp_path / name, env_kwargs, tiny_model, dtype="bfloat16")).train()
        for name in ("a", "b")
    ]
    assert _untimed(runs[0]) == _untimed(runs[1])


def test_float32_is_the_default_and_does_not_recompute(tmp_path, env_kwargs, tiny_model) -> None:
    default = ZTokenPPOTrainer(_config(tmp_path / "a", env_kwargs, tiny_model))
    assert default.dtype == torch.float32 and not default.recomputes_old_logprobs
    history = default.train()
    assert not any(key in row for row in history for key in GAPS)
    assert {row["dtype"] for row in history} == {"float32"}
    explicit = ZTokenPPOTrainer(_config(tmp_path / "b", env_kwargs, tiny_model, dtype="float32")).train()
    assert _untimed(explicit) == _untimed(history)
    # the rollout and the update share one forward: recomputing changes nothing in float32
    recomputed = ZTokenPPOTrainer(
        _config(tmp_path / "c", env_kwargs, tiny_model, recompute_old_logprobs=True)
    ).train()
    assert all(row[GAPS[1]] == 0.0 for row in recomputed[1:])
    assert _untimed([{k: v for k, v in row.items() if k not in GAPS} for row in recomputed]) == _untimed(history)


def test_frozen_weights_are_stored_in_bfloat16_and_trainable_ones_in_float32(
    tmp_path, env_kwargs, tiny_model
) -> None:
    policy, encoder = build_policy(tiny_model, ZTokenVocab(env_kwargs["num_z_tokens"]))
    policy.lm.get_input_embeddings().requires_grad_(False)
    trainer = ZTokenPPOTrainer(_config(tmp_path, env_kwargs, tiny_model, dtype="bfloat16"), policy, encoder)
    assert policy.lm.get_input_embeddings().weight.dtype == torch.bfloat16
    assert {p.dtype for p in policy.parameters() if p.requires_grad} == {torch.float32}
    row = trainer.train()[-1]
    assert math.isfinite(row["loss/policy"]) and math.isfinite(row["loss/value"])


@pytest.mark.parametrize(("saved", "loaded"), [("bfloat16", "float32"), ("float32", "bfloat16")])
def test_a_checkpoint_resumes_in_the_other_precision(tmp_path, env_kwargs, tiny_model, saved, loaded) -> None:
    first = ZTokenPPOTrainer(_config(tmp_path, env_kwargs, tiny_model, dtype=saved, num_steps=1))
    first.train()
    resumed = ZTokenPPOTrainer(_config(tmp_path, env_kwargs, tiny_model, dtype=loaded))
    resumed.load(first.checkpoint_path)
    assert resumed.rollout_index == 1
    for (name, a), (_, b) in zip(first.policy.named_parameters(), resumed.policy.named_parameters(), strict=True):
        torch.testing.assert_close(b, a.float(), msg=name)
    history = resumed.train()
    assert [row["dtype"] for row in history] == [saved, saved, loaded]
    assert math.isfinite(history[-1]["loss/policy"])


def test_auto_resolves_for_the_device_and_bad_values_name_the_field(tmp_path, env_kwargs, tiny_model) -> None:
    trainer = ZTokenPPOTrainer(_config(tmp_path, env_kwargs, tiny_model, dtype="auto"))
    assert trainer.dtype == resolve_dtype("auto", "cpu")
    with pytest.raises(ValueError, match=re.escape("dtype='float16' is invalid: use one of")):
        ZTokenPPOConfig(dtype="float16")
    with pytest.raises(ValueError, match=re.escape("recompute_old_logprobs='yes' is invalid")):
        ZTokenPPOConfig(recompute_old_logprobs="yes")
    config = ZTokenPPOConfig(dtype="bfloat16", recompute_old_logprobs=False)
    assert ZTokenPPOConfig(**config.to_dict()) == config
