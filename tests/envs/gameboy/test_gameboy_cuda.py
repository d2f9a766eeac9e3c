"""The same kernels on CUDA give bit-identical results to CPU (marked gpu: skipped without a CUDA device)."""

from __future__ import annotations

import numpy as np
import pytest
from gameboy_programs import random_instruction_program

from worldgym.envs.gameboy.emulator import GameBoyEmulator
from worldgym.envs.gameboy.lockstep import SYNC_PROLOGUE
from worldgym.envs.gameboy.rom_builder import build_rom
from worldgym.envs.gameboy.vector_env import GameBoyVecEnv

pytestmark = pytest.mark.gpu(warp=True)


def test_cuda_emulator_matches_cpu_state() -> None:
    body, _ = random_instruction_program(seed=3, count=200)
    rom = build_rom(SYNC_PROLOGUE + body)
    states = []
    for device in ("cpu", "cuda:0"):
        emu = GameBoyEmulator(rom, num_envs=8, device=device)
        emu.run_frames(30, buttons=np.arange(8, dtype=np.int32), press_frames=10)
        states.append(emu.save_state())
    for name in ("st", "mem", "cycles", "screen"):
        assert np.array_equal(states[0][name], states[1][name]), name


def test_cuda_env_rollout_matches_cpu() -> None:
    rollouts = []
    for device in ("cpu", "cuda:0"):
        env = GameBoyVecEnv(num_envs=4, device=device)
        obs, _ = env.reset(seed=0)
        frames = [obs]
        for step in range(10):
            frames.append(env.step(np.full(4, step % 9))[0])
        assert env.observation_tensor.device.type == ("cpu" if device == "cpu" else "cuda")
        rollouts.append(np.stack(frames))
    assert np.array_equal(rollouts[0], rollouts[1])
