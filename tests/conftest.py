"""Fixtures shared by every test folder: damaging a saved checkpoint the way a crash or a bad disk would."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from worldgym.checkpointing import MANIFEST

DAMAGES = ("truncated", "flipped_byte", "missing", "wrong_version")


def damage_checkpoint(root: Path, name: str, damage: str) -> str:
    """Damage file ``name`` of the checkpoint in ``root``; return a regex its ``CheckpointError`` must match.

    ``truncated`` cuts the file in half, ``flipped_byte`` flips one bit of its last byte (inside the tensor
    data of a safetensors file, which then still parses), ``missing`` deletes it, ``wrong_version`` rewrites
    the manifest's format version to 1 (``name`` is ignored).
    """
    file = root / name
    if damage == "truncated":
        data = file.read_bytes()
        file.write_bytes(data[: len(data) // 2])
        return re.escape(f"{file} is corrupt")
    if damage == "flipped_byte":
        data = bytearray(file.read_bytes())
        data[-1] ^= 0x01
        file.write_bytes(bytes(data))
        return re.escape(f"{file} is corrupt")
    if damage == "missing":
        file.unlink()
        return re.escape(f"{root} is incomplete: missing ['{name}']")
    if damage == "wrong_version":
        manifest = json.loads((root / MANIFEST).read_text())
        (root / MANIFEST).write_text(json.dumps({**manifest, "format_version": 1}))
        return re.escape(f"{root / MANIFEST}: checkpoint format 1, this worldgym reads format 2 only")
    raise ValueError(f"unknown damage {damage!r}: use one of {DAMAGES}")


@pytest.fixture
def damage() -> Callable[[Path, str, str], str]:
    """:func:`damage_checkpoint`."""
    return damage_checkpoint
