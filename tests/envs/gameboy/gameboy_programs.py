"""Seeded generators of SM83 test programs: random single instructions with random register states."""

from __future__ import annotations

import numpy as np

from worldgym.envs.gameboy.isa import BASE_TEMPLATES, CB_TEMPLATES

_SKIP = ("JR", "JP", "CALL", "RET", "RST", "HALT", "STOP", "DI", "EI", "ILLEGAL", "PREFIX")
# Jumps from the four interrupt vectors to handlers named vblank_isr, stat_isr, timer_isr and serial_isr;
# code after it starts at $150.
INTERRUPT_VECTORS = """
.org $40
    jp vblank_isr
.org $48
    jp stat_isr
.org $50
    jp timer_isr
.org $58
    jp serial_isr
.org $150
"""
ORDER_SEED = 1234  # seeds 0, 1, 2, ... walk one fixed permutation of TESTABLE, so together they cover it all
TESTABLE = [t for t in BASE_TEMPLATES if not t.startswith(_SKIP)] + list(CB_TEMPLATES)


def _fill(template: str, rng: np.random.Generator) -> str:
    text = template
    if "(a16)" in text:
        text = text.replace("(a16)", f"(${int(rng.integers(0xC100, 0xDF00)):04X})")
    if "(a8)" in text:
        text = text.replace("(a8)", f"(${int(rng.integers(0x80, 0xFE)):02X})")
    if "SP+e8" in text or "SP,e8" in text:
        text = text.replace("e8", str(int(rng.integers(-128, 128))))
    text = text.replace("n16", f"${int(rng.integers(0, 0x10000)):04X}")
    return text.replace("n8", f"${int(rng.integers(0, 256)):02X}")


def drawn_templates(seed: int, count: int) -> list[str]:
    """The TESTABLE templates that ``random_instruction_program(seed, count)`` runs, in program order."""
    order = np.random.default_rng(ORDER_SEED).permutation(len(TESTABLE))
    return [TESTABLE[int(order[(seed * count + i) % len(order)])] for i in range(count)]


def random_instruction_program(seed: int, count: int) -> tuple[str, list[str]]:
    """A program of ``count`` blocks, each loading random registers then running one random instruction.

    Returns the source (to be appended to the sync prologue) and the checkpoint labels, one before the first
    block and one after each instruction. Consecutive seeds take consecutive slices of one permutation of
    TESTABLE, so seeds 0..k cover every opcode once (k + 1) * count >= len(TESTABLE).
    """
    rng = np.random.default_rng(seed)
    lines, labels = ["test_start:"], []
    for i, template in enumerate(drawn_templates(seed, count)):
        c_value = int(rng.integers(0x80, 0xFE)) if "(C)" in template else int(rng.integers(0, 256))
        af = (int(rng.integers(0, 256)) << 8) | (int(rng.integers(0, 16)) << 4)
        labels.append(f"block_{i}")
        lines += [
            f"block_{i}:",
            "    ld sp, $DFF0",
            f"    ld bc, ${af:04X}",
            "    push bc",
            "    pop af",
            f"    ld bc, ${int(rng.integers(0xC1, 0xDF)):02X}{c_value:02X}",
            f"    ld de, ${int(rng.integers(0xC100, 0xDF00)):04X}",
            f"    ld hl, ${int(rng.integers(0xC100, 0xDF00)):04X}",
            f"    ld sp, ${int(rng.integers(0xC100, 0xDF00)):04X}",
            f"    {_fill(template, rng)}",
        ]
    labels.append("program_end")
    lines += ["program_end:", "    nop", ".idle:", "    jr .idle"]
    return "\n".join(lines), labels
