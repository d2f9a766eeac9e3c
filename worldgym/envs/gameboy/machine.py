"""Shared state of the batched emulator: the Machines struct, register/IO constants and tiny helpers."""

# ruff: noqa: SIM102  (Warp kernels: no `and`/`or`; int(0) declares a loop variable)

from __future__ import annotations

import warp as wp

from worldgym.envs.gameboy import layout as L

wp.set_module_options({"enable_backward": False})

B_ = wp.constant(L.REG_B)
C_ = wp.constant(L.REG_C)
D_ = wp.constant(L.REG_D)
E_ = wp.constant(L.REG_E)
H_ = wp.constant(L.REG_H)
L_ = wp.constant(L.REG_L)
F_ = wp.constant(L.REG_F)
A_ = wp.constant(L.REG_A)
SP_ = wp.constant(L.SP)
PC_ = wp.constant(L.PC)
IME_ = wp.constant(L.IME)
HALTED_ = wp.constant(L.HALTED)
EI_ = wp.constant(L.EI_PENDING)
DIV_ = wp.constant(L.DIV_COUNTER)
DOT_ = wp.constant(L.DOT)
LINE_ = wp.constant(L.LINE)
ROMB_ = wp.constant(L.ROM_BANK)
RAMB_ = wp.constant(L.RAM_BANK)
RAMEN_ = wp.constant(L.RAM_ENABLE)
MODE_ = wp.constant(L.BANK_MODE)
MAPPER_ = wp.constant(L.MAPPER)
BUTTONS_ = wp.constant(L.BUTTONS)
WINLINE_ = wp.constant(L.WINDOW_LINE)
STATLINE_ = wp.constant(L.STAT_LINE)
SERCYC_ = wp.constant(L.SERIAL_CYCLES)
SERCNT_ = wp.constant(L.SERIAL_COUNT)
FRAME_ = wp.constant(L.FRAME_FLAG)
NBANKS_ = wp.constant(L.ROM_BANKS)
RAMSIZE_ = wp.constant(L.RAM_SIZE)
BREAK_ = wp.constant(L.BREAK_HIT)
ROMLOW_ = wp.constant(L.ROM_BANK_LOW)
SLOTS_ = wp.constant(L.SPRITE_SLOTS)
SERBUF_ = wp.constant(L.SERIAL_BUFFER)
DIVRESET_ = wp.constant(L.DIV_RESET)
TIMAIRQ_ = wp.constant(L.TIMA_IRQ)
PENDING_ = wp.constant(L.PENDING_CYCLES)
SYNC_ = wp.constant(L.SYNC_FLAG)
CHECKIRQ_ = wp.constant(L.CHECK_IRQ)
WRQ_ = wp.constant(L.WRITE_QUEUE)

FZ = wp.constant(0x80)
FN = wp.constant(0x40)
FH = wp.constant(0x20)
FC = wp.constant(0x10)


@wp.struct
class Machines:
    """Per-emulator state of N Game Boys plus the shared ROM image."""

    rom: wp.array(dtype=wp.uint8)
    st: wp.array2d(dtype=wp.int32)
    mem: wp.array2d(dtype=wp.uint8)
    cram: wp.array2d(dtype=wp.uint8)
    cycles: wp.array(dtype=wp.int64)
    screen: wp.array3d(dtype=wp.uint8)
    serial: wp.array2d(dtype=wp.uint8)
    cycle_table: wp.array(dtype=wp.int32)
    length_table: wp.array(dtype=wp.int32)


@wp.func(inline=True)
def io(m: Machines, e: int, addr: int) -> int:
    return wp.int32(m.mem[e, addr - 0x8000])


@wp.func(inline=True)
def set_io(m: Machines, e: int, addr: int, v: int):
    m.mem[e, addr - 0x8000] = wp.uint8(v & 0xFF)


@wp.func(inline=True)
def zflag(v: int) -> int:
    if (v & 0xFF) == 0:
        return FZ
    return 0


@wp.func(inline=True)
def bit_flag(cond: bool, flag: int) -> int:
    if cond:
        return flag
    return 0


@wp.func(inline=True)
def timer_shift(tac: int) -> int:
    """log2 of the TIMA period selected by TAC (1024, 16, 64 or 256 T-cycles)."""
    sel = tac & 3
    if sel == 1:
        return 4
    if sel == 2:
        return 6
    if sel == 3:
        return 8
    return 10


@wp.func(inline=True)
def increase_tima(m: Machines, e: int):
    tima = io(m, e, 0xFF05) + 1
    if tima > 0xFF:
        tima = io(m, e, 0xFF06)
        m.st[e, TIMAIRQ_] = 4
    set_io(m, e, 0xFF05, tima)


@wp.func(inline=True)
def update_stat(m: Machines, e: int):
    ly = io(m, e, 0xFF44)
    stat = io(m, e, 0xFF41)
    mode = stat & 3
    coincide = ly == io(m, e, 0xFF45)
    stat = (stat & 0x78) | mode | bit_flag(coincide, 4)
    set_io(m, e, 0xFF41, stat)
    line = 0
    if (io(m, e, 0xFF40) & 0x80) != 0:
        if mode == 0:
            line = (stat >> 3) & 1
        elif mode == 1:
            line = (stat >> 4) & 1
            if ly == 144:
                line = line | ((stat >> 5) & 1)  # the OAM source also fires as VBlank starts
        elif mode == 2:
            line = (stat >> 5) & 1
        if coincide:
            line = line | ((stat >> 6) & 1)
    if line == 1:
        if m.st[e, STATLINE_] == 0:
            set_io(m, e, 0xFF0F, io(m, e, 0xFF0F) | 2)
    m.st[e, STATLINE_] = line
