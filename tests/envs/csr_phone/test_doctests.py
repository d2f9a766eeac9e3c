"""Runs the ``>>>`` examples in the CSRPhone-v0 modules' docstrings."""

import doctest
import importlib

import pytest

MODULES = ["worldgym.envs.csr_phone", "worldgym.envs.csr_phone.world", "worldgym.envs.csr_phone.phrases"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    failures, tried = doctest.testmod(importlib.import_module(name))
    assert tried > 0 and failures == 0
