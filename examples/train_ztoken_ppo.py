"""Train the Z-token PPO agent on ZTokenDigits-v1: supervised warm start, then PPO; CPU, a few minutes.

    python examples/train_ztoken_ppo.py                          # tiny Qwen3 from config, CPU
    python examples/train_ztoken_ppo.py --resume runs/ztoken_ppo --ppo.num-steps 20   # continue, further
    python examples/train_ztoken_ppo.py --ppo.model.pretrained Qwen/Qwen3-0.6B --ppo.device cuda   # any HF LM
    python examples/train_ztoken_ppo.py --help                   # every setting, with its help

Writes ``<output-dir>/config.json`` (the resolved settings), ``warm_start/`` (checkpoint), ``warm_start.jsonl``,
``ppo/metrics.jsonl``, ``ppo/rollouts.jsonl`` and ``ppo/checkpoint-last/``. A fresh run starts these logs afresh;
``--resume <output-dir>`` continues them (and just reports the final metrics if the run already finished).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

import worldgym  # noqa: F401  (registers ZTokenDigits-v1)
from worldgym.agents.ztoken_ppo import (
    ZTokenPPOConfig,
    ZTokenPPOTrainer,
    ZTokenWarmStartConfig,
    build_policy,
    save_checkpoint,
    warm_start,
)
from worldgym.cli import parse_run, save_run_config
from worldgym.config import check_field, check_positive_int
from worldgym.envs.ztoken import ZTokenVocab


@dataclass
class ZTokenRun:
    """A supervised warm start (digit heads + a scripted Z policy), then PPO from it.

    Attributes:
        ppo: the PPO settings (env_kwargs set the difficulty: operand_digits, num_z_tokens, max_new_tokens).
            Its output_dir and init_checkpoint are set from output_dir.
        warm_start: the supervised warm start (its z_max must stay below env_kwargs' max_new_tokens).
        output_dir: the run folder: warm_start/, warm_start.jsonl, ppo/, config.json.
        seed: seeds the model, the warm start and PPO (replaces ppo.seed, ppo.model.seed and warm_start.seed).
        threads: torch CPU threads.
    """

    ppo: ZTokenPPOConfig = field(default_factory=lambda: ZTokenPPOConfig(
        env_kwargs={"num_z_tokens": 8, "max_new_tokens": 8, "operand_digits": 2}, num_steps=10,
        episodes_per_rollout=512, eval_episodes=256, learning_rate=3e-4))
    warm_start: ZTokenWarmStartConfig = field(default_factory=lambda: ZTokenWarmStartConfig(steps=1000, z_max=4))
    output_dir: str = "runs/ztoken_ppo"
    seed: int = 0
    threads: int = 1

    def __post_init__(self) -> None:
        check_field(type(self.seed) is int and self.seed >= 0, "seed", self.seed, "use an integer >= 0")
        check_positive_int("threads", self.threads)

    def resolved(self) -> tuple[ZTokenPPOConfig, ZTokenWarmStartConfig]:
        """The PPO and warm-start settings with ``output_dir`` and ``seed`` applied."""
        out = Path(self.output_dir)
        ppo = replace(self.ppo, model=replace(self.ppo.model, seed=self.seed), seed=self.seed,
                      output_dir=str(out / "ppo"), init_checkpoint=str(out / "warm_start"))
        limit = ppo.env_kwargs.get("max_new_tokens", 8)
        check_field(self.warm_start.z_max < limit, "warm_start.z_max", self.warm_start.z_max,
                    f"use < max_new_tokens={limit} (the answer needs a token of its own)")
        return ppo, replace(self.warm_start, seed=self.seed)


PRESETS: dict[str, tuple[str, ZTokenRun]] = {
    "tiny": ("Tiny Qwen3 from config, 2-digit operands, 1000 warm-start steps, 10 PPO rollouts.", ZTokenRun()),
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parsed = parse_run(PRESETS, argv, description=__doc__)
    run = parsed.run
    torch.set_num_threads(run.threads)
    out = Path(run.output_dir)
    ppo_config, warm_config = run.resolved()
    save_run_config(out, parsed.preset, run)
    if parsed.resume:
        trainer = ZTokenPPOTrainer(ppo_config)  # starts from the warm start's checkpoint
        resumed = trainer.resume_latest()
        print(f"resumed from {resumed}" if resumed else "no PPO checkpoint yet: PPO starts from the warm start")
    else:
        # Phase 2/3 stand-in: supervised digit heads + scripted Z policy, saved as the checkpoint PPO loads.
        start = time.perf_counter()
        num_z_tokens = ppo_config.env_kwargs["num_z_tokens"]
        policy, encoder = build_policy(ppo_config.model, ZTokenVocab(num_z_tokens))
        policy.to(ppo_config.device)
        warm_start(policy, encoder, ppo_config.env_id, ppo_config.env_kwargs, warm_config, out / "warm_start.jsonl")
        save_checkpoint(out / "warm_start", policy, encoder, num_z_tokens)
        trainer = ZTokenPPOTrainer(ppo_config)
        warm_metrics = trainer.evaluate()
        print(
            f"warm start ({time.perf_counter() - start:.0f}s): held-out exact match "
            f"{warm_metrics['eval/exact_match']:.3f}, "
            f"digit accuracy {warm_metrics['eval/digit_accuracy']:.3f}"
        )

    if trainer.rollout_index >= ppo_config.num_steps:
        print(
            f"run already finished at rollout {trainer.rollout_index} of {ppo_config.num_steps}: "
            "raise --ppo.num-steps to train further"
        )
    start = time.perf_counter()
    final = trainer.train()[-1]
    trainer.close()
    summary = {key: round(value, 4) for key, value in final.items() if key.startswith("eval/")}
    print(f"PPO ({time.perf_counter() - start:.0f}s, {final['env_steps']} env steps): {json.dumps(summary)}")
    return final


if __name__ == "__main__":
    main()
