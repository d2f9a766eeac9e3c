"""Runs the ``>>>`` examples in the docstrings of every worldgym module (found by walking the package)."""

import doctest
import importlib
import pkgutil

import pytest

import worldgym

MODULES = sorted(info.name for info in pkgutil.walk_packages(worldgym.__path__, "worldgym."))


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_walk_finds_the_core_modules():
    assert {"worldgym.spaces", "worldgym.config", "worldgym.wrappers.tool_call_text"} <= set(MODULES)
