"""Every registered worldgym env can be made by id, also through the ``module:id`` form, and passes check_env."""

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import worldgym
from worldgym.registration import ENV_SPECS

SINGLE_ENV_IDS = [env_id for env_id, spec in ENV_SPECS.items() if spec.get("entry_point")]


@pytest.mark.parametrize("env_id", SINGLE_ENV_IDS)
def test_make_and_check_every_registered_env(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("env_id", SINGLE_ENV_IDS)
def test_module_prefixed_id_imports_worldgym(env_id):
    assert gym.make(f"worldgym:{env_id}").spec.id == env_id


def test_register_envs_is_idempotent():
    worldgym.register_envs()
    assert set(ENV_SPECS) <= set(gym.registry)


@pytest.mark.parametrize("old_id, new_id", [("CSRPhone-v0", "CSRPhone-v1"), ("MathQA-v0", "MathQA-v1"),
                                            ("ZTokenDigits-v0", "ZTokenDigits-v1")])
def test_a_retired_version_names_its_successor(old_id, new_id):
    assert old_id not in gym.registry and new_id in ENV_SPECS
    with pytest.raises(gym.error.DeprecatedEnv, match=f"Please use `{new_id}` instead"):
        gym.make(old_id)
    with pytest.raises(gym.error.DeprecatedEnv, match=f"Please use `{new_id}` instead"):
        gym.make_vec(old_id, num_envs=2)


def test_csr_warm_starts_keep_the_keys_they_shipped_with():
    from worldgym.agents.grpo.presets import grpo_presets
    from worldgym.agents.llm.warm_start import PACKAGED_WARM_STARTS

    keys = {name: preset.warm_start.key() for name, preset in grpo_presets("CSRPhone-v1").items()}
    assert keys == {"tiny": "tiny-CSRPhone-v0-ac27a8172820", "smollm2-135m": "smollm2-135m-CSRPhone-v0-dfe6e04bdcf4"}
    assert all((PACKAGED_WARM_STARTS / key / "warm_start.json").is_file() for key in keys.values())
