"""Every error type the library raises on purpose derives from ``WorldgymError`` and from a built-in exception;
invalid settings, of a config or of an env constructor, are reported in one style."""

import re

import gymnasium as gym
import pytest

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.cartridge import CartridgeDistillConfig
from worldgym.agents.dreamer_v3 import DreamerConfig
from worldgym.agents.dreamer_v3.metrics import TrainingFailure
from worldgym.agents.dreamer_v3.replay import ReplayNotReadyError
from worldgym.agents.dual_lora.debug import UserError
from worldgym.agents.grpo import GRPOConfig
from worldgym.agents.llm.pretrained import ModelNotInstalledError
from worldgym.agents.llm.warm_start import WarmStartConfig
from worldgym.agents.ztoken_ppo import ZTokenPPOConfig
from worldgym.envs.gameboy import GameBoyEnvConfig
from worldgym.envs.gameboy.errors import AssemblyError, HeaderChecksumError, RomFileError, StateError
from worldgym.envs.gameboy.lockstep import LockstepMismatch
from worldgym.envs.longhealth import LongHealthQAEnv, generate_panel
from worldgym.envs.math_qa import MathQAEnv
from worldgym.envs.ztoken import ZTokenVocab
from worldgym.errors import (
    CartridgeError,
    CheckpointError,
    CheckpointNotFoundError,
    ConfigError,
    DatasetError,
    RemoteEnvError,
    RemoteEnvSchemaError,
    RunFileError,
    WorldgymError,
)

BUILT_IN = {CheckpointError: ValueError, CheckpointNotFoundError: FileNotFoundError, ConfigError: ValueError,
            DatasetError: ValueError, CartridgeError: ValueError,
            ModelNotInstalledError: ImportError, ReplayNotReadyError: RuntimeError, TrainingFailure: RuntimeError,
            RomFileError: ValueError, HeaderChecksumError: ValueError, AssemblyError: ValueError,
            StateError: ValueError, UserError: Exception, RemoteEnvError: ConnectionError,
            RemoteEnvSchemaError: ValueError, LockstepMismatch: AssertionError, RunFileError: ValueError}


@pytest.mark.parametrize(("error", "built_in"), BUILT_IN.items(), ids=lambda value: value.__name__)
def test_each_error_is_a_worldgym_error_and_its_built_in(error, built_in):
    assert issubclass(error, WorldgymError) and issubclass(error, built_in)


def test_one_except_clause_catches_them():
    with pytest.raises(WorldgymError, match="bad file"):
        raise CheckpointError("bad file")


# ---------------------------------------------------------------- one message style for invalid settings
ONE_STYLE = re.compile(r"^[a-z_.]+=.+ is invalid: (use|pass) .+")
INVALID_SETTINGS = {
    "GRPOConfig": lambda: GRPOConfig(num_steps=0),
    "ZTokenPPOConfig": lambda: ZTokenPPOConfig(learning_rate=-1.0),
    "DreamerConfig": lambda: DreamerConfig(checkpoint_every=-1),
    "CartridgeDistillConfig": lambda: CartridgeDistillConfig(num_steps=0),
    "WarmStartConfig": lambda: WarmStartConfig(epochs=0),
    "CSRPhone": lambda: gym.make("CSRPhone-v1", difficulty=6),
    "CSRPhone world_seed": lambda: gym.make("CSRPhone-v1", world_seed=-1),
    "MathQA": lambda: MathQAEnv(split="val"),
    "MathQA num_problems": lambda: MathQAEnv(num_problems=0),
    "LongHealthQA": lambda: LongHealthQAEnv(panel=generate_panel(2, 0), task=4),
    "LongHealthQA documents": lambda: LongHealthQAEnv(panel=generate_panel(2, 0), documents="some"),
    "ZTokenDigits": lambda: gym.make("ZTokenDigits-v1", max_new_tokens=0),
    "ZTokenDigits operand_digits": lambda: gym.make("ZTokenDigits-v1", operand_digits=5),
    "ZTokenVocab": lambda: ZTokenVocab(0),
    "GameBoy": lambda: GameBoyEnvConfig(frames_per_step=0),
    "GameBoy task": lambda: GameBoyEnvConfig(task="chess"),
}


@pytest.mark.parametrize("make", INVALID_SETTINGS.values(), ids=INVALID_SETTINGS.keys())
def test_configs_and_env_constructors_word_invalid_settings_alike(make):
    with pytest.raises(ConfigError) as raised:
        make()
    assert isinstance(raised.value, ValueError)
    assert ONE_STYLE.match(str(raised.value)), str(raised.value)
