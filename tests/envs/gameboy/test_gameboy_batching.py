"""Batched clock catch-up is exact: batched runs equal one-instruction-at-a-time runs, state for state."""

from __future__ import annotations

import numpy as np
import pytest
from gameboy_programs import INTERRUPT_VECTORS

from worldgym.envs.gameboy import layout as L
from worldgym.envs.gameboy.emulator import GameBoyEmulator
from worldgym.envs.gameboy.rom_builder import build_rom

# Never matches a 16-bit PC, but makes the kernel end each batch after one instruction (the reference path).
# The lockstep tests check that path against PyBoy; this file checks batched runs against it.
ONE_INSTRUCTION_BATCHES = 0x10000

# Every interrupt source on, the timer at its fastest period, serial transfers back to back, DIV/TAC writes,
# HALT, EI/DI, OAM DMA and LCD toggles in a CPU-bound loop; the handlers count themselves at $C011-$C014 and
# log DIV, TIMA and LY to $C100-$C1FF as they run.
STRESS_SOURCE = INTERRUPT_VECTORS + """
main:
    di
    ld sp, $DFF0
    xor a
    ld ($C000), a
    ld a, $F0
    ldh ($06), a
    ld a, $05
    ldh ($07), a
    ld a, 50
    ldh ($45), a
    ld a, $68
    ldh ($41), a
    ld a, $0F
    ldh ($FF), a
    ld a, $81
    ldh ($02), a
    xor a
    ldh ($0F), a
    ei
loop:
    ld hl, $C200
    ld b, 0
inner:
    ld a, (hl)
    add a, b
    daa
    ld (hl+), a
    swap a
    rl b
    inc b
    ld a, l
    cp $60
    jr nz, inner
    ldh ($04), a
    ld a, ($C002)
    inc a
    ld ($C002), a
    and 7
    jr nz, no_halt
    halt
    nop
no_halt:
    cp 3
    jr nz, no_di
    di
    ld a, $C2
    ldh ($46), a
    ei
no_di:
    cp 5
    jr nz, loop
    ld a, ($C002)
    and $38
    jr nz, loop
    ldh a, ($40)
    xor $80
    ldh ($40), a
    jr loop
log_state:
    push hl
    push af
    ld l, a
    ld h, $C0
    set 4, l
    inc (hl)
    ld a, ($C000)
    ld l, a
    ld h, $C1
    pop af
    ld (hl+), a
    ldh a, ($04)
    ld (hl+), a
    ldh a, ($05)
    ld (hl+), a
    ldh a, ($44)
    ld (hl+), a
    ld a, l
    ld ($C000), a
    pop hl
    ret
vblank_isr:
    push af
    ld a, 1
    call log_state
    pop af
    reti
stat_isr:
    push af
    ld a, 2
    call log_state
    pop af
    reti
timer_isr:
    push af
    ld a, 3
    call log_state
    ldh a, ($07)
    xor $01
    ldh ($07), a
    pop af
    reti
serial_isr:
    push af
    ld a, 4
    call log_state
    ld a, $55
    ldh ($01), a
    ld a, $81
    ldh ($02), a
    pop af
    reti
"""


def _comparable(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """State arrays without the batch bookkeeping column (which instruction last synced)."""
    compared = {name: state[name].copy() for name in ("st", "mem", "cram", "cycles", "screen", "serial")}
    compared["st"][:, L.SYNC_FLAG] = 0
    return compared


def _run(rom: bytes, per_instruction: bool, max_cycles: int = 0) -> list[dict[str, np.ndarray]]:
    emu = GameBoyEmulator(rom, num_envs=2)
    break_pc = ONE_INSTRUCTION_BATCHES if per_instruction else -1
    states = []
    for chunk in range(6):
        buttons = np.array([1 << (chunk % 8), 0], dtype=np.int32)
        emu.run_frames(
            4, buttons=buttons, press_frames=2, render=True, break_pc=break_pc, max_cycles=max_cycles
        )
        states.append(_comparable(emu.save_state()))
    return states


@pytest.mark.parametrize("max_cycles", [0, 12_345], ids=["frames", "cycle_limit"])
def test_batched_run_equals_one_instruction_batches(max_cycles: int) -> None:
    rom = build_rom(STRESS_SOURCE, title="BATCH")
    batched = _run(rom, per_instruction=False, max_cycles=max_cycles)
    reference = _run(rom, per_instruction=True, max_cycles=max_cycles)
    for chunk, (got, want) in enumerate(zip(batched, reference)):
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name} after chunk {chunk}")
    counts = reference[-1]["mem"][0, 0xC011 - L.MEM_BASE : 0xC015 - L.MEM_BASE]
    assert (counts > 0).all(), f"interrupt counts (VBlank, STAT, timer, serial) {counts.tolist()}"
    assert reference[-1]["cycles"][0] > 0
