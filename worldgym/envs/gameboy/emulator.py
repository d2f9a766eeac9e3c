"""Host side of the batched emulator: allocates per-emulator Warp arrays, launches kernels, saves and restores state."""

from __future__ import annotations

import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from worldgym.config import check_positive_int
from worldgym.envs.gameboy import layout as L
from worldgym.envs.gameboy.cartridge import CartridgeHeader, load_rom, parse_header
from worldgym.envs.gameboy.errors import StateError
from worldgym.envs.gameboy.isa import BASE_CYCLES, BASE_LENGTHS

STATE_FIELDS = ("st", "mem", "cram", "cycles", "screen", "serial")
STATE_VERSION = 1
CACHE_ENV_VAR = "WORLDGYM_WARP_CACHE"
_ENV_CACHE_APPLIED = False


def set_kernel_cache_dir(path: str | os.PathLike[str]) -> Path:
    """Point Warp's kernel cache at ``path`` (works before or after ``wp.init()``); returns the directory."""
    import warp as wp

    path = Path(path).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    wp.config.kernel_cache_dir = str(path)
    build = getattr(wp, "build", None)
    init_cache = getattr(build, "init_kernel_cache", None)
    if init_cache is None:
        from warp._src import build as private_build  # Warp >= 1.10 keeps it here

        init_cache = private_build.init_kernel_cache
    init_cache(str(path))
    return path


def _warp():
    """Import Warp and the kernel module once, honouring ``WORLDGYM_WARP_CACHE`` for the cache directory."""
    import warp as wp

    global _ENV_CACHE_APPLIED
    if os.environ.get(CACHE_ENV_VAR) and not _ENV_CACHE_APPLIED:
        set_kernel_cache_dir(os.environ[CACHE_ENV_VAR])
        _ENV_CACHE_APPLIED = True  # later explicit set_kernel_cache_dir calls win
    wp.config.quiet = True
    wp.init()
    from worldgym.envs.gameboy import core

    return wp, core  # core imports the other kernel modules (machine, memory, cpu, timers, ppu)


@dataclass(frozen=True)
class CompileReport:
    """How long loading the kernel module took and whether it came from the cache."""

    seconds: float
    device: str


def compile_kernels(device: str = "cpu") -> CompileReport:
    """Build (or load from cache) the emulator kernels for ``device``; returns the time it took."""
    wp, core = _warp()
    start = time.perf_counter()
    wp.load_module(core, device=device)
    return CompileReport(time.perf_counter() - start, device)


class GameBoyEmulator:
    """N Game Boy emulators sharing one ROM; ``run_frames`` advances all (or a masked subset) in one launch.

    Args:
        rom: ROM image bytes or a path to a ROM file (the header is validated).
        num_envs: Number of emulators (>= 1).
        device: Warp device, e.g. ``"cpu"`` or ``"cuda:0"``.
    """

    def __init__(self, rom: bytes | str | os.PathLike[str], num_envs: int = 1, device: str = "cpu") -> None:
        check_positive_int("num_envs", num_envs)
        if isinstance(rom, (bytes, bytearray)):
            image, header = bytes(rom), parse_header(bytes(rom))
        else:
            image, header = load_rom(rom)
        self.header: CartridgeHeader = header
        self.rom_crc32 = zlib.crc32(image)
        self.num_envs = num_envs
        self.device = device
        self._wp, self._core = _warp()
        wp = self._wp
        rom_array = np.zeros(header.rom_banks * 0x4000, dtype=np.uint8)
        rom_array[: min(len(image), rom_array.size)] = np.frombuffer(image, dtype=np.uint8)[: rom_array.size]
        from worldgym.envs.gameboy.machine import Machines

        m = Machines()
        m.rom = wp.array(rom_array, dtype=wp.uint8, device=device)
        m.st = wp.zeros((num_envs, L.STATE_COLUMNS), dtype=wp.int32, device=device)
        m.mem = wp.zeros((num_envs, L.MEM_SIZE), dtype=wp.uint8, device=device)
        m.cram = wp.zeros((num_envs, max(header.ram_size, 1)), dtype=wp.uint8, device=device)
        m.cycles = wp.zeros(num_envs, dtype=wp.int64, device=device)
        m.screen = wp.zeros((num_envs, L.SCREEN_H, L.SCREEN_W), dtype=wp.uint8, device=device)
        m.serial = wp.zeros((num_envs, L.SERIAL_BUFFER), dtype=wp.uint8, device=device)
        m.cycle_table = wp.array(np.frombuffer(BASE_CYCLES, dtype=np.uint8).astype(np.int32), device=device)
        m.length_table = wp.array(np.array(BASE_LENGTHS, dtype=np.int32), device=device)
        self.machines = m
        self._no_buttons = wp.zeros(num_envs, dtype=wp.int32, device=device)
        self._frame_counts = wp.zeros((num_envs, 1), dtype=wp.int32, device=device)  # per-env frames to run
        self._frame_counts_host = np.zeros(num_envs, dtype=np.int32)  # what _frame_counts holds
        self.power_on()

    # ------------------------------------------------------------------------------------------ state

    def power_on(self) -> None:
        """Put every emulator in the DMG post-boot state at 0x0100 (no boot ROM is run)."""
        st = np.zeros((self.num_envs, L.STATE_COLUMNS), dtype=np.int32)
        for column, value in L.POST_BOOT_REGISTERS.items():
            st[:, column] = value
        st[:, L.ROM_BANK] = 1
        st[:, L.MAPPER] = self.header.mapper_id
        st[:, L.ROM_BANKS] = self.header.rom_banks
        st[:, L.RAM_SIZE] = self.header.ram_size
        st[:, L.RAM_ENABLE] = 1 if self.header.mapper == "rom" else 0
        mem = np.zeros((self.num_envs, L.MEM_SIZE), dtype=np.uint8)
        for addr, value in L.POST_BOOT_IO.items():
            mem[:, addr - L.MEM_BASE] = value
        self.load_state(
            {
                "st": st,
                "mem": mem,
                "cram": np.zeros(self.machines.cram.shape, dtype=np.uint8),
                "cycles": np.zeros(self.num_envs, dtype=np.int64),
                "screen": np.zeros((self.num_envs, L.SCREEN_H, L.SCREEN_W), dtype=np.uint8),
                "serial": np.zeros((self.num_envs, L.SERIAL_BUFFER), dtype=np.uint8),
            }
        )

    def save_state(self) -> dict[str, np.ndarray]:
        """Copy the full state of every emulator to host numpy arrays (see ``load_state``)."""
        state = {name: getattr(self.machines, name).numpy().copy() for name in STATE_FIELDS}
        state["version"] = np.array([STATE_VERSION], dtype=np.int32)
        state["rom_crc32"] = np.array([self.rom_crc32], dtype=np.int64)
        return state

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore a state from ``save_state``; raises StateError (and changes nothing) if it does not fit."""
        for name in STATE_FIELDS:
            target = getattr(self.machines, name)
            if name not in state:
                raise StateError(f"saved state lacks the {name!r} array")
            if tuple(state[name].shape) != tuple(target.shape):
                raise StateError(
                    f"saved {name!r} has shape {tuple(state[name].shape)} but this emulator needs {tuple(target.shape)}"
                    " (different num_envs or cartridge RAM size)"
                )
        if "rom_crc32" in state and int(state["rom_crc32"][0]) != self.rom_crc32:
            raise StateError("saved state belongs to a different ROM (CRC-32 of the ROM image differs)")
        for name in STATE_FIELDS:
            target = getattr(self.machines, name)
            target.assign(np.ascontiguousarray(state[name], dtype=target.numpy().dtype))

    def snapshot(self, env: int = 0) -> dict[str, np.ndarray]:
        """The state of one emulator (rows of every array), usable with ``restore``."""
        snapshot = {name: getattr(self.machines, name).numpy()[env].copy() for name in STATE_FIELDS}
        snapshot["rom_crc32"] = np.array([self.rom_crc32], dtype=np.int64)
        return snapshot

    def restore(self, snapshot: dict[str, np.ndarray], env_mask: np.ndarray | None = None) -> None:
        """Copy a one-emulator snapshot into the emulators where ``env_mask`` is True (all when None)."""
        import torch

        mask = np.ones(self.num_envs, dtype=bool) if env_mask is None else np.asarray(env_mask, dtype=bool)
        if mask.shape != (self.num_envs,):
            raise ValueError(f"env_mask must have shape ({self.num_envs},), got {mask.shape}")
        missing = [name for name in STATE_FIELDS if name not in snapshot]
        if missing:
            raise StateError(f"snapshot lacks the arrays {missing}")
        if "rom_crc32" in snapshot and int(snapshot["rom_crc32"][0]) != self.rom_crc32:
            raise StateError("snapshot belongs to a different ROM (CRC-32 of the ROM image differs)")
        if not mask.any():
            return
        index = torch.as_tensor(np.flatnonzero(mask), device=self.torch_device)
        for name in STATE_FIELDS:
            target = self._wp.to_torch(getattr(self.machines, name))
            row = torch.as_tensor(snapshot[name], device=self.torch_device).to(target.dtype)
            if tuple(row.shape) != tuple(target.shape[1:]):
                raise StateError(
                    f"snapshot {name!r} has shape {tuple(row.shape)}, expected {tuple(target.shape[1:])}"
                )
            target.index_copy_(0, index, row.unsqueeze(0).expand(len(index), *row.shape).contiguous())

    @property
    def memory_tensor(self):
        """Zero-copy torch view (N, 0x8000) of 0x8000-0xFFFF on the emulator's device."""
        return self._wp.to_torch(self.machines.mem)

    @property
    def torch_device(self) -> str:
        """The torch device string matching the Warp device."""
        return "cpu" if self.device == "cpu" else str(self.device)

    # ------------------------------------------------------------------------------------------ running

    def run_frames(
        self,
        frames: int,
        buttons: np.ndarray | None = None,
        press_frames: int = 0,
        render: bool = True,
        break_pc: int = -1,
        max_cycles: int = 0,
        env_mask: np.ndarray | None = None,
    ) -> None:
        """Advance the emulators by ``frames`` VBlanks in one kernel launch.

        ``buttons`` (int32 bitmask per env, see ``layout.BUTTON_BITS``) is held for the first ``press_frames``
        frames. With ``render`` the last frame is drawn into ``screen``. ``break_pc``/``max_cycles`` stop early.
        ``env_mask`` (bool per env, None = all) picks the emulators to run; the others are left untouched.
        """
        wp = self._wp
        counts = np.full(self.num_envs, int(frames), dtype=np.int32)
        if env_mask is not None:
            mask = np.asarray(env_mask, dtype=bool)
            if mask.shape != (self.num_envs,):
                raise ValueError(f"env_mask must have shape ({self.num_envs},), got {mask.shape}")
            counts[~mask] = 0
        if not np.array_equal(counts, self._frame_counts_host):  # copy to the device only when it changes
            self._frame_counts.assign(counts.reshape(self.num_envs, 1))
            self._frame_counts_host = counts
        if buttons is None:
            button_array = self._no_buttons
        elif isinstance(buttons, wp.array):
            button_array = buttons
        else:
            button_array = wp.array(np.asarray(buttons, dtype=np.int32), dtype=wp.int32, device=self.device)
        button_array = button_array.reshape((self.num_envs, 1))  # a view: the kernel takes a 2D array
        wp.launch(
            self._core.run_frames,
            dim=self.num_envs,
            inputs=[self.machines, button_array, self._frame_counts, int(press_frames), int(render),
                    int(break_pc), int(max_cycles)],
            device=self.device,
        )  # fmt: skip

    # ------------------------------------------------------------------------------------------ inspection

    def registers(self, env: int = 0) -> dict[str, int]:
        """CPU registers of one emulator: A F B C D E H L SP PC IME HALTED."""
        st = self.machines.st.numpy()[env]
        names = {"A": L.REG_A, "F": L.REG_F, "B": L.REG_B, "C": L.REG_C, "D": L.REG_D, "E": L.REG_E,
                 "H": L.REG_H, "L": L.REG_L, "SP": L.SP, "PC": L.PC, "IME": L.IME, "HALTED": L.HALTED}  # fmt: skip
        return {name: int(st[column]) for name, column in names.items()}

    def memory(self, env: int = 0) -> np.ndarray:
        """Raw bytes 0x8000-0xFFFF of one emulator (VRAM, WRAM, OAM, IO, HRAM, IE) as a copy."""
        return self.machines.mem.numpy()[env].copy()

    def read(self, addr: int, env: int = 0) -> int:
        """One byte of the 0x8000-0xFFFF region as the CPU would read it (JOYP excepted: stored select bits)."""
        if not L.MEM_BASE <= addr <= 0xFFFF:
            raise ValueError(f"addr must be in 0x8000-0xFFFF, got {addr:#x}")
        if addr == 0xFF04:
            return (int(self.machines.st.numpy()[env, L.DIV_COUNTER]) >> 8) & 0xFF
        return int(self.machines.mem.numpy()[env, addr - L.MEM_BASE]) | L.IO_READ_MASKS.get(addr, 0)

    def cycles(self) -> np.ndarray:
        """T-cycles executed by each emulator since power-on."""
        return self.machines.cycles.numpy().copy()

    def screens(self) -> np.ndarray:
        """The last rendered frame of every emulator: uint8 shades 0 (white) to 3 (black), shape (N, 144, 160)."""
        return self.machines.screen.numpy().copy()

    def serial_output(self, env: int = 0) -> bytes:
        """Bytes the program sent over the serial port (the last 256)."""
        count = int(self.machines.st.numpy()[env, L.SERIAL_COUNT])
        buffer = self.machines.serial.numpy()[env]
        if count <= L.SERIAL_BUFFER:
            return bytes(buffer[:count])
        start = count % L.SERIAL_BUFFER
        return bytes(np.concatenate([buffer[start:], buffer[:start]]))
