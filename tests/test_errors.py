"""Every error type the library raises on purpose derives from ``WorldgymError`` and from a built-in exception."""

import pytest

from worldgym.agents.dreamer_v3.metrics import TrainingFailure
from worldgym.agents.dreamer_v3.replay import ReplayNotReadyError
from worldgym.agents.dual_lora.debug import UserError
from worldgym.agents.llm.pretrained import ModelNotInstalledError
from worldgym.envs.gameboy.errors import AssemblyError, HeaderChecksumError, RomFileError, StateError
from worldgym.errors import (
    CartridgeError,
    CheckpointError,
    DatasetError,
    RemoteEnvError,
    RemoteEnvSchemaError,
    WorldgymError,
)

BUILT_IN = {CheckpointError: ValueError, DatasetError: ValueError, CartridgeError: ValueError,
            ModelNotInstalledError: ImportError, ReplayNotReadyError: RuntimeError, TrainingFailure: RuntimeError,
            RomFileError: ValueError, HeaderChecksumError: ValueError, AssemblyError: ValueError,
            StateError: ValueError, UserError: Exception, RemoteEnvError: ConnectionError,
            RemoteEnvSchemaError: ValueError}


@pytest.mark.parametrize(("error", "built_in"), BUILT_IN.items(), ids=lambda value: value.__name__)
def test_each_error_is_a_worldgym_error_and_its_built_in(error, built_in):
    assert issubclass(error, WorldgymError) and issubclass(error, built_in)


def test_one_except_clause_catches_them():
    with pytest.raises(WorldgymError, match="bad file"):
        raise CheckpointError("bad file")
