"""Docstring examples of the Game Boy modules and the play_gameboy example run end to end."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "play_gameboy.py"


@pytest.mark.parametrize("module_name", ["worldgym.envs.gameboy.rom_builder"])
def test_docstring_examples(module_name: str) -> None:
    result = doctest.testmod(importlib.import_module(module_name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_play_example_greedy_policy_reaches_the_goal(tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("play_gameboy", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    summary = module.main(module.Args(num_envs=4, steps=40, log=tmp_path / "play.jsonl"))
    assert summary["successes"] >= 4 and summary["successes"] == summary["episodes"]
    assert len((tmp_path / "play.jsonl").read_text().splitlines()) == 40
