"""Game Boy throughput: the Warp emulator at N in {1, 16, 64, 256} beside one PyBoy instance, same ROM and actions.

Prints frames/s and env-steps/s (24 frames per step, button held 8 frames), their ratio to PyBoy, and the cold and
warm kernel compile times; writes JSON and a PNG of throughput vs N to benchmarks/results/.

    python benchmarks/gameboy_throughput.py                 # CPU, both ROMs
    python benchmarks/gameboy_throughput.py --device cuda:0 --num-envs 1 256 4096 16384
    python benchmarks/gameboy_throughput.py --quick         # N = 1, 4, one short round, no compile timing
    python benchmarks/gameboy_throughput.py --device cuda:0 --no-pyboy   # Warp alone (no PyBoy installed)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from worldgym.envs.gameboy import layout as L
from worldgym.envs.gameboy.emulator import GameBoyEmulator
from worldgym.envs.gameboy.homebrew import sprite_goal_rom
from worldgym.envs.gameboy.rom_builder import build_rom
from worldgym.envs.gameboy.tasks import ACTIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import portable, results_dir, results_parser, write_json

# A CPU-bound program that never halts: ALU, memory and CB ops in a loop with the LCD on.
BUSY_SOURCE = """
main:
    ld sp, $DFF0
    ld hl, $C000
loop:
    ld a, (hl)
    add a, l
    daa
    ld (hl+), a
    swap a
    rl b
    push bc
    pop de
    ld a, h
    cp $D0
    jr c, loop
    ld hl, $C000
    jr loop
"""
PYBOY_BUTTONS = {"a": "a", "b": "b", "start": "start", "select": "select", "up": "up", "down": "down",
                 "left": "left", "right": "right"}  # fmt: skip


def action_schedule(seed: int, steps: int) -> np.ndarray:
    """Seeded action indices shared by both emulators."""
    return np.random.default_rng(seed).integers(0, len(ACTIONS), steps)


def bench_pyboy(rom: bytes, actions: np.ndarray, frames_per_step: int, press_frames: int,
                min_seconds: float) -> float:  # fmt: skip
    """Frames per second of one PyBoy instance stepping ``actions`` (repeated for ``min_seconds``)."""
    from pyboy import PyBoy

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.gb"
        path.write_bytes(rom)
        pyboy = PyBoy(str(path), window="null", sound_emulated=False)
        pyboy.set_emulation_speed(0)
        pyboy.tick(80, False)  # PyBoy's boot ROM
        start, frames = time.perf_counter(), 0
        while frames == 0 or time.perf_counter() - start < min_seconds:
            for action in actions:
                name = ACTIONS[int(action)]
                if name != "noop":
                    pyboy.button(PYBOY_BUTTONS[name], press_frames)
                pyboy.tick(frames_per_step, False)
            frames += len(actions) * frames_per_step
        elapsed = time.perf_counter() - start
        pyboy.stop(save=False)
    return frames / elapsed


def bench_warp(rom: bytes, num_envs: int, actions: np.ndarray, frames_per_step: int, press_frames: int,
               device: str, min_seconds: float) -> float:  # fmt: skip
    """Aggregate frames/s of ``num_envs`` Warp emulators (one launch per step, last frame rendered)."""
    import warp as wp

    emu = GameBoyEmulator(rom, num_envs=num_envs, device=device)
    emu.run_frames(10)
    masks = np.array([0] + [1 << L.BUTTON_BITS[name] for name in ACTIONS[1:]], dtype=np.int32)
    buttons = wp.zeros(num_envs, dtype=wp.int32, device=device)
    wp.synchronize_device(device)
    start, frames = time.perf_counter(), 0
    while frames == 0 or time.perf_counter() - start < min_seconds:
        for action in actions:
            buttons.fill_(int(masks[int(action)]))
            emu.run_frames(frames_per_step, buttons=buttons, press_frames=press_frames, render=True)
        wp.synchronize_device(device)
        frames += num_envs * len(actions) * frames_per_step
    return frames / (time.perf_counter() - start)


def compile_times(device: str) -> dict[str, float]:
    """Cold (empty cache) and warm kernel load times, each in a fresh process."""
    code = ("import time; t=time.perf_counter(); from worldgym.envs.gameboy.emulator import compile_kernels; "
            f"r=compile_kernels({device!r}); print(time.perf_counter()-t)")  # fmt: skip
    times = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, WORLDGYM_WARP_CACHE=cache)
        for label in ("cold_compile_s", "warm_compile_s"):
            out = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
            )
            times[label] = float(out.stdout.strip().splitlines()[-1])
    return times


def plot(results: dict, path: Path) -> None:
    """Throughput vs N, one line per ROM, with the PyBoy level as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for index, (rom_name, rows) in enumerate(results["roms"].items()):
        ns = [row["num_envs"] for row in rows["warp"]]
        ax.plot(ns, [row["frames_per_s"] for row in rows["warp"]], marker="o", color=f"C{index}",
                label=f"Warp ({rom_name})")  # fmt: skip
        if rows["pyboy_frames_per_s"] is not None:
            ax.axhline(
                rows["pyboy_frames_per_s"], linestyle="--", color=f"C{index}", label=f"PyBoy x1 ({rom_name})"
            )
    ax.set(xscale="log", yscale="log", xlabel="emulators per launch (N)", ylabel="aggregate frames/s",
           title=f"Game Boy throughput on {results['device']}")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, parents=[results_parser()]
    )
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--steps", type=int, default=20, help="env steps per measurement")
    parser.add_argument("--frames-per-step", type=int, default=24)
    parser.add_argument("--press-frames", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-pyboy", action="store_true", help="time Warp alone (ratios to PyBoy are null)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported")
    parser.add_argument(
        "--min-seconds", type=float, default=1.0, help="repeat each measurement at least this long"
    )
    args = parser.parse_args(argv)
    if args.quick:  # compile times are left out: a cold compile alone takes ~25 s
        args.num_envs, args.steps, args.rounds, args.min_seconds = [1, 4], 4, 1, 0.0

    from tqdm import tqdm

    results: dict = {
        "device": args.device,
        "cpu_count": os.cpu_count(),
        "load_average_1min_at_start": os.getloadavg()[0],  # the cores are shared: ratios side by side count
        "frames_per_step": args.frames_per_step,
        "steps": args.steps,
        "rounds": args.rounds,
        "quick": args.quick,
        **({"cold_compile_s": None, "warm_compile_s": None} if args.quick else compile_times(args.device)),
        "roms": {},
    }
    if not args.quick:
        print(f"compile: cold {results['cold_compile_s']:.1f} s, warm {results['warm_compile_s']:.2f} s")
    actions = action_schedule(args.seed, args.steps)
    roms = {"sprite_goal": sprite_goal_rom(), "busy_loop": build_rom(BUSY_SOURCE, title="BUSY")}
    for rom_name, rom in roms.items():
        # Interleave PyBoy and Warp in rounds and keep medians: the cores are shared, so load drifts.
        pyboy_runs, warp_runs = [], {n: [] for n in args.num_envs}
        for _ in tqdm(range(args.rounds), desc=rom_name):
            if not args.no_pyboy:
                pyboy_runs.append(
                    bench_pyboy(rom, actions, args.frames_per_step, args.press_frames, args.min_seconds)
                )
            for n in args.num_envs:
                warp_runs[n].append(
                    bench_warp(
                        rom,
                        n,
                        actions,
                        args.frames_per_step,
                        args.press_frames,
                        args.device,
                        args.min_seconds,
                    )
                )
        pyboy_fps = float(np.median(pyboy_runs)) if pyboy_runs else None
        rows = []
        for n in args.num_envs:
            fps = float(np.median(warp_runs[n]))
            rows.append(
                {
                    "num_envs": n,
                    "frames_per_s": fps,
                    "env_steps_per_s": fps / args.frames_per_step,
                    "ratio_to_pyboy": fps / pyboy_fps if pyboy_fps else None,
                    "frames_per_s_runs": warp_runs[n],
                }
            )
        results["roms"][rom_name] = {
            "pyboy_frames_per_s": pyboy_fps,
            "pyboy_frames_per_s_runs": pyboy_runs,
            "warp": rows,
        }
        baseline = (
            "PyBoy not timed"
            if pyboy_fps is None
            else f"PyBoy x1 {pyboy_fps:,.0f} frames/s ({pyboy_fps / args.frames_per_step:,.0f} steps/s)"
        )
        print(f"\n{rom_name}: {baseline}")
        for row in rows:
            ratio = "" if row["ratio_to_pyboy"] is None else f"  {row['ratio_to_pyboy']:.2f}x PyBoy"
            print(
                f"  N={row['num_envs']:>6}  {row['frames_per_s']:>12,.0f} frames/s  "
                f"{row['env_steps_per_s']:>10,.0f} steps/s{ratio}"
            )
    results["load_average_1min_at_end"] = os.getloadavg()[0]
    out = results_dir(args) / f"gameboy_throughput_{args.device.replace(':', '')}"
    write_json(out.with_suffix(".json"), results, indent=2)
    plot(results, out.with_suffix(".png"))
    print(f"wrote {portable(out.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
