"""Play GameBoy-v0 with a random or a greedy (RAM-reading) policy; logs one JSONL line per step.

python examples/play_gameboy.py                                   # homebrew sprite-to-goal, 16 envs
python examples/play_gameboy.py --policy random --num-envs 64
python examples/play_gameboy.py --rom-path red.gb --task exit_oak --policy random   # your own ROM
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
from tqdm import tqdm

import worldgym  # noqa: F401  (registers GameBoy-v0)
from worldgym.envs.gameboy import homebrew
from worldgym.envs.gameboy.layout import MEM_BASE
from worldgym.envs.gameboy.tasks import ACTIONS


@dataclass
class Args:
    """Command-line settings."""

    num_envs: int = 16
    steps: int = 256
    policy: str = "greedy"
    task: str = "sprite_goal"
    rom_path: str | None = None
    seed: int = 0
    log: Path = Path("runs/play_gameboy.jsonl")


def greedy_actions(memory: np.ndarray) -> np.ndarray:
    """Move the block toward the ring along the axis with the larger gap (reads the task's RAM bytes)."""

    def byte(addr: int) -> np.ndarray:
        return memory[:, addr - MEM_BASE].astype(np.int32)

    dy = byte(homebrew.GOAL_Y) - byte(homebrew.PLAYER_Y)
    dx = byte(homebrew.GOAL_X) - byte(homebrew.PLAYER_X)
    vertical = np.where(dy > 0, ACTIONS.index("down"), ACTIONS.index("up"))
    horizontal = np.where(dx > 0, ACTIONS.index("right"), ACTIONS.index("left"))
    return np.where(np.abs(dy) >= np.abs(dx), vertical, horizontal)


def main(args: Args) -> dict:
    settings = (
        {"task": args.task} if args.rom_path is None else {"task": args.task, "rom_path": args.rom_path}
    )
    env = gym.make_vec("GameBoy-v0", num_envs=args.num_envs, **settings)
    rng = np.random.default_rng(args.seed)
    env.reset(seed=args.seed)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    returns, episode_returns, successes = np.zeros(args.num_envs), [], 0
    with args.log.open("w") as log:
        for step in tqdm(range(args.steps), desc=f"{args.policy} policy"):
            if args.policy == "greedy" and args.task == "sprite_goal":
                actions = greedy_actions(env.emulator.machines.mem.numpy())
            else:
                actions = rng.integers(0, len(ACTIONS), args.num_envs)
            _, reward, terminated, truncated, _ = env.step(actions)
            returns += reward
            for i in np.flatnonzero(terminated | truncated):
                episode_returns.append(float(returns[i]))
                successes += int(terminated[i])
                returns[i] = 0.0
            log.write(json.dumps({"step": step, "charts/reward_mean": float(reward.mean()),
                                  "charts/episodes": len(episode_returns), "charts/successes": successes}) + "\n")  # fmt: skip
    summary = {"episodes": len(episode_returns), "successes": successes,
               "mean_return": float(np.mean(episode_returns)) if episode_returns else None}  # fmt: skip
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for name, default in vars(Args()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default) if default is not None else str,
                            default=default)  # fmt: skip
    main(Args(**vars(parser.parse_args())))
