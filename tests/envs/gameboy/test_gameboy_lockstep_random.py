"""Randomised single-instruction lockstep tests against PyBoy: every non-branch base and CB opcode."""

from __future__ import annotations

import re

import pytest
from gameboy_programs import TESTABLE, drawn_templates, random_instruction_program

from worldgym.envs.gameboy.lockstep import SYNC_PROLOGUE, run_lockstep

pytest.importorskip("pyboy")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_instructions_match_pyboy(seed: int, repro_dir) -> None:
    body, labels = random_instruction_program(seed, count=300)
    run_lockstep(SYNC_PROLOGUE + body, labels, repro_dir=repro_dir)


def _pattern(template: str) -> re.Pattern[str]:
    """A template with its operand placeholders (n8, n16, a8, a16, e8) turned into what _fill writes."""
    text = re.escape(template)
    for placeholder, filled in (("a16", r"\$[0-9A-F]{4}"), ("a8", r"\$[0-9A-F]{2}"), ("n16", r"\$[0-9A-F]{4}"),
                                ("n8", r"\$[0-9A-F]{2}"), ("e8", r"-?\d+")):  # fmt: skip
        text = text.replace(placeholder, filled)
    return re.compile(text)


def test_random_programs_cover_every_testable_template() -> None:
    seeds, count = (0, 1, 2), 300
    drawn: set[str] = set()
    for seed in seeds:
        templates = drawn_templates(seed, count)
        body, _ = random_instruction_program(seed, count)
        lines = body.splitlines()
        # Each block is its label, 8 lines setting registers, then the instruction under test.
        instructions = [lines[lines.index(f"block_{i}:") + 9].strip() for i in range(count)]
        for template, instruction in zip(templates, instructions, strict=True):
            assert _pattern(template).fullmatch(instruction), (template, instruction)
        drawn.update(templates)
    assert drawn == set(TESTABLE)  # every testable base and CB template, operands included
