"""Runs the ``>>>`` examples in public docstrings of the core modules."""

import doctest
import importlib

import pytest

MODULES = ["worldgym", "worldgym.config", "worldgym.spaces", "worldgym.wrappers.tool_call_text"]


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples(module_name):
    result = doctest.testmod(importlib.import_module(module_name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
