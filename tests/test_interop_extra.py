"""Without the ``interop`` extra, worldgym imports and runs; the modules that need it raise an ImportError naming
the install, and ``gym.make`` of their ids says the same."""

from __future__ import annotations

import importlib
import sys

import gymnasium as gym
import pytest

import worldgym
import worldgym.wrappers
from worldgym.registration import INTEROP_ENV_SPECS

NEEDS = {  # module -> the top-level package of the dependency it needs
    "worldgym.serve": "openenv",
    "worldgym.wrappers.openenv": "openenv",
    "worldgym.envs.reasoning_gym.env": "reasoning_gym",
}
INSTALL = "install worldgym with the `interop` extra (pip install 'worldgym[interop]')"


def _hide(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    for name in [name for name in sys.modules if name.split(".")[0] == package]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, package, None)
    for name in [name for name in sys.modules if name.startswith(("worldgym.serve", "worldgym.wrappers.openenv",
                                                                  "worldgym.envs.reasoning_gym"))]:
        monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize(("module", "package"), NEEDS.items())
def test_a_module_that_needs_the_extra_names_the_install(monkeypatch, module, package):
    _hide(monkeypatch, package)
    with pytest.raises(ImportError, match=r"needs .*" + INSTALL.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        importlib.import_module(module)


def test_the_interop_ids_are_registered_and_say_what_they_need(monkeypatch):
    assert set(INTEROP_ENV_SPECS) <= set(gym.registry)
    _hide(monkeypatch, "openenv")
    _hide(monkeypatch, "reasoning_gym")
    with pytest.raises(ImportError, match="interop"):
        gym.make("ReasoningGym-v0")
    with pytest.raises(ImportError, match="interop"):
        gym.make("worldgym/OpenEnv-v0", base_url="http://127.0.0.1:1")
    with pytest.raises(ImportError, match="interop"):
        worldgym.wrappers.OpenEnvGym  # noqa: B018
