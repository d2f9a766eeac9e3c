"""PPU in Warp: LY/STAT modes and interrupts, and a scanline renderer (background, window, sprites)."""

# ruff: noqa: SIM102, UP018, RUF046  (Warp kernels: no `and`/`or`; int(0) declares a loop variable)

from __future__ import annotations

import warp as wp

from worldgym.envs.gameboy.machine import (
    DOT_,
    FRAME_,
    LINE_,
    SLOTS_,
    WINLINE_,
    Machines,
    io,
    set_io,
    update_stat,
)

wp.set_module_options({"enable_backward": False})


@wp.func(inline=True)
def tile_pixel(m: Machines, e: int, addr: int, bit: int) -> int:
    lo = io(m, e, addr)
    hi = io(m, e, addr + 1)
    return (((hi >> bit) & 1) << 1) | ((lo >> bit) & 1)


@wp.func
def render_line(m: Machines, e: int, ly: int):
    lcdc = io(m, e, 0xFF40)
    scy = io(m, e, 0xFF42)
    scx = io(m, e, 0xFF43)
    wy = io(m, e, 0xFF4A)
    wx = io(m, e, 0xFF4B) - 7
    bgp = io(m, e, 0xFF47)
    height = 8
    if (lcdc & 4) != 0:
        height = 16
    count = int(0)
    if (lcdc & 2) != 0:
        for i in range(40):
            if count < 10:
                sy = io(m, e, 0xFE00 + i * 4) - 16
                if ly >= sy:
                    if ly < sy + height:
                        m.st[e, SLOTS_ + count] = i
                        count = count + 1
    window = False
    if (lcdc & 0x21) == 0x21:
        if wy <= ly:
            if wx < 160:
                window = True
    winline = m.st[e, WINLINE_]
    for x in range(160):
        ci = 0
        if (lcdc & 1) != 0:
            tx = (x + scx) & 255
            ty = (ly + scy) & 255
            tmap = 0x9800
            if (lcdc & 8) != 0:
                tmap = 0x9C00
            if window:
                if x >= wx:
                    tx = x - wx
                    ty = winline
                    tmap = 0x9800
                    if (lcdc & 0x40) != 0:
                        tmap = 0x9C00
            tile = io(m, e, tmap + (ty >> 3) * 32 + (tx >> 3))
            base = 0x8000 + tile * 16
            if (lcdc & 0x10) == 0:
                if tile > 127:
                    tile = tile - 256
                base = 0x9000 + tile * 16
            ci = tile_pixel(m, e, base + (ty & 7) * 2, 7 - (tx & 7))
        shade = (bgp >> (ci * 2)) & 3
        best_x = int(1000)
        for s in range(count):
            i = m.st[e, SLOTS_ + s]
            sx = io(m, e, 0xFE00 + i * 4 + 1) - 8
            if x >= sx:
                if x < sx + 8:
                    if sx < best_x:
                        attr = io(m, e, 0xFE00 + i * 4 + 3)
                        row = ly - (io(m, e, 0xFE00 + i * 4) - 16)
                        if (attr & 0x40) != 0:
                            row = height - 1 - row
                        tile = io(m, e, 0xFE00 + i * 4 + 2)
                        if height == 16:
                            tile = tile & 0xFE
                        bit = 7 - (x - sx)
                        if (attr & 0x20) != 0:
                            bit = x - sx
                        c = tile_pixel(m, e, 0x8000 + tile * 16 + row * 2, bit)
                        if c != 0:
                            best_x = sx
                            visible = True
                            if (attr & 0x80) != 0:
                                if ci != 0:
                                    visible = False
                            pal = io(m, e, 0xFF48)
                            if (attr & 0x10) != 0:
                                pal = io(m, e, 0xFF49)
                            if visible:
                                shade = (pal >> (c * 2)) & 3
                            else:
                                shade = (bgp >> (ci * 2)) & 3
        m.screen[e, ly, x] = wp.uint8(shade)
    if window:
        m.st[e, WINLINE_] = winline + 1


@wp.func(inline=True)
def ppu_advance(m: Machines, e: int, cycles: int, render: bool):
    dot0 = m.st[e, DOT_]
    limit = 456
    if m.st[e, LINE_] < 144:
        if dot0 < 80:
            limit = 80
        elif dot0 < 252:
            limit = 252
    if dot0 + cycles < limit:
        m.st[e, DOT_] = dot0 + cycles  # fast path: no mode boundary inside this instruction
        return
    lcd_on = (io(m, e, 0xFF40) & 0x80) != 0
    remaining = cycles
    while remaining > 0:
        dot = m.st[e, DOT_]
        ly = m.st[e, LINE_]
        boundary = 456
        if ly < 144:
            if dot < 80:
                boundary = 80
            elif dot < 252:
                boundary = 252
        step = wp.min(remaining, boundary - dot)
        dot = dot + step
        remaining = remaining - step
        mode = 1
        if dot == 456:
            dot = 0
            ly = ly + 1
            if ly == 154:
                ly = 0
                m.st[e, WINLINE_] = 0
            if ly == 144:
                m.st[e, FRAME_] = 1
                if lcd_on:
                    set_io(m, e, 0xFF0F, io(m, e, 0xFF0F) | 1)
            m.st[e, LINE_] = ly
        if ly < 144:
            mode = 0
            if dot < 80:
                mode = 2
            elif dot < 252:
                mode = 3
        m.st[e, DOT_] = dot
        if lcd_on:
            if dot == 252:
                if ly < 144:
                    if render:
                        render_line(m, e, ly)
            set_io(m, e, 0xFF44, ly)
            set_io(m, e, 0xFF41, (io(m, e, 0xFF41) & 0xFC) | mode)
            update_stat(m, e)
