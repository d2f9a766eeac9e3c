"""DIV/TIMA timer and serial port advance per instruction, and the HALT fast-forward horizon."""

# ruff: noqa: SIM102  (Warp kernels: no `and`/`or`; int(0) declares a loop variable)

from __future__ import annotations

import warp as wp

from worldgym.envs.gameboy.machine import (
    DIV_,
    DIVRESET_,
    DOT_,
    LINE_,
    SERCYC_,
    TIMAIRQ_,
    Machines,
    io,
    set_io,
    timer_shift,
)

wp.set_module_options({"enable_backward": False})


@wp.func(inline=True)
def timer_advance(m: Machines, e: int, cycles: int):
    old = m.st[e, DIV_]
    new = old + cycles
    if m.st[e, DIVRESET_] == 0:
        if m.st[e, TIMAIRQ_] == 0:
            if (io(m, e, 0xFF07) & 4) == 0:
                m.st[e, DIV_] = new & 0xFFFF  # fast path: timer stopped, nothing pending
                return
    if m.st[e, DIVRESET_] == 1:
        m.st[e, DIVRESET_] = 0
        new = old + 8  # like PyBoy, a store lands 8 T-cycles before the end of its instruction
    pending = m.st[e, TIMAIRQ_]
    if pending > 0:
        pending = pending - cycles
        if pending <= 0:
            pending = 0
            set_io(m, e, 0xFF0F, io(m, e, 0xFF0F) | 4)
        m.st[e, TIMAIRQ_] = pending
    tac = io(m, e, 0xFF07)
    if (tac & 4) != 0:
        shift = timer_shift(tac)
        ticks = (new >> shift) - (old >> shift)
        if ticks > 0:
            tima = io(m, e, 0xFF05)
            overflow_tick = 0x100 - tima
            if ticks >= overflow_tick:
                # the overflow raises IF 4 T-cycles after the falling edge that caused it
                edge = ((old >> shift) + overflow_tick) << shift
                delay = 4 - (new - edge)
                tima = io(m, e, 0xFF06) + ticks - overflow_tick
                if delay <= 0:
                    set_io(m, e, 0xFF0F, io(m, e, 0xFF0F) | 4)
                else:
                    m.st[e, TIMAIRQ_] = delay
            else:
                tima = tima + ticks
            set_io(m, e, 0xFF05, tima)
    m.st[e, DIV_] = new & 0xFFFF


@wp.func(inline=True)
def serial_advance(m: Machines, e: int, cycles: int):
    left = m.st[e, SERCYC_]
    if left > 0:
        left = left - cycles
        if left <= 0:
            left = 0
            set_io(m, e, 0xFF01, 0xFF)
            set_io(m, e, 0xFF02, io(m, e, 0xFF02) & 0x7F)
            set_io(m, e, 0xFF0F, io(m, e, 0xFF0F) | 8)
        m.st[e, SERCYC_] = left


@wp.func(inline=True)
def cycles_to_event(m: Machines, e: int) -> int:
    """T-cycles until the next PPU mode change, timer tick or serial completion (HALT fast-forward)."""
    dot = m.st[e, DOT_]
    n = 456 - dot
    if m.st[e, LINE_] < 144:
        if (io(m, e, 0xFF40) & 0x80) != 0:
            if dot < 80:
                n = 80 - dot
            elif dot < 252:
                n = 252 - dot
    tac = io(m, e, 0xFF07)
    if (tac & 4) != 0:
        period = 1 << timer_shift(tac)
        n = wp.min(n, period - (m.st[e, DIV_] & (period - 1)))
    if m.st[e, TIMAIRQ_] > 0:
        n = wp.min(n, m.st[e, TIMAIRQ_])
    if m.st[e, SERCYC_] > 0:
        n = wp.min(n, m.st[e, SERCYC_])
    return n
