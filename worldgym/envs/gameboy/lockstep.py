"""Lockstep differential testing against PyBoy: run one ROM in both emulators and compare at checkpoints.

A checkpoint is a code address the program reaches exactly once. PyBoy records its state there through a hook;
the Warp emulator runs until the same address. Registers, cycle deltas, WRAM, HRAM and a set of IO registers
are compared; the screen too when asked (at VBlank granularity: PyBoy's sub-frame PPU timing is not exact).
On a mismatch a repro bundle (ROM, source, JSON report) is written and its path is put in the exception.
"""

from __future__ import annotations

import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from worldgym.envs.gameboy.emulator import GameBoyEmulator
from worldgym.envs.gameboy.layout import BREAK_HIT
from worldgym.envs.gameboy.rom_builder import assemble, build_rom
from worldgym.errors import WorldgymError

# IO registers whose values PyBoy models exactly at instruction boundaries. JOYP (0xFF00) is left out because
# PyBoy caches it until the next write, SB (0xFF01) because PyBoy always reads 0xFF, STAT (0xFF41) because
# PyBoy's sub-line mode timing differs, and the sound registers because this emulator has no APU.
COMPARED_IO = (0xFF04, 0xFF05, 0xFF06, 0xFF07, 0xFF0F, 0xFF40, 0xFF42, 0xFF43, 0xFF45, 0xFF47, 0xFF48,
               0xFF49, 0xFF4A, 0xFF4B, 0xFFFF)  # fmt: skip
REGISTERS = ("A", "F", "B", "C", "D", "E", "H", "L", "SP", "PC")
PYBOY_BOOT_FRAMES = 80  # PyBoy runs its own boot ROM first; the logo animation takes about 70 frames
# Byte offset of the CPU cycle counter in a PyBoy 2.x DMG save state (header 6 bytes, registers 19 bytes).
_PYBOY_CYCLES_OFFSET = 25
PYBOY_SHADES = {0xFF: 0, 0x99: 1, 0x55: 2, 0x00: 3}

# Prologue that puts both emulators in the same state: LCD off (waited for VBlank), DIV, IF, IE and all
# registers zeroed. Programs using it start at the label ``main`` and continue at ``test_start``.
SYNC_PROLOGUE = """
main:
    di
    ld sp, $FFFE
.sync_wait:
    ldh a, ($44)
    cp 144
    jr c, .sync_wait
    xor a
    ldh ($40), a
    ldh ($04), a
    ldh ($0F), a
    ldh ($FF), a
    ldh ($07), a
    ld hl, $C000
.sync_clear:
    ld (hl+), a
    bit 6, h
    jr z, .sync_clear
    ld bc, 0
    ld de, 0
    ld hl, 0
    push bc
    pop af
    ld sp, $DFF0
"""


class LockstepMismatch(WorldgymError, AssertionError):
    """The Warp emulator and PyBoy disagree at a checkpoint; the message names the field and the repro bundle.

    An ``AssertionError`` (a failed equivalence check) and a :class:`~worldgym.errors.WorldgymError`."""


@dataclass
class Snapshot:
    """Comparable state at one checkpoint."""

    registers: dict[str, int]
    cycles: int
    wram: np.ndarray
    hram: np.ndarray
    io: dict[int, int]
    screen: np.ndarray | None = None


def _pyboy(rom_path: Path):
    try:
        from pyboy import PyBoy
    except ImportError as exc:  # pragma: no cover - dev extra
        raise ImportError("lockstep tests need PyBoy: pip install 'worldgym[dev]' (pyboy>=2.8)") from exc
    return PyBoy(str(rom_path), window="null", sound_emulated=False, no_input=False)


def _pyboy_snapshot(pyboy, with_screen: bool) -> Snapshot:
    buffer = io.BytesIO()
    pyboy.save_state(buffer)
    state = buffer.getvalue()
    regs = pyboy.register_file
    registers = {"A": regs.A, "F": regs.F, "B": regs.B, "C": regs.C, "D": regs.D, "E": regs.E,
                 "H": regs.HL >> 8, "L": regs.HL & 0xFF, "SP": regs.SP, "PC": regs.PC}  # fmt: skip
    memory = pyboy.memory
    screen = None
    if with_screen:
        rgb = pyboy.screen.ndarray[:, :, 0]
        screen = np.vectorize(PYBOY_SHADES.get)(rgb).astype(np.uint8)
    return Snapshot(
        registers=registers,
        cycles=int.from_bytes(state[_PYBOY_CYCLES_OFFSET : _PYBOY_CYCLES_OFFSET + 8], "little"),
        wram=np.array(memory[0xC000:0xE000], dtype=np.uint8),
        hram=np.array(memory[0xFF80:0xFFFF], dtype=np.uint8),
        io={addr: memory[addr] for addr in COMPARED_IO},
        screen=screen,
    )


def _warp_snapshot(emu: GameBoyEmulator, with_screen: bool) -> Snapshot:
    regs = emu.registers()
    mem = emu.memory()
    io_values = {addr: emu.read(addr) for addr in COMPARED_IO}
    return Snapshot(
        registers={name: regs[name] for name in REGISTERS},
        cycles=int(emu.cycles()[0]),
        wram=mem[0xC000 - 0x8000 : 0xE000 - 0x8000].copy(),
        hram=mem[0xFF80 - 0x8000 : 0xFFFF - 0x8000].copy(),
        io=io_values,
        screen=emu.screens()[0] if with_screen else None,
    )


@dataclass
class LockstepResult:
    """Snapshots of both emulators, keyed by checkpoint label, in the order reached."""

    pyboy: dict[str, Snapshot]
    warp: dict[str, Snapshot]


def _differences(label: str, ref: Snapshot, got: Snapshot, ref0: Snapshot, got0: Snapshot,
                 compare_cycles: bool) -> list[str]:  # fmt: skip
    problems = [f"{label}: register {name} pyboy={ref.registers[name]:#x} warp={got.registers[name]:#x}"
                for name in REGISTERS if ref.registers[name] != got.registers[name]]  # fmt: skip
    if compare_cycles and ref.cycles - ref0.cycles != got.cycles - got0.cycles:
        problems.append(f"{label}: cycles since first checkpoint pyboy={ref.cycles - ref0.cycles} "
                        f"warp={got.cycles - got0.cycles}")  # fmt: skip
    for name, base in (("wram", 0xC000), ("hram", 0xFF80)):
        diff = np.flatnonzero(getattr(ref, name) != getattr(got, name))
        if diff.size:
            addr = base + int(diff[0])
            problems.append(f"{label}: {diff.size} {name} bytes differ, first at {addr:#06x} "
                            f"pyboy={int(getattr(ref, name)[diff[0]]):#04x} warp={int(getattr(got, name)[diff[0]]):#04x}")  # fmt: skip
    problems += [f"{label}: io {addr:#06x} pyboy={ref.io[addr]:#04x} warp={got.io[addr]:#04x}"
                 for addr in COMPARED_IO if ref.io[addr] != got.io[addr]]  # fmt: skip
    if ref.screen is not None and got.screen is not None:
        diff = np.argwhere(ref.screen != got.screen)
        if diff.size:
            y, x = diff[0]
            problems.append(f"{label}: {len(diff)} screen pixels differ, first at y={y} x={x} "
                            f"pyboy={ref.screen[y, x]} warp={got.screen[y, x]}")  # fmt: skip
    return problems


def write_repro_bundle(rom: bytes, source: str, problems: list[str], directory: Path | None = None) -> Path:
    """Write ROM, source and a JSON list of problems into a fresh directory; returns it."""
    root = Path(tempfile.mkdtemp(prefix="gameboy_lockstep_", dir=directory))
    (root / "test.gb").write_bytes(rom)
    (root / "test.asm").write_text(source)
    (root / "mismatch.json").write_text(json.dumps({"problems": problems}, indent=2))
    return root


def run_lockstep(
    source: str,
    checkpoints: list[str],
    compare_cycles: bool = True,
    screen_frames: int = 0,
    max_frames: int = 600,
    repro_dir: Path | None = None,
    **rom_options,
) -> LockstepResult:
    """Assemble ``source``, run it in PyBoy and the Warp emulator, compare at each checkpoint label in order.

    With ``screen_frames`` > 0 both emulators run that many more frames after the last checkpoint (the program
    must idle there, e.g. in a ``jr`` loop) and their screens are compared. Raises LockstepMismatch.
    """
    rom = build_rom(source, **rom_options)
    _, symbols = assemble(source, len(rom))
    missing = [label for label in checkpoints if label not in symbols]
    if missing:
        raise ValueError(f"checkpoint labels {missing} are not defined in the source")
    with tempfile.TemporaryDirectory(prefix="gameboy_rom_") as tmp:
        rom_path = Path(tmp) / "test.gb"
        rom_path.write_bytes(rom)
        pyboy = _pyboy(rom_path)
        try:
            ref = _run_pyboy(pyboy, symbols, checkpoints, screen_frames, max_frames)
        finally:
            pyboy.stop(save=False)
    emu = GameBoyEmulator(rom, num_envs=1)
    got: dict[str, Snapshot] = {}
    for label in checkpoints:
        emu.run_frames(max_frames, render=False, break_pc=symbols[label])
        if int(emu.machines.st.numpy()[0, BREAK_HIT]) != 1:
            problem = [
                f"{label}: warp emulator never reached {symbols[label]:#06x} within {max_frames} frames"
            ]
            raise LockstepMismatch(
                "\n".join(problem) + f"\nrepro: {write_repro_bundle(rom, source, problem, repro_dir)}"
            )
        got[label] = _warp_snapshot(emu, with_screen=False)
    if screen_frames > 0:
        emu.run_frames(screen_frames, render=True)
        got[checkpoints[-1]].screen = emu.screens()[0]
    problems: list[str] = []
    first = checkpoints[0]
    for label in checkpoints:
        if label not in ref:
            problems.append(f"{label}: pyboy never reached {symbols[label]:#06x}")
            continue
        problems += _differences(label, ref[label], got[label], ref[first], got[first], compare_cycles)
    if problems:
        bundle = write_repro_bundle(rom, source, problems, repro_dir)
        raise LockstepMismatch("\n".join(problems[:20]) + f"\nrepro bundle: {bundle}")
    return LockstepResult(ref, got)


def _run_pyboy(pyboy, symbols: dict[str, int], checkpoints: list[str], screen_frames: int,
               max_frames: int) -> dict[str, Snapshot]:  # fmt: skip
    records: dict[str, Snapshot] = {}

    def record(label: str) -> None:
        if label not in records:
            records[label] = _pyboy_snapshot(pyboy, with_screen=False)

    for label in checkpoints:
        address = symbols[label]
        pyboy.hook_register(0 if address < 0x4000 else 1, address, record, label)
    pyboy.tick(PYBOY_BOOT_FRAMES, False)
    for _ in range(max_frames):
        if len(records) == len(checkpoints):
            break
        pyboy.tick(1, False)
    if screen_frames > 0 and checkpoints[-1] in records:
        # One frame per tick: PyBoy's window line counter only resets in frames it renders.
        for _ in range(screen_frames):
            pyboy.tick(1, True)
        records[checkpoints[-1]].screen = _pyboy_snapshot(pyboy, with_screen=True).screen
    return records
