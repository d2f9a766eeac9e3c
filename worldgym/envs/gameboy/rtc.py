"""MBC3 real-time clock in Warp: S/M/H/day counters, halt, day carry and latch, driven by emulated T-cycles.

The clock counts the emulator's own T-cycles (4,194,304 per second), never the host clock, so a run is
deterministic and its save states hold the clock exactly. It starts at day 0, 00:00:00 at power-on.
Behaviour follows Pan Docs and PyBoy: writing 0 then 1 to 0x6000-0x7FFF copies the counters to the latched
registers that reads return; writes go to the counting registers; writing S restarts the current second; a
register holding an out-of-range value (e.g. S = 60-63) counts up to its bit width and wraps to 0 without
carrying; the day counter wraps from 511 to 0 and sets the sticky carry bit (DH bit 7); DH bit 6 halts it.
"""

# ruff: noqa: SIM102  (Warp kernels: no `and`/`or`)

from __future__ import annotations

import warp as wp

from worldgym.envs.gameboy import layout as L
from worldgym.envs.gameboy.machine import RAMB_, RAMSIZE_, Machines

wp.set_module_options({"enable_backward": False})

LIVE_ = wp.constant(L.RTC_LIVE)
LATCHED_ = wp.constant(L.RTC_LATCHED)
CYCLES_ = wp.constant(L.RTC_CYCLES)
RUNNING_ = wp.constant(L.RTC_RUNNING)
PRESENT_ = wp.constant(L.RTC_PRESENT)
HELD_ = wp.constant(L.RTC_LATCH_HELD)
READ_ = wp.constant(L.RTC_READ)
PER_SECOND = wp.constant(L.RTC_CYCLES_PER_SECOND)


@wp.func(inline=True)
def rtc_count(m: Machines, e: int, cycles: int):
    """Count ``cycles`` T-cycles on a running clock, not yet carried into the seconds (``rtc_catch_up``)."""
    if m.st[e, RUNNING_] == 1:
        m.st[e, CYCLES_] = m.st[e, CYCLES_] + cycles


@wp.func
def count_up(value: int, limit: int, width_mask: int) -> int:
    """The next value of a counter that carries at ``limit``; out-of-range values wrap at their bit width."""
    if value == limit - 1:
        return 0
    return (value + 1) & width_mask


@wp.func
def rtc_tick_second(m: Machines, e: int):
    """Advance the counting registers by one second."""
    seconds = m.st[e, LIVE_]
    m.st[e, LIVE_] = count_up(seconds, 60, 0x3F)
    if seconds != 59:
        return
    minutes = m.st[e, LIVE_ + 1]
    m.st[e, LIVE_ + 1] = count_up(minutes, 60, 0x3F)
    if minutes != 59:
        return
    hours = m.st[e, LIVE_ + 2]
    m.st[e, LIVE_ + 2] = count_up(hours, 24, 0x1F)
    if hours != 23:
        return
    high = m.st[e, LIVE_ + 4]
    day = (((high & 1) << 8) | m.st[e, LIVE_ + 3]) + 1
    if day > 0x1FF:
        day = 0
        high = high | 0x80  # day counter carry, sticky until written
    m.st[e, LIVE_ + 3] = day & 0xFF
    m.st[e, LIVE_ + 4] = (high & 0xFE) | (day >> 8)


@wp.func
def rtc_catch_up(m: Machines, e: int):
    """Carry the whole seconds counted so far into the registers."""
    while m.st[e, CYCLES_] >= PER_SECOND:
        m.st[e, CYCLES_] = m.st[e, CYCLES_] - PER_SECOND
        rtc_tick_second(m, e)


@wp.func(inline=True)
def rtc_advance(m: Machines, e: int, cycles: int):
    """Count ``cycles`` T-cycles and carry whole seconds into the registers."""
    rtc_count(m, e, cycles)
    if m.st[e, CYCLES_] >= PER_SECOND:
        rtc_catch_up(m, e)


@wp.func
def rtc_write_latch(m: Machines, e: int, v: int):
    """A write to 0x6000-0x7FFF: 0 arms the latch, then 1 copies the counting registers to the latched."""
    if m.st[e, PRESENT_] == 0:
        return
    if v == 0:
        m.st[e, HELD_] = 0
    elif v == 1:
        if m.st[e, HELD_] == 0:
            rtc_catch_up(m, e)
            for i in range(5):
                m.st[e, LATCHED_ + i] = m.st[e, LIVE_ + i]
            rtc_select(m, e)
        m.st[e, HELD_] = 1


@wp.func
def rtc_write_register(m: Machines, e: int, v: int):
    """A write to 0xA000-0xBFFF while RTC register 0x08-0x0C is selected (RAM and clock enabled)."""
    reg = m.st[e, RAMB_] - 8
    if m.st[e, PRESENT_] == 0:
        return
    if reg < 0:
        return
    if reg > 4:
        return
    rtc_catch_up(m, e)
    if reg == 0:
        m.st[e, LIVE_] = v & 0x3F
        m.st[e, CYCLES_] = 0  # writing the seconds restarts the current second
    elif reg == 1:
        m.st[e, LIVE_ + 1] = v & 0x3F
    elif reg == 2:
        m.st[e, LIVE_ + 2] = v & 0x1F
    elif reg == 3:
        m.st[e, LIVE_ + 3] = v & 0xFF
    else:
        m.st[e, LIVE_ + 4] = v & 0xC1
        m.st[e, RUNNING_] = wp.where((v & 0x40) == 0, 1, 0)


@wp.func
def rtc_select(m: Machines, e: int):
    """After a bank select or a latch on MBC3: store what 0xA000-0xBFFF reads while the select is > 3.

    That is the latched RTC register 0x08-0x0C; without a clock, or for selects 4-7 and 0x0D-0x0F, 0 (0xFF on
    cartridges without RAM). Reads then cost one load where they are inlined (every memory read of the CPU).
    """
    reg = m.st[e, RAMB_] - 8
    value = int(0)
    if m.st[e, RAMSIZE_] == 0:
        value = 0xFF
    if m.st[e, PRESENT_] == 1:
        if reg >= 0:
            if reg <= 4:
                value = m.st[e, LATCHED_ + reg]
    m.st[e, READ_] = value


@wp.func(inline=True)
def rtc_read(m: Machines, e: int) -> int:
    """A read of 0xA000-0xBFFF on MBC3 with bank select > 3 and RAM enabled (see ``rtc_select``)."""
    return m.st[e, READ_]
