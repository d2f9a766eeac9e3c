"""ROM builder and cartridge header: assembly, logo, checksums, and typed errors for bad ROMs."""

from __future__ import annotations

import re

import pytest

from worldgym.envs.gameboy.cartridge import load_rom, parse_header
from worldgym.envs.gameboy.errors import (
    AssemblyError,
    HeaderChecksumError,
    RomFileError,
    UnsupportedCartridgeError,
)
from worldgym.envs.gameboy.isa import BASE_LENGTHS, BASE_TEMPLATES, CB_TEMPLATES
from worldgym.envs.gameboy.rom_builder import (
    NINTENDO_LOGO,
    assemble,
    build_rom,
    global_checksum,
    header_checksum,
)

SIMPLE = "main:\n    ld a, $12\n.idle:\n    jr .idle\n"


def test_build_rom_writes_entry_logo_header_and_checksums() -> None:
    rom = build_rom(SIMPLE, title="HELLO", cartridge_type=0x01, rom_banks=4, ram_size_code=0x00)
    assert len(rom) == 4 * 0x4000
    assert rom[0x100:0x104] == bytes([0x00, 0xC3, 0x50, 0x01])
    assert rom[0x104:0x134] == NINTENDO_LOGO
    assert rom[0x134:0x139] == b"HELLO"
    assert rom[0x147] == 0x01 and rom[0x148] == 0x01
    assert rom[0x14D] == header_checksum(rom)
    assert int.from_bytes(rom[0x14E:0x150], "big") == global_checksum(rom)
    header = parse_header(rom)
    assert (header.title, header.mapper, header.rom_banks) == ("HELLO", "mbc1", 4)


def test_logo_matches_the_boot_rom_check_bytes() -> None:
    assert len(NINTENDO_LOGO) == 48
    assert NINTENDO_LOGO[:4] == bytes([0xCE, 0xED, 0x66, 0x66]) and NINTENDO_LOGO[-2:] == bytes([0x33, 0x3E])


@pytest.mark.parametrize("opcode", range(256))
def test_every_base_opcode_assembles_from_its_template(opcode: int) -> None:
    template = BASE_TEMPLATES[opcode]
    if template.startswith(("ILLEGAL", "PREFIX")):
        return
    text = template.replace("(a16)", "($C123)").replace("(a8)", "($FF85)").replace("n16", "$1234")
    text = text.replace("SP+e8", "SP+5").replace("SP,e8", "SP,5").replace("n8", "$42").replace("e8", "main")
    text = re.sub(r"RST (\w\w)H", r"RST $\1", text).replace(",a16", ",$4567").replace(" a16", " $4567")
    image, _ = assemble(f"main:\n    {text}\n")
    assert image[0x150] == opcode
    assert len(image.rstrip(b"\x00")) - 0x150 <= BASE_LENGTHS[opcode]


def test_cb_opcodes_and_relative_jumps_encode() -> None:
    image, symbols = assemble("main:\n    bit 7, (hl)\n    swap a\nback:\n    jr back\n    jr nz, main\n")
    assert image[0x150:0x154] == bytes([0xCB, 0x7E, 0xCB, 0x37])
    assert image[0x154:0x156] == bytes([0x18, 0xFE])
    assert image[0x156:0x158] == bytes([0x20, (0x150 - 0x158) & 0xFF])
    assert CB_TEMPLATES[0x37] == "SWAP A" and symbols["back"] == 0x154


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("main:\n    frob a\n", "unknown instruction"),
        ("main:\n    jp nowhere\n", "unknown symbol 'nowhere'"),
        ("main:\n    ld a, 300\n", "out of range"),
        (".org $0120\n    nop\n", "overlaps the cartridge header"),
        ("main:\n    jr far\n    ds 200\nfar:\n    nop\n", "relative offset"),
    ],
)
def test_assembly_errors_name_the_line(source: str, message: str) -> None:
    with pytest.raises(AssemblyError, match=re.escape(message)):
        build_rom(source)


def test_missing_and_short_files_are_rejected(tmp_path) -> None:
    with pytest.raises(RomFileError, match="does not exist"):
        load_rom(tmp_path / "absent.gb")
    short = tmp_path / "short.gb"
    short.write_bytes(b"\x00" * 0x200)
    with pytest.raises(RomFileError, match="shorter than the 32 KiB"):
        load_rom(short)


def test_bad_header_checksum_is_rejected() -> None:
    rom = bytearray(build_rom(SIMPLE))
    rom[0x134] ^= 0xFF
    with pytest.raises(HeaderChecksumError, match="header checksum byte 0x014D"):
        parse_header(bytes(rom))


def test_unsupported_cartridge_type_is_rejected() -> None:
    with pytest.raises(UnsupportedCartridgeError, match="cartridge type 0x22 is not supported"):
        parse_header(build_rom(SIMPLE, cartridge_type=0x22))


def test_truncated_banks_are_rejected() -> None:
    rom = build_rom(SIMPLE, cartridge_type=0x01, rom_banks=8)
    with pytest.raises(RomFileError, match="declares 8 banks"):
        parse_header(rom[: 4 * 0x4000])


@pytest.mark.parametrize(("size", "problem"), [(40_000, "padded or overdumped"), (0x10000, "padded or overdumped"),
                                                 (0x8000 - 1, "shorter than the 32 KiB")])
def test_a_file_larger_or_smaller_than_its_header_declares_is_rejected(tmp_path, size: int, problem: str) -> None:
    rom = build_rom(SIMPLE)  # a 32 KiB header (2 banks)
    image = (rom + bytes(size))[:size]
    with pytest.raises(RomFileError, match=problem) as raised:
        parse_header(image)
    if size > len(rom):  # both sizes are named
        assert f"declares 2 banks = 32768 bytes (32 KiB) but the file has {size} bytes" in str(raised.value)
        (tmp_path / "padded.gb").write_bytes(image)
        with pytest.raises(RomFileError, match="padded.gb: header byte 0x0148 declares 2 banks"):
            load_rom(tmp_path / "padded.gb")


def test_build_rom_validates_arguments() -> None:
    with pytest.raises(ValueError, match="rom_banks must be a power of two"):
        build_rom(SIMPLE, rom_banks=3)
    with pytest.raises(ValueError, match="title must be at most 15"):
        build_rom(SIMPLE, title="X" * 16)
