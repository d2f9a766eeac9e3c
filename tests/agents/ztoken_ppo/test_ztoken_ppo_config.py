"""Config validation: every bad field raises a ValueError naming the field, the value and the fix."""

from __future__ import annotations

import re

import pytest

from worldgym.agents.ztoken_ppo import ZTokenModelConfig, ZTokenPPOConfig, ZTokenWarmStartConfig


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"clip_eps": 1.5}, "clip_eps=1.5 is invalid: use a value in (0, 1), e.g. 0.2"),
        ({"advantage": "vtrace"}, "advantage='vtrace' is invalid: use one of ['terminal', 'gae']"),
        ({"digit_actions": "beam"}, "digit_actions='beam' is invalid: use one of ['sample', 'greedy']"),
        (
            {"eval_token_decoding": "beam"},
            "eval_token_decoding='beam' is invalid: use one of ['greedy', 'sample']",
        ),
        (
            {"num_envs": 3, "episodes_per_rollout": 8},
            "episodes_per_rollout=8 is invalid: use a multiple of num_envs=3",
        ),
        ({"update_epochs": 0}, "update_epochs=0 is invalid: use an integer >= 1"),
        ({"num_envs": True}, "num_envs=True is invalid: use an integer >= 1"),
        ({"num_minibatches": 2.0}, "num_minibatches=2.0 is invalid: use an integer >= 1"),
        ({"eval_episodes": True}, "eval_episodes=True is invalid"),
        ({"learning_rate": 0.0}, "learning_rate=0.0 is invalid"),
        ({"gae_lambda": 1.5}, "gae_lambda=1.5 is invalid: use a value in [0, 1]"),
        ({"eval_episodes": 10, "num_envs": 4, "episodes_per_rollout": 8}, "eval_episodes=10 is invalid"),
    ],
)
def test_ppo_config_rejects_bad_values(kwargs, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ZTokenPPOConfig(**kwargs)


def test_warm_start_and_model_configs_validate() -> None:
    with pytest.raises(ValueError, match=re.escape("z_min=(3, 1) is invalid: need 0 <= z_min <= z_max")):
        ZTokenWarmStartConfig(z_min=3, z_max=1)
    with pytest.raises(
        ValueError, match=re.escape("lr_schedule='cosine' is invalid: use one of ['onecycle', 'constant']")
    ):
        ZTokenWarmStartConfig(lr_schedule="cosine")
    with pytest.raises(ValueError, match=re.escape("num_envs=True is invalid: use an integer >= 1")):
        ZTokenWarmStartConfig(num_envs=True)
    with pytest.raises(ValueError, match=re.escape("hidden_size=False is invalid: use an integer >= 1")):
        ZTokenModelConfig(hidden_size=False)
    with pytest.raises(ValueError, match=re.escape("num_kv_heads=3 is invalid: it must divide num_heads=4")):
        ZTokenModelConfig(num_kv_heads=3)


def test_defaults_are_valid_and_serialisable() -> None:
    assert ZTokenPPOConfig().to_dict()["clip_eps"] == 0.2


def test_a_saved_config_dict_round_trips() -> None:
    config = ZTokenPPOConfig(model=ZTokenModelConfig(hidden_size=32, seed=3), init_checkpoint="runs/warm")
    assert ZTokenPPOConfig(**config.to_dict()) == config
    assert config.to_dict()["model"]["hidden_size"] == 32
