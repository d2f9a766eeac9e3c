"""MBC3 real-time clock: registers, latch, halt, day carry, odd values, save states; checked against PyBoy.

PyBoy 2.8 advances its clock by emulated CPU cycles between clock accesses (it uses the host clock only when
two accesses fall on the same cycle count, which these programs avoid), so both emulators must agree exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from worldgym.envs.gameboy import layout as L
from worldgym.envs.gameboy.emulator import GameBoyEmulator
from worldgym.envs.gameboy.lockstep import SYNC_PROLOGUE, run_lockstep
from worldgym.envs.gameboy.rom_builder import build_rom

MBC3_TIMER_RAM = {"cartridge_type": 0x10, "ram_size_code": 0x03}
RESULTS = 0xC010  # the program stores each latched S, M, H, DL, DH reading in 8-byte slots from here

# Helpers: set_clock writes S M H DL DH from the 5 bytes at de; latch_and_read stores the latched registers
# at hl; wait_quarters waits about d quarter seconds (28 T-cycles x 37449 per quarter, plus call overhead).
HELPERS = """
set_clock:
    ld a, $08
.set_next:
    ld ($4000), a
    ld b, a
    ld a, (de)
    ld ($A000), a
    inc de
    ld a, b
    inc a
    cp $0D
    jr nz, .set_next
    ret

latch_and_read:
    xor a
    ld ($6000), a
    inc a
    ld ($6000), a
read_latched:
    ld a, $08
.read_next:
    ld ($4000), a
    ld b, a
    ld a, ($A000)
    ld (hl+), a
    ld a, b
    inc a
    cp $0D
    jr nz, .read_next
    ret

wait_quarters:
    ld bc, 37449
.spin:
    dec bc
    ld a, b
    or c
    jr nz, .spin
    dec d
    jr nz, wait_quarters
    ret
"""


def _program(body: str) -> str:
    return "\n".join([SYNC_PROLOGUE, "test_start:", "    ld a, $0A", "    ld ($0000), a", body, "done:",
                      "    nop", ".idle:", "    jr .idle", HELPERS])  # fmt: skip


def _slot(index: int) -> str:
    return f"    ld hl, ${RESULTS + 8 * index:04X}\n    call latch_and_read"


def _wait(quarters: int) -> str:
    return f"    ld d, {quarters}\n    call wait_quarters"


def _set(label: str) -> str:
    return f"    ld de, {label}\n    call set_clock"


CLOCK_SCRIPT = "\n".join([
    _set("day_511_end"), _slot(0),          # 23:59:58, day 511
    _wait(6), _slot(1),                      # 1.5 s later: 23:59:59
    _wait(4), _slot(2),                      # 2.5 s: 00:00:00 day 0, carry set
    "    ld a, $0C\n    ld ($4000), a\n    ld a, $C0\n    ld ($A000), a",  # halt (keeping the carry)
    _wait(4), _slot(3),                      # halted: still 00:00:00
    "    ld a, $0C\n    ld ($4000), a\n    xor a\n    ld ($A000), a",  # run again, clear the carry
    _wait(3), _slot(4),                      # ~0.5 s before the halt + 0.75 s after: 00:00:01
    "    ld a, 1\n    ld ($6000), a",        # a second 1 without a 0 in between does not latch
    _wait(4), f"    ld hl, ${RESULTS + 8 * 5:04X}\n    call read_latched",
    _set("odd_values"), _wait(5), _slot(6),  # S=62 M=5 H=31: S counts 62 -> 63 after 1 s
    _wait(4), _slot(7),                      # S 63 -> 0 without carrying into M
    _set("day_255_end"), _wait(5), _slot(8),  # day 255 23:59:59 -> day 256: DL 0, DH bit 0
    "    jp done",
    "day_511_end:\n    db 58, 59, 23, $FF, $01",
    "odd_values:\n    db 62, 5, 31, 7, $00",
    "day_255_end:\n    db 59, 59, 23, $FF, $00",
])  # fmt: skip
EXPECTED = [
    (58, 59, 23, 0xFF, 0x01),
    (59, 59, 23, 0xFF, 0x01),
    (0, 0, 0, 0x00, 0x80),
    (0, 0, 0, 0x00, 0xC0),
    (1, 0, 0, 0x00, 0x00),
    (1, 0, 0, 0x00, 0x00),
    (63, 5, 31, 7, 0x00),
    (0, 5, 31, 7, 0x00),
    (0, 0, 0, 0x00, 0x01),
]


def _readings(wram: np.ndarray) -> list[tuple[int, ...]]:
    start = RESULTS - 0xC000
    return [tuple(int(v) for v in wram[start + 8 * i : start + 8 * i + 5]) for i in range(len(EXPECTED))]


def test_clock_registers_latch_halt_and_carry_match_pyboy(repro_dir) -> None:
    result = run_lockstep(_program(CLOCK_SCRIPT), ["test_start", "done"], max_frames=1200,
                          repro_dir=repro_dir, title="RTC", **MBC3_TIMER_RAM)  # fmt: skip
    # run_lockstep has checked that PyBoy's WRAM equals ours; check the values themselves too
    assert _readings(result.warp["done"].wram) == EXPECTED


def _idle_rom(cartridge_type: int = 0x10, ram_size_code: int = 0x03) -> bytes:
    return build_rom("main:\n    jr main", title="IDLE", cartridge_type=cartridge_type,
                     ram_size_code=ram_size_code)  # fmt: skip


def _clock(emu: GameBoyEmulator, env: int = 0) -> tuple[list[int], int]:
    st = emu.machines.st.numpy()[env]
    return st[L.RTC_LIVE : L.RTC_LIVE + 5].tolist(), int(st[L.RTC_CYCLES])


def test_clock_counts_emulated_cycles_from_power_on() -> None:
    emu = GameBoyEmulator(_idle_rom(), num_envs=2)
    emu.run_frames(300, render=False, env_mask=np.array([True, False]))
    registers, into_second = _clock(emu)
    cycles = int(emu.cycles()[0])
    assert registers == [cycles // L.RTC_CYCLES_PER_SECOND, 0, 0, 0, 0]
    assert into_second == cycles % L.RTC_CYCLES_PER_SECOND
    assert _clock(emu, 1) == ([0, 0, 0, 0, 0], 0)  # an emulator that did not run did not age


@pytest.mark.parametrize(("cartridge_type", "ram_size_code"), [(0x0F, 0x00), (0x10, 0x03)])
def test_only_timer_cartridges_have_a_running_clock(cartridge_type: int, ram_size_code: int) -> None:
    for kind, ram, has_clock in ((cartridge_type, ram_size_code, True), (0x13, 0x03, False)):
        emu = GameBoyEmulator(_idle_rom(kind, ram), num_envs=1)
        assert emu.header.has_rtc is has_clock
        emu.run_frames(70, render=False)
        assert _clock(emu)[0][0] == int(has_clock)


def test_save_state_and_snapshots_carry_the_clock() -> None:
    emu = GameBoyEmulator(_idle_rom(), num_envs=2)
    emu.run_frames(90, render=False)
    saved = emu.save_state()
    emu.run_frames(45, render=False)
    expected = _clock(emu)
    emu.load_state(saved)
    assert _clock(emu) != expected
    emu.run_frames(45, render=False)
    assert _clock(emu) == expected and expected[0][0] == 2
    emu.restore(emu.snapshot(0), np.array([False, True]))
    assert _clock(emu, 1) == expected


def test_version_1_states_without_clock_columns_still_load() -> None:
    emu = GameBoyEmulator(_idle_rom(), num_envs=1)
    emu.run_frames(10, render=False)
    state = emu.save_state()
    legacy = {**state, "st": state["st"][:, : L.LEGACY_STATE_COLUMNS], "version": np.array([1])}
    emu.load_state(legacy)
    st = emu.machines.st.numpy()[0]
    assert np.array_equal(st[: L.LEGACY_STATE_COLUMNS], state["st"][0, : L.LEGACY_STATE_COLUMNS])
    assert _clock(emu) == ([0, 0, 0, 0, 0], 0) and st[L.RTC_PRESENT] == st[L.RTC_RUNNING] == 1
    snapshot = emu.snapshot(0)
    emu.restore({**snapshot, "st": snapshot["st"][: L.LEGACY_STATE_COLUMNS]})
    emu.run_frames(70, render=False)
    assert _clock(emu)[0][0] == 1


BANK_8_READ = """
main:
    ld a, $0A
    ld ($0000), a
    ld a, $08
    ld ($4000), a
    ld a, 42
    ld ($A000), a
    xor a
    ld ($6000), a
    inc a
    ld ($6000), a
    ld a, ($A000)
    ld ($C000), a
.idle:
    jr .idle
"""


@pytest.mark.parametrize(
    ("cartridge_type", "ram_size_code", "expected"),
    [(0x0F, 0x00, 42), (0x10, 0x03, 42), (0x13, 0x03, 0x00), (0x11, 0x00, 0xFF)],
    ids=["timer", "timer+ram", "ram-no-timer", "no-ram-no-timer"],
)
def test_clock_register_select_without_a_clock_reads_as_before(
    cartridge_type: int, ram_size_code: int, expected: int
) -> None:
    # S written as 42 then latched reads back 42 with a clock; MBC3 without one reads 0 (0xFF without RAM)
    rom = build_rom(BANK_8_READ, title="BANK8", cartridge_type=cartridge_type, ram_size_code=ram_size_code)
    emu = GameBoyEmulator(rom, num_envs=1)
    emu.run_frames(2, render=False)
    assert emu.read(0xC000) == expected
