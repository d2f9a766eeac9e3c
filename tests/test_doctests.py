"""Runs the ``>>>`` examples in the docstrings of the worldgym modules that have some to run (found by walking
the package and parsing each module's source, so collecting the tests imports nothing)."""

import doctest
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import worldgym

ALL_MODULES = sorted(info.name for info in pkgutil.walk_packages(worldgym.__path__, "worldgym."))


def _has_examples(module_name: str) -> bool:
    """Whether the module's source holds a ``>>>`` example that is not marked ``# doctest: +SKIP``."""
    source = Path(importlib.util.find_spec(module_name).origin).read_text(encoding="utf-8")
    examples = doctest.DocTestParser().get_examples(source)
    return any(not example.options.get(doctest.SKIP, False) for example in examples)


MODULES = [name for name in ALL_MODULES if _has_examples(name)]


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{module_name} shows '>>>' outside any docstring doctest finds"
    assert result.failed == 0


def test_the_walk_collects_the_modules_with_examples():
    assert {"worldgym.spaces", "worldgym.config", "worldgym.wrappers.tool_call_text"} <= set(MODULES)
    assert "worldgym.registration" in ALL_MODULES and "worldgym.registration" not in MODULES  # no examples
