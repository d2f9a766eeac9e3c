"""Typed errors for the Game Boy emulator: bad ROM files, headers, cartridge types, assembly and saved states."""

from __future__ import annotations

from worldgym.errors import WorldgymError


class GameBoyError(WorldgymError):
    """Base class of every Game Boy emulator error."""


class RomError(GameBoyError, ValueError):
    """A ROM image cannot be used (missing, truncated, corrupt or unsupported)."""


class RomFileError(RomError):
    """The ROM file is missing, unreadable or shorter than a cartridge header."""


class HeaderChecksumError(RomError):
    """The header checksum at 0x014D does not match the header bytes 0x0134-0x014C."""


class UnsupportedCartridgeError(RomError):
    """The cartridge type byte (0x0147) names a mapper this emulator does not implement."""


class AssemblyError(GameBoyError, ValueError):
    """A line of SM83 assembly could not be assembled (the message names the line)."""


class StateError(GameBoyError, ValueError):
    """A saved emulator state does not fit this emulator (wrong shape, ROM or version)."""
