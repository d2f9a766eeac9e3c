"""SM83 instruction table: the mnemonic template, length and base cycle count of every opcode.

Templates use ``n8``/``n16`` (immediates), ``e8`` (signed offset), ``(a8)``/``(a16)`` (immediate addresses)
as placeholders, e.g. ``"LD B,n8"``. The table follows the regular x/y/z/p/q decoding of the opcode byte.
"""

from __future__ import annotations

R8 = ("B", "C", "D", "E", "H", "L", "(HL)", "A")
R16 = ("BC", "DE", "HL", "SP")
R16_STACK = ("BC", "DE", "HL", "AF")
CONDITIONS = ("NZ", "Z", "NC", "C")
ALU = ("ADD A,", "ADC A,", "SUB ", "SBC A,", "AND ", "XOR ", "OR ", "CP ")
ROTATIONS = ("RLC", "RRC", "RL", "RR", "SLA", "SRA", "SWAP", "SRL")
ILLEGAL_OPCODES = frozenset({0xD3, 0xDB, 0xDD, 0xE3, 0xE4, 0xEB, 0xEC, 0xED, 0xF4, 0xFC, 0xFD})

# T-cycles of each base opcode when a conditional branch is NOT taken (taken adds BRANCH_EXTRA_CYCLES).
BASE_CYCLES = bytes(
    [
        4, 12, 8, 8, 4, 4, 8, 4, 20, 8, 8, 8, 4, 4, 8, 4,
        4, 12, 8, 8, 4, 4, 8, 4, 12, 8, 8, 8, 4, 4, 8, 4,
        8, 12, 8, 8, 4, 4, 8, 4, 8, 8, 8, 8, 4, 4, 8, 4,
        8, 12, 8, 8, 12, 12, 12, 4, 8, 8, 8, 8, 4, 4, 8, 4,
    ]
    + [8 if (op & 7) == 6 or ((op >> 3) & 7) == 6 else 4 for op in range(0x40, 0x80)]
    + [8 if (op & 7) == 6 else 4 for op in range(0x80, 0xC0)]
    + [
        8, 12, 12, 16, 12, 16, 8, 16, 8, 16, 12, 4, 12, 24, 8, 16,
        8, 12, 12, 0, 12, 16, 8, 16, 8, 16, 12, 0, 12, 0, 8, 16,
        12, 12, 8, 0, 0, 16, 8, 16, 16, 4, 16, 0, 0, 0, 8, 16,
        12, 12, 8, 4, 0, 16, 8, 16, 12, 8, 16, 4, 0, 0, 8, 16,
    ]
)  # fmt: skip
BASE_CYCLES = bytes(4 if op == 0x76 else c for op, c in enumerate(BASE_CYCLES))


def _base_template(op: int) -> str:
    x, y, z, p, q = op >> 6, (op >> 3) & 7, op & 7, (op >> 4) & 3, (op >> 3) & 1
    if op in ILLEGAL_OPCODES:
        return f"ILLEGAL_{op:02X}"
    if x == 1:
        return "HALT" if op == 0x76 else f"LD {R8[y]},{R8[z]}"
    if x == 2:
        return f"{ALU[y]}{R8[z]}"
    if x == 0:
        if z == 0:
            return ("NOP", "LD (a16),SP", "STOP", "JR e8")[y] if y < 4 else f"JR {CONDITIONS[y - 4]},e8"
        if z == 1:
            return f"ADD HL,{R16[p]}" if q else f"LD {R16[p]},n16"
        if z == 2:
            mem = ("(BC)", "(DE)", "(HL+)", "(HL-)")[p]
            return f"LD A,{mem}" if q else f"LD {mem},A"
        if z == 3:
            return f"{'DEC' if q else 'INC'} {R16[p]}"
        if z == 4:
            return f"INC {R8[y]}"
        if z == 5:
            return f"DEC {R8[y]}"
        if z == 6:
            return f"LD {R8[y]},n8"
        return ("RLCA", "RRCA", "RLA", "RRA", "DAA", "CPL", "SCF", "CCF")[y]
    if z == 0:
        return (
            f"RET {CONDITIONS[y]}"
            if y < 4
            else ("LDH (a8),A", "ADD SP,e8", "LDH A,(a8)", "LD HL,SP+e8")[y - 4]
        )
    if z == 1:
        return ("RET", "RETI", "JP HL", "LD SP,HL")[p] if q else f"POP {R16_STACK[p]}"
    if z == 2:
        return (
            f"JP {CONDITIONS[y]},a16"
            if y < 4
            else ("LD (C),A", "LD (a16),A", "LD A,(C)", "LD A,(a16)")[y - 4]
        )
    if z == 3:
        return {0: "JP a16", 1: "PREFIX", 6: "DI", 7: "EI"}[y]
    if z == 4:
        return f"CALL {CONDITIONS[y]},a16"
    if z == 5:
        return "CALL a16" if q else f"PUSH {R16_STACK[p]}"
    if z == 6:
        return f"{ALU[y]}n8"
    return f"RST {y * 8:02X}H"


def _cb_template(op: int) -> str:
    x, y, z = op >> 6, (op >> 3) & 7, op & 7
    if x == 0:
        return f"{ROTATIONS[y]} {R8[z]}"
    return f"{('BIT', 'RES', 'SET')[x - 1]} {y},{R8[z]}"


def _length(template: str) -> int:
    if "n16" in template or "a16" in template:
        return 3
    if "n8" in template or "e8" in template or "a8" in template or template == "STOP":
        return 2
    return 1


def cb_cycles(op: int) -> int:
    """T-cycles of a CB-prefixed opcode (including the prefix byte)."""
    if op & 7 != 6:
        return 8
    return 12 if 0x40 <= op < 0x80 else 16


BASE_TEMPLATES: tuple[str, ...] = tuple(_base_template(op) for op in range(256))
CB_TEMPLATES: tuple[str, ...] = tuple(_cb_template(op) for op in range(256))
BASE_LENGTHS: tuple[int, ...] = tuple(2 if op == 0xCB else _length(t) for op, t in enumerate(BASE_TEMPLATES))
# Extra T-cycles a conditional JR / JP / CALL / RET costs when its condition holds.
BRANCH_EXTRA_CYCLES = {"JR": 4, "JP": 4, "CALL": 12, "RET": 12}
