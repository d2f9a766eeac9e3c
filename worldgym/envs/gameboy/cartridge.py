"""Cartridge header parsing and validation: title, mapper (ROM-only, MBC1, MBC3, MBC5), ROM and RAM sizes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from worldgym.envs.gameboy.errors import HeaderChecksumError, RomFileError, UnsupportedCartridgeError
from worldgym.envs.gameboy.rom_builder import header_checksum

MapperKind = Literal["rom", "mbc1", "mbc3", "mbc5"]
MAPPER_IDS: dict[str, int] = {"rom": 0, "mbc1": 1, "mbc3": 3, "mbc5": 5}

# cartridge type byte -> (mapper, has external RAM)
CARTRIDGE_TYPES: dict[int, tuple[MapperKind, bool]] = {
    0x00: ("rom", False),
    0x08: ("rom", True),
    0x09: ("rom", True),
    0x01: ("mbc1", False),
    0x02: ("mbc1", True),
    0x03: ("mbc1", True),
    0x0F: ("mbc3", False),
    0x10: ("mbc3", True),
    0x11: ("mbc3", False),
    0x12: ("mbc3", True),
    0x13: ("mbc3", True),
    0x19: ("mbc5", False),
    0x1A: ("mbc5", True),
    0x1B: ("mbc5", True),
    0x1C: ("mbc5", False),
    0x1D: ("mbc5", True),
    0x1E: ("mbc5", True),
}
RAM_SIZES: dict[int, int] = {0x00: 0, 0x01: 0x800, 0x02: 0x2000, 0x03: 0x8000, 0x04: 0x20000, 0x05: 0x10000}
MIN_ROM_SIZE = 0x8000


@dataclass(frozen=True)
class CartridgeHeader:
    """The fields of a cartridge header (0x0100-0x014F) this emulator uses."""

    title: str
    cartridge_type: int
    mapper: MapperKind
    rom_banks: int
    ram_size: int
    header_checksum: int

    @property
    def mapper_id(self) -> int:
        """Numeric mapper id used by the kernels (0, 1, 3 or 5)."""
        return MAPPER_IDS[self.mapper]


def parse_header(rom: bytes, source: str = "<bytes>") -> CartridgeHeader:
    """Validate and parse a ROM image's header; raises a RomError subclass naming the problem."""
    if len(rom) < MIN_ROM_SIZE:
        raise RomFileError(f"{source}: {len(rom)} bytes is shorter than the 32 KiB minimum ROM size")
    expected = header_checksum(rom)
    if rom[0x14D] != expected:
        raise HeaderChecksumError(
            f"{source}: header checksum byte 0x014D is {rom[0x14D]:#04x} but the header bytes sum to "
            f"{expected:#04x}; the file is corrupt or not a Game Boy ROM"
        )
    cartridge_type = rom[0x147]
    if cartridge_type not in CARTRIDGE_TYPES:
        supported = ", ".join(f"{t:#04x}" for t in sorted(CARTRIDGE_TYPES))
        raise UnsupportedCartridgeError(
            f"{source}: cartridge type {cartridge_type:#04x} is not supported (supported: {supported})"
        )
    mapper, has_ram = CARTRIDGE_TYPES[cartridge_type]
    if rom[0x148] > 0x08:
        raise RomFileError(f"{source}: ROM size code {rom[0x148]:#04x} at 0x0148 is invalid (0x00-0x08)")
    rom_banks = 2 << rom[0x148]
    declared = rom_banks * 0x4000
    if len(rom) != declared:  # a cartridge's ROM chips hold exactly what its header declares
        problem = "truncated" if len(rom) < declared else "padded or overdumped"
        raise RomFileError(
            f"{source}: header byte 0x0148 declares {rom_banks} banks = {declared} bytes ({rom_banks * 16} KiB) "
            f"but the file has {len(rom)} bytes ({problem}, or not this cartridge's image)"
        )
    if rom[0x149] not in RAM_SIZES:
        raise RomFileError(f"{source}: RAM size code {rom[0x149]:#04x} at 0x0149 is invalid (0x00-0x05)")
    ram_size = RAM_SIZES[rom[0x149]] if has_ram else 0
    if mapper == "mbc3" and ram_size == 0 and cartridge_type in (0x10, 0x12, 0x13):
        ram_size = 0x8000
    title = rom[0x134:0x144].split(b"\x00", 1)[0].decode("ascii", errors="replace")
    return CartridgeHeader(title, cartridge_type, mapper, rom_banks, ram_size, rom[0x14D])


def load_rom(path: str | Path) -> tuple[bytes, CartridgeHeader]:
    """Read a ROM file and validate its header; returns (image, header)."""
    path = Path(path)
    if not path.is_file():
        raise RomFileError(f"ROM file {str(path)!r} does not exist or is not a file")
    rom = path.read_bytes()
    return rom, parse_header(rom, source=str(path))
