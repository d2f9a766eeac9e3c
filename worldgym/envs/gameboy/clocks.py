"""Clock catch-up: advance the DIV/TIMA timer, the serial port and the PPU over a span of T-cycles.

The frame loop runs instructions in batches that end at the next clock event (PPU mode change, timer tick,
serial completion, delayed timer interrupt), so the clocks are caught up once per batch instead of once per
instruction. An instruction that touches an IO or mapper register first catches the clocks up (``sync_clocks``)
and ends its batch, so every such access sees exactly the state per-instruction updates would produce.
"""

from __future__ import annotations

import warp as wp

from worldgym.envs.gameboy.machine import DIV_, DOT_, PENDING_, SERCYC_, SYNC_, TIMAIRQ_, Machines
from worldgym.envs.gameboy.ppu import ppu_advance
from worldgym.envs.gameboy.timers import serial_advance, timer_advance

wp.set_module_options({"enable_backward": False})


@wp.func(inline=True)
def advance_clocks(m: Machines, e: int, cycles: int, draw: bool):
    """Run the timer, serial port and PPU for ``cycles`` T-cycles (``draw``: render lines as they finish)."""
    timer_advance(m, e, cycles)
    serial_advance(m, e, cycles)
    ppu_advance(m, e, cycles, draw)


@wp.func(inline=True)
def sync_clocks(m: Machines, e: int):
    """Before an IO access: catch the clocks up with the batch's earlier instructions and end the batch.

    The pending span is shorter than the distance to the next clock event (the batch's horizon), so no timer
    tick, countdown expiry or PPU mode change lies inside it: moving the counters forward is the whole update.
    """
    pending = m.st[e, PENDING_]
    if pending > 0:
        m.st[e, DIV_] = (m.st[e, DIV_] + pending) & 0xFFFF
        m.st[e, DOT_] = m.st[e, DOT_] + pending
        if m.st[e, TIMAIRQ_] > 0:
            m.st[e, TIMAIRQ_] = m.st[e, TIMAIRQ_] - pending
        if m.st[e, SERCYC_] > 0:
            m.st[e, SERCYC_] = m.st[e, SERCYC_] - pending
        m.st[e, PENDING_] = 0
    m.st[e, SYNC_] = 1
