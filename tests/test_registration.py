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
