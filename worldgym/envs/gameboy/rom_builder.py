"""Tiny SM83 assembler and ROM builder: assembles source text and writes header, logo and checksums.

>>> from worldgym.envs.gameboy.rom_builder import build_rom
>>> rom = build_rom("main: ld a, $12\\n halt_loop: jr halt_loop", title="DEMO")
>>> len(rom), hex(rom[0x150])
(32768, '0x3e')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from worldgym.envs.gameboy.errors import AssemblyError
from worldgym.envs.gameboy.isa import BASE_TEMPLATES, CB_TEMPLATES

# The 48-byte logo bitmap at 0x0104-0x0133 that the boot ROM checks (public Pan Docs "Nintendo Logo").
NINTENDO_LOGO = bytes.fromhex(
    "CEED6666CC0D000B03730083000C000D0008111F8889000EDCCC6EE6DDDDD999BBBB67636E0EECCCDDDC999FBBB9333E"
)
HEADER_START, HEADER_END = 0x0100, 0x0150
BANK_SIZE = 0x4000

_LITERALS = frozenset(
    [
        "A",
        "B",
        "C",
        "D",
        "E",
        "H",
        "L",
        "AF",
        "BC",
        "DE",
        "HL",
        "SP",
        "(BC)",
        "(DE)",
        "(HL)",
        "(HL+)",
        "(HL-)",
        "(C)",
        "NZ",
        "Z",
        "NC",
    ]
)
_NAME = re.compile(r"(?<![\w.])[A-Za-z_.][\w.]*")
_ALIASES = {"(HLI)": "(HL+)", "(HLD)": "(HL-)", "(FF00+C)": "(C)", "($FF00+C)": "(C)"}


def _build_opcode_map() -> dict[tuple[str, tuple[str, ...]], tuple[int, ...]]:
    table: dict[tuple[str, tuple[str, ...]], tuple[int, ...]] = {}
    for prefix, templates in (((), BASE_TEMPLATES), ((0xCB,), CB_TEMPLATES)):
        for op, template in enumerate(templates):
            if template.startswith(("ILLEGAL", "PREFIX")):
                continue
            mnemonic, _, rest = template.partition(" ")
            operands = tuple(o.strip() for o in rest.split(",")) if rest else ()
            table[(mnemonic, operands)] = (*prefix, op)
    table[("LDH", ("(C)", "A"))] = table[("LD", ("(C)", "A"))]
    table[("LDH", ("A", "(C)"))] = table[("LD", ("A", "(C)"))]
    return table


_OPCODES = _build_opcode_map()


@dataclass(frozen=True)
class _Line:
    number: int
    text: str
    label: str | None
    op: str | None
    args: tuple[str, ...]


def _split_args(text: str) -> tuple[str, ...]:
    parts, depth, current = [], 0, ""
    in_string = False
    for ch in text:
        if ch == '"':
            in_string = not in_string
        if ch == "," and depth == 0 and not in_string:
            parts.append(current.strip())
            current = ""
            continue
        depth += (ch == "(") - (ch == ")")
        current += ch
    if current.strip():
        parts.append(current.strip())
    return tuple(parts)


def _parse(source: str) -> list[_Line]:
    lines = []
    for number, raw in enumerate(source.splitlines(), start=1):
        text = raw.split(";", 1)[0].strip()
        label = None
        match = re.match(r"^([A-Za-z_.][\w.]*):", text)
        if match:
            label, text = match.group(1), text[match.end() :].strip()
        equ = re.match(r"^([A-Za-z_][\w]*)\s+(?:EQU|equ|=)\s+(.+)$", text)
        if equ:
            lines.append(_Line(number, raw, None, "EQU", (equ.group(1), equ.group(2))))
            continue
        op, _, rest = text.partition(" ")
        lines.append(_Line(number, raw, label, op.upper() or None, _split_args(rest)))
    return lines


class _Assembler:
    """Two-pass assembler; instruction sizes never depend on operand values, so labels resolve in pass 2."""

    def __init__(self, rom_size: int) -> None:
        self.rom = bytearray(rom_size)
        self.written = bytearray(rom_size)
        self.symbols: dict[str, int] = {}

    def evaluate(self, expr: str, line: _Line, final: bool) -> int:
        text = re.sub(r"\$([0-9A-Fa-f]+)", r"0x\1", expr.strip())
        text = re.sub(r"%([01]+)", r"0b\1", text)
        if not re.fullmatch(r"[\w\s+\-*/()<>&|^~.']+", text):
            raise AssemblyError(f"line {line.number}: bad expression {expr!r} in {line.text.strip()!r}")
        if re.fullmatch(r"'.'", text):
            return ord(text[1])
        names = {name: self.symbols.get(name, 0) for name in _NAME.findall(text)}
        for name in names:
            if final and name not in self.symbols:
                raise AssemblyError(f"line {line.number}: unknown symbol {name!r} in {line.text.strip()!r}")
        safe = _NAME.sub(lambda m: f"_s[{m.group(0)!r}]", text)
        try:
            return int(eval(safe, {"__builtins__": {}}, {"_s": names}))
        except Exception as exc:
            raise AssemblyError(f"line {line.number}: cannot evaluate {expr!r}: {exc}") from exc

    def _classify(self, mnemonic: str, arg: str) -> tuple[list[str], str | None]:
        """Return candidate template operands and the immediate expression (if any)."""
        upper = _ALIASES.get(arg.upper().replace(" ", ""), arg.upper().replace(" ", ""))
        if upper in _LITERALS:
            return [upper], None
        if mnemonic in ("BIT", "RES", "SET") and re.fullmatch(r"[0-7]", upper):
            return [upper], None
        if upper.startswith(("SP+", "SP-")):
            return ["SP+e8"], arg.replace(" ", "")[2:]
        if upper.startswith("(") and upper.endswith(")"):
            inner = arg.strip()[1:-1]
            return ["(a16)", "(a8)"], inner
        return ["n8", "n16", "e8", "a16"], arg

    def _encode(self, line: _Line, address: int, final: bool) -> bytes:
        mnemonic = line.op or ""
        if mnemonic == "RST":
            vector = self.evaluate(line.args[0], line, final)
            if vector not in range(0, 0x40, 8):
                raise AssemblyError(f"line {line.number}: RST vector must be 0,8,...,0x38, got {vector:#x}")
            return bytes([0xC7 | vector])
        candidates: list[list[str]] = []
        immediate: str | None = None
        for arg in line.args:
            options, expr = self._classify(mnemonic, arg)
            candidates.append(options)
            immediate = expr if expr is not None else immediate
        for combo in _combinations(candidates):
            opcode = _OPCODES.get((mnemonic, combo))
            if opcode is None:
                continue
            kind = next((c for c in combo if c in ("n8", "n16", "e8", "a16", "(a8)", "(a16)", "SP+e8")), None)
            return bytes(opcode) + self._immediate(kind, immediate, line, address + len(opcode), final)
        raise AssemblyError(f"line {line.number}: unknown instruction {line.text.strip()!r}")

    def _immediate(self, kind: str | None, expr: str | None, line: _Line, next_pc: int, final: bool) -> bytes:
        if kind is None or expr is None:
            return b"\x00" if line.op == "STOP" else b""
        value = self.evaluate(expr, line, final)
        if kind in ("n16", "a16", "(a16)"):
            if final and not -0x8000 <= value <= 0xFFFF:
                raise AssemblyError(f"line {line.number}: 16-bit value {value} out of range")
            return (value & 0xFFFF).to_bytes(2, "little")
        if kind == "(a8)" and value >= 0xFF00:
            value -= 0xFF00
        if kind == "e8" and line.op == "JR":
            value -= next_pc + 1
        if final and not -128 <= value <= 255:
            raise AssemblyError(
                f"line {line.number}: 8-bit value {value} out of range in {line.text.strip()!r}"
            )
        if final and kind in ("e8", "SP+e8") and not -128 <= value <= 127:
            raise AssemblyError(f"line {line.number}: relative offset {value} out of range [-128, 127]")
        return bytes([value & 0xFF])

    def _data(self, line: _Line, width: int, final: bool) -> bytes:
        out = bytearray()
        for arg in line.args:
            if arg.startswith('"') and arg.endswith('"'):
                out += arg[1:-1].encode("ascii")
            else:
                out += (self.evaluate(arg, line, final) & (0xFF if width == 1 else 0xFFFF)).to_bytes(
                    width, "little"
                )
        return bytes(out)

    def run_pass(self, lines: list[_Line], final: bool) -> None:
        bank, address = 0, 0x150
        for line in lines:
            if line.op == "EQU":
                self.symbols[line.args[0]] = self.evaluate(line.args[1], line, final)
                continue
            if line.label:
                self.symbols[line.label] = address
            if line.op is None:
                continue
            if line.op in (".ORG", "ORG"):
                address = self.evaluate(line.args[0], line, final)
                continue
            if line.op in (".BANK", "BANK", "SECTION"):
                bank = self.evaluate(line.args[0], line, final)
                address = 0x4000 if bank else 0x150
                continue
            if line.op in ("DB", ".DB"):
                data = self._data(line, 1, final)
            elif line.op in ("DW", ".DW"):
                data = self._data(line, 2, final)
            elif line.op in ("DS", ".DS"):
                fill = self.evaluate(line.args[1], line, final) if len(line.args) > 1 else 0
                data = bytes([fill & 0xFF]) * self.evaluate(line.args[0], line, final)
            else:
                data = self._encode(line, address, final)
            if final:
                self._place(bank, address, data, line)
            address += len(data)

    def _place(self, bank: int, address: int, data: bytes, line: _Line) -> None:
        if bank == 0 and not 0 <= address <= address + len(data) <= BANK_SIZE:
            raise AssemblyError(
                f"line {line.number}: bank 0 code must lie in 0x0000-0x3FFF (at {address:#06x})"
            )
        if bank and not BANK_SIZE <= address <= address + len(data) <= 2 * BANK_SIZE:
            raise AssemblyError(
                f"line {line.number}: banked code must lie in 0x4000-0x7FFF (at {address:#06x})"
            )
        offset = bank * BANK_SIZE + (address - BANK_SIZE if bank else address)
        if offset + len(data) > len(self.rom):
            raise AssemblyError(f"line {line.number}: bank {bank} is beyond the ROM size {len(self.rom)}")
        for i, byte in enumerate(data):
            if HEADER_START + 4 <= offset + i < HEADER_END:
                raise AssemblyError(
                    f"line {line.number}: code overlaps the cartridge header at {offset + i:#06x}"
                )
            self.rom[offset + i] = byte
            self.written[offset + i] = 1


def _combinations(options: list[list[str]]) -> list[tuple[str, ...]]:
    combos: list[tuple[str, ...]] = [()]
    for choice in options:
        combos = [c + (o,) for c in combos for o in choice]
    return combos


def assemble(source: str, rom_size: int = 0x8000) -> tuple[bytearray, dict[str, int]]:
    """Assemble SM83 source into a zero-filled image of ``rom_size`` bytes; returns (image, symbols).

    Syntax: ``label:``, ``ld a, $12`` (``$`` hex, ``%`` binary, labels and + - * / in expressions),
    ``.org ADDR``, ``.bank N`` (code at 0x4000 of bank N), ``db``/``dw``/``ds N[,fill]``, ``NAME equ EXPR``.
    Code starts at 0x0150 unless an ``.org`` says otherwise.
    """
    assembler = _Assembler(rom_size)
    lines = _parse(source)
    assembler.run_pass(lines, final=False)
    assembler.run_pass(lines, final=True)
    return assembler.rom, assembler.symbols


def header_checksum(rom: bytes | bytearray) -> int:
    """The header checksum of bytes 0x0134-0x014C as the boot ROM computes it."""
    value = 0
    for byte in rom[0x134:0x14D]:
        value = (value - byte - 1) & 0xFF
    return value


def global_checksum(rom: bytes | bytearray) -> int:
    """The 16-bit sum of every ROM byte except the checksum itself (0x014E-0x014F)."""
    return (sum(rom) - rom[0x14E] - rom[0x14F]) & 0xFFFF


def build_rom(
    source: str,
    title: str = "WORLDGYM",
    cartridge_type: int = 0x00,
    rom_banks: int = 2,
    ram_size_code: int = 0x00,
    entry: str = "main",
) -> bytes:
    """Assemble ``source`` into a complete cartridge image with logo, header and both checksums.

    The entry point at 0x0100 jumps to the label ``entry`` unless the source writes 0x0100-0x0103 itself.
    ``rom_banks`` is a power of two from 2 to 512; ``cartridge_type`` / ``ram_size_code`` are header codes.
    """
    if rom_banks < 2 or rom_banks & (rom_banks - 1) or rom_banks > 512:
        raise ValueError(f"rom_banks must be a power of two in [2, 512], got {rom_banks}")
    if len(title.encode("ascii")) > 15:
        raise ValueError(f"title must be at most 15 ASCII characters, got {title!r}")
    rom, symbols = assemble(source, rom_banks * BANK_SIZE)
    if not any(rom[HEADER_START : HEADER_START + 4]):
        if entry not in symbols:
            raise AssemblyError(f"entry label {entry!r} is not defined and the source does not write 0x0100")
        rom[HEADER_START : HEADER_START + 4] = bytes([0x00, 0xC3]) + symbols[entry].to_bytes(2, "little")
    rom[0x104:0x134] = NINTENDO_LOGO
    rom[0x134:0x143] = title.encode("ascii").ljust(15, b"\x00")
    rom[0x143] = 0x00  # DMG only
    rom[0x147] = cartridge_type
    rom[0x148] = (rom_banks // 2).bit_length() - 1
    rom[0x149] = ram_size_code
    rom[0x14A] = 0x01  # non-Japanese
    rom[0x14D] = header_checksum(rom)
    rom[0x14E:0x150] = global_checksum(rom).to_bytes(2, "big")
    return bytes(rom)
