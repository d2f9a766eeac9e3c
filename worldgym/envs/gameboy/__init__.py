"""Vectorized Game Boy emulator in NVIDIA Warp (SM83 CPU, PPU, MBC1/3/5) and the GameBoy-v0 envs.

Heavy modules (Warp kernels, the env) load lazily, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GameBoyEmulator": "worldgym.envs.gameboy.emulator",
    "compile_kernels": "worldgym.envs.gameboy.emulator",
    "set_kernel_cache_dir": "worldgym.envs.gameboy.emulator",
    "GameBoyEnv": "worldgym.envs.gameboy.single_env",
    "GameBoyVecEnv": "worldgym.envs.gameboy.vector_env",
    "GameBoyEnvConfig": "worldgym.envs.gameboy.vector_env",
    "build_rom": "worldgym.envs.gameboy.rom_builder",
    "assemble": "worldgym.envs.gameboy.rom_builder",
    "parse_header": "worldgym.envs.gameboy.cartridge",
    "load_rom": "worldgym.envs.gameboy.cartridge",
    "CartridgeHeader": "worldgym.envs.gameboy.cartridge",
    "SpriteGoalTask": "worldgym.envs.gameboy.tasks",
    "StandingStillTask": "worldgym.envs.gameboy.tasks",
    "ExitOakTask": "worldgym.envs.gameboy.tasks",
}
__all__ = [
    "CartridgeHeader",
    "ExitOakTask",
    "GameBoyEmulator",
    "GameBoyEnv",
    "GameBoyEnvConfig",
    "GameBoyVecEnv",
    "SpriteGoalTask",
    "StandingStillTask",
    "assemble",
    "build_rom",
    "compile_kernels",
    "load_rom",
    "parse_header",
    "set_kernel_cache_dir",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
