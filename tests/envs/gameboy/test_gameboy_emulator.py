"""Emulator host API: serial output, joypad, batching, save/load, snapshots and the kernel cache setting."""

from __future__ import annotations

import numpy as np
import pytest

from worldgym.envs.gameboy import layout as L
from worldgym.envs.gameboy.emulator import STATE_FIELDS, GameBoyEmulator
from worldgym.envs.gameboy.errors import StateError
from worldgym.envs.gameboy.lockstep import SYNC_PROLOGUE
from worldgym.envs.gameboy.rom_builder import assemble, build_rom

SERIAL_PROGRAM = (
    SYNC_PROLOGUE
    + """
    ld a, $08
    ldh ($FF), a
    ld hl, message
.next:
    ld a, (hl+)
    or a
    jr z, serial_done
    ldh ($01), a
    ld a, $81
    ldh ($02), a
.wait:
    ldh a, ($02)
    bit 7, a
    jr nz, .wait
    ldh a, ($0F)
    and $08
    ld b, a
    ld a, ($C000)
    add a, b
    ld ($C000), a
    xor a
    ldh ($0F), a
    jr .next
serial_done:
    nop
.idle:
    jr .idle
message:
    db "PASSED", 0
"""
)

JOYPAD_PROGRAM = (
    SYNC_PROLOGUE
    + """
    ld a, $10
    ldh ($FF), a
    xor a
    ldh ($0F), a
loop:
    ld a, $20
    ldh ($00), a
    ldh a, ($00)
    ld ($C000), a
    ld a, $10
    ldh ($00), a
    ldh a, ($00)
    ld ($C001), a
    ldh a, ($0F)
    ld ($C002), a
    jr loop
"""
)


def test_serial_output_is_captured_and_raises_interrupts() -> None:
    emu = GameBoyEmulator(build_rom(SERIAL_PROGRAM), num_envs=1)
    _, symbols = assemble(SERIAL_PROGRAM)
    emu.run_frames(120, break_pc=symbols["serial_done"])
    assert emu.machines.st.numpy()[0, L.BREAK_HIT] == 1
    assert emu.serial_output() == b"PASSED"
    assert emu.read(0xC000) == 6 * 8  # the serial interrupt flag rose once per byte
    assert emu.read(0xFF01) == 0xFF  # no link partner: 0xFF shifted in


@pytest.mark.parametrize(
    ("buttons", "directions", "actions"),
    [
        (0, 0xEF, 0xDF),
        (1 << L.BUTTON_BITS["right"] | 1 << L.BUTTON_BITS["up"], 0xEA, 0xDF),
        (1 << L.BUTTON_BITS["a"] | 1 << L.BUTTON_BITS["start"], 0xEF, 0xD6),
    ],
)
def test_joypad_register_reads_selected_buttons(buttons: int, directions: int, actions: int) -> None:
    emu = GameBoyEmulator(build_rom(JOYPAD_PROGRAM), num_envs=1)
    emu.run_frames(5)  # let the program clear IF before anything is pressed
    emu.run_frames(10, buttons=np.array([buttons], dtype=np.int32), press_frames=10)
    assert emu.read(0xC000) == directions
    assert emu.read(0xC001) == actions
    assert bool(emu.read(0xC002) & 0x10) == (buttons != 0)  # joypad interrupt on a new press


def test_each_emulator_in_a_batch_follows_its_own_buttons() -> None:
    rom = build_rom(JOYPAD_PROGRAM)
    batch = GameBoyEmulator(rom, num_envs=3)
    presses = np.array([0, 1 << L.BUTTON_BITS["down"], 1 << L.BUTTON_BITS["b"]], dtype=np.int32)
    batch.run_frames(10, buttons=presses, press_frames=10)
    for env, press in enumerate(presses):
        single = GameBoyEmulator(rom, num_envs=1)
        single.run_frames(10, buttons=np.array([press], dtype=np.int32), press_frames=10)
        assert np.array_equal(single.memory(), batch.memory(env))
        assert single.cycles()[0] == batch.cycles()[env]


def test_env_mask_runs_only_the_chosen_emulators() -> None:
    rom = build_rom(JOYPAD_PROGRAM)
    emu = GameBoyEmulator(rom, num_envs=3)
    reference = GameBoyEmulator(rom, num_envs=1)
    emu.run_frames(2)
    reference.run_frames(2)
    skipped = {name: emu.save_state()[name][1] for name in STATE_FIELDS}
    emu.run_frames(3, buttons=np.full(3, 1 << L.BUTTON_BITS["a"], dtype=np.int32), press_frames=3,
                   env_mask=np.array([True, False, True]))  # fmt: skip
    reference.run_frames(3, buttons=np.array([1 << L.BUTTON_BITS["a"]], dtype=np.int32), press_frames=3)
    for name, value in skipped.items():
        assert np.array_equal(emu.save_state()[name][1], value), f"skipped emulator's {name!r} changed"
    for env in (0, 2):
        assert np.array_equal(emu.memory(env), reference.memory())
        assert emu.cycles()[env] == reference.cycles()[0]
    emu.run_frames(1)  # no mask again: every emulator runs
    assert (emu.cycles() > 0).all() and emu.cycles()[1] > skipped["cycles"]
    with pytest.raises(ValueError, match="env_mask must have shape"):
        emu.run_frames(1, env_mask=np.ones(2, dtype=bool))


def test_save_and_load_state_round_trip() -> None:
    emu = GameBoyEmulator(build_rom(SERIAL_PROGRAM), num_envs=2)
    emu.run_frames(3)
    state = emu.save_state()
    emu.run_frames(5)
    after = emu.save_state()
    emu.load_state(state)
    emu.run_frames(5)
    for name in ("st", "mem", "cycles", "serial"):
        assert np.array_equal(emu.save_state()[name], after[name]), name


def test_load_state_rejects_mismatched_states_without_changing_anything() -> None:
    emu = GameBoyEmulator(build_rom(SERIAL_PROGRAM), num_envs=2)
    emu.run_frames(2)
    before = emu.save_state()
    other = GameBoyEmulator(build_rom(SERIAL_PROGRAM), num_envs=3).save_state()
    with pytest.raises(StateError, match="different num_envs"):
        emu.load_state(other)
    wrong_rom = dict(before, rom_crc32=np.array([before["rom_crc32"][0] ^ 1]))
    with pytest.raises(StateError, match="different ROM"):
        emu.load_state(wrong_rom)
    assert np.array_equal(emu.save_state()["mem"], before["mem"])


def test_restore_copies_a_snapshot_into_masked_emulators_only() -> None:
    emu = GameBoyEmulator(build_rom(SERIAL_PROGRAM), num_envs=3)
    snapshot = emu.snapshot(0)
    emu.run_frames(4)
    running = emu.save_state()
    emu.restore(snapshot, np.array([False, True, False]))
    cycles = emu.cycles()
    assert cycles[1] == 0 and cycles[0] == cycles[2] == running["cycles"][0]
    assert np.array_equal(emu.memory(2), running["mem"][2])


def test_restore_rejects_snapshots_of_another_rom() -> None:
    emu = GameBoyEmulator(build_rom(SERIAL_PROGRAM), num_envs=1)
    other = GameBoyEmulator(build_rom(JOYPAD_PROGRAM), num_envs=1).snapshot(0)
    with pytest.raises(StateError, match="different ROM"):
        emu.restore(other)
    with pytest.raises(StateError, match="lacks the arrays"):
        emu.restore({"st": other["st"]})


def test_run_frames_counts_vblanks() -> None:
    emu = GameBoyEmulator(build_rom("main:\n    halt\n    jr main\n"), num_envs=1)
    emu.run_frames(1)
    start = emu.cycles()[0]
    emu.run_frames(10)
    assert emu.cycles()[0] - start == 10 * L.CYCLES_PER_FRAME


def test_kernel_cache_dir_is_configurable(tmp_path, monkeypatch) -> None:
    import warp as wp

    from worldgym.envs.gameboy.emulator import set_kernel_cache_dir

    previous = wp.config.kernel_cache_dir
    try:
        chosen = set_kernel_cache_dir(tmp_path / "kernels")
        assert chosen.is_dir() and str(chosen) in wp.config.kernel_cache_dir
    finally:
        set_kernel_cache_dir(previous)


def test_constructor_validates_num_envs() -> None:
    with pytest.raises(ValueError, match="num_envs=0 is invalid: use an integer >= 1"):
        GameBoyEmulator(build_rom(SERIAL_PROGRAM), num_envs=0)
