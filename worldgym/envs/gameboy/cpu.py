"""SM83 CPU in Warp: register access, ALU and flags (incl. DAA), the 256 base and 256 CB opcodes, interrupts."""

# ruff: noqa: SIM102, UP018, RUF046  (Warp kernels: no `and`/`or`; int(0) declares a loop variable)

from __future__ import annotations

import warp as wp

from worldgym.envs.gameboy.clocks import sync_clocks
from worldgym.envs.gameboy.machine import (
    A_,
    C_,
    EI_,
    F_,
    FC,
    FH,
    FN,
    FZ,
    H_,
    HALTED_,
    IME_,
    L_,
    MODE_,
    PC_,
    ROMB_,
    SP_,
    Machines,
    bit_flag,
    io,
    set_io,
    zflag,
)
from worldgym.envs.gameboy.memory import rd, wr

wp.set_module_options({"enable_backward": False})


@wp.func(inline=True)
def get_r8(m: Machines, e: int, r: int) -> int:
    if r == 6:
        return rd(m, e, (m.st[e, H_] << 8) | m.st[e, L_])
    return m.st[e, r]


@wp.func(inline=True)
def set_r8(m: Machines, e: int, r: int, v: int):
    if r == 6:
        wr(m, e, (m.st[e, H_] << 8) | m.st[e, L_], v)
    else:
        m.st[e, r] = v & 0xFF


@wp.func(inline=True)
def get_r16(m: Machines, e: int, p: int) -> int:
    if p == 3:
        return m.st[e, SP_]
    return (m.st[e, 2 * p] << 8) | m.st[e, 2 * p + 1]


@wp.func(inline=True)
def set_r16(m: Machines, e: int, p: int, value: int):
    v = value & 0xFFFF
    if p == 3:
        m.st[e, SP_] = v
    else:
        m.st[e, 2 * p] = v >> 8
        m.st[e, 2 * p + 1] = v & 0xFF


@wp.func(inline=True)
def push16(m: Machines, e: int, v: int):
    sp = (m.st[e, SP_] - 1) & 0xFFFF
    wr(m, e, sp, v >> 8)
    sp = (sp - 1) & 0xFFFF
    wr(m, e, sp, v & 0xFF)
    m.st[e, SP_] = sp


@wp.func(inline=True)
def pop16(m: Machines, e: int) -> int:
    sp = m.st[e, SP_]
    lo = rd(m, e, sp)
    hi = rd(m, e, (sp + 1) & 0xFFFF)
    m.st[e, SP_] = (sp + 2) & 0xFFFF
    return (hi << 8) | lo


@wp.func(inline=True)
def condition(m: Machines, e: int, cc: int) -> bool:
    f = m.st[e, F_]
    if cc == 0:
        return (f & FZ) == 0
    if cc == 1:
        return (f & FZ) != 0
    if cc == 2:
        return (f & FC) == 0
    return (f & FC) != 0


@wp.func(inline=True)
def alu(m: Machines, e: int, op: int, v: int):
    a = m.st[e, A_]
    carry = (m.st[e, F_] >> 4) & 1
    r = 0
    f = 0
    if op < 2:  # ADD, ADC
        c = 0
        if op == 1:
            c = carry
        r = a + v + c
        f = bit_flag((a & 0xF) + (v & 0xF) + c > 0xF, FH) | bit_flag(r > 0xFF, FC)
    elif op < 4 or op == 7:  # SUB, SBC, CP
        c = 0
        if op == 3:
            c = carry
        r = a - v - c
        f = FN | bit_flag((a & 0xF) - (v & 0xF) - c < 0, FH) | bit_flag(r < 0, FC)
    elif op == 4:
        r = a & v
        f = FH
    elif op == 5:
        r = a ^ v
    else:
        r = a | v
    m.st[e, F_] = f | zflag(r)
    if op != 7:
        m.st[e, A_] = r & 0xFF


@wp.func(inline=True)
def rotate(m: Machines, e: int, op: int, v: int, set_zero: bool) -> int:
    carry = (m.st[e, F_] >> 4) & 1
    r = 0
    c = 0
    if op == 0:
        c = v >> 7
        r = (v << 1) | c
    elif op == 1:
        c = v & 1
        r = (v >> 1) | (c << 7)
    elif op == 2:
        c = v >> 7
        r = (v << 1) | carry
    elif op == 3:
        c = v & 1
        r = (v >> 1) | (carry << 7)
    elif op == 4:
        c = v >> 7
        r = v << 1
    elif op == 5:
        c = v & 1
        r = (v >> 1) | (v & 0x80)
    elif op == 6:
        r = ((v & 0xF) << 4) | (v >> 4)
    else:
        c = v & 1
        r = v >> 1
    r = r & 0xFF
    f = c << 4
    if set_zero:
        f = f | zflag(r)
    m.st[e, F_] = f
    return r


@wp.func(inline=True)
def daa(m: Machines, e: int):
    a = m.st[e, A_]
    f = m.st[e, F_]
    c = f & FC
    if (f & FN) == 0:
        if c != 0 or a > 0x99:
            a = a + 0x60
            c = FC
        if (f & FH) != 0 or (a & 0xF) > 9:
            a = a + 6
    else:
        if c != 0:
            a = a - 0x60
        if (f & FH) != 0:
            a = a - 6
    a = a & 0xFF
    m.st[e, A_] = a
    m.st[e, F_] = zflag(a) | (f & FN) | c


@wp.func(inline=True)
def sp_offset(m: Machines, e: int, offset: int) -> int:
    sp = m.st[e, SP_]
    m.st[e, F_] = bit_flag((sp & 0xF) + (offset & 0xF) > 0xF, FH) | bit_flag(
        (sp & 0xFF) + (offset & 0xFF) > 0xFF, FC
    )
    signed = offset
    if offset > 127:
        signed = offset - 256
    return (sp + signed) & 0xFFFF


@wp.func(inline=True)
def exec_cb(m: Machines, e: int, op: int) -> int:
    x = op >> 6
    y = (op >> 3) & 7
    z = op & 7
    v = get_r8(m, e, z)
    if x == 0:
        set_r8(m, e, z, rotate(m, e, y, v, True))
    elif x == 1:
        m.st[e, F_] = (m.st[e, F_] & FC) | FH | bit_flag(((v >> y) & 1) == 0, FZ)
    elif x == 2:
        set_r8(m, e, z, v & ~(1 << y))
    else:
        set_r8(m, e, z, v | (1 << y))
    if z != 6:
        return 8
    if x == 1:
        return 12
    return 16


@wp.func(inline=True)
def exec_x0(m: Machines, e: int, op: int, y: int, z: int, n1: int, n2: int) -> int:
    """Opcodes 0x00-0x3F; returns extra cycles of taken branches."""
    p = y >> 1
    q = y & 1
    if z == 0:
        if y == 1:
            a = n1 | (n2 << 8)
            sp = m.st[e, SP_]
            wr(m, e, a, sp & 0xFF)
            wr(m, e, (a + 1) & 0xFFFF, sp >> 8)
        elif y == 2:
            return 0  # STOP is a two-byte no-op on DMG without a pressed button
        elif y >= 3:
            offset = n1
            take = True
            if y > 3:
                take = condition(m, e, y - 4)
            if take:
                if offset > 127:
                    offset = offset - 256
                m.st[e, PC_] = (m.st[e, PC_] + offset) & 0xFFFF
                if y > 3:
                    return 4
    elif z == 1:
        if q == 0:
            set_r16(m, e, p, (n1 | (n2 << 8)))
        else:
            hl = get_r16(m, e, 2)
            v = get_r16(m, e, p)
            r = hl + v
            m.st[e, F_] = (
                (m.st[e, F_] & FZ)
                | bit_flag((hl & 0xFFF) + (v & 0xFFF) > 0xFFF, FH)
                | bit_flag(r > 0xFFFF, FC)
            )
            set_r16(m, e, 2, r)
    elif z == 2:
        addr = 0
        if p < 2:
            addr = get_r16(m, e, p)
        else:
            addr = get_r16(m, e, 2)
            if p == 2:
                set_r16(m, e, 2, addr + 1)
            else:
                set_r16(m, e, 2, addr - 1)
        if q == 0:
            wr(m, e, addr, m.st[e, A_])
        else:
            m.st[e, A_] = rd(m, e, addr)
    elif z == 3:
        if q == 0:
            set_r16(m, e, p, get_r16(m, e, p) + 1)
        else:
            set_r16(m, e, p, get_r16(m, e, p) - 1)
    elif z == 4:
        v = get_r8(m, e, y)
        r = (v + 1) & 0xFF
        m.st[e, F_] = (m.st[e, F_] & FC) | zflag(r) | bit_flag((v & 0xF) == 0xF, FH)
        set_r8(m, e, y, r)
    elif z == 5:
        v = get_r8(m, e, y)
        r = (v - 1) & 0xFF
        m.st[e, F_] = (m.st[e, F_] & FC) | zflag(r) | FN | bit_flag((v & 0xF) == 0, FH)
        set_r8(m, e, y, r)
    elif z == 6:
        set_r8(m, e, y, n1)
    else:
        if y < 4:
            m.st[e, A_] = rotate(m, e, y, m.st[e, A_], False)
        elif y == 4:
            daa(m, e)
        elif y == 5:
            m.st[e, A_] = m.st[e, A_] ^ 0xFF
            m.st[e, F_] = m.st[e, F_] | FN | FH
        elif y == 6:
            m.st[e, F_] = (m.st[e, F_] & FZ) | FC
        else:
            m.st[e, F_] = (m.st[e, F_] & (FZ | FC)) ^ FC
    return 0


@wp.func(inline=True)
def exec_x3(m: Machines, e: int, op: int, y: int, z: int, n1: int, n2: int) -> int:
    """Opcodes 0xC0-0xFF; returns extra cycles of taken branches (or the CB opcode's total cycles)."""
    p = y >> 1
    q = y & 1
    if z == 0:
        if y < 4:
            if condition(m, e, y):
                m.st[e, PC_] = pop16(m, e)
                return 12
        elif y == 4:
            wr(m, e, 0xFF00 + n1, m.st[e, A_])
        elif y == 5:
            m.st[e, SP_] = sp_offset(m, e, n1)
        elif y == 6:
            m.st[e, A_] = rd(m, e, 0xFF00 + n1)
        else:
            set_r16(m, e, 2, sp_offset(m, e, n1))
    elif z == 1:
        if q == 0:
            v = pop16(m, e)
            if p == 3:
                m.st[e, A_] = v >> 8
                m.st[e, F_] = v & 0xF0
            else:
                set_r16(m, e, p, v)
        elif p == 0:
            m.st[e, PC_] = pop16(m, e)
        elif p == 1:
            m.st[e, PC_] = pop16(m, e)
            m.st[e, IME_] = 1
            m.st[e, EI_] = 0
        elif p == 2:
            m.st[e, PC_] = get_r16(m, e, 2)
        else:
            m.st[e, SP_] = get_r16(m, e, 2)
    elif z == 2:
        if y < 4:
            target = n1 | (n2 << 8)
            if condition(m, e, y):
                m.st[e, PC_] = target
                return 4
        elif y == 4:
            wr(m, e, 0xFF00 + m.st[e, C_], m.st[e, A_])
        elif y == 5:
            wr(m, e, (n1 | (n2 << 8)), m.st[e, A_])
        elif y == 6:
            m.st[e, A_] = rd(m, e, 0xFF00 + m.st[e, C_])
        else:
            m.st[e, A_] = rd(m, e, (n1 | (n2 << 8)))
    elif z == 3:
        if y == 0:
            m.st[e, PC_] = n1 | (n2 << 8)
        elif y == 1:
            return exec_cb(m, e, n1)
        elif y == 6:
            m.st[e, IME_] = 0
            m.st[e, EI_] = 0
        elif y == 7:
            if m.st[e, IME_] == 0:
                m.st[e, EI_] = 1
                sync_clocks(m, e)  # end the batch: the next instruction must run with interrupt checks
    elif z == 4:
        target = n1 | (n2 << 8)
        if condition(m, e, y):
            push16(m, e, m.st[e, PC_])
            m.st[e, PC_] = target
            return 12
    elif z == 5:
        if q == 0:
            v = get_r16(m, e, p)
            if p == 3:
                v = (m.st[e, A_] << 8) | m.st[e, F_]
            push16(m, e, v)
        else:
            target = n1 | (n2 << 8)
            push16(m, e, m.st[e, PC_])
            m.st[e, PC_] = target
    elif z == 6:
        alu(m, e, y, n1)
    else:
        push16(m, e, m.st[e, PC_])
        m.st[e, PC_] = y * 8
    return 0


@wp.func(inline=True)
def execute(m: Machines, e: int) -> int:
    """Fetch and execute one instruction; returns its T-cycles."""
    pc = m.st[e, PC_]
    op = int(0)
    n1 = int(0)
    n2 = int(0)
    rom_at = -1  # where the three bytes at pc start in the ROM image, when they all lie in one ROM bank
    if pc < 0x3FFE:
        if m.st[e, MODE_] == 0:
            rom_at = pc
    elif pc >= 0x4000:
        if pc < 0x7FFE:
            rom_at = m.st[e, ROMB_] * 0x4000 + pc - 0x4000
    if rom_at >= 0:
        op = wp.int32(m.rom[rom_at])
        n1 = wp.int32(m.rom[rom_at + 1])
        n2 = wp.int32(m.rom[rom_at + 2])
    else:
        op = rd(m, e, pc)
        n1 = rd(m, e, (pc + 1) & 0xFFFF)
        n2 = rd(m, e, (pc + 2) & 0xFFFF)
    m.st[e, PC_] = (pc + m.length_table[op]) & 0xFFFF
    x = op >> 6
    y = (op >> 3) & 7
    z = op & 7
    cycles = m.cycle_table[op]
    if x == 1:
        if op == 0x76:
            m.st[e, HALTED_] = 1
            sync_clocks(m, e)  # end the batch: the next step idles or services an interrupt
        else:
            set_r8(m, e, y, get_r8(m, e, z))
    elif x == 2:
        alu(m, e, y, get_r8(m, e, z))
    elif x == 0:
        cycles = cycles + exec_x0(m, e, op, y, z, n1, n2)
    else:
        extra = exec_x3(m, e, op, y, z, n1, n2)
        if op == 0xCB:
            cycles = extra
        else:
            cycles = cycles + extra
    return cycles


@wp.func(inline=True)
def needs_checks(m: Machines, e: int) -> bool:
    """Whether instructions must check for interrupts: one is requested and enabled, HALT, or an EI delay.

    Otherwise nothing can request one before the batch ends (clock events end batches, and so do IO writes,
    EI and HALT).
    """
    if (io(m, e, 0xFFFF) & io(m, e, 0xFF0F) & 0x1F) != 0:
        return True
    if m.st[e, HALTED_] == 1:
        return True
    return m.st[e, EI_] != 0


@wp.func(inline=True)
def cpu_step(m: Machines, e: int, checks: bool) -> int:
    """Service an interrupt, idle in HALT (-1), or execute one instruction; returns T-cycles spent.

    ``checks`` False skips the interrupt, HALT and EI-delay logic (see ``needs_checks``).
    """
    enable = int(0)
    if checks:
        pending = io(m, e, 0xFFFF) & io(m, e, 0xFF0F) & 0x1F
        if m.st[e, HALTED_] == 1:
            if pending == 0:
                return -1
            m.st[e, HALTED_] = 0
        if pending != 0:
            if m.st[e, IME_] == 1:
                bit = int(0)
                while ((pending >> bit) & 1) == 0:
                    bit = bit + 1
                set_io(m, e, 0xFF0F, io(m, e, 0xFF0F) & ~(1 << bit))
                m.st[e, IME_] = 0
                push16(m, e, m.st[e, PC_])
                m.st[e, PC_] = 0x40 + 8 * bit
                return 20
        enable = m.st[e, EI_]
    cycles = execute(m, e)
    if enable == 1:
        if m.st[e, EI_] == 1:
            m.st[e, EI_] = 0
            m.st[e, IME_] = 1
    return cycles
