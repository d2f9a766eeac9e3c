"""SM83 memory map in Warp: ROM/RAM banking (ROM-only, MBC1, MBC3, MBC5), IO registers, OAM DMA."""

# ruff: noqa: SIM102, SIM114  (Warp kernels: no `and`/`or`; int(0) declares a loop variable)

from __future__ import annotations

import warp as wp

from worldgym.envs.gameboy.clocks import sync_clocks
from worldgym.envs.gameboy.machine import (
    BUTTONS_,
    DIV_,
    DIVRESET_,
    DOT_,
    LINE_,
    MAPPER_,
    MODE_,
    NBANKS_,
    RAMB_,
    RAMEN_,
    RAMSIZE_,
    ROMB_,
    ROMLOW_,
    SERBUF_,
    SERCNT_,
    SERCYC_,
    WINLINE_,
    WRQ_,
    Machines,
    increase_tima,
    io,
    set_io,
    timer_shift,
    update_stat,
)

wp.set_module_options({"enable_backward": False})


@wp.func(inline=True)
def read_joypad(m: Machines, e: int) -> int:
    select = io(m, e, 0xFF00) & 0x30
    pressed = m.st[e, BUTTONS_]
    low = 0xF
    if (select & 0x10) == 0:
        low = low & (~pressed & 0xF)
    if (select & 0x20) == 0:
        low = low & (~(pressed >> 4) & 0xF)
    return 0xC0 | select | low


@wp.func(inline=True)
def cram_offset(m: Machines, e: int, addr: int) -> int:
    size = m.st[e, RAMSIZE_]
    bank = m.st[e, RAMB_]
    if m.st[e, MAPPER_] == 1:
        if m.st[e, MODE_] == 0:
            bank = 0
    return (bank * 0x2000 + addr - 0xA000) % size


@wp.func(inline=True)
def rd_slow(m: Machines, e: int, addr: int) -> int:
    """Any address (mappers, IO registers with special reads)."""
    if addr < 0x4000:
        bank0 = 0
        if m.st[e, MAPPER_] == 1:
            if m.st[e, MODE_] == 1:
                bank0 = ((m.st[e, RAMB_] << 5) % m.st[e, NBANKS_]) * 0x4000
        return wp.int32(m.rom[bank0 + addr])
    if addr < 0x8000:
        return wp.int32(m.rom[m.st[e, ROMB_] * 0x4000 + addr - 0x4000])
    if addr < 0xA000:
        return io(m, e, addr)
    if addr < 0xC000:
        if m.st[e, RAMEN_] == 0:
            return 0xFF
        if m.st[e, RAMSIZE_] == 0:
            return 0xFF
        if m.st[e, MAPPER_] == 3:
            if m.st[e, RAMB_] > 3:
                return 0  # RTC registers read as a stopped clock at zero
        return wp.int32(m.cram[e, cram_offset(m, e, addr)])
    if addr < 0xE000:
        return io(m, e, addr)
    if addr < 0xFE00:
        return io(m, e, addr - 0x2000)
    if addr < 0xFF00:
        if addr >= 0xFEA0:
            return 0xFF
        return io(m, e, addr)
    sync_clocks(m, e)  # IO registers and IE (HRAM takes the fast path in ``rd``)
    if addr == 0xFF00:
        return read_joypad(m, e)
    if addr == 0xFF04:
        return (m.st[e, DIV_] >> 8) & 0xFF
    if addr == 0xFF0F:
        return io(m, e, addr) | 0xE0
    if addr == 0xFF07:
        return io(m, e, addr) | 0xF8
    if addr == 0xFF41:
        return io(m, e, addr) | 0x80
    return io(m, e, addr)


@wp.func(inline=True)
def update_rom_bank(m: Machines, e: int, low: int):
    bank = low
    mapper = m.st[e, MAPPER_]
    if mapper == 1:
        bank = low & 0x1F
        if bank == 0:
            bank = 1
        bank = bank | ((m.st[e, RAMB_] & 3) << 5)
    if mapper == 3:
        bank = low & 0x7F
        if bank == 0:
            bank = 1
    m.st[e, ROMB_] = bank % m.st[e, NBANKS_]


@wp.func
def write_mapper(m: Machines, e: int, addr: int, v: int):
    mapper = m.st[e, MAPPER_]
    if mapper == 0:
        return
    if addr < 0x2000:
        en = 0
        if (v & 0xF) == 0xA:
            en = 1
        m.st[e, RAMEN_] = en
    elif addr < 0x4000:
        if mapper == 5:
            bank = m.st[e, ROMB_]
            if addr < 0x3000:
                bank = (bank & 0x100) | v
            else:
                bank = (bank & 0xFF) | ((v & 1) << 8)
            m.st[e, ROMB_] = bank % m.st[e, NBANKS_]
        else:
            m.st[e, ROMLOW_] = v
            update_rom_bank(m, e, v)
    elif addr < 0x6000:
        if mapper == 1:
            m.st[e, RAMB_] = v & 3
            update_rom_bank(m, e, m.st[e, ROMLOW_])
        elif mapper == 3:
            m.st[e, RAMB_] = v & 0xF
        else:
            m.st[e, RAMB_] = v & 0xF
    else:
        if mapper == 1:
            m.st[e, MODE_] = v & 1


@wp.func(inline=True)
def dma(m: Machines, e: int, v: int):
    src = v << 8
    for i in range(160):
        set_io(m, e, 0xFE00 + i, rd(m, e, src + i))


@wp.func
def wr_io(m: Machines, e: int, addr: int, v: int):
    """Write an IO register (0xFF00-0xFF7F) or IE (0xFFFF) with its side effects."""
    if addr == 0xFF00:
        set_io(m, e, addr, 0xC0 | (v & 0x30) | 0xF)
    elif addr == 0xFF02:
        set_io(m, e, addr, v | 0x7E)
        if (v & 0x81) == 0x81:
            count = m.st[e, SERCNT_]
            m.serial[e, count % SERBUF_] = wp.uint8(io(m, e, 0xFF01))
            m.st[e, SERCNT_] = count + 1
            m.st[e, SERCYC_] = 4096
    elif addr == 0xFF04:
        tac = io(m, e, 0xFF07)
        if (tac & 4) != 0:
            if ((m.st[e, DIV_] >> (timer_shift(tac) - 1)) & 1) == 1:
                increase_tima(m, e)  # clearing DIV makes the selected bit fall
        m.st[e, DIV_] = 0
        m.st[e, DIVRESET_] = 1
    elif addr == 0xFF0F:
        set_io(m, e, addr, v & 0x1F)
    elif addr == 0xFF07:
        old = io(m, e, addr)
        counter = m.st[e, DIV_]
        if (old & 4) != 0:
            if ((counter >> (timer_shift(old) - 1)) & 1) == 1:
                if (v & 4) == 0:
                    increase_tima(m, e)
                elif ((counter >> (timer_shift(v) - 1)) & 1) == 0:
                    increase_tima(m, e)
        set_io(m, e, addr, v & 7)
    elif addr == 0xFF40:
        old = io(m, e, addr)
        set_io(m, e, addr, v)
        if ((old ^ v) & 0x80) != 0:
            m.st[e, DOT_] = 0
            m.st[e, LINE_] = 0
            m.st[e, WINLINE_] = 0
            set_io(m, e, 0xFF44, 0)
            stat = io(m, e, 0xFF41) & 0xF8
            if (v & 0x80) != 0:
                stat = stat | 2
            set_io(m, e, 0xFF41, stat)
    elif addr == 0xFF41:
        set_io(m, e, addr, (v & 0x78) | (io(m, e, addr) & 7))
        update_stat(m, e)
    elif addr == 0xFF45:
        set_io(m, e, addr, v)
        update_stat(m, e)
    elif addr == 0xFF44:
        return
    elif addr == 0xFF46:
        set_io(m, e, addr, v)
        dma(m, e, v)
    else:
        set_io(m, e, addr, v)


@wp.func(inline=True)
def wr_slow(m: Machines, e: int, addr: int, value: int):
    """Any address (mapper registers, IO registers with side effects)."""
    v = value & 0xFF
    if addr < 0x8000:
        defer_write(m, e, addr, v)
    elif addr < 0xA000:
        set_io(m, e, addr, v)
    elif addr < 0xC000:
        if m.st[e, RAMEN_] == 1:
            if m.st[e, RAMSIZE_] > 0:
                if m.st[e, MAPPER_] != 3:
                    m.cram[e, cram_offset(m, e, addr)] = wp.uint8(v)
                elif m.st[e, RAMB_] < 4:
                    m.cram[e, cram_offset(m, e, addr)] = wp.uint8(v)
    elif addr < 0xE000:
        set_io(m, e, addr, v)
    elif addr < 0xFE00:
        set_io(m, e, addr - 0x2000, v)
    elif addr < 0xFF00:
        if addr < 0xFEA0:
            set_io(m, e, addr, v)
    else:
        defer_write(m, e, addr, v)  # IO registers and IE (HRAM takes the fast path in ``wr``)


@wp.func(inline=True)
def defer_write(m: Machines, e: int, addr: int, v: int):
    """Queue a mapper/IO register write; the frame loop applies it right after the instruction.

    No SM83 instruction reads memory after writing it, so applying the (at most two) writes at the end of
    the instruction, before its clocks are caught up, is exact, and the side effects are coded only once.
    """
    sync_clocks(m, e)
    packed = addr | (v << 16) | (1 << 24)
    if m.st[e, WRQ_] == 0:
        m.st[e, WRQ_] = packed
    else:
        m.st[e, WRQ_ + 1] = packed


@wp.func(inline=True)
def apply_deferred_writes(m: Machines, e: int):
    """Perform the instruction's queued mapper/IO register writes in order (see ``defer_write``)."""
    for slot in range(2):
        packed = m.st[e, WRQ_ + slot]
        if packed != 0:
            m.st[e, WRQ_ + slot] = 0
            addr = packed & 0xFFFF
            v = (packed >> 16) & 0xFF
            if addr < 0x8000:
                write_mapper(m, e, addr, v)
            else:
                wr_io(m, e, addr, v)


@wp.func(inline=True)
def rd(m: Machines, e: int, addr: int) -> int:
    """Read a byte; ROM, VRAM, WRAM and HRAM take an inlined fast path."""
    if addr < 0x4000:
        if m.st[e, MODE_] == 0:
            return wp.int32(m.rom[addr])
    elif addr < 0x8000:
        return wp.int32(m.rom[m.st[e, ROMB_] * 0x4000 + addr - 0x4000])
    elif addr < 0xA000:
        return io(m, e, addr)
    elif addr >= 0xC000:
        if addr < 0xE000:
            return io(m, e, addr)
        if addr >= 0xFF80:
            if addr < 0xFFFF:
                return io(m, e, addr)
    return rd_slow(m, e, addr)


@wp.func(inline=True)
def wr(m: Machines, e: int, addr: int, value: int):
    """Write a byte; VRAM, WRAM and HRAM take an inlined fast path."""
    plain = False
    if addr >= 0x8000:
        if addr < 0xA000:
            plain = True
        elif addr >= 0xC000:
            if addr < 0xE000:
                plain = True
            elif addr >= 0xFF80:
                if addr < 0xFFFF:
                    plain = True
    if plain:
        set_io(m, e, addr, value)
    else:
        wr_slow(m, e, addr, value)
