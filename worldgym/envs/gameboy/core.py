"""Warp kernels: advance N emulators by per-emulator frame counts in one launch, and downsample screens."""

# ruff: noqa: SIM102, UP018, RUF046  (Warp kernels: no `and`/`or`; int(0) declares a loop variable)

from __future__ import annotations

import warp as wp

from worldgym.envs.gameboy.clocks import advance_clocks
from worldgym.envs.gameboy.cpu import cpu_step, needs_checks
from worldgym.envs.gameboy.machine import (
    BREAK_,
    BUTTONS_,
    CHECKIRQ_,
    FRAME_,
    HALTED_,
    PC_,
    PENDING_,
    SYNC_,
    Machines,
    io,
    set_io,
)
from worldgym.envs.gameboy.memory import apply_deferred_writes
from worldgym.envs.gameboy.timers import cycles_to_event

wp.set_module_options({"enable_backward": False})


@wp.func
def press_buttons(m: Machines, e: int, buttons: int):
    newly = buttons & ~m.st[e, BUTTONS_]
    m.st[e, BUTTONS_] = buttons
    if newly != 0:
        set_io(m, e, 0xFF0F, io(m, e, 0xFF0F) | 0x10)


@wp.kernel
def run_frames(
    m: Machines,
    buttons: wp.array2d(dtype=wp.int32),
    frame_counts: wp.array2d(dtype=wp.int32),
    press_frames: int,
    render: int,
    break_pc: int,
    max_cycles: wp.int64,
):
    """Advance emulator ``e`` by ``frame_counts[e, 0]`` VBlanks, holding ``buttons[e, 0]`` for the first
    ``press_frames``. An emulator whose frame count is 0 is skipped and left exactly as it was.

    ``buttons`` and ``frame_counts`` are 2D (N, 1) so that Warp does not also compile a copy of this kernel
    specialised for contiguous 1D arguments (which would double the cold compile time for no gain).

    Rendering happens only in the last frame when ``render`` is 1. Stops early at ``break_pc`` (>= 0) or after
    ``max_cycles`` (> 0) T-cycles; ``st[e, BREAK_HIT]`` records 1 for a break, 2 for the cycle limit.
    """
    e = wp.tid()
    frames = frame_counts[e, 0]
    if frames <= 0:
        return
    done = int(0)
    if press_frames > 0:
        press_buttons(m, e, buttons[e, 0])
    else:
        m.st[e, BUTTONS_] = 0
    m.st[e, BREAK_] = 0
    spent = wp.int64(0)
    start_cycles = m.cycles[e]
    m.st[e, PENDING_] = 0
    while done < frames:
        # Run instructions until the next clock event (or an IO access), then catch the clocks up once.
        horizon = cycles_to_event(m, e)
        budget = horizon
        if break_pc >= 0:
            budget = 1  # check the break address after every instruction
        if max_cycles > wp.int64(0):
            if max_cycles - spent < wp.int64(budget):
                budget = wp.int32(max_cycles - spent)
        m.st[e, SYNC_] = 0
        # Kept in st rather than in a loop-invariant local, which would invite the C++ compiler to duplicate
        # the whole interpreter loop for both values (loop unswitching) and so lengthen the cold compile.
        m.st[e, CHECKIRQ_] = wp.where(needs_checks(m, e), 1, 0)
        elapsed = int(0)
        before = int(0)
        while elapsed < budget:
            m.st[e, PENDING_] = elapsed
            before = elapsed
            cycles = cpu_step(m, e, m.st[e, CHECKIRQ_] == 1)
            if cycles < 0:
                cycles = horizon - elapsed  # HALT: idle until the next clock event
            elapsed = elapsed + cycles
            if m.st[e, SYNC_] == 1:
                apply_deferred_writes(m, e)
                break
        behind = elapsed
        if m.st[e, SYNC_] == 1:
            behind = elapsed - before  # sync_clocks already caught up with the earlier instructions
        m.st[e, PENDING_] = 0
        draw = False
        if render == 1:
            if done == frames - 1:
                draw = True
        advance_clocks(m, e, behind, draw)
        spent = spent + wp.int64(elapsed)
        if m.st[e, FRAME_] == 1:
            m.st[e, FRAME_] = 0
            done = done + 1
            if done == press_frames:
                m.st[e, BUTTONS_] = 0
        if break_pc >= 0:
            if m.st[e, PC_] == break_pc:
                if m.st[e, HALTED_] == 0:
                    m.st[e, BREAK_] = 1
                    m.cycles[e] = start_cycles + spent
                    return
        if max_cycles > wp.int64(0):
            if spent >= max_cycles:
                m.st[e, BREAK_] = 2
                m.cycles[e] = start_cycles + spent
                return
    m.cycles[e] = start_cycles + spent


@wp.kernel
def downsample(screen: wp.array3d(dtype=wp.uint8), obs: wp.array3d(dtype=wp.uint8), packed: int):
    """Shrink 144x160 shades to 72x80 by taking the top-left pixel of each 2x2 block; packed: 4 px per byte."""
    e, y, x = wp.tid()
    if packed == 0:
        obs[e, y, x] = screen[e, 2 * y, 2 * x]
    elif x < 20:
        value = int(0)
        for k in range(4):
            value = value | (wp.int32(screen[e, 2 * y, 8 * x + 2 * k]) << (6 - 2 * k))
        obs[e, y, x] = wp.uint8(value)
